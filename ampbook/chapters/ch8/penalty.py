"""A gradient penalty under AMP (chapter 8): the gradients of the scaled loss,
unscaled before the penalty uses them (``penalty_step``); ``check_penalty`` compares
the penalty and the update with fp32's."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ampbook.chapters.ch8.tiny import (
    Comparison,
    dtype_label,
    relative_difference,
    rounding_tolerance,
    scaler_for,
    sgd_update,
    tiny_batch,
    tiny_model,
)


def penalty_step(model, optimizer, scaler, images, labels, device_type, dtype):
    """Shown on the page in chapter 8 (08_amp_patterns)."""
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        loss = F.cross_entropy(model(images), labels)
    params = list(model.parameters())
    scaled = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
    grads = [g / scaler.get_scale() for g in scaled]  # unscale before using them
    with torch.amp.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        penalty = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
        loss = loss + penalty
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return penalty.detach()


def penalty_step_without_unscaling(
    model, optimizer, scaler, images, labels, device_type, dtype
):
    """``penalty_step`` written wrong: the penalty of the scaled gradients. Shown on
    the page in chapter 8 (08_amp_patterns), beside ``penalty_step``."""
    optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        loss = F.cross_entropy(model(images), labels)
    params = list(model.parameters())
    grads = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
    with torch.amp.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        penalty = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
        loss = loss + penalty
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return penalty.detach()


# The update goes through the penalty's second derivative and strays further from
# fp32's than the penalty's value: over 12 seeds and two sizes its difference reached
# 32 roundoffs of fp16 and 8 of bf16 (measured); the penalty written wrong (unscaled
# or detached) moves it by about 1 (relative).
UPDATE_UNITS = 64.0


@dataclass
class PenaltyCheck:
    """The penalty's value and the step's update, each under AMP against fp32."""

    penalty: Comparison
    update: Comparison

    @property
    def ok(self) -> bool:
        return self.penalty.ok and self.update.ok

    @property
    def difference(self) -> float:  # the penalty's, as before the update was compared
        return self.penalty.difference

    def verdict(self) -> str:
        return f"{self.penalty.verdict()} {self.update.verdict()}"


def check_penalty(
    step=penalty_step,
    dtype: torch.dtype = torch.float16,
    size: int = 8,
    device_type: str = "cpu",
    seed: int = 0,
    units: float | None = None,
) -> PenaltyCheck:
    """``step`` under AMP (scale 1024) against ``penalty_step`` in fp32: the penalty and
    the update (a penalty of detached gradients fails on the update)."""
    images, labels = tiny_batch(2, size, seed)
    values, updates = [], []
    for run, d in ((step, dtype), (penalty_step, None)):
        scaler = (
            scaler_for(device_type, d)
            if d is None
            else torch.amp.GradScaler(device_type, init_scale=2.0**10)
        )
        args = (scaler, images, labels, device_type, d)
        value, update = sgd_update(run, tiny_model(seed), *args)
        values.append(value.float())
        updates.append(update)
    amp, fp32 = values
    tolerance = rounding_tolerance(dtype, units)
    return PenaltyCheck(
        Comparison(
            f"gradient penalty {amp.item():.4g} (AMP, scale 1024) vs "
            f"{fp32.item():.4g} (fp32)",
            dtype_label(dtype),
            relative_difference(amp, fp32),
            tolerance,
        ),
        Comparison(
            "The update (weights after the step minus before) vs fp32's",
            dtype_label(dtype),
            relative_difference(*updates),
            rounding_tolerance(dtype, units or UPDATE_UNITS),
        ),
    )
