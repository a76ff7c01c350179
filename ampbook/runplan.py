"""Sizing chapter 3's training runs to a time budget, from a measured step time.

A CPU may run a low-precision step many times slower than fp32 (fp16 on most CPUs; bf16
on CPUs without AVX-512 BF16 or AMX). So that a chapter finishes in minutes on any
machine, each precision's run gets at most ``budget_s`` seconds of training, estimated
from a step of the runner's own step function after a warm-up step (``step_seconds``):

* a run that fits keeps the chapter's epochs and images;
* otherwise it trains fewer epochs, and if one epoch does not fit either, fewer images
  (at least ``min_batches`` batches);
* a reduced run gets an fp32 *twin* of the same size, so that it is compared with fp32
  on the same data (``ampbook.results`` pairs runs only within one setting).

``plan_runs`` returns the plan; ``RunPlan.note`` says, for the page, why a run is
smaller.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

VAL_COST = 1 / 3  # a validation batch (forward only) against a training step


@dataclass(frozen=True)
class RunPlan:
    """One run of the chapter: precision, training images, epochs, and why it is smaller
    than asked ("" when it is not)."""

    precision: str
    train_images: int
    epochs: int
    note: str = ""

    @property
    def reduced(self) -> bool:
        return bool(self.note)


def step_seconds(cfg, precisions, warmup: int = 1) -> dict[str, float]:
    """Seconds of one training step of each precision after ``warmup`` steps (the first
    step pays one-off costs such as kernel selection), built as ``ampbook.train`` builds
    a run from ``cfg`` (a ``TrainConfig``), on a random batch of its size. One timed
    step keeps the probe cheap where a 16-bit step is slow. Precisions the device cannot
    run (``ConfigError``) are left out."""
    import torch

    from ampbook.data import NUM_CLASSES
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


def fit_run(
    precision: str,
    step_s: float,
    train_images: int,
    epochs: int,
    val_images: int,
    batch_size: int,
    budget_s: float,
    min_batches: int = 2,
) -> RunPlan:
    """The largest run of ``precision`` within ``budget_s``: fewer epochs first, then
    fewer images (never below ``min_batches`` batches or one epoch)."""
    if step_s <= 0 or budget_s <= 0:
        raise ValueError(f"need step_s > 0 and budget_s > 0, got {step_s}, {budget_s}")
    per_epoch = epoch_seconds(step_s, train_images, val_images, batch_size)
    if epochs * per_epoch <= budget_s:
        return RunPlan(precision, train_images, epochs)
    fit = int(budget_s // per_epoch)
    if fit >= 1:
        return RunPlan(
            precision,
            train_images,
            fit,
            f"{fit} of {epochs} epochs: a step took {step_s:.2f} s here, "
            f"the run's budget is {budget_s:g} s",
        )
    val_s = epoch_seconds(step_s, 0, val_images, batch_size)
    steps = max(min_batches, int((budget_s - val_s) // step_s))
    images = min(train_images, steps * batch_size)
    return RunPlan(
        precision,
        images,
        1,
        f"1 of {epochs} epochs on {images} of {train_images} images: a step "
        f"took {step_s:.2f} s here, the run's budget is {budget_s:g} s",
    )


def plan_runs(
    step_s: dict[str, float],
    train_images: int,
    epochs: int,
    val_images: int,
    batch_size: int,
    budget_s: float,
    baseline: str = "fp32",
) -> list[RunPlan]:
    """One plan per precision in ``step_s`` (``baseline`` first), each within
    ``budget_s``; for each size of reduced low-precision run that the baseline's own
    plan does not have, one ``baseline`` twin of that size."""
    if baseline not in step_s:
        raise ValueError(f"the {baseline} step time is needed to plan its runs")
    order = [baseline] + [p for p in step_s if p != baseline]
    plans = [
        fit_run(p, step_s[p], train_images, epochs, val_images, batch_size, budget_s)
        for p in order
    ]
    sizes = {(plans[0].train_images, plans[0].epochs)}
    for plan in plans[1:]:
        size = (plan.train_images, plan.epochs)
        if plan.reduced and size not in sizes:
            sizes.add(size)
            plans.append(
                RunPlan(
                    baseline,
                    *size,
                    f"the same size as the reduced {plan.precision} run",
                )
            )
    return plans
