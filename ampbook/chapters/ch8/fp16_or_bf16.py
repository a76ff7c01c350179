"""What chapter 8 measures here to choose fp16 or bf16: the gradients each flushes to
zero unscaled, and a training step's time in each."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def flushed_fractions(grads: list[torch.Tensor]) -> dict[str, float]:
    """The share of the nonzero gradients that round to 0 in fp16 and bf16, unscaled."""
    from ampbook.numerics.formats import round_to

    g = torch.cat([x.detach().flatten().float() for x in grads])
    g = g[g != 0]
    return {
        name: float((round_to(g, name) == 0).float().mean())
        for name in ("fp16", "bf16")
    }


def step_times(model, images, labels, dtype, repeats: int = 1) -> tuple[float, ...]:
    """Seconds of ``repeats`` forward+backward passes under CPU autocast, warmed up."""
    from ampbook.measure.timing import benchmark

    def step():
        model.zero_grad(set_to_none=True)
        with torch.amp.autocast("cpu", dtype=dtype):
            loss = F.cross_entropy(model(images), labels, ignore_index=255)
        loss.backward()

    return benchmark(step, warmup=1, repeats=repeats, number=1, min_time=0.0).times_s
