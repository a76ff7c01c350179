"""Matmul and elementwise speed by dtype: the measurements behind chapter 2, and its
benchmark.

    python -m ampbook.bench matmul [--device auto|cpu|cuda] [--sizes 64 128 256]
                                   [--shape-sizes 128 512] [--numel 16777216] [--rounds
                                   2] [--max-call-s 0.1] [--save
                                   data/results/tensor_cores_NAME.json]

prints, measured side by side in one run on this machine: the bf16/fp32 and fp16/fp32
matmul speed ratios at a few sizes, the penalty of a size one off a multiple of 8, and
the fp16/fp32 bandwidth ratio of an elementwise add. On a GPU the sizes default to large
ones and tf32 and fp8 join where the hardware has them.

The functions (``matmul_sweep``, ``shape_cliff``, ``elementwise_sweep``) are what the
chapter calls; ``make_record``/``save_record``/``load_records`` keep results as JSON so
that a GPU run can be committed to ``data/results/`` and shown in the book beside the
CPU it is built on.

Results file format (``data/results/tensor_cores_<name>.json``, schema
``ampbook.tensor_cores/1``)::

    {
      "schema": "ampbook.tensor_cores/1",
      "created": "2025-01-01T12:00:00+00:00",      # UTC, ISO 8601
      "profile": "gpu" | "cpu" | "smoke" | "bench" | null,
      "machine_load": {"load1", "cpus", "busy"},  # timing.machine_load() at the end
      "environment": {...},                        #
      ampbook.core.env.environment(device) "device_key": "h200-sxm" | null,
      # devices.yml entry, null if unlisted "matmul":      [ROW, ...],   # kind
      "matmul": dtype, n, m, k "shapes":      [ROW, ...],   # kind "matmul", plus "base"
      (the multiple of 8) "elementwise": [ROW, ...],   # kind "elementwise": dtype,
      numel "skipped":     [{"kind", "dtype", "n" or "numel", "reason"}, ...]
    }

where ROW is ``TimingResult.to_dict()``: ``median_s, p10_s, p90_s, q25_s, q75_s, min_s,
samples, number, warmup, buffers, flops, bytes_moved, tflops, gbps`` plus the fields
above. Times are seconds per call, rates use the median (TFLOP/s = 1e12 FLOP/s, GB/s =
1e9 B/s).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from ampbook.core import cli
from ampbook.core.paths import REPO_ROOT, RESULTS_DIR
from ampbook.core.words import plural
from ampbook.results.schema import MATMUL_SCHEMA as SCHEMA
from ampbook.results.sweeps import validate_matmul as validate_record

if TYPE_CHECKING:  # torch is imported where it is used: ``python -m ampbook.bench
    # matmul --help`` answers without it
    import torch

RESULTS_PATTERN = "tensor_cores_*.json"

# Timing settings for one point of a sweep: a few warm-up calls, at least 5 samples and
# `min_time` seconds, never more than `max_time` seconds of measurement.
SWEEP_TIMING = {"warmup": 2, "repeats": 5, "min_time": 0.1, "max_time": 1.0}


def supported_dtypes(device: str | torch.device = "auto") -> list[str]:
    """The matmul dtypes this device runs: fp32, fp16, bf16 on a CPU; on CUDA also tf32
    (compute capability 8.0+), bf16 (8.0+) and fp8 (8.9+, with ``torch._scaled_mm``)."""
    import torch

    from ampbook.core.devices import pick_device

    dev = pick_device(device)
    if dev.type != "cuda":
        return ["fp32", "fp16", "bf16"]
    cap = torch.cuda.get_device_capability(dev)
    out = ["fp32"]
    if cap >= (8, 0):
        out.append("tf32")
    out.append("fp16")
    if cap >= (8, 0):
        out.append("bf16")
    if (
        cap >= (8, 9)
        and hasattr(torch, "_scaled_mm")
        and hasattr(torch, "float8_e4m3fn")
    ):
        out.append("fp8")
    return out


def _timing(kwargs: dict) -> dict:
    out = dict(SWEEP_TIMING)
    out.update(kwargs)
    return out


def _predict(measured: dict[int, float], n: int) -> float | None:
    """Seconds per call of an n^3 matmul from the nearest smaller measured size
    (cubic)."""
    smaller = [m for m in measured if m <= n]
    if not smaller:
        return None
    m = max(smaller)
    return measured[m] * (n / m) ** 3


def _best_of(results: list[dict]) -> dict:
    """Of several interleaved measurements of one point, the one with the lowest median
    (the least disturbed by other work on the machine)."""
    best = min(results, key=lambda r: r["median_s"])
    if len(results) > 1:
        best = dict(
            best, rounds=len(results), medians_s=[r["median_s"] for r in results]
        )
    return best


def matmul_sweep(
    sizes: Iterable[int],
    dtypes: Sequence[str],
    device: str | torch.device = "auto",
    max_call_s: float | None = None,
    rounds: int = 1,
    **timing,
) -> tuple[list[dict], list[dict]]:
    """Square matmuls of each size in each dtype; returns ``(rows, skipped)``.

    Sizes go up; at each size the dtypes are measured one after the other (side by side
    in time). A size whose single call is predicted (cubic growth from the last measured
    size of that dtype) to exceed ``max_call_s`` is skipped with the reason recorded, so
    a slow dtype (bf16 on a CPU without AMX) cannot stall a run. ``rounds`` > 1 repeats
    each point in
    interleaved rounds and keeps the fastest median. ``timing`` goes to
    ``time_matmul``."""
    from ampbook.core.devices import pick_device
    from ampbook.measure.timing import time_matmul

    dev = pick_device(device)
    sizes = sorted(set(int(s) for s in sizes))
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    measured: dict[str, dict[int, float]] = {d: {} for d in dtypes}
    rows, skipped = [], []
    for n in sizes:
        todo = []
        for dtype in dtypes:
            reason = _skip_reason(dtype, n, measured[dtype], max_call_s)
            if reason:
                skipped.append(
                    {"kind": "matmul", "dtype": dtype, "n": n, "reason": reason}
                )
            else:
                todo.append(dtype)
        got: dict[str, list[dict]] = {d: [] for d in todo}
        for _ in range(rounds):
            for dtype in todo:
                got[dtype].append(
                    time_matmul(n, dtype=dtype, device=dev, **_timing(timing)).to_dict()
                )
        for dtype in todo:
            row = _best_of(got[dtype])
            measured[dtype][n] = row["median_s"]
            rows.append(row)
    return rows, skipped


def _skip_reason(
    dtype: str, n: int, measured: dict[int, float], max_call_s: float | None
) -> str | None:
    if dtype.startswith("fp8") and n % 16:
        return f"fp8 matmuls need sizes that are multiples of 16 ({n} is not)"
    if max_call_s is not None:
        predicted = _predict(measured, n)
        if predicted is not None and predicted > max_call_s:
            return f"predicted {predicted:.3g} s per call > max_call_s {max_call_s:g} s"
    return None


def shape_cliff(
    bases: Iterable[int],
    dtypes: Sequence[str],
    device: str | torch.device = "auto",
    offsets: Sequence[int] = (0, -1, 1),
    max_call_s: float | None = None,
    known: Sequence[dict] = (),
    rounds: int = 1,
    **timing,
) -> tuple[list[dict], list[dict]]:
    """Square matmuls at each base size (a multiple of 8) and one off it (``offsets``).

    Rows carry ``base`` and ``n``; ``rows_by_shape`` turns them into penalties.
    ``known`` rows
    (e.g. from ``matmul_sweep``) help predict slow points for ``max_call_s``."""
    from ampbook.core.devices import pick_device
    from ampbook.measure.timing import time_matmul

    dev = pick_device(device)
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    measured: dict[str, dict[int, float]] = {d: {} for d in dtypes}
    for r in known:
        if r.get("kind") == "matmul" and r.get("dtype") in measured:
            measured[r["dtype"]][r["n"]] = r["median_s"]
    rows, skipped = [], []
    for base in sorted(set(int(b) for b in bases)):
        if base % 8:
            raise ValueError(f"shape_cliff bases must be multiples of 8, got {base}")
        for dtype in dtypes:
            reason = None
            for off in offsets:
                reason = reason or _skip_reason(
                    dtype, base + off, measured[dtype], max_call_s
                )
            if dtype.startswith("fp8"):
                reason = (
                    "fp8 matmuls need sizes that are multiples of 16; "
                    "no off-by-one shapes"
                )
            if reason:
                skipped.append(
                    {"kind": "shape", "dtype": dtype, "n": base, "reason": reason}
                )
                continue
            got: dict[int, list[dict]] = {off: [] for off in offsets}
            for _ in range(rounds):
                for off in offsets:
                    got[off].append(
                        time_matmul(
                            base + off,
                            dtype=dtype,
                            device=dev,
                            extra={"base": base},
                            **_timing(timing),
                        ).to_dict()
                    )
            for off in offsets:
                row = _best_of(got[off])
                measured[dtype][base + off] = row["median_s"]
                rows.append(row)
    return rows, skipped


def shape_penalties(rows: Sequence[dict]) -> list[dict]:
    """Per (dtype, base, n != base): ``slowdown`` = TFLOP/s at the multiple of 8 divided
    by TFLOP/s at the size one off (> 1 means the odd size is slower per FLOP)."""
    aligned = {(r["dtype"], r["base"]): r for r in rows if r["n"] == r["base"]}
    out = []
    for r in rows:
        if r["n"] == r["base"] or (r["dtype"], r["base"]) not in aligned:
            continue
        a = aligned[(r["dtype"], r["base"])]
        out.append(
            {
                "dtype": r["dtype"],
                "base": r["base"],
                "n": r["n"],
                "tflops_aligned": a["tflops"],
                "tflops": r["tflops"],
                "slowdown": a["tflops"] / r["tflops"],
                "outside_spread": outside_spread(a, r),
            }
        )
    return out


def outside_spread(a: dict, b: dict) -> bool:
    """Whether two measurements differ by more than their run-to-run spread: their
    per-FLOP time ranges from the 10th to the 90th percentile do not overlap."""
    a_lo, a_hi = a["p10_s"] / a["flops"], a["p90_s"] / a["flops"]
    b_lo, b_hi = b["p10_s"] / b["flops"], b["p90_s"] / b["flops"]
    return a_hi < b_lo or b_hi < a_lo


def elementwise_sweep(
    numels: Iterable[int],
    dtypes: Sequence[str] = ("fp32", "fp16", "bf16"),
    device: str | torch.device = "auto",
    rounds: int = 1,
    **timing,
) -> list[dict]:
    """``z = x + y`` at each size in each dtype (bandwidth-bound); rows as
    ``to_dict()``."""
    from ampbook.core.devices import pick_device
    from ampbook.measure.timing import time_elementwise

    dev = pick_device(device)
    rows = []
    for numel in sorted(set(int(n) for n in numels)):
        got: dict[str, list[dict]] = {d: [] for d in dtypes}
        for _ in range(rounds):
            for dtype in dtypes:
                got[dtype].append(
                    time_elementwise(numel, dtype, dev, **_timing(timing)).to_dict()
                )
        rows.extend(_best_of(got[d]) for d in dtypes)
    return rows


CONV_KINDS = ("conv", "conv_train")


# A probe call is about this share of conv_sweep's convolution (batch 1, then the sides
# halved): small enough that a dtype in a fallback kernel hundreds of times slower than
# fp32 answers in seconds.
CONV_PROBE_WORK = 1 / 128
CONV_MIN_SIDE = 8


def _conv_work(shape: Sequence[int]) -> int:
    b, _, h, w = shape
    return b * h * w


def _shrink_conv(shape: Sequence[int], fraction: float) -> tuple[int, int, int, int]:
    """``shape`` (batch, channels, height, width) with at most ``fraction`` of its work:
    the batch cut first, then the longer side halved, sides kept >= ``CONV_MIN_SIDE``;
    channels stay (they set the kernel's shape)."""
    b, c, h, w = (int(v) for v in shape)
    target = fraction * _conv_work(shape)
    while b * h * w > target:
        if b > 1:
            b = max(1, min(b // 2, math.ceil(target / (h * w))))
        elif max(h, w) // 2 >= CONV_MIN_SIDE:
            h, w = (h // 2, w) if h >= w else (h, w // 2)
        else:
            break
    return b, c, h, w


def _single_call_s(shape, kernel, dtype, dev, backward: bool) -> float:
    from ampbook.measure.timing import time_conv2d

    b, c, h, w = shape
    warm = 1 if dtype == "fp32" else 0  # a slow dtype's one call says enough
    return time_conv2d(
        b, c, h, w, kernel, dtype, dev, backward=backward,
        warmup=warm, repeats=1, min_time=0.0,
    ).median_s  # fmt: skip


def fit_conv_shape(
    shape: Sequence[int],
    dtypes: Sequence[str],
    device: str | torch.device = "auto",
    kernel: int = 3,
    max_call_s: float = 1.0,
) -> tuple[tuple[int, int, int, int], str | None]:
    """The convolution shape at which every dtype's forward and training pass should
    take at most ``max_call_s`` per call, and a line saying why when it is smaller than
    ``shape`` (None otherwise). Each dtype is timed once at a probe shape
    (``CONV_PROBE_WORK`` of the work) beside fp32 there, and fp32 once at ``shape``; a
    dtype's call at ``shape`` is predicted as fp32's there times its ratio to fp32 at
    the probe (a fallback kernel hundreds of times slower than fp32 would otherwise
    take minutes a call to find out)."""
    from ampbook.core.devices import pick_device

    shape = tuple(int(v) for v in shape)
    dev = pick_device(device)
    probe = _shrink_conv(shape, CONV_PROBE_WORK)
    if probe == shape:
        return shape, None
    at_probe = {
        (d, bwd): _single_call_s(probe, kernel, d, dev, bwd)
        for d in ["fp32", *(d for d in dtypes if d != "fp32")]
        for bwd in (False, True)
    }
    fp32_full = _single_call_s(shape, kernel, "fp32", dev, False)
    ref = at_probe[("fp32", False)]
    predicted = {k: fp32_full * t / ref for k, t in at_probe.items()}
    (dtype, bwd), worst = max(predicted.items(), key=lambda kv: kv[1])
    if worst <= max_call_s:
        return shape, None
    fitted = _shrink_conv(shape, max_call_s / worst)
    what = "training pass" if bwd else "forward"
    line = (
        f"timed at {'x'.join(map(str, fitted))}, not {'x'.join(map(str, shape))}: "
        f"there one {dtype} {what} would take about {worst:.3g} s (fp32's "
        f"forward {fp32_full:.3g} s times the {dtype} {what}'s "
        f"{at_probe[(dtype, bwd)] / ref:.3g}x fp32's forward at "
        f"{'x'.join(map(str, probe))}), over max_call_s {max_call_s:g} s"
    )
    return fitted, line


def conv_sweep(
    shape: Sequence[int],
    dtypes: Sequence[str],
    device: str | torch.device = "auto",
    kernel: int = 3,
    max_call_s: float | None = None,
    rounds: int = 1,
    **timing,
) -> tuple[list[dict], list[dict], str | None]:
    """One convolution (``shape`` = batch, channels, height, width; ``kernel`` square)
    in each dtype: its forward (kind ``"conv"``) and a training pass, forward and
    backward (kind ``"conv_train"``), measured side by side; returns ``(rows, skipped,
    fit_line)``. With ``max_call_s``, the convolution is first shrunk until every
    dtype's calls should fit it (``fit_conv_shape``; ``fit_line`` says so, None when
    ``shape`` fits), and a dtype whose forward still took longer than ``max_call_s``
    per call skips its training pass (about three times the work), with the reason
    recorded; fp32, the reference, never does. Every row holds the shape it ran at."""
    from ampbook.core.devices import pick_device
    from ampbook.measure.timing import time_conv2d

    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    dev = pick_device(device)
    fit_line = None
    if max_call_s is not None:
        shape, fit_line = fit_conv_shape(shape, dtypes, dev, kernel, max_call_s)
    batch, channels, height, width = (int(v) for v in shape)
    size = {"batch": batch, "channels": channels, "height": height, "width": width}
    rows, skipped = [], []
    for backward in (False, True):
        kind = CONV_KINDS[backward]
        todo = []
        for dtype in dtypes:
            fwd = next((r for r in rows if r["dtype"] == dtype), None)
            if backward and max_call_s is not None and fwd and dtype != "fp32":
                if fwd["median_s"] > max_call_s:
                    skipped.append(
                        dict(
                            size,
                            kind=kind,
                            dtype=dtype,
                            reason=f"its forward took {fwd['median_s']:.3g} s per "
                            f"call > max_call_s {max_call_s:g} s",
                        )
                    )
                    continue
            todo.append(dtype)
        got: dict[str, list[dict]] = {d: [] for d in todo}
        for _ in range(rounds):
            for dtype in todo:
                got[dtype].append(
                    dict(
                        time_conv2d(
                            batch,
                            channels,
                            height,
                            width,
                            kernel,
                            dtype,
                            dev,
                            backward=backward,
                            **_timing(timing),
                        ).to_dict(),
                        **size,
                    )
                )
        rows.extend(_best_of(got[d]) for d in todo)
    return rows, skipped, fit_line


def op_speeds(
    mm_rows: Sequence[dict], conv_rows: Sequence[dict]
) -> tuple[int, dict[str, dict[str, float]]]:
    """Each 16-bit dtype's speed against fp32, per op: ``(n, {dtype: {"matmul",
    "conv", "conv_train": ratio}})`` with the matmuls at the largest size every dtype
    reached (``speeds_at_common_size``); a ratio above 1 is faster than fp32. An op a
    dtype did not run is left out."""
    n, speed = speeds_at_common_size(mm_rows)
    conv = {(r["kind"], r["dtype"]): r["median_s"] for r in conv_rows}
    out: dict[str, dict[str, float]] = {}
    for d in speed:
        if d == "fp32":
            continue
        ratios = {"matmul": speed[d] / speed["fp32"]}
        for kind in CONV_KINDS:
            if (kind, d) in conv and (kind, "fp32") in conv:
                ratios[kind] = conv[(kind, "fp32")] / conv[(kind, d)]
        out[d] = ratios
    return n, out


_OP_WORDS = {
    "matmul": "matmuls",
    "conv": "the convolution's forward",
    "conv_train": "its forward and backward",
}


def amp_op_verdict(
    ratios: dict[str, dict[str, float]],
    device_type: str,
    load: dict | None = None,
    margin: float = 0.1,
) -> str:
    """Where mixed precision pays on this device, from measured op speeds
    (``op_speeds``, never from the CPU's instruction flags): per 16-bit dtype, its speed
    against fp32 on each op and whether it is faster on all of them (by more than
    ``margin``), slower on all, or mixed; then what that means for autocast here.
    Autocast's low dtype is bf16 on a CPU and fp16 on CUDA. ``load``
    (``timing.machine_load()``) adds a warning when CPU timings were taken on a busy
    machine."""
    if not ratios:
        return "no 16-bit dtype was measured beside fp32."
    parts, verdicts = [], {}
    for d, r in ratios.items():
        speeds = ", ".join(f"{_OP_WORDS.get(k, k)} {v:.3g}x" for k, v in r.items())
        if all(v > 1 + margin for v in r.values()):
            verdicts[d] = "faster"
        elif all(v < 1 - margin for v in r.values()):
            verdicts[d] = "slower"
        else:
            verdicts[d] = "mixed"
        parts.append(f"{d} ran {speeds} the fp32 speed ({verdicts[d]})")
    text = f"On this {device_type}, " + "; ".join(parts) + ". "
    low = "bf16" if device_type == "cpu" else "fp16"
    what = verdicts.get(low)
    if what == "faster":
        text += (
            f"Autocast's {low} can pay here in layers made of these ops; a whole step "
            "can still gain less or lose, since it also runs the casts autocast "
            "inserts and the ops it keeps in fp32."
        )
    elif what == "slower":
        text += (
            f"Autocast's {low} costs time here in layers made of these ops: mixed "
            f"precision does not pay on this {device_type}."
        )
    elif what == "mixed":
        text += (
            f"Autocast's {low} pays here for some ops and costs for others: only a "
            "whole step says which wins."
        )
    else:
        text += f"Autocast's {low} was not measured."
    if device_type == "cpu" and load and load.get("busy"):
        text += (
            f" These CPU timings were taken on a busy machine (load average "
            f"{load['load1']:.1f} on {load['cpus']} CPUs): rerun on an idle one "
            "before trusting the ratios."
        )
    return text


# --------------------------------------------------------------------------------------
# What a run shows: summaries and one-line verdicts (chapter 2 prints them)
# --------------------------------------------------------------------------------------


def best_per_dtype(rows: Sequence[dict]) -> dict[str, dict]:
    """The fastest (highest TFLOP/s) row of each dtype, in first-seen dtype order."""
    best: dict[str, dict] = {}
    for r in rows:
        if r["dtype"] not in best or r["tflops"] > best[r["dtype"]]["tflops"]:
            best[r["dtype"]] = r
    return best


def speeds_at_common_size(rows: Sequence[dict]) -> tuple[int, dict[str, float]]:
    """The largest size every dtype reached, and each dtype's TFLOP/s there."""
    sizes: dict[str, set] = {}
    for r in rows:
        sizes.setdefault(r["dtype"], set()).add(r["n"])
    common = set.intersection(*sizes.values()) if sizes else set()
    if not common:
        raise ValueError("no matmul size was measured in every dtype")
    n = max(common)
    return n, {r["dtype"]: r["tflops"] for r in rows if r["n"] == n}


def load_verdict(load: dict, device_type: str) -> str:
    """One line: was the machine busy while CPU timings were taken?"""
    level = "unknown" if load.get("load1") is None else f"{load['load1']:.1f}"
    head = f"load average {level} on {load['cpus']} CPUs: "
    if device_type != "cpu":
        return head + "GPU timings do not depend on it much."
    if load.get("busy"):
        return head + "BUSY, read the CPU timings below as this busy machine's."
    if load.get("load1") is None or load["load1"] > 0.5 * load["cpus"]:
        return head + "shared with other work, expect noisy CPU timings below."
    return head + "quiet, the CPU timings below are the CPU's."


def speed_verdict(speed: dict[str, float], n: int, device_type: str) -> str:
    """One line: each dtype's speed against fp32 at size n, and which way it went on
    this device (measured, not inferred from the CPU's instruction flags)."""
    ratios = {d: v / speed["fp32"] for d, v in speed.items() if d != "fp32"}
    text = f"n = {n}: " + ", ".join(f"{d} {r:.3g}x fp32" for d, r in ratios.items())
    low = {d: r for d, r in ratios.items() if d in ("fp16", "bf16")}
    if not low:
        return text + "."
    if all(r < 1 for r in low.values()):
        return text + f"; 16-bit matmuls are SLOWER than fp32 on this {device_type}."
    if all(r >= 1 for r in low.values()):
        return text + f"; 16-bit matmuls are faster than fp32 on this {device_type}."
    return (
        text + f"; mixed: one 16-bit dtype is faster than fp32 on this {device_type}."
    )


def shape_verdict(penalties: Sequence[dict]) -> str:
    """One line: the largest difference between a multiple of 8 and a size one off, and
    whether it is outside the run-to-run spread of the two measurements."""
    if not penalties:
        return "no shape comparison ran."
    worst = max(penalties, key=lambda p: abs(math.log(p["slowdown"])))
    real = [p for p in penalties if p["outside_spread"]]
    faster = "slower" if worst["slowdown"] > 1 else "faster"
    factor = max(worst["slowdown"], 1 / worst["slowdown"])
    text = (
        f"largest difference: {worst['dtype']} n={worst['n']} runs {factor:.2f}x "
        f"{faster} per FLOP than n={worst['base']}, "
    )
    text += (
        "outside the run-to-run spread"
        if worst["outside_spread"]
        else "within the run-to-run spread (noise)"
    )
    return text + f"; {len(real)} of {len(penalties)} pairs differ beyond their spread."


_ITEMSIZE = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}


def read_from(row: dict, cache_bytes: int) -> str:
    """Where the timed calls of a row found their inputs: ``"memory"`` when the input
    sets the timer rotated through (``buffers`` of ``bytes_moved`` each) cover at least
    twice the last-level cache, so that each set was evicted before its next use;
    ``"cache"`` otherwise (a working set the cache holds, or too few sets to push it
    out: the timer rotates at most 64 sets and 1 GiB)."""
    moved = row.get("bytes_moved")
    if moved is None:
        moved = 3 * row["numel"] * _ITEMSIZE[row["dtype"]]
    return "memory" if moved * row.get("buffers", 1) >= 2 * cache_bytes else "cache"


def elementwise_verdict(rows: Sequence[dict], cache_bytes: int) -> str:
    """One line: at the largest size, fp16 time over fp32 time for the add, where its
    inputs were read from (``read_from``), and whether halving the bytes halved the time
    (< 0.6: yes, close; else no)."""
    ew = {(r["dtype"], r["numel"]): r for r in rows}
    n = max(r["numel"] for r in rows)
    ratio = ew[("fp16", n)]["median_s"] / ew[("fp32", n)]["median_s"]
    where = read_from(ew[("fp16", n)], cache_bytes)
    place = "from memory" if where == "memory" else "from the cache"
    text = (
        f"{n} elements (inputs read {place}; last-level cache "
        f"{cache_bytes / 2**20:.3g} MiB): fp16 takes {ratio:.2f}x the fp32 time; "
    )
    if ratio < 0.6:
        return text + "half the bytes, close to half the time."
    if ratio < 0.9:
        return text + "faster, but well short of half: not purely bandwidth-bound here."
    return text + "little or no gain: the fp16 kernel, not memory, sets the pace here."


def roofline_ceilings(
    entry, best: dict[str, dict], ew_rows: Sequence[dict], cache_bytes: int
) -> dict:
    """Compute ceilings (TFLOP/s per dtype) and a bandwidth ceiling (GB/s): the
    published peaks of ``entry`` (a devices.yml Device) when given, else the best rates
    measured (adds read from memory, ``read_from``, when there are any; fp32's compute
    ceiling no lower than the fastest add, which is held against it)."""
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


def ceilings_text(ceilings: dict) -> str:
    """One line: what the roofline's ceilings are and their values."""
    compute = ", ".join(
        f"{d} {v * 1e3:.4g} GFLOP/s" for d, v in ceilings["compute"].items()
    )
    return (
        f"Ceilings: {ceilings['kind']}; bandwidth {ceilings['bandwidth']:.4g} GB/s; "
        f"compute {compute}."
    )


def roofline_rows(
    points: Sequence[tuple[str, dict, str]], ceilings: dict
) -> list[dict]:
    """Per (label, row, roof dtype): intensity, rate, the roof above it, the fraction of
    it reached, and which ceiling binds (adds are held against the fp32 compute
    ceiling)."""
    from ampbook.core.devices import attainable_tflops

    out = []
    for label, r, roof_dtype in points:
        peak = ceilings["compute"].get(roof_dtype, ceilings["compute"].get("fp32"))
        intensity = r["flops"] / r["bytes_moved"]
        roof = attainable_tflops(intensity, peak, ceilings["bandwidth"])
        bound = (
            "memory" if intensity * ceilings["bandwidth"] / 1e3 < peak else "compute"
        )
        out.append(
            {
                "label": label,
                "intensity": intensity,
                "gflops": r["tflops"] * 1e3,
                "gbps": r["gbps"],
                "roof_gflops": roof * 1e3,
                "fraction": r["tflops"] / roof,
                "bound": bound,
            }
        )
    return out


def roofline_verdict(rows: Sequence[dict], ceilings: dict) -> str:
    """One line: which side of the fp32 ridge the adds and the matmuls fall on."""
    ridge = ceilings["compute"]["fp32"] * 1e3 / ceilings["bandwidth"]
    adds = [r for r in rows if r["label"].startswith("add")]
    mms = [r for r in rows if r["label"].startswith("matmul")]
    text = f"fp32 ridge point {ridge:.3g} FLOP/byte; "
    if adds:
        side = (
            "left of it (memory-bound)"
            if max(r["intensity"] for r in adds) < ridge
            else "NOT left of it: the measured ceilings cannot separate the regimes"
        )
        text += f"adds {side}; "
    if mms:
        text += "matmuls bound by " + ", ".join(sorted({r["bound"] for r in mms})) + "."
    return text


def record_device(record: dict) -> str:
    """How the book names the device of a record: a GPU by
    ``devices.display_name``, a CPU by the name it reported."""
    from ampbook.core.devices import display_name

    env = record["environment"]
    if str(env.get("device", "")).startswith("cuda"):
        return display_name(env["device_name"])
    from ampbook.core.page import md_escape

    return md_escape(env["device_name"])


def records_table(records: Sequence[dict], devices: dict) -> list[list]:
    """One row per committed record and dtype: ``[device, dtype, best n, TFLOP/s,
    published peak, fraction of peak]``, its best matmul against the published peak of
    its device (None where the device is not in the table)."""
    rows = []
    for rec in records:
        entry = devices.get(rec.get("device_key") or "")
        for d, r in best_per_dtype(rec["matmul"]).items():
            peak = entry.peak_tflops(d.split("_")[0]) if entry else None
            rows.append(
                [
                    record_device(rec),
                    d,
                    r["n"],
                    r["tflops"],
                    peak,
                    r["tflops"] / peak if peak else None,
                ]
            )
    return rows


def records_verdict(records: Sequence[dict], directory: Path = RESULTS_DIR) -> str:
    """One line: how many GPU results are committed, and from which devices."""
    if not records:
        where = Path(directory)
        if where.is_relative_to(REPO_ROOT):
            where = where.relative_to(REPO_ROOT)
        return f"no GPU results committed under {where}/ (no file {RESULTS_PATTERN})."
    names = sorted({record_device(r) for r in records})
    return (
        f"{plural(len(records), 'committed result file')}, from the {', '.join(names)}."
    )


def sweep_provenance(record: dict) -> str:
    """The one-line provenance of a committed sweep (``results.provenance``): device,
    date, software, CPU threads, then the sizes it ran and how fp32 was timed."""
    from ampbook.results import provenance

    sizes = sorted({r["n"] for r in record["matmul"]})
    span = f"{sizes[0]}-{sizes[-1]}" if len(sizes) > 1 else str(sizes[0])
    return provenance(
        record["environment"],
        record.get("created"),
        {"matmul sizes n =": span, "": "fp32 timed with TF32 off"},
    )


def sweep_summary(record: dict, devices: dict) -> str:
    """What a committed sweep shows, in two sentences: each dtype's best matmul
    (TFLOP/s, size, share of the published dense peak where the device is in the table)
    and speed against the best fp32; then the largest penalty of a size one off a
    multiple of 8, and whether it stands out of the run-to-run spread."""
    name = record_device(record)
    entry = devices.get(record.get("device_key") or "")
    best = best_per_dtype(record["matmul"])
    if not best:
        return f"The {name} sweep holds no matmul."
    f32 = best.get("fp32")
    parts = []
    for d, r in best.items():
        text = f"{d} {r['tflops']:.4g} TFLOP/s at n = {r['n']}"
        peak = entry.peak_tflops(d.split("_")[0]) if entry else None
        if peak:
            text += f" ({r['tflops'] / peak:.0%} of its peak"
            text += (
                f", {r['tflops'] / f32['tflops']:.3g}x fp32)"
                if f32 and d != "fp32"
                else ")"
            )
        elif f32 and d != "fp32":
            text += f" ({r['tflops'] / f32['tflops']:.3g}x fp32)"
        parts.append(text)
    where = "" if entry else " (not in the peak table: no published peak to compare)"
    out = f"On the {name}{where}, the best matmuls: " + "; ".join(parts) + "."
    pens = shape_penalties(record.get("shapes", []))
    if pens:
        worst = max(pens, key=lambda q: q["slowdown"])
        real = sum(1 for q in pens if q["outside_spread"])
        out += (
            f" A size one off a multiple of 8 ran up to {worst['slowdown']:.2f}x "
            f"slower per FLOP ({worst['dtype']}, n = {worst['n']} against "
            f"{worst['base']}); {real} of {len(pens)} such pairs differ beyond their "
            "run-to-run spread."
        )
    return out


# --------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------


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
        "schema": SCHEMA,
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
    validate_record(record)
    return record


def save_record(record: dict, path: str | Path) -> Path:
    """Write a validated record as JSON (creating the folder)."""
    validate_record(record, str(path))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    return path


def load_records(
    directory: str | Path = RESULTS_DIR, pattern: str = RESULTS_PATTERN
) -> list[dict]:
    """All records in ``directory`` matching ``pattern`` (sorted by file name),
    validated; each gets a ``"file"`` key. An empty list when there are none."""
    directory = Path(directory)
    out = []
    for path in sorted(directory.glob(pattern)):
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        validate_record(record, str(path))
        out.append(dict(record, file=path.name))
    return out


# --------------------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------------------

CPU_DEFAULTS = {
    "sizes": [64, 128, 256],
    "shape_sizes": [128, 512],
    "numel": [2**20, 2**24],
    "max_call_s": 0.1,
}
GPU_DEFAULTS = {
    "sizes": [1024, 4096, 8192],
    "shape_sizes": [4096, 8192],
    "numel": [2**24, 2**28],
    "max_call_s": 1.0,
}
QUICK = {
    "sizes": [32, 64],
    "shape_sizes": [64],
    "numel": [2**12, 2**16],
    "max_call_s": 0.05,
}


def _fmt_ratio(r: float) -> str:
    if r >= 1:
        return f"{r:.2f}x (faster)"
    return f"{r:.3f}x ({1 / r:.1f}x slower)"


def report(record: dict, out=None) -> dict:
    """Print the ratios of a record; return them as a dict (what the tests and chapter
    read)."""
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
                ratios["elementwise"].append(
                    {
                        "numel": numel,
                        "bandwidth_fp16_over_fp32": bw,
                        "time_fp16_over_fp32": tr,
                    }
                )
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
    defaults = (
        QUICK if quick else (GPU_DEFAULTS if dev.type == "cuda" else CPU_DEFAULTS)
    )
    sizes = sizes or defaults["sizes"]
    shape_sizes = shape_sizes or defaults["shape_sizes"]
    numel = numel or defaults["numel"]
    max_call_s = defaults["max_call_s"] if max_call_s is None else max_call_s
    if quick:
        timing = {"min_time": 0.01, "max_time": 0.1, **timing}
    dtypes = list(dtypes or supported_dtypes(dev))
    matmul, skipped = matmul_sweep(
        sizes, dtypes, dev, max_call_s=max_call_s, rounds=rounds, **timing
    )
    shapes, skipped2 = shape_cliff(
        shape_sizes,
        [d for d in dtypes if not d.startswith("fp8")],
        dev,
        max_call_s=max_call_s,
        known=matmul,
        rounds=rounds,
        **timing,
    )
    ew = elementwise_sweep(
        numel,
        [d for d in ("fp32", "fp16", "bf16") if d in dtypes or d == "fp32"],
        dev,
        rounds=rounds,
        **timing,
    )
    return make_record(dev, matmul, shapes, ew, skipped + skipped2, profile=profile)


# The largest sizes the command takes: a square matmul of MAX_SIZE (three fp32
# matrices of 4 GiB each) and an element-wise call of MAX_NUMEL elements (8 GiB per
# fp32 tensor); beyond them the matrices would not fit most machines' memory, and a
# call would take minutes.
MAX_SIZE = 32768
MAX_NUMEL = 2**31


def check_sizes(sizes, shape_sizes, numel) -> None:
    """``--sizes``, ``--shape-sizes`` and ``--numel`` within ``MAX_SIZE`` and
    ``MAX_NUMEL``: a ``cli.UserError`` naming the value and the limit otherwise."""
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
    ap.add_argument(
        "--sizes",
        type=cli.positive_int,
        nargs="+",
        help=f"square matmul sizes for the dtype ratios (at most {MAX_SIZE})",
    )
    ap.add_argument(
        "--shape-sizes",
        type=cli.positive_int,
        nargs="+",
        metavar="N",
        help=f"multiples of 8 to compare with one off (at most {MAX_SIZE})",
    )
    ap.add_argument(
        "--numel",
        type=cli.positive_int,
        nargs="+",
        help=f"elementwise sizes in elements (at most {MAX_NUMEL})",
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

    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    if args.threads is not None:
        if args.threads < 1:
            ap.error("--threads must be >= 1")
        torch.set_num_threads(args.threads)
    if args.save:  # checked before measuring, written after
        cli.check_output_file(
            args.save, "--save", kind=SCHEMA, overwrite=args.overwrite
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
        print(f"error: {e}", file=sys.stderr)
        return 2
    report(record)
    print(
        f"\n(measured in {time.perf_counter() - t0:.1f} s; cpu flags "
        f"{cpu_flags() or '-'})"
    )
    if args.save:
        try:
            path = save_record(record, args.save)
        except OSError as err:
            raise cli.Stopped(
                f"could not write {args.save}: {cli.os_error(err)[1]} (the numbers "
                "are printed above)"
            ) from None
        print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
