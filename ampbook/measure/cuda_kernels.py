"""The kernels CUDA runs where the CPU runs others, put in a CPU trace of a step: fused
attention (the CPU's math path upcasts 16-bit inputs and runs softmax, dropout and two
matrix products apart) and cuDNN's recurrent layer stack as one operator (oneDNN runs
an fp32 RNN, or a cell per time step under 16-bit autocast). ``CudaKernels`` puts
CUDA's operators in the trace: flash or memory-efficient attention (whose meta kernels
fake tensors run) and ``aten::_cudnn_rnn`` with ``ampbook::cudnn_rnn_backward``.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ampbook.measure.autocast_rules import is_autocast_eligible

_RNN_MODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
RNN_GATES = {0: 1, 1: 1, 2: 4, 3: 3}


@torch.library.custom_op("ampbook::cudnn_rnn_backward", mutates_args=())
def _cudnn_rnn_backward(
    x: torch.Tensor,
    hx: torch.Tensor,
    output: torch.Tensor,
    grad_output: torch.Tensor,
    reserve: torch.Tensor,
    weights: list[torch.Tensor],
    mode: int,
    hidden: int,
    layers: int,
    batch_first: bool,
    bidirectional: bool,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Stands for cuDNN's RNN backward (``aten::_cudnn_rnn_backward``) in a trace on
    fake tensors: the input, hidden-state and weight gradients."""
    raise NotImplementedError("ampbook::cudnn_rnn_backward exists for fake tensors")


@_cudnn_rnn_backward.register_fake
def _(x, hx, output, grad_output, reserve, weights, mode, hidden, layers, batch_first,
      bidirectional):  # fmt: skip
    empty = torch.empty_like
    return empty(x), empty(hx), [empty(w) for w in weights]


class _CudnnRNN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg, x, hx, cx, *weights):
        mode, hidden, layers, batch_first, dropout, train, bidir, stride = cfg
        output, hy, cy, _, _ = torch.ops.aten._cudnn_rnn(
            x, list(weights), stride, None, hx, cx, mode, hidden, 0, layers,
            batch_first, dropout, train, bidir, [], None,
        )  # fmt: skip
        # cuDNN's training reserve (an estimate): per layer, direction and time step,
        # the gates' activations and the cell and hidden states
        per_step = layers * (2 if bidir else 1) * hidden * (RNN_GATES[mode] + 2)
        reserve = x.new_empty(x.shape[0] * x.shape[1] * per_step)
        ctx.cfg = cfg
        ctx.save_for_backward(x, hx, output, reserve, *weights)
        return output, hy, cy

    @staticmethod
    def backward(ctx, grad_output, grad_hy, grad_cy):
        mode, hidden, layers, batch_first, _, _, bidir, _ = ctx.cfg
        x, hx, output, reserve, *weights = ctx.saved_tensors
        dx, dhx, dws = torch.ops.ampbook.cudnn_rnn_backward(
            x, hx, output, grad_output, reserve, weights, mode, hidden, layers,
            batch_first, bidir,
        )  # fmt: skip
        dcx = torch.empty_like(dhx) if mode == _RNN_MODES["lstm"] else None
        return (None, dx, dhx, dcx, *dws)


def _autocast_low() -> torch.dtype | None:
    return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None


def _cudnn_rnn(name: str, func, args, kwargs):
    """``_VF.lstm/gru/rnn_tanh/rnn_relu`` on padded input as cuDNN runs it, in the
    autocast dtype, else None (packed sequences, projections: left to the CPU)."""
    if kwargs or len(args) != 9 or not isinstance(args[2], (list, tuple)):
        return None
    x, hx, params, has_biases, layers, dropout, train, bidir, batch_first = args
    lstm = name == "lstm"
    h0, c0 = (hx[0], hx[1]) if lstm else (hx, None)
    stride = 4 if has_biases else 2
    if len(params) != stride * layers * (2 if bidir else 1) or x.dim() != 3:
        return None
    low = _autocast_low()
    with torch.autocast("cpu", enabled=False):
        if low is not None:
            x, h0, params = x.to(low), h0.to(low), [p.to(low) for p in params]
            c0 = c0.to(low) if c0 is not None else None
        cfg = (_RNN_MODES[name], h0.shape[-1], layers, batch_first, dropout, train,
               bidir, stride)  # fmt: skip
        output, hy, cy = _CudnnRNN.apply(cfg, x, h0, c0, *params)
    return (output, hy, cy) if lstm else (output, hy)


def _fused_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                     is_causal=False, scale=None, enable_gqa=False):  # fmt: skip
    """``scaled_dot_product_attention`` as CUDA runs it in training, in the autocast
    dtype: flash attention for 16-bit inputs without a mask (head dimension a multiple
    of 8, at most 256), else the memory-efficient kernel, one operator forward and one
    backward. Anything else (grouped-query attention, odd head sizes, fp64) takes
    PyTorch's function."""
    original = _ORIGINAL["scaled_dot_product_attention"]
    low = _autocast_low()
    q, k, v = query, key, value
    if low is not None:
        q, k, v = (t.to(low) if is_autocast_eligible(t) else t for t in (q, k, v))
    d, dv = q.shape[-1], v.shape[-1]
    supported = (
        not enable_gqa
        and q.dim() >= 3
        and k.dim() == q.dim()
        and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and q.dtype == k.dtype == v.dtype
        and d % 8 == dv % 8 == 0
        and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
    )
    if not supported:
        with torch.autocast("cpu", enabled=False):
            return original(q, k, v, attn_mask, dropout_p, is_causal, scale=scale)
    batch = q.shape[:-2]
    q4, k4, v4 = (
        t if t.dim() == 4 else t.reshape(-1, 1, *t.shape[-2:]) for t in (q, k, v)
    )
    with torch.autocast("cpu", enabled=False):
        flash = q.dtype != torch.float32 and attn_mask is None and d == dv and d <= 256
        if flash:
            out = torch.ops.aten._scaled_dot_product_flash_attention(
                q4, k4, v4, dropout_p, is_causal, False, scale=scale
            )[0]
        else:
            bias = attn_mask
            if bias is not None:
                if bias.dtype == torch.bool:
                    bias = torch.zeros_like(bias, dtype=q.dtype).masked_fill(
                        ~bias, float("-inf")
                    )
                bias = bias.to(q.dtype).expand(*q4.shape[:3], k4.shape[2])
            grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
            out = torch.ops.aten._scaled_dot_product_efficient_attention(
                q4, k4, v4, bias, grad, dropout_p, is_causal, scale=scale
            )[0]
    return out.reshape(*batch, *out.shape[-2:])


def _softmax_fp32(input, dim=None, _stacklevel=3, dtype=None):
    """``F.softmax`` with CUDA autocast's rule (an fp32 result) inside composites such
    as ``F.multi_head_attention_forward``."""
    if dtype is None and _autocast_low() is not None and is_autocast_eligible(input):
        dtype = torch.float32
    return _ORIGINAL["softmax"](input, dim, _stacklevel, dtype)


_PATCHED = {"scaled_dot_product_attention": _fused_attention, "softmax": _softmax_fp32}
_ORIGINAL = {name: getattr(F, name) for name in _PATCHED}


class _KernelMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _RNN_MODES and getattr(func, "__module__", "") in ("torch", None):
            out = _cudnn_rnn(name, func, args, kwargs)
            if out is not None:
                return out
        if name == "scaled_dot_product_attention":
            return _fused_attention(*args, **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def CudaKernels():  # noqa: N802 (a context manager used like a mode)
    """Within the block, attention and recurrent layers run as CUDA's fused kernels
    run them: seen by a ``TorchFunctionMode`` when a model's own ``forward`` calls them,
    and by replacing ``F.scaled_dot_product_attention`` and ``F.softmax`` for calls
    from inside composites (``F.multi_head_attention_forward``). For traces on fake
    tensors only: the replacements compute nothing on real ones."""
    for key, fn in _PATCHED.items():
        setattr(F, key, fn)
    try:
        with _KernelMode():
            yield
    finally:
        for key, fn in _ORIGINAL.items():
            setattr(F, key, fn)
