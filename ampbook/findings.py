"""What the closing Findings chapter says about the GPU runs of a results folder: per
GPU, the provenance, a table of the runs and the sentences that read it, all computed
from ``ampbook.results`` so that they are true of whatever the folder holds."""

from __future__ import annotations

from ampbook.plots import GIB, md_table_text
from ampbook.results import ResultSet, provenance


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def pace(ratio: float) -> str:
    """A speed ratio (above 1: faster) in words; within 3% counts as the same."""
    if ratio > 1.03:
        return "faster"
    if ratio < 0.97:
        return "slower"
    return "about the same"


def gpu_findings(rs: ResultSet) -> str:
    """Markdown: one part per GPU with complete training runs in ``rs`` (provenance
    line, runs table, AMP against each fp32 baseline), or one sentence saying the
    folder has none."""
    from ampbook.devices import display_name

    runs = rs.gpu_runs()
    if not runs:
        return (
            f"The results folder (`{rs.directory}`) holds no complete GPU training "
            "run, so this copy of the book has no GPU findings to report."
        )
    parts = []
    for device in sorted({r.device_name for r in runs}):
        mine = sorted(
            (r for r in runs if r.device_name == device), key=lambda r: r.one_step_s
        )
        first = mine[0]
        s = first.setting
        settings = {
            "": f"{s.height}x{s.width}, batch {s.batch_size}",
            "workers": s.workers,
            "data": "synthetic" if s.synthetic_data else "Cityscapes",
        }
        line = provenance(
            first.record["environment"], first.record.get("started"), settings
        )
        rows = [
            (
                r.mode_label,
                _ms(r.one_step_s),
                f"{r.data_wait_share:.0%}",
                f"{r.images_per_s:.1f}",
                f"{r.memory_bytes / GIB:.2f}" if r.memory_bytes else "–",
            )
            for r in mine
        ]
        table = md_table_text(
            rows,
            ["precision", "step (ms)", "waiting share", "images/s", "peak (GiB)"],
        )
        sentences = []
        for p in [p for p in rs.pairs() if p.setting.device_name == device]:
            step, epoch = p.step_speedup, p.speedup
            text = (
                f"{p.amp.mode_label} against {p.baseline.mode_label}: the step ran "
                f"{step:.2f}x ({pace(step)}), the epoch {epoch:.2f}x ({pace(epoch)})"
            )
            if epoch < step - 0.03:
                text += (
                    f", because the loader kept the GPU waiting "
                    f"{p.amp.data_wait_share:.0%} of the AMP epoch"
                )
            if p.memory_ratio is not None:
                text += f"; peak memory {p.memory_ratio:.0%} of the baseline's"
            sentences.append(f"- {text}.")
        parts.append(
            "\n\n".join(
                [
                    f"**{display_name(device)}**: {line.split(' · ', 1)[-1]}.",
                    table,
                    "\n".join(sentences),
                ]
            ).rstrip()
        )
    return "\n\n".join(parts)


def in_short(rs: ResultSet) -> str:
    """One plain-text sentence per GPU for the intro's "In short" box: AMP's step and
    epoch against fp32 with TF32 (else the first baseline the folder pairs it with),
    strict fp32's step where measured, the wait for data and the peak memory. Says so
    when the folder has no pair to compare."""
    from ampbook.devices import display_name

    sentences = []
    for device in sorted({p.setting.device_name for p in rs.pairs()}):
        pairs = [p for p in rs.pairs() if p.setting.device_name == device]
        fp16 = [p for p in pairs if p.amp.mode == "amp-fp16"] or pairs
        main = next((p for p in fp16 if p.baseline.mode == "fp32-tf32"), fp16[0])
        strict = next(
            (
                p
                for p in fp16
                if p.baseline.mode == "fp32" and p.amp.mode == main.amp.mode
            ),
            None,
        )
        text = (
            f"On the {display_name(device)}, the runs committed with the book measured "
            f"{main.amp.mode_label}'s step at {main.step_speedup:.2f}x the speed of "
            f"{main.baseline.mode_label}"
        )
        if strict is not None and strict is not main:
            text += (
                f" and {strict.step_speedup:.2f}x that of {strict.baseline.mode_label}"
            )
        but = "but" if main.speedup < main.step_speedup - 0.03 else "and"
        text += (
            f", {but} the whole "
            f"epoch at {main.speedup:.2f}x, the loader keeping the GPU "
            f"waiting {main.amp.data_wait_share:.0%} of it"
        )
        if main.memory_ratio is not None:
            text += f"; peak memory was {main.memory_ratio:.0%} of fp32's"
        sentences.append(text + ".")
    if not sentences:
        return "No GPU runs to compare are committed with this copy of the book."
    return " ".join(sentences)
