"""What chapter 6 ("Will AMP help?") says beyond the doctor's report: the sentences
that read the bounds and the measured speedups (the calibration's own readings are
``ampbook.predict.calibrate``'s, which ``python -m ampbook.calibration`` prints)."""

from __future__ import annotations

import math
from typing import Any, Sequence

from ampbook.chapters.ch6.report_text import amp_kernels_text
from ampbook.chapters.ch6.verdict import range_position, span_text
from ampbook.core.devices import display_name, load_devices
from ampbook.core.precision import AUTOCAST_DTYPES, torch_name
from ampbook.predict.references import Reference
from ampbook.predict.roofline import Ceilings


def bytes_ratio(report: dict[str, Any], precision: str = "amp-fp16") -> float:
    """How much AMP shrinks the step's traffic: fp32 bytes over ``precision``'s."""
    t = report["totals"]
    return t["fp32"]["bytes"] / t[precision]["bytes"]


def peak_ratio(gpu: str, precision: str = "amp-fp16") -> float | None:
    """The 16-bit matrix peak over fp32's with TF32 on ``gpu`` (None without one)."""
    c = Ceilings.from_device(load_devices()[gpu], tf32=True)
    dtype = torch_name(AUTOCAST_DTYPES[precision])
    if dtype not in c.mma_tflops:
        return None
    return c.mma_tflops[dtype] / c.mma_tflops["float32"]


def gain_verdict(report: dict[str, Any], gpu: str, precision: str = "amp-fp16") -> str:
    """Which ratio a model's bound ratio on ``gpu`` follows: its bytes' (memory-bound)
    or the tensor cores' peak (math-bound)."""
    rows = [r for r in report["roofline"] if r.get("amp_s") and r["gpu"] == gpu]
    row = next((r for r in rows if r["precision"] == precision), None)
    if row is None:
        raise ValueError(f"no {precision} prediction for {gpu} in this report")
    speed, nb = row["speedup_tf32"], bytes_ratio(report, precision)
    peak = peak_ratio(gpu, precision)
    follows = (
        "its bytes set the ratio"
        if peak is None or abs(math.log(speed / nb)) <= abs(math.log(speed / peak))
        else "the tensor cores' peak sets the ratio"
    )
    peak_text = f"{peak:.2f}x" if peak else "none"
    bound = f"{speed:.2f}x smaller" if speed >= 1 else f"{1 / speed:.2f}x larger"
    moved = f"bytes shrink {nb:.2f}x" if nb >= 1 else f"bytes grow {1 / nb:.2f}x"
    size = f"batch {report['batch']} x {'x'.join(map(str, report['input']))}"
    return (
        f"{report['model']} at {size} on the {row['gpu_name']}: {precision}'s bound is "
        f"{bound}, {row['memory_bound_share']:.0%} of it memory-bound; "
        f"{moved}, the matrix peak grows {peak_text}: {follows}."
    )


def measured_speedup_verdict(
    gpu_name: str, measured: float, low: float, high: float
) -> str:
    """A measured AMP step speedup held against a predicted range, in one line."""
    if not 0 < low <= high or measured <= 0:
        raise ValueError(f"need 0 < low <= high and measured > 0, got {low}, {high}")
    return (
        f"{gpu_name}: measured AMP step speedup {measured:.2f}x against "
        f"{span_text(low, high)} predicted, {range_position(measured, low, high)}."
    )


def step_range_verdicts(rows: Sequence[tuple]) -> str:
    """Each GPU's step timed alone against its two ranges, from chapter 6's rows
    ``(gpu, measured, loop, own-profile range, range without ERFNet)``."""
    lines = [
        measured_speedup_verdict(g + which, float(m), rng["low"], rng["high"])
        for g, m, _, full, alone in rows
        for which, rng in (
            (", timed alone, own profile (a cross-check)", full),
            (", timed alone, without ERFNet (a prediction)", alone),
        )
        if m is not None and rng and rng["low"]
    ]
    return "\n".join(f"- {x}" for x in lines) or (
        "No committed GPU pair has ERFNet's setting here: nothing to hold the range "
        "against."
    )


def range_cell(v: dict[str, Any] | None) -> str | None:
    """A range as a table cell, "1.23 (1.10 to 1.40)" (None without one)."""
    if not v or v["low"] is None:
        return None
    return f"{v['point']:.2f} ({v['low']:.2f} to {v['high']:.2f})"


def launch_rows(named_reports: Sequence[tuple[str, dict]], gpu: str) -> list[tuple]:
    """Per report with a floor and a range on ``gpu``: the kernels, floor and kernel
    time (ms)."""
    rows = []
    for name, r in named_reports:
        v = next(v for v in r["verdict"]["ranges"] if v["gpu"] == gpu)
        if (la := v["launch"]) and v["rows"]:
            floor, kernel = la["amp_floor_s"] * 1e3, la["amp_kernel_s"] * 1e3
            rows.append((name, la["fp32_kernels"], amp_kernels_text(v), floor, kernel))
    return rows


def launch_text(rows: Sequence[tuple], gpu: str) -> str:
    """Which steps of ``launch_rows`` are predicted launch-bound on ``gpu``."""
    if not rows:
        return "No row has both a floor and a predicted kernel time."
    above = [r[0] for r in rows if r[-2] >= r[-1]]
    below = [r[0] for r in rows if r[-2] < r[-1]]
    said = (
        f"above the predicted kernel time for {', '.join(above)} (predicted "
        f"launch-bound) and below it for {', '.join(below)}."
    )
    if not above or not below:
        said = (
            f"{'below' if below else 'above'} the predicted kernel time in every row: "
            f"{'no' if below else 'each'} step here is predicted launch-bound."
        )
    return f"On the {display_name(gpu)}, the floor lies {said}"


def checklist_source(source: str, model: str, refs: Sequence[Reference]) -> str:
    """The checklist's "from" cell, saying whether the network is a reference."""
    if source != "calibrated":
        return source
    if any(r.model == model for r in refs):
        return "predicted, calibrated (a reference of this network among them)"
    return "predicted, calibrated on other networks (no reference of this one)"
