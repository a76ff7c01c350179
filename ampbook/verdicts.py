"""One-line verdicts on measured fp32/AMP pairs, for conclusions that depend on the
machine.

A chapter's markdown describes every case (AMP faster, AMP slower; the loader or the
step setting the pace; kernels or GPU idle time); these functions print the one that
this machine's numbers support, so that no paragraph is chosen by an ``if`` in a
notebook.

    speed_verdict(pair, probe)          # pair: ampbook.results.RunPair; probe: CPU
                                        # kernel probe (ampbook.cpu_kernels) or None
    gpu_pair_verdict(pair)              # a GPU pair: epoch or step, and the loader
    kernel_time_verdict(amp, baseline)  # two layer profiles: kernels against idle time
"""

from __future__ import annotations

LOADER_BOUND_SHARE = 0.5  # a loop waiting this share of its time is the loader's


def speed_verdict(pair, probe=None) -> str:
    """How the AMP run's step time compared with its fp32 baseline on this device, and,
    on a CPU, what the kernel probe (``ampbook.cpu_kernels.ConvProbe``) measured for
    that dtype's convolution: the CPU's flags say which instructions it has, not which
    kernels PyTorch runs, so nothing is read from them."""
    amp, base = pair.amp, pair.baseline
    ratio = amp.step_s / base.step_s
    way = "faster" if ratio < 1 else "slower"
    text = (
        f"On {_name(pair)}, the {amp.mode_label} step took {ratio:.2f} "
        f"times the time of the {base.mode_label} step ({way})."
    )
    if not amp.is_cuda and probe is not None:
        from ampbook.cpu_kernels import precision_dtype

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
        from ampbook.devices import display_name

        return display_name(name)
    from ampbook.plots import md_escape

    return md_escape(name)


def _span(values) -> str:
    values = list(values)
    if len(values) < 2:
        return ""
    return f" (epoch by epoch {min(values):.2f}-{max(values):.2f}x)"


def gpu_pair_verdict(pair) -> str:
    """What one GPU pair says about AMP's speed, in one line. A loop that waited for
    data at least half its time (``RunPair.loader_bound``) ran at the loader's pace:
    its epoch ratio measures the loader's noise (the spread of the data wait per
    epoch is printed), and the step ratio is the one that speaks for AMP. The
    workers and the host's CPU threads are printed, because they set the loader's
    pace: a setting of the run, not a property of the GPU."""
    amp, base = pair.amp, pair.baseline
    env = amp.record.get("environment", {})
    threads = env.get("cpu_threads")
    host = f" on {threads} CPU threads" if threads else ""
    head = f"{_name(pair)}, {pair.label}"
    step = f"the step alone gained {pair.step_speedup:.2f}x{_span(pair.step_speedups)}"
    wait = max(amp.data_wait_share, base.data_wait_share)
    if pair.loader_bound:
        lo, hi = amp.data_wait_range
        blo, bhi = base.data_wait_range
        return (
            f"{head}: the loop waited for data {wait:.0%} of its time "
            f"({pair.setting.workers} workers{host}, the run's setting), so the epoch "
            f"ratio {pair.speedup:.2f}x{_span(pair.epoch_speedups)} is the loader's "
            f"noise (data wait per epoch {min(lo, blo):.2f}-{max(hi, bhi):.2f} s); "
            f"{step}."
        )
    return (
        f"{head}: the epoch gained {pair.speedup:.2f}x{_span(pair.epoch_speedups)} "
        f"with at most {wait:.0%} of the loop waiting for data "
        f"({pair.setting.workers} workers{host}); {step}."
    )


def kernel_time_verdict(amp, baseline) -> str:
    """Where an AMP step's time went, from two layer profiles of one GPU and setting
    (``ampbook.results.LayerProfile``): the kernels' time and the GPU's idle time
    (wall time minus kernel time) apart. AMP's kernels can be faster while its step is
    not: the gain is then lost to idle time (kernel launches, autocast's casts, host
    synchronisations), not to slower kernels."""
    ks = baseline.kernel_s / amp.kernel_s
    ws = baseline.step_s / amp.step_s
    ms = 1e3
    facts = (
        f"In the layer profiles AMP's kernels took {amp.kernel_s * ms:.1f} ms against "
        f"{baseline.kernel_s * ms:.1f} ms for {baseline.mode_label} ({ks:.2f}x), its "
        f"step {amp.step_s * ms:.1f} ms against {baseline.step_s * ms:.1f} ms "
        f"({ws:.2f}x); the GPU sat idle {amp.idle_s * ms:.1f} ms against "
        f"{baseline.idle_s * ms:.1f} ms"
    )
    if ks > 1.05 and ws < ks / 1.05:
        return (
            f"{facts}: the kernels' gain went to idle time (the gaps between kernels: "
            "launches and host work), not to slower kernels."
        )
    if ks <= 1.0 / 1.05:
        return f"{facts}: AMP's kernels themselves were slower."
    if ks <= 1.05:
        return f"{facts}: AMP's kernels themselves were no faster."
    return f"{facts}: the step kept the kernels' gain."


def headline_pair(pairs):
    """The pair that stands for the post's comparison: amp-fp16 against fp32 with TF32
    on where there is one, else the first pair; None without pairs."""
    pairs = list(pairs)
    for p in pairs:
        if p.amp.mode == "amp-fp16" and p.baseline.mode == "fp32-tf32":
            return p
    return pairs[0] if pairs else None


def gpu_training_answer(pairs) -> str:
    """The post's three findings (memory, time, curves) as the committed GPU runs give
    them, in a few sentences; what to do when there are none. ``pairs``: GPU
    ``RunPair``s (``ResultSet.pairs``)."""
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
    vs_strict = f" ({strict.step_speedup:.2f}x strict fp32's)" if strict else ""
    s = p.setting
    head = (
        f"On {_name(p)} ({amp.epochs_completed} epochs at {s.width}x{s.height}, batch "
        f"{s.batch_size}), {amp.mode_label} took {p.memory_ratio:.2f} of the peak "
        f"memory of {base.mode_label} and ended at a training loss of "
        f"{amp.final_train_loss:.3f} against {base.final_train_loss:.3f}. "
    )
    threads = amp.record.get("environment", {}).get("cpu_threads")
    host = f" on {threads} CPU threads" if threads else ""
    if p.loader_bound:
        wait = max(amp.data_wait_share, base.data_wait_share)
        return head + (
            f"Its step alone ran {p.step_speedup:.2f}x as fast as fp32's{vs_strict}, "
            f"but its epochs were no shorter ({p.speedup:.2f}x): the loop waited "
            f"for data {wait:.0%} of the time, with {s.workers} loader workers{host}. "
            "That is the post's result, and the loader setting was ours."
        )
    return head + (
        f"Its step ran {p.step_speedup:.2f}x as fast as fp32's{vs_strict} and its "
        f"epoch {p.speedup:.2f}x, with at most "
        f"{max(amp.data_wait_share, base.data_wait_share):.0%} of the loop waiting "
        "for data."
    )


def gpu_in_short(pairs, profile_pairs=()) -> str:
    """One or two sentences for a chapter's opening box: what the committed GPU runs
    say about AMP's speed (``headline_pair``), with the loader named as the run's
    setting where it set the pace, and, given layer profiles of that GPU and setting
    (``ResultSet.profile_pairs``), where the step's kernel gain went."""
    p = headline_pair(pairs)
    if p is None:
        return "No GPU run is committed to test this on a GPU."
    amp, base = p.amp, p.baseline
    env = amp.record.get("environment", {})
    soft = f"torch {env['torch']}" if env.get("torch") else "today's software"
    threads = env.get("cpu_threads")
    host = f" on {threads} CPU threads" if threads else ""
    head = f"On {_name(p)} with {soft}, our runs"
    if p.loader_bound:
        wait = max(amp.data_wait_share, base.data_wait_share)
        text = (
            f"{head} repeat the post: epochs {p.speedup:.2f}x, because with "
            f"{p.setting.workers} loader workers{host} (our setting) the loop waited "
            f"for data {wait:.0%} of its time, while the {amp.mode_label} step alone "
            f"gained {p.step_speedup:.2f}x over {base.mode_label}."
        )
    else:
        text = (
            f"{head} gained {p.speedup:.2f}x per epoch and {p.step_speedup:.2f}x per "
            f"step ({amp.mode_label} against {base.mode_label})."
        )
    prof = next(
        (
            (b, a)
            for b, a in profile_pairs
            if a.mode == amp.mode
            and b.mode == base.mode
            and a.device_name == p.setting.device_name
        ),
        None,
    )
    if prof is not None:
        b, a = prof
        ks = b.kernel_s / a.kernel_s
        text += (
            f" Its kernels were {ks:.2f}x faster; the GPU idled "
            f"{a.idle_s * 1e3:.1f} ms of the AMP step against "
            f"{b.idle_s * 1e3:.1f} ms of fp32's."
        )
    return text
