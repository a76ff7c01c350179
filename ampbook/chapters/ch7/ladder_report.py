"""Reading a ladder: the table, each number with how it was obtained (``cell_value``),
and the targets one by one (``check_targets``)."""

from __future__ import annotations

import functools
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ampbook.chapters.ch7.ladder_predict import ASSUMPTIONS
from ampbook.chapters.ch7.rungs import COMPILED
from ampbook.core import provenance as pv
from ampbook.core.modes import MODES
from ampbook.core.words import slug
from ampbook.results import MODE_LABELS, Ladder, LadderCell


def rung_label(rung) -> str:
    """A rung's short name in tables and axes: its key, rung 0's ("post", kept in the
    ladder files) shown as what it is, the ERFNet authors' defaults."""
    return "defaults" if rung.key == "post" else rung.key


def format_table(ladder: Ladder) -> str:
    """The ladder as text: a line per cell (79 columns), two saying what each column
    is, and one why idle and busy read ``n/a`` where they are."""
    unit = "GPU" if ladder.time_source == "cuda" else "ops"
    lines = [
        f"{'rung':<12}{'mode':<10}{'step ms':>8}{unit + ' ms':>8}{'idle ms':>8}"
        f"{'busy':>6}{'MiB':>7}{'img/s':>7}{'wait':>6}{'bound':>7}",
    ]
    inseparable = False
    for rung in ladder.rungs:
        for mode in MODES:
            key = (rung.index, mode)
            c = next((x for x in ladder.cells if (x.rung, x.mode) == key), None)
            if not c:
                continue
            head = f"{rung.index} {rung_label(rung):<10}{mode:<10}"
            if not c.ok:
                lines.append(f"{head}error: {(c.error or '')[:58]}")
                continue
            # operator time above the step time: the profiled step ran slower than
            # the timed ones, and the step does not split into busy and idle time
            apart = (c.kernel_s or 0) <= c.step_s
            inseparable |= not apart
            lines.append(
                f"{head}{c.step_s * 1e3:8.2f}{(c.kernel_s or 0) * 1e3:8.2f}"
                + (f"{(c.idle_s or 0) * 1e3:8.2f}" if apart else f"{NOT_SPLIT:>8}")
                + f"{_fmt(c.busy_share, '.0%') if apart else NOT_SPLIT:>6}"
                f"{(c.memory_bytes or 0) / 2**20:7.0f}{_fmt(c.images_per_s, '.1f'):>7}"
                f"{_fmt(c.data_wait_share, '.0%'):>6}{_fmt(c.bound_share, '.0%'):>7}"
            )
    lines.extend(COLUMNS_CUDA if unit == "GPU" else COLUMNS_CPU)
    if inseparable:
        lines.append(
            f"{NOT_SPLIT}: {unit} time above the step (the profiled steps ran slower): "
            "not separable"
        )
    return "\n".join(lines)


# What each column of the table is, two lines under it (at most 80 columns each).
COLUMNS_CPU = (
    "step: median; ops: in operators (profiled apart); idle: rest; busy: ops/step;",
    "MiB: saved for backward; img/s, wait (data): runner epochs; bound: roofline/step",
)
COLUMNS_CUDA = (
    "step: start to start; GPU: busy (profiled apart); idle: rest; busy: GPU/step;",
    "MiB: peak allocated; img/s, wait (data): runner epochs; bound: roofline/step",
)
# The idle and busy columns of a cell whose operator time passes its step time.
NOT_SPLIT = "n/a"


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


@dataclass(frozen=True)
class Target:
    """One target read from a ladder; a predicted ``value`` is *predicted* to meet or
    miss, an assumed one no test."""

    name: str
    limit: float
    kind: str  # "max": the value must be at most the limit; "min": at least
    unit: str  # "ms", "x", "share", "img/s"
    value: float | None
    start: float | None  # the same figure at rung 0
    where: str
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return (
            self.value <= self.limit if self.kind == "max" else self.value >= self.limit
        )

    @property
    def provenance(self) -> str:
        """``"measured"`` (also a plain number), ``"predicted"`` or ``"assumed"``."""
        kind = pv.kind_of(self.value) or pv.MEASURED
        return pv.MEASURED if kind == pv.PUBLISHED else kind

    def fmt(self, v: float | None) -> str:
        if v is None:
            return "not measured"
        v = float(v)
        units = {"ms": f"{v * 1e3:.1f} ms", "x": f"{v:.2f}x", "share": f"{v:.0%}",
                 "ratio": f"{v:.3f}"}  # fmt: skip
        return units.get(self.unit, f"{v:.0f} {self.unit}")

    def line(self) -> str:
        """The target, the value and its verdict; for a miss, what the profile shows."""
        op = "<=" if self.kind == "max" else ">="
        head = f"{self.name} {op} {self.fmt(self.limit)}: "
        if self.met is None:
            return head + f"not measured ({self.where})."
        if self.provenance == "assumed":
            return (
                f"{head}{self.fmt(self.value)} by assumption, not a test "
                f"({self.value.source}; {self.where})."
            )
        if self.provenance == "predicted":
            # the verdict is the comparison of the value itself, never of its
            # rounding: 0.571 against 0.570 is a miss, however near
            verdict = "predicted to meet" if self.met else "predicted to MISS"
            off = abs(float(self.value) / self.limit - 1) if self.limit else 1.0
            near = ""
            if off < PREDICTION_RESOLVES:
                side = "under" if float(self.value) < self.limit else "over"
                near = (
                    f", {off:.1%} {side} the target: closer than the "
                    f"{PREDICTION_RESOLVES:.0%} error assumed for a prediction, so "
                    "not resolved"
                )
            text = (
                f"{head}{verdict} ({self.fmt(self.value)} predicted{near}, {self.where}"
            )
        else:
            verdict = "met" if self.met else "MISSED"
            text = f"{head}{self.fmt(self.value)}, {verdict} ({self.where}"
        if self.start is not None:
            text += f"; rung 0 measured: {self.fmt(self.start)}"
        text += ")"
        if not self.met and self.note:
            text += f". {self.note[:1].upper()}{self.note[1:]}"
        return text + "."


# A prediction closer to its target than this (relative) is said to be unresolved: an
# assumed bound on the cost model's error, not measured.
PREDICTION_RESOLVES = 0.05

# The book's chosen targets for the H200 at the ERFNet authors' defaults (1024x512,
# batch 6): key -> (limit, "max" or "min", unit).
TARGET_SETTING = ("h200", 512, 1024, 6)
TARGETS = {
    "step_eager": (0.020, "max", "ms"), "step_compiled": (0.011, "max", "ms"),
    "speedup_eager": (1.3, "min", "x"), "speedup_compiled": (1.6, "min", "x"),
    "busy": (0.90, "min", "share"), "data_wait": (0.05, "max", "share"),
    "images_per_s": (300.0, "min", "img/s"), "memory_ratio": (0.57, "max", "ratio"),
}  # fmt: skip


def _top(ladder: Ladder, modes: tuple[str, ...], eager: bool) -> int | None:
    """The highest rung (``eager``: not compiled) where all ``modes`` have a cell, or
    None: two modes are compared at one rung, never rung 4 against rung 2."""
    rungs = [
        r.index
        for r in ladder.rungs
        if not (eager and r.compiles) and all(ladder.cell(r.index, m) for m in modes)
    ]
    return max(rungs) if rungs else None


def _top_cells(ladder: Ladder, modes: tuple[str, ...], eager: bool) -> dict:
    """Each of ``modes``' cell at ``_top(ladder, modes, eager)`` (None where none)."""
    index = _top(ladder, modes, eager)
    return {m: None if index is None else ladder.cell(index, m) for m in modes}


def _profile_note(c: LadderCell, ladder: Ladder) -> str:
    """What cell ``c``'s profile (or prediction) shows: busy, idle, kernels, pace."""
    dev = "GPU" if ladder.time_source == "cuda" else "operators"
    step, kern, idle = (
        cell_value(ladder, c, f) for f in ("step_s", "kernel_s", "idle_s")
    )
    if kern is not None and float(kern) > float(step):
        return (
            f"{dev} time {float(kern) * 1e3:.1f} ms in a {float(step) * 1e3:.1f} ms "
            "step: the profiled step ran slower than the timed ones, so busy and idle "
            "time are not separable here"
        )
    measured_ = pv.all_measured([step, kern, idle])
    what = "the profile" if measured_ else "the prediction"
    idle_text = f"{float(idle or 0) * 1e3:.1f} ms"
    if idle is not None and idle.kind == pv.ASSUMED:
        idle_text += f" (assumed: {idle.source})"
    parts = [
        f"{what}: {dev} busy {float(kern or 0) * 1e3:.1f} ms and idle {idle_text} of "
        f"the {float(step) * 1e3:.1f} ms step"
    ]
    per = c.record.get("kernels_per_step")
    if per and measured_:
        parts.append(f"{per:.0f} {'kernels' if dev == 'GPU' else 'operators'} a step")
    sets = "sets" if measured_ else "would set"
    if float(idle or 0) / float(step) > 0.2:
        parts.append(f"the host {sets} the pace (launches and syncs), not the kernels")
    elif c.bound_share is not None:
        parts.append(
            f"the kernels {'set' if measured_ else sets} it, at "
            f"{c.bound_share:.0%} of the roofline bound"
        )
    return "; ".join(parts)


def check_targets(ladder: Ladder) -> list[Target]:
    """The targets, amp-fp16 against fp32 with TF32 (on a CPU, amp-bf16 against
    fp32): eager ones from the highest eager rung both reached, compiled ones from the
    top compiled rung, end-to-end ones from AMP's highest cell with its epochs."""
    have = ladder.modes()
    amp = "amp-fp16" if "amp-fp16" in have or "amp-bf16" not in have else "amp-bf16"
    base = "fp32-tf32" if "fp32-tf32" in have or "fp32" not in have else "fp32"
    an = "AMP" if amp == "amp-fp16" else MODE_LABELS[amp]
    bn = "TF32" if base == "fp32-tf32" else MODE_LABELS[base]
    top = max((r.index for r in ladder.rungs if r.compiles), default=COMPILED[-1])
    eager = _top_cells(ladder, (amp, base), True)
    comp = {m: ladder.cell(top, m) for m in (amp, base)}
    r0 = {m: ladder.cell(0, m) for m in (amp, base)}
    amp_eager = _top_cells(ladder, (amp,), True)[amp]
    final = _top_cells(ladder, (amp,), False)[amp]
    whole = [ladder.cell(r.index, amp) for r in ladder.rungs]
    whole = [c for c in whole if c and c.images_per_s is not None]
    ends = whole[-1] if whole else None

    value = functools.partial(cell_value, ladder)  # None without the cell

    def ratio(top, bottom, name):
        if not (top and bottom and getattr(top, name) and getattr(bottom, name)):
            return None
        return value(top, name) / value(bottom, name)

    def where(c):
        return f"rung {c.rung}" if c else f"no {MODE_LABELS[amp]} cell"

    def pair_where(a, b):
        if not (a and b):
            return f"a {bn} and an {an} cell needed"
        eager_ = not ladder.rung(a.rung).compiles
        alone = max(_top(ladder, (m,), eager_) or 0 for m in (amp, base))
        both = ", the highest both reached" if alone > a.rung else ""
        return f"rung {a.rung}{both}"

    out = []

    def add(key, name, v, start, at, note=""):
        out.append(Target(name, *TARGETS[key], v, start, at, note))

    for how, c in (("eager", amp_eager), ("compiled", comp[amp])):
        at = where(c) if c or how == "eager" else f"rung {top} not measured"
        note = _profile_note(c, ladder) if c else ""
        start = value(r0[amp], "step_s")
        add(f"step_{how}", f"{an} step, {how}", value(c, "step_s"), start, at, note)
    for how, pair in (("eager", eager), ("compiled", comp)):
        a, b = pair[amp], pair[base]
        note = ""
        if a and b and a.kernel_s and b.kernel_s:
            note = (
                f"kernel time {bn} {b.kernel_s * 1e3:.1f} ms, {an} "
                f"{a.kernel_s * 1e3:.1f} ms ({b.kernel_s / a.kernel_s:.2f}x); idle "
                f"{bn} {(b.idle_s or 0) * 1e3:.1f} ms, "
                f"{an} {(a.idle_s or 0) * 1e3:.1f} ms"
            )
        name, vs = f"{an} over {bn} (step ratio), {how}", ratio(b, a, "step_s")
        start = ratio(r0[base], r0[amp], "step_s")
        add(f"speedup_{how}", name, vs, start, pair_where(a, b), note)
    data_note = ips_note = ""
    if ends:
        step = value(ends, "step_s")
        step_ips = (ladder.batch_size / step).with_(fmt=".3g")
        ips = value(ends, "images_per_s").with_(fmt=".3g")
        trains = "trains" if step.is_measured else "would train"
        data_note = (
            f"the loop trained {ips} images/s against the step alone's {step_ips}"
        )
        ips_note = (
            f"the step alone {trains} {step_ips} images/s and the loop waited for "
            f"data {value(ends, 'data_wait_share')} of its time"
        )
    busy = "GPU busy" if ladder.is_cuda else "operators busy"
    busy_note = _profile_note(final, ladder) if final else ""
    for key, name, c, field, note in (
        ("busy", busy, final, "busy_share", busy_note),
        ("data_wait", "data wait", ends, "data_wait_share", data_note),
        ("images_per_s", "images/s end to end", ends, "images_per_s", ips_note),
    ):
        add(key, name, value(c, field), value(r0[amp], field), where(c), note)
    a, b = eager[amp], eager[base]
    mem = ratio(a, b, "memory_bytes")
    ma, mb = (value(x, "memory_bytes") for x in (a, b))
    note = f"{ladder.memory_measure}: {an} {ma}, {bn} {mb}" if mem is not None else ""
    start = ratio(r0[amp], r0[base], "memory_bytes")
    add("memory_ratio", f"{an} / {bn} peak memory", mem, start, pair_where(a, b), note)
    return out


def format_targets(ladder: Ladder) -> str:
    """The targets as text, with a note where ``ladder`` is not their setting."""
    lines = ["targets (set for an H200 at 1024x512, batch 6):"]
    setting = (slug(ladder.device_name), ladder.height, ladder.width, ladder.batch_size)
    if not (ladder.is_cuda and setting == TARGET_SETTING):
        note = (
            f"(this ladder is {ladder.device_name} at {ladder.width}x"
            f"{ladder.height}, batch {ladder.batch_size}: read them as a yardstick)"
        )
        lines.append(
            textwrap.fill(note, 88, initial_indent="  ", subsequent_indent="  ")
        )
    for t in check_targets(ladder):
        lines.append(
            textwrap.fill(t.line(), 88, initial_indent="  ", subsequent_indent="    ")
        )
    return "\n".join(lines)


_DISPLAY = {  # field -> (format, unit, scale) of its Value
    "step_s": (".1f", " ms", 1e3), "kernel_s": (".1f", " ms", 1e3),
    "idle_s": (".1f", " ms", 1e3), "memory_bytes": (".2f", " GiB", 1 / 2**30),
    "images_per_s": (".0f", "", 1.0), "data_wait_share": (".0%", "", 1.0),
    "busy_share": (".0%", "", 1.0),
}  # fmt: skip


def cell_value(ladder: Ladder, c: LadderCell | None, name: str):
    """Field ``name`` of cell ``c`` as a ``Value``: measured, predicted or assumed."""
    if c is None:
        return None
    x = c.busy_share if name == "busy_share" else getattr(c, name)
    if x is None:
        return None
    fmt, unit, scale = _DISPLAY[name]
    p = ladder.record.get("prediction")
    kinds = c.record.get("provenance") or {}
    if name == "busy_share":
        kind = kinds.get("idle_s")
        if kind != pv.ASSUMED:
            kind = pv.PREDICTED if pv.PREDICTED in kinds.values() else kind
    else:
        kind = kinds.get(name)
    if kind is None:
        predicted_ = ladder.record.get("predicted") and not c.record.get("measured")
        kind = pv.PREDICTED if predicted_ else pv.MEASURED
    if kind == pv.ASSUMED:
        source = ASSUMPTIONS["idle_s" if name == "busy_share" else name]
    elif p is not None:
        files = ", ".join(Path(f).name for f in p["from"])
        source = (
            f"measured ({files})"
            if kind == pv.MEASURED
            else f"ladder_predict.predict_ladder from {files}"
        )
    else:
        source = f"measured ({Path(ladder.path).name})"
    return pv.Value(float(x), kind, source, fmt=fmt, unit=unit, scale=scale)
