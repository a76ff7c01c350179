"""Several models, losses and optimizers with one GradScaler (chapter 8,
``two_models_step``); ``check_shared_scaler`` plants an overflow in one loss."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ampbook.chapters.ch8.tiny import flat_parameters, tiny_batch, tiny_model


def coupled_losses(out0, out1, labels):
    """Each loss depends on both models (as in PyTorch's AMP examples).

    Shown on the page in chapter 8 (08_amp_patterns)."""
    loss0 = F.cross_entropy(2 * out0 + 3 * out1, labels)
    loss1 = F.cross_entropy(3 * out0 - 5 * out1, labels)
    return loss0, loss1


def separate_losses(out0, out1, labels):
    """Each loss depends on one model only. Shown on the page in chapter 8
    (08_amp_patterns), beside ``coupled_losses``."""
    return F.cross_entropy(out0, labels), F.cross_entropy(out1, labels)


def two_models_step(
    models,
    optimizers,
    scaler,
    images,
    labels,
    device_type,
    dtype,
    losses=coupled_losses,
):
    """Shown on the page in chapter 8 (08_amp_patterns)."""
    for optimizer in optimizers:
        optimizer.zero_grad()
    with torch.amp.autocast(device_type, dtype=dtype):
        out0, out1 = models[0](images), models[1](images)
        loss0, loss1 = losses(out0, out1, labels)
    scaler.scale(loss0).backward(retain_graph=True)  # one scale() per loss
    scaler.scale(loss1).backward()
    for optimizer in optimizers:
        scaler.step(optimizer)  # one step() per optimizer: each checks its own grads
    scaler.update()  # one update() per iteration, after every step


PLANT = 1e30  # finite in fp32; its gradient overflows fp16
# GradScaler's default 2**16 overflows the coupled losses unplanted
INIT_SCALE = 2.0**10


def planted(losses):
    """``losses`` with the second one multiplied by ``PLANT``."""

    def with_overflow(out0, out1, labels):
        loss0, loss1 = losses(out0, out1, labels)
        return loss0, loss1 * PLANT

    return with_overflow


@dataclass
class SharedScaler:
    losses: str
    skipped: tuple[bool, bool]  # did each optimizer skip its step
    scale_before: float
    scale_after: float
    expect_both: bool  # each loss reaches both models

    planted: bool = True  # an overflow planted in the second loss

    @property
    def ok(self) -> bool:
        # planted: the second skips, the first too if its loss reaches both models,
        # the scale halves once; nothing planted: both step, the scale stays
        want = (self.expect_both, True) if self.planted else (False, False)
        factor = 0.5 if self.planted else 1.0
        return self.skipped == want and self.scale_after == self.scale_before * factor

    def verdict(self) -> str:
        which = {
            (True, True): "both optimizers skipped",
            (False, True): "only the second optimizer skipped",
            (True, False): "only the first optimizer skipped",
            (False, False): "neither optimizer skipped",
        }[self.skipped]
        what = "overflow planted in the second" if self.planted else "nothing planted"
        done = "halved once, as it should" if self.planted else "as it should"
        return (
            f"{self.losses} losses, {what}: {which}; the scale went from "
            f"{self.scale_before:g} to {self.scale_after:g} "
            f"({done if self.ok else 'not as it should'})."
        )


def check_shared_scaler(
    step=two_models_step,
    losses=coupled_losses,
    dtype: torch.dtype = torch.float16,
    size: int = 8,
    device_type: str = "cpu",
    seed: int = 0,
    plant: bool = True,
    init_scale: float = INIT_SCALE,
) -> SharedScaler:
    """One ``step`` of two tiny models: which optimizers skipped, what the scale did."""
    models = [tiny_model(seed), tiny_model(seed + 1)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    scaler = torch.amp.GradScaler(device_type, init_scale=init_scale)
    before = [flat_parameters(m) for m in models]
    images, labels = tiny_batch(2, size, seed)
    s0 = scaler.get_scale()
    chosen = planted(losses) if plant else losses
    step(models, optimizers, scaler, images, labels, device_type, dtype, losses=chosen)
    skipped = tuple(
        bool(torch.equal(flat_parameters(m), b)) for m, b in zip(models, before)
    )
    return SharedScaler(
        "coupled" if losses is coupled_losses else "separate",
        skipped,
        s0,
        scaler.get_scale(),
        losses is coupled_losses,
        plant,
    )
