"""What chapter 6 ("Will AMP help?") says beyond the doctor's report: the sentences
that read the bounds, the measured speedups and the calibration's references."""

from __future__ import annotations

import math
from typing import Any, Sequence

from ampbook.chapters.ch6.report_text import amp_kernels_text
from ampbook.chapters.ch6.verdict import range_position, span_text
from ampbook.core.devices import display_name, load_devices
from ampbook.core.precision import AUTOCAST_DTYPES, torch_name
from ampbook.predict.calibrate import (
    COVER,
    GOAL_WIDTH,
    layout_text,
    reference_prediction,
)
from ampbook.predict.references import (
    Reference,
    load_profile_bounds,
    profile_groups,
    profile_key,
)
from ampbook.predict.roofline import Ceilings

# A layer profile applied to its own setting gives back its kernel ratio within this.
SELF_CHECK = 0.05


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


def published_notes(ref_rows: Sequence[tuple], ref_notes: Sequence[str]) -> str:
    """What a published speedup is where the two sides' batches differ, and where the
    source's own column differs from the ratio of its throughputs."""
    diff_batch = [f"{r[0]} on the {r[1]}" for r in ref_rows
                  if r[3].split(" / ")[0] != r[3].split(" / ")[1]]  # fmt: skip
    said = []
    if diff_batch:
        said.append(
            "A published speedup is the ratio of the two published throughputs at "
            "each side's own batch and layout, so where the batches differ ("
            f"{', '.join(diff_batch)}) it is AMP, the layout and the batch together."
        )
    if ref_notes:
        said.append(
            "The speedup here is the ratio of the throughputs as published; the "
            "source's own speedup column differs from it in the last digit where it "
            f"was worked out otherwise: {'; '.join(ref_notes)}."
        )
    return " ".join(said)


def profile_bound_lines(results_dir=None) -> str:
    """Per committed layer-profile pair: its AMP bound now against the one recorded."""
    pbounds = load_profile_bounds()
    pb_lines = []
    for (gname, pbatch, ph, pw, play), g in profile_groups(results_dir):
        stored = pbounds.get(profile_key(gname, pbatch, ph, pw, play))
        if not stored:
            continue
        lp, with_t = g["amp-fp16"], stored["amp-fp16"]["bound_s"]
        same32 = math.isclose(
            stored["fp32"]["bound_s"], g["fp32"].predicted_step_s, rel_tol=0.005
        )
        pb_lines.append(
            f"- {display_name(lp.device_name)}, batch {pbatch} x {ph}x{pw}, "
            f"{layout_text([play, play])}: AMP bound {with_t * 1e3:.3g} ms "
            f"here ({with_t / lp.kernel_s:.0%} of its {lp.kernel_s * 1e3:.3g} ms of "
            f"kernels) against {lp.predicted_step_s * 1e3:.3g} ms recorded "
            f"({lp.kernel_efficiency:.0%}); the difference, "
            f"{(with_t - lp.predicted_step_s) * 1e3:+.3g} ms, "
            + (
                "is the memory format's (none in NCHW: the book's bound leaves "
                "cuDNN's transposes out)"
                if same32
                else "is the cost model's changes since the profile was recorded "
                "(fp32's two bounds differ too)"
            )
            + "."
        )
    return "\n".join(pb_lines) or "No committed layer profile has a stored bound."


def unreferenced_text(gpus: Sequence[str], refs: Sequence[Reference], devices) -> str:
    """Which GPUs no reference of their generation (architecture and segment) covers."""

    def gen(key):
        d = devices.get(key)
        return (d.architecture, d.segment) if d else (key, None)

    have = {gen(r.gpu) for r in refs}
    unref = [g for g in gpus if gen(g) not in have]
    if not unref:
        return "Every GPU here has a reference of its own generation."
    named = ", ".join(
        f"the {display_name(g)} ({devices[g].architecture}, {devices[g].segment})"
        for g in unref
    )
    return (
        "No reference was measured on a GPU of the generation (architecture and "
        f"segment) of {named}: its ranges carry efficiencies over from other "
        "generations, as far as the leave-one-out below measures such carrying to "
        "hold."
    )


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


def self_check_lines(refs: Sequence[Reference], devices) -> str:
    """Each committed layer profile applied to its own setting (it was fitted on it)."""
    checks = []
    for ref in [r for r in refs if r.kind == "profile" and r.gpu in devices]:
        alone = reference_prediction(ref, [ref], exclude_own=False)
        got = alone["rows"][0]["kernel_speedup"]
        off = got / ref.measured_speedup - 1
        ok = abs(off) <= SELF_CHECK
        checks.append(
            f"{ref.label()}, {ref.setting}: its efficiencies give a kernel ratio "
            f"of {got:.3f}x against the {ref.measured_speedup:.3f}x measured, "
            f"{off:+.1%}, {'within' if ok else 'beyond'} {SELF_CHECK:.0%}: "
            f"{'consistent' if ok else 'inconsistent'}."
        )
    return "\n".join(f"- {c}" for c in checks) or "No committed layer profile to check."


def checklist_source(source: str, model: str, refs: Sequence[Reference]) -> str:
    """The checklist's "from" cell, saying whether the network is a reference."""
    if source != "calibrated":
        return source
    if any(r.model == model for r in refs):
        return "predicted, calibrated (a reference of this network among them)"
    return "predicted, calibrated on other networks (no reference of this one)"


# What each leave-one-out row's measured ratio is a ratio of, as the page names it.
QUANTITY = {"step time": "step ratio", "kernel time": "kernel ratio"}


def loo_by_quantity(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The leave-one-out rows, step ratios first, then kernel ratios."""
    return sorted(rows, key=lambda r: list(QUANTITY).index(r["what"]))


def leave_one_out_text(loo: dict[str, Any]) -> str:
    """The leave-one-out against its goal (``COVER`` inside, ``GOAL_WIDTH`` wide)."""
    goal = f"the goal ({COVER:.0%} inside, at most {GOAL_WIDTH:g}x wide) is"
    met = f"{goal} met."
    if not (loo["inside"] >= COVER and loo["median_width"] <= GOAL_WIDTH):
        met = f'{goal} not met; the rows marked "no" say where the ranges do not carry.'
    parts = []
    for what, name in QUANTITY.items():
        rows = [r for r in loo["rows"] if r["what"] == what]
        if rows:
            parts.append(
                f"{sum(r['inside'] for r in rows)} of {len(rows)} "
                f"{name}{'s' * (len(rows) != 1)} inside the {name.split()[0]} range "
                "the others predict"
            )
    inside = sum(r["inside"] for r in loo["rows"])
    return (
        f"{'; '.join(parts)} ({inside} of {loo['n']} in all, {loo['inside']:.0%}), "
        f"at a median width of {loo['median_width']:.2f}x: " + met
    )
