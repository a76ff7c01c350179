"""One-line verdicts on a measured fp32/AMP pair, for conclusions that depend on the
machine.

A chapter's markdown describes every case (AMP faster, AMP slower; a CPU with or without
16-bit instructions); these functions print the one that this machine's numbers support,
so that no paragraph is chosen by an ``if`` in a notebook.

    speed_verdict(pair, cpu_flags())       # pair: ampbook.results.RunPair
"""

from __future__ import annotations

from ampbook.precision import native_cpu_flags


def speed_verdict(pair, flags: list[str] | tuple[str, ...] = ()) -> str:
    """How the AMP run's step time compared with its fp32 baseline on this device, and,
    on a CPU, whether the CPU reports instructions for that 16-bit type."""
    amp, base = pair.amp, pair.baseline
    ratio = amp.step_s / base.step_s
    way = "faster" if ratio < 1 else "slower"
    text = (
        f"On {pair.setting.device_name}, the {amp.mode_label} step took {ratio:.2f} "
        f"times the time of the {base.mode_label} step ({way})."
    )
    if not amp.is_cuda:
        native = native_cpu_flags(amp.mode, flags)
        kind = amp.mode.removeprefix("amp-")
        if native:
            text += f" This CPU reports {', '.join(native)}: native {kind} arithmetic."
        else:
            text += (
                f" This CPU reports no {kind} instructions (AVX-512 or AMX), so its "
                f"{kind} kernels convert to and from wider types."
            )
    if min(amp.epochs_completed, base.epochs_completed) == 1:
        text += " With one epoch the step time includes one-off start-up costs."
    return text
