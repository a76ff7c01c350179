"""Sizing chapter 3's training runs to a time budget, from a measured step time.

A CPU may run a 16-bit step many times slower than fp32 (which dtypes depends on the
kernels PyTorch picks there, ``ampbook.measure.cpu_kernels``), so each precision's
run gets at most ``budget_s`` seconds: ``estimate_steps`` times a step (a precision
the probe found slow at a quarter of the size, scaled by the pixels); ``plan_runs``
gives a run that does not fit fewer epochs, then fewer images, then smaller images,
and a reduced run an fp32 *twin* of its size (runs pair only within one setting).
``RunPlan.note`` says why a run is smaller.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

VAL_COST = 1 / 3  # a validation batch (forward only) against a training step
MAX_SLOWDOWN = 4.0  # a precision whose probed convolution is slower is timed small
SCOUT = 4  # ...at 1/SCOUT of the height and of the width


@dataclass(frozen=True)
class RunPlan:
    """One run: precision, images, epochs, why it is smaller than asked ("" if not),
    and ``height``/``width`` only where it trains smaller images."""

    precision: str
    train_images: int
    epochs: int
    note: str = ""
    height: int | None = None
    width: int | None = None

    @property
    def reduced(self) -> bool:
        return bool(self.note)

    def size(self, height: int, width: int) -> tuple[int, int]:
        """The run's (height, width), given the chapter's."""
        return (self.height or height, self.width or width)


@dataclass(frozen=True)
class StepEstimate:
    """A precision's step time at the chapter's size: measured there, or at
    ``measured_at`` and scaled by the pixels (``scaled``, with the reason)."""

    precision: str
    seconds: float
    measured_at: tuple[int, int]
    scaled: bool = False
    reason: str = ""


def smaller_size(height: int, width: int, factor: int = 2) -> tuple[int, int]:
    """Height and width divided by ``factor``, rounded down to multiples of 8 (ERFNet
    downsamples by 8), at least 8x16 (batch norm fails on one value per channel)."""
    h = max(8, height // factor // 8 * 8)
    w = max(8, width // factor // 8 * 8)
    if h * w < 128:
        h, w = (h, 16) if width >= height else (16, w)
    return (min(h, height), min(w, width)) if height * width >= 128 else (h, w)


def slow_precisions(probe, precisions, max_slowdown: float = MAX_SLOWDOWN) -> dict:
    """``{precision: the probe's verdict}`` for each precision whose convolution the
    CPU probe (None on a GPU) timed at over ``max_slowdown`` times fp32's."""
    from ampbook.measure.cpu_kernels import precision_dtype

    if probe is None:
        return {}
    out = {}
    for p in precisions:
        dtype = precision_dtype(p)
        if dtype == "fp32" or dtype not in probe.dtypes:
            continue
        if probe.dtypes[dtype].error or probe.slowdown(dtype) > max_slowdown:
            out[p] = probe.verdict(dtype)
    return out


def estimate_steps(
    cfg, precisions, slow: Mapping[str, str] | None = None, scout: int = SCOUT
) -> dict[str, StepEstimate]:
    """Each precision's step time at ``cfg``'s size; those in ``slow`` timed at
    1/``scout`` of the height and width and scaled by the pixels (on the high side)."""
    slow = dict(slow or {})
    size = (cfg.height, cfg.width)
    out = {}
    for p in precisions:
        if p in slow:
            h, w = smaller_size(cfg.height, cfg.width, scout)
            small = dataclasses.replace(cfg, height=h, width=w)
            got = step_seconds(small, [p])
            if p in got:
                scale = cfg.height * cfg.width / (h * w)
                out[p] = StepEstimate(p, got[p] * scale, (h, w), True, slow[p])
        else:
            got = step_seconds(cfg, [p])
            if p in got:
                out[p] = StepEstimate(p, got[p], size)
    return out


def step_seconds(cfg, precisions, warmup: int = 1) -> dict[str, float]:
    """Seconds of one training step of each precision after ``warmup`` steps, built
    as ``ampbook.train`` builds ``cfg``, on a random batch; one timed step keeps it
    cheap where a 16-bit step is slow. Precisions the device cannot run are left
    out."""
    import torch

    from ampbook.segmentation.cityscapes import NUM_CLASSES
    from ampbook.train import ConfigError, build_training, validate

    out = {}
    for precision in precisions:
        run_cfg = dataclasses.replace(cfg, precision=precision)
        try:
            res = validate(run_cfg)
        except ConfigError:
            continue
        step = build_training(run_cfg, res).step
        g = torch.Generator().manual_seed(cfg.seed)
        shape = (cfg.batch_size, cfg.height, cfg.width)
        x = torch.randn(cfg.batch_size, 3, cfg.height, cfg.width, generator=g)
        y = torch.randint(0, NUM_CLASSES, shape, generator=g)
        for _ in range(warmup):
            step(x, y)
        if res.device.type == "cuda":
            torch.cuda.synchronize(res.device)
        start = time.perf_counter()
        step(x, y)  # returns the loss as a float: the step has finished
        out[precision] = time.perf_counter() - start
    return out


def epoch_seconds(
    step_s: float, images: int, val_images: int, batch_size: int
) -> float:
    """Estimated seconds of one epoch: the training steps plus validation batches."""
    steps = math.ceil(images / batch_size)
    return step_s * (steps + VAL_COST * math.ceil(val_images / batch_size))


def fit_run(precision: str, step_s: float, train_images: int, epochs: int,
            val_images: int, batch_size: int, budget_s: float, min_batches: int = 2,
            size: tuple[int, int] | None = None,
            measured: str = "") -> RunPlan:  # fmt: skip
    """The largest run of ``precision`` within ``budget_s``: fewer epochs, then fewer
    images (at least ``min_batches`` batches), then, given the chapter's ``size``,
    smaller images. ``measured`` says how ``step_s`` was found."""
    if step_s <= 0 or budget_s <= 0:
        raise ValueError(f"need step_s > 0 and budget_s > 0, got {step_s}, {budget_s}")
    why = measured or f"a step took {step_s:.2f} s here"
    why += f", the run's budget is {budget_s:g} s"
    per_epoch = epoch_seconds(step_s, train_images, val_images, batch_size)
    if epochs * per_epoch <= budget_s:
        return RunPlan(precision, train_images, epochs)
    fit = int(budget_s // per_epoch)
    if fit >= 1:
        return RunPlan(precision, train_images, fit, f"{fit} of {epochs} epochs: {why}")
    height, width = h, w = size or (0, 0)  # (0, 0): no smaller images
    s, smallest = step_s, min_batches * batch_size
    while (
        size
        and epoch_seconds(s, smallest, val_images, batch_size) > budget_s
        and ((h, w) != smaller_size(h, w))
    ):
        h, w = smaller_size(h, w)
        s = step_s * h * w / (height * width)
    val_s = epoch_seconds(s, 0, val_images, batch_size)
    images = min(
        train_images, max(min_batches, int((budget_s - val_s) // s)) * batch_size
    )
    of = "all" if images == train_images else f"{images} of the"
    note = f"1 epoch of the {epochs} planned, on {of} {train_images} training images"
    if (h, w) == (height, width):
        return RunPlan(precision, images, 1, f"{note}: {why}")
    return RunPlan(precision, images, 1, f"{w}x{h} images: {note}: {why}", h, w)


def plan_runs(step_s: Mapping[str, float | StepEstimate], train_images: int,
              epochs: int, val_images: int, batch_size: int, budget_s: float,
              baseline: str = "fp32", size: tuple[int, int] | None = None,
              ) -> list[RunPlan]:  # fmt: skip
    """One plan per precision in ``step_s`` (seconds or ``StepEstimate``s; the
    ``baseline`` first) within ``budget_s``, and a ``baseline`` twin for each size of
    reduced run its own plan lacks; ``size`` (height, width) allows smaller images."""
    if baseline not in step_s:
        raise ValueError(f"the {baseline} step time is needed to plan its runs")
    order = [baseline] + [p for p in step_s if p != baseline]
    plans = []
    for p in order:
        est = step_s[p]
        scaled = isinstance(est, StepEstimate)
        seconds, measured = (est.seconds, _measured(est, size)) if scaled else (est, "")
        plans.append(fit_run(p, seconds, train_images, epochs, val_images, batch_size,
                             budget_s, size=size, measured=measured))  # fmt: skip

    def key(plan: RunPlan) -> tuple:
        return (plan.train_images, plan.epochs, plan.height, plan.width)

    sizes = {key(plans[0])}
    for plan in plans[1:]:
        if plan.reduced and key(plan) not in sizes:
            sizes.add(key(plan))
            note = f"the same size as the reduced {plan.precision} run"
            plans.append(RunPlan(baseline, plan.train_images, plan.epochs, note,
                                 plan.height, plan.width))  # fmt: skip
    return plans


def _measured(est: StepEstimate, size) -> str:
    if not est.scaled:
        return f"a step took {est.seconds:.2f} s here"
    h, w = est.measured_at
    full = f" at {size[1]}x{size[0]}" if size else ""
    return (
        f"a step{full} would take about {est.seconds:.0f} s here (a {w}x{h} step, "
        "scaled by the pixels)"
    )
