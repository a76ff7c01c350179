"""Running the ladder (``run_ladder``: its groups in this process or each in a child
process, ``--child JOB``, the group as JSON) and its command, ``python -m
ampbook.bench ladder``."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Callable

from ampbook.chapters.ch7 import rungs as bl
from ampbook.chapters.ch7.ladder_measure import measure_safely
from ampbook.chapters.ch7.ladder_report import NOT_SPLIT, format_table, format_targets
from ampbook.chapters.ch7.rungs import LadderError, LadderSpec
from ampbook.core import cli
from ampbook.core.words import plural
from ampbook.results import LADDER_SCHEMA, Ladder, read_ladder


def plan(
    rungs: tuple[int, ...], modes: tuple[str, ...], isolate: str
) -> list[tuple[str, tuple[int, ...]]]:
    """The groups to run as (mode, rungs): a process per mode (``precision``), or a
    group per cell, the modes taking turns at each rung (``cell``: a process each;
    ``none``: all here, so a ladder stopped part-way has both modes of each rung)."""
    if isolate in ("cell", "none"):
        return [(m, (r,)) for r in rungs for m in modes]
    return [(m, tuple(rungs)) for m in modes]


def _log_cell(cell: dict, log: Callable[[str], None]) -> None:
    """A cell measured whole (or failed): one result line (the table repeats it)."""
    head = f"rung {cell['rung']} {cell['mode']:<9}"
    if cell["status"] != "ok" or cell.get("epoch") == "error":
        text = f"{head} error: {cell['error']}"
        if cell["status"] == "ok":
            step = f"step {cell['step_s'] * 1e3:7.2f} ms"
            text = f"{head} {step}; epochs: {cell['epoch_error']}"
        width = max(40, shutil.get_terminal_size((80, 24)).columns - 1)  # 80 off one
        return log(textwrap.fill(text, width, subsequent_indent="    "))
    busy = cell["kernel_s"] / cell["step_s"]  # above 1: the table's n/a
    log(
        f"{head} step {cell['step_s'] * 1e3:7.1f} ms, busy "
        f"{f'{busy:.0%}' if busy <= 1 else NOT_SPLIT:>4}, "
        f"{cell['images_per_s']:6.1f} img/s, wait {cell['data_wait_share']:4.0%}, "
        f"bound {cell['bound_share']:4.0%}"
    )


# How a cell's progress line (its step measured, its epochs to come) ends: the line
# ``progress_log`` shows on a terminal only, not a result.
PARTIAL_END = "its epochs next"


def run_group(
    spec: LadderSpec, mode: str, rungs: tuple[int, ...], path: Path, log=print
) -> None:
    """Measure ``rungs`` of ``mode`` here, each cell written after step and epochs."""

    def partial(c: dict) -> None:
        bl.add_cell(path, c)
        log(
            f"rung {c['rung']} {c['mode']}: step {c['step_s'] * 1e3:.2f} ms, "
            f"first step {c['first_step_s']:.1f} s; {PARTIAL_END}"
        )

    # A cell starts and ends with a full collection: what lives now is frozen out of
    # them (each walks torch's objects, 0.2 s on a CPU), unless the caller froze it.
    ours = gc.get_freeze_count() == 0
    if ours:
        gc.collect()
        gc.freeze()
    try:
        for index in rungs:
            cell = measure_safely(spec, index, mode, partial)
            bl.add_cell(path, cell)
            _log_cell(cell, log)
    finally:
        if ours:
            gc.unfreeze()


def _child(spec: LadderSpec, mode: str, rungs: tuple[int, ...], path: Path, log):
    """Run one group in a fresh process; a group that dies leaves error cells."""
    job = {"spec": dataclasses.asdict(spec), "mode": mode, "rungs": list(rungs),
           "path": str(path)}  # fmt: skip
    argv = [sys.executable, "-m", "ampbook.bench", "ladder", "--child", json.dumps(job)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")  # fmt: skip
    tail = []
    for line in proc.stdout:
        tail = (tail + [line.rstrip("\n")])[-5:]
        log(tail[-1])
    rc = proc.wait()
    if rc != 0:
        done = {(c["rung"], c["mode"]) for c in json.loads(path.read_text())["cells"]}
        last = next((t for t in reversed(tail) if t.strip()), "")
        error = f"its process ended with exit {rc} before this cell was measured: "
        for index in (r for r in rungs if (r, mode) not in done):
            cell = {"rung": index, "mode": mode, "status": "error"}
            bl.add_cell(path, {**cell, "error": error + last.strip()[:300]})


def run_ladder(spec: LadderSpec, path: Path, isolate: str = "precision",
               merge: bool = False, log: Callable[[str], None] = print,
               skip_finished: bool = False) -> Ladder:  # fmt: skip
    """Measure the ladder into ``path`` (written after every cell); with ``merge``
    and ``skip_finished``, the cells ``path`` holds whole are not measured again."""
    from ampbook.core.devices import pick_device
    from ampbook.core.env import environment

    spec.check()
    dev = pick_device(spec.device)
    spec = dataclasses.replace(spec, device=str(dev))
    record = bl.new_record(spec, environment(dev), isolate)
    if merge and path.exists():
        old = json.loads(path.read_text())
        if not bl._same_setting(old, record):
            raise LadderError(
                f"--merge: {path} holds another device or size; write to another "
                "file or leave out --merge"
            )
        old["status"], old["updated"] = "running", bl._now()
        record = old
    bl.write_record(record, path)
    whole = [c for c in record["cells"] if c.get("epoch", "measured") == "measured"]
    # with skip_finished, the cells measured whole (step and epochs) are not redone
    done = {
        (c["rung"], c["mode"]) for c in whole if skip_finished and c["status"] == "ok"
    }
    for mode, rungs in plan(spec.rungs, spec.modes, isolate):
        rungs = tuple(r for r in rungs if (r, mode) not in done)
        if not rungs:
            continue
        if isolate == "none":
            run_group(spec, mode, rungs, path, log)
        else:
            _child(spec, mode, rungs, path, log)
    record = json.loads(path.read_text())
    record["status"], record["updated"] = "complete", bl._now()
    bl.write_record(record, path)
    return read_ladder(record, str(path))


def build_spec(args) -> tuple[LadderSpec, str, list[str]]:
    """The spec, the isolation and notes from parsed arguments (``LadderError``)."""
    from ampbook.core.devices import pick_device

    try:
        dev = pick_device(args.device)
    except (RuntimeError, ValueError) as err:
        raise LadderError(str(err)) from None
    notes = []
    modes = bl.parse_modes(args.precisions) if args.precisions else None
    if dev.type != "cuda" and modes and "fp32-tf32" in modes:
        modes = tuple(m for m in modes if m != "fp32-tf32")
        notes.append("fp32-tf32 left out: TF32 does nothing on a CPU (fp32 is it)")
        if not modes:
            raise LadderError("--precisions: nothing left to measure on a CPU")
    names = [f[2:].replace("-", "_") for f, _, _ in SIZE_OPTIONS] + ["compile_mode"]
    sizes = {name: getattr(args, name) for name in names}
    rungs = bl.parse_rungs(args.rungs) if args.rungs else None
    spec = LadderSpec.for_device(
        dev.type, device=str(dev), rungs=rungs, modes=modes, **sizes
    )
    spec.check()
    isolate = args.isolate or ("precision" if dev.type == "cuda" else "none")
    return spec, isolate, notes


# What each --isolate runs in, as the command's first line says it.
ISOLATION = {"none": "all in this process", "precision": "a process per precision",
             "cell": "a process per rung and precision"}  # fmt: skip


# The size and length options: (flag, type, help); each default is the spec's, on a
# GPU and on a CPU (``CPU_DEFAULTS``).
SIZE_OPTIONS = (
    ("--height", cli.positive_int, "image height"),
    ("--width", cli.positive_int, "image width"),
    ("--batch-size", cli.positive_int, "images per step"),
    ("--steps", cli.positive_int, "timed steps per rung and precision"),
    ("--warmup", cli.nonnegative_int, "untimed steps before them"),
    ("--profile-steps", cli.positive_int, "steps under torch.profiler for the "
     "kernel/idle split"),
    ("--epochs", cli.positive_int, "epochs through the runner, at least 2: the first "
     "warms up"),
    ("--train-images", cli.positive_int, "synthetic training images of an epoch"),
)  # fmt: skip


def _epilog() -> str:
    cpu, gpu = bl.CPU_DEFAULTS, LadderSpec()
    return (
        "rungs:\n"
        + "\n".join(f"  {r.index}  {r.title}" for r in bl.RUNGS)
        + "\n\ndefaults: on a GPU the post's setting ("
        f"{gpu.width}x{gpu.height}, batch {gpu.batch_size}), rungs "
        f"{bl.rung_range()}, {', '.join(bl.GPU_MODES)}; on a CPU "
        f"rungs {' and '.join(map(str, cpu['rungs']))} at {cpu['width']}x"
        f"{cpu['height']}, batch {cpu['batch_size']}, {' and '.join(bl.CPU_MODES)}, "
        f"{cpu['steps']} timed steps, {plural(bl.CPU_THREADS, 'torch thread')}: "
        f"{bl.CPU_MINUTE}. On a terminal, progress and the time left are printed "
        "(stderr) after each rung and precision."
    )


def build_parser() -> cli.ArgumentParser:
    """The command's options (light: ``--help`` imports no torch)."""
    import argparse

    cpu, gpu, span = bl.CPU_DEFAULTS, LadderSpec(), bl.rung_range()
    parser = cli.ArgumentParser(
        prog="python -m ampbook.bench ladder",
        description="The ladder: the training step from the ERFNet authors' "
        "defaults to the optimised one, one change per rung, in every precision: "
        "step time, kernel and idle time, peak memory, an epoch and the roofline "
        "bound of each rung and precision.",
        epilog=_epilog(),
        formatter_class=cli.HelpFormatter,
    )
    add = parser.add_argument
    # fmt: off
    add("--device", default="auto", help="auto (CUDA where there is one), cpu or "
        "cuda; it sets the defaults below")
    add("--rungs", default=None, metavar="LIST", help=f"e.g. {span} or 0,2, rung "
        f"names or {', '.join(bl.RUNG_SETS)} (default: {span} on a GPU, "
        f"{','.join(map(str, cpu['rungs']))} on a CPU)")
    add("--precisions", default=None, metavar="LIST", help="comma-separated modes "
        f"from {', '.join(bl.MODE_SETTINGS)} (default: all four on a GPU, "
        f"{','.join(bl.CPU_MODES)} on a CPU)")
    for flag, kind, text in SIZE_OPTIONS:
        name = flag[2:].replace("-", "_")
        on_gpu, on_cpu = getattr(gpu, name), cpu[name]
        where = "" if on_gpu == on_cpu else f" on a GPU, {on_cpu} on a CPU"
        add(flag, type=kind, default=None, help=f"{text} (default: {on_gpu}{where})")
    add("--compile-mode", default=None, help="the compiled rungs' torch.compile mode "
        f"(default: {bl.COMPILE_MODE!r})")
    add("--isolate", choices=("none", "precision", "cell"), default=None,
        help="what runs in a process of its own: each precision, each rung and "
        "precision (cell), or nothing (none: all in this one) (default: precision "
        "on a GPU, none on a CPU)")
    add("--json", default=None, metavar="PATH", help="write the record to PATH, or "
        "to ladder_<gpu>.json in the folder PATH")
    add("--merge", action="store_true", help="add the cells to the --json record of "
        "the same device and size")
    add("--threads", type=cli.positive_int, default=None, help="torch threads "
        f"(default: torch's on a GPU, {bl.CPU_THREADS} on a CPU)")
    add("--show", metavar="FILE", default=None, help="print a written ladder's table "
        "(and a GPU's, the targets one by one); measure nothing")
    add("--child", help=argparse.SUPPRESS)
    # fmt: on
    return parser


@cli.command("python -m ampbook.bench ladder")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        job = json.loads(args.child)
        spec = LadderSpec(**job["spec"])
        spec.rungs, spec.modes = tuple(spec.rungs), tuple(spec.modes)
        run_group(spec, job["mode"], tuple(job["rungs"]), Path(job["path"]))
        return 0
    if args.show:  # the table of a ladder already written (and a GPU's targets)
        from ampbook.results import ResultsError

        path = Path(args.show)
        try:
            ladder = read_ladder(json.loads(cli.read_text(path, "--show")), str(path))
        except (ValueError, ResultsError) as err:
            cli.say(
                f"--show {path}: not a readable ladder record ({err}); give a "
                "ladder_<gpu>.json written by python -m ampbook.bench ladder --json"
            )
            return 2
        _print_ladder(ladder)
        return 0
    try:
        spec, isolate, notes = build_spec(args)
    except LadderError as err:
        cli.say(str(err))
        return 2
    threads = args.threads or (None if spec.is_cuda else bl.CPU_THREADS)
    with torch_threads(threads):
        return _run(args, spec, isolate, notes)


def progress_log(total: int, stream=None) -> Callable[[str], None]:
    """``print`` for a result line; on a terminal's ``stream`` (``cli.Progress``), a
    cell's progress line (``PARTIAL_END``) and the count and time left after each."""
    progress = cli.Progress("ladder", stream=stream)
    progress.start()
    done = 0

    def log(line: str) -> None:
        nonlocal done
        if line.endswith(PARTIAL_END):
            return progress(line)
        print(line, flush=True)
        if line.lstrip().startswith("rung "):
            done += 1
            progress.count("cells", done, total)

    return log


def _print_ladder(ladder: Ladder) -> None:
    """The table, and for a GPU's ladder the targets (a CPU's would read as misses)."""
    print(format_table(ladder))
    if ladder.is_cuda:
        print()
        print(format_targets(ladder))


@contextlib.contextmanager
def torch_threads(n: int | None):
    """torch's intra-op threads set to ``n`` (and ``OMP_NUM_THREADS``, for the
    processes it starts) for the duration, then put back (``None``: left alone)."""
    import torch

    before, env = torch.get_num_threads(), dict(os.environ)
    if n is not None:
        torch.set_num_threads(n)
        os.environ["OMP_NUM_THREADS"] = str(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        os.environ.clear()
        os.environ.update(env)


def _run(args, spec: LadderSpec, isolate: str, notes: list[str]) -> int:
    from ampbook.core.env import environment
    from ampbook.measure.timing import load_verdict, machine_load

    env = environment(spec.device)
    if args.json:
        path = cli.check_output_file(
            bl.ladder_path(args.json, env["device_name"]), "--json", kind=LADDER_SCHEMA
        )
    else:
        path = Path(tempfile.mkdtemp(prefix="ampbook-ladder-")) / "ladder.json"
    load = load_verdict(machine_load(), "cuda" if spec.is_cuda else "cpu")
    head = (
        f"ladder on {env['device_name']} ({spec.device}), {spec.width}x{spec.height}, "
        f"batch {spec.batch_size}; rungs {','.join(map(str, spec.rungs))}; "
        f"{', '.join(spec.modes)}; {ISOLATION[isolate]}; {load}"
    )
    for line in [head] + [f"note: {note}" for note in notes]:
        print(cli.terminal_text(line))
    log = progress_log(len(spec.rungs) * len(spec.modes))
    try:
        ladder = run_ladder(spec, path, isolate, args.merge, log=log)
    except LadderError as err:
        cli.say(str(err))
        return 2
    print()
    _print_ladder(ladder)
    if args.json:
        print(f"\nwrote {path}")
    errors = [c for c in ladder.cells if not c.ok]
    return 1 if errors and len(errors) == len(ladder.cells) else 0
