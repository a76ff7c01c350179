"""What chapter 8 (``08_amp_patterns``) says of its measurements: the ``torch.compile``
check and the ladders' compiled rung, checkpointing's memory, and the fp16-or-bf16
table and decision. Beside it, one module per pattern of PyTorch's AMP examples; each
check (``check_*``) takes the loop as an argument, so a test can hand it one written
wrong and see it fail; ``tiny`` holds what they share."""

from __future__ import annotations

from statistics import median
from typing import TYPE_CHECKING

from ampbook.chapters.ch3 import pace
from ampbook.core.devices import display_name
from ampbook.numerics.formats import get_format

if TYPE_CHECKING:
    from ampbook.chapters.ch8.checkpointing import MemoryRow
    from ampbook.chapters.ch8.compiled import CompileCheck


def compile_reading(c: CompileCheck) -> str:
    """``check_compile``'s graph casts against the eager forward's, in words."""
    kept = (
        "every cast autocast makes"
        if c.graph_casts["forward"] == c.eager_casts
        else f"{c.graph_casts['forward']} of the eager forward's {c.eager_casts} casts"
    )
    head = (
        f"Compilation kept {kept} in its forward graph "
        f"({c.graph_casts['forward']} casts, {c.graph_casts['backward']} in the "
        "backward graph)"
    )
    if c.kernels is not None:
        return (
            f"{head}, and inductor compiled the graphs, casts included, into "
            f"{c.kernels} kernels (measured here)."
        )
    return (
        f"{head}; the backend that ran, {c.backend}, runs the graphs' operators one "
        "by one, casts included, so nothing was fused here (inductor, which needs a "
        "C++ compiler, compiles the graphs into kernels of its own)."
    )


def ladder_compile_rows(ladders) -> list[tuple]:
    """(GPU, precision, eager s, compiled s, ratio) at each ladder's first compile."""
    rows = []
    for ladder in ladders:
        comp = next((r.index for r in ladder.rungs if r.compiles), None)
        below = [r.index for r in ladder.rungs if comp is not None and r.index < comp]
        if not below:
            continue
        for mode in ladder.modes():
            eager, fast = ladder.cell(below[-1], mode), ladder.cell(comp, mode)
            if eager and fast and eager.ok and fast.ok:
                e, f = eager.step_s, fast.step_s
                name = display_name(ladder.device_name)
                rows.append((name, fast.mode_label, e, f, e / f))
    return rows


def stored_inputs_text(seen: dict[str, dict[str, int]]) -> str:
    """``block_input_dtypes`` in words: "encoder 16 float32; decoder ..."."""
    return "; ".join(
        f"{part} " + ", ".join(f"{n} {d}" for d, n in sorted(counts.items()))
        for part, counts in seen.items()
    )


def stored_inputs_verdict(plain: dict, stream: dict, dtype_label: str) -> str:
    """What checkpointing stores of ERFNet, without and with ``fp16_stream``."""
    return (
        f"The block inputs checkpointing stores under autocast ({dtype_label}), "
        f"counted by dtype per part (measured here): {stored_inputs_text(plain)}; "
        f"with ERFNet's `fp16_stream` option on: {stored_inputs_text(stream)}."
    )


def gpu_step_ratios(gpu: dict) -> list[float]:
    """bf16 / fp16 step time over the timed epochs of ``gpu_16bit_runs``."""
    pairs = zip(gpu["amp-bf16"].timed_epochs(), gpu["amp-fp16"].timed_epochs())
    return [b["step_s"] / f["step_s"] for b, f in pairs]


def epoch_counts(ratios) -> str:
    """How many step ratios had fp16 faster and how many bf16 (with its lead)."""
    fp16 = sum(r > 1 for r in ratios)
    bf16 = [r for r in ratios if r < 1]
    lead = f" (by at most {1 / min(bf16) - 1:.1%})" if bf16 else ""
    return (
        f"fp16 faster in {fp16} of {len(ratios)} timed epochs, bf16 in "
        f"{len(bf16)}{lead}"
    )


def choice_verdict(gpu: dict, here: dict[str, tuple[float, ...]]) -> str:
    """The fp16-or-bf16 decision (``ch3.pace``): fp16 only where faster every time."""

    def reading(ratio: float, ratios: list[float], spread: str) -> tuple[str, bool]:
        judged, rng = "not judged: one timed step each, no spread", ""
        if len(ratios) > 1:  # ch3.pace of the ratios in words about fp16
            said = pace(ratios)
            judged = {"faster": "fp16 faster", "slower": "bf16 faster"}.get(said, said)
            rng = f", {spread} {min(ratios):.3f}-{max(ratios):.3f}"
        if spread == "per epoch" and judged == "within the epoch-to-epoch spread":
            judged = (
                f"{epoch_counts(ratios)}; the every-epoch rule (conservative) "
                "resolves no difference"
            )
        return f"bf16 / fp16 {ratio:.2f}{rng}: {judged}", judged == "fp16 faster"

    parts = []
    if gpu:
        name = display_name(gpu["amp-fp16"].device_name)
        ratios = gpu_step_ratios(gpu)
        text, fp16 = reading(
            gpu["amp-bf16"].step_s / gpu["amp-fp16"].step_s, ratios, "per epoch"
        )
        pick = "fp16 with a GradScaler" if fp16 else "bf16"
        parts.append(
            f"on the {name}, {text} (measured, committed chapter 3 runs), so the rule "
            f"below picks {pick} there"
        )
    else:
        parts.append("no committed GPU run to compare")
    f, b = here["amp-fp16"], here["amp-bf16"]
    ends = [min(b) / max(f), max(b) / min(f)] if min(len(f), len(b)) > 1 else []
    text, _ = reading(median(b) / median(f), ends, "over the timed steps")
    parts.append(f"on this machine, {text} (measured now)")
    return (
        "Step time: " + "; ".join(parts) + ". The rule: fp16 only where its step was "
        "faster in every epoch (every timed step); inside the spread, bf16, which "
        "needs no GradScaler and skips no steps."
    )


def memory_verdict(rows: list[MemoryRow]) -> str:
    """Which of ``memory_rows``' settings needed the least memory, and each's cost."""
    base = rows[0]
    least = min(rows, key=lambda r: r.peak_bytes)
    parts = [
        f"{r.setting} {r.peak_bytes / base.peak_bytes:.2f}x the memory and "
        f"{r.step_s / base.step_s:.2f}x the time"
        for r in rows[1:]
    ]
    return (
        f"Against fp32 (measured on this machine): {'; '.join(parts)}. "
        f"The least memory: {least.setting}."
    )


def gpu_16bit_runs(found) -> dict:
    """``{mode: TrainRun}`` of committed GPU runs of one setting with both modes."""
    by_setting: dict = {}
    for r in found.gpu_runs():
        by_setting.setdefault((r.device_name, r.setting), {})[r.mode] = r
    for runs in by_setting.values():
        if {"amp-fp16", "amp-bf16"} <= set(runs):
            return {m: runs[m] for m in ("amp-fp16", "amp-bf16")}
    return {}


def choice_rows(
    flushed: dict, skipped_here: int, steps_here: int, gpu: dict, here: dict
) -> list[tuple]:
    """The fp16-or-bf16 table's rows (what, fp16, bf16, kind and source)."""
    f16, b16 = get_format("fp16"), get_format("bf16")
    ch1 = "computed: ampbook.numerics.formats (chapter 1)"
    rows = [
        (what, format(getattr(f16, a), fmt), format(getattr(b16, a), ".3g"), ch1)
        for what, a, fmt in (
            ("largest finite value", "max", ".4g"),
            ("smallest normal", "smallest_normal", ".3g"),
            ("unit roundoff", "unit_roundoff", ".3g"),
        )
    ]
    rows += [
        (
            "gradients flushed to 0, unscaled",
            f"{flushed['fp16']:.2%}",
            f"{flushed['bf16']:.2%}",
            "measured here: ERFNet, one fp32 backward (ch. 4)",
        ),
        (
            f"steps skipped, {steps_here} steps",
            str(skipped_here),
            "0 (no scaler)",
            "measured here: GradScaler, ERFNet (chapter 4)",
        ),
    ]
    if gpu:
        f, b = gpu["amp-fp16"], gpu["amp-bf16"]
        src = f"measured: committed {display_name(f.device_name)} runs (chapter 3)"
        rows += [
            (
                "GPU skipped steps, whole run",
                str(f.skipped_steps),
                f"{b.skipped_steps} (no scaler)",
                src,
            ),
            (
                "GPU step (ms)",
                f"{f.one_step_s * 1e3:.1f}",
                f"{b.one_step_s * 1e3:.1f}",
                src,
            ),
            (
                "GPU final val pixel accuracy",
                f"{f.final_val_pixel_accuracy:.3f}",
                f"{b.final_val_pixel_accuracy:.3f}",
                src,
            ),
        ]
    rows.append(
        (
            "this machine's step (ms)",
            f"{median(here['amp-fp16']) * 1e3:.1f}",
            f"{median(here['amp-bf16']) * 1e3:.1f}",
            "measured here: ERFNet forward+backward, median",
        )
    )
    return rows


def last_epoch_changes(gpu: dict) -> dict[str, float]:
    """|last - previous| val pixel accuracy per mode: the noise for a final gap."""
    changes = {}
    for mode, run in gpu.items():
        acc = [e["val_pixel_accuracy"] for e in run.record["epochs"]]
        changes[mode] = abs(acc[-1] - acc[-2]) if len(acc) > 1 else float("nan")
    return changes
