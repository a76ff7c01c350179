"""What chapter 8 (AMP in your own loop, ``08_amp_patterns``) says of its
measurements: the reading of the ``torch.compile`` check and of the committed ladders'
rung 5, the memory verdict of checkpointing against AMP, and the fp16-or-bf16 table
and its decision, from the committed chapter 3 GPU runs and this machine's steps.

Beside it, one module per pattern of PyTorch's AMP examples, in the chapter's order:
``accumulation``, ``shared_scaler`` (several models, losses and optimizers, one
GradScaler), ``penalty`` (a gradient penalty), ``custom_function``, ``inference``,
``ddp``, ``fsdp``, ``fp16_or_bf16``, ``compiled`` (``torch.compile``) and
``checkpointing``; ``tiny`` holds the tiny network and the comparison they share. Each
loop is a plain function a reader can paste; each check (``check_*``) takes the loop as
an argument, so a test can hand it a variant written wrong and see it fail."""

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
    """What ``check_compile`` (``ampbook.chapters.ch8.compiled``) shows of the
    casts, in words true of the backend that ran: the casts in the compiled forward
    graph against the eager forward's, and whether inductor compiled them into
    kernels."""
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
    """The first compiled rung (``torch.compile``) beside the eager rung below it, of
    each committed GPU ladder: (GPU, precision, eager step s, compiled step s, eager /
    compiled)."""

    rows = []
    for ladder in ladders:
        comp = next((r.index for r in ladder.rungs if r.compiles), None)
        below = [r.index for r in ladder.rungs if comp is not None and r.index < comp]
        if not below:
            continue
        for mode in ladder.modes():
            eager, fast = ladder.cell(below[-1], mode), ladder.cell(comp, mode)
            if eager and fast and eager.ok and fast.ok:
                rows.append(
                    (
                        display_name(ladder.device_name),
                        fast.mode_label,
                        eager.step_s,
                        fast.step_s,
                        eager.step_s / fast.step_s,
                    )
                )
    return rows


def stored_inputs_text(seen: dict[str, dict[str, int]]) -> str:
    """``block_input_dtypes`` (``ampbook.chapters.ch8.checkpointing``) in words:
    "encoder 16 float32; decoder ..."."""
    return "; ".join(
        f"{part} " + ", ".join(f"{n} {d}" for d, n in sorted(counts.items()))
        for part, counts in seen.items()
    )


def stored_inputs_verdict(plain: dict, stream: dict, dtype_label: str) -> str:
    """Chapter 8's sentence on what checkpointing stores: ``block_input_dtypes`` of
    ERFNet as it is and with its ``fp16_stream`` option on, under autocast to
    ``dtype_label``."""
    return (
        f"The block inputs checkpointing stores under autocast ({dtype_label}), "
        f"counted by dtype per part (measured here): {stored_inputs_text(plain)}; "
        f"with ERFNet's `fp16_stream` option on: {stored_inputs_text(stream)}."
    )


def _ratio_pace(ratios) -> str:
    """``ampbook.chapters.ch3.pace`` of bf16 / fp16 step ratios (above 1: fp16
    faster) in words about fp16, or "not judged" with fewer than two ratios."""

    if len(ratios) < 2:
        return "not judged: one timed step each, no spread"
    verdict = pace(ratios)
    return {"faster": "fp16 faster", "slower": "bf16 faster"}.get(verdict, verdict)


def gpu_step_ratios(gpu: dict) -> list[float]:
    """bf16 / fp16 step time epoch by epoch of ``gpu_16bit_runs``' two runs (the
    timed epochs they share)."""
    pairs = zip(gpu["amp-bf16"].timed_epochs(), gpu["amp-fp16"].timed_epochs())
    return [b["step_s"] / f["step_s"] for b, f in pairs]


def epoch_counts(ratios) -> str:
    """How many of the bf16 / fp16 step ratios had fp16 faster (above 1) and how many
    bf16 (below 1, with its largest lead), in words."""
    fp16 = sum(r > 1 for r in ratios)
    bf16 = [r for r in ratios if r < 1]
    lead = f" (by at most {1 / min(bf16) - 1:.1%})" if bf16 else ""
    return (
        f"fp16 faster in {fp16} of {len(ratios)} timed epochs, bf16 in "
        f"{len(bf16)}{lead}"
    )


def choice_verdict(gpu: dict, here: dict[str, tuple[float, ...]]) -> str:
    """The reading of the fp16/bf16 table and the decision it gives: the bf16 / fp16
    step ratio on the committed GPU (``gpu``: ``gpu_16bit_runs``, empty when none)
    with its per-epoch range, and on this machine (``here``: the timed steps' seconds
    per ``amp-fp16``/``amp-bf16``) with the range over its timed steps, each judged by
    ``ampbook.chapters.ch3.pace``: fp16 only where it was faster in every epoch
    (every pair of timed steps), else bf16."""

    def reading(ratio: float, ratios: list[float], spread: str) -> tuple[str, bool]:
        judged = _ratio_pace(ratios)
        rng = (
            f", {spread} {min(ratios):.3f}-{max(ratios):.3f}" if len(ratios) > 1 else ""
        )
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
    """Which of ``memory_rows``' settings (``ampbook.chapters.ch8.checkpointing``)
    needed the least memory and what each cost in time, against fp32."""
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
    """The committed chapter 3 GPU runs of one GPU and setting that have both
    ``amp-fp16`` and ``amp-bf16`` (``{mode: TrainRun}``), or ``{}``."""
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
    """The fp16-or-bf16 table: (what, fp16, bf16, kind and source) per line.
    ``flushed``: ``flushed_fractions`` (``ampbook.chapters.ch8.fp16_or_bf16``) of
    this machine's gradients; ``skipped_here`` of ``steps_here`` GradScaler steps;
    ``gpu``: ``gpu_16bit_runs``; ``here``: the timed steps' seconds per
    ``amp-fp16``/``amp-bf16`` on this machine."""
    f16, b16 = get_format("fp16"), get_format("bf16")
    ch1 = "computed: ampbook.numerics.formats (chapter 1)"
    rows = [
        ("largest finite value", f"{f16.max:.4g}", f"{b16.max:.3g}", ch1),
        (
            "smallest normal",
            f"{f16.smallest_normal:.3g}",
            f"{b16.smallest_normal:.3g}",
            ch1,
        ),
        ("unit roundoff", f"{f16.unit_roundoff:.3g}", f"{b16.unit_roundoff:.3g}", ch1),
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
    """How much each of ``gpu_16bit_runs``' runs moved its val pixel accuracy in its
    last epoch (|last - the one before|, per mode): the run-to-run noise a gap
    between their final accuracies is to be read against."""
    changes = {}
    for mode, run in gpu.items():
        acc = [e["val_pixel_accuracy"] for e in run.record["epochs"]]
        changes[mode] = abs(acc[-1] - acc[-2]) if len(acc) > 1 else float("nan")
    return changes
