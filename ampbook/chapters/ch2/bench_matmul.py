"""``python -m ampbook.bench matmul``, the tensor-core benchmark: bf16/fp32 and
fp16/fp32 matmul speed (tf32 and fp8 on a GPU that has them), the penalty of a size
one off a multiple of 8, and the fp16/fp32 bandwidth of an add, side by side.
``save_record`` keeps them as ``data/results/tensor_cores_<name>.json`` (schema
``ampbook.tensor_cores/1``, ``results.sweeps.validate_matmul``): the environment, the
device_key (null if unlisted), rows of ``TimingResult.to_dict()`` for ``matmul``,
``shapes`` (with ``base``) and ``elementwise``, and what was ``skipped``.
"""

from __future__ import annotations

import datetime as _dt
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ampbook.chapters.ch2.bench_sweeps import (
    elementwise_sweep,
    matmul_sweep,
    read_from,
    shape_cliff,
    shape_penalties,
    supported_dtypes,
)
from ampbook.core import cli
from ampbook.results.schema import MATMUL_SCHEMA
from ampbook.results.sweeps import validate_matmul

if TYPE_CHECKING:  # torch is imported where it is used: --help answers without it
    import torch

RESULTS_PATTERN = "tensor_cores_*.json"  # named by ch2.records_verdict


def roofline_ceilings(
    entry, best: dict[str, dict], ew_rows: Sequence[dict], cache_bytes: int
) -> dict:
    """Compute ceilings (TFLOP/s per dtype) and a bandwidth ceiling (GB/s): the
    published peaks of ``entry`` (a devices.yml Device), else the best rates measured
    (adds read from memory where there are any)."""
    if entry is not None:
        compute = {d: entry.peak_tflops(d.split("_")[0]) for d in best}
        compute = {d: v for d, v in compute.items() if v}
        return {
            "compute": compute,
            "bandwidth": entry.mem_bandwidth_gbs,
            "kind": f"published peaks of the {entry.name}",
        }
    dram = [r for r in ew_rows if read_from(r, cache_bytes) == "memory"]
    kind = "best rates measured in this run" + (
        "" if dram else " (all adds fit in cache)"
    )
    compute = {d: r["tflops"] for d, r in best.items()}
    # The adds are held against the fp32 roof, which is at least as high as the
    # fastest add: a busy machine can slow the fp32 matmuls below it.
    fastest_add = max((r["tflops"] for r in ew_rows), default=0.0)
    if "fp32" in compute and fastest_add > compute["fp32"]:
        compute["fp32"] = fastest_add
        kind += "; fp32's compute ceiling raised to the fastest add"
    return {
        "compute": compute,
        "bandwidth": max(r["gbps"] for r in (dram or ew_rows)),
        "kind": kind,
    }


# --- Records ---


def make_record(
    device: str | torch.device,
    matmul: Sequence[dict] = (),
    shapes: Sequence[dict] = (),
    elementwise: Sequence[dict] = (),
    skipped: Sequence[dict] = (),
    profile: str | None = None,
) -> dict:
    """A results record (the format in this module's docstring)."""
    from ampbook.core.devices import device_for, pick_device
    from ampbook.core.env import environment
    from ampbook.measure.timing import machine_load

    dev = pick_device(device)
    entry = device_for(dev)
    record = {
        "schema": MATMUL_SCHEMA,
        "machine_load": machine_load(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "profile": profile,
        "environment": environment(dev),
        "device_key": entry.key if entry else None,
        "matmul": list(matmul),
        "shapes": list(shapes),
        "elementwise": list(elementwise),
        "skipped": list(skipped),
    }
    validate_matmul(record)
    return record


def save_record(record: dict, path: str | Path) -> Path:
    """Write a validated record as JSON (creating the folder)."""
    validate_matmul(record, str(path))
    return cli.save_result(path, record)


# --- The benchmark ---

# sizes, shape_sizes, numel, max_call_s per kind of run
DEFAULTS = {
    "cpu": ([64, 128, 256], [128, 512], [2**20, 2**24], 0.1),
    "cuda": ([1024, 4096, 8192], [4096, 8192], [2**24, 2**28], 1.0),
    "quick": ([32, 64], [64], [2**12, 2**16], 0.05),
}


def _fmt_ratio(r: float) -> str:
    if r >= 1:
        return f"{r:.2f}x (faster)"
    return f"{r:.3f}x ({1 / r:.1f}x slower)"


def report(record: dict, out=None) -> dict:
    """Print the ratios of a record; return them as a dict."""
    out = sys.stdout if out is None else out
    mm = {(r["dtype"], r["n"]): r for r in record["matmul"]}
    order = ["fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
    dtypes = sorted(
        {d for d, _ in mm}, key=lambda d: order.index(d) if d in order else len(order)
    )
    sizes = sorted({n for _, n in mm})
    env = record["environment"]
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(
        f"device: {env['device_name']} ({env['device']}); torch {env['torch']}; "
        f"threads {env['cpu_threads']}; cpu flags: "
        f"{', '.join(env.get('cpu_flags') or []) or '-'}"
    )
    load = record.get("machine_load") or {}
    if load.get("busy") and env["device"] == "cpu":
        p(
            f"WARNING: the machine was busy (load average {load['load1']:.1f} on "
            f"{load['cpus']} CPUs): "
            "CPU timings below are unreliable; rerun on an idle machine"
            + (
                " or with --threads 1 (a single thread does not wait on descheduled "
                "siblings)."
                if env["cpu_threads"] > 1
                else " (single-threaded: less affected, but it shares the CPU)."
            )
        )
    ratios = {"matmul": [], "shapes": [], "elementwise": []}
    p(
        "\nmatmul, square n x n x n (median per call; speed ratio = fp32 time / dtype "
        "time):"
    )
    head = f"{'n':>6} " + " ".join(f"{d + ' ms':>11}" for d in dtypes)
    others = [d for d in dtypes if d != "fp32"]
    p(head + "  " + "  ".join(f"{d + '/fp32 speed':>24}" for d in others))
    for n in sizes:
        cells = [
            f"{mm[(d, n)]['median_s'] * 1e3:11.4g}"
            if (d, n) in mm
            else f"{'skipped':>11}"
            for d in dtypes
        ]
        line = f"{n:>6} " + " ".join(cells)
        for d in others:
            if (d, n) in mm and ("fp32", n) in mm:
                r = mm[("fp32", n)]["median_s"] / mm[(d, n)]["median_s"]
                ratios["matmul"].append({"dtype": d, "n": n, "speed_vs_fp32": r})
                line += f"  {_fmt_ratio(r):>24}"
            else:
                line += f"  {'-':>24}"
        p(line)
    pens = shape_penalties(record["shapes"])
    if pens:
        p(
            "\noff-by-one shapes (TFLOP/s at the multiple of 8 / TFLOP/s one off; > 1 "
            "= odd size slower):"
        )
        for q in pens:
            p(
                f"  {q['dtype']:>5} n={q['n']:<6} vs {q['base']:<6} "
                f"{q['tflops'] * 1e3:9.4g} vs "
                f"{q['tflops_aligned'] * 1e3:9.4g} GFLOP/s  penalty {q['slowdown']:.3f}"
            )
            ratios["shapes"].append(q)
    ew = {(r["dtype"], r["numel"]): r for r in record["elementwise"]}
    if ew:
        p("\nelementwise z = x + y (GB/s counts reading x, y and writing z):")
        for numel in sorted({n for _, n in ew}):
            line = f"  numel {numel:>10}: " + ", ".join(
                f"{d} {ew[(d, numel)]['gbps']:.3g} GB/s "
                f"({ew[(d, numel)]['median_s'] * 1e3:.3g} ms)"
                for d in ("fp32", "fp16", "bf16")
                if (d, numel) in ew
            )
            p(line)
            if ("fp16", numel) in ew and ("fp32", numel) in ew:
                bw = ew[("fp16", numel)]["gbps"] / ew[("fp32", numel)]["gbps"]
                tr = ew[("fp16", numel)]["median_s"] / ew[("fp32", numel)]["median_s"]
                row = dict(numel=numel, bandwidth_fp16_over_fp32=bw)
                ratios["elementwise"].append(dict(row, time_fp16_over_fp32=tr))
                p(
                    f"  {'':>17} fp16/fp32 bandwidth ratio {bw:.2f}; fp16 takes "
                    f"{tr:.2f}x the fp32 time "
                    f"(half the bytes: 0.5 if both ran at the same bandwidth)"
                )
    for s in record["skipped"]:
        p(
            f"skipped {s['kind']} {s['dtype']} {s.get('n', s.get('numel'))}: "
            f"{s['reason']}"
        )
    return ratios


def run(
    device: str | torch.device = "auto",
    sizes=None,
    shape_sizes=None,
    numel=None,
    max_call_s=None,
    rounds: int = 2,
    quick: bool = False,
    dtypes=None,
    profile: str | None = "bench",
    **timing,
) -> dict:
    """Measure everything the report needs and return the record."""
    from ampbook.core.devices import pick_device

    dev = pick_device(device)
    kind = "quick" if quick else ("cuda" if dev.type == "cuda" else "cpu")
    given = (sizes, shape_sizes, numel)
    sizes, shape_sizes, numel = (g or d for g, d in zip(given, DEFAULTS[kind]))
    max_call_s = DEFAULTS[kind][3] if max_call_s is None else max_call_s
    if quick:
        timing = {"min_time": 0.01, "max_time": 0.1, **timing}
    dtypes = list(dtypes or supported_dtypes(dev))
    kw = {"device": dev, "rounds": rounds, **timing}
    matmul, skipped = matmul_sweep(sizes, dtypes, max_call_s=max_call_s, **kw)
    shapes, skipped2 = shape_cliff(
        shape_sizes,
        [d for d in dtypes if not d.startswith("fp8")],
        max_call_s=max_call_s,
        known=matmul,
        **kw,
    )
    ew_dtypes = [d for d in ("fp32", "fp16", "bf16") if d in dtypes or d == "fp32"]
    ew = elementwise_sweep(numel, ew_dtypes, **kw)
    return make_record(dev, matmul, shapes, ew, skipped + skipped2, profile=profile)


# The largest sizes the command takes: a square matmul of MAX_SIZE (three fp32
# matrices of 4 GiB each) and an element-wise call of MAX_NUMEL elements (8 GiB per
# fp32 tensor); beyond them the matrices would not fit most machines' memory, and a
# call would take minutes.
MAX_SIZE = 32768
MAX_NUMEL = 2**31


def check_sizes(sizes, shape_sizes, numel) -> None:
    """A ``cli.UserError`` naming a size over ``MAX_SIZE`` or ``MAX_NUMEL``."""
    for flag, values, most, square in (
        ("--sizes", sizes, MAX_SIZE, True),
        ("--shape-sizes", shape_sizes, MAX_SIZE, True),
        ("--numel", numel, MAX_NUMEL, False),
    ):
        big = [v for v in values or () if v > most]
        if big:
            v = big[0]
            what = f"a {v} x {v} fp32 matrix" if square else "an fp32 tensor of it"
            need = (v * v if square else v) * 4 / 2**30
            raise cli.UserError(
                f"{flag} {v}: the limit is {most} ({what} takes {need:,.0f} GiB); "
                "give smaller sizes"
            )


def build_parser() -> cli.ArgumentParser:
    """The options of ``python -m ampbook.bench matmul`` (no torch imported)."""
    ap = cli.ArgumentParser(
        prog="python -m ampbook.bench matmul",
        formatter_class=cli.HelpFormatter,
        description="Matmul and elementwise speed by dtype, side by side.",
    )
    ap.add_argument(
        "--device", default="auto", help="auto (CUDA if available), cpu or cuda"
    )
    for flag, metavar, what, most in (
        ("--sizes", None, "square matmul sizes for the dtype ratios", MAX_SIZE),
        ("--shape-sizes", "N", "multiples of 8 to compare with one off", MAX_SIZE),
        ("--numel", None, "elementwise sizes in elements", MAX_NUMEL),
    ):
        ap.add_argument(
            flag,
            type=cli.positive_int,
            nargs="+",
            metavar=metavar,
            help=f"{what} (at most {most})",
        )
    ap.add_argument(
        "--dtypes", nargs="+", help="matmul dtypes (default: all the device runs)"
    )
    ap.add_argument(
        "--rounds",
        type=cli.positive_int,
        default=2,
        help="interleaved rounds per point; the best is kept",
    )
    ap.add_argument(
        "--max-call-s",
        type=cli.positive_float,
        help="skip sizes whose predicted call is longer",
    )
    ap.add_argument(
        "--min-time",
        type=cli.positive_float,
        default=0.1,
        help="seconds measured per point (at least)",
    )
    ap.add_argument(
        "--threads",
        type=cli.positive_int,
        help="CPU threads for PyTorch (default: its own choice)",
    )
    ap.add_argument(
        "--quick", action="store_true", help="tiny sizes (seconds; for tests)"
    )
    ap.add_argument(
        "--save",
        help="write the record as JSON (e.g. data/results/tensor_cores_NAME.json)",
    )
    ap.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a --save file that exists and holds something else",
    )
    return ap


@cli.command("python -m ampbook.bench matmul")
def main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(list(argv) if argv is not None else None)
    check_sizes(args.sizes, args.shape_sizes, args.numel)
    import torch

    from ampbook.core.env import cpu_flags

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.save:  # checked before measuring, written after
        cli.check_output_file(
            args.save, "--save", kind=MATMUL_SCHEMA, overwrite=args.overwrite
        )
    t0 = time.perf_counter()
    try:
        record = run(
            args.device,
            args.sizes,
            args.shape_sizes,
            args.numel,
            args.max_call_s,
            rounds=args.rounds,
            quick=args.quick,
            dtypes=args.dtypes,
            **({} if args.quick else {"min_time": args.min_time}),
        )
    except (ValueError, RuntimeError) as e:
        cli.say(str(e))
        return 2
    report(record)
    print(
        f"\n(measured in {time.perf_counter() - t0:.1f} s; cpu flags "
        f"{cpu_flags() or '-'})"
    )
    if args.save:
        print(f"saved {save_record(record, args.save)}")
    return 0
