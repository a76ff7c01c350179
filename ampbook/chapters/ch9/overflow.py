"""Question 2 of chapter 9: NaN from the first batch when fine-tuning pretrained
weights under fp16 autocast: an activation past 65504 overflows to inf, the next
operator makes it NaN. ``first_nonfinite`` finds the module, ``Fp32Block`` is the fix,
``check_fix`` says whether a fix gives finite outputs that match fp32."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

FP16_MAX = torch.finfo(torch.float16).max  # 65504


class FeedForward(nn.Module):
    """A transformer's feed-forward block (``Linear -> ReLU -> Linear``), the block
    where T5's activations pass 65504."""

    def __init__(self, width: int = 16, hidden: int = 64):
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Finetuned(nn.Module):
    """Two feed-forward blocks, each followed by a LayerNorm (fp32 under autocast)."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.block1 = FeedForward(width)
        self.norm1 = nn.LayerNorm(width)
        self.block2 = FeedForward(width)
        self.norm2 = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.block1(x))
        return self.norm2(x + self.block2(x))


def pretrained(seed: int = 0, gain: float = 200.0, block: str = "block2") -> Finetuned:
    """A ``Finetuned`` whose ``block``'s weights are ``gain`` times their initial
    size: pretrained weights grown large, planted (the book downloads no T5)."""
    torch.manual_seed(seed)
    model = Finetuned()
    with torch.no_grad():
        ff = getattr(model, block)
        ff.up.weight.mul_(gain)
        ff.up.bias.fill_(gain)
        ff.down.weight.mul_(gain)
    return model


def batch(n: int = 8, width: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, width, generator=torch.Generator().manual_seed(seed))


def first_nonfinite(model: nn.Module, x: torch.Tensor, dtype=torch.float16):
    """Run ``model(x)`` under autocast on ``x``'s device in ``dtype`` with a forward
    hook on every module; the name of the first module (in execution order) whose
    output has an inf or a NaN, or None.
    Shown on the page in chapter 9 (09_when_amp_goes_wrong)."""
    found = []

    def hook(name):
        def check(module, inputs, output):
            if not found and not torch.isfinite(output).all():
                found.append(name)

        return check

    handles = [
        m.register_forward_hook(hook(name)) for name, m in model.named_modules() if name
    ]
    try:
        with torch.no_grad(), torch.amp.autocast(x.device.type, dtype=dtype):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None


def largest_output(model: nn.Module, x: torch.Tensor) -> float:
    """The largest |output| of any module in an fp32 forward."""
    sizes = [0.0]

    def keep(module, inputs, output):
        sizes.append(output.abs().max().item())

    handles = [m.register_forward_hook(keep) for n, m in model.named_modules() if n]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return max(sizes)


class Fp32Block(nn.Module):
    """Runs ``block`` in fp32 inside an autocast region: autocast off and the input
    cast up. Shown on the page in chapter 9 (09_when_amp_goes_wrong)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.amp.autocast(x.device.type, enabled=False):
            return self.block(x.float())


def keep_in_fp32(model: Finetuned, name: str) -> Finetuned:
    """The fix: block ``name`` wrapped in ``Fp32Block``."""
    setattr(model, name, Fp32Block(getattr(model, name)))
    return model


@dataclass
class OverflowCheck:
    first_bad: str | None  # first module whose fp16 output is not finite, unfixed
    largest: float  # the largest |activation| of the fp32 forward
    fixed_finite: bool
    fixed_difference: float  # fixed fp16 output against fp32, max |a - b| / max |b|
    tolerance: float

    @property
    def ok(self) -> bool:
        fixed = self.fixed_finite and self.fixed_difference <= self.tolerance
        return self.first_bad is not None and fixed

    def verdict(self) -> str:
        if self.first_bad is None:
            return (
                "Nothing overflowed: the planted weights did not reproduce question 2."
            )
        tol = f"(tolerance {self.tolerance:.0e})"
        fixed = f"finite, within {self.fixed_difference:.1e} of fp32 {tol}"
        fixed = fixed if self.fixed_finite else "still not finite"
        return (
            f"Measured: the largest activation of the fp32 forward is "
            f"{self.largest:,.0f} (fp16 holds up to {FP16_MAX:,.0f}); under fp16 "
            f"autocast the first output that is not finite is `{self.first_bad}`'s. "
            f"With the fix the output is {fixed}: the fix "
            f"{'works' if self.ok else 'does not work'}."
        )


def check_fix(fix, seed: int = 0, tolerance: float = 1e-2) -> OverflowCheck:
    """Question 2 reproduced, ``fix(model, block)`` applied: fp16 output vs fp32's."""
    model, x = pretrained(seed), batch(seed=seed)
    first = first_nonfinite(model, x)
    largest = largest_output(model, x)
    with torch.no_grad():
        reference = model(x)
    fixed = fix(model, first.split(".")[0]) if first else model
    with torch.no_grad(), torch.amp.autocast("cpu", dtype=torch.float16):
        out = fixed(x).float()
    finite = bool(torch.isfinite(out).all())
    diff = (out - reference).abs().max().item() / reference.abs().max().item()
    diff = diff if finite else float("inf")
    return OverflowCheck(first, largest, finite, diff, tolerance)
