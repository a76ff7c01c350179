"""Question 8 of chapter 9: "Detected call of `lr_scheduler.step()` before
`optimizer.step()`" after a step GradScaler skipped: a scheduler stepped every time
warns and runs one step ahead for every skipped step. The fix steps it only when the
optimizer stepped: with one optimizer per scaler, when the scale did not fall; with
several, when the optimizer's own step count moved (``count_steps``)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ampbook.chapters.ch8.shared_scaler import planted, separate_losses, two_models_step
from ampbook.chapters.ch8.tiny import tiny_batch, tiny_model

SCHEDULER_WARNING = "lr_scheduler.step()` before `optimizer.step()`"


def step_always(model, optimizer, scheduler, scaler, images, labels, plant=1.0):
    """One fp16 step with the scheduler stepped every time (the failure)."""
    with torch.amp.autocast(images.device.type, dtype=torch.float16):
        loss = F.cross_entropy(model(images), labels) * plant
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()


def step_when_stepped(model, optimizer, scheduler, scaler, images, labels, plant=1.0):
    """One fp16 step whose scheduler steps only when the optimizer did: the scale
    falls exactly when ``scaler.step`` skipped ``optimizer.step()`` (one optimizer
    per scaler). Shown on the page in chapter 9 (09_when_amp_goes_wrong)."""
    with torch.amp.autocast(images.device.type, dtype=torch.float16):
        loss = F.cross_entropy(model(images), labels) * plant
    scaler.scale(loss).backward()
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if scaler.get_scale() >= scale:  # not lowered: the optimizer stepped
        scheduler.step()


@dataclass
class SchedulerCheck:
    steps: int
    skipped: int  # steps the scaler skipped (the scale fell)
    optimizer_steps: int  # counted by a hook on optimizer.step
    scheduler_steps: int  # scheduler.last_epoch
    warned: bool

    @property
    def ok(self) -> bool:
        return self.scheduler_steps == self.optimizer_steps and not self.warned

    def verdict(self) -> str:
        warned = "warned" if self.warned else "did not warn"
        end = "follows" if self.ok else "runs ahead of"
        return (
            f"Measured over {self.steps} fp16 steps, {self.skipped} skipped by the "
            f"scaler: the optimizer stepped {self.optimizer_steps} times, the "
            f"scheduler {self.scheduler_steps}, and PyTorch {warned}: "
            f"the schedule {end} the optimizer."
        )


def check_scheduler(step, steps: int = 4, skip: int = 1, seed: int = 0):
    """Run ``step`` ``steps`` times with a StepLR scheduler and a GradScaler at 2^16,
    the first ``skip`` with an overflow planted (the loss times 1e30); count the
    optimizer's steps with a hook and the scheduler's from ``last_epoch``."""
    model = tiny_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu")
    counted = count_steps(optimizer)
    images, labels = tiny_batch(2, 8, seed)
    skipped = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(steps):
            before = scaler.get_scale()
            plant = 1e30 if i < skip else 1.0
            step(model, optimizer, scheduler, scaler, images, labels, plant=plant)
            skipped += scaler.get_scale() < before
    warned = any(SCHEDULER_WARNING in str(w.message) for w in caught)
    return SchedulerCheck(steps, skipped, counted[0], scheduler.last_epoch, warned)


def count_steps(optimizer) -> list[int]:
    """A one-element counter that a step post hook advances each time ``optimizer``
    steps: with several optimizers on one scaler, it tells which of them stepped.
    Shown on the page in chapter 9 (09_when_amp_goes_wrong)."""
    counted = [0]
    optimizer.register_step_post_hook(
        lambda *args: counted.__setitem__(0, counted[0] + 1)
    )
    return counted


@dataclass
class SharedSchedulers:
    rule: str  # "scale" (the one-optimizer fix) or "count" (count_steps)
    optimizer_steps: tuple[int, ...]
    scheduler_steps: tuple[int, ...]

    @property
    def ok(self) -> bool:
        return self.optimizer_steps == self.scheduler_steps

    def verdict(self) -> str:
        how = "the scale did not fall"
        how = how if self.rule == "scale" else "its optimizer's count moved"
        return (
            f"Measured with two optimizers on one scaler, each scheduler stepped when "
            f"{how}: the optimizers "
            f"stepped {self.optimizer_steps[0]} and {self.optimizer_steps[1]} times, "
            f"their schedulers {self.scheduler_steps[0]} and "
            f"{self.scheduler_steps[1]}: "
            f"{'each schedule follows' if self.ok else 'a schedule falls behind'} "
            "its optimizer."
        )


def check_shared_schedulers(rule: str = "count", steps: int = 3, seed: int = 0):
    """``steps`` fp16 iterations of two tiny models, each with its own loss, optimizer
    and StepLR scheduler, on one GradScaler at 2^10, an overflow planted in the second
    loss of the first (the second optimizer skips, the scale halves); each scheduler
    stepped by ``rule``."""
    if rule not in ("scale", "count"):
        raise ValueError(f"rule must be 'scale' or 'count', not {rule!r}")
    models = [tiny_model(seed), tiny_model(seed + 1)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    schedulers = [
        torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in optimizers
    ]
    counts = [count_steps(o) for o in optimizers]
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    images, labels = tiny_batch(2, 8, seed)
    for i in range(steps):
        scale, before = scaler.get_scale(), [c[0] for c in counts]
        losses = planted(separate_losses) if i == 0 else separate_losses
        two_models_step(
            models, optimizers, scaler, images, labels, "cpu", torch.float16, losses
        )
        for scheduler, count, was in zip(schedulers, counts, before):
            moved = scaler.get_scale() >= scale if rule == "scale" else count[0] > was
            if moved:
                scheduler.step()
    return SharedSchedulers(
        rule, tuple(c[0] for c in counts), tuple(s.last_epoch for s in schedulers)
    )
