"""What one ATen operator of a training step costs: FLOPs and bytes moved.

``op_cost`` prices one operator as ``ampbook.predict.steptrace`` dispatches it (real
shapes and dtypes, on fake tensors):

* **FLOPs.** Convolutions and matrix products (the work tensor cores do) are counted
  exactly, two FLOPs per multiply-add, padding included: a convolution producing ``N x
  C_out x H_out x W_out`` from ``C_in / groups`` input channels with a ``k_h x k_w``
  kernel costs ``2 N C_out H_out W_out (C_in/groups) k_h k_w``; a transposed convolution
  ``2 N C_in H_in W_in (C_out/groups) k_h k_w``. In the backward pass a convolution
  costs the forward's FLOPs once for the input gradient (only when the input needs one:
  never for the first layer, whose input is the image) and once for the weight gradient.
  A matrix product ``M x K`` by ``K x N`` costs ``2 M K N``; fused attention
  (``scaled_dot_product_attention``'s kernels) ``4 B H S_q S_k D`` forward and ``10 B H
  S_q S_k D`` backward (it recomputes the scores), as ``torch.utils.flop_counter``
  counts it. Everything else (batch and layer norm, ReLU, GELU, hardswish, pooling,
  additions, dropout...) gets a rough count per element (``_VECTOR_FLOPS_PER_ELEMENT``);
  those never come close to being compute-bound. An operator in none of the tables is
  *unmodelled*: its bytes are counted, its FLOPs are unknown, and
  ``StepTrace.unmodelled`` and ``Prediction.unmodelled`` name it with its share of the
  bytes and of the predicted time instead of counting it as free.
* **Bytes moved.** Every tensor an operator reads and every tensor it writes, at its
  dtype's size, once per operator (``inputs + weights + outputs``). Views, reshapes and
  allocations move nothing and are skipped; an in-place operator reads and writes its
  tensor. This assumes no operator finds its input in cache and no two operators are
  fused, which is what eager PyTorch does with tensors of megabytes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch
from torch.utils._pytree import tree_leaves

from ampbook.core.precision import torch_name as _dtype_name

# Fused attention (``scaled_dot_product_attention``'s kernels): two matrix products
# forward, five backward (``_sdpa_flops``), as ``torch.utils.flop_counter`` counts them.
_SDPA_FORWARD = {
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
}
_SDPA_BACKWARD = {name + "_backward" for name in _SDPA_FORWARD}
# cuDNN's recurrent layers (``cuda_kernels.CudaKernels`` puts them in a trace):
# the input and recurrent matrix products of every layer, direction and time step.
_RNN_OPS = {"_cudnn_rnn", "_cudnn_rnn_backward"}
# Operators whose FLOPs go to tensor cores (matrix units): convolutions, matrix products
# and fused attention.
_MMA_OPS = {
    "convolution",
    "convolution_backward",
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    *_SDPA_FORWARD,
    *_SDPA_BACKWARD,
    *_RNN_OPS,
}
# Operator classes, for kernel efficiencies (``ampbook.predict.calibrate``):
# convolutions, matrix products (attention and recurrent layers among them),
# normalisation layers, and everything else (element-wise, pooling, casts, losses, data
# movement).
OP_CLASSES = ("conv", "matmul", "norm", "elementwise")
# Dtypes the roofline has peaks for; an operator computing in another (complex, fp64)
# is reported as unmodelled with its share, its FLOPs left out.
MODELLED_DTYPES = ("float32", "float16", "bfloat16", "none")
# Operators that only allocate or describe memory: no kernel, no bytes.
_NO_DATA_OPS = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "_unsafe_view",
    "_reshape_alias",
    "lift_fresh",
    "set_",
    "resize_",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "is_same_size",
    # in-place views: they change a tensor's shape or strides, not its data
    "as_strided_",
    "detach_",
    "squeeze_",
    "unsqueeze_",
    "transpose_",
    "t_",
}
# In-place operators that overwrite their first argument without reading it.
_WRITE_ONLY_OPS = {
    "bernoulli_",
    "fill_",
    "zero_",
    "uniform_",
    "normal_",
    "random_",
    "exponential_",
    "copy_",
}
# Rough FLOPs per element for vector operators: per output element, per input element
# for backward operators, norms and reductions (``_PER_INPUT``). None of these comes
# near a GPU's vector peak; the figures only keep the model honest about them.
# Operators that only move data count 0. An operator in none of these tables is
# *unmodelled*: its bytes are counted (they follow from its arguments) but its FLOPs
# are unknown, and the trace names it (``StepTrace.unmodelled``) instead of counting it
# as free.
_DATA_MOVEMENT = (
    "_to_copy clone cat stack copy_ slice_backward select_backward "
    "as_strided_scatter slice_scatter select_scatter zeros zeros_like ones ones_like "
    "full full_like new_zeros new_ones new_full fill_ zero_ scalar_tensor arange "
    "constant_pad_nd index index_select gather scatter scatter_ masked_select roll "
    "repeat embedding flip _unsafe_index linspace unsafe_split unsafe_split_with_sizes "
    "split_with_sizes_copy"
).split()
_ELEMENTWISE = (
    "add add_ sub sub_ rsub mul mul_ div div_ neg abs relu relu_ threshold "
    "threshold_backward where clamp clamp_ clamp_min clamp_min_ clamp_max hardtanh "
    "hardtanh_ hardtanh_backward leaky_relu leaky_relu_ leaky_relu_backward "
    "masked_fill masked_fill_ maximum minimum eq ne lt le gt ge logical_not bernoulli_ "
    "native_dropout native_dropout_backward sign sgn fmod remainder lerp reciprocal "
    "floor ceil round trunc "
    "sqrt rsqrt square pow addcmul addcdiv addcmul_ addcdiv_ index_add "
    "index_put index_put_ embedding_dense_backward upsample_nearest2d "
    "upsample_nearest2d_backward _adaptive_avg_pool2d _adaptive_avg_pool2d_backward "
    "max_pool2d_with_indices_backward avg_pool2d_backward nll_loss_forward "
    "nll_loss_backward nll_loss2d_forward nll_loss2d_backward"
).split()
_VECTOR_FLOPS_PER_ELEMENT = {
    **dict.fromkeys(_DATA_MOVEMENT, 0),
    **dict.fromkeys(_ELEMENTWISE, 1),
    **dict.fromkeys(("native_batch_norm", "cudnn_batch_norm"), 5),
    **dict.fromkeys(
        ("_native_batch_norm_legit", "_native_batch_norm_legit_functional"), 5
    ),
    **dict.fromkeys(("_native_batch_norm_legit_no_training",), 5),
    **dict.fromkeys(("native_batch_norm_backward", "cudnn_batch_norm_backward"), 8),
    **dict.fromkeys(("native_layer_norm", "native_group_norm"), 5),
    **dict.fromkeys(("native_layer_norm_backward", "native_group_norm_backward"), 8),
    **dict.fromkeys(("_log_softmax", "_softmax"), 5),
    **dict.fromkeys(("_log_softmax_backward_data", "_softmax_backward_data"), 3),
    **dict.fromkeys(
        ("exp", "log", "sigmoid", "tanh", "hardsigmoid", "hardsigmoid_"), 4
    ),
    **dict.fromkeys(("sigmoid_backward", "tanh_backward", "hardsigmoid_backward"), 2),
    **dict.fromkeys(("hardswish", "hardswish_", "silu", "silu_", "elu", "elu_"), 4),
    **dict.fromkeys(("hardswish_backward", "silu_backward", "elu_backward"), 5),
    **dict.fromkeys(("gelu", "gelu_", "erf"), 8),
    **dict.fromkeys(("gelu_backward",), 10),
    **dict.fromkeys(("upsample_bilinear2d", "upsample_bilinear2d_backward"), 8),
    **dict.fromkeys(("mse_loss", "mse_loss_backward"), 3),
    **dict.fromkeys(("binary_cross_entropy_with_logits",), 8),
    **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min", "prod"), 1),
    **dict.fromkeys(("var_mean", "var", "std", "linalg_vector_norm", "norm"), 3),
    **dict.fromkeys(("cumsum", "argmax", "argmin", "any", "all"), 1),
    # 3-D pooling and upsampling (video), in-place activations, attention's masked
    # softmax, sampling by a grid (bilinear: four neighbours weighted per output)
    **dict.fromkeys(
        (
            "max_pool3d_with_indices_backward",
            "avg_pool3d_backward",
            "_adaptive_avg_pool3d",
            "_adaptive_avg_pool3d_backward",
            "upsample_nearest3d",
            "upsample_nearest3d_backward",
        ),
        1,
    ),  # fmt: skip
    **dict.fromkeys(("upsample_trilinear3d", "upsample_trilinear3d_backward"), 16),
    **dict.fromkeys(("sigmoid_", "tanh_"), 4),
    **dict.fromkeys(("_safe_softmax",), 5),
    **dict.fromkeys(("grid_sampler_2d", "grid_sampler_2d_backward"), 10),
    **dict.fromkeys(("grid_sampler_3d", "grid_sampler_3d_backward"), 20),
}
# Pooling: FLOPs per output element are the window's size.
_POOLS = {
    "max_pool2d_with_indices",
    "max_pool2d",
    "avg_pool2d",
    "max_pool3d_with_indices",
    "max_pool3d",
    "avg_pool3d",
}
# Operators whose FLOPs scale with their (largest) input rather than their output.
_PER_INPUT = {
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "prod",
    "var_mean",
    "var",
    "std",
    "linalg_vector_norm",
    "norm",
    "argmax",
    "argmin",
    "any",
    "all",
    "_adaptive_avg_pool2d",
    "_adaptive_avg_pool3d",
    "native_layer_norm",
    "native_group_norm",
}


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
    """Whether the cost model knows the FLOPs of the ATen operator ``name`` (without
    namespace or overload: ``"addmm"``). Every operator's bytes are counted; an
    unmodelled one's FLOPs are unknown and are reported, never counted as zero."""
    return name in _MMA_OPS or name in _VECTOR_FLOPS_PER_ELEMENT or name in _POOLS


def conv_flops(
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    out_shape: Sequence[int],
    transposed: bool = False,
) -> int:
    """FLOPs (2 per multiply-add) of a convolution, grouped or not, any number of
    spatial dims.

    ``w_shape`` is the weight as PyTorch stores it: ``(C_out, C_in/groups, k...)`` for a
    convolution, ``(C_in, C_out/groups, k...)`` for a transposed one. A convolution does
    ``(C_in/groups) * prod(k)`` multiply-adds per *output* element; a transposed
    convolution ``(C_out/groups) * prod(k)`` per *input* element.
    """
    if len(x_shape) != len(w_shape) or len(out_shape) != len(w_shape):
        raise ValueError(
            f"input {tuple(x_shape)}, weight {tuple(w_shape)} and output "
            f"{tuple(out_shape)} must have the same number of dimensions"
        )
    per_element = math.prod(w_shape[1:])
    elements = math.prod(x_shape) if transposed else math.prod(out_shape)
    return 2 * elements * per_element


# --------------------------------------------------------------------------------------
# one operator's cost
# --------------------------------------------------------------------------------------


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
    # False for an operator whose FLOPs the model does not know (``op_is_modelled``) or
    # that computes in a dtype without a peak (``MODELLED_DTYPES``): its bytes are
    # counted, its FLOPs are not, and the trace reports it.
    modelled: bool = True
    # GPU kernels it launches: 1 for an eager ATen operator; cuDNN's recurrent layers
    # launch about two per time step, layer and direction (``_rnn_kernels``)
    kernels: int = 1

    @property
    def op_class(self) -> str:
        return op_class(self.op)

    @property
    def why_unmodelled(self) -> str | None:
        """None for a modelled operator, else "dtype complex64" or "FLOPs unknown"."""
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

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte."""
        return self.flops / self.bytes if self.bytes else math.inf


def _tensors(value) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _compute_dtype(tensors: Iterable[torch.Tensor]) -> str:
    for t in tensors:
        if t.is_floating_point() or t.is_complex():
            return _dtype_name(t.dtype)
    return "none"


def _rnn_shape(x, batch_first: bool, hidden: int, layers: int, bidir: bool):
    """(steps, batch, input features, gates... ) of a cuDNN RNN call."""
    steps, batch = (x.shape[1], x.shape[0]) if batch_first else tuple(x.shape[:2])
    return steps, batch, x.shape[-1], hidden, layers, 2 if bidir else 1


def _rnn_flops(x, mode: int, hidden: int, layers: int, batch_first: bool, bidir: bool):
    """(mma FLOPs, other FLOPs) of a cuDNN RNN forward: per layer, direction and time
    step, the gates' products with the layer's input and with the hidden state
    (``2 x gates x hidden x (input + hidden)`` per sample), and about five vector FLOPs
    per gate element (activations, the cell update)."""
    from ampbook.measure.cuda_kernels import RNN_GATES

    steps, batch, feat, h, n, dirs = _rnn_shape(x, batch_first, hidden, layers, bidir)
    g = RNN_GATES[mode]
    mma = sum(
        dirs * 2 * steps * batch * g * h * ((feat if i == 0 else h * dirs) + h)
        for i in range(n)
    )
    return float(mma), float(5 * steps * batch * g * h * n * dirs)


def _rnn_kernels(x, batch_first: bool, layers: int, bidir: bool, backward: bool) -> int:
    """Kernels cuDNN's standard RNN algorithm launches (an estimate): per layer and
    direction one product of the whole input sequence, then a recurrent product and a
    point-wise kernel per time step; twice as many backward."""
    steps = x.shape[1] if batch_first else x.shape[0]
    per = 1 + 2 * steps
    return layers * (2 if bidir else 1) * per * (2 if backward else 1)


def _sdpa_flops(backward: bool, args) -> tuple[float, float]:
    """(mma FLOPs, other FLOPs) of fused attention on ``B x H x S x D`` query, key and
    value (the backward's arguments start with the output's gradient). Forward: the
    scores ``Q K^T`` and ``P V``; backward: the scores again (the kernels recompute
    them), ``dP = dO V^T``, ``dV = P^T dO``, ``dQ = dS K``, ``dK = dS^T Q``. Softmax:
    about five vector FLOPs per score."""
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
        x, w = args[0], args[1]
        transposed = bool(args[6])
        mma = conv_flops(x.shape, w.shape, out.shape, transposed)
        other = out.numel() if args[2] is not None else 0  # bias
        return float(mma), float(other)
    if name == "convolution_backward":
        grad_out, x, w = args[0], args[1], args[2]
        transposed, mask = bool(args[7]), args[10]
        fwd = conv_flops(x.shape, w.shape, grad_out.shape, transposed)
        mma = fwd * (int(bool(mask[0])) + int(bool(mask[1])))
        other = grad_out.numel() if mask[2] else 0  # bias gradient: a sum over grad_out
        return float(mma), float(other)
    if name == "mm":
        (m, k), n = args[0].shape, args[1].shape[1]
        return float(2 * m * k * n), 0.0
    if name == "addmm":
        (m, k), n = args[1].shape, args[2].shape[1]
        return float(2 * m * k * n), float(m * n)
    if name == "bmm":
        (b, m, k), n = args[0].shape, args[1].shape[2]
        return float(2 * b * m * k * n), 0.0
    if name == "baddbmm":
        (b, m, k), n = args[1].shape, args[2].shape[2]
        return float(2 * b * m * k * n), float(b * m * n)
    if name in _SDPA_FORWARD or name in _SDPA_BACKWARD:
        return _sdpa_flops(name in _SDPA_BACKWARD, args)
    if name == "_cudnn_rnn":  # input, weights, stride, buf, hx, cx, mode, hidden...
        x, mode, hidden, layers, bf, bidir = (
            args[0], args[6], args[7], args[9], args[10], args[13]
        )  # fmt: skip
        return _rnn_flops(x, mode, hidden, layers, bf, bidir)
    if name == "_cudnn_rnn_backward":  # ampbook::cudnn_rnn_backward's arguments
        x, mode, hidden, layers, bf, bidir = (
            args[0], args[6], args[7], args[8], args[9], args[10]
        )  # fmt: skip
        mma, other = _rnn_flops(x, mode, hidden, layers, bf, bidir)
        return 2 * mma, other  # input and hidden-state gradients, weight gradients
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
    """The cost of one dispatched ATen operator ``func(*args, **kwargs) -> out``, or
    None for one that moves no data (a view, an allocation, a query of metadata).

    ``phase`` is "forward" or "backward"; ``where()``, called only for an operator
    that moves data, gives the (scope, scope type) it is attributed to."""
    moved = _op_bytes(func, args, kwargs, out)
    if moved is None:
        return None
    name = func._schema.name.split("::")[-1]
    if func.namespace == "ampbook":  # stands for the ATen operator CUDA runs
        name = "_" + name
    known = func.namespace in ("aten", "ampbook") and op_is_modelled(name)
    # The dtype an operator computes in: a convolution's input dtype, else its
    # output's.
    dtype = _compute_dtype(
        _tensors(args) if name in _MMA_OPS else _tensors(out) + _tensors((args, kwargs))
    )
    modelled = known and dtype in MODELLED_DTYPES
    if not known:
        name = name if func.namespace == "aten" else func._schema.name
    if not modelled:
        mma, other = 0.0, 0.0
    else:
        mma, other = _op_flops(name, func, args, kwargs, out)
    if name not in _MMA_OPS:
        mma, other = 0.0, other + mma
    kernels = 1
    if name == "_cudnn_rnn":
        kernels = _rnn_kernels(args[0], args[10], args[9], args[13], False)
    elif name == "_cudnn_rnn_backward":
        kernels = _rnn_kernels(args[0], args[9], args[8], args[10], True)
    scope, scope_type = where()
    return OpCost(
        phase, scope, scope_type, name, dtype, mma, other, *moved, modelled, kernels
    )
