"""The GPU check: everything the book measures on a CUDA machine, in one call that fits
one 15-minute lease, the most valuable measurements first.

    python3 -m ampbook.gpucheck --lease --out DIR [--budget-s 560] [--dry-run]
    python3 -m ampbook.gpucheck --stages ladder,compile --budget-s S --out DIR (a rerun)

Run from the repository root with the machine's own ``python3`` (no virtual environment
needed). ``--lease`` runs every stage (``STAGES``, in that order) in one process tree
under one budget; each stage runs in its own process under a hard time limit, its share
(``Stage.share_s``) sized from the last H200 lease's logs (``data/gpucheck/``) and a
measured CPU proxy (the table beside ``STAGES``; DEVELOPING.md, "The GPU check on a
lent machine"):

* ``wheels``: install the wheels carried in ``.whl/`` (``make gpu-wheels``) into the
  work folder when papermill, jupytext, ipykernel... are not importable (not in
  ``--dry-run``);
* ``env``: the environment (``ampbook.core.env``, nvidia-smi, package versions);
* ``data``: the synthetic Cityscapes sets the later stages read (``build/cache``);
* ``ladder``: chapter 7's ladder (``ampbook.bench.ladder``), fp32 with TF32 and
  amp-fp16, rungs 0 to 4, rung by rung (the two modes take turns at each rung);
* ``compile``: rung 5 (``torch.compile``), amp-fp16 then TF32; the compile cache saved
  through ``torch.compiler.save_cache_artifacts()`` as ``compile_cache.bin``;
* ``profile-cl``: the per-module GPU time of the step in channels_last with
  cudnn.benchmark (``ampbook.bench.layers``), TF32 and amp-fp16;
* ``ladder-extra``: amp-bf16 and strict fp32 at rungs 0 and 4;
* ``tests``: ``pytest -m cuda -v -rA --durations=0`` with a per-test timeout;
* the chapters and the rest: ``nb06``, ``loader`` (DataLoader images/s at 0-12
  workers), ``nb04``, ``nb05``, ``nb02``, ``nb01``, ``nb03`` (the chapters with the
  ``gpucheck`` profile through ``ampbook.build.run``), then what is already committed
  or least needed: ``profile`` (NCHW), ``ladder-rest`` (amp-bf16 and strict fp32 at
  rungs 1-3), ``nb07``.

The budget rule (``stage_timeout``): a stage may run for its share, or for more when
the shares of the stages after it still fit in what is left, and never past the
budget; a stage that ends early leaves its time to the later ones; a stage left with
less than half its share (at most 30 s) or than ``MIN_STAGE_S`` is skipped (``wheels``
and ``env`` run with whatever is left). A stage over its
time is stopped (its whole process group) and reported as cut short, and what it
measured stays: the ladder writes each cell as soon as its step, kernel/idle split and
memory are measured and again with its epochs, the training runner every epoch.
SIGTERM stops the running stage the same way, writes the report and exits 143.

The work folder (``--work``, default ``build/gpucheck-work``, emptied by ``--lease``)
outlives the call: a rerun on the warm machine (``--stages``) adds to it, the ladder
measures only the cells it lacks, and its archives hold both calls' results. The log's
last line names the stages cut or skipped and the exact command that reruns them in
the time left of the lease (``--lease-left-s``: the device time left when the call
started).

``DIR`` holds at most 8 files (5 here), each at most 16 MiB, named only with letters,
digits, ``.``, ``_``, ``-``, brought up to date after every stage:

* ``report.json``: every stage, its share, time limit, seconds, status (ok, error, cut
  short, skipped) and what it writes; ``rerun``: the command of the log's last line;
* ``gpucheck.log``: everything the stages printed;
* ``results.tar.gz``: the result JSONs, named for ``data/results/`` (``tar -xzf
  results.tar.gz -C data/results``);
* ``notebooks.tar.gz``: the executed notebooks (``ampbook.build.book --executed``);
* ``compile_cache.bin``: the compile stage's cache artifacts (put it at
  ``build/compile_cache.bin`` and carry it: the next lease's compile stage loads it);
  left out, with a line in the log saying why, when nothing was compiled or it passes
  16 MiB.

Exit status 0 when every selected stage is ok, 1 otherwise, 2 for bad arguments, 143 on
SIGTERM. ``--wheels DIR`` names another wheel folder; ``--list-wheels`` prints the wheel
list from the installed packages (``gpu-wheels.txt``); ``--sizing`` prints the cost
model's step times and the stages' shares beside what they were sized from.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ampbook.core import cli
from ampbook.core.paths import REPO_ROOT
from ampbook.core.words import plural, slug

# The device tool's limit for one command is 600 s: the call ends inside 560 s, which
# leaves 40 s for the transfers and a slow start of the interpreter.
DEFAULT_BUDGET_S = 560.0
RESERVE_S = 15.0  # kept back from the budget for packaging the files
MIN_STAGE_S = 3.0  # a stage with less time than this left is not started
# A lease: 15 minutes of device time less the machine's start (~100 s) and the first
# call's transfers (~20 s): what is left when the call starts (or --lease-left-s).
LEASE_LEFT_S = 15 * 60 - 100 - 20
RERUN_MARGIN_S = 45  # a rerun's transfers, start and packing, beside its budget
MIN_RERUN_S = 60  # a rerun with less budget than this is not worth its start
WHEEL_DIR = REPO_ROOT / ".whl"
WORK_DIR = REPO_ROOT / "build" / "gpucheck-work"
# TorchInductor's cache of the compile stage: under build/ (ignored by git, kept between
# calls on a warm machine, so a rerun finds it).
INDUCTOR_CACHE = REPO_ROOT / "build" / "inductor-cache"
# The portable compile cache (torch.compiler.save_cache_artifacts): what a call returns,
# and where the next lease's compile stage looks for it (carried with the tree).
COMPILE_CACHE = "compile_cache.bin"
CARRIED_COMPILE_CACHE = REPO_ROOT / "build" / COMPILE_CACHE
# What the notebook runner needs beyond the device image (importable names).
RUNNER_MODULES = (
    "papermill",
    "jupytext",
    "nbformat",
    "nbclient",
    "ipykernel",
    "IPython",
    "matplotlib_inline",
    "cityscapesscripts",
    "myst_nb",
)
NOTEBOOKS = {
    "nb01": "01_floating_point",
    "nb02": "02_tensor_cores",
    "nb03": "03_amp_training",
    "nb04": "04_loss_scaling",
    "nb05": "05_rtx3070",
    "nb06": "06_will_amp_help",
    "nb07": "07_making_amp_pay",
}
# The notebooks' sizes in the check: notebooks/profiles.yml's "gpucheck" profile, the
# gpu profile cut to fit the stage shares (a reader's GPU run uses "gpu").
CHECK_PROFILE = "gpucheck"
MAX_FILE_BYTES = 16 * 2**20
SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
PYTEST_TIMEOUT_S = 60  # per CUDA test (the slowest took ~8 s on the H200)


@dataclass(frozen=True)
class Stage:
    name: str
    share_s: float  # seconds on one H200 (sized from h200 and cpu below)
    dry_budget_s: float  # at the dry-run sizes on a 2-core CPU, with room for its load
    h200: str  # what the last H200 lease measured (data/gpucheck/2026-11-30_*.log)
    cpu: str  # the CPU proxy: measured here (the dry run, 2 cores) or at H200 rates
    writes: str = ""  # what it leaves in the output
    always: bool = False


# The lease, most valuable first: the shares, and beside them what they were sized
# from. "h200": the stage's seconds in the 2026-11-30 lease (data/gpucheck/), "-" where
# it did not run then; "cpu": a proxy measured on a CPU (../GPU-FINDINGS.md, "Sizing
# the next lease": a ladder cell at the H200's step times costs ~10 s, a cost-model
# trace 3.1 s first, Dynamo + AOTAutograd 8 s for rung 5's first step) and the stage's
# seconds in this dry run on 2 cores. A share carries a margin of at least a third
# over the upper figure; wheels, env and data, which every later stage needs, have
# fixed minimums (30, 15, 25 s) far above what they took. The shares up to ``tests``
# sum to 520 s of the 545 s the default budget leaves after RESERVE_S; the chapters
# after them run in what is left plus what the earlier stages did not use.
STAGES = (
    Stage("wheels", 30, 5, "3.6-6.2 s", "-", "", always=True),
    Stage(
        "env", 15, 120, "4.3-6.3 s", "dry 3 s", "environment.json in report.json",
        always=True,
    ),
    Stage(
        "data", 25, 120, "-",
        "2.2 s per 32 images at 2048x1024 (16 cores): ~11 s; dry 6 s",
        "the synthetic sets in build/cache (not in the output)",
    ),
    Stage(
        "ladder", 120, 240, "-",
        "10 cells x ~10 s + ~8 s start and first traces; dry 37 s",
        "ladder_<gpu>.json, fp32-tf32 and amp-fp16 rungs 0-4 (every cell at once)",
    ),
    Stage(
        "compile", 200, 240, "-",
        "2 x (8 s Dynamo + 25-60 s Inductor + ~10 s cell + ~15 s epochs' "
        "recompile); dry 15 s (eager)",
        "rung 5 of amp-fp16 and fp32-tf32 into ladder_<gpu>.json; compile_cache.bin",
    ),
    Stage(
        "profile-cl", 25, 120, "20.6 s (the two NCHW profiles)", "dry 17 s",
        "layer_profile_<gpu>_{fp32,amp-fp16}_1024x512_cl.json",
    ),
    Stage(
        "ladder-extra", 70, 180, "-",
        "4 cells: amp-bf16 ~10 s, strict fp32 ~15 s each, + ~8 s start; dry 12 s",
        "amp-bf16 and fp32 rungs 0 and 4 into ladder_<gpu>.json",
    ),
    Stage(
        "tests", 35, 240, "23.8 s (9 tests)", "dry 11 s (no CUDA test to run)",
        "the log of pytest -m cuda -v -rA --durations=0",
    ),
    Stage("nb06", 25, 240, "-", "dry 46 s", "06_will_amp_help.ipynb"),
    Stage(
        "loader", 25, 180, "cut at 25 s (synthetic set 2.2 s)", "dry 6 s",
        "loader_<gpu>.json",
    ),
    Stage("nb04", 60, 240, "cut at 55-61 s", "dry 29 s", "04_loss_scaling.ipynb"),
    Stage("nb05", 72, 300, "cut at 68 s", "dry 52 s", "05_rtx3070.ipynb"),
    Stage(
        "nb02", 30, 180, "25.3 s", "dry 23 s",
        "02_tensor_cores.ipynb, tensor_cores_<gpu>.json",
    ),
    Stage("nb01", 18, 180, "12.9-13.9 s", "dry 16 s", "01_floating_point.ipynb"),
    Stage(
        "nb03", 75, 300, "250.6 s at the gpu profile", "dry 43 s",
        "03_amp_training.ipynb, train_<gpu>_*.json (every epoch)",
    ),
    Stage(
        "profile", 25, 120, "20.6 s", "dry 52 s",
        "layer_profile_<gpu>_{fp32,amp-fp16}_1024x512.json (committed already)",
    ),
    Stage(
        "ladder-rest", 75, 180, "-", "6 cells; dry 38 s", "amp-bf16 and fp32 rungs 1-3",
    ),
    Stage("nb07", 45, 300, "-", "dry 97 s", "07_making_amp_pay.ipynb"),
)  # fmt: skip
STAGE_NAMES = tuple(s.name for s in STAGES)
BY_NAME = {s.name: s for s in STAGES}
# the stages that must finish inside the default budget (a test replays the rule)
LADDER_STAGES = ("ladder", "compile", "ladder-extra", "ladder-rest")

# Sizes of the data, profile, ladder and loader stages (the notebooks' sizes are in
# notebooks/profiles.yml, profile "gpucheck").
STAGE_SIZES = {
    "gpu": {
        "profile": {
            "batch_size": 6,
            "height": 512,
            "width": 1024,
            "steps": 3,
            "warmup": 3,
            "timed_steps": 10,
        },
        "ladder": {
            "height": 512,
            "width": 1024,
            "batch_size": 6,
            "warmup": 3,
            "steps": 10,
            "profile_steps": 3,
            "epochs": 2,
            "train_images": 48,
            "val_images": 2,
        },
        # (modes in the order they run, rungs) of each ladder stage
        "cells": {
            "ladder": (("fp32-tf32", "amp-fp16"), (0, 1, 2, 3, 4)),
            "compile": (("amp-fp16", "fp32-tf32"), (5,)),
            "ladder-extra": (("amp-bf16", "fp32"), (0, 4)),
            "ladder-rest": (("amp-bf16", "fp32"), (1, 2, 3)),
        },
        "loader": {
            "images": 24,
            "height": 512,
            "width": 1024,
            "batch_size": 6,
            "workers": (0, 2, 4, 8, 12),
            "passes": 1,
        },
    },
    "dry": {
        "profile": {
            "batch_size": 1,
            "height": 16,
            "width": 32,
            "steps": 1,
            "warmup": 1,
            "timed_steps": 1,
        },
        "ladder": {
            "height": 16,
            "width": 32,
            "batch_size": 1,
            "warmup": 1,
            "steps": 2,
            "profile_steps": 1,
            "epochs": 2,
            "train_images": 2,
            "val_images": 1,
        },
        # two modes taking turns, as on the GPU; a CPU has no fp16 training and runs
        # amp-bf16 several times slower without native bf16, so the dry run takes fp32
        # twice (with and without the TF32 setting, which a CPU ignores) and amp-bf16
        # once
        "cells": {
            "ladder": (("fp32-tf32", "fp32"), (0, 4)),
            "compile": (("fp32-tf32",), (5,)),
            "ladder-extra": (("amp-bf16",), (0,)),
            "ladder-rest": (("fp32",), (1,)),
        },
        "loader": {
            "images": 4,
            "height": 32,
            "width": 64,
            "batch_size": 2,
            "workers": (0, 1),
            "passes": 2,
        },
    },
}


def stage_timeout(share_s: float, later_s: float, left_s: float) -> float:
    """The budget rule: a stage may run for its share, or longer when the shares of
    the stages after it (``later_s``) still fit in what is left after it, and never
    past what is left of the budget (``left_s``)."""
    return max(min(left_s, max(share_s, left_s - later_s)), 0.0)


def replay(
    took: dict[str, float | list[float]],
    selected: tuple[str, ...] = STAGE_NAMES,
    budget_s: float = DEFAULT_BUDGET_S,
) -> dict[str, dict]:
    """The budget rule replayed on stage times: ``took[name]`` is the seconds a stage
    needs, or for a ladder stage the seconds at which each of its cells is written
    (counted from the stage's start, the last one its end). Returns per stage its
    time limit, start, seconds, status (ok, cut short, skipped) and the cells that
    were written inside its limit, as ``Check`` runs them."""
    t, out = 0.0, {}
    names = [n for n in STAGE_NAMES if n in selected]
    for i, name in enumerate(names):
        stage = BY_NAME[name]
        left = budget_s - RESERVE_S - t
        later = sum(BY_NAME[n].share_s for n in names[i + 1 :])
        limit = stage_timeout(stage.share_s, later, left)
        need = took.get(name, stage.share_s)
        cells = need if isinstance(need, list) else [need]
        if not should_start(0.0 if stage.always else stage.share_s, limit):
            out[name] = {"limit": limit, "start": t, "seconds": 0.0, "cells": 0,
                         "status": "skipped"}  # fmt: skip
            continue
        spent = min(cells[-1], limit)
        out[name] = {
            "limit": limit,
            "start": t,
            "seconds": spent,
            "cells": sum(c <= limit for c in cells),
            "status": "ok" if cells[-1] <= limit else "cut short",
        }
        t += spent
    return out


def should_start(share_s: float, limit_s: float) -> bool:
    """Whether a stage is started with ``limit_s`` of time: at least ``MIN_STAGE_S``
    and half its share (a chapter started with less would be cut before it wrote
    anything; it is named in the rerun line instead)."""
    return limit_s >= max(MIN_STAGE_S, min(share_s / 2, 30.0))


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------
# the stages (each runs in a child process: python -m ampbook.gpucheck --stage-child
# NAME)
# --------------------------------------------------------------------------------------


def _device_name() -> str:
    from ampbook.core.env import environment

    return environment("auto")["device_name"]


def stage_env(work: Path, dry: bool) -> None:
    from importlib import metadata

    from ampbook.core.env import environment_report, format_environment

    info = environment_report("auto")
    print(format_environment(info))
    versions = {}
    for dist in (
        "torch",
        "torchvision",
        "numpy",
        "matplotlib",
        "pillow",
        "pyyaml",
        "pytest",
        "papermill",
        "jupytext",
        "nbformat",
        "nbclient",
        "ipykernel",
        "ipython",
        "cityscapesscripts",
    ):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    print("packages:", ", ".join(f"{k} {v}" for k, v in versions.items()))
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi], capture_output=True, text=True, timeout=20)
        print(out.stdout or out.stderr)
    print(f"cpu count: {os.cpu_count()}")
    (work / "environment.json").write_text(
        json.dumps(
            {"environment": info, "packages": versions, "cpu_count": os.cpu_count()},
            indent=1,
            default=str,
        )
    )


def cuda_test_files(tests: Path = REPO_ROOT / "tests") -> list[Path]:
    """The test files that mark a test ``cuda``: ``pytest -m cuda`` collects only these
    (collecting the whole suite to deselect it costs tens of seconds of imports)."""
    marked = re.compile(r"^\s*(@pytest\.mark\.cuda|pytestmark\b.*\bcuda\b)", re.M)
    return sorted(f for f in tests.glob("test_*.py") if marked.search(f.read_text()))


def stage_tests(work: Path, dry: bool) -> None:
    """``pytest -m cuda``, every test named with its outcome and time (a cut leaves
    the names of those that ran), each under ``PYTEST_TIMEOUT_S``: pytest-timeout's
    ``--timeout`` where it is installed (the device image has it), else the
    faulthandler's traceback of a test that hangs."""
    from importlib.util import find_spec

    files = cuda_test_files()
    if find_spec("pytest_timeout"):
        limit = [f"--timeout={PYTEST_TIMEOUT_S}"]  # the plugin loads itself
    else:
        print(
            "pytest-timeout not installed: a test over "
            f"{PYTEST_TIMEOUT_S} s dumps its traceback instead (faulthandler)",
            flush=True,
        )
        limit = ["-o", f"faulthandler_timeout={PYTEST_TIMEOUT_S}"]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "cuda",
        "-v",
        "-rA",
        "--durations=0",
        *limit,
        "-p",
        "no:cacheprovider",
        *(str(f) for f in files or [REPO_ROOT / "tests"]),
    ]
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=REPO_ROOT).returncode
    if rc not in (0, 5):  # 5: no test selected
        raise RuntimeError(f"pytest -m cuda exited with {rc}")


def notebook_overrides(work: Path, stem: str) -> dict:
    """Parameters the check sets in a notebook, where it has them: chapter 2 saves its
    sweep, chapter 3 writes its runs into the results folder; the later chapters read
    that folder
    (chapter 3 itself keeps reading data/results: its own runs are not committed ones).
    """
    results = str(work / "results")
    if stem == NOTEBOOKS["nb02"]:
        return {
            "save_results": str(
                work / "results" / f"tensor_cores_{slug(_device_name())}.json"
            )
        }
    if stem == NOTEBOOKS["nb03"]:
        return {"out_dir": results}
    return {"results_dir": results}


def stage_notebook(work: Path, dry: bool, stem: str) -> None:
    from ampbook.build.run import (
        execute,
        load_profiles,
        parameters_cell,
        profile_parameters,
    )
    from ampbook.build.sources import read_source
    from ampbook.core.paths import NOTEBOOKS_DIR

    profile = "smoke" if dry else CHECK_PROFILE
    source = NOTEBOOKS_DIR / f"{stem}.py"
    nb = read_source(source)
    params = profile_parameters(load_profiles(), profile, source, nb)
    _, names = parameters_cell(nb)
    params.update(
        {k: v for k, v in notebook_overrides(work, stem).items() if k in names}
    )
    (work / "results").mkdir(exist_ok=True)
    print(f"{stem}: profile {profile}, parameters {params}", flush=True)
    run = execute(source, work / "executed", params, profile)
    print(f"{stem}: {run.executed_cells} cells in {run.seconds:.1f} s", flush=True)


def data_sets(dry: bool) -> list[tuple[int, int, int, int]]:
    """The synthetic sets (train, val, height, width) the stages read: the ladder's,
    the loader sweep's and, on the GPU, chapter 3's (its ``gpucheck`` profile)."""
    sizes = STAGE_SIZES["dry" if dry else "gpu"]
    lad, load = sizes["ladder"], sizes["loader"]
    sets = [
        (lad["train_images"], lad["val_images"], 2 * lad["height"], 2 * lad["width"]),
        (load["images"], 0, 2 * load["height"], 2 * load["width"]),
    ]
    if not dry:
        import yaml

        from ampbook.core.paths import PROFILES_FILE

        ch3 = yaml.safe_load(PROFILES_FILE.read_text())[CHECK_PROFILE][
            NOTEBOOKS["nb03"]
        ]
        sets.append(
            (
                ch3["train_images"],
                ch3["val_images"],
                2 * ch3["height"],
                2 * ch3["width"],
            )
        )
    return list(dict.fromkeys(sets))


def stage_data(work: Path, dry: bool) -> None:
    from ampbook.segmentation.synthetic import synthetic_root

    for train, val, height, width in data_sets(dry):
        start = time.perf_counter()
        root = synthetic_root(train, val, height=height, width=width)
        print(
            f"synthetic set {train} train + {val} val at {width}x{height}: {root} "
            f"[{time.perf_counter() - start:.1f} s]",
            flush=True,
        )


def stage_profile(work: Path, dry: bool, channels_last: bool) -> None:
    """Per-module time of the step, fp32 (TF32) and amp-fp16, in NCHW or in
    channels_last with cudnn.benchmark (file names ending ``_cl``)."""
    import inspect

    import torch

    from ampbook.bench.layers import profile_layers, save_json

    s = STAGE_SIZES["dry" if dry else "gpu"]["profile"]
    if not dry and not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA device: the profile stage needs one (use --dry-run on a CPU)"
        )
    if (
        channels_last
        and "channels_last" not in inspect.signature(profile_layers).parameters
    ):
        raise RuntimeError("this ampbook.bench.layers has no channels_last")
    for channels_last in (channels_last,):
        for precision in ("fp32", "amp-fp16"):
            start = time.perf_counter()
            kw = (
                {"channels_last": True, "cudnn_benchmark": True}
                if channels_last
                else {}
            )
            rec = profile_layers(
                precision,
                s["batch_size"],
                s["height"],
                s["width"],
                "cpu" if dry else "cuda",
                steps=s["steps"],
                warmup=s["warmup"],
                timed_steps=s["timed_steps"],
                tf32=True,
                **kw,
            )
            name = (
                f"layer_profile_{slug(rec['environment']['device_name'])}_{precision}_"
                f"{rec['width']}x{rec['height']}{'_cl' if channels_last else ''}.json"
            )
            save_json(rec, work / "results" / name)
            kernels = (
                sum(x["measured_s"] for x in rec["layers"]) + rec["unattributed_s"]
            )
            top = sorted(rec["layers"], key=lambda x: -x["measured_s"])[:4]
            print(
                f"{precision}{', channels_last' if channels_last else ''}: step "
                f"{rec['step_s'] * 1e3:.1f} ms, kernels {kernels * 1e3:.1f} ms, idle "
                f"{max(rec['step_s'] - kernels, 0) * 1e3:.1f} ms, bound "
                f"{rec['predicted_step_s'] * 1e3:.1f} ms; largest: "
                + ", ".join(f"{x['scope']} {x['measured_s'] * 1e3:.2f} ms" for x in top)
                + f" [{time.perf_counter() - start:.1f} s]",
                flush=True,
            )


def _ladder_spec(dry: bool, stage: str):
    """The ladder stage ``stage``'s spec: the ladder's size, its modes and rungs."""
    from ampbook.bench.ladder import LadderSpec

    sizes = STAGE_SIZES["dry" if dry else "gpu"]
    modes, rungs = sizes["cells"][stage]
    return LadderSpec(
        device="cpu" if dry else "cuda",
        modes=tuple(modes),
        rungs=tuple(rungs),
        **sizes["ladder"],
    )


def save_compile_cache(work: Path) -> None:
    """The compile cache of this process (``torch.compiler.save_cache_artifacts``:
    FX graphs, AOTAutograd, Inductor and autotuning, portable to another machine with
    the same torch and GPU) into ``work/compile_cache.bin``; a line says what."""
    import torch

    art = torch.compiler.save_cache_artifacts()
    if not art or not art[0]:
        print(
            f"compile cache: nothing compiled in this process, no {COMPILE_CACHE}",
            flush=True,
        )
        return
    data = art[0]
    tmp = work / f".{COMPILE_CACHE}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, work / COMPILE_CACHE)
    print(f"compile cache: {len(data) / 2**20:.1f} MiB of artifacts saved", flush=True)


def load_compile_cache(path: Path = CARRIED_COMPILE_CACHE) -> None:
    """A carried compile cache (``compile_cache.bin`` of an earlier lease) loaded
    before compiling, where there is one."""
    import torch

    if not path.is_file():
        print(
            f"compile cache: none carried ({path} absent): compiling cold", flush=True
        )
        return
    try:
        torch.compiler.load_cache_artifacts(path.read_bytes())
        print(f"compile cache: loaded {path} ({path.stat().st_size} bytes)", flush=True)
    except Exception as err:  # noqa: BLE001 (a stale cache costs time only)
        print(f"compile cache: {path} not loaded ({type(err).__name__}: {err})")


def stage_ladder(work: Path, dry: bool, stage: str) -> None:
    """A ladder stage's cells (``STAGE_SIZES[...]["cells"][stage]``) added to the one
    ladder file, in this process, the modes taking turns at each rung, every cell
    written as soon as its step is measured; cells the file holds whole already (a
    rerun) are not measured again. The compile stage measures one mode at a time and
    saves the compile cache after each."""
    import dataclasses

    import torch

    from ampbook.bench.ladder import (
        LadderError,
        format_table,
        format_targets,
        ladder_path,
        run_ladder,
    )

    if not dry and not torch.cuda.is_available():
        raise RuntimeError(f"no CUDA device: the {stage} stage needs one")
    spec = _ladder_spec(dry, stage)
    path = ladder_path(work / "results", _device_name())
    compiled = 5 in spec.rungs
    if compiled:
        print(f"TorchInductor cache: {os.environ.get('TORCHINDUCTOR_CACHE_DIR')}")
        if os.environ.get("TORCH_COMPILE_DISABLE") == "1":
            print("TORCH_COMPILE_DISABLE=1: rung 5 runs eager", flush=True)
        else:
            load_compile_cache()
    groups = [(m,) for m in spec.modes] if compiled else [spec.modes]
    ladder = None
    for modes in groups:
        sub = dataclasses.replace(spec, modes=modes)
        try:
            ladder = run_ladder(sub, path, "none", merge=True, skip_finished=True)
        except LadderError as err:  # another device or size in a reused work folder
            print(f"{err}: starting {path.name} afresh", flush=True)
            path.unlink()
            ladder = run_ladder(sub, path, "none")
        if compiled:
            save_compile_cache(work)
    print(format_table(ladder), flush=True)
    if ladder.is_cuda:  # a GPU's targets: a dry run on the CPU would read as misses
        print(format_targets(ladder), flush=True)


def stage_loader(work: Path, dry: bool) -> None:
    from ampbook.bench.layers import loader_record, save_json
    from ampbook.bench.loader import format_table
    from ampbook.segmentation.synthetic import synthetic_root

    s = STAGE_SIZES["dry" if dry else "gpu"]["loader"]
    start = time.perf_counter()
    root = synthetic_root(
        train=s["images"], val=0, height=2 * s["height"], width=2 * s["width"]
    )
    print(
        f"synthetic set of {s['images']} images at {2 * s['width']}x{2 * s['height']}: "
        f"{time.perf_counter() - start:.1f} s",
        flush=True,
    )
    rec = loader_record(
        root=root,
        height=s["height"],
        width=s["width"],
        workers=s["workers"],
        batch_size=s["batch_size"],
        passes=s["passes"],
    )
    print(format_table(rec), flush=True)
    save_json(
        rec, work / "results" / f"loader_{slug(rec['environment']['device_name'])}.json"
    )


def run_stage_child(name: str, work: Path, dry: bool) -> None:
    (work / "results").mkdir(parents=True, exist_ok=True)
    if name == "env":
        stage_env(work, dry)
    elif name == "tests":
        stage_tests(work, dry)
    elif name in NOTEBOOKS:
        stage_notebook(work, dry, NOTEBOOKS[name])
    elif name == "data":
        stage_data(work, dry)
    elif name in ("profile", "profile-cl"):
        stage_profile(work, dry, channels_last=name == "profile-cl")
    elif name in LADDER_STAGES:
        stage_ladder(work, dry, name)
    elif name == "loader":
        stage_loader(work, dry)
    else:
        raise ValueError(f"no child stage {name!r}")


# --------------------------------------------------------------------------------------
# the parent: wheels, budgets, processes, the output folder
# --------------------------------------------------------------------------------------


class Terminated(Exception):
    """The check received SIGTERM (an outer time limit): stop the stage, write the
    report."""


@dataclass
class StageResult:
    name: str
    budget_s: float  # its time limit in this call (the budget rule)
    share_s: float = 0.0  # its share (STAGES)
    seconds: float = 0.0
    status: str = "pending"  # ok | error | cut short | skipped | not selected
    ok: bool = False
    detail: str = ""
    writes: str = ""


@dataclass
class Check:
    out: Path
    budget_s: float
    dry_run: bool
    selected: tuple[str, ...]
    work: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="ampbook-gpucheck-"))
    )
    started: str = field(default_factory=_now)
    t0: float = field(default_factory=time.monotonic)
    results: list[StageResult] = field(default_factory=list)
    env: dict = field(default_factory=lambda: dict(os.environ))
    wheel_dir: Path = WHEEL_DIR
    lease: bool = False
    keep_work: bool = False  # a work folder given (--work): kept for a rerun
    lease_left_s: float = LEASE_LEFT_S
    rerun: str = ""

    def __post_init__(self):
        self.out.mkdir(parents=True, exist_ok=True)
        self.log_path = self.out / "gpucheck.log"
        self.log_file = self.log_path.open("w", buffering=1)
        for sub in ("results", "executed"):
            (self.work / sub).mkdir(exist_ok=True)
        paths = [str(REPO_ROOT)] + [
            p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p
        ]
        self.env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env.setdefault("MPLBACKEND", "Agg")
        if (
            self.dry_run
        ):  # smoke sizes: one thread each is faster than two that wait on each other
            self.env["OMP_NUM_THREADS"] = "1"

    def log(self, text: str) -> None:
        print(text, flush=True)
        self.log_file.write(text + "\n")

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.budget_s - RESERVE_S - self.elapsed()

    # ---- wheels ----------------------------------------------------------------------
    def missing_modules(self) -> list[str]:
        code = (
            "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] "
            "if importlib.util.find_spec(m) is None))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, *RUNNER_MODULES],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout.split()

    def install_wheels(self, timeout: float) -> str:
        missing = self.missing_modules()
        if not missing:
            return "nothing to install: the runner's packages are importable"
        wheels = sorted(self.wheel_dir.glob("*.whl"))
        if not wheels:
            raise RuntimeError(
                f"{', '.join(missing)} not importable and no wheels in "
                f"{self.wheel_dir}: "
                "run `make gpu-wheels` on a machine with PyPI and carry .whl"
            )
        target = self.work / "site"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--upgrade",
            "--target",
            str(target),
            *map(str, wheels),
        ]
        self.log(
            f"installing {len(wheels)} wheels for {', '.join(missing)} into {target}"
        )
        done = subprocess.run(
            cmd, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if done.stdout or done.stderr:
            self.log((done.stdout + done.stderr).strip())
        if done.returncode:
            raise RuntimeError(
                f"pip install of the carried wheels failed (exit {done.returncode})"
            )
        self.env["PYTHONPATH"] = os.pathsep.join([str(target), self.env["PYTHONPATH"]])
        still = self.missing_modules()
        if still:
            raise RuntimeError(
                f"still not importable after installing the wheels: {', '.join(still)}"
            )
        return f"installed {len(wheels)} wheels"

    # ---- one stage -------------------------------------------------------------------
    def run_child(self, name: str, timeout: float) -> tuple[str, str]:
        cmd = [
            sys.executable,
            "-m",
            "ampbook.gpucheck",
            "--stage-child",
            name,
            "--work",
            str(self.work),
        ]
        if self.dry_run:
            cmd.append("--dry-run")
        env = None
        if name in LADDER_STAGES:
            env = dict(self.env)
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR_CACHE))
            if self.dry_run and name == "compile":  # a CPU compiles ERFNet in minutes
                env["TORCH_COMPILE_DISABLE"] = "1"
                self.log("  --dry-run: TORCH_COMPILE_DISABLE=1 (rung 5 runs eager)")
        return self.run_process(cmd, timeout, env)

    def run_process(
        self, cmd: list[str], timeout: float, env: dict | None = None
    ) -> tuple[str, str]:
        """Run ``cmd`` in its own process group, its output into the log; past
        ``timeout``
        stop the whole group. Returns (status, detail)."""
        proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=env or self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        tail: list[str] = []

        def pump():
            for line in proc.stdout:
                line = line.rstrip("\n")
                self.log(f"  {line}")
                tail.append(line)
                del tail[:-20]

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            reader.join(timeout=5)
            return "cut short", f"stopped after {timeout:.0f} s, its time budget"
        finally:  # the check itself terminated: take the stage's process group with it
            if proc.poll() is None:
                self._kill(proc)
        reader.join(timeout=10)
        if rc == 0:
            return "ok", ""
        last = next((l for l in reversed(tail) if l.strip()), "")
        return "error", f"exit {rc}: {last.strip()[:500]}"

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def run(self) -> int:
        """Run the selected stages; the signal handlers it sets are undone when it
        returns or raises."""
        with cli.kept_handlers():
            return self._run()

    def _run(self) -> int:
        def terminate(signum, frame):
            cli.record_stop(signum)  # 143 for SIGTERM, 130 for Ctrl-C
            raise Terminated()

        signal.signal(signal.SIGTERM, terminate)
        signal.signal(signal.SIGINT, terminate)  # Ctrl-C ends the check alike
        names = [st.name for st in STAGES if st.name in self.selected]
        self.log(
            f"ampbook.build.gpucheck {'--dry-run ' if self.dry_run else ''}"
            + ("--lease, " if self.lease else "")
            + f"budget {self.budget_s:.0f} s, "
            f"stages {', '.join(names)}; work folder {self.work}"
        )
        for stage in STAGES:
            if stage.name not in self.selected:
                self.results.append(StageResult(stage.name, 0.0, status="not selected"))
        for i, name in enumerate(names):
            stage = BY_NAME[name]
            if self.dry_run:
                budget = min(stage.dry_budget_s, max(self.left(), 0.0))
            else:  # the budget rule: its share, more where the later shares fit
                later = sum(BY_NAME[n].share_s for n in names[i + 1 :])
                budget = stage_timeout(stage.share_s, later, self.left())
            res = StageResult(
                stage.name, round(budget, 1), stage.share_s, writes=stage.writes
            )
            self.results.append(res)
            if stage.name == "wheels" and self.dry_run:
                res.status, res.ok, res.detail = (
                    "skipped",
                    True,
                    "--dry-run installs nothing",
                )
                self.finish_stage(res)
                continue
            timeout = min(budget, self.left())
            share = stage.dry_budget_s if self.dry_run else stage.share_s
            if not should_start(0.0 if stage.always else share, timeout):
                res.status, res.detail = (
                    "skipped",
                    f"only {max(self.left(), 0):.0f} s of the budget left",
                )
                self.log(f"== {stage.name}: skipped ({res.detail})")
                self.finish_stage(res)
                continue
            self.log(
                f"== {stage.name} (limit {timeout:.0f} s, share {share:.0f} s, "
                f"{self.elapsed():.0f} s elapsed)"
            )
            start = time.monotonic()
            try:
                if stage.name == "wheels":
                    res.detail = self.install_wheels(timeout)
                    res.status = "ok"
                else:
                    res.status, res.detail = self.run_child(stage.name, timeout)
            except (Terminated, KeyboardInterrupt):
                res.status = "cut short"
                res.detail = (
                    f"the check was stopped ({cli.signal_name()}) before the stage "
                    "ended"
                )
                res.seconds = round(time.monotonic() - start, 1)
                self.log(f"== {stage.name}: {res.detail}")
                self.rerun = self.rerun_line()
                self.finish_stage(res, final=True)
                self.log(self.rerun)
                self.close()
                cli.say(
                    f"the check was stopped ({cli.signal_name()}) in stage "
                    f"{stage.name}; {self.out / 'report.json'} says what ran"
                )
                return cli.stop_code()
            except Exception as err:  # a stage's failure is reported, the check goes on
                res.status, res.detail = "error", f"{type(err).__name__}: {err}"
            res.seconds = round(time.monotonic() - start, 1)
            res.ok = res.status == "ok"
            self.log(
                f"== {stage.name}: {res.status} in {res.seconds:.1f} s"
                + (f" ({res.detail})" if res.detail else "")
            )
            self.finish_stage(res)
        self.rerun = self.rerun_line()
        self.finish_stage(None, final=True)
        bad = [r for r in self.results if r.name in self.selected and not r.ok]
        self.log(
            f"done in {self.elapsed():.0f} s; "
            + (
                "every stage ok"
                if not bad
                else "not ok: " + ", ".join(f"{r.name} ({r.status})" for r in bad)
            )
        )
        self.log(self.rerun)  # the log's last line
        self.close()
        return 0 if not bad else 1

    def close(self) -> None:
        self.log_file.close()
        if not self.keep_work:
            shutil.rmtree(self.work, ignore_errors=True)

    def rerun_line(self) -> str:
        """The log's last line: the stages cut short, skipped or never reached, and the
        command that reruns them in the time left of the lease (or at the next)."""
        done = {r.name: r.status for r in self.results}
        again = [
            n
            for n in STAGE_NAMES
            if n in self.selected
            and n != "wheels"
            and done.get(n) in ("cut short", "skipped", "pending", None)
        ]
        if not again:
            return "rerun: none needed, no stage was cut short or skipped"
        left = self.lease_left_s - self.elapsed()
        budget = min(DEFAULT_BUDGET_S, left - RERUN_MARGIN_S)
        cut = ", ".join(f"{n} ({done.get(n) or 'not reached'})" for n in again)
        cmd = ["python3", "-m", "ampbook.gpucheck"]
        if self.dry_run:
            cmd.append("--dry-run")
        cmd += ["--stages", ",".join(again)]
        if self.keep_work and self.work != WORK_DIR:
            cmd += ["--work", str(self.work)]
        if budget >= MIN_RERUN_S:
            cmd += ["--budget-s", f"{budget:.0f}", "--out", "$OUT"]
            return (
                f"rerun: cut {cut}; in the lease's ~{left:.0f} s left: "
                f"{' '.join(cmd)} (timeout_s {budget + 30:.0f})"
            )
        cmd += ["--out", "$OUT"]
        return (
            f"rerun: cut {cut}; the lease has ~{max(left, 0):.0f} s left, too few "
            f"for a rerun: at the next lease, {' '.join(cmd)}"
        )

    # ---- the output folder -----------------------------------------------------------
    def result_files(self) -> list[tuple[Path, str]]:
        """(file, name in the archive): training runs renamed ``train_<gpu>_<run
        name>.json``."""
        out = []
        for path in sorted((self.work / "results").glob("*.json")):
            name = path.name
            try:
                rec = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if rec.get("schema") == "ampbook.train":
                gpu = slug(rec["environment"]["device_name"])
                name = f"train_{gpu}_{rec['name']}.json"
            out.append((path, re.sub(r"[^A-Za-z0-9._-]", "_", name)))
        return out

    def finish_stage(self, res: StageResult | None, final: bool = False) -> None:
        """Bring the output folder up to date: archives, then report.json (written
        last)."""
        self._archive("results.tar.gz", self.result_files())
        executed = sorted((self.work / "executed").glob("*.ipynb"))
        self._archive("notebooks.tar.gz", [(p, p.name) for p in executed])
        if res is not None and res.name == "compile":
            self.copy_compile_cache()
        env_file = self.work / "environment.json"
        report = {
            "check": "ampbook.gpucheck",
            "dry_run": self.dry_run,
            "lease": self.lease,
            "budget_s": self.budget_s,
            "lease_left_s": self.lease_left_s,
            "started": self.started,
            "updated": _now(),
            "finished": final,
            "elapsed_s": round(self.elapsed(), 1),
            "selected": list(self.selected),
            "environment": (
                json.loads(env_file.read_text()) if env_file.exists() else None
            ),
            "stages": [asdict(r) for r in self.results],
            "cut_short": [r.name for r in self.results if r.status == "cut short"],
            "results": [n for _, n in self.result_files()],
            "notebooks": [p.name for p in executed],
            "rerun": self.rerun,
        }
        tmp = self.out / ".report.json.tmp"
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        os.replace(tmp, self.out / "report.json")

    def copy_compile_cache(self) -> None:
        """The compile stage's ``compile_cache.bin`` into the output when it fits a
        file of it (16 MiB), else left out with a line saying so."""
        src = self.work / COMPILE_CACHE
        if not src.is_file():
            why = (
                "--dry-run: nothing compiled (TORCH_COMPILE_DISABLE=1)"
                if self.dry_run
                else "the compile stage saved no cache artifacts"
            )
            self.log(f"{COMPILE_CACHE} left out: {why}")
            return
        size = src.stat().st_size
        if size > MAX_FILE_BYTES:
            self.log(
                f"{COMPILE_CACHE} left out: {size / 2**20:.1f} MiB, over the "
                f"{MAX_FILE_BYTES / 2**20:g} MiB a file may be"
            )
            return
        tmp = self.out / f".{COMPILE_CACHE}.tmp"
        shutil.copyfile(src, tmp)
        os.replace(tmp, self.out / COMPILE_CACHE)
        self.log(f"{COMPILE_CACHE}: {size / 2**20:.1f} MiB in the output")

    def _archive(self, name: str, members: list[tuple[Path, str]]) -> None:
        """``members`` as ``name`` in the output, written aside and moved in whole;
        compression stops as soon as the archive passes the 16 MiB a file may be (a
        large compile cache costs no more time than the part that fits)."""
        tmp = self.out / f".{name}.tmp"
        try:
            with (
                open(tmp, "wb") as raw,
                tarfile.open(
                    fileobj=_CappedFile(raw, MAX_FILE_BYTES), mode="w:gz"
                ) as tar,
            ):
                for path, arcname in members:
                    tar.add(path, arcname=arcname)
        except _TooBig:
            self.log(
                f"warning: {name} passed the {MAX_FILE_BYTES / 2**20:g} MiB a file "
                f"may be ({len(members)} files): kept the previous one"
            )
            tmp.unlink(missing_ok=True)
            return
        os.replace(tmp, self.out / name)


class _TooBig(Exception):
    pass


class _CappedFile:
    """A binary file that raises ``_TooBig`` when a write would take it past
    ``limit`` bytes (what ``tarfile`` writes through gzip goes through ``write``)."""

    def __init__(self, raw, limit: int):
        self.raw, self.limit, self.size = raw, limit, 0

    def write(self, data) -> int:
        self.size += len(data)
        if self.size > self.limit:
            raise _TooBig
        return self.raw.write(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.raw.flush()


# Distributions the book needs on the GPU machine beyond its imports' own closure: the
# notebook runner (papermill, the kernel) and myst-nb (the chapters glue values for the
# book).
WHEEL_ROOTS = (
    "papermill",
    "jupytext",
    "nbformat",
    "nbclient",
    "jupyter-client",
    "ipykernel",
    "ipython",
    "matplotlib-inline",
    "cityscapesscripts",
    "myst-nb",
)
# Never carried: the Python < 3.5 backport of the standard library's typing
# (cityscapesscripts asks for it; a copy on PYTHONPATH would shadow the real one).
WHEEL_NEVER = ("typing",)
PY312_LINUX = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def wheel_closure(roots=WHEEL_ROOTS, image_list: Path | None = None) -> dict[str, str]:
    """NAME -> VERSION of ``roots`` and everything they require (installed metadata,
    markers for Python 3.12 on Linux, no extras) that the device image lacks: what
    gpu-wheels.txt
    lists (``python -m ampbook.gpucheck --list-wheels`` prints it)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    image_list = (
        image_list or REPO_ROOT / "data" / "reference" / "device_image_packages.txt"
    )
    image = {
        norm(line.strip())
        for line in image_list.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    need: dict[str, str] = {}
    seen = {norm(n) for n in WHEEL_NEVER}
    stack = list(roots)
    while stack:
        name = norm(stack.pop())
        if name in seen:
            continue
        seen.add(name)
        if name in image:
            continue
        dist = md.distribution(name)
        need[name] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if not req.marker or req.marker.evaluate(PY312_LINUX):
                stack.append(req.name)
    return dict(sorted(need.items()))


def sizing(
    precisions: tuple[str, ...] = ("fp32", "amp-fp16", "amp-bf16"),
) -> list[tuple[str, str, float]]:
    """The cost model's lower bound of one training step at the post's setting
    (1024x512, batch 6) on the H200 and the RTX 3070: (device key, precision and TF32,
    seconds), for each of ``precisions`` (one trace each, seconds of CPU)."""
    from ampbook.core.devices import load_devices
    from ampbook.predict.costmodel import Ceilings, predict, trace_step
    from ampbook.segmentation.model import ERFNet

    devices = load_devices()
    model = ERFNet(19)
    rows = []
    for precision in precisions:
        trace = trace_step(model, 6, 512, 1024, precision)
        for key in ("h200-sxm", "rtx3070-desktop"):
            for tf32 in (True, False) if precision == "fp32" else (True,):
                label = precision + (
                    ", TF32 " + ("on" if tf32 else "off") if precision == "fp32" else ""
                )
                step = predict(
                    trace,
                    Ceilings.from_device(devices[key], tf32=tf32),
                    min_kernel_s=5e-6,
                )
                rows.append((key, label, step.min_step_s))
    return rows


def check_out(out: Path) -> None:
    """``--out`` can be written (long names, a file in the way, read-only, 64 MiB
    free for the archives) and holds no earlier check's files: a second check into
    the same folder would replace the first one's results."""
    cli.check_output_dir(out, "--out", size=4 * MAX_FILE_BYTES)
    earlier = [n for n in ("report.json", "results.tar.gz") if (out / n).exists()]
    if earlier:
        raise cli.UserError(
            f"--out {out} already holds an earlier check's {' and '.join(earlier)}; "
            "a second check would replace them: choose another --out, or move them "
            "away first"
        )


def parse_stages(text: str | None) -> tuple[str, ...]:
    if not text:
        return STAGE_NAMES
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in STAGE_NAMES]
    if unknown or not names:
        what = (
            f"{plural(len(unknown), 'unknown stage')}: {', '.join(unknown)}"
            if unknown
            else "no stage given"
        )
        raise ValueError(f"{what}; choose from {', '.join(STAGE_NAMES)}")
    chosen = set(names) | {s.name for s in STAGES if s.always}
    return tuple(n for n in STAGE_NAMES if n in chosen)


def default_budget(selected: tuple[str, ...], dry_run: bool) -> float:
    """A call's budget: ``DEFAULT_BUDGET_S`` on a GPU; in a dry run the selected
    stages' dry budgets and the reserve (a loaded CPU takes what it takes)."""
    if not dry_run:
        return DEFAULT_BUDGET_S
    return sum(s.dry_budget_s for s in STAGES if s.name in selected) + RESERVE_S


def select_stages(lease: bool, stages: str | None) -> tuple[str, ...]:
    """Every stage (``--lease``), or those of ``--stages`` (which wins: a rerun); one
    of the two is needed."""
    if stages:
        return parse_stages(stages)
    if not lease:
        raise ValueError(
            "give --lease (every stage, the whole lease in one call) or --stages a,b "
            "(a rerun)"
        )
    return STAGE_NAMES


def sizing_markdown() -> str:
    """``STAGES`` as DEVELOPING.md's Markdown table (a test keeps the two equal)."""
    rows = [
        "| stage | share (s) | dry run (s) | H200, 2026-11-30 | CPU proxy | writes |",
        "|---|---|---|---|---|---|",
    ]
    for st in STAGES:
        rows.append(
            f"| {st.name} | {st.share_s:.0f} | {st.dry_budget_s:.0f} | {st.h200} | "
            f"{st.cpu} | {st.writes or '-'} |"
        )
    return "\n".join(rows)


def sizing_table() -> str:
    """The stages in order: share, dry-run budget and what each was sized from."""
    rows = [f"{'stage':<13}{'share s':>8}{'dry s':>7}  H200 (2026-11-30)  |  CPU proxy"]
    for st in STAGES:
        rows.append(
            f"{st.name:<13}{st.share_s:>8.0f}{st.dry_budget_s:>7.0f}  {st.h200}  |  "
            f"{st.cpu}"
        )
    return "\n".join(rows)


def build_parser() -> cli.ArgumentParser:
    """The command's options."""
    parser = cli.ArgumentParser(
        prog="python -m ampbook.gpucheck",
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog="examples:\n"
        "  python3 -m ampbook.gpucheck --lease --out DIR    (a lease)\n"
        "  python3 -m ampbook.gpucheck --stages ladder,compile --budget-s S "
        "--out DIR    (a rerun)",
        formatter_class=cli.HelpFormatter,
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="folder for report.json, the log and the archives (required to run "
        "the check)",
    )
    parser.add_argument(
        "--lease",
        action="store_true",
        help="every stage, the most valuable first, in one call (the work folder "
        "emptied first)",
    )
    parser.add_argument(
        "--budget-s",
        type=cli.positive_float,
        default=None,
        help="the whole check ends inside this many seconds "
        f"(default {DEFAULT_BUDGET_S:.0f}; with --dry-run, the stages' dry budgets)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="every stage on the CPU at smoke sizes (no wheels step)",
    )
    parser.add_argument(
        "--stages",
        default=None,
        metavar="LIST",
        help="comma-separated stages to run (a rerun; they add to the work folder) "
        f"({', '.join(STAGE_NAMES)}); wheels and env always run",
    )
    parser.add_argument("--plan", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--work",
        default=None,
        help=f"work folder kept between a call and its rerun (default "
        f"{WORK_DIR.relative_to(REPO_ROOT)}, or {WORK_DIR.name}-dry with --dry-run)",
    )
    parser.add_argument(
        "--lease-left-s",
        type=cli.positive_float,
        default=LEASE_LEFT_S,
        help="device time left in the lease when this call starts, for the rerun "
        f"line (default {LEASE_LEFT_S:.0f}: 15 minutes less the start and transfers)",
    )
    parser.add_argument(
        "--wheels",
        default=str(WHEEL_DIR),
        help="folder of the carried wheels (default .whl, made by `make gpu-wheels`)",
    )
    parser.add_argument(
        "--list-wheels",
        action="store_true",
        help="print NAME==VERSION of every wheel the device needs "
        "(gpu-wheels.txt), and exit",
    )
    parser.add_argument(
        "--sizing",
        action="store_true",
        help="print the stages' shares beside what they were sized from, and the "
        "cost model's step times, and exit",
    )
    parser.add_argument("--stage-child", help=argparse.SUPPRESS)
    return parser


@cli.command("python -m ampbook.gpucheck")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.stage_child:
        run_stage_child(args.stage_child, Path(args.work), args.dry_run)
        return 0
    if args.list_wheels:
        print("\n".join(f"{k}=={v}" for k, v in wheel_closure().items()))
        return 0
    if args.sizing:
        print(sizing_table())
        for key, label, step_s in sizing():
            print(
                f"{key:<16} {label:<18} {step_s * 1e3:7.1f} ms per step "
                "(1024x512, batch 6; lower bound)"
            )
        return 0
    if args.plan:
        print(
            "error: --plan is gone: the whole lease is one call now, "
            "python3 -m ampbook.gpucheck --lease --out DIR",
            file=sys.stderr,
        )
        return 2
    if not args.out:
        print(
            "error: --out DIR is required "
            "(the folder the report and results are written to)",
            file=sys.stderr,
        )
        return 2
    if args.budget_s is not None and not (
        RESERVE_S + MIN_STAGE_S < args.budget_s < float("inf")
    ):
        print(
            f"error: --budget-s must be more than {RESERVE_S + MIN_STAGE_S:.0f} s, "
            f"got {args.budget_s:g}",
            file=sys.stderr,
        )
        return 2
    try:
        selected = select_stages(args.lease, args.stages)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    budget = args.budget_s or default_budget(selected, args.dry_run)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"error: --out {out} exists and is not a folder", file=sys.stderr)
        return 2
    check_out(out)
    work = Path(args.work) if args.work else WORK_DIR
    if args.dry_run and not args.work:
        work = work.with_name(work.name + "-dry")
    cli.check_output_dir(work, "--work")
    if not args.stages:  # a new lease: nothing of an earlier one is merged
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    return Check(
        out,
        budget,
        args.dry_run,
        selected,
        work=work,
        keep_work=True,
        wheel_dir=Path(args.wheels),
        lease=bool(args.lease and not args.stages),
        lease_left_s=args.lease_left_s,
    ).run()
