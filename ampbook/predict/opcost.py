"""What one ATen operator of a training step costs, as ``steptrace`` dispatches it:

* **FLOPs**, two per multiply-add, exact for convolutions (padding included; backward
  once for the input gradient, never for the first layer's, and once for the weight
  gradient), matrix products and fused attention (``4 B H S_q S_k D`` forward, ``10 B H
  S_q S_k D`` backward, as ``torch.utils.flop_counter`` counts it); everything else a
  rough count per element. An operator in none of the tables is *unmodelled*: the
  trace names it instead of counting its FLOPs as free.
* **Bytes**: every tensor an operator reads and writes, once per operator (views and
  allocations move nothing): no operator finds its input in cache and no two are
  fused, which is what eager PyTorch does with tensors of megabytes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.utils._pytree import tree_leaves

from ampbook.core.precision import torch_name as _dtype_name
from ampbook.measure.cuda_kernels import RNN_GATES

# Fused attention (``scaled_dot_product_attention``'s kernels; FLOPs: ``_sdpa_flops``)
_SDPA_FORWARD = {
    f"_scaled_dot_product_{k}_attention" for k in ("flash", "efficient", "cudnn")
} | {"_scaled_dot_product_flash_attention_for_cpu"}
_SDPA_BACKWARD = {name + "_backward" for name in _SDPA_FORWARD}
# Operators whose FLOPs go to tensor cores: convolutions, matrix products, fused
# attention and cuDNN's recurrent layers (``cuda_kernels.CudaKernels``).
_MMA_OPS = {
    *"convolution convolution_backward mm addmm bmm baddbmm".split(),
    *_SDPA_FORWARD,
    *_SDPA_BACKWARD,
    "_cudnn_rnn",
    "_cudnn_rnn_backward",
}
# Operator classes, for kernel efficiencies (``ampbook.predict.calibrate``); matmul
# includes attention and recurrent layers, elementwise everything not in another.
OP_CLASSES = ("conv", "matmul", "norm", "elementwise")
# Dtypes the roofline has peaks for (an operator in another is unmodelled).
MODELLED_DTYPES = ("float32", "float16", "bfloat16", "none")
# Operators that only allocate or describe memory: no kernel, no bytes (the in-place
# views change a tensor's shape or strides, not its data).
_NO_DATA_OPS = set(
    "empty empty_like empty_strided new_empty new_empty_strided _unsafe_view "
    "_reshape_alias lift_fresh set_ resize_ sym_size sym_stride sym_numel "
    "sym_storage_offset is_same_size as_strided_ detach_ squeeze_ unsqueeze_ "
    "transpose_ t_".split()
)
# In-place operators that overwrite their first argument without reading it.
_WRITE_ONLY_OPS = set(
    "bernoulli_ fill_ zero_ uniform_ normal_ random_ exponential_ copy_".split()
)
# Rough FLOPs per element of vector operators (per output element; per input element
# for backward operators, norms and reductions: ``_PER_INPUT``); 0 for data movement.
_FLOPS_PER_ELEMENT = {
    0: "_to_copy clone cat stack copy_ slice_backward select_backward "
    "as_strided_scatter slice_scatter select_scatter zeros zeros_like ones ones_like "
    "full full_like new_zeros new_ones new_full fill_ zero_ scalar_tensor arange "
    "constant_pad_nd index index_select gather scatter scatter_ masked_select roll "
    "repeat embedding flip _unsafe_index linspace unsafe_split unsafe_split_with_sizes "
    "split_with_sizes_copy",
    1: "add add_ sub sub_ rsub mul mul_ div div_ neg abs relu relu_ threshold "
    "threshold_backward where clamp clamp_ clamp_min clamp_min_ clamp_max hardtanh "
    "hardtanh_ hardtanh_backward leaky_relu leaky_relu_ leaky_relu_backward "
    "masked_fill masked_fill_ maximum minimum eq ne lt le gt ge logical_not bernoulli_ "
    "native_dropout native_dropout_backward sign sgn fmod remainder lerp reciprocal "
    "floor ceil round trunc sqrt rsqrt square pow addcmul addcdiv addcmul_ addcdiv_ "
    "index_add index_put index_put_ embedding_dense_backward upsample_nearest2d "
    "upsample_nearest2d_backward _adaptive_avg_pool2d _adaptive_avg_pool2d_backward "
    "max_pool2d_with_indices_backward avg_pool2d_backward nll_loss_forward "
    "nll_loss_backward nll_loss2d_forward nll_loss2d_backward "
    "sum mean amax amin max min prod cumsum argmax argmin any all "
    # 3-D pooling and upsampling (video)
    "max_pool3d_with_indices_backward avg_pool3d_backward _adaptive_avg_pool3d "
    "_adaptive_avg_pool3d_backward upsample_nearest3d upsample_nearest3d_backward",
    2: "sigmoid_backward tanh_backward hardsigmoid_backward",
    3: "_log_softmax_backward_data _softmax_backward_data mse_loss mse_loss_backward "
    "var_mean var std linalg_vector_norm norm",
    4: "exp log sigmoid tanh hardsigmoid hardsigmoid_ hardswish hardswish_ silu silu_ "
    "elu elu_ sigmoid_ tanh_",
    5: "native_batch_norm cudnn_batch_norm _native_batch_norm_legit "
    "_native_batch_norm_legit_functional _native_batch_norm_legit_no_training "
    "native_layer_norm native_group_norm _log_softmax _softmax _safe_softmax "
    "hardswish_backward silu_backward elu_backward",
    8: "native_batch_norm_backward cudnn_batch_norm_backward "
    "native_layer_norm_backward native_group_norm_backward gelu gelu_ erf "
    "upsample_bilinear2d upsample_bilinear2d_backward binary_cross_entropy_with_logits",
    # sampling by a grid (bilinear: four neighbours weighted per output)
    10: "gelu_backward grid_sampler_2d grid_sampler_2d_backward",
    16: "upsample_trilinear3d upsample_trilinear3d_backward",
    20: "grid_sampler_3d grid_sampler_3d_backward",
}
_VECTOR_FLOPS_PER_ELEMENT = {
    name: n for n, names in _FLOPS_PER_ELEMENT.items() for name in names.split()
}
# Pooling: FLOPs per output element are the window's size.
_POOLS = set(
    "max_pool2d_with_indices max_pool2d avg_pool2d max_pool3d_with_indices max_pool3d "
    "avg_pool3d".split()
)
# Operators whose FLOPs scale with their (largest) input rather than their output.
_PER_INPUT = set(
    "sum mean amax amin max min prod var_mean var std linalg_vector_norm norm argmax "
    "argmin any all _adaptive_avg_pool2d _adaptive_avg_pool3d native_layer_norm "
    "native_group_norm".split()
)


def op_class(name: str) -> str:
    """The class of the ATen operator ``name`` (``OP_CLASSES``)."""
    if "convolution" in name or re.match(r"_?(slow_|thnn_)?conv", name):
        return "conv"
    if name in _MMA_OPS:
        return "matmul"
    if any(k in name for k in ("batch_norm", "layer_norm", "group_norm", "rms_norm")):
        return "norm"
    return "elementwise"


def op_is_modelled(name: str) -> bool:
    """Whether the cost model knows the FLOPs of the ATen operator ``name``
    (``"addmm"``: no namespace or overload)."""
    return name in _MMA_OPS or name in _VECTOR_FLOPS_PER_ELEMENT or name in _POOLS


def conv_flops(
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    out_shape: Sequence[int],
    transposed: bool = False,
) -> int:
    """FLOPs of a convolution, grouped or not, any number of spatial dims: ``w_shape``
    (as PyTorch stores it) without its first dim is the multiply-adds per *output*
    element, or per *input* element for a transposed one."""
    if len(x_shape) != len(w_shape) or len(out_shape) != len(w_shape):
        raise ValueError(
            f"input {tuple(x_shape)}, weight {tuple(w_shape)} and output "
            f"{tuple(out_shape)} must have the same number of dimensions"
        )
    per_element = math.prod(w_shape[1:])
    elements = math.prod(x_shape) if transposed else math.prod(out_shape)
    return 2 * elements * per_element


@dataclass
class OpCost:
    """One ATen operator of a traced step."""

    phase: str  # "forward" or "backward"
    scope: str  # qualified name of the innermost module (or LOSS, OUTSIDE...)
    scope_type: str  # its class name
    op: str  # ATen operator, e.g. "convolution"
    dtype: str  # dtype it computes in: a convolution's input, else its output
    # ("float32", "float16", "bfloat16"; "none" for integer ops)
    mma_flops: float  # FLOPs of convolutions / matrix products (tensor-core work)
    other_flops: float  # rough FLOPs of vector work
    read_bytes: float
    write_bytes: float
    # False for an operator whose FLOPs are unknown (``op_is_modelled``) or whose dtype
    # has no peak (``MODELLED_DTYPES``): its bytes count, its FLOPs do not
    modelled: bool = True
    kernels: int = 1  # GPU kernels it launches (cuDNN's RNNs: ``_rnn_kernels``)

    @property
    def op_class(self) -> str:
        return op_class(self.op)

    @property
    def why_unmodelled(self) -> str | None:
        if self.modelled:
            return None
        if self.dtype not in MODELLED_DTYPES:
            return f"dtype {self.dtype}"
        return "FLOPs unknown"

    @property
    def flops(self) -> float:
        return self.mma_flops + self.other_flops

    @property
    def bytes(self) -> float:
        return self.read_bytes + self.write_bytes


def _tensors(value) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# Where a cuDNN RNN call holds its mode, hidden size, layers, batch_first and
# bidirectional (aten::_cudnn_rnn's arguments; ampbook::cudnn_rnn_backward's).
_RNN_ARGS = {"_cudnn_rnn": (6, 7, 9, 10, 13), "_cudnn_rnn_backward": (6, 7, 8, 9, 10)}


def _rnn_args(name: str, args) -> tuple:
    return (args[0], *(args[i] for i in _RNN_ARGS[name]))


def _rnn_flops(x, mode: int, hidden: int, layers: int, batch_first: bool, bidir: bool):
    """(mma, other FLOPs) of a cuDNN RNN forward: per layer, direction, time step and
    sample ``2 x gates x hidden x (input + hidden)``, and five per gate element."""
    steps, batch = (x.shape[1], x.shape[0]) if batch_first else tuple(x.shape[:2])
    feat, h, dirs, g = x.shape[-1], hidden, 2 if bidir else 1, RNN_GATES[mode]
    mma = sum(
        dirs * 2 * steps * batch * g * h * ((feat if i == 0 else h * dirs) + h)
        for i in range(layers)
    )
    return float(mma), float(5 * steps * batch * g * h * layers * dirs)


def _rnn_kernels(x, batch_first: bool, layers: int, bidir: bool, backward: bool) -> int:
    """Kernels cuDNN's RNN launches (an estimate): per layer and direction one input
    product, then two per time step; twice as many backward."""
    steps = x.shape[1] if batch_first else x.shape[0]
    return layers * (2 if bidir else 1) * (1 + 2 * steps) * (2 if backward else 1)


def _sdpa_flops(backward: bool, args) -> tuple[float, float]:
    """(mma, other FLOPs) of fused attention on ``B x H x S x D`` inputs: ``Q K^T`` and
    ``P V`` forward; backward the scores again, ``dP``, ``dV``, ``dQ``, ``dK``; about
    five vector FLOPs per score (softmax)."""
    q, k, v = args[1:4] if backward else args[0:3]
    b, h, s_q, d = q.shape
    s_k, d_v = k.shape[-2], v.shape[-1]
    scores = b * h * s_q * s_k
    if backward:
        return float(2 * scores * (3 * d + 2 * d_v)), float(5 * scores)
    return float(2 * scores * (d + d_v)), float(5 * scores)


def _op_flops(name: str, func, args, kwargs, out) -> tuple[float, float]:
    """(mma FLOPs, other FLOPs) of one operator."""
    if name == "convolution":
        mma = conv_flops(args[0].shape, args[1].shape, out.shape, bool(args[6]))
        other = out.numel() if args[2] is not None else 0  # bias
        return float(mma), float(other)
    if name == "convolution_backward":
        grad_out, x, w = args[0], args[1], args[2]
        transposed, mask = bool(args[7]), args[10]
        fwd = conv_flops(x.shape, w.shape, grad_out.shape, transposed)
        mma = fwd * (int(bool(mask[0])) + int(bool(mask[1])))
        other = grad_out.numel() if mask[2] else 0  # bias gradient: a sum over grad_out
        return float(mma), float(other)
    if name in ("mm", "addmm", "bmm", "baddbmm"):  # addmm, baddbmm: bias first
        biased = name.startswith(("addmm", "baddbmm"))
        a, b = args[1:3] if biased else args[0:2]
        elements = math.prod(a.shape[:-1]) * b.shape[-1]
        return float(2 * elements * a.shape[-1]), float(elements if biased else 0)
    if name in _SDPA_FORWARD or name in _SDPA_BACKWARD:
        return _sdpa_flops(name in _SDPA_BACKWARD, args)
    if name in _RNN_ARGS:  # backward: input and hidden-state, and weight gradients
        mma, other = _rnn_flops(*_rnn_args(name, args))
        return (2 * mma if name.endswith("_backward") else mma), other
    outs = _tensors(out)
    if name in _POOLS:
        dims = 3 if "3d" in name else 2
        kernel = args[1] if len(args) > 1 else kwargs.get("kernel_size")
        kernel = list(kernel) if isinstance(kernel, (list, tuple)) else [kernel]
        kernel = kernel * dims if len(kernel) == 1 else kernel
        return 0.0, float(outs[0].numel() * math.prod(kernel))
    per = _VECTOR_FLOPS_PER_ELEMENT.get(name, 0)  # unmodelled: reported, not counted
    if name.endswith("_backward") or "batch_norm" in name or name in _PER_INPUT:
        elements = max((t.numel() for t in _tensors(args)), default=0)
    else:
        elements = max((t.numel() for t in outs), default=0)
    return 0.0, float(per * elements)


def _op_bytes(func, args, kwargs, out) -> tuple[float, float] | None:
    """(read bytes, written bytes), or None for an operator that moves no data."""
    name = func._schema.name.split("::")[-1]
    if name in _NO_DATA_OPS:
        return None
    schema = func._schema
    returns_alias = [r.alias_info is not None for r in schema.returns]
    mutates = [
        a.alias_info is not None and a.alias_info.is_write for a in schema.arguments
    ]
    if schema.returns and all(returns_alias) and not any(mutates):
        return None  # a view: shares its input's memory
    if not _tensors(out) and not any(mutates):
        return None  # a query of metadata (``prim::device``...): no kernel
    write_only = name in _WRITE_ONLY_OPS
    seen: set[int] = set()
    read = written = 0
    for i, arg in enumerate(schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        for t in _tensors(value):
            if id(t) in seen:
                continue
            seen.add(id(t))
            if mutates[i]:
                written += _nbytes(t)
                if not (write_only and i == 0):
                    read += _nbytes(t)
            else:
                read += _nbytes(t)
    for t in _tensors(out):
        if id(t) not in seen:
            seen.add(id(t))
            written += _nbytes(t)
    if read == 0 and written == 0:
        return None
    return float(read), float(written)


def op_cost(
    func, args, kwargs, out, phase: str, where: Callable[[], tuple[str, str]]
) -> OpCost | None:
    """The cost of one dispatched ATen operator, or None for one that moves no data;
    ``where()`` gives the (scope, scope type) it is attributed to."""
    moved = _op_bytes(func, args, kwargs, out)
    if moved is None:
        return None
    name = func._schema.name.split("::")[-1]
    if func.namespace == "ampbook":  # stands for the ATen operator CUDA runs
        name = "_" + name
    known = func.namespace in ("aten", "ampbook") and op_is_modelled(name)
    # The dtype an operator computes in: a convolution's input dtype, else its output's
    ts = _tensors(args) if name in _MMA_OPS else _tensors((out, args, kwargs))
    floats = [t for t in ts if t.is_floating_point() or t.is_complex()]
    dtype = _dtype_name(floats[0].dtype) if floats else "none"
    modelled = known and dtype in MODELLED_DTYPES
    if not known:
        name = name if func.namespace == "aten" else func._schema.name
    mma, other = _op_flops(name, func, args, kwargs, out) if modelled else (0.0, 0.0)
    if name not in _MMA_OPS:
        mma, other = 0.0, other + mma
    kernels = 1
    if name in _RNN_ARGS:
        x, _, _, layers, bf, bidir = _rnn_args(name, args)
        kernels = _rnn_kernels(x, bf, layers, bidir, name.endswith("_backward"))
    scope, scope_type = where()
    return OpCost(
        phase, scope, scope_type, name, dtype, mma, other, *moved, modelled, kernels
    )
