"""The GPU check: everything the book measures on a CUDA machine, in two calls that
fit one 15-minute lease.

    python3 -m ampbook.gpucheck --plan A --out DIR [--budget-s 330] [--dry-run]
    python3 -m ampbook.gpucheck --plan B --out DIR [--budget-s 330] [--dry-run]
    python3 -m ampbook.gpucheck --stages ladder,compile --out DIR  (a rerun)

Run from the repository root with the machine's own ``python3`` (no virtual environment
needed). Each plan is a list of stages (``PLANS``), each run in its own process under a
hard time limit sized from the last measured run (``STAGES``; data/results/README.md,
"Sizing the GPU check"):

* ``wheels`` (both plans): install the wheels carried in ``.whl/`` (``make gpu-wheels``)
  into a temporary folder when papermill, jupytext, ipykernel... are not importable
  (not in ``--dry-run``);
* ``env`` (both): the environment (``ampbook.env``, nvidia-smi, package versions);
* ``data`` (both): the synthetic Cityscapes sets the later stages read, made once in
  ``build/cache`` (kept between two calls on a warm machine: plan B finds plan A's);
* plan A: ``tests`` (``pytest -m cuda``), ``profile`` (per-module GPU kernel time of
  the step, fp32 with TF32 and amp-fp16, NCHW and channels_last, beside the cost model:
  ``ampbook.layer_profile``), ``ladder`` (``python -m ampbook.bench ladder``, rungs 0-4,
  each precision in its own process, the precisions taking turns), ``compile`` (rung 5,
  amp-fp16 and fp32 with TF32, added to the same ladder; the compile cache written to
  the output), ``nb06`` (chapter 6: the doctor's CUDA path);
* plan B: ``nb01`` to ``nb05`` (the chapters with the ``gpucheck`` profile through
  ``ampbook.build.run``; chapter 2 saves its sweep, chapter 3 its training runs, the
  later chapters read them) and ``loader`` (DataLoader images/s at 0-12 workers).

``wheels`` and ``env`` always run; ``--stages`` picks any stages instead of a plan (a
rerun of what a call cut short). ``--dry-run`` runs the stages on the CPU at tiny sizes
and writes the same files (the compile stage with ``TORCH_COMPILE_DISABLE=1``: a CPU
compiles ERFNet in minutes). The whole call ends inside ``--budget-s``: the selected
stages share it in the proportions of their budgets in ``STAGES`` (a plan's sum to the
default less a reserve), each capped by the time left; a stage that overruns is stopped
(its whole process group) and reported as cut short, and the check goes on with the
next stage while time is left. SIGTERM stops the running stage the same way, writes the
report and exits 143. After every stage ``DIR`` is brought up to date, and what a stage
measured is in it even when the stage was cut short (the training runner writes its
record after every epoch, the ladder after every rung). ``DIR`` holds at most 8 files,
each at most 16 MiB, named only with letters, digits, ``.``, ``_``, ``-``:

* ``report.json``: every stage, its budget, seconds, status (ok, error, cut short,
  skipped) and what it writes;
* ``gpucheck.log``: everything the stages printed;
* ``results.tar.gz``: the result JSONs, named for ``data/results/`` (``tar -xzf
  results.tar.gz -C data/results`` puts them there; ``ampbook.results`` reads them);
* ``notebooks.tar.gz``: the executed notebooks (``ampbook.build.book --executed`` builds
  from them);
* ``compile_cache.tar.gz`` (plan A): the compile stage's TorchInductor cache
  (``build/inductor-cache``; extract it there and carry it to skip the compilation).

Exit status 0 when every selected stage is ok, 1 otherwise, 2 for bad arguments, 143 on
SIGTERM. ``--wheels DIR`` names another wheel folder; ``--list-wheels`` prints the wheel
list from the installed packages (``gpu-wheels.txt``); ``--sizing`` prints the cost
model's step times the budgets were sized from.
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

from ampbook import cli
from ampbook.paths import REPO_ROOT

DEFAULT_BUDGET_S = 330.0  # one of the two calls of a 15-minute lease
RESERVE_S = 15.0  # kept back from the budget for packaging the files
MIN_STAGE_S = 3.0  # a stage with less time than this left is not started
WHEEL_DIR = REPO_ROOT / ".whl"
# TorchInductor's cache of the compile stage: under build/ (ignored by git, kept between
# calls on a warm machine, carried to a fresh one when a session extracts
# compile_cache.tar.gz there).
INDUCTOR_CACHE = REPO_ROOT / "build" / "inductor-cache"
COMPILE_ARCHIVE = "compile_cache.tar.gz"
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
# gpu profile cut to fit the stage budgets (a reader's GPU run uses "gpu").
CHECK_PROFILE = "gpucheck"
MAX_FILE_BYTES = 16 * 2**20
SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class Stage:
    name: str
    budget_s: float  # on one H200 in its plan (data/results/README.md shows the sizing)
    dry_budget_s: float  # at the dry-run sizes on a 2-core CPU, with room for its load
    writes: str = ""  # what it leaves in the output
    always: bool = False


# Budgets: hard limits sized from the H200 run of 2026-11-30 (data/gpucheck/) where a
# stage ran then, else from its work at the measured rates (data/results/README.md,
# "Sizing the GPU check"). Each plan's stages sum to at most the 315 s a 330 s call
# leaves after RESERVE_S.
STAGES = (
    Stage("wheels", 8, 5, "", always=True),
    Stage("env", 6, 120, "environment.json in report.json", always=True),
    Stage("data", 18, 120, "the synthetic sets in build/cache (not in the output)"),
    Stage("tests", 28, 240, "the log of pytest -m cuda"),
    Stage("profile", 28, 240, "layer_profile_<gpu>_{fp32,amp-fp16}_1024x512[_cl].json"),
    Stage("ladder", 110, 480, "ladder_<gpu>.json, rungs 0-4 (after every rung)"),
    Stage("compile", 85, 300, "rung 5 into ladder_<gpu>.json; compile_cache.tar.gz"),
    Stage("nb06", 25, 240, "06_will_amp_help.ipynb"),
    Stage("nb01", 18, 180, "01_floating_point.ipynb"),
    Stage("nb02", 30, 180, "02_tensor_cores.ipynb, tensor_cores_<gpu>.json"),
    Stage("nb03", 75, 300, "03_amp_training.ipynb, train_<gpu>_*.json (every epoch)"),
    Stage("loader", 25, 180, "loader_<gpu>.json"),
    Stage("nb04", 58, 240, "04_loss_scaling.ipynb"),
    Stage("nb05", 72, 300, "05_rtx3070.ipynb"),
    # in no plan (--stages nb07): chapter 7 on the GPU, its own small ladder
    Stage("nb07", 45, 300, "07_making_amp_pay.ipynb"),
)
STAGE_NAMES = tuple(s.name for s in STAGES)
PLANS = {
    "A": ("wheels", "env", "data", "tests", "profile", "ladder", "compile", "nb06"),
    "B": ("wheels", "env", "data", "nb01", "nb02", "nb03", "loader", "nb04", "nb05"),
}

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
            "rungs": (0, 1, 2, 3, 4),
            "modes": ("fp32-tf32", "amp-fp16", "amp-bf16", "fp32"),
            "compile_modes": ("amp-fp16", "fp32-tf32"),
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
            "rungs": (0, 4),
            # two precisions, two processes, as on the GPU; a CPU without native bf16
            # runs amp-bf16 several times slower, so the dry run takes fp32 twice
            "modes": ("fp32-tf32", "fp32"),
            "compile_modes": ("fp32-tf32",),
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


def slug(device_name: str) -> str:
    """A file-name piece for a device: ``NVIDIA H200`` -> ``h200``."""
    s = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    s = re.sub(r"^(nvidia-)?(geforce-)?", "", s)
    return s or "device"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------
# the stages (each runs in a child process: python -m ampbook.gpucheck --stage-child
# NAME)
# --------------------------------------------------------------------------------------


def _device_name() -> str:
    from ampbook.env import environment

    return environment("auto")["device_name"]


def stage_env(work: Path, dry: bool) -> None:
    from importlib import metadata

    from ampbook.env import environment_report, format_environment

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
    files = cuda_test_files()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "cuda",
        "-q",
        "-rs",
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
        read_source,
    )
    from ampbook.paths import NOTEBOOKS_DIR

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

        from ampbook.paths import PROFILES_FILE

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
    from ampbook.synthetic import synthetic_root

    for train, val, height, width in data_sets(dry):
        start = time.perf_counter()
        root = synthetic_root(train, val, height=height, width=width)
        print(
            f"synthetic set {train} train + {val} val at {width}x{height}: {root} "
            f"[{time.perf_counter() - start:.1f} s]",
            flush=True,
        )


def stage_profile(work: Path, dry: bool) -> None:
    """Per-module time of the step, fp32 (TF32) and amp-fp16, NCHW then channels_last
    with cudnn.benchmark (file names ending ``_cl``)."""
    import inspect

    import torch

    from ampbook.layer_profile import profile_layers, save_json

    s = STAGE_SIZES["dry" if dry else "gpu"]["profile"]
    if not dry and not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA device: the profile stage needs one (use --dry-run on a CPU)"
        )
    layouts = [False]
    if "channels_last" in inspect.signature(profile_layers).parameters:
        layouts.append(True)
    else:
        print("profile_layers has no channels_last: NCHW only", flush=True)
    for channels_last in layouts:
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


def _ladder_spec(dry: bool, compile_stage: bool):
    from ampbook.bench_ladder import LadderSpec

    s = dict(STAGE_SIZES["dry" if dry else "gpu"]["ladder"])
    modes = s.pop("compile_modes") if compile_stage else s["modes"]
    s.pop("compile_modes", None)
    s["modes"] = tuple(modes)
    s["rungs"] = (5,) if compile_stage else tuple(s["rungs"])
    return LadderSpec(device="cpu" if dry else "cuda", **s)


def stage_ladder(work: Path, dry: bool, compile_stage: bool = False) -> None:
    """The ladder (rungs 0-4), or its compiled rung added to the same file: each
    precision in its own process, every finished rung written at once."""
    import torch

    from ampbook.bench_ladder import (
        format_table,
        format_targets,
        ladder_path,
        run_ladder,
    )

    if not dry and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: the ladder stage needs one")
    spec = _ladder_spec(dry, compile_stage)
    path = ladder_path(work / "results", _device_name())
    if compile_stage:
        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        print(f"compile cache: {cache}", flush=True)
    ladder = run_ladder(spec, path, "precision", merge=compile_stage or path.exists())
    print(format_table(ladder), flush=True)
    print(format_targets(ladder), flush=True)  # issue 18's targets, one by one


def stage_loader(work: Path, dry: bool) -> None:
    from ampbook.bench_loader import format_table
    from ampbook.layer_profile import loader_record, save_json
    from ampbook.synthetic import synthetic_root

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
    elif name == "profile":
        stage_profile(work, dry)
    elif name == "ladder":
        stage_ladder(work, dry)
    elif name == "compile":
        stage_ladder(work, dry, compile_stage=True)
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
    budget_s: float
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
    plan: str | None = None

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
        if name == "compile":
            env = dict(self.env)
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR_CACHE))
            if self.dry_run:  # a CPU compiles ERFNet in minutes: the plumbing only
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
            cli._state["signal"] = signum  # 143 for SIGTERM, 130 for Ctrl-C
            raise Terminated()

        signal.signal(signal.SIGTERM, terminate)
        signal.signal(signal.SIGINT, terminate)  # Ctrl-C ends the check alike
        # The selected stages share the budget in the proportions of their own budgets,
        # and each stage's share is taken of what is left when it starts: the full check
        # at 480 s gets them as written, a rerun of a few stages gets more each, and a
        # stage that ends early leaves its time to the ones after it.
        pending = sum(st.budget_s for st in STAGES if st.name in self.selected)
        self.log(
            f"ampbook.gpucheck {'--dry-run ' if self.dry_run else ''}"
            + (f"plan {self.plan}, " if self.plan else "")
            + f"budget {self.budget_s:.0f} s, "
            f"stages {', '.join(self.selected)}; work folder {self.work}"
        )
        for stage in STAGES:
            if stage.name not in self.selected:
                self.results.append(StageResult(stage.name, 0.0, status="not selected"))
                continue
            if self.dry_run:
                budget = stage.dry_budget_s
            else:
                budget = stage.budget_s / pending * max(self.left(), 0.0)
            pending -= stage.budget_s
            res = StageResult(stage.name, round(budget, 1), writes=stage.writes)
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
            if timeout < MIN_STAGE_S:
                res.status, res.detail = (
                    "skipped",
                    f"only {max(self.left(), 0):.0f} s of the budget left",
                )
                self.log(f"== {stage.name}: skipped ({res.detail})")
                self.finish_stage(res)
                continue
            self.log(
                f"== {stage.name} (budget {timeout:.0f} s, "
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
                self.finish_stage(res, final=True)
                self.log_file.close()
                shutil.rmtree(self.work, ignore_errors=True)
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
        self.log_file.close()
        shutil.rmtree(self.work, ignore_errors=True)
        return 0 if not bad else 1

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
            self.archive_compile_cache()
        env_file = self.work / "environment.json"
        report = {
            "check": "ampbook.gpucheck",
            "dry_run": self.dry_run,
            "plan": self.plan,
            "budget_s": self.budget_s,
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
        }
        tmp = self.out / ".report.json.tmp"
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        os.replace(tmp, self.out / "report.json")

    def archive_compile_cache(self) -> None:
        """TorchInductor's cache as ``compile_cache.tar.gz`` (paths relative to
        ``build/inductor-cache``), when there is one and it fits a file of the
        output."""
        if self.dry_run:  # TORCH_COMPILE_DISABLE=1: nothing was compiled
            self.log("--dry-run: nothing compiled, no compile cache to archive")
            return
        cache = Path(self.env.get("TORCHINDUCTOR_CACHE_DIR", INDUCTOR_CACHE))
        files = (
            sorted(p for p in cache.rglob("*") if p.is_file()) if cache.is_dir() else []
        )
        if not files:
            self.log(f"no compile cache in {cache} to archive")
            return
        self._archive(COMPILE_ARCHIVE, [(p, str(p.relative_to(cache))) for p in files])
        self.log(f"compile cache: {len(files)} files from {cache} -> {COMPILE_ARCHIVE}")

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
    from ampbook.costmodel import Ceilings, predict, trace_step
    from ampbook.devices import load_devices
    from ampbook.model import ERFNet

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
        raise ValueError(
            f"unknown stage(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(STAGE_NAMES)}"
        )
    chosen = set(names) | {s.name for s in STAGES if s.always}
    return tuple(n for n in STAGE_NAMES if n in chosen)


def default_budget(selected: tuple[str, ...], dry_run: bool) -> float:
    """A call's budget: ``DEFAULT_BUDGET_S`` on a GPU; in a dry run the selected
    stages' dry budgets and the reserve (a loaded CPU takes what it takes)."""
    if not dry_run:
        return DEFAULT_BUDGET_S
    return sum(s.dry_budget_s for s in STAGES if s.name in selected) + RESERVE_S


def select_stages(plan: str | None, stages: str | None) -> tuple[str, ...]:
    """The stages of ``--plan`` (A or B), or of ``--stages`` (which wins); one of the
    two is needed."""
    if stages:
        return parse_stages(stages)
    if plan is None:
        raise ValueError(
            "give --plan A or --plan B (the two calls of a lease), or --stages a,b"
        )
    key = plan.strip().upper()
    if key not in PLANS:
        raise ValueError(f"unknown plan {plan!r}; choose A or B")
    return PLANS[key]


@cli.command("python -m ampbook.gpucheck")
def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(
        prog="python -m ampbook.gpucheck", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--out", help="folder for report.json, the log and the archives"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
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
        "--plan",
        default=None,
        help="A (tests, profiles, the ladder, compiled rung, chapter 6) or B "
        "(chapters 1-5, the loader sweep): the two calls of a lease",
    )
    parser.add_argument(
        "--stages",
        default=None,
        help="comma-separated stages to run instead of a plan "
        f"({','.join(STAGE_NAMES)}); wheels and env always run",
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
        help="print the cost model's step times the budgets were sized from, and exit",
    )
    parser.add_argument("--stage-child", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage_child:
        run_stage_child(args.stage_child, Path(args.work), args.dry_run)
        return 0
    if args.list_wheels:
        print("\n".join(f"{k}=={v}" for k, v in wheel_closure().items()))
        return 0
    if args.sizing:
        for key, label, step_s in sizing():
            print(
                f"{key:<16} {label:<18} {step_s * 1e3:7.1f} ms per step "
                "(1024x512, batch 6; lower bound)"
            )
        return 0
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
        selected = select_stages(args.plan, args.stages)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    budget = args.budget_s or default_budget(selected, args.dry_run)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"error: --out {out} exists and is not a folder", file=sys.stderr)
        return 2
    check_out(out)
    return Check(
        out,
        budget,
        args.dry_run,
        selected,
        wheel_dir=Path(args.wheels),
        plan=args.plan.upper() if args.plan and not args.stages else None,
    ).run()


if __name__ == "__main__":
    sys.exit(main())
