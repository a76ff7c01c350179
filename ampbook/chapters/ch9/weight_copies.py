"""Question 5 of chapter 9: mixed precision uses more memory. A step keeps fp32
weights, gradients and optimizer state whatever the precision; autocast halves the
saved activations but adds a 16-bit copy of every weight it casts. With few tokens
per step (a wide model on short batches) the copies outweigh the savings. The fix is
a step above the crossover chapter 3's straight line predicts from two small
measurements (``memory.fit_line``, ``memory.crossover_pixels``, here in tokens)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ampbook.chapters.ch9.overflow import FeedForward
from ampbook.core.page import MIB
from ampbook.measure import memory


def wide_model(seed: int = 0, width: int = 256, hidden: int = 1024) -> nn.Module:
    """Two wide feed-forward blocks and LayerNorms: weights large beside activations."""
    torch.manual_seed(seed)
    ff, ln = FeedForward, nn.LayerNorm
    return nn.Sequential(ff(width, hidden), ln(width), ff(width, hidden), ln(width))


def step_bytes(model: nn.Module, tokens: int, dtype=None, seed: int = 0) -> dict:
    """A step's saved bytes on ``tokens`` rows (by dtype), its weights, Adam state."""
    width = model[0].up.in_features
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, width, generator=g)
    target = torch.randn(tokens, width, generator=g)
    saved = memory.saved_for_backward(model, x, target, "cpu", dtype, nn.MSELoss())
    n_params = sum(p.numel() for p in model.parameters())
    static = memory.ADAM_STATE_BYTES_PER_PARAM * n_params
    return {
        "saved": saved["new_bytes"],
        "by_dtype": saved["by_dtype"],
        "static": static,
        "total": static + saved["new_bytes"],
    }


@dataclass
class MemoryCheck:
    tokens: int  # the step the reader runs
    fp32_total: int
    amp_total: int
    crossover_tokens: float  # predicted from two small steps
    static: int = 0  # weights, gradients and Adam state (computed, same in both)

    @property
    def amp_costs(self) -> bool:
        return self.amp_total > self.fp32_total

    @property
    def as_predicted(self) -> bool:
        """AMP saves memory above the predicted crossover and costs it below."""
        return (self.tokens >= self.crossover_tokens) == (not self.amp_costs)

    @property
    def ok(self) -> bool:
        """The fix works: above the crossover, AMP's step is smaller than fp32's."""
        return self.tokens >= self.crossover_tokens and not self.amp_costs

    def verdict(self) -> str:
        share = memory.saving(self.fp32_total, self.amp_total)
        side = "above" if self.tokens >= self.crossover_tokens else "below"
        does = "costs" if self.amp_costs else "saves"
        agree = "as predicted" if self.as_predicted else "against the prediction"
        return (
            f"At {self.tokens} tokens per step, saved bytes measured + weights, "
            f"gradients and Adam state computed ({memory.ADAM_STATE_BYTES_PER_PARAM} "
            f"B/weight, {self.static / MIB:.2f} MiB): fp32's step "
            f"{self.fp32_total / MIB:.2f} MiB, AMP's {self.amp_total / MIB:.2f} MiB "
            f"(fp16 autocast, a saving of {share:+.0%}; not peak memory); predicted "
            f"crossover {self.crossover_tokens:.0f} tokens: {side} it AMP {does} "
            f"memory, {agree}."
        )


def check_memory(
    tokens: int, fit_tokens=(8, 64), seed: int = 0, crossover: float | None = None
) -> MemoryCheck:
    """The crossover fitted on two small steps (or given), measured at ``tokens``."""
    model = wide_model(seed)
    if crossover is None:
        lines = [
            memory.fit_line(
                [(n, step_bytes(model, n, dt, seed)["saved"]) for n in fit_tokens]
            )
            for dt in (None, torch.float16)
        ]
        crossover = memory.crossover_pixels(*lines)
    fp32 = step_bytes(model, tokens, None, seed)
    amp = step_bytes(model, tokens, torch.float16, seed)
    return MemoryCheck(tokens, fp32["total"], amp["total"], crossover, fp32["static"])
