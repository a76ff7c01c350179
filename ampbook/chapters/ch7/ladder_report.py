"""Reading a ladder: the table (``format_table``), each number with how it was
obtained (``cell_value``), and the targets one by one (``check_targets``,
``format_targets``)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from ampbook.chapters.ch7.ladder_predict import ASSUMPTIONS
from ampbook.chapters.ch7.rungs import COMPILED
from ampbook.core.modes import MODES
from ampbook.results import MODE_LABELS, Ladder, LadderCell

# Rung 0's record key is "post" (kept in the ladder files); it is the ERFNet authors'
# defaults, not the blog post's setting, and is shown so.
RUNG_LABELS = {"post": "defaults"}


def rung_label(rung) -> str:
    """A rung's short name as tables and axes show it (``RUNG_LABELS``, else its
    key)."""
    return RUNG_LABELS.get(rung.key, rung.key)


def format_table(ladder: Ladder) -> str:
    """The ladder as text: a line per measured cell (79 columns), two saying what each
    column is (``COLUMNS_CPU``/``COLUMNS_CUDA``), and one why idle and busy read
    ``n/a`` where a cell's operator time passes its step time."""
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
            if not apart:
                inseparable = True
            lines.append(
                f"{head}{c.step_s * 1e3:8.2f}{(c.kernel_s or 0) * 1e3:8.2f}"
                + (f"{(c.idle_s or 0) * 1e3:8.2f}" if apart else f"{NOT_SPLIT:>8}")
                + f"{_pct(c.busy_share) if apart else NOT_SPLIT:>6}"
                f"{(c.memory_bytes or 0) / 2**20:7.0f}{_num(c.images_per_s):>7}"
                f"{_pct(c.data_wait_share):>6}{_pct(c.bound_share):>7}"
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


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


@dataclass(frozen=True)
class Target:
    """One of the ladder's targets, read from a ladder. ``value`` and ``start`` may be
    ``Value``s: a predicted one is *predicted* to meet or miss; an assumed one is no
    test."""

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
        from ampbook.core.provenance import MEASURED, PUBLISHED, kind_of

        kind = kind_of(self.value) or MEASURED
        return MEASURED if kind == PUBLISHED else kind

    def fmt(self, v: float | None) -> str:
        if v is None:
            return "not measured"
        v = float(v)
        units = {"ms": f"{v * 1e3:.1f} ms", "x": f"{v:.2f}x", "share": f"{v:.0%}"}
        return units.get(self.unit) or (
            f"{v:.3f}" if self.unit == "ratio" else f"{v:.0f} {self.unit}"
        )

    def line(self) -> str:
        """One line: the target, the value, met or missed, predicted to meet or miss, or
        set by an assumption; for a missed one what the profile shows."""
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


# A prediction closer to its target than this (relative) is still met or missed by
# its value, and said to be unresolved: an assumed bound on the cost model's error,
# not measured.
PREDICTION_RESOLVES = 0.05

# The book's chosen targets for the H200 at the ERFNet authors' defaults (1024x512,
# batch 6).
TARGET_SETTING = ("h200", 512, 1024, 6)
TARGETS = {
    "step_eager": 0.020, "step_compiled": 0.011, "speedup_eager": 1.3,
    "speedup_compiled": 1.6, "busy": 0.90, "data_wait": 0.05, "images_per_s": 300.0,
    "memory_ratio": 0.57,
}  # fmt: skip


def _top(ladder: Ladder, modes: tuple[str, ...], eager: bool) -> int | None:
    """The highest rung (``eager``: without torch.compile) at which every one of
    ``modes`` has a measured cell, or None: a comparison of two modes is made at one
    rung, never one mode's rung 4 against the other's rung 2 after a cut."""
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


def _pair_where(ladder: Ladder, a: LadderCell, modes: tuple[str, ...]) -> str:
    """Which rung a two-mode comparison was made at, and why when one mode reached
    higher."""
    eager = not ladder.rung(a.rung).compiles
    alone = max(_top(ladder, (m,), eager) or 0 for m in modes)
    if alone > a.rung:
        return f"rung {a.rung}, the highest both reached"
    return f"rung {a.rung}"


def _profile_note(c: LadderCell, ladder: Ladder) -> str:
    """What the profile (or the prediction, its assumptions named) of cell ``c`` shows:
    busy and idle time, kernels per step, what sets the pace; or that the two do not
    separate where the profiled operators took longer than the timed step."""
    from ampbook.core.provenance import ASSUMED, all_measured

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
    measured_ = all_measured([step, kern, idle])
    what = "the profile" if measured_ else "the prediction"
    idle_text = f"{float(idle or 0) * 1e3:.1f} ms"
    if idle is not None and idle.kind == ASSUMED:
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


@dataclass(frozen=True)
class _Picks:
    """The cells the targets read: AMP is amp-fp16 against fp32 with TF32 (on a CPU
    ladder, amp-bf16 against fp32)."""

    ladder: Ladder
    amp: str
    base: str
    r0: dict  # mode -> rung 0's cell
    eager: dict  # mode -> cell at the highest eager rung both modes reached
    amp_eager: LadderCell | None  # AMP's highest eager cell
    compiled: int  # the ladder's top compiled rung (else the table's)
    final: LadderCell | None  # AMP's highest cell
    final_epochs: LadderCell | None  # AMP's highest cell with its epochs

    @property
    def amp_name(self) -> str:
        return "AMP" if self.amp == "amp-fp16" else MODE_LABELS[self.amp]

    @property
    def base_name(self) -> str:
        return "TF32" if self.base == "fp32-tf32" else MODE_LABELS[self.base]

    def comp(self, mode: str) -> LadderCell | None:
        return self.ladder.cell(self.compiled, mode)

    def where(self, c: LadderCell | None) -> str:
        return f"rung {c.rung}" if c else f"no {MODE_LABELS[self.amp]} cell"

    def value(self, c: LadderCell | None, name: str):
        return cell_value(self.ladder, c, name) if c else None

    def pair_where(self, a, b) -> str:
        if a and b:
            return _pair_where(self.ladder, a, (self.amp, self.base))
        return f"a {self.base_name} and an {self.amp_name} cell needed"


def _picks(ladder: Ladder) -> _Picks:
    have = ladder.modes()
    amp = "amp-fp16" if "amp-fp16" in have or "amp-bf16" not in have else "amp-bf16"
    base = "fp32-tf32" if "fp32-tf32" in have or "fp32" not in have else "fp32"
    # a cell cut after its step was timed has no epochs: the end-to-end targets come
    # from the highest cell with them
    cells = [ladder.cell(r.index, amp) for r in ladder.rungs]
    whole = [c for c in cells if c and c.images_per_s is not None]
    return _Picks(
        ladder, amp, base, {m: ladder.cell(0, m) for m in (amp, base)},
        _top_cells(ladder, (amp, base), True), _top_cells(ladder, (amp,), True)[amp],
        max((r.index for r in ladder.rungs if r.compiles), default=COMPILED[-1]),
        _top_cells(ladder, (amp,), False)[amp], whole[-1] if whole else None,
    )  # fmt: skip


def _step_targets(p: _Picks) -> list[Target]:
    out = []
    for key, how, c in (
        ("step_eager", "eager", p.amp_eager),
        ("step_compiled", "compiled", p.comp(p.amp)),
    ):
        where = p.where(c)
        if not c and key == "step_compiled":
            where = f"rung {p.compiled} not measured"
        note = _profile_note(c, p.ladder) if c else ""
        start = p.value(p.r0[p.amp], "step_s")
        name = f"{p.amp_name} step, {how}"
        out.append(
            Target(name, TARGETS[key], "max", "ms", p.value(c, "step_s"), start, where,
                   note)
        )  # fmt: skip
    return out


def _ratio(p: _Picks, top, bottom, name: str):
    """``top``'s field over ``bottom``'s (Values), None without both."""
    if not (top and bottom and getattr(top, name) and getattr(bottom, name)):
        return None
    return p.value(top, name) / p.value(bottom, name)


def _speedup_targets(p: _Picks) -> list[Target]:
    out = []
    comp = {m: p.comp(m) for m in (p.amp, p.base)}
    for key, how, pair in (
        ("speedup_eager", "eager", p.eager),
        ("speedup_compiled", "compiled", comp),
    ):
        a, b = pair[p.amp], pair[p.base]
        note = ""
        if a and b and a.kernel_s and b.kernel_s:
            note = (
                f"kernel time {p.base_name} {b.kernel_s * 1e3:.1f} ms, {p.amp_name} "
                f"{a.kernel_s * 1e3:.1f} ms ({b.kernel_s / a.kernel_s:.2f}x); idle "
                f"{p.base_name} {(b.idle_s or 0) * 1e3:.1f} ms, "
                f"{p.amp_name} {(a.idle_s or 0) * 1e3:.1f} ms"
            )
        name = f"{p.amp_name} over {p.base_name} (step ratio), {how}"
        start = _ratio(p, p.r0[p.base], p.r0[p.amp], "step_s")
        out.append(
            Target(name, TARGETS[key], "min", "x", _ratio(p, b, a, "step_s"), start,
                   p.pair_where(a, b), note)
        )  # fmt: skip
    return out


def _loop_targets(p: _Picks) -> list[Target]:
    """GPU busy, data wait and images/s end to end."""
    data_note = ips_note = ""
    if p.final_epochs:
        step = p.value(p.final_epochs, "step_s")
        step_ips = (p.ladder.batch_size / step).with_(fmt=".3g")
        ips = p.value(p.final_epochs, "images_per_s").with_(fmt=".3g")
        wait = p.value(p.final_epochs, "data_wait_share")
        trains = "trains" if step.is_measured else "would train"
        data_note = (
            f"the loop trained {ips} images/s against the step alone's {step_ips}"
        )
        ips_note = (
            f"the step alone {trains} {step_ips} images/s and the loop waited for "
            f"data {wait} of its time"
        )
    rows = (
        ("GPU busy" if p.ladder.is_cuda else "operators busy", "busy", "min",
         "share", p.final, "busy_share",
         _profile_note(p.final, p.ladder) if p.final else ""),
        ("data wait", "data_wait", "max", "share", p.final_epochs, "data_wait_share",
         data_note),
        ("images/s end to end", "images_per_s", "min", "img/s", p.final_epochs,
         "images_per_s", ips_note),
    )  # fmt: skip
    return [
        Target(name, TARGETS[key], kind, unit, p.value(c, field),
               p.value(p.r0[p.amp], field), p.where(c), note)
        for name, key, kind, unit, c, field, note in rows
    ]  # fmt: skip


def _memory_target(p: _Picks) -> Target:
    a, b = p.eager[p.amp], p.eager[p.base]
    ratio = _ratio(p, a, b, "memory_bytes")
    note = ""
    if ratio is not None:
        ma, mb = (p.value(x, "memory_bytes") for x in (a, b))
        note = f"{p.ladder.memory_measure}: {p.amp_name} {ma}, {p.base_name} {mb}"
    start = _ratio(p, p.r0[p.amp], p.r0[p.base], "memory_bytes")
    name = f"{p.amp_name} / {p.base_name} peak memory"
    return Target(name, TARGETS["memory_ratio"], "max", "ratio", ratio, start,
                  p.pair_where(a, b), note)  # fmt: skip


def check_targets(ladder: Ladder) -> list[Target]:
    """The targets, one by one, from ``ladder`` (``_Picks``): the eager figures come
    from the highest eager rung measured, the compiled ones from the top compiled
    rung."""
    p = _picks(ladder)
    return [
        *_step_targets(p),
        *_speedup_targets(p),
        *_loop_targets(p),
        _memory_target(p),
    ]


def targets_apply(ladder: Ladder) -> bool:
    """Whether ``ladder`` is the targets' setting: an H200 at 1024x512, batch 6."""
    from ampbook.core.words import slug

    setting = (slug(ladder.device_name), ladder.height, ladder.width, ladder.batch_size)
    return ladder.is_cuda and setting == TARGET_SETTING


def format_targets(ladder: Ladder) -> str:
    head = ["targets (set for an H200 at 1024x512, batch 6):"]
    if not targets_apply(ladder):
        head.append(
            textwrap.fill(
                f"(this ladder is {ladder.device_name} at {ladder.width}x"
                f"{ladder.height}, batch {ladder.batch_size}: read them as a "
                "yardstick)",
                88,
                initial_indent="  ",
                subsequent_indent="  ",
            )
        )
    lines = [
        textwrap.fill(t.line(), 88, initial_indent="  ", subsequent_indent="    ")
        for t in check_targets(ladder)
    ]
    return "\n".join(head + lines)


_DISPLAY = {  # field -> (format, unit, scale) of its Value
    "step_s": (".1f", " ms", 1e3), "kernel_s": (".1f", " ms", 1e3),
    "idle_s": (".1f", " ms", 1e3), "memory_bytes": (".2f", " GiB", 1 / 2**30),
    "images_per_s": (".0f", "", 1.0), "data_wait_share": (".0%", "", 1.0),
    "busy_share": (".0%", "", 1.0),
}  # fmt: skip


def cell_value(ladder: Ladder, c: LadderCell | None, name: str):
    """Field ``name`` of cell ``c`` (one of ``_DISPLAY``'s) as a ``Value`` that says
    how it was obtained: measured (which file), predicted (``predict_ladder``, from
    which files) or assumed (``ASSUMPTIONS``; ``busy_share`` where the idle time is);
    None where the cell or the field is missing."""
    from ampbook.core.provenance import ASSUMED, MEASURED, PREDICTED, Value

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
        if kind != ASSUMED:
            kind = PREDICTED if PREDICTED in kinds.values() else kind
    else:
        kind = kinds.get(name)
    if kind is None:
        predicted_ = ladder.record.get("predicted") and not c.record.get("measured")
        kind = PREDICTED if predicted_ else MEASURED
    if kind == ASSUMED:
        source = ASSUMPTIONS["idle_s" if name == "busy_share" else name]
    elif p is not None:
        files = ", ".join(Path(f).name for f in p["from"])
        source = (
            f"measured ({files})"
            if kind == MEASURED
            else f"ladder_predict.predict_ladder from {files}"
        )
    else:
        source = f"measured ({Path(ladder.path).name})"
    return Value(float(x), kind, source, fmt=fmt, unit=unit, scale=scale)
