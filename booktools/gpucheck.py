"""The GPU check: everything the book measures on a CUDA machine, in one call that fits
one 15-minute lease, the most valuable measurements first.

    python3 -m booktools.gpucheck --lease --out DIR [--budget-s 560] [--dry-run]
    python3 -m booktools.gpucheck --stages ladder,compile --budget-s S --out DIR (a rerun)

Run from the repository root with the machine's own ``python3`` (no virtual environment
needed). ``--lease`` runs every stage (``gpuplan.STAGES``, in that order) in one
process tree under one budget; each stage runs in its own process under a hard time
limit, its share (``Stage.share_s``) sized from the last H200 lease's logs
(``data/gpucheck/``) and a measured CPU proxy (the table beside ``STAGES``;
DEVELOPING.md, "The GPU check on a lent machine"):

* ``wheels``: install the wheels carried in ``.whl/`` (``make gpu-wheels``) into the
  work folder when papermill, jupytext, ipykernel... are not importable (not in
  ``--dry-run``);
* ``env``: the environment (``ampbook.core.env``, nvidia-smi, package versions);
* ``data``: the synthetic Cityscapes sets the later stages read (``build/cache``);
* ``ladder``: chapter 7's ladder (``ampbook.chapters.ch7.rungs``), fp32 with TF32 and
  amp-fp16, rungs 0 to 4, rung by rung (the two modes take turns at each rung);
* ``compile``: rung 5 (``torch.compile``), amp-fp16 then TF32; the compile cache saved
  through ``torch.compiler.save_cache_artifacts()`` as ``compile_cache.bin``;
* ``profile-cl``: the per-module GPU time of the step in channels_last with
  cudnn.benchmark (``booktools.layers``), TF32 and amp-fp16;
* ``ladder-extra``: amp-bf16 and strict fp32 at rungs 0 and 4;
* ``tests``: ``pytest -m cuda -v -rA --durations=0`` with a per-test timeout;
* the chapters and the rest: ``nb06``, ``loader`` (DataLoader images/s at 0-12
  workers), ``nb04``, ``nb05``, ``nb02``, ``nb01``, ``nb03`` (the chapters with the
  ``gpucheck`` profile through ``booktools.run``), then what is already committed
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
* ``notebooks.tar.gz``: the executed notebooks (``booktools.book --executed``);
* ``compile_cache.bin``: the compile stage's cache artifacts (put it at
  ``build/compile_cache.bin`` and carry it: the next lease's compile stage loads it);
  left out, with a line in the log saying why, when nothing was compiled or it passes
  16 MiB.

Exit status 0 when every selected stage is ok, 1 otherwise, 2 for bad arguments, 143 on
SIGTERM. ``--wheels DIR`` names another wheel folder; ``--list-wheels`` prints the wheel
list from the installed packages (``gpu-wheels.txt``); ``--sizing`` prints the cost
model's step times and the stages' shares beside what they were sized from.

This module holds the stages' bodies (each run in a child process) and the command;
``booktools.gpuplan`` the stages, their shares and sizes and the budget rule,
``booktools.gpulease`` the parent process (``Check``), ``booktools.gpuwheels``
the carried wheels.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from booktools.gpulease import MAX_FILE_BYTES, Check
from booktools.gpuplan import (
    CARRIED_COMPILE_CACHE,
    CHECK_PROFILE,
    COMPILE_CACHE,
    DEFAULT_BUDGET_S,
    LADDER_STAGES,
    LEASE_LEFT_S,
    MIN_STAGE_S,
    NOTEBOOKS,
    PYTEST_TIMEOUT_S,
    RESERVE_S,
    STAGE_NAMES,
    STAGE_SIZES,
    WORK_DIR,
    default_budget,
    select_stages,
    sizing_table,
)
from booktools.gpuwheels import WHEEL_DIR, wheel_closure
from ampbook.core import cli
from ampbook.core.paths import REPO_ROOT
from ampbook.core.words import slug

# --------------------------------------------------------------------------------------
# the stages (each runs in a child process: python -m booktools.gpucheck --stage-child
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
    from booktools.run import (
        execute,
        load_profiles,
        parameters_cell,
        profile_parameters,
    )
    from booktools.sources import read_source
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

    from booktools.layers import profile_layers, save_json

    s = STAGE_SIZES["dry" if dry else "gpu"]["profile"]
    if not dry and not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA device: the profile stage needs one (use --dry-run on a CPU)"
        )
    if (
        channels_last
        and "channels_last" not in inspect.signature(profile_layers).parameters
    ):
        raise RuntimeError("this booktools.layers has no channels_last")
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
    from ampbook.chapters.ch7.rungs import LadderSpec

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

    from ampbook.chapters.ch7.ladder_report import format_table, format_targets
    from ampbook.chapters.ch7.ladder_run import run_ladder
    from ampbook.chapters.ch7.rungs import RUNGS, LadderError, ladder_path

    if not dry and not torch.cuda.is_available():
        raise RuntimeError(f"no CUDA device: the {stage} stage needs one")
    spec = _ladder_spec(dry, stage)
    path = ladder_path(work / "results", _device_name())
    compiled = [i for i in spec.rungs if RUNGS[i].compiles]
    if compiled:
        print(f"TorchInductor cache: {os.environ.get('TORCHINDUCTOR_CACHE_DIR')}")
        if os.environ.get("TORCH_COMPILE_DISABLE") == "1":
            print(f"TORCH_COMPILE_DISABLE=1: rungs {compiled} run eager", flush=True)
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
    from booktools.layers import loader_record, save_json
    from ampbook.chapters.ch5.bench_loader import format_table
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


def sizing(
    precisions: tuple[str, ...] = ("fp32", "amp-fp16", "amp-bf16"),
) -> list[tuple[str, str, float]]:
    """The cost model's lower bound of one training step at the post's setting
    (1024x512, batch 6) on the H200 and the RTX 3070: (device key, precision and TF32,
    seconds), for each of ``precisions`` (one trace each, seconds of CPU)."""
    from ampbook.core.devices import load_devices
    from ampbook.predict.roofline import Ceilings, predict
    from ampbook.predict.steptrace import trace_step
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


def build_parser() -> cli.ArgumentParser:
    """The command's options."""
    parser = cli.ArgumentParser(
        prog="python -m booktools.gpucheck",
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog="examples:\n"
        "  python3 -m booktools.gpucheck --lease --out DIR    (a lease)\n"
        "  python3 -m booktools.gpucheck --stages ladder,compile --budget-s S "
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


@cli.command("python -m booktools.gpucheck")
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
        cli.say(
            "--plan is gone: the whole lease is one call now, "
            "python3 -m booktools.gpucheck --lease --out DIR"
        )
        return 2
    if not args.out:
        cli.say(
            "--out DIR is required (the folder the report and results are written to)"
        )
        return 2
    if args.budget_s is not None and not (
        RESERVE_S + MIN_STAGE_S < args.budget_s < float("inf")
    ):
        cli.say(
            f"--budget-s must be more than {RESERVE_S + MIN_STAGE_S:.0f} s, "
            f"got {args.budget_s:g}"
        )
        return 2
    try:
        selected = select_stages(args.lease, args.stages)
    except ValueError as err:
        cli.say(str(err))
        return 2
    budget = args.budget_s or default_budget(selected, args.dry_run)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        cli.say(f"--out {out} exists and is not a folder")
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


if __name__ == "__main__":
    sys.exit(main())
