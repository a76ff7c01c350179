"""What chapter 3 (03_amp_training) says: the one-line verdicts on measured fp32/AMP
pairs, for conclusions that depend on the machine, and the readings of the committed GPU
runs that later chapters reuse (the headline pair, a ratio's spread epoch by epoch and
its ``pace``, the loader's reading).

A chapter's markdown describes every case (AMP faster, AMP slower; the loader or the
step setting the pace); these functions print the one that this machine's numbers
support, so that no paragraph is chosen by an ``if`` in a notebook.

    speed_verdict(pair, probe)          # pair: ampbook.results.RunPair; probe: CPU
                                        # kernel probe (ampbook.measure.cpu_kernels) or
                                        None
    gpu_pair_verdict(pair)              # a GPU pair: epoch or step, and the loader
    gpu_training_answer(pairs)          # the chapter's "In short": the post's findings
    saving_verdict(fp32, amp)           # the memory AMP saved or cost, in one line
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ampbook.core.provenance import Value, measured
from ampbook.results import ResultSet

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


LOADER_BOUND_SHARE = 0.5  # a loop waiting this share of its time is the loader's
SAME_WITHIN = 0.05  # step ratios this close to 1 are not called faster or slower


class Spread(NamedTuple):
    """A ratio per epoch: its median and its range, each a ``Value``, and the numbers
    of the epochs the range is taken over (``()`` where unknown)."""

    median: Value
    lo: Value
    hi: Value
    epochs: tuple = ()


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
    return (
        f"AMP's run waited {more} for data in every epoch, so the epoch ratio "
        "measures the loader"
    )


def loader_setting(p) -> str:
    """``"4 loader workers on 16 CPU threads (our setting)"``: the run's loader, a
    setting of the run, not a property of the GPU."""
    threads = p.amp.record.get("environment", {}).get("cpu_threads")
    host = f" on {threads} CPU threads" if threads else ""
    return f"{p.setting.workers} loader workers{host} (our setting)"


def pair_device(pair) -> str:
    """The device of a pair, as the page names it: a GPU by ``display_name``."""
    name = pair.setting.device_name
    if pair.amp.is_cuda:
        from ampbook.core.devices import display_name

        return display_name(name)
    from ampbook.core.page import md_escape

    return md_escape(name)


def speed_verdict(pair, probe=None) -> str:
    """How the AMP run's step time compared with its fp32 baseline on this device, and,
    on a CPU, what the kernel probe (``ampbook.measure.cpu_kernels.ConvProbe``) measured
    for that dtype's convolution: the CPU's flags say which instructions it has, not
    which kernels PyTorch runs, so nothing is read from them."""
    amp, base = pair.amp, pair.baseline
    ratio = amp.step_s / base.step_s
    if abs(ratio - 1) < SAME_WITHIN:
        way = (
            f"about the same: within {SAME_WITHIN:.0%}, and one pair of runs "
            "measures no spread to tell a smaller difference by"
        )
    else:
        way = (
            f"{'faster' if ratio < 1 else 'slower'} in this one pair of runs: one "
            "pair, no spread to judge the difference by"
        )
    text = (
        f"On {pair_device(pair)}, the {amp.mode_label} step took {ratio:.2f} "
        f"times the time of the {base.mode_label} step ({way})."
    )
    if not amp.is_cuda and probe is not None:
        from ampbook.measure.cpu_kernels import precision_dtype

        dtype = precision_dtype(amp.precision)
        if dtype in probe.dtypes:
            text += f" The kernel probe: {probe.verdict(dtype)}"
            conv = probe.dtypes[dtype]
            if not conv.error and "fp32" in probe.dtypes and ratio > 1:
                slow = probe.slowdown(dtype)
                if slow > 4 and ratio < slow / 4:
                    s = pair.setting
                    text += (
                        f" The step lost {ratio:.2f}x where the convolution lost "
                        f"{slow:.3g}x: at {s.width}x{s.height} pixels most of the "
                        "step's time is work that does not grow with the "
                        "convolutions' arithmetic, and this ratio does not measure the "
                        "16-bit kernels."
                    )
    if min(amp.epochs_completed, base.epochs_completed) == 1:
        text += " With one epoch the step time includes one-off start-up costs."
    return text


def gpu_pair_verdict(pair) -> str:
    """What one GPU pair says about AMP's speed, in one line. The step in the loop
    (the time inside the step, data wait left out) and the epoch are each given with
    their range epoch by epoch and judged against it (``pace``: "faster" only
    where every epoch was). A loop that waited for data at least half its time
    (``RunPair.loader_bound``) ran at the loader's pace: its epoch ratio measures the
    loader's noise (the spread of the data wait per epoch is printed). The workers and
    the host's CPU threads are printed, because they set the loader's pace: a setting
    of the run, not a property of the GPU."""
    amp, base = pair.amp, pair.baseline
    head = f"{pair_device(pair)}, {pair.label}"
    st, ep = step_in_loop(None, pair=pair), epoch_ratio(None, pair=pair)
    step = f"the step in the loop ran {spread_text(st)} ({pace(st)})"
    wait = max(amp.data_wait_share, base.data_wait_share)
    if pair.loader_bound:
        lo, hi = amp.data_wait_range
        blo, bhi = base.data_wait_range
        return (
            f"{head}: the loop waited for data {wait:.0%} of its time "
            f"({min(lo, blo):.2f}-{max(hi, bhi):.2f} s an epoch) with "
            f"{loader_setting(pair)}, {loader_reading(pair)} (epoch ratio "
            f"{spread_text(ep)}); {step}."
        )
    return (
        f"{head}: the epoch ran {spread_text(ep)} ({pace(ep)}) with at most "
        f"{wait:.0%} of the loop waiting for data, with {loader_setting(pair)}; "
        f"{step}."
    )


def gpu_training_answer(pairs) -> str:
    """The post's three findings (memory, time, curves) as the committed GPU runs give
    them, in a few sentences; what to do when there are none. ``pairs``: GPU
    ``RunPair``s (``ResultSet.pairs``). The step is the step in the loop, with its
    range epoch by epoch (``step_in_loop``)."""
    pairs = list(pairs)
    p = headline_pair(pairs)
    if p is None:
        return (
            "No GPU run is committed (data/results/, or the results_dir parameter): "
            "this page shows this machine's runs only, and a CPU cannot answer the "
            "post's question about a GPU's time."
        )
    amp, base = p.amp, p.baseline
    strict = next(
        (
            q
            for q in pairs
            if q.setting == p.setting and q.amp is amp and q.baseline.mode == "fp32"
        ),
        None,
    )
    st, ep = step_in_loop(None, pair=p), epoch_ratio(None, pair=p)
    vs_strict = (
        f"; {spread_text(step_in_loop(None, pair=strict), epochs=False)} against "
        "strict fp32's"
        if strict
        else ""
    )
    s = p.setting
    named = setting_name(s)
    head = (
        f"On {pair_device(p)} ({amp.epochs_completed} epochs at "
        f"{s.width}x{s.height}, batch {s.batch_size}"
        f"{': ' + named if named else ''}), {amp.mode_label} took "
        f"{p.memory_ratio:.2f} of the peak memory of {base.mode_label} and ended at a "
        "training loss of "
        f"{amp.final_train_loss:.3f} against {base.final_train_loss:.3f}. "
    )
    step = (
        f"Its step in the loop ran {spread_text(st)} against fp32's ({pace(st)}"
        f"{vs_strict})"
    )
    if p.loader_bound:
        wait = max(amp.data_wait_share, base.data_wait_share)
        return head + (
            f"{step}, and its epochs {spread_text(ep, epochs=False)}: the loop "
            "waited for data "
            f"{wait:.0%} of the time, with {loader_setting(p)}, "
            f"{loader_reading(p)}. That is the post's result, and the loader "
            "setting was ours."
        )
    return head + (
        f"{step} and its epoch {spread_text(ep, epochs=False)} ({pace(ep)}), with "
        "at most "
        f"{max(amp.data_wait_share, base.data_wait_share):.0%} of the loop waiting "
        "for data."
    )


def saving_verdict(
    fp32_bytes: float,
    amp_bytes: float,
    what: str = "autocast",
    measure: str | None = None,
) -> str:
    """One line for the page: how much ``what`` saved (or cost) of ``measure`` (the
    book's memory figure, ``measure.memory.NEW_BYTES``, or on a GPU e.g. "peak CUDA
    memory allocated"), in MiB."""
    from ampbook.measure.memory import NEW_BYTES, saving  # torch: not for --help

    measure = measure or NEW_BYTES
    s = saving(fp32_bytes, amp_bytes)
    mib = (
        f"{fp32_bytes / 2**20:.2f} MiB in fp32, {amp_bytes / 2**20:.2f} MiB with {what}"
    )
    if s >= 0:
        return f"{what} saved {s:.0%} of the {measure} ({mib})."
    why = (
        ": at this size its fixed weight copies outweigh the smaller activations"
        if measure == NEW_BYTES
        else ""
    )
    return f"{what} cost {-s:.0%} more {measure} than fp32 ({mib}){why}."
