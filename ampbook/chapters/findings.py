"""What the closing Findings chapter says about the GPU runs of a results folder: per
GPU, the provenance, a table of the runs and the sentences that read it, all computed
from ``ampbook.results`` so that they are true of whatever the folder holds."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ampbook.core.page import GIB, md_table_text
from ampbook.core.provenance import Value, measured
from ampbook.results import ResultSet, provenance

# The names of the two settings the book compares: the ERFNet authors'
# training defaults (1024x512, batch 6, 4 workers; Eromera/erfnet_pytorch's
# train/main.py), at which the H200 runs were made, and the setting chapter 5 solves
# from the post's memory figures (its values are chapter 5's).
AUTHORS_DEFAULTS = "the ERFNet authors' defaults"
POST_LIKELY = "the post's likely setting"


def setting_name(setting) -> str | None:
    """``AUTHORS_DEFAULTS`` for a training setting that is the ERFNet authors' defaults
    (1024x512, batch 6, 4 loader workers, NCHW), else None."""
    defaults = (1024, 512, 6, 4, False)
    got = (
        setting.width,
        setting.height,
        setting.batch_size,
        setting.workers,
        setting.channels_last,
    )
    return AUTHORS_DEFAULTS if got == defaults else None


AMP_MODE, BASE_MODE = "amp-fp16", "fp32-tf32"  # the headline comparison


class Spread(NamedTuple):
    """A ratio per epoch: its median and its range, each a ``Value``, and the numbers
    of the epochs the range is taken over (``()`` where unknown)."""

    median: Value
    lo: Value
    hi: Value
    epochs: tuple = ()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def pace(spread) -> str:
    """A speed ratio (above 1: faster) in words, judged against its spread from epoch
    to epoch (a ``Spread``, or the per-epoch ratios): "faster" only where every epoch
    was faster, "slower" where every epoch was slower, else within the spread. A single
    figure without a spread is not judged (``ValueError``): no fixed margin stands in
    for the runs' own noise."""
    if isinstance(spread, Spread):
        lo, hi = float(spread.lo), float(spread.hi)
    else:
        values = [float(x) for x in spread]
        if len(values) < 2:
            raise ValueError(
                "pace needs the ratio epoch by epoch (at least two epochs) to judge "
                "it against its spread"
            )
        lo, hi = min(values), max(values)
    if lo > 1:
        return "faster"
    if hi < 1:
        return "slower"
    return "within the epoch-to-epoch spread"


def headline_pair(pairs):
    """The pair that stands for the post's comparison: amp-fp16 against fp32 with TF32
    on where there is one, else the first pair; None without pairs."""
    pairs = list(pairs)
    for p in pairs:
        if p.amp.mode == AMP_MODE and p.baseline.mode == BASE_MODE:
            return p
    return pairs[0] if pairs else None


def _pair(rs: ResultSet, device: str | None):
    return headline_pair(
        p for p in rs.pairs() if device is None or p.setting.device_name == device
    )


def _runs_source(p) -> str:
    from ampbook.core.devices import display_name

    names = ", ".join(
        Path(r.path).name for r in (p.baseline, p.amp) if getattr(r, "path", None)
    )
    return f"training runs on the {display_name(p.setting.device_name)} ({names})"


def profile_pair(rs: ResultSet, device: str | None = None, pair=None):
    """The ``(baseline, amp)`` layer profiles of the headline comparison (of ``pair``'s
    modes, device and setting where given), or None. ``rs`` is a ResultSet or its
    ``profile_pairs()``."""
    amp_mode = pair.amp.mode if pair is not None else AMP_MODE
    base_mode = pair.baseline.mode if pair is not None else BASE_MODE
    pps = rs.profile_pairs() if hasattr(rs, "profile_pairs") else list(rs)
    for b, a in pps:
        if a.mode != amp_mode or b.mode != base_mode:
            continue
        if device is not None and a.device_name != device:
            continue
        if pair is not None:
            s = pair.setting
            if (a.device_name, a.batch_size, a.height, a.width) != (
                s.device_name,
                s.batch_size,
                s.height,
                s.width,
            ):
                continue
        return b, a
    return None


def _profiles_source(b, a) -> str:
    from ampbook.core.devices import display_name

    return (
        f"layer profiles on the {display_name(a.device_name)} "
        f"({Path(b.path).name}, {Path(a.path).name})"
    )


def step_alone(rs: ResultSet, device: str | None = None, pair=None) -> Value | None:
    """AMP's step *timed alone* against fp32 with TF32's (baseline wall time over
    AMP's, no loader), from the committed layer profiles: a measured ``Value`` (``x``),
    or None without them."""
    pp = profile_pair(rs, device, pair)
    if pp is None:
        return None
    b, a = pp
    return measured(
        b.step_s / a.step_s,
        f"{_profiles_source(b, a)}: {a.step_s * 1e3:.2f} ms against "
        f"{b.step_s * 1e3:.2f} ms",
        fmt=".2f",
        unit="x",
    )


def kernel_speedup(rs: ResultSet, device: str | None = None, pair=None) -> Value | None:
    """The same profiles' kernel time ratio (baseline over AMP): how much faster AMP's
    kernels were, idle time left out; None without profiles."""
    pp = profile_pair(rs, device, pair)
    if pp is None:
        return None
    b, a = pp
    return measured(
        b.kernel_s / a.kernel_s,
        f"{_profiles_source(b, a)}: kernels {a.kernel_s * 1e3:.2f} ms against "
        f"{b.kernel_s * 1e3:.2f} ms",
        fmt=".2f",
        unit="x",
    )


def _shared_epochs(p) -> tuple:
    """The numbers of the timed epochs both runs of pair ``p`` share."""
    pairs = zip(p.baseline.timed_epochs(), p.amp.timed_epochs())
    return tuple(a.get("epoch") for _, a in pairs if a.get("epoch") is not None)


def _spread(value: float, per_epoch: list[float], source: str, epochs=()) -> Spread:
    def v(x):
        return measured(x, source, fmt=".2f", unit="x")

    per_epoch = per_epoch or [value]
    if len(epochs) != len(per_epoch):
        epochs = ()
    return Spread(v(value), v(min(per_epoch)), v(max(per_epoch)), tuple(epochs))


def step_in_loop(rs: ResultSet, device: str | None = None, pair=None) -> Spread | None:
    """AMP's step *in the training loop* against its baseline (the time inside the
    step, data wait left out), from the committed training runs: the ratio of the two
    runs' median step times and its range epoch by epoch; None without a pair."""
    p = pair if pair is not None else _pair(rs, device)
    if p is None:
        return None
    return _spread(p.step_speedup, p.step_speedups, _runs_source(p), _shared_epochs(p))


def epoch_ratio(rs: ResultSet, device: str | None = None, pair=None) -> Spread | None:
    """The whole epoch's ratio (baseline over AMP wall time, data wait included), from
    the same runs, with its range epoch by epoch; None without a pair."""
    p = pair if pair is not None else _pair(rs, device)
    if p is None:
        return None
    return _spread(p.speedup, p.epoch_speedups, _runs_source(p), _shared_epochs(p))


def spread_text(s: Spread, epochs: bool = True) -> str:
    """``"0.96-1.12x over epochs 2-10"``: the range of a ratio over the epochs it was
    taken over (the median left out: the range is the finding); ``epochs=False``
    leaves the epochs out (for a second range over the same epochs in a sentence)."""
    lo, hi = s.lo.number(), s.hi.number()
    if lo == hi:
        text = hi
    else:
        text = f"{lo[:-1]}-{hi}"
    if not epochs:
        return text
    if len(s.epochs) > 1:
        first, last = min(s.epochs), max(s.epochs)
        if list(s.epochs) == list(range(first, last + 1)):
            return f"{text} over epochs {first}-{last}"
        return f"{text} over epochs {', '.join(map(str, s.epochs))}"
    if len(s.epochs) == 1:
        return f"{text} (epoch {s.epochs[0]})"
    return f"{text} epoch by epoch" if lo != hi else f"{text} in every epoch"


def wait_direction(p) -> str | None:
    """``"longer"`` where AMP's run of pair ``p`` waited longer for data than its
    baseline in every timed epoch they share, ``"shorter"`` where it waited less in
    every one, else None (the two waits crossed: noise)."""
    pairs = list(zip(p.baseline.timed_epochs(), p.amp.timed_epochs()))
    if not pairs:
        return None
    if all(a["data_wait_s"] > b["data_wait_s"] for b, a in pairs):
        return "longer"
    if all(a["data_wait_s"] < b["data_wait_s"] for b, a in pairs):
        return "shorter"
    return None


def loader_reading(p) -> str:
    """What the epoch ratio of a loader-bound pair measures, decided from the runs'
    data wait epoch by epoch (``wait_direction``): where AMP waited longer (or less)
    in every epoch, the loader, systematically; else the loader's noise. Never AMP."""
    d = wait_direction(p)
    if d is None:
        return "so the epoch ratio measures the loader's noise, not AMP"
    more = "longer" if d == "longer" else "less"
    return f"AMP's run {more} in every epoch, so the epoch ratio measures the loader"


def step_speedup_text(rs: ResultSet, device: str | None = None, pair=None) -> str:
    """The headline step speedup in one phrase, one figure per meaning: "timed alone
    0.99x; in the loop 0.96-1.12x per epoch" (the first from the layer profiles, the
    second from the training runs; either part left out where its data is not
    committed, '' where neither is)."""
    parts = []
    alone = step_alone(rs, device, pair)
    if alone is not None:
        parts.append(f"timed alone {alone}")
    loop = step_in_loop(rs, device, pair)
    if loop is not None:
        parts.append(f"in the loop {spread_text(loop)}")
    return "; ".join(parts)


def gpu_findings(rs: ResultSet) -> str:
    """Markdown: one part per GPU with complete training runs in ``rs`` (provenance
    line, runs table, AMP against each fp32 baseline), or one sentence saying the
    folder has none."""
    from ampbook.core.devices import display_name

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
            "": f"{s.width}x{s.height}, batch {s.batch_size}",
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
            [
                "precision",
                "step in the loop (ms)",
                "waiting share",
                "images/s",
                "peak (GiB)",
            ],
        )
        sentences = [
            f"- {pair_sentence(rs, p)}"
            for p in rs.pairs()
            if p.setting.device_name == device
        ]
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


def loader_setting(p) -> str:
    """``"4 loader workers on 16 CPU threads (our setting)"``: the run's loader, a
    setting of the run, not a property of the GPU."""
    threads = p.amp.record.get("environment", {}).get("cpu_threads")
    host = f" on {threads} CPU threads" if threads else ""
    return f"{p.setting.workers} loader workers{host} (our setting)"


def pair_sentence(rs: ResultSet, p) -> str:
    """One pair of GPU runs in one sentence: the step in the loop and the epoch, each
    with its range epoch by epoch and judged against it (``pace``), the step timed
    alone where layer profiles of that setting are committed, why the epoch gained
    less than the step where it did, and the peak memory."""
    step, epoch = step_in_loop(rs, pair=p), epoch_ratio(rs, pair=p)
    text = f"{p.amp.mode_label} against {p.baseline.mode_label}: "
    alone = step_alone(rs, pair=p)
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
    """One plain-text sentence per GPU for the intro's "In short" box: AMP's step
    against fp32 with TF32 (else the first baseline the folder pairs it with), timed
    alone (layer profiles) and in the loop (training runs, per epoch), strict fp32's
    step in the loop where measured, the epoch with the loader named as our setting,
    and the peak memory. Says so when the folder has no pair to compare."""
    from ampbook.core.devices import display_name

    sentences = []
    for device in sorted({p.setting.device_name for p in rs.pairs()}):
        pairs = [p for p in rs.pairs() if p.setting.device_name == device]
        fp16 = [p for p in pairs if p.amp.mode == AMP_MODE] or pairs
        main = next((p for p in fp16 if p.baseline.mode == BASE_MODE), fp16[0])
        strict = next(
            (
                p
                for p in fp16
                if p.baseline.mode == "fp32" and p.amp.mode == main.amp.mode
            ),
            None,
        )
        alone = step_alone(rs, pair=main)
        text = (
            f"On the {display_name(device)}, the committed runs measured "
            f"{main.amp.mode_label}'s step against {main.baseline.mode_label}'s: "
            + (f"timed alone {alone}, " if alone is not None else "")
            + f"in the loop {spread_text(step_in_loop(rs, pair=main))}"
        )
        if strict is not None and strict is not main:
            text += (
                f"; against {strict.baseline.mode_label}'s "
                f"{spread_text(step_in_loop(rs, pair=strict), epochs=False)}"
            )
        epoch = epoch_ratio(rs, pair=main)
        text += f". The epoch ran at {spread_text(epoch, epochs=False)}"
        if main.loader_bound:
            wait = max(main.amp.data_wait_share, main.baseline.data_wait_share)
            text += (
                f": with {loader_setting(main)} the loop waited for data {wait:.0%} "
                f"of the time, {loader_reading(main)}"
            )
        if main.memory_ratio is not None:
            text += f". Peak memory was {main.memory_ratio:.0%} of fp32's"
        sentences.append(text + ".")
    if not sentences:
        return "No GPU runs to compare are committed with this copy of the book."
    return " ".join(sentences)
