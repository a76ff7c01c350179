"""Activation checkpointing against AMP (chapter 8): ``memory_rows`` of fp32,
autocast, checkpointing and both, and the block inputs it stores."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ampbook.core.precision import torch_name
from ampbook.measure.memory import AllocatedBytesMeter


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in the backward pass.

    Shown on the page in chapter 8 (08_amp_patterns)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)


def checkpoint_blocks(model):
    """Wrap every block of ERFNet's encoder and decoder in ``Checkpointed``.

    Shown on the page in chapter 8 (08_amp_patterns)."""
    for part in (model.encoder, model.decoder):
        for i, block in enumerate(part.layers):
            part.layers[i] = Checkpointed(block)
    return model


@dataclass
class MemoryRow:
    setting: str
    peak_bytes: int  # tensors alive at once over forward + backward
    step_s: float


def memory_rows(
    height: int = 32,
    width: int = 64,
    batch: int = 1,
    dtype: torch.dtype = torch.bfloat16,
    repeats: int = 1,
    seed: int = 0,
) -> list[MemoryRow]:
    """ERFNet's forward and backward in fp32, under autocast, with
    ``checkpoint_blocks`` and with both: the peak bytes allocated in one step and the
    median time of ``repeats`` steps after a warm-up."""
    from ampbook.measure.timing import benchmark
    from ampbook.segmentation.cityscapes import NUM_CLASSES
    from ampbook.segmentation.model import ERFNet

    g = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 3, height, width, generator=g)
    labels = torch.randint(0, NUM_CLASSES, (batch, height, width))
    rows = []
    for name, d, ckpt in (
        ("fp32", None, False),
        (f"AMP ({torch_name(dtype)})", dtype, False),
        ("checkpointing", None, True),
        ("both", dtype, True),
    ):
        torch.manual_seed(seed)
        model = ERFNet(NUM_CLASSES)
        if ckpt:
            checkpoint_blocks(model)

        def step(grads_to_none=True):
            model.zero_grad(set_to_none=grads_to_none)
            with torch.amp.autocast(
                "cpu", dtype=d or torch.float32, enabled=d is not None
            ):
                loss = F.cross_entropy(model(images), labels)
            loss.backward()

        step()  # a warm-up, which also makes the gradients
        with AllocatedBytesMeter() as meter:
            step(grads_to_none=False)  # the gradients exist: not counted
        seconds = benchmark(
            step, warmup=0, repeats=repeats, number=1, min_time=0.0
        ).median_s
        rows.append(MemoryRow(name, meter.peak_bytes, seconds))
    return rows


def block_input_dtypes(
    height: int = 32,
    width: int = 64,
    dtype: torch.dtype = torch.bfloat16,
    fp16_stream: bool = False,
    seed: int = 0,
) -> dict[str, dict[str, int]]:
    """Per part of ERFNet, how many blocks received each dtype in one forward under
    CPU autocast: the inputs ``checkpoint_blocks`` would store."""
    from ampbook.segmentation.cityscapes import NUM_CLASSES
    from ampbook.segmentation.model import ERFNet

    torch.manual_seed(seed)
    model = ERFNet(NUM_CLASSES, fp16_stream=fp16_stream)
    seen: dict[str, Counter] = {"encoder": Counter(), "decoder": Counter()}

    def record(part, _module, args):
        seen[part][torch_name(args[0].dtype)] += 1

    hooks = [
        block.register_forward_pre_hook(functools.partial(record, part))
        for part in seen
        for block in getattr(model, part).layers
    ]
    g = torch.Generator().manual_seed(seed)
    try:
        with torch.no_grad(), torch.amp.autocast("cpu", dtype=dtype):
            model(torch.randn(1, 3, height, width, generator=g))
    finally:
        for h in hooks:
            h.remove()
    return {part: dict(counts) for part, counts in seen.items()}
