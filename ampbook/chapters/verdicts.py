"""One-line verdicts on measured fp32/AMP pairs, for conclusions that depend on the
machine.

A chapter's markdown describes every case (AMP faster, AMP slower; the loader or the
step setting the pace; kernels or GPU idle time); these functions print the one that
this machine's numbers support, so that no paragraph is chosen by an ``if`` in a
notebook.

    speed_verdict(pair, probe)          # pair: ampbook.results.RunPair; probe: CPU
                                        # kernel probe (ampbook.measure.cpu_kernels) or
                                        None
    gpu_pair_verdict(pair)              # a GPU pair: epoch or step, and the loader
    kernel_time_verdict(amp, baseline)  # two layer profiles: kernels against idle time
"""

from __future__ import annotations

from ampbook.chapters.findings import (
    headline_pair,  # noqa: F401  (one definition, re-exported)
    setting_name,
)
from ampbook.results import (  # noqa: F401  (defined where the profiles are read)
    kernel_time_verdict,
)

LOADER_BOUND_SHARE = 0.5  # a loop waiting this share of its time is the loader's
SAME_WITHIN = 0.05  # step ratios this close to 1 are not called faster or slower


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
        way = "faster" if ratio < 1 else "slower"
    text = (
        f"On {_name(pair)}, the {amp.mode_label} step took {ratio:.2f} "
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


def _name(pair) -> str:
    name = pair.setting.device_name
    if pair.amp.is_cuda:
        from ampbook.core.devices import display_name

        return display_name(name)
    from ampbook.core.page import md_escape

    return md_escape(name)


def _span(values) -> str:
    values = list(values)
    if len(values) < 2:
        return ""
    return f" (epoch by epoch {min(values):.2f}-{max(values):.2f}x)"


def gpu_pair_verdict(pair) -> str:
    """What one GPU pair says about AMP's speed, in one line. The step in the loop
    (the time inside the step, data wait left out) and the epoch are each given with
    their range epoch by epoch and judged against it (``findings.pace``: "faster" only
    where every epoch was). A loop that waited for data at least half its time
    (``RunPair.loader_bound``) ran at the loader's pace: its epoch ratio measures the
    loader's noise (the spread of the data wait per epoch is printed). The workers and
    the host's CPU threads are printed, because they set the loader's pace: a setting
    of the run, not a property of the GPU."""
    from ampbook.chapters.findings import (
        epoch_ratio,
        loader_reading,
        loader_setting,
        pace,
        spread_text,
        step_in_loop,
    )

    amp, base = pair.amp, pair.baseline
    head = f"{_name(pair)}, {pair.label}"
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
    range epoch by epoch (``findings.step_in_loop``)."""
    from ampbook.chapters.findings import (
        epoch_ratio,
        loader_reading,
        loader_setting,
        pace,
        spread_text,
        step_in_loop,
    )

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
        f"On {_name(p)} ({amp.epochs_completed} epochs at {s.width}x{s.height}, batch "
        f"{s.batch_size}{': ' + named if named else ''}), {amp.mode_label} took "
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


def gpu_in_short(pairs, profile_pairs=()) -> str:
    """One or two sentences for a chapter's opening box: what the committed GPU runs
    say about AMP's speed (``headline_pair``), with the loader named as the run's
    setting where it set the pace, and, given layer profiles of that GPU and setting
    (``ResultSet.profile_pairs``), the step timed alone and where its kernel gain
    went."""
    from ampbook.chapters.findings import (
        epoch_ratio,
        kernel_speedup,
        loader_reading,
        loader_setting,
        profile_pair,
        spread_text,
        step_alone,
        step_in_loop,
    )

    p = headline_pair(pairs)
    if p is None:
        return "No GPU run is committed to test this on a GPU."
    amp, base = p.amp, p.baseline
    env = amp.record.get("environment", {})
    soft = f"torch {env['torch']}" if env.get("torch") else "today's software"
    head = f"On {_name(p)} with {soft}, our runs"
    st, ep = step_in_loop(None, pair=p), epoch_ratio(None, pair=p)
    if p.loader_bound:
        wait = max(amp.data_wait_share, base.data_wait_share)
        text = (
            f"{head} repeat the post: the loop waited for data {wait:.0%} of its "
            f"time with {loader_setting(p)}, {loader_reading(p)} "
            f"({spread_text(ep)}); the {amp.mode_label} step in the loop ran "
            f"{spread_text(st, epochs=False)} against {base.mode_label}."
        )
    else:
        text = (
            f"{head} ran the epoch {spread_text(ep)} and, in the loop, the step "
            f"{spread_text(st)} ({amp.mode_label} against {base.mode_label})."
        )
    prof = profile_pair(profile_pairs, pair=p)
    if prof is not None:
        b, a = prof
        text += (
            f" Timed alone (layer profiles): step "
            f"{step_alone(profile_pairs, pair=p)}, kernels "
            f"{kernel_speedup(profile_pairs, pair=p)}; GPU idle "
            f"{a.idle_s * 1e3:.1f} ms against fp32's "
            f"{b.idle_s * 1e3:.1f} ms."
        )
    return text
