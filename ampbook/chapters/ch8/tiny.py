"""What chapter 8's pattern checks share: the tiny network they train, its batches, a
GradScaler per dtype, one SGD step's update, and the ``Comparison`` of two ways of
doing the same thing against a rounding tolerance."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ampbook.core.precision import torch_name
from ampbook.numerics.formats import get_format

CLASSES = 4


class TinyNet(nn.Module):
    """Three convolutions to per-pixel class scores, a norm layer after the first."""

    def __init__(
        self, channels: int = 8, batch_norm: bool = False, group_norm: bool = False
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.norm = (
            nn.BatchNorm2d(channels)
            if batch_norm
            else nn.GroupNorm(2, channels)
            if group_norm
            else nn.Identity()
        )
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.head = nn.Conv2d(channels, CLASSES, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.norm(self.conv1(x)))
        return self.head(F.relu(self.conv2(x)))


def tiny_model(seed: int = 0, **kw) -> TinyNet:
    torch.manual_seed(seed)
    return TinyNet(**kw)


def tiny_batch(n: int, size: int = 16, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``n`` random images (``n,3,size,size``) and per-pixel labels."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 3, size, size, generator=g)
    labels = torch.randint(0, CLASSES, (n, size, size), generator=g)
    return images, labels


def scaler_for(device_type: str, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """A GradScaler for fp16; a disabled one (it passes all through) otherwise."""
    return torch.amp.GradScaler(device_type, enabled=dtype == torch.float16)


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over max |b| (0 when both are zero)."""
    top = b.abs().max().item()
    return (a - b).abs().max().item() / top if top else (a - b).abs().max().item()


def flat_parameters(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().float() for p in model.parameters()])


def sgd_update(run, model: nn.Module, *args) -> tuple:
    """``run(model, SGD(lr=0.1), *args)``: (what it returns, weights after - before)."""
    before = flat_parameters(model)
    out = run(model, torch.optim.SGD(model.parameters(), lr=0.1), *args)
    return out, flat_parameters(model) - before


def dtype_label(dtype: torch.dtype | None) -> str:
    return "fp32" if dtype is None else torch_name(dtype)


@dataclass
class Comparison:
    """Two ways of doing the same thing: ``difference`` against ``tolerance``."""

    what: str
    dtype: str
    difference: float
    tolerance: float
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.difference <= self.tolerance

    def verdict(self) -> str:
        word = "within" if self.ok else "outside"
        return (
            f"{self.what} ({self.dtype}): measured difference {self.difference:.2e}, "
            f"{word} the tolerance {self.tolerance:.1e}{self.note}."
        )


def rounding_tolerance(dtype: torch.dtype | None, units: float | None = None) -> float:
    """How far two results that differ only by rounding may drift apart (relative):
    ``units`` unit roundoffs of ``dtype``, by default 64 of fp32's (long sums in
    another order) and 4 of a 16-bit type's (its rounding of the activations)."""
    fmt = get_format(dtype or torch.float32)
    return (units or (64.0 if dtype is None else 4.0)) * fmt.unit_roundoff
