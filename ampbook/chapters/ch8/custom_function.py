"""A custom autograd Function that needs fp32 under autocast (chapter 8,
``exp_sum_log``); ``check_custom_function`` reads what its forward received."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ampbook.core.precision import torch_name


def exp_sum_log(device_type, cast_inputs=torch.float32):
    """log(sum(exp(x))) over the last dimension, written naively (exp overflows fp16
    above 11.1), as an autograd Function that runs in fp32 under autocast.

    Shown on the page in chapter 8 (08_amp_patterns)."""

    class ExpSumLog(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type=device_type, cast_inputs=cast_inputs)
        def forward(ctx, x):
            ExpSumLog.received = x.dtype  # what the forward got (for the check)
            # exp on the tensor as received: CUDA's autocast would run exp in fp32
            # of its own accord (its fp32 list), the CPU's would not
            with torch.amp.autocast(device_type, enabled=False):
                e = x.exp()
            total = e.sum(-1, keepdim=True)
            ctx.save_for_backward(e, total)
            return total.log().squeeze(-1)

        @staticmethod
        @torch.amp.custom_bwd(device_type=device_type)
        def backward(ctx, grad):
            e, total = ctx.saved_tensors
            return grad.unsqueeze(-1) * e / total

    return ExpSumLog


@dataclass
class FunctionCheck:
    cast_inputs: str
    received: str  # the dtype the forward received
    output_finite: bool
    grad_dtype: str  # the dtype of the gradient reaching the layer before

    @property
    def ok(self) -> bool:
        return self.received == "float32" and self.output_finite

    def verdict(self) -> str:
        fin = "finite" if self.output_finite else "not finite (exp overflowed)"
        return (
            f"cast_inputs={self.cast_inputs}: the forward received {self.received}, "
            f"its output was {fin}, the gradient left it in {self.grad_dtype}."
        )


def check_custom_function(
    make=exp_sum_log,
    cast_inputs=torch.float32,
    dtype: torch.dtype = torch.float16,
    device_type: str = "cpu",
    seed: int = 0,
) -> FunctionCheck:
    """What ``make(device_type, cast_inputs)``'s forward gets from a 16-bit Linear."""
    torch.manual_seed(seed)
    layer = nn.Linear(8, 8)
    x = torch.full((2, 8), 1.0)
    grad_dtype: list[torch.dtype] = []
    with torch.amp.autocast(device_type, dtype=dtype):
        h = layer(x) * 0 + 12.0  # a 16-bit activation of 12: exp(12) > 65504
        h.register_hook(lambda g: grad_dtype.append(g.dtype))
        function = make(device_type, cast_inputs)
        out = function.apply(h)
    out.float().sum().backward()
    label = "None" if cast_inputs is None else f"torch.{torch_name(cast_inputs)}"
    return FunctionCheck(
        label,
        torch_name(function.received),
        bool(torch.isfinite(out).all()),
        torch_name(grad_dtype[0]),
    )
