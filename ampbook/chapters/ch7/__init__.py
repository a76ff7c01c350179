"""What chapter 7 (``07_making_amp_pay``) says of its ladders: which GPU ladder to
show and where its numbers come from, its bars, each rung's verdict and the readings
of single cells. The ladder is ``rungs`` and ``ladder_*``; the recipe ``recipe``."""

from __future__ import annotations

from pathlib import Path

from ampbook.chapters.ch7.ladder_predict import predict_ladder
from ampbook.chapters.ch7.ladder_report import cell_value, rung_label
from ampbook.chapters.ch7.rungs import rung_of, rung_title
from ampbook.core.page import GIB, bar_style, md_table_text
from ampbook.core.provenance import all_measured
from ampbook.results import MODE_LABELS, Ladder, LadderCell, provenance, read_ladder


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def draw_ladder(ax, ladder: Ladder, modes=None, title: str | None = None) -> None:
    """Step time per rung and mode as bars: kernel time solid, idle time hatched."""
    import numpy as np

    modes = [m for m in (modes or ladder.modes()) if m in ladder.modes()]
    rungs = [r for r in ladder.rungs if any(ladder.cell(r.index, m) for m in modes)]
    xs = np.arange(len(rungs))
    width = 0.8 / max(len(modes), 1)
    for j, mode in enumerate(modes):
        cells = [ladder.cell(r.index, mode) for r in rungs]
        kern = np.array([(c.kernel_s or 0) * 1e3 if c else 0 for c in cells])
        idle = np.array([(c.idle_s or 0) * 1e3 if c else 0 for c in cells])
        x = xs - 0.4 + width * (j + 0.5)
        style = bar_style(j)
        ax.bar(x, kern, width, label=f"{MODE_LABELS[mode]}", **style)
        ax.bar(x, idle, width, bottom=kern, color="white", hatch="////",
               edgecolor=style["color"] if j else "black", linewidth=0.5,
               label="idle" if j == len(modes) - 1 else None)  # fmt: skip
    ax.set_xticks(xs, [f"{r.index}: {rung_label(r)}" for r in rungs])
    ax.set_ylabel("ms per step")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)


def gpu_ladder(results) -> tuple[Ladder | None, bool]:
    """``(ladder, predicted)``: the most complete committed GPU ladder, else the
    prediction (``predict_ladder``), else ``(None, False)``."""
    committed = results.gpu_ladders()
    if committed:
        return committed[0], False
    record = predict_ladder(results)
    if record is None:
        return None, False
    files = ", ".join(Path(p).name for p in record["prediction"]["from"])
    return read_ladder(record, f"prediction from {files}"), True


def source_line(ladder: Ladder, predicted: bool) -> str:
    """Where a GPU ladder's numbers come from (for a prediction, its assumptions)."""
    settings = {"": f"{ladder.width}x{ladder.height}, batch {ladder.batch_size}"}
    rec = ladder.record
    line = provenance(rec["environment"], rec.get("created"), settings)
    if not predicted:
        return f"Measured: {line}."
    return (
        f"Predicted from the layer profiles measured on {line}: rung 0 as measured "
        f"(with the training runs' images/s, data wait and memory); above it, "
        f"{prediction_assumptions(ladder)}."
    )


def prediction_assumptions(ladder: Ladder) -> str:
    """The assumptions a predicted ladder rests on, rung by rung, each labelled."""
    p = ladder.record["prediction"]
    ratio = p.get("fp16_stream_bound_ratio")
    pair = p.get("fp16_stream_bounds_s")
    of = (
        f" (computed: the AMP bound with the 16-bit stream over without it, "
        f"{pair[0] * 1e3:.3f} / {pair[1] * 1e3:.3f} ms)"
        if pair
        else " (computed from the cost model's two AMP bounds)"
    )
    stream = (
        f"every AMP kernel scaled by the bound ratio {ratio:.3f}{of}, applied to "
        f"every kernel by assumption, and the saved bytes it removes (rung "
        f"{rung_of('stream_bound')})"
        if ratio
        else f"no rung {rung_of('stream_bound')} (no bound for this GPU)"
    )
    return (
        f"by assumption, no data wait (rung {rung_of('no_data_wait')}), batch norm "
        f"{p['nhwc_batch_norm_speedup']:g} times faster in NHWC (assumed: the "
        f"factor one user measured for cuDNN's graph-API batch norm on an H100, "
        f"cudnn-frontend#134, carried to PyTorch's BatchNorm2d), and every other "
        f"kernel unchanged (rung {rung_of('nhwc_batch_norm')}), no idle time (assumed, "
        f"rung {rung_of('no_idle')}), and {stream}; no rung {rung_of(None)}"
    )


def targets_caveat(ladder: Ladder, predicted: bool, runner_caveat: str = "") -> str:
    """What the targets' verdicts rest on: a prediction's assumptions and the runner's
    own syncs in the measured rung 0 (``runner_caveat``, chapter 5's)."""
    parts = []
    if predicted:
        parts.append(
            "The predicted verdicts rest on the prediction's assumptions: rung 0 as "
            f"measured; above it, {prediction_assumptions(ladder)}."
        )
    if runner_caveat:
        parts.append(
            f"The idle time rung {rung_of('no_idle')} removes is rung 0's, measured. "
            + runner_caveat.strip()
        )
    return " ".join(parts)


def missing_ladder_line(results) -> str:
    """The sentence for a results folder with no GPU ladder ('' when there is one)."""
    if results.gpu_ladders():
        return ""
    return (
        "No GPU ladder is committed in the results folder yet (python -m "
        "ampbook.bench ladder on a GPU writes one): what follows for the GPU is a "
        "prediction, not a measurement."
    )


# The fewest timed steps a "faster/slower in every step" verdict needs: with n each,
# noise alone separates two cells in 2 / C(2n, n) of cases (10% at 3, under 1% at 5).
MIN_TIMED_STEPS = 5


def step_change(a: LadderCell, b: LadderCell, ladder: Ladder | None = None) -> str:
    """Cell ``b``'s step against ``a``'s, as chapter 5 reads rounds: "faster" only where
    every timed step of ``b`` beat every one of ``a``; a prediction "would be" (5%)."""
    steps = [cell_value(ladder, c, "step_s") for c in (a, b)] if ladder else []
    if ladder is not None and not all_measured(steps):
        r = a.step_s / b.step_s
        way = "change little"
        if r > 1.05 or r < 1 / 1.05:
            way = "be faster" if r > 1 else "be slower"
        return f"would {way}, predicted"
    ta, tb = a.record.get("step_times_s"), b.record.get("step_times_s")
    if not ta or not tb:
        return "step times not recorded: no verdict"
    n = min(len(ta), len(tb))
    if n < MIN_TIMED_STEPS:
        return (
            f"no verdict: {n} timed steps, fewer than {MIN_TIMED_STEPS}, too few to "
            "tell a change from the machine's noise"
        )
    if max(tb) < min(ta):
        return "faster in every timed step"
    if min(tb) > max(ta):
        return "slower in every timed step"
    return (
        f"no change resolved, the timed steps overlap: {_ms(min(ta))}-{_ms(max(ta))} "
        f"ms against {_ms(min(tb))}-{_ms(max(tb))} ms"
    )


def rung_verdict(ladder: Ladder, index: int, modes=None) -> str:
    """One line: what rung ``index`` did to each mode's step (``step_change``)."""
    if index not in {r.index for r in ladder.rungs}:
        why = "not measured"
        if ladder.record.get("predicted"):
            why = "what compilation fuses is not in an eager profile"
        return (
            f"This ladder has no rung {index} ({rung_title(index)}): {why}; "
            "python -m ampbook.bench ladder measures it."
        )
    rung = ladder.rung(index)
    parts = []
    for mode in modes or ladder.modes():
        b = ladder.cell(index, mode)
        # the rung below it that was measured in this mode (the one before when it was)
        below = [r.index for r in ladder.rungs if r.index < index]
        before = max((i for i in below if ladder.cell(i, mode)), default=None)
        if b is None or before is None:
            continue
        a = ladder.cell(before, mode)
        ratio = a.step_s / b.step_s
        # a gap in the measured rungs: the change is every rung since, together
        since = f" (rungs {before + 1}-{index} together, from rung {before})"
        since = "" if before == index - 1 else since
        parts.append(
            f"{mode} {_ms(a.step_s)} -> {_ms(b.step_s)} ms{since} "
            f"({ratio:.2f}x, {step_change(a, b, ladder)})"
        )
    if not parts:
        return f"Rung {index} ({rung.title}) was not measured beside a rung below it."
    return f"Rung {index} ({rung.title}): " + "; ".join(parts) + "."


# The names the page glues a cell's numbers under, and the cell's field of each.
FIELDS = {"step": "step_s", "kernel": "kernel_s", "idle": "idle_s",
          "busy": "busy_share", "ips": "images_per_s", "wait": "data_wait_share",
          "gib": "memory_bytes"}  # fmt: skip


def cell_values(ladder: Ladder | None, index: int, mode: str) -> dict:
    """One cell's figures (``FIELDS``), each a Value (nan without the cell)."""
    c = ladder.cell(index, mode) if ladder else None
    return {
        k: cell_value(ladder, c, f) if c else float("nan") for k, f in FIELDS.items()
    }


def speedup(base, amp):
    """A baseline's step over AMP's, a Value of their kind (nan without both)."""
    r = base / amp
    return r.with_(fmt=".2f", unit="x") if hasattr(r, "with_") else float("nan")


def top_rows(ladder: Ladder, index: int, base_mode: str = "fp32-tf32") -> list[tuple]:
    """A row per precision at rung ``index``: step, speedups, GiB, images/s."""

    def step(mode):
        return cell_value(ladder, ladder.cell(index, mode), "step_s")

    base, strict = step(base_mode), step("fp32")
    cells = [(m, cell_values(ladder, index, m)) for m in ladder.modes()
             if ladder.cell(index, m)]  # fmt: skip
    return [
        (f"{index}: {MODE_LABELS[m]}", v["step"] * 1e3,
         base / v["step"] if base else None, strict / v["step"] if strict else None,
         v["gib"] / GIB if v["gib"] else None, v["ips"])
        for m, v in cells
    ]  # fmt: skip


def here_amp_mode(ladder: Ladder) -> str | None:
    return next((m for m in ladder.modes() if m.startswith("amp")), None)


def compared_rungs(ladder: Ladder) -> list[int]:
    """The rungs at which a ladder has both an fp32 and an AMP cell."""
    amp = here_amp_mode(ladder)
    return [
        r.index
        for r in ladder.rungs
        if amp and ladder.cell(r.index, amp) and ladder.cell(r.index, "fp32")
    ]


def here_speedup(ladder: Ladder, index: int):
    """fp32's step over AMP's at rung ``index`` (nan without both)."""
    if index not in compared_rungs(ladder):
        return float("nan")
    amp = here_amp_mode(ladder)
    return speedup(
        *(cell_value(ladder, ladder.cell(index, m), "step_s") for m in ("fp32", amp))
    )


RUNG0_COLUMNS = ("precision", "rung 0 measured by", "step (ms)", "kernels (ms)",
                 "idle (ms)", "speedup (x)")  # fmt: skip


def rung0_comparison(results, ladder: Ladder | None, predicted: bool) -> str:
    """Rung 0 twice: the layer profiles of 2026-11-30 beside a committed ladder's rung
    0 measured since ``hostmodel.RUNNER_CHANGED``; a sentence while there is none."""
    from ampbook.predict import hostmodel

    loop = hostmodel.RUNNER_2026_11_30
    wait = (
        "No rung 0 re-measured with today's runner is committed: the rung 0 shown is "
        f"the one {loop.name} recorded, which synchronised the host {loop.amp} times "
        f"per AMP step and {loop.fp32} per fp32 step, two of AMP's and one of "
        "fp32's its own reads, not AMP's."
    )
    if ladder is None or predicted:
        return wait
    when = str(ladder.record.get("created") or "")[:10]
    setting = (ladder.device_name, ladder.batch_size, ladder.height, ladder.width)
    old = {
        lp.mode: lp
        for lp in results.layer_profiles
        if (lp.device_name, lp.batch_size, lp.height, lp.width) == setting
        and hostmodel.profile_loop(lp.record) is loop
    }
    new = {m: ladder.cell(0, m) for m in ("fp32-tf32", "amp-fp16")}
    if when < hostmodel.RUNNER_CHANGED or len(old) < 2 or not all(new.values()):
        return wait
    rows = []
    old_label = f"{loop.name} ({loop.amp} / {loop.fp32} syncs)"
    for label, cells in ((old_label, old), (f"today's runner, ladder of {when}", new)):
        b, a = cells["fp32-tf32"], cells["amp-fp16"]
        rows += [(MODE_LABELS[c.mode], label, c.step_s * 1e3, c.kernel_s * 1e3,
                  c.idle_s * 1e3, r)
                 for c, r in ((b, None), (a, b.step_s / a.step_s))]  # fmt: skip
    return (
        "Rung 0 measured twice (both measured): by the runner of 2026-11-30, whose "
        "own get_scale() reads and gradient-norm check added host syncs, and by "
        "today's runner in the committed ladder.\n\n"
        + md_table_text(rows, RUNG0_COLUMNS, [None, None, ".1f", ".1f", ".1f", ".2f"])
    )
