"""What autocast does, observed rather than assumed.

Three sources answer "which dtype does this op run in under autocast?", and this module
puts them side by side:

* the **documentation**: the op lists of the torch.amp docs ("Autocast Op Reference",
  https://pytorch.org/docs/stable/amp.html#autocast-op-reference), kept as data in
  ``data/reference/autocast_ops.yml`` (``documented_ops``);
* the **dispatcher** of the installed torch: the ops that have a kernel registered for
  the ``AutocastCPU`` / ``AutocastCUDA`` dispatch key (``registered_ops``); every other
  op falls through autocast untouched;
* **probes**: each op run on small tensors under autocast, once with fp32 inputs and
  once with low-precision inputs, and the output dtype read off (``probe_ops``).

CUDA probes run on a GPU when there is one. Without one they run on *fake* CUDA tensors
(``torch._subclasses.fake_tensor.FakeTensorMode``): tensors that carry a device and a
dtype but no data, so the dispatcher's CUDA autocast kernels make their real decisions
while no arithmetic happens. ``autocast_region(..., fake=True)`` switches CUDA autocast
on directly for that (``torch.autocast`` itself refuses CUDA on a machine without a
GPU).

``trace_layers`` and ``trace_ops`` record, with forward hooks and a
``TorchFunctionMode``, the input and output dtypes of every layer and every functional
op of a model under autocast; ``CastCounter`` counts the dtype conversions autocast
makes (the casts of the fp32 weights, and the cast cache that makes a weight used twice
in one region cast once).

``CudaAutocastRules`` makes CUDA's decisions inside a CPU autocast region (CUDA's op
lists as the installed torch declares them), for the cost model's CPU trace of a
training step; ``probe_ops(..., cuda_rules=True)`` shows it gives CUDA's dtypes.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from ampbook.core.paths import load_reference
from ampbook.core.precision import torch_name
from ampbook.measure.tracking import ModuleScopes

DOC_URL = "https://pytorch.org/docs/stable/amp.html#autocast-op-reference"
CATEGORIES = ("lower_precision", "float32", "promote")
DEVICE_TYPES = ("cpu", "cuda")
_DISPATCH_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}
_DEFAULT_DTYPE = {"cpu": torch.bfloat16, "cuda": torch.float16}


def _check_device_type(device_type: str) -> str:
    if device_type not in DEVICE_TYPES:
        raise ValueError(
            f"device_type must be one of {DEVICE_TYPES}, got {device_type!r}"
        )
    return device_type


def default_dtype(device_type: str) -> torch.dtype:
    """Autocast's own default low-precision dtype for the device (bf16 on CPU, fp16 on
    CUDA)."""
    return _DEFAULT_DTYPE[_check_device_type(device_type)]


def dtype_name(dtype: torch.dtype | None) -> str:
    return "-" if dtype is None else torch_name(dtype)


# --- the documented lists and the dispatcher's registrations
# -------------------------------


@functools.lru_cache(maxsize=1)
def _reference() -> dict:
    return load_reference("autocast_ops")


def documented_ops(device_type: str) -> dict[str, list[str]]:
    """The torch.amp docs' op lists for ``device_type``: ``{"lower_precision": [...],
    "float32": [...], "promote": [...]}`` (names as the docs write them)."""
    section = _reference()[_check_device_type(device_type)]
    return {c: list(section[c]) for c in CATEGORIES}


def documented_source() -> dict:
    """Title, URL and page version of the documented lists (for the citation)."""
    return dict(_reference()["source"])


def documented_category(
    op: str, device_type: str, aliases: tuple[str, ...] = ()
) -> str | None:
    """The documented category of ``op`` (or one of its ``aliases``), None when
    unlisted."""
    names = {op, *aliases}
    for category, ops in documented_ops(device_type).items():
        if names & set(ops):
            return category
    return None


def _base_name(qualified: str) -> str:
    """``"aten::conv2d.padding"`` -> ``"conv2d"``."""
    return qualified.split("::", 1)[-1].split(".", 1)[0]


def registered_ops(device_type: str) -> list[str]:
    """Sorted names of the ops with a kernel for the device's autocast dispatch key in
    the installed torch (overloads merged: ``conv2d`` and ``conv2d.padding`` give
    ``conv2d``). Works without the device: the registrations are part of the build."""
    key = _DISPATCH_KEYS[_check_device_type(device_type)]
    # No public API lists a dispatch key's registrations: this private call is the
    # dispatcher's own answer, used only to list op names.
    regs = torch._C._dispatch_get_registrations_for_dispatch_key(key)
    return sorted({_base_name(r) for r in regs})


# --- autocast regions, real and fake
# -------------------------------------------------------


def cuda_is_fake() -> bool:
    """True when CUDA probes have to use fake tensors (no GPU here)."""
    return not torch.cuda.is_available()


@contextlib.contextmanager
def autocast_region(
    device_type: str,
    dtype: torch.dtype | None = None,
    fake: bool = False,
    cache_enabled: bool = True,
) -> Iterator[torch.device]:
    """An autocast region for ``device_type`` yielding the device to create tensors on.

    ``fake=True`` (CUDA only) enters a ``FakeTensorMode`` and switches CUDA autocast on
    directly, so that the CUDA autocast kernels run on fake CUDA tensors without a GPU.
    Inside it, create tensors with ``device=`` the yielded device; results have dtypes
    and shapes but no values."""
    _check_device_type(device_type)
    dtype = dtype or default_dtype(device_type)
    if not fake:
        if device_type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                "a real CUDA autocast region needs a GPU; use fake=True to "
                "probe CUDA autocast's rules on fake tensors"
            )
        with torch.autocast(device_type, dtype=dtype, cache_enabled=cache_enabled):
            yield torch.device(device_type)
        return
    if device_type != "cuda":
        raise ValueError(
            "fake=True is for probing CUDA autocast without a GPU; "
            "the CPU runs real autocast"
        )
    from torch._subclasses.fake_tensor import FakeTensorMode

    prev = (
        torch.is_autocast_enabled("cuda"),
        torch.get_autocast_dtype("cuda"),
        torch.is_autocast_cache_enabled(),
    )
    with FakeTensorMode(allow_non_fake_inputs=True):
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", dtype)
        torch.set_autocast_cache_enabled(cache_enabled)
        torch.autocast_increment_nesting()
        try:
            yield torch.device("cuda")
        finally:
            if torch.autocast_decrement_nesting() == 0:
                torch.clear_autocast_cache()
            torch.set_autocast_enabled("cuda", prev[0])
            torch.set_autocast_dtype("cuda", prev[1])
            torch.set_autocast_cache_enabled(prev[2])


# --- CUDA's rules in a CPU autocast region
# ------------------------------------------------
#
# CUDA's autocast op lists as the installed torch declares them (the macros
# AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32 and AT_FORALL_FP32_SET_OPT_DTYPE in
# torch/include/ATen/autocast_mode.h; tests/test_autocast_trace.py checks these sets
# against that header), by the name of the Python function that reaches each op.
# Operators CPU autocast lists the same way are harmless to repeat here.
CUDA_LOWER_PRECISION = frozenset(
    "conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d "
    "conv_transpose3d convolution prelu addmm addmv addr matmul einsum mm mv "
    "linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot lstm_cell "
    "gru_cell rnn_tanh_cell rnn_relu_cell scaled_dot_product_attention".split()
)
CUDA_FP32 = frozenset(
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan "
    "pow __rpow__ softplus layer_norm rms_norm group_norm frobenius_norm nuclear_norm "
    "cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d "
    "hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss "
    "margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss "
    "multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm "
    "logsumexp interpolate upsample upsample_nearest upsample_bilinear".split()
)
# these run in fp32 by being asked for an fp32 result (no separate cast); ``norm`` from
# AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE (fp32_append_dtype) too
CUDA_FP32_SET_DTYPE = frozenset(
    "prod softmax log_softmax cumprod cumsum linalg_vector_norm linalg_matrix_norm "
    "sum norm".split()
)
# AT_FORALL_PROMOTE: run in the widest floating dtype of their inputs (``grid_sample``
# is the Python function that reaches ``grid_sampler``)
CUDA_PROMOTE = frozenset(
    "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler grid_sample "
    "index_put scatter_add tensordot".split()
)
# Python functions whose ATen ops CPU autocast lists under another name (the pads of
# ``F.pad``, the pooling ops behind ``F.max_pool3d``...): a call CUDA's lists leave
# alone must not reach CPU autocast's fp32 kernels for these.
_PY_TO_ATEN = {
    "grid_sample": ("grid_sampler", "grid_sampler_2d", "grid_sampler_3d"),
    "pad": (
        "reflection_pad1d",
        "reflection_pad2d",
        "replication_pad1d",
        "replication_pad2d",
        "replication_pad3d",
    ),
    "_max_pool3d": ("max_pool3d",),
    "max_pool3d_with_indices": ("max_pool3d",),
    "_adaptive_max_pool3d": ("adaptive_max_pool3d",),
    "adaptive_max_pool3d_with_indices": ("adaptive_max_pool3d",),
    "_fractional_max_pool2d": ("fractional_max_pool2d",),
    "_fractional_max_pool3d": ("fractional_max_pool3d",),
    "_max_unpool2d": ("max_unpool2d",),
    "_max_unpool3d": ("max_unpool3d",),
}


def _eligible(t) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and t.is_floating_point()
        and t.dtype != torch.float64
    )


@functools.lru_cache(maxsize=1)
def _cpu_registered() -> frozenset[str]:
    return frozenset(registered_ops("cpu"))


def _cpu_lists(name: str) -> bool:
    """Whether CPU autocast has a kernel for the Python function ``name`` (under its own
    name or the ATen ops it reaches)."""
    names = {name, name.lstrip("_"), *_PY_TO_ATEN.get(name, ())}
    return bool(names & _cpu_registered())


def aten_base(op: str) -> str:
    """``native_layer_norm_backward`` -> ``layer_norm``, ``grid_sampler_2d`` ->
    ``grid_sampler``, ``upsample_bilinear2d`` -> ``upsample_bilinear``: the name
    CUDA's lists give the ATen operator ``op`` (or its backward)."""
    name = op.split("::")[-1].split(".")[0]
    for suffix in ("_backward_data", "_backward", "_forward", "_with_indices", "_aa"):
        name = name.removesuffix(suffix)
    name = name.lstrip("_").removeprefix("native_")
    return re.sub(r"_?[123]d$", "", name)


def cuda_category(op: str) -> str | None:
    """What CUDA's autocast does with the ATen operator (or Python function) ``op``:
    ``"lower_precision"``, ``"float32"`` (its fp32 list, or an fp32 result asked of
    it), ``"promote"`` (the widest input's dtype) or None (not listed: it runs in its
    inputs' dtype)."""
    name = op.split("::")[-1].split(".")[0]
    for n in (name, aten_base(name)):
        if n in CUDA_LOWER_PRECISION or n in ("convolution", "cudnn_convolution"):
            return "lower_precision"
        if n in CUDA_FP32 or n in CUDA_FP32_SET_DTYPE or n.startswith("upsample"):
            return "float32"
        if n in CUDA_PROMOTE:
            return "promote"
    return None


def _widest(tensors) -> torch.dtype | None:
    floats = [t.dtype for t in tensors if _eligible(t)]
    if not floats:
        return None
    out = floats[0]
    for d in floats[1:]:
        out = torch.promote_types(out, d)
    return out


class CudaAutocastRules(TorchFunctionMode):
    """Inside a CPU autocast region, make the decisions CUDA's autocast would make.

    The cost model traces a training step on the CPU (a backward pass on fake CUDA
    tensors needs a GPU), so it is CPU autocast that runs. The two agree on
    convolutions, matrix products and attention, but CUDA also keeps layer and group
    norm, softmax, sums, exponentials, most losses and upsampling in fp32 (ConvNeXt's
    and Swin's layer norms, a segmentation head's upsampling), and CPU autocast has
    rules of its own that CUDA's lists do not have (FFTs, 3-D pooling, reflection pads
    and linear algebra in fp32; ``grid_sample`` in fp32 where CUDA promotes). This mode
    applies CUDA's lists (``CUDA_LOWER_PRECISION``, ``CUDA_FP32``,
    ``CUDA_FP32_SET_DTYPE``, ``CUDA_PROMOTE``) to the torch functions called while CPU
    autocast is on, as CUDA autocast does: floating inputs cast to the autocast dtype,
    to fp32 or to the widest of them and the op run with autocast off, or
    ``dtype=torch.float32`` asked of the op; a function CUDA does not list but CPU
    autocast does runs with autocast off, in its inputs' dtypes, as on CUDA. Ops both
    list alike (convolutions and matrix products low, losses fp32) are left to CPU
    autocast, whose cast cache then casts a weight used twice once, as CUDA's does.
    Outside autocast it does nothing. It works at the level of Python functions
    (``F.layer_norm``, ``Tensor.softmax``, ``F.interpolate``), which CUDA's lists name
    by their ATen ops; the functions a composite such as ``F.multi_head_attention_
    forward`` calls inside it are not seen here (``CudaKernels`` sees its attention and
    softmax)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not torch.is_autocast_enabled("cpu"):
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name == "interpolate":
            mode = kwargs.get("mode", args[3] if len(args) > 3 else "nearest")
            name = "" if mode == "area" else name  # adaptive pooling: in no list
        if name in CUDA_PROMOTE:
            dtype = _widest(tree_leaves((args, kwargs)))
            return _call_cast(func, args, kwargs, dtype)
        if name in CUDA_FP32_SET_DTYPE:
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if kwargs.get("dtype") is None and _eligible(first):
                try:
                    return func(*args, **{**kwargs, "dtype": torch.float32})
                except TypeError:  # dtype given by position: leave the call alone
                    pass
            return func(*args, **kwargs)
        cpu = _cpu_lists(name)
        if name in CUDA_FP32 or name in CUDA_LOWER_PRECISION:
            if cpu:
                return func(*args, **kwargs)  # CPU autocast lists it the same way
            low = torch.get_autocast_dtype("cpu")
            dtype = torch.float32 if name in CUDA_FP32 else low
            return _call_cast(func, args, kwargs, dtype)
        if cpu:  # a CPU-only rule: CUDA runs it in its inputs' dtypes
            return _call_cast(func, args, kwargs, None)
        return func(*args, **kwargs)


def _call_cast(func, args, kwargs, dtype: torch.dtype | None):
    """``func`` with its floating tensors cast to ``dtype`` (None: as they are), run
    with CPU autocast off. Where the CPU has no kernel for 16-bit inputs that CUDA has
    (FFTs in fp16), the op runs on fp32 copies and its results are cast to the dtypes
    CUDA returns (fp16, and complex32 for complex results)."""

    def cast_to(d):
        def cast(t):
            return t.to(d) if _eligible(t) else t

        return cast

    if dtype is not None:
        args, kwargs = tree_map(cast_to(dtype), (args, kwargs))
    with torch.autocast("cpu", enabled=False):
        try:
            return func(*args, **kwargs)
        except (NotImplementedError, RuntimeError):
            low = _widest(tree_leaves((args, kwargs)))
            if dtype is not None or low not in (torch.float16, torch.bfloat16):
                raise
        out = func(*tree_map(cast_to(torch.float32), args), **kwargs)
    half = torch.complex32 if low == torch.float16 else torch.complex64

    def back(t):
        if isinstance(t, torch.Tensor) and t.is_complex():
            return t.to(half)
        return t.to(low) if _eligible(t) else t

    return tree_map(back, out)


# --- the kernels CUDA runs where the CPU runs others
# ----------------------------------------------
#
# A CPU trace of a step dispatches the CPU's kernels. Two kinds differ from CUDA's in
# what the cost model sees: attention (the CPU's math path upcasts 16-bit inputs and
# runs softmax, dropout and two matrix products apart; CUDA runs one fused kernel in
# 16 bits) and recurrent layers (oneDNN's RNN in fp32, a cell per time step under
# 16-bit autocast; cuDNN runs the whole layer stack as one operator). ``CudaKernels``
# puts CUDA's operators in the trace: ``aten::_scaled_dot_product_flash_attention`` or
# ``_efficient_attention`` (whose meta kernels fake tensors run, forward and backward)
# and ``aten::_cudnn_rnn`` forward with ``ampbook::cudnn_rnn_backward`` (below) for its
# backward, which has no meta kernel.

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
    fake tensors: the input, hidden-state and weight gradients (the cell state's,
    for an LSTM, is the hidden state's shape). No kernel computes it here."""
    raise NotImplementedError("ampbook::cudnn_rnn_backward exists for fake tensors")


@_cudnn_rnn_backward.register_fake
def _(x, hx, output, grad_output, reserve, weights, mode, hidden, layers, batch_first,
      bidirectional):  # fmt: skip
    return (
        torch.empty_like(x),
        torch.empty_like(hx),
        [torch.empty_like(w) for w in weights],
    )


def rnn_reserve_numel(x_shape, mode: int, hidden: int, layers: int, dirs: int) -> int:
    """Elements of cuDNN's training reserve (an estimate): per layer, direction and
    time step, the gates' activations and the cell and hidden states."""
    steps_batch = x_shape[0] * x_shape[1]
    return steps_batch * layers * dirs * hidden * (RNN_GATES[mode] + 2)


class _CudnnRNN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg, x, hx, cx, *weights):
        mode, hidden, layers, batch_first, dropout, train, bidir, stride = cfg
        output, hy, cy, _, _ = torch.ops.aten._cudnn_rnn(
            x, list(weights), stride, None, hx, cx, mode, hidden, 0, layers,
            batch_first, dropout, train, bidir, [], None,
        )  # fmt: skip
        dirs = 2 if bidir else 1
        shape = (x.shape[1], x.shape[0]) if batch_first else tuple(x.shape[:2])
        reserve = x.new_empty(rnn_reserve_numel(shape, mode, hidden, layers, dirs))
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
    """``_VF.lstm/gru/rnn_tanh/rnn_relu`` on padded input as cuDNN runs it (CUDA
    autocast casts input, states and weights to the autocast dtype), else None (packed
    sequences, projections: left to the CPU kernels)."""
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
    """``scaled_dot_product_attention`` as CUDA runs it in training: flash attention for
    16-bit inputs without a mask (head dimension a multiple of 8, at most 256), else
    the memory-efficient kernel (fp32, or a mask), as one operator forward and one
    backward. Under autocast the inputs are cast to its dtype first, as CUDA's autocast
    does. Anything else (grouped-query attention, odd head sizes, fp64) takes the
    function PyTorch gives it."""
    original = _ORIGINAL["scaled_dot_product_attention"]
    low = _autocast_low()
    q, k, v = query, key, value
    if low is not None:
        q, k, v = (t.to(low) if _eligible(t) else t for t in (q, k, v))
    d, dv = q.shape[-1], v.shape[-1]
    supported = (
        not enable_gqa
        and q.dim() >= 3
        and k.dim() == q.dim()
        and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and q.dtype == k.dtype == v.dtype
        and d % 8 == 0
        and dv % 8 == 0
        and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
    )
    if not supported:
        with torch.autocast("cpu", enabled=False):
            return original(q, k, v, attn_mask, dropout_p, is_causal, scale=scale)
    batch = q.shape[:-2]

    def four(t):
        return t.reshape(-1, 1, *t.shape[-2:]) if t.dim() != 4 else t

    with torch.autocast("cpu", enabled=False):
        q4, k4, v4 = four(q), four(k), four(v)
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
                bias = bias.to(q.dtype).expand(
                    q4.shape[0], q4.shape[1], q4.shape[2], k4.shape[2]
                )
            grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
            out = torch.ops.aten._scaled_dot_product_efficient_attention(
                q4, k4, v4, bias, grad, dropout_p, is_causal, scale=scale
            )[0]
    return out.reshape(*batch, *out.shape[-2:])


def _softmax_fp32(input, dim=None, _stacklevel=3, dtype=None):
    """``F.softmax`` with CUDA autocast's rule (an fp32 result) inside composites such
    as ``F.multi_head_attention_forward``."""
    if dtype is None and _autocast_low() is not None and _eligible(input):
        dtype = torch.float32
    return _ORIGINAL["softmax"](input, dim, _stacklevel, dtype)


_ORIGINAL = {
    "scaled_dot_product_attention": F.scaled_dot_product_attention,
    "softmax": F.softmax,
}
_PATCHED = {
    "scaled_dot_product_attention": _fused_attention,
    "softmax": _softmax_fp32,
}


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
    run them (see the comment above ``_RNN_MODES``). Called from a model's own
    ``forward`` they are seen by a ``TorchFunctionMode``; called from inside a
    composite function (``nn.MultiheadAttention`` calls ``F.scaled_dot_product_
    attention`` and ``F.softmax`` from ``F.multi_head_attention_forward``), by
    replacing those two names in ``torch.nn.functional`` for the block. For traces on
    fake tensors only: the replacements compute nothing on real ones."""
    for key, fn in _PATCHED.items():
        setattr(F, key, fn)
    try:
        with _KernelMode():
            yield
    finally:
        for key, fn in _ORIGINAL.items():
            setattr(F, key, fn)


# --- op probes
# -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One op call. ``fn(make, dt)`` runs the op; ``make(shape, dtype=float32)`` makes a
    random tensor on the probed device. ``dt`` is the dtype of the *activations* (the
    op's data inputs); parameters (weights, biases, running stats) stay fp32 as a
    model's do under autocast. ``mixed`` marks ops with two activation inputs, also
    probed with one low and one fp32. ``aliases``: other names the docs use for it."""

    name: str
    fn: Callable
    aliases: tuple[str, ...] = ()
    mixed: Callable | None = None


def _pos(make, shape, dt):
    return make(shape, dt).abs() + 0.5


def _probes() -> list[Probe]:
    x4 = (2, 4, 8, 8)
    qkv = (2, 2, 4, 8)  # batch, heads, tokens, head dimension
    ps = [
        Probe(
            "conv2d",
            lambda m, dt: F.conv2d(m(x4, dt), m((4, 4, 3, 3)), m((4,)), padding=1),
        ),
        Probe(
            "conv_transpose2d",
            lambda m, dt: F.conv_transpose2d(m(x4, dt), m((4, 4, 3, 3)), m((4,))),
        ),
        Probe("linear", lambda m, dt: F.linear(m((4, 8), dt), m((8, 8)), m((8,)))),
        Probe(
            "matmul",
            lambda m, dt: torch.matmul(m((4, 8), dt), m((8, 8), dt)),
            ("__matmul__",),
        ),
        Probe("bmm", lambda m, dt: torch.bmm(m((2, 4, 8), dt), m((2, 8, 8), dt))),
        Probe(
            "addmm",
            lambda m, dt: torch.addmm(m((8,), dt), m((4, 8), dt), m((8, 8), dt)),
        ),
        Probe(
            "conv2d_depthwise",
            lambda m, dt: F.conv2d(m(x4, dt), m((4, 1, 3, 3)), m((4,)), groups=4),
            ("conv2d",),
        ),
        Probe(
            "scaled_dot_product_attention",
            lambda m, dt: F.scaled_dot_product_attention(
                m(qkv, dt), m(qkv, dt), m(qkv, dt)
            ),
        ),
        Probe("prelu", lambda m, dt: F.prelu(m(x4, dt), m((4,)))),
        Probe(
            "batch_norm",
            lambda m, dt: F.batch_norm(
                m(x4, dt), m((4,)), m((4,)).abs() + 1, m((4,)), m((4,)), training=True
            ),
        ),
        Probe(
            "layer_norm",
            lambda m, dt: F.layer_norm(m((4, 8), dt), (8,), m((8,)), m((8,))),
        ),
        Probe("group_norm", lambda m, dt: F.group_norm(m(x4, dt), 2, m((4,)), m((4,)))),
        Probe("relu", lambda m, dt: F.relu(m(x4, dt))),
        Probe("gelu", lambda m, dt: F.gelu(m(x4, dt))),
        Probe("silu", lambda m, dt: F.silu(m(x4, dt))),
        Probe("hardswish", lambda m, dt: F.hardswish(m(x4, dt))),
        Probe("hardsigmoid", lambda m, dt: F.hardsigmoid(m(x4, dt))),
        Probe("sigmoid", lambda m, dt: torch.sigmoid(m(x4, dt))),
        Probe("dropout2d", lambda m, dt: F.dropout2d(m(x4, dt), 0.3, training=True)),
        Probe("max_pool2d", lambda m, dt: F.max_pool2d(m(x4, dt), 2)),
        Probe("avg_pool2d", lambda m, dt: F.avg_pool2d(m(x4, dt), 2)),
        Probe(
            "adaptive_avg_pool2d",
            lambda m, dt: F.adaptive_avg_pool2d(m(x4, dt), 1),
        ),
        Probe(
            "upsample_bilinear2d",
            lambda m, dt: F.interpolate(m(x4, dt), scale_factor=2, mode="bilinear"),
            ("interpolate",),
        ),
        Probe(
            "upsample_nearest2d",
            lambda m, dt: F.interpolate(m(x4, dt), scale_factor=2, mode="nearest"),
        ),
        Probe(
            "add",
            lambda m, dt: m(x4, dt) + m(x4, dt),
            mixed=lambda m, dt: m(x4, dt) + m(x4),
        ),
        Probe(
            "mul",
            lambda m, dt: m(x4, dt) * m(x4, dt),
            mixed=lambda m, dt: m(x4, dt) * m(x4),
        ),
        Probe(
            "cat",
            lambda m, dt: torch.cat([m(x4, dt), m(x4, dt)], 1),
            mixed=lambda m, dt: torch.cat([m(x4, dt), m(x4)], 1),
        ),
        Probe(
            "stack",
            lambda m, dt: torch.stack([m(x4, dt), m(x4, dt)]),
            mixed=lambda m, dt: torch.stack([m(x4, dt), m(x4)]),
        ),
        Probe("softmax", lambda m, dt: torch.softmax(m(x4, dt), 1)),
        Probe("log_softmax", lambda m, dt: torch.log_softmax(m(x4, dt), 1)),
        Probe("sum", lambda m, dt: m(x4, dt).sum()),
        Probe("mean", lambda m, dt: m(x4, dt).mean()),
        Probe("prod", lambda m, dt: _pos(m, (8,), dt).prod()),
        Probe("cumsum", lambda m, dt: torch.cumsum(m(x4, dt), 1)),
        Probe("exp", lambda m, dt: torch.exp(m(x4, dt))),
        Probe("log", lambda m, dt: torch.log(_pos(m, x4, dt))),
        Probe("pow", lambda m, dt: torch.pow(m(x4, dt), 2), ("__pow__",)),
        Probe("rsqrt", lambda m, dt: torch.rsqrt(_pos(m, x4, dt))),
        Probe("norm", lambda m, dt: torch.norm(m(x4, dt))),
        Probe(
            "cross_entropy",
            lambda m, dt: F.cross_entropy(m(x4, dt), _labels(m, (2, 8, 8), 4)),
            ("cross_entropy_loss",),
        ),
        Probe(
            "nll_loss",
            lambda m, dt: F.nll_loss(m((4, 5), dt), _labels(m, (4,), 5)),
            ("nll_loss2d",),
        ),
        Probe("mse_loss", lambda m, dt: F.mse_loss(m(x4, dt), m(x4, dt))),
        Probe(
            "binary_cross_entropy_with_logits",
            lambda m, dt: F.binary_cross_entropy_with_logits(
                m(x4, dt), m(x4, dt).sigmoid()
            ),
        ),
    ]
    return ps


def _labels(make, shape, classes):
    # integer targets built from a float tensor so that fake and real modes both work
    return (make(shape).abs() * 1000).long() % classes


PROBES: tuple[Probe, ...] = tuple(_probes())
PROBE_NAMES: tuple[str, ...] = tuple(p.name for p in PROBES)


@dataclass
class ProbeResult:
    op: str
    device: str  # "cpu", "cuda" or "cuda (fake)"
    low_dtype: str  # the autocast dtype
    out_from_fp32: str  # output dtype when the activations come in as fp32
    out_from_low: str  # output dtype when they come in as the low dtype
    out_mixed: str | None  # ops with two activations: one low, one fp32
    observed: (
        str  # "lower_precision", "float32", "input dtype", "promote" or "error: ..."
    )
    documented: str | None
    registered: bool

    def row(self) -> tuple:
        return (
            self.op,
            self.out_from_fp32,
            self.out_from_low,
            self.out_mixed or "-",
            self.observed,
            self.documented or "unlisted",
            "yes" if self.registered else "no",
        )


def classify(
    out_from_fp32: torch.dtype,
    out_from_low: torch.dtype,
    low: torch.dtype,
    out_mixed: torch.dtype | None = None,
) -> str:
    """Name what autocast did from the two (three) output dtypes of a probe."""
    if out_from_fp32 == low:
        return "lower_precision"
    if out_from_low == torch.float32:
        return "float32"
    if out_from_fp32 == torch.float32 and out_from_low == low:
        if out_mixed == torch.float32:
            return "promote"
        return "input dtype"
    return f"other ({dtype_name(out_from_fp32)}, {dtype_name(out_from_low)})"


def _run_probe(
    probe: Probe, device_type: str, dtype: torch.dtype, fake: bool, cuda_rules=False
) -> dict:
    gen = torch.Generator().manual_seed(0)
    rules = CudaAutocastRules if cuda_rules else contextlib.nullcontext

    out = {}
    for label, fn, dt in (
        ("fp32", probe.fn, torch.float32),
        ("low", probe.fn, dtype),
        ("mixed", probe.mixed, dtype),
    ):
        if fn is None:
            out[label] = None
            continue
        with autocast_region(device_type, dtype, fake=fake) as dev, rules():

            def make(shape, dt_=torch.float32, dev=dev):
                t = (
                    torch.randn(shape, generator=gen)
                    if not fake
                    else torch.randn(shape)
                )
                return t.to(device=dev, dtype=dt_)

            out[label] = fn(make, dt).dtype
    return out


def probe_ops(
    device_type: str,
    dtype: torch.dtype | None = None,
    fake: bool | None = None,
    names: tuple[str, ...] | None = None,
    cuda_rules: bool = False,
) -> list[ProbeResult]:
    """Run each probe (all of ``PROBES``, or those in ``names``) under autocast on
    ``device_type`` and report the output dtypes, what they say autocast did, the
    documented category and whether the dispatcher has an autocast kernel for the op.

    ``fake=None`` means: fake CUDA tensors when CUDA is asked for and absent, real
    otherwise. ``cuda_rules`` (CPU only): run the CPU probes under
    ``CudaAutocastRules``, CUDA's decisions in a CPU autocast region."""
    _check_device_type(device_type)
    dtype = dtype or default_dtype(device_type)
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(
            f"autocast's low-precision dtype is float16 or bfloat16, got {dtype}"
        )
    if fake is None:
        fake = device_type == "cuda" and cuda_is_fake()
    chosen = PROBES
    if names is not None:
        unknown = sorted(set(names) - set(PROBE_NAMES))
        if unknown:
            raise ValueError(
                f"no probe named {unknown}; known: {', '.join(PROBE_NAMES)}"
            )
        chosen = tuple(p for p in PROBES if p.name in names)
    registered = set(registered_ops(device_type))
    if cuda_rules and device_type != "cpu":
        raise ValueError("cuda_rules applies CUDA's lists to CPU probes: use 'cpu'")
    label = (
        device_type
        + (" (fake)" if fake else "")
        + (" (CUDA rules)" if cuda_rules else "")
    )
    results = []
    for p in chosen:
        doc = documented_category(p.name, device_type, p.aliases)
        reg = bool({p.name, *p.aliases} & registered)
        try:
            o = _run_probe(p, device_type, dtype, fake, cuda_rules)
            observed = classify(o["fp32"], o["low"], dtype, o["mixed"])
            row = ProbeResult(
                p.name,
                label,
                dtype_name(dtype),
                dtype_name(o["fp32"]),
                dtype_name(o["low"]),
                dtype_name(o["mixed"]) if o["mixed"] else None,
                observed,
                doc,
                reg,
            )
        except Exception as exc:  # an op the device cannot run in this dtype: say so
            row = ProbeResult(
                p.name,
                label,
                dtype_name(dtype),
                "-",
                "-",
                None,
                f"error: {type(exc).__name__}",
                doc,
                reg,
            )
        results.append(row)
    return results


def disagreements(results: list[ProbeResult]) -> list[ProbeResult]:
    """Probes whose observed behaviour differs from the documented list: a listed op
    that did not do what its list says, or an unlisted op that autocast changed."""
    out = []
    for r in results:
        doc = r.documented
        if r.observed.startswith("error"):
            continue
        if doc is None and r.observed in ("lower_precision", "float32"):
            out.append(r)
        elif doc == "promote" and r.observed not in ("promote", "input dtype"):
            out.append(r)
        elif doc in ("lower_precision", "float32") and r.observed != doc:
            out.append(r)
    return out


# --- what a model does: per layer and per op
# -----------------------------------------------


def _dtypes(obj) -> list[str]:
    if isinstance(obj, torch.Tensor):
        return [dtype_name(obj.dtype)] if obj.is_floating_point() else []
    if isinstance(obj, (list, tuple)):
        return [d for o in obj for d in _dtypes(o)]
    if isinstance(obj, dict):
        return [d for o in obj.values() for d in _dtypes(o)]
    return []


def _leaf_modules(model: nn.Module):
    return [(n, m) for n, m in model.named_modules() if not list(m.children())]


def _fake_state(model: nn.Module, device: torch.device) -> dict:
    """The model's parameters and buffers as fake tensors on ``device`` (inside a fake
    mode)."""
    state = {}
    for name, p in model.named_parameters():
        state[name] = torch.empty(p.shape, dtype=p.dtype, device=device).requires_grad_(
            p.requires_grad
        )
    for name, b in model.named_buffers():
        state[name] = torch.empty(b.shape, dtype=b.dtype, device=device)
    return state


def _forward(
    model: nn.Module, x_shape_or_tensor, device_type, dtype, fake, enabled=True
):
    """Run ``model`` forward in an autocast region (or none, ``enabled=False``)."""
    if fake:
        with autocast_region(device_type, dtype, fake=True) as dev:
            x = torch.randn(
                tuple(x_shape_or_tensor.shape)
                if isinstance(x_shape_or_tensor, torch.Tensor)
                else tuple(x_shape_or_tensor),
                device=dev,
            )
            return torch.func.functional_call(model, _fake_state(model, dev), (x,))
    x = x_shape_or_tensor
    if not isinstance(x, torch.Tensor):
        p = next(model.parameters())
        x = torch.randn(tuple(x), device=p.device)
    if not enabled:
        return model(x)
    with autocast_region(device_type, dtype):
        return model(x)


def trace_layers(
    model: nn.Module,
    x,
    device_type: str = "cpu",
    dtype: torch.dtype | None = None,
    fake: bool | None = None,
) -> list[dict]:
    """Input, output and parameter dtypes of every leaf module in one forward under
    autocast.

    ``x`` is an input tensor on the model's device, or an input shape (a random input is
    made). With ``fake`` (default: CUDA without a GPU) the model runs on fake CUDA
    copies of its parameters; the model itself is not touched. Rows: ``{"name", "type",
    "inputs", "output", "params"}`` in call order (a module called twice appears
    twice)."""
    _check_device_type(device_type)
    dtype = dtype or default_dtype(device_type)
    if fake is None:
        fake = device_type == "cuda" and cuda_is_fake()
    rows: list[dict] = []

    def hook(module, args, output, name):
        params = sorted({dtype_name(p.dtype) for p in module.parameters(recurse=False)})
        rows.append(
            {
                "name": name,
                "type": type(module).__name__,
                "inputs": _dtypes(args),
                "output": _dtypes(output),
                "params": params,
            }
        )

    handles = [
        m.register_forward_hook(lambda mod, a, o, n=n: hook(mod, a, o, n))
        for n, m in _leaf_modules(model)
    ]
    try:
        with torch.no_grad():
            _forward(model, x, device_type, dtype, fake)
    finally:
        for h in handles:
            h.remove()
    if (
        fake
    ):  # parameters seen inside functional_call are fake copies of the model's (fp32)
        for r in rows:
            r["params"] = sorted(
                {
                    dtype_name(p.dtype)
                    for p in dict(model.named_modules())[r["name"]].parameters(
                        recurse=False
                    )
                }
            )
    return rows


_SKIP_FUNCS = {
    "__get__",
    "__set__",
    "size",
    "dim",
    "numel",
    "shape",
    "dtype",
    "device",
    "is_floating_point",
    "__len__",
    "__getitem__",
    "__format__",
    "__repr__",
    "requires_grad_",
    "register_hook",
    "untyped_storage",
    "data_ptr",
    "is_leaf",
    "grad_fn",
    "item",
    "__bool__",
    "tolist",
}


def traced_call(func, out) -> str | None:
    """The op name ``trace_ops`` records for a torch function call returning ``out``, or
    None when it skips the call (attribute reads, hooks, calls with no floating output).
    ``low_precision_calls`` and ``gradstats.emulate_fp16_grads`` count calls by this
    rule."""
    name = getattr(func, "__name__", str(func))
    return name if name not in _SKIP_FUNCS and _dtypes(out) else None


class _OpRecorder(TorchFunctionMode):
    def __init__(self, scopes: ModuleScopes, rows: list[dict]):
        super().__init__()
        self.scopes, self.rows = scopes, rows

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = traced_call(func, out)
        scope = self.scopes.innermost()
        if scope is not None and name:
            self.rows.append(
                {
                    "module": scope[1],
                    "op": name,
                    "inputs": _dtypes(list(args) + list(kwargs.values())),
                    "output": _dtypes(out),
                }
            )
        return out


def trace_ops(
    model: nn.Module,
    x,
    device_type: str = "cpu",
    dtype: torch.dtype | None = None,
    fake: bool | None = None,
) -> list[dict]:
    """Every torch function the forward calls (``F.conv2d``, ``torch.cat``, ``y +
    x``...) with the dtypes of its floating inputs and outputs and the innermost module
    type running it. Catches what layer hooks miss: functional ops inside a block's own
    ``forward``."""
    _check_device_type(device_type)
    dtype = dtype or default_dtype(device_type)
    if fake is None:
        fake = device_type == "cuda" and cuda_is_fake()
    rows: list[dict] = []
    with ModuleScopes(model) as scopes, torch.no_grad(), _OpRecorder(scopes, rows):
        _forward(model, x, device_type, dtype, fake)
    return rows


def _traceable_copy(model: nn.Module, device_type: str, fake: bool) -> nn.Module:
    # a real forward in training mode updates batch norm's running statistics: trace a
    # copy
    return model if fake else copy.deepcopy(model)


def low_precision_layers(
    model: nn.Module, x, device_type: str = "cuda", dtype: torch.dtype | None = None
) -> set[str]:
    """Names of the leaf modules whose output is low precision under autocast (default:
    CUDA fp16, on fake tensors without a GPU), in the model's current train/eval mode.
    Their activation gradients are low precision in a real AMP backward; the others' are
    fp32."""
    fake = device_type == "cuda" and cuda_is_fake()
    rows = trace_layers(
        _traceable_copy(model, device_type, fake), x, device_type, dtype
    )
    low = dtype_name(dtype or default_dtype(device_type))
    return {r["name"] for r in rows if r["output"] and set(r["output"]) == {low}}


def low_precision_calls(
    model: nn.Module, x, device_type: str = "cuda", dtype: torch.dtype | None = None
) -> list[tuple[str, bool]]:
    """``(op, output is low precision)`` for every call ``trace_ops`` records in one
    forward under autocast (default: CUDA fp16), in call order: which tensors of the
    forward, and so which gradients of the backward, a real AMP step holds in low
    precision."""
    fake = device_type == "cuda" and cuda_is_fake()
    rows = trace_ops(_traceable_copy(model, device_type, fake), x, device_type, dtype)
    low = dtype_name(dtype or default_dtype(device_type))
    return [(r["op"], set(r["output"]) == {low}) for r in rows]


def summarize_by_type(rows: list[dict], key: str = "type") -> list[tuple]:
    """Distinct (type, input dtypes, output dtypes) combinations with their counts, from
    ``trace_layers`` rows (``key="type"``) or ``trace_ops`` rows (``key="op"``)."""
    counts: dict[tuple, int] = {}
    for r in rows:
        extra = (r["module"],) if key == "op" else ()
        k = (
            r[key],
            *extra,
            ", ".join(sorted(set(r["inputs"]))) or "-",
            ", ".join(r["output"]),
        )
        counts[k] = counts.get(k, 0) + 1
    return [(*k, n) for k, n in sorted(counts.items())]


# --- the casts autocast makes
# --------------------------------------------------------------


@dataclass
class Cast:
    shape: tuple
    src: str
    dst: str
    is_parameter: bool


@dataclass
class CastCounter(TorchDispatchMode):
    """Counts dtype conversions (``aten._to_copy`` with a dtype) inside the ``with``
    block: the casts autocast makes, and any ``.to(dtype)`` of your own. Pass ``model=``
    to mark the casts of its parameters."""

    model: nn.Module | None = None
    casts: list[Cast] = field(default_factory=list)

    def __post_init__(self):
        super().__init__()
        self._params = set()
        if self.model is not None:
            self._params = {p.data_ptr() for p in self.model.parameters()}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            src = args[0]
            dst = kwargs.get("dtype")
            if dst is not None and dst != src.dtype:
                self.casts.append(
                    Cast(
                        tuple(src.shape),
                        dtype_name(src.dtype),
                        dtype_name(dst),
                        src.data_ptr() in self._params,
                    )
                )
        return func(*args, **kwargs)

    @property
    def parameter_casts(self) -> int:
        return sum(c.is_parameter for c in self.casts)

    @property
    def other_casts(self) -> int:
        return sum(not c.is_parameter for c in self.casts)

    @property
    def parameter_cast_bytes(self) -> int:
        """Bytes of the low-precision copies made of parameters."""
        size = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
        total = 0
        for c in self.casts:
            if c.is_parameter:
                n = 1
                for s in c.shape:
                    n *= s
                total += n * size.get(c.dst, 4)
        return total


def count_casts(
    model: nn.Module,
    x: torch.Tensor,
    device_type: str,
    dtype: torch.dtype | None = None,
    forwards: int = 1,
    cache_enabled: bool = True,
    one_region: bool = True,
) -> CastCounter:
    """Run ``forwards`` forward passes under autocast and count the casts.
    ``one_region``: all passes inside one autocast region (the cast cache lives as long
    as the region), else one region per pass. Gradients are enabled, as in training: the
    cache only keeps casts of leaf tensors that require grad (the parameters)."""
    dtype = dtype or default_dtype(device_type)
    counter = CastCounter(model=model)
    with counter:
        if one_region:
            with autocast_region(device_type, dtype, cache_enabled=cache_enabled):
                for _ in range(forwards):
                    model(x)
        else:
            for _ in range(forwards):
                with autocast_region(device_type, dtype, cache_enabled=cache_enabled):
                    model(x)
    return counter


def parameter_and_grad_dtypes(model: nn.Module) -> dict[str, dict[str, int]]:
    """``{"params": {dtype: count}, "grads": {dtype: count}}`` of a model's
    parameters."""
    out: dict[str, dict[str, int]] = {"params": {}, "grads": {}}
    for p in model.parameters():
        out["params"][dtype_name(p.dtype)] = (
            out["params"].get(dtype_name(p.dtype), 0) + 1
        )
        g = "none" if p.grad is None else dtype_name(p.grad.dtype)
        out["grads"][g] = out["grads"].get(g, 0) + 1
    return out


class _BackwardOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts: dict[tuple[str, str], int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name.endswith("_backward") or name == "_to_copy":
            outs = out if isinstance(out, (tuple, list)) else (out,)
            for o in outs:
                if isinstance(o, torch.Tensor) and o.is_floating_point():
                    key = (name, dtype_name(o.dtype))
                    self.counts[key] = self.counts.get(key, 0) + 1
        return out


def backward_dtypes(
    model: nn.Module,
    x: torch.Tensor,
    target: torch.Tensor,
    device_type: str,
    dtype: torch.dtype | None = None,
    loss_fn: Callable | None = None,
) -> dict[tuple[str, str], int]:
    """Run one forward under autocast and the backward under a ``TorchDispatchMode``
    that records the output dtypes of the backward kernels (ops named ``*_backward``)
    and of the dtype conversions (``_to_copy``): ``{(op, dtype): count}``. Shows that
    the gradients computed by low-precision ops are low precision, and that the casts'
    backward converts the weight gradients to fp32 before they reach ``.grad``. Clears
    the gradients after."""
    dtype = dtype or default_dtype(device_type)
    loss_fn = loss_fn or F.cross_entropy
    model.zero_grad(set_to_none=True)
    with autocast_region(device_type, dtype):
        loss = loss_fn(model(x), target)
    rec = _BackwardOps()
    with rec:
        loss.backward()
    model.zero_grad(set_to_none=True)
    return dict(sorted(rec.counts.items()))


# --- what chapter 4 shows
# -----------------------------------------------------------------

PROBE_HEADERS = [  # short: the table must fit a 1000 px page
    "op",
    "CPU ran",
    "CPU docs",
    "CUDA ran",
    "CUDA docs",
]


def probe_rows(probes: dict[str, dict[str, ProbeResult]]) -> list[tuple]:
    """One row per probed op: observed and documented behaviour on CPU and CUDA, from
    ``{device_type: {op: ProbeResult}}``."""
    return [
        (
            op,
            probes["cpu"][op].observed,
            probes["cpu"][op].documented or "unlisted",
            probes["cuda"][op].observed,
            probes["cuda"][op].documented or "unlisted",
        )
        for op in PROBE_NAMES
    ]


def probe_verdict(probes: dict[str, dict[str, ProbeResult]]) -> str:
    """One paragraph of facts: where CPU and CUDA autocast differ among the probed ops,
    and where the observed behaviour is not what the documentation lists."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for op in PROBE_NAMES:
        a, b = probes["cpu"][op].observed, probes["cuda"][op].observed
        if a != b:
            pairs.setdefault((a, b), []).append(op)
    differ = (
        "; ".join(
            f"{', '.join(ops)} ({a} on CPU, {b} on CUDA)"
            for (a, b), ops in pairs.items()
        )
        or "none"
    )
    undocumented = []
    for d in DEVICE_TYPES:
        bad = disagreements(list(probes[d].values()))
        items = ", ".join(
            f"{r.op} ({r.observed}, documented {r.documented or 'unlisted'})"
            for r in bad
        )
        undocumented.append(f"{d.upper()}: {items or 'none'}")
    return (
        f"Ops CPU and CUDA autocast treat differently: {differ}. Observed behaviour "
        f"the documented lists do not predict: {'; '.join(undocumented)}."
    )


def layer_rows(model: nn.Module, x: torch.Tensor, device: torch.device) -> list[tuple]:
    """``(device, layer type, input dtypes, output dtype, calls)`` of one forward under
    autocast on the CPU and on CUDA (on fake CUDA tensors without a GPU)."""
    rows = []
    for d in DEVICE_TYPES:
        if d == "cuda" and device.type != "cuda":
            found, label = trace_layers(model, tuple(x.shape), "cuda"), "cuda (fake)"
        else:
            dev = torch.device("cpu") if d == "cpu" else device
            found, label = trace_layers(model.to(dev), x.to(dev), d), d
        rows += [(label, *r) for r in summarize_by_type(found)]
    model.cpu()
    return rows


def dtypes_after_step(
    model: nn.Module,
    x: torch.Tensor,
    target: torch.Tensor,
    device_type: str,
    dtype: torch.dtype | None,
) -> dict[str, dict[str, int]]:
    """``parameter_and_grad_dtypes`` after one forward (under autocast in ``dtype``, or
    without autocast for ``None``) and backward of ``model`` on (``x``, ``target``)."""
    with torch.autocast(
        device_type, dtype=dtype or torch.float32, enabled=dtype is not None
    ):
        loss = F.cross_entropy(model(x).float(), target, ignore_index=255)
    loss.backward()
    return parameter_and_grad_dtypes(model)


def dtype_counts(counts: dict[str, int]) -> str:
    """``{"float32": 97}`` as ``"float32: 97"``."""
    return ", ".join(f"{k}: {v}" for k, v in counts.items())


class SameLayerTwice(nn.Module):
    """One ``Linear`` applied twice in a forward: autocast's cast cache at work."""

    def __init__(self, features: int = 64):
        super().__init__()
        self.lin = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.lin(x))
