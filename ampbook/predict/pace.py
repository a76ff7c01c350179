"""The input pipeline against the step: what sets an epoch's pace, and repeated
speedups read in one line."""

from __future__ import annotations

import statistics
from typing import Sequence

from ampbook.core.words import plural


def loader_images_per_s(
    load_s_per_image: float, workers: int, cores: int, reserved_cores: int = 1
) -> float:
    """Images per second a DataLoader can deliver: ``load_s_per_image`` (one image's
    CPU time in one process) one after another with ``workers=0``; else the workers in
    parallel, scaling linearly (the model's assumption) up to the cores the training
    process leaves free (``cores - reserved_cores``, at least one), flat beyond."""
    if load_s_per_image <= 0:
        raise ValueError(f"load_s_per_image must be positive, got {load_s_per_image}")
    if workers < 0 or cores < 1 or reserved_cores < 0:
        raise ValueError(
            f"need workers >= 0, cores >= 1, reserved_cores >= 0; got "
            f"{workers}, {cores}, {reserved_cores}"
        )
    if workers == 0:
        return 1.0 / load_s_per_image
    return min(workers, max(cores - reserved_cores, 1)) / load_s_per_image


def speedup_verdict(ratios: Sequence[float], name: str = "AMP") -> str:
    """Read repeated speedups (fp32 time / other time, one per round) in one line; a
    single round is read as one timing, with no spread to judge by."""
    if not ratios:
        raise ValueError("no speedups to read: time at least one round")
    lo, hi, med, n = min(ratios), max(ratios), statistics.median(ratios), len(ratios)
    if n == 1:  # one ratio: no median, no spread, no "every round"
        way = "faster than" if lo > 1 else "slower than" if lo < 1 else "as fast as"
        return (
            f"{name} was {way} fp32 in the one round timed ({lo:.2f}x); one round: "
            "no spread to judge by."
        )
    rounds = plural(n, "round")
    spread = f"median {med:.2f}x, {rounds} from {lo:.2f}x to {hi:.2f}x"
    if hi < 1:
        return f"{name} was slower than fp32 in every round ({spread})."
    if lo > 1:
        return f"{name} was faster than fp32 in every round ({spread})."
    return f"The rounds disagree ({spread}): no difference is resolved at this size."


def pace_verdict(
    loader_images_per_s: float,
    step_images_per_s: float,
    where: str = "here",
    step_is_bound: bool = False,
) -> str:
    """Which of the loader and the step sets an epoch's pace, in one line.
    ``step_is_bound``: the step's rate is the roofline's most, so a slower loader sets
    the pace only while the kernels reach more than ``loader / bound`` of it."""
    if loader_images_per_s <= 0 or step_images_per_s <= 0:
        raise ValueError("rates must be positive")
    if step_is_bound:
        if loader_images_per_s < step_images_per_s:
            share = loader_images_per_s / step_images_per_s
            return (
                f"The loader sets the pace {where} only if the kernels reach more than "
                f"{share:.0%} of the roofline: it delivers {loader_images_per_s:.3g} "
                f"images/s against the step's {step_images_per_s:.3g} at most; with "
                "kernels at or below that share the step sets it."
            )
        return (
            f"The step sets the pace {where}: even at the roofline it trains at most "
            f"{step_images_per_s:.3g} images/s, against the loader's "
            f"{loader_images_per_s:.3g}; a faster step shortens the epoch."
        )
    if loader_images_per_s < step_images_per_s:
        return (
            f"The loader sets the pace {where}: {loader_images_per_s:.3g} images/s "
            f"against the step's {step_images_per_s:.3g}; a faster step gains nothing."
        )
    return (
        f"The step sets the pace {where}: {step_images_per_s:.3g} images/s against the "
        f"loader's {loader_images_per_s:.3g}; a faster step shortens the epoch."
    )
