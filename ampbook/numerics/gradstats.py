"""Gradients against fp16's range: its limits, and fp16 rounding of gradients in fp32
arithmetic (fp16's range without its speed penalty on CPUs lacking fast fp16)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ampbook.measure.model_dtypes import traced_call
from ampbook.numerics.formats import FORMATS, round_to

FP16 = FORMATS["fp16"]
FP16_MIN_SUBNORMAL = FP16.smallest_subnormal  # 2^-24
FP16_MIN_NORMAL = FP16.smallest_normal  # 2^-14
FP16_MAX = FP16.max  # 65504
FLUSH_AT_OR_BELOW = FP16_MIN_SUBNORMAL / 2  # 2^-25: rounds to 0 (a tie goes to even 0)
# 65520 (max + half the top binade's spacing of 32): rounds to inf (a tie goes to even)
OVERFLOW_AT_OR_ABOVE = FP16_MAX + math.ldexp(1.0, FP16.emax - FP16.mantissa_bits) / 2
# below this a value is stored as a subnormal; from it up, it rounds to 2^-14 or more
SUBNORMAL_BELOW = FP16_MIN_NORMAL - FP16_MIN_SUBNORMAL / 2

# Layer types whose weights autocast casts to the low dtype (so their weight gradients
# are computed in it): the convolution and linear layers of the documented op lists.
CAST_WEIGHT_TYPES = (nn.modules.conv._ConvNd, nn.Linear)


def check_scale(scale: float) -> float:
    scale = float(scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"a loss scale must be a positive finite number, got {scale}")
    return scale


class RoundingCounter:
    """Values seen, nonzero, flushed to 0 and overflowed to inf by the rounding of one
    backward (tensors until read: counting adds no CUDA synchronisation)."""

    def __init__(self):
        self.reset()

    def add(self, before: torch.Tensor, after: torch.Tensor) -> None:
        finite = torch.isfinite(before)
        nz = finite & (before != 0)
        self._sums[0] += before.numel()
        self._sums[1] = self._sums[1] + nz.sum()
        self._sums[2] = self._sums[2] + (nz & (after == 0)).sum()
        self._sums[3] = self._sums[3] + (finite & torch.isinf(after)).sum()

    def reset(self) -> None:
        self._sums = [0, 0, 0, 0]

    @property
    def values(self) -> int:
        return int(self._sums[0])

    @property
    def nonzero(self) -> int:
        return int(self._sums[1])

    @property
    def flushed(self) -> int:
        return int(self._sums[2])

    @property
    def overflow(self) -> int:
        return int(self._sums[3])

    @property
    def flushed_fraction(self) -> float:
        return self.flushed / self.nonzero if self.nonzero else float("nan")


class emulate_fp16_grads(TorchFunctionMode):
    """Emulate fp16 gradients with fp32 arithmetic: ``emulate_fp16_grads(model)``
    rounds the weight gradients of ``CAST_WEIGHT_TYPES`` to fp16 until ``remove()``;
    ``with emu: model(x)`` those of the tensors the forward creates (counted in
    ``emu.counter``): only the outputs of the ``calls`` a real autocast step runs in
    fp16 when given (``model_dtypes.low_precision_calls``), else all of them."""

    def __init__(self, model: nn.Module, calls: list[tuple[str, bool]] | None = None):
        super().__init__()
        self.model, self.calls = model, calls
        self.counter = RoundingCounter()
        self._param_handles = [
            p.register_hook(self._round_fp16)
            for m in model.modules()
            if isinstance(m, CAST_WEIGHT_TYPES)
            for p in m.parameters(recurse=False)
            if p.requires_grad
        ]

    @staticmethod
    def _round_fp16(g: torch.Tensor) -> torch.Tensor:
        return round_to(g, "fp16").to(g.dtype)

    def _round(self, g: torch.Tensor) -> torch.Tensor:
        r = self._round_fp16(g)
        self.counter.add(g, r)
        return r

    def __enter__(self) -> "emulate_fp16_grads":
        self.k = 0  # each forward walks ``calls`` from the first
        return super().__enter__()

    def _low(self, func, out) -> bool:
        calls = self.calls
        if calls is None:
            return True
        name = traced_call(func, out)
        if name is None:
            return False
        if self.k >= len(calls) or calls[self.k][0] != name:
            got = calls[self.k][0] if self.k < len(calls) else "the end of the trace"
            raise RuntimeError(
                f"emulate_fp16_grads: call {self.k} of the forward is {name}, "
                f"the autocast trace has {got}: trace the same model and mode"
            )
        self.k += 1
        return calls[self.k - 1][1]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        """Hooks rounding on every floating tensor needing a gradient that a torch
        function returns (with ``calls``: of the calls marked low precision)."""
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self._low(func, out):
            return out
        inputs = [*args, *kwargs.values()]
        for t in out if isinstance(out, (tuple, list)) else (out,):
            # an in-place op returns its input, whose gradient is already hooked
            grad = isinstance(t, torch.Tensor) and t.requires_grad
            if grad and t.is_floating_point() and not any(t is a for a in inputs):
                t.register_hook(self._round)
        return out

    def remove(self) -> None:
        for h in self._param_handles:
            h.remove()
        self._param_handles.clear()


def training_batches(
    data_root,
    height: int,
    width: int,
    n: int,
    batch_size: int,
    synthetic_train: int = 8,
    seed: int = 0,
):
    """``(batches, root)``: the first ``n`` training batches (at most 16 distinct) of
    Cityscapes at ``data_root`` or ``$CITYSCAPES_DATASET``, else of a synthetic one."""
    import itertools
    import os

    from ampbook.segmentation.cityscapes import Cityscapes, resolve_root
    from ampbook.segmentation.synthetic import synthetic_root

    if data_root or os.environ.get("CITYSCAPES_DATASET"):
        root = resolve_root(data_root)
    else:
        root = synthetic_root(synthetic_train, 2, 2 * height, 2 * width, seed=seed)
    data = Cityscapes(root, "train", height, width)
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=False)
    distinct = list(itertools.islice(loader, min(n, 16)))
    return list(itertools.islice(itertools.cycle(distinct), n)), root
