"""What the closing Findings chapter (10_findings) says of a results folder's GPU
runs (per GPU the provenance, a table and the sentences that read it, true of whatever
the folder holds) and the intro's "In short" (``in_short``)."""

from __future__ import annotations

from ampbook.chapters.ch3 import (
    AMP_MODE,
    BASE_MODE,
    epoch_ratio,
    loader_reading,
    loader_setting,
    pace,
    spread_text,
    step_in_loop,
)
from ampbook.chapters.ch5 import step_alone
from ampbook.core.page import GIB, md_table_text
from ampbook.results import ResultSet, provenance


def gpu_findings(rs: ResultSet) -> str:
    """Markdown: per GPU with complete runs in ``rs`` the provenance, the runs' table
    and AMP against each fp32 baseline; or a sentence saying there are none."""
    from ampbook.core.devices import display_name

    runs = rs.gpu_runs()
    if not runs:
        return (
            f"The results folder (`{rs.directory}`) holds no complete GPU training "
            "run, so this copy of the book has no GPU findings to report."
        )
    parts = []
    for device in sorted({r.device_name for r in runs}):
        mine = [r for r in runs if r.device_name == device]
        mine.sort(key=lambda r: r.one_step_s)
        first, s = mine[0], mine[0].setting
        data = "synthetic" if s.synthetic_data else "Cityscapes"
        size = f"{s.width}x{s.height}, batch {s.batch_size}"
        settings = {"": size, "workers": s.workers, "data": data}
        env, started = first.record["environment"], first.record.get("started")
        line = provenance(env, started, settings)
        rows = [(r.mode_label, f"{r.one_step_s * 1e3:.1f}", f"{r.data_wait_share:.0%}",
                 f"{r.images_per_s:.1f}",
                 f"{r.memory_bytes / GIB:.2f}" if r.memory_bytes else "–")
                for r in mine]  # fmt: skip
        heads = ["precision", "step in the loop (ms)", "waiting share", "images/s",
                 "peak (GiB)"]  # fmt: skip
        pairs = [p for p in rs.pairs() if p.setting.device_name == device]
        sentences = [f"- {pair_sentence(rs, p)}" for p in pairs]
        head = f"**{display_name(device)}**: {line.split(' · ', 1)[-1]}."
        text = [head, md_table_text(rows, heads), "\n".join(sentences)]
        parts.append("\n\n".join(text).rstrip())
    return "\n\n".join(parts)


def pair_sentence(rs: ResultSet, p) -> str:
    """One pair of GPU runs in one sentence: the step in the loop and the epoch, each
    with its range and ``pace``, the step timed alone where layer profiles are
    committed, why the epoch gained less than the step, the peak memory."""
    step, epoch = step_in_loop(rs, pair=p), epoch_ratio(rs, pair=p)
    alone = step_alone(rs, pair=p)
    text = f"{p.amp.mode_label} against {p.baseline.mode_label}: "
    if alone is not None:
        text += f"the step timed alone ran {alone} (layer profiles), "
    text += (
        f"the step in the loop {spread_text(step)} ({pace(step)}), the epoch "
        f"{spread_text(epoch)} ({pace(epoch)})"
    )
    wait = max(p.amp.data_wait_share, p.baseline.data_wait_share)
    if p.loader_bound:
        text += (
            f"; with {loader_setting(p)} the loop waited for data {wait:.0%} of its "
            f"time, {loader_reading(p)}"
        )
    elif float(epoch.hi) < float(step.lo):
        text += (
            f"; the epoch gained less than the step in every epoch, because the "
            f"loader kept the GPU waiting {p.amp.data_wait_share:.0%} of the AMP epoch"
        )
    if p.memory_ratio is not None:
        text += f"; peak memory {p.memory_ratio:.0%} of the baseline's"
    return text + "."


def in_short(rs: ResultSet) -> str:
    """One plain-text clause per GPU for the intro's "In short" box (three lines at
    1300 px for one GPU): AMP's step against TF32's (else the first baseline paired),
    timed alone and in the loop, the epoch ratio with the data wait where the loader
    set it, the peak memory. Joined with "; ", no final period (the bullet ends)."""
    from ampbook.core.devices import display_name

    clauses = []
    for device in sorted({p.setting.device_name for p in rs.pairs()}):
        pairs = [p for p in rs.pairs() if p.setting.device_name == device]
        fp16 = [p for p in pairs if p.amp.mode == AMP_MODE] or pairs
        main = next((p for p in fp16 if p.baseline.mode == BASE_MODE), fp16[0])
        amp = "AMP" if main.amp.mode == AMP_MODE else main.amp.mode_label
        base = "TF32" if main.baseline.mode == BASE_MODE else main.baseline.mode_label
        alone = step_alone(rs, pair=main)
        loop = spread_text(step_in_loop(rs, pair=main), epochs=False)
        epoch = spread_text(epoch_ratio(rs, pair=main), epochs=False)
        alone = f"timed alone {alone}, " if alone else ""
        text = f"On the {display_name(device)}, {amp}'s step against {base}'s: "
        text += f"{alone}in the loop {loop}; the book's epochs {epoch}"
        if main.loader_bound:
            wait = max(main.amp.data_wait_share, main.baseline.data_wait_share)
            text += f", {wait:.0%} of each waiting for data (our loader)"
        if main.memory_ratio is not None:
            text += f"; peak memory {main.memory_ratio:.0%} of fp32's"
        clauses.append(text)
    if not clauses:
        return "No GPU runs to compare are committed with this copy of the book"
    return "; ".join(clauses)
