"""Gradient accumulation under AMP (chapter 8): ``accumulate_step`` divides each
micro-batch's loss by their number, scales each and steps once; ``check_accumulation``
compares its update with one large batch's."""

from __future__ import annotations

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

CLIP = 0.02  # the norm to clip to: below the tiny model's gradients' (about 0.1)


def accumulate_step(model, optimizer, scaler, micro_batches, device_type, dtype):
    """One optimizer step over a list of (images, labels) micro-batches.

    Shown on the page in chapter 8 (08_amp_patterns)."""
    n = len(micro_batches)
    optimizer.zero_grad()
    for images, labels in micro_batches:
        with torch.amp.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(images), labels) / n  # the mean over all
        scaler.scale(loss).backward()  # gradients add up across micro-batches
    scaler.step(optimizer)
    scaler.update()


def _updates(
    steps, micro, micro_batch, size, seed, device_type, dtype, batch_norm=False
) -> list:
    """The SGD updates of ``steps[0]`` over the micro-batches, ``steps[1]`` as one."""
    images, labels = tiny_batch(micro * micro_batch, size, seed)
    chunks = list(zip(images.split(micro_batch), labels.split(micro_batch)))
    return [
        sgd_update(
            run,
            tiny_model(seed, batch_norm=batch_norm),
            scaler_for(device_type, dtype),
            batches,
            device_type,
            dtype,
        )[1]
        for run, batches in zip(steps, (chunks, [(images, labels)]))
    ]


def check_accumulation(
    step=accumulate_step,
    dtype: torch.dtype | None = None,
    micro: int = 4,
    micro_batch: int = 2,
    size: int = 16,
    batch_norm: bool = False,
    device_type: str = "cpu",
    seed: int = 0,
) -> Comparison:
    """Micro-batches against one large batch, by SGD (Adam hides a wrong factor)."""
    updates = _updates(
        (step, step), micro, micro_batch, size, seed, device_type, dtype, batch_norm
    )
    note = " (batch norm: each micro-batch normalised by its own statistics)"
    return Comparison(
        f"{micro} micro-batches of {micro_batch} vs one batch of {micro * micro_batch}",
        dtype_label(dtype),
        relative_difference(*updates),
        rounding_tolerance(dtype),
        note if batch_norm else "",
    )


def accumulate_clip_step(
    model, optimizer, scaler, micro_batches, device_type, dtype, max_norm=CLIP
):
    """``accumulate_step`` with the gradients' norm clipped: ``unscale_`` once, after
    the last micro-batch, when the gradients are whole.

    Shown on the page in chapter 8 (08_amp_patterns)."""
    n = len(micro_batches)
    optimizer.zero_grad()
    for images, labels in micro_batches:
        with torch.amp.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(images), labels) / n
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # after the last micro-batch: the sum is complete
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)  # knows the gradients are unscaled: does not divide again
    scaler.update()


def unscale_after_first_micro_batch(
    model, optimizer, scaler, micro_batches, device_type, dtype, max_norm=CLIP
):
    """``accumulate_clip_step`` written wrong: ``unscale_`` after the first
    micro-batch. The later micro-batches add gradients still multiplied by the scale
    to unscaled ones, and ``step`` does not divide again. Shown on the page in
    chapter 8 (08_amp_patterns), beside ``accumulate_clip_step``."""
    n = len(micro_batches)
    optimizer.zero_grad()
    for i, (images, labels) in enumerate(micro_batches):
        with torch.amp.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(images), labels) / n
        scaler.scale(loss).backward()
        if i == 0:
            scaler.unscale_(optimizer)  # wrong: the sum is not complete yet
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def check_clipped_accumulation(
    step=accumulate_clip_step,
    dtype: torch.dtype = torch.float16,
    micro: int = 4,
    micro_batch: int = 2,
    size: int = 16,
    device_type: str = "cpu",
    seed: int = 0,
) -> Comparison:
    """``step`` against ``accumulate_clip_step`` on one batch (``CLIP``: < the norm)."""
    updates = _updates(
        (step, accumulate_clip_step), micro, micro_batch, size, seed, device_type, dtype
    )
    return Comparison(
        f"clipped to norm {CLIP}, {micro} micro-batches of {micro_batch} vs one batch "
        f"of {micro * micro_batch}",
        dtype_label(dtype),
        relative_difference(*updates),
        rounding_tolerance(dtype),
    )
