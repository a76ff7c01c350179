"""What chapter 3 (03_amp_training) says: one-line verdicts on measured fp32/AMP
pairs (``speed_verdict``, ``gpu_pair_verdict``, ``gpu_training_answer``,
``saving_verdict``) and the readings of the committed GPU runs later chapters reuse
(the headline pair, a ratio's spread epoch by epoch and its ``pace``, the loader's).
The page describes every case; these print the one this machine's numbers support,
so that no paragraph is chosen by an ``if`` in a notebook."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ampbook.core.provenance import Value, measured
from ampbook.results import ResultSet

# The ERFNet authors' training defaults (Eromera/erfnet_pytorch's train/main.py), at
# which the H200 runs were made.
AUTHORS_DEFAULTS = "the ERFNet authors' defaults"


def setting_name(s) -> str | None:
    """``AUTHORS_DEFAULTS`` for a training setting that is them (1024x512, batch 6, 4
    loader workers, NCHW), else None."""
    got = (s.width, s.height, s.batch_size, s.workers, s.channels_last)
    return AUTHORS_DEFAULTS if got == (1024, 512, 6, 4, False) else None


AMP_MODE, BASE_MODE = "amp-fp16", "fp32-tf32"  # the headline comparison
SAME_WITHIN = 0.05  # step ratios this close to 1 are not called faster or slower


class Spread(NamedTuple):
    """A ratio's median and range over epochs (``Value``s), and those epochs."""

    median: Value
    lo: Value
    hi: Value
    epochs: tuple = ()


def pace(spread) -> str:
    """A speed ratio (above 1: faster) judged against its spread from epoch to epoch
    (a ``Spread`` or the per-epoch ratios): "faster" only where every epoch was,
    "slower" likewise, else within the spread. A single figure is not judged
    (``ValueError``): no fixed margin stands in for the runs' own noise."""
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
    """amp-fp16 against fp32 with TF32 where there is one, else the first pair."""
    pairs = list(pairs)
    best = [p for p in pairs if (p.amp.mode, p.baseline.mode) == (AMP_MODE, BASE_MODE)]
    return (best + pairs + [None])[0]


def _pair(rs: ResultSet, device: str | None):
    return headline_pair(
        p for p in rs.pairs() if device is None or p.setting.device_name == device
    )


def _spread(p, value: str, per_epoch: str) -> Spread | None:
    """Pair ``p``'s ratio ``value`` and its range over ``per_epoch``, with the timed
    epochs both runs share (None without a pair)."""
    from ampbook.core.devices import display_name

    if p is None:
        return None
    runs = (p.baseline, p.amp)
    names = ", ".join(Path(r.path).name for r in runs if getattr(r, "path", None))
    source = f"training runs on the {display_name(p.setting.device_name)} ({names})"
    pairs = zip(p.baseline.timed_epochs(), p.amp.timed_epochs())
    epochs = tuple(a.get("epoch") for _, a in pairs if a.get("epoch") is not None)
    ratios = getattr(p, per_epoch) or [getattr(p, value)]
    epochs = epochs if len(epochs) == len(ratios) else ()
    values = (getattr(p, value), min(ratios), max(ratios))
    return Spread(*(measured(x, source, fmt=".2f", unit="x") for x in values), epochs)


def step_in_loop(rs: ResultSet, device: str | None = None, pair=None) -> Spread | None:
    """AMP's step *in the training loop* against its baseline (data wait left out):
    the ratio of the runs' median step times and its range; None without a pair."""
    p = pair if pair is not None else _pair(rs, device)
    return _spread(p, "step_speedup", "step_speedups")


def epoch_ratio(rs: ResultSet, device: str | None = None, pair=None) -> Spread | None:
    """The epoch's ratio (baseline over AMP wall time, data wait included) and its
    range; None without a pair."""
    p = pair if pair is not None else _pair(rs, device)
    return _spread(p, "speedup", "epoch_speedups")


def spread_text(s: Spread, epochs: bool = True) -> str:
    """``"0.96-1.12x over epochs 2-10"``: a ratio's range (the finding, not the
    median); ``epochs=False`` leaves the epochs out (a second range in a sentence)."""
    lo, hi = s.lo.number(), s.hi.number()
    text = hi if lo == hi else f"{lo[:-1]}-{hi}"
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
    """``"longer"`` where AMP's run waited longer for data than its baseline in every
    shared timed epoch, ``"shorter"`` where less in every one, else None (noise)."""
    pairs = list(zip(p.baseline.timed_epochs(), p.amp.timed_epochs()))
    if pairs and all(a["data_wait_s"] > b["data_wait_s"] for b, a in pairs):
        return "longer"
    if pairs and all(a["data_wait_s"] < b["data_wait_s"] for b, a in pairs):
        return "shorter"
    return None


def loader_reading(p) -> str:
    """What a loader-bound pair's epoch ratio measures (``wait_direction``): the
    loader, or its noise; never AMP."""
    d = wait_direction(p)
    if d is None:
        return "so the epoch ratio measures the loader's noise, not AMP"
    more = "longer" if d == "longer" else "less"
    return (
        f"AMP's run waited {more} for data in every epoch, so the epoch ratio "
        "measures the loader"
    )


def loader_setting(p) -> str:
    """``"4 loader workers on 16 CPU threads (our setting)"``: not the GPU's."""
    threads = p.amp.record.get("environment", {}).get("cpu_threads")
    host = f" on {threads} CPU threads" if threads else ""
    return f"{p.setting.workers} loader workers{host} (our setting)"


def pair_device(pair) -> str:
    """The device of a pair as the page names it (a GPU by ``display_name``)."""
    from ampbook.core.devices import display_name
    from ampbook.core.page import md_escape

    name = pair.setting.device_name
    return display_name(name) if pair.amp.is_cuda else md_escape(name)


def speed_verdict(pair, probe=None) -> str:
    """How the AMP run's step compared with its fp32 baseline here, and on a CPU what
    the kernel probe (``cpu_kernels.ConvProbe``) measured for that dtype: a CPU's flags
    say which instructions it has, not which kernels PyTorch runs."""
    amp, base = pair.amp, pair.baseline
    ratio = amp.step_s / base.step_s
    way = f"{'faster' if ratio < 1 else 'slower'} in this one pair of runs: one pair, "
    way += "no spread to judge the difference by"
    if abs(ratio - 1) < SAME_WITHIN:
        way = (
            f"about the same: within {SAME_WITHIN:.0%}, and one pair of runs measures "
        )
        way += "no spread to tell a smaller difference by"
    text = (
        f"On {pair_device(pair)}, the {amp.mode_label} step took {ratio:.2f} "
        f"times the time of the {base.mode_label} step ({way})."
    )
    if not amp.is_cuda and probe is not None:
        from ampbook.measure.cpu_kernels import precision_dtype

        dtype = precision_dtype(amp.precision)
        if dtype in probe.dtypes:
            text += f" The kernel probe: {probe.verdict(dtype)}"
            ok = not probe.dtypes[dtype].error and "fp32" in probe.dtypes
            if ok and ratio > 1:
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
    """What one GPU pair says about AMP's speed, in one line: the step in the loop and
    the epoch, each with its range and ``pace``. A loader-bound loop
    (``RunPair.loader_bound``) ran at the loader's pace, set by the workers and the
    host's threads (printed: a setting of the run, not the GPU's)."""
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
    """The post's three findings (memory, time, curves) as the committed GPU runs
    (``RunPair``s) give them, in a few sentences; what to do when there are none."""
    pairs = list(pairs)
    p = headline_pair(pairs)
    if p is None:
        return (
            "No GPU run is committed (data/results/, or the results_dir parameter): "
            "this page shows this machine's runs only, and a CPU cannot answer the "
            "post's question about a GPU's time."
        )
    amp, base = p.amp, p.baseline
    st, ep = step_in_loop(None, pair=p), epoch_ratio(None, pair=p)
    vs_strict = ""
    for q in pairs:  # the same AMP run against strict fp32
        if q.setting == p.setting and q.amp is amp and q.baseline.mode == "fp32":
            vs = spread_text(step_in_loop(None, pair=q), epochs=False)
            vs_strict = f"; {vs} against strict fp32's"
            break
    s, named = p.setting, setting_name(p.setting)
    head = (
        f"On {pair_device(p)} ({amp.epochs_completed} epochs at "
        f"{s.width}x{s.height}, batch {s.batch_size}"
        f"{': ' + named if named else ''}), {amp.mode_label} took "
        f"{p.memory_ratio:.2f} of the peak memory of {base.mode_label} and ended at a "
        f"training loss of {amp.final_train_loss:.3f} against "
        f"{base.final_train_loss:.3f}. "
    )
    step = (
        f"Its step in the loop ran {spread_text(st)} against fp32's ({pace(st)}"
        f"{vs_strict})"
    )
    wait = max(amp.data_wait_share, base.data_wait_share)
    if p.loader_bound:
        return head + (
            f"{step}, and its epochs {spread_text(ep, epochs=False)}: the loop "
            f"waited for data {wait:.0%} of the time, with {loader_setting(p)}, "
            f"{loader_reading(p)}. That is the post's result, and the loader "
            "setting was ours."
        )
    return head + (
        f"{step} and its epoch {spread_text(ep, epochs=False)} ({pace(ep)}), with "
        f"at most {wait:.0%} of the loop waiting for data."
    )


def saving_verdict(
    fp32_bytes: float,
    amp_bytes: float,
    what: str = "autocast",
    measure: str | None = None,
) -> str:
    """How much ``what`` saved (or cost) of ``measure`` (default the book's memory
    figure, ``memory.NEW_BYTES``), in MiB."""
    from ampbook.measure.memory import NEW_BYTES, saving  # torch: not for --help

    measure = measure or NEW_BYTES
    s = saving(fp32_bytes, amp_bytes)
    mib = (
        f"{fp32_bytes / 2**20:.2f} MiB in fp32, {amp_bytes / 2**20:.2f} MiB with {what}"
    )
    if s >= 0:
        return f"{what} saved {s:.0%} of the {measure} ({mib})."
    why = ": at this size its fixed weight copies outweigh the smaller activations"
    why = why if measure == NEW_BYTES else ""
    return f"{what} cost {-s:.0%} more {measure} than fp32 ({mib}){why}."
