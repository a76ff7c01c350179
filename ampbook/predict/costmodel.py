"""A per-layer cost model of a training step: FLOPs and bytes moved, and a roofline.

The model is computed from the network itself. ``trace_step`` runs one training step
(forward, loss, backward) on *fake* tensors (``torch._subclasses.FakeTensorMode``):
every ATen operator PyTorch would launch is dispatched with its real shapes and dtypes,
but no memory is allocated and nothing is computed, so a step at the RTX 3070 blog
post's 1024x512 setting costs seconds of CPU, not the minutes (and gigabytes) of running
it. A ``TorchDispatchMode`` sees each operator and records:

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

Each operator is attributed to the innermost module of the model running when it was
launched (``ampbook.measure.tracking.ModuleScopes``): forward operators through the
module tracker, backward operators through the autograd node that runs them (the module
whose forward created it). Functional calls in a block's ``forward`` (``F.relu(y + x)``,
``torch.cat``) go to the block; the loss goes to ``LOSS``.

Mixed precision is traced under ``torch.autocast``. The fake tensors live on the CPU, so
it is the CPU autocast that runs, with CUDA's op lists applied on top of it
(``ampbook.measure.autocast_trace.CudaAutocastRules``; ``autocast_rules="cpu"`` turns
that off): convolutions, matrix products and attention in fp16/bf16; layer and group
norm, softmax, sums, exponentials, losses and upsampling in fp32; batch norm, ReLU,
GELU, pooling, addition and dropout in their inputs' dtype, with PyTorch's type
promotion where an fp16 and an fp32 tensor meet. Batch norm is in neither autocast list:
it takes the fp16 activation with fp32 weights and running statistics and writes fp16
(cuDNN's ``cudnn_batch_norm`` on CUDA). The tests check this against traces on fake CUDA
tensors, whose autocast is the CUDA one (``device_type="cuda"``, forward only): for
ERFNet, MobileNetV3, ViT-B/16 and ConvNeXt every convolution, linear layer and layer
norm has CUDA's dtype; the CPU trace has a few extra cast kernels, before ``torch.cat``
and the loss, that CUDA folds into the operators. (A fake-CUDA trace of attention is no
reference: without a GPU PyTorch cannot pick a fused kernel and takes the unfused fp32
path.)

``predict`` holds a trace against a device's ceilings (``Ceilings``, usually from
``ampbook.core.devices``): each operator takes ``max(compute time, memory time)`` where
compute time is ``mma FLOPs / tensor peak + other FLOPs / vector peak`` at the
operator's dtype and memory time is ``bytes / bandwidth``; the step is the sum
(operators run one after another). It is a *lower bound* on the step time: real kernels
reach a fraction of either peak, and kernel launch latency (``min_kernel_s``) is not in
it unless asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ampbook.core.args import is_positive_int
from ampbook.core.precision import AUTOCAST_DTYPES, PRECISIONS
from ampbook.core.precision import torch_name as _dtype_name
from ampbook.measure.memory import SavedTensorMeter
from ampbook.measure.tracking import ModuleScopes

LOSS = "(loss)"
OUTSIDE = "(outside model)"
# Backward work outside every module: the loss gradient's seed, AccumulateGrad.
AUTOGRAD = "(autograd engine)"

# Fused attention (``scaled_dot_product_attention``'s kernels): two matrix products
# forward, five backward (``_sdpa_flops``), as ``torch.utils.flop_counter`` counts them.
_SDPA_FORWARD = {
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
}
_SDPA_BACKWARD = {name + "_backward" for name in _SDPA_FORWARD}
# cuDNN's recurrent layers (``autocast_trace.CudaKernels`` puts them in a trace):
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
# Operator classes, for kernel efficiencies (``ampbook.predict.calibration``):
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
    from ampbook.measure.autocast_trace import RNN_GATES

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


# --------------------------------------------------------------------------------------
# tracing a step
# --------------------------------------------------------------------------------------


class _CostRecorder(TorchDispatchMode):
    """Records every ATen operator with its cost and the module that launched it
    (``ampbook.measure.tracking.ModuleScopes``: forward and backward)."""

    def __init__(self, scopes: ModuleScopes):
        super().__init__()
        self.scopes = scopes
        self.ops: list[OpCost] = []
        self.region: tuple[str, str] | None = None  # the loss, outside the model
        self.phase = "forward"

    def _scope(self) -> tuple[str, str]:
        if self.phase == "forward":
            return self.region or self.scopes.innermost() or (OUTSIDE, "-")
        return self.scopes.backward_scope() or (AUTOGRAD, "autograd engine")

    # -- operators
    # -----------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        moved = _op_bytes(func, args, kwargs, out)
        if moved is None:
            return out
        name = func._schema.name.split("::")[-1]
        if func.namespace == "ampbook":  # stands for the ATen operator CUDA runs
            name = "_" + name
        known = func.namespace in ("aten", "ampbook") and op_is_modelled(name)
        # The dtype an operator computes in: a convolution's input dtype, else its
        # output's.
        dtype = _compute_dtype(
            _tensors(args)
            if name in _MMA_OPS
            else _tensors(out) + _tensors((args, kwargs))
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
        scope, scope_type = self._scope()
        self.ops.append(
            OpCost(
                self.phase,
                scope,
                scope_type,
                name,
                dtype,
                mma,
                other,
                *moved,
                modelled,
                kernels,
            )  # fmt: skip
        )
        return out


@dataclass
class StepTrace:
    """The operators of one traced training step."""

    model: str
    precision: str
    batch_size: int
    height: int
    width: int
    parameters: int
    ops: list[OpCost] = field(default_factory=list)
    # ``ampbook.measure.memory.SavedTensorMeter.summary()`` of the traced forward and
    # loss: the bytes saved for backward, predicted (``new_bytes`` is the book's memory
    # figure)
    saved_tensors: dict | None = None
    # one sample's shape (C, H, W for an image)
    input_shape: tuple[int, ...] | None = None

    def select(
        self, phase: str | None = None, scope: str | None = None
    ) -> list[OpCost]:
        return [
            o
            for o in self.ops
            if (phase is None or o.phase == phase)
            and (scope is None or o.scope == scope)
        ]

    def totals(self) -> dict[str, float]:
        """FLOPs and bytes of the step, forward and backward apart, and kernel
        counts."""
        out: dict[str, float] = {}
        for phase in ("forward", "backward"):
            ops = self.select(phase)
            out[f"{phase}_mma_flops"] = sum(o.mma_flops for o in ops)
            out[f"{phase}_flops"] = sum(o.flops for o in ops)
            out[f"{phase}_bytes"] = sum(o.bytes for o in ops)
            out[f"{phase}_kernels"] = sum(o.kernels for o in ops)
        out["flops"] = out["forward_flops"] + out["backward_flops"]
        out["mma_flops"] = out["forward_mma_flops"] + out["backward_mma_flops"]
        out["bytes"] = out["forward_bytes"] + out["backward_bytes"]
        out["kernels"] = out["forward_kernels"] + out["backward_kernels"]
        return out

    def unmodelled(self) -> list[dict[str, Any]]:
        """The operators whose FLOPs the model does not know, largest bytes first:
        ``{"op", "why", "count", "bytes", "bytes_share", "phases", "scopes"}`` (``why``:
        "FLOPs unknown", or the dtype it computes in, such as "dtype complex64", where
        the roofline has no peak). Their bytes
        are in every total; their FLOPs are in none. Empty when every operator is
        modelled."""
        total = sum(o.bytes for o in self.ops)
        rows: dict[str, dict[str, Any]] = {}
        for o in self.ops:
            if o.modelled:
                continue
            r = rows.setdefault(
                o.op,
                {
                    "op": o.op,
                    "why": o.why_unmodelled,
                    "count": 0,
                    "bytes": 0.0,
                    "phases": [],
                    "scopes": [],
                },
            )
            r["count"] += 1
            r["bytes"] += o.bytes
            for key, value in (("phases", o.phase), ("scopes", o.scope)):
                if value not in r[key]:
                    r[key].append(value)
        for r in rows.values():
            r["bytes_share"] = r["bytes"] / total if total else 0.0
        return sorted(rows.values(), key=lambda r: -r["bytes"])


def trace_step(
    model: nn.Module,
    batch_size: int,
    height: int,
    width: int,
    precision: str = "fp32",
    *,
    in_channels: int = 3,
    backward: bool = True,
    loss: str | Callable[[torch.Tensor], torch.Tensor] = "cross_entropy",
    ignore_index: int = 255,
    device_type: str = "cpu",
    autocast_rules: str = "cuda",
    input_shape: Sequence[int] | None = None,
) -> StepTrace:
    """Trace one training step of ``model`` on fake tensors and return its operators'
    costs.

    The input is ``batch_size x in_channels x height x width`` fp32 (as a DataLoader
    delivers it); ``precision`` is one of ``PRECISIONS`` (``"amp-*"`` runs forward and
    loss under ``torch.autocast``). ``loss`` is ``"cross_entropy"`` (per-pixel, integer
    targets of shape N x H x W, as in segmentation), ``"sum"``, or a function of the
    output. The model is not changed: its parameters and buffers are replaced by fake
    copies for the trace (``torch.func.functional_call``), in training mode as a step
    would run. The optimizer step is not traced: ``optimizer_bytes`` estimates it.

    ``device_type="cuda"`` traces on fake CUDA tensors under CUDA's own autocast
    (through ``ampbook.measure.autocast_trace.autocast_region``), forward and loss only:
    the autograd engine needs a real GPU to run a backward pass on CUDA tensors. It
    exists to check that the CPU trace's dtypes are CUDA's.

    ``autocast_rules`` (CPU traces): ``"cuda"`` applies CUDA's autocast lists in the
    CPU autocast region (``ampbook.measure.autocast_trace.CudaAutocastRules``: layer
    norm, softmax, sums, upsampling... in fp32 as on a GPU, none of CPU autocast's own
    fp32 rules) and runs attention and recurrent layers as CUDA's fused kernels
    (``ampbook.measure.autocast_trace.CudaKernels``), in every precision; ``"cpu"``
    leaves the CPU's kernels and CPU autocast's own decisions.

    ``input_shape``: one sample's shape, of any rank (``(C, T, H, W)`` for video,
    ``(C, L)`` for sequences), instead of ``in_channels x height x width``.
    """
    if autocast_rules not in ("cuda", "cpu"):
        raise ValueError(
            f"autocast_rules must be 'cuda' or 'cpu', got {autocast_rules!r}"
        )
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")
    if device_type == "cuda" and backward:
        raise ValueError(
            "a fake-CUDA trace cannot run backward (the autograd engine needs a GPU "
            "for CUDA tensors): pass backward=False, or trace on 'cpu'"
        )
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {PRECISIONS}")
    if input_shape is not None:
        shape = tuple(input_shape)
        if not shape:
            raise ValueError("input_shape needs at least one dimension")
        dims = [(f"input_shape[{i}]", d) for i, d in enumerate(shape)]
    else:
        shape = (in_channels, height, width)
        dims = [("height", height), ("width", width), ("in_channels", in_channels)]
    for label, v in (("batch_size", batch_size), *dims):
        if not is_positive_int(v):
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    if isinstance(loss, str) and loss not in ("cross_entropy", "sum"):
        raise ValueError(
            f"unknown loss {loss!r}: use 'cross_entropy', 'sum' or a function"
        )
    from torch.func import functional_call

    from ampbook.measure.autocast_trace import CudaAutocastRules, CudaKernels

    cuda_rules = autocast_rules == "cuda" and device_type == "cpu"
    rules = CudaAutocastRules if cuda_rules else contextlib.nullcontext
    kernels = CudaKernels if cuda_rules else contextlib.nullcontext
    scopes = ModuleScopes(model, backward=backward)
    recorder = _CostRecorder(scopes)
    autocast_dtype = AUTOCAST_DTYPES[precision]
    was_training = model.training
    model.train()
    try:
        with _fake_region(device_type, autocast_dtype) as (device, autocast):

            def fake(t: torch.Tensor, grad: bool) -> torch.Tensor:
                f = torch.empty_strided(
                    tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device
                )
                return f.requires_grad_(grad)

            state = {n: fake(p, p.requires_grad) for n, p in model.named_parameters()}
            state.update({n: fake(b, False) for n, b in model.named_buffers()})
            x = torch.empty(batch_size, *shape, dtype=torch.float32, device=device)
            params = [state[n] for n, _ in model.named_parameters()]
            meter = SavedTensorMeter(model=model, parameters=params)
            with scopes, recorder, meter:
                with autocast(), rules(), kernels():
                    y = functional_call(model, state, (x,))
                    if isinstance(loss, str) and not isinstance(y, torch.Tensor):
                        raise ValueError(
                            f"the model returned a {type(y).__name__}, not a tensor: "
                            "pass loss= a function of what it returns"
                        )
                    recorder.region = (LOSS, "loss")
                    if loss == "cross_entropy":
                        if y.dim() < 2:
                            raise ValueError(
                                f"cross_entropy needs N x C x ... logits; the model "
                                f"returned shape {tuple(y.shape)}"
                            )
                        target = torch.zeros(
                            (y.shape[0], *y.shape[2:]), dtype=torch.long, device=device
                        )
                        value = nn.functional.cross_entropy(
                            y, target, ignore_index=ignore_index
                        )
                    elif loss == "sum":
                        value = y.float().sum()
                    else:
                        value = loss(y)
                    recorder.region = None
                    scopes.claim(value, (LOSS, "loss"))
                if backward and not value.requires_grad:
                    raise ValueError(
                        "the loss does not depend on any trainable parameter: "
                        "nothing to trace backward (pass backward=False)"
                    )
                if backward:  # outside autocast, as a training loop calls it
                    recorder.phase = "backward"
                    value.backward()
    finally:
        model.train(was_training)
    return StepTrace(
        type(model).__name__,
        precision,
        batch_size,
        shape[-2] if len(shape) >= 3 else 1,
        shape[-1] if len(shape) >= 2 else 1,
        sum(p.numel() for p in model.parameters()),
        recorder.ops,
        meter.summary(),
        shape,
    )


def relabel(trace: StepTrace, precision: str) -> StepTrace:
    """An AMP trace as the other 16-bit precision would trace: CUDA's autocast lists
    are the same for fp16 and bf16, so the operators, shapes and bytes are too; only
    the dtype names change (and the GradScaler's traffic in ``optimizer_bytes``,
    which follows ``precision``). Saves tracing the step twice."""
    old = _dtype_name(AUTOCAST_DTYPES[trace.precision])
    new = _dtype_name(AUTOCAST_DTYPES[precision])
    if None in (AUTOCAST_DTYPES[trace.precision], AUTOCAST_DTYPES[precision]):
        raise ValueError(f"relabel needs two AMP precisions, got {trace.precision}")
    ops = [
        dataclasses.replace(o, dtype=new) if o.dtype == old else o for o in trace.ops
    ]
    saved = None
    if trace.saved_tensors is not None:
        saved = dict(trace.saved_tensors)
        saved["by_dtype"] = {
            (new if k == old else k): v for k, v in saved["by_dtype"].items()
        }
    return dataclasses.replace(trace, precision=precision, ops=ops, saved_tensors=saved)


MEMORY_FORMATS = ("channels_first", "channels_last")
# The operator the layout adds: cuDNN's tensor-core convolutions work in NHWC, so a
# 16-bit convolution on NCHW tensors is run between transposes of its operands.
LAYOUT_TRANSPOSE = "nchw_nhwc_transpose"


def with_memory_format(trace: StepTrace, memory_format: str) -> StepTrace:
    """The traced step as it runs in ``memory_format`` (``MEMORY_FORMATS``; the trace
    itself is layout-free: bytes and FLOPs do not depend on the strides).

    ``"channels_first"`` (NCHW, PyTorch's default): every 16-bit 2-D convolution,
    forward and backward, gets a transpose of what it reads and writes into NHWC and
    back (``LAYOUT_TRANSPOSE``, in the convolution's scope, 2 kernels; assumed from
    cuDNN's tensor-core kernels, which work in NHWC: its bytes are the convolution's
    own read and written once more). fp32 and TF32 convolutions are left as they are.
    ``"channels_last"``: the loop converts each batch once (one copy of the input,
    outside the model); the convolutions need no transposes."""
    if memory_format not in MEMORY_FORMATS:
        raise ValueError(
            f"memory format {memory_format!r}: choose {' or '.join(MEMORY_FORMATS)}"
        )
    spatial2d = trace.input_shape is None or len(trace.input_shape) == 3
    ops: list[OpCost] = []
    if memory_format == "channels_last":
        shape = trace.input_shape or (3, trace.height, trace.width)
        nbytes = 4.0 * trace.batch_size * math.prod(shape)
        ops.append(
            OpCost("forward", OUTSIDE, "", "_to_copy", "float32", 0.0, 0.0, nbytes,
                   nbytes)
        )  # fmt: skip
        return dataclasses.replace(trace, ops=ops + list(trace.ops))
    for o in trace.ops:
        ops.append(o)
        if spatial2d and o.op_class == "conv" and o.dtype in ("float16", "bfloat16"):
            moved = o.read_bytes + o.write_bytes
            ops.append(
                OpCost(o.phase, o.scope, o.scope_type, LAYOUT_TRANSPOSE, o.dtype, 0.0,
                       0.0, moved, moved, kernels=2)
            )  # fmt: skip
    return dataclasses.replace(trace, ops=ops)


@contextlib.contextmanager
def _fake_region(device_type: str, autocast_dtype: torch.dtype | None):
    """Yield (device, autocast context factory) inside a fake-tensor mode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    if device_type == "cuda" and autocast_dtype is not None:
        from ampbook.measure.autocast_trace import autocast_region

        with autocast_region("cuda", autocast_dtype, fake=True) as device:
            yield device, contextlib.nullcontext
        return
    with FakeTensorMode():
        if autocast_dtype is None:
            yield torch.device(device_type), contextlib.nullcontext
        else:
            yield (
                torch.device("cpu"),
                lambda: torch.autocast("cpu", dtype=autocast_dtype),
            )


def optimizer_bytes(
    parameters: int, optimizer: str = "adam", amp: bool = False
) -> float:
    """Bytes an optimizer step moves for ``parameters`` fp32 parameters (not traced).

    Adam reads parameter, gradient and both moments and writes parameter and moments (7
    x 4 bytes per parameter); SGD with momentum reads parameter, gradient, momentum and
    writes parameter and momentum (5 x 4); with ``amp`` the GradScaler's unscale reads
    and writes each gradient once more (2 x 4).
    """
    per = {"adam": 7, "adamw": 7, "sgd": 5}
    if optimizer not in per:
        raise ValueError(
            f"unknown optimizer {optimizer!r}; choose one of {sorted(per)}"
        )
    if parameters < 0:
        raise ValueError(f"parameters must be >= 0, got {parameters}")
    return float(parameters * 4 * (per[optimizer] + (2 if amp else 0)))


# --------------------------------------------------------------------------------------
# ceilings and the roofline
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ceilings:
    """The peaks a roofline holds operators against.

    ``mma_tflops`` maps a compute dtype (``"float32"``, ``"float16"``, ``"bfloat16"``)
    to the peak of convolutions/matrix products in that dtype; ``vector_tflops`` is the
    peak of everything else; ``bandwidth_gbs`` the memory bandwidth (GB/s, 1e9 bytes).
    ``matmul_fp32_tflops``, when set, is the peak of fp32 matrix products (cuBLAS:
    ``mm``, attention, recurrent layers) where it differs from fp32 convolutions'
    (cuDNN): PyTorch allows TF32 for convolutions by default and not for matrix
    products. ``conv_tf32``/``matmul_tf32`` say which of the two run in TF32.
    """

    name: str
    mma_tflops: Mapping[str, float]
    vector_tflops: float
    bandwidth_gbs: float
    notes: str = ""
    matmul_fp32_tflops: float | None = None
    conv_tf32: bool = False
    matmul_tf32: bool = False

    def __post_init__(self):
        if not self.bandwidth_gbs or self.bandwidth_gbs <= 0:
            raise ValueError(
                f"{self.name}: bandwidth_gbs must be positive, got {self.bandwidth_gbs}"
            )
        if not self.vector_tflops or self.vector_tflops <= 0:
            raise ValueError(
                f"{self.name}: vector_tflops must be positive, got {self.vector_tflops}"
            )
        for k, v in self.mma_tflops.items():
            if v is None or v <= 0:
                raise ValueError(
                    f"{self.name}: mma peak for {k} must be positive, got {v}"
                )

    def mma_peak(self, dtype: str, kind: str = "conv") -> float:
        """The matrix peak for ``dtype``; ``kind="matmul"`` for matrix products, whose
        fp32 peak may differ from convolutions' (``matmul_fp32_tflops``)."""
        if kind == "matmul" and dtype == "float32" and self.matmul_fp32_tflops:
            return self.matmul_fp32_tflops
        if dtype not in self.mma_tflops:
            raise KeyError(
                f"{self.name} has no matrix peak for {dtype!r}; it has "
                f"{sorted(self.mma_tflops)}"
            )
        return self.mma_tflops[dtype]

    @property
    def ridge_point(self) -> dict[str, float]:
        """FLOPs per byte above which a matrix operator is compute-bound, per dtype."""
        return {
            k: v * 1e12 / (self.bandwidth_gbs * 1e9) for k, v in self.mma_tflops.items()
        }

    @classmethod
    def from_device(
        cls, device: Any, tf32: bool = True, matmul_tf32: bool | None = None
    ) -> "Ceilings":
        """Ceilings of a GPU from the device table (``ampbook.core.devices.Device``).

        fp32 convolutions run at the TF32 tensor-core peak when ``tf32`` (PyTorch's
        default for cuDNN convolutions: ``torch.backends.cudnn.allow_tf32 = True``) and
        the device has one, else at the fp32 peak; fp32 matrix products likewise when
        ``matmul_tf32`` (PyTorch's default is off:
        ``torch.backends.cuda.matmul.allow_tf32 = False``; None: as ``tf32``); fp16 at
        the fp16-with-fp32-accumulate peak (what autocast's convolutions use); bf16 at
        the bf16 peak. Vector work at the fp32 peak.
        """
        fp32 = device.fp32_tflops
        tf32_peak = getattr(device, "tf32_tflops", None)
        matmul_tf32 = tf32 if matmul_tf32 is None else matmul_tf32
        conv_on, mm_on = bool(tf32 and tf32_peak), bool(matmul_tf32 and tf32_peak)
        mma = {"float32": tf32_peak if conv_on else fp32}
        mm_peak = tf32_peak if mm_on else fp32
        conv_peak = "TF32 tensor-core" if conv_on else "fp32"
        mm_name = "TF32 tensor-core" if mm_on else "fp32"
        notes = [
            f"fp32 convolutions at the {conv_peak} peak, fp32 matrix products at the "
            f"{mm_name} peak"
        ]
        fp16 = getattr(device, "fp16_tflops_fp32acc", None)
        if fp16:
            mma["float16"] = fp16
        bf16 = getattr(device, "bf16_tflops", None)
        if bf16:
            mma["bfloat16"] = bf16
        name = getattr(device, "name", None) or getattr(device, "key", "device")
        return cls(
            name=str(name),
            mma_tflops=mma,
            vector_tflops=fp32,
            bandwidth_gbs=device.mem_bandwidth_gbs,
            notes="; ".join(notes),
            matmul_fp32_tflops=mm_peak if mm_peak != mma["float32"] else None,
            conv_tf32=conv_on,
            matmul_tf32=mm_on,
        )

    def family(self, op: "OpCost") -> str:
        """The dtype family an operator runs in on these ceilings: ``"16-bit"``,
        ``"tf32"`` (an fp32 convolution or matrix product on TF32 tensor cores),
        ``"fp32"`` (CUDA cores) or ``"other"`` (an unmodelled dtype)."""
        if op.dtype in ("float16", "bfloat16"):
            return "16-bit"
        if op.dtype not in ("float32", "none"):
            return "other"
        if op.mma_flops and op.dtype == "float32":
            kind = op.op_class
            on = self.matmul_tf32 if kind == "matmul" else self.conv_tf32
            return "tf32" if on else "fp32"
        return "fp32"


@dataclass
class OpTime:
    op: OpCost
    compute_s: float
    memory_s: float
    time_s: float

    @property
    def bound(self) -> str:
        return "memory" if self.memory_s >= self.compute_s else "compute"


@dataclass
class Prediction:
    """A trace held against ceilings: per-operator times and the step's total.

    Every time here is a **lower bound**: each operator runs at a peak no real kernel
    exceeds, so a real step takes *at least* ``min_step_s``, and an epoch *at least*
    ``min_epoch_s``; a device trains *at most* ``max_images_per_s``. Real kernels reach
    a fraction of the roofline (``efficiency``): ``step_at_efficiency`` scales the bound
    by it, and ``efficiency_of`` says what fraction a measured step reached.
    """

    trace: StepTrace
    ceilings: Ceilings
    times: list[OpTime]
    optimizer_s: float = 0.0

    @property
    def min_step_s(self) -> float:
        """The least time a step can take on these ceilings (a lower bound)."""
        return sum(t.time_s for t in self.times) + self.optimizer_s

    @property
    def compute_only_s(self) -> float:
        """The step if only FLOPs counted (every operator at its compute time)."""
        return sum(t.compute_s for t in self.times)

    @property
    def memory_only_s(self) -> float:
        """The step if only bytes counted."""
        return sum(t.memory_s for t in self.times) + self.optimizer_s

    @property
    def memory_bound_share(self) -> float:
        """Fraction of the predicted step spent in memory-bound operators."""
        total = sum(t.time_s for t in self.times)
        return (
            sum(t.time_s for t in self.times if t.bound == "memory") / total
            if total
            else 0.0
        )

    @property
    def unmodelled(self) -> list[dict[str, Any]]:
        """``StepTrace.unmodelled`` with each operator's predicted time and its share of
        the operators' time: those times count bytes only (their FLOPs are unknown), so
        they are lower bounds like the rest, but weaker ones."""
        total = sum(t.time_s for t in self.times)
        time: dict[str, float] = {}
        for t in self.times:
            if not t.op.modelled:
                time[t.op.op] = time.get(t.op.op, 0.0) + t.time_s
        rows = self.trace.unmodelled()
        for r in rows:
            r["time_s"] = time.get(r["op"], 0.0)
            r["time_share"] = r["time_s"] / total if total else 0.0
        return rows

    @property
    def unmodelled_share(self) -> float:
        """Share of the operators' predicted time spent in unmodelled operators."""
        return sum(r["time_share"] for r in self.unmodelled)

    @property
    def max_images_per_s(self) -> float:
        """The most images per second the device can train (an upper bound)."""
        return self.trace.batch_size / self.min_step_s

    def min_epoch_s(self, images: int) -> float:
        """The least compute time of an epoch of ``images`` (a lower bound)."""
        return images / self.max_images_per_s

    def step_at_efficiency(self, efficiency: float) -> float:
        """The step time if the kernels reach ``efficiency`` (0 < e <= 1) of the
        roofline."""
        if not 0 < efficiency <= 1:
            raise ValueError(
                f"efficiency must be in (0, 1]: a fraction of the roofline, "
                f"got {efficiency}"
            )
        return self.min_step_s / efficiency

    def efficiency_of(self, measured_step_s: float) -> float:
        """The fraction of the roofline a measured step reached: ``min_step_s /
        measured``. Above 1 means the bound was not a bound (wrong ceilings or wrong
        counts)."""
        if measured_step_s <= 0:
            raise ValueError(f"measured_step_s must be positive, got {measured_step_s}")
        return self.min_step_s / measured_step_s

    def by_scope(self, phase: str | None = None) -> list[dict[str, Any]]:
        """Per module (in order of first appearance): FLOPs, bytes and time, forward and
        backward, and whether most of its time is memory-bound."""
        rows: dict[str, dict[str, Any]] = {}
        for t in self.times:
            o = t.op
            if phase is not None and o.phase != phase:
                continue
            r = rows.setdefault(
                o.scope,
                {
                    "scope": o.scope,
                    "type": o.scope_type,
                    "forward_flops": 0.0,
                    "backward_flops": 0.0,
                    "forward_bytes": 0.0,
                    "backward_bytes": 0.0,
                    "time_s": 0.0,
                    "memory_bound_s": 0.0,
                    "kernels": 0,
                },
            )
            r[f"{o.phase}_flops"] += o.flops
            r[f"{o.phase}_bytes"] += o.bytes
            r["time_s"] += t.time_s
            r["kernels"] += 1
            if t.bound == "memory":
                r["memory_bound_s"] += t.time_s
        for r in rows.values():
            flops = r["forward_flops"] + r["backward_flops"]
            nbytes = r["forward_bytes"] + r["backward_bytes"]
            r["flops"], r["bytes"] = flops, nbytes
            r["intensity"] = flops / nbytes if nbytes else math.inf
            r["bound"] = (
                "memory" if r["memory_bound_s"] >= 0.5 * r["time_s"] else "compute"
            )
        return list(rows.values())

    def by_type(self) -> list[dict[str, Any]]:
        """``by_scope`` summed over module types (all Conv2d together...), largest time
        first."""
        agg: dict[str, dict[str, Any]] = {}
        for r in self.by_scope():
            a = agg.setdefault(
                r["type"],
                {
                    "type": r["type"],
                    "modules": 0,
                    "flops": 0.0,
                    "bytes": 0.0,
                    "time_s": 0.0,
                    "memory_bound_s": 0.0,
                },
            )
            a["modules"] += 1
            for k in ("flops", "bytes", "time_s", "memory_bound_s"):
                a[k] += r[k]
        rows = sorted(agg.values(), key=lambda a: -a["time_s"])
        for a in rows:
            a["intensity"] = a["flops"] / a["bytes"] if a["bytes"] else math.inf
            a["bound"] = (
                "memory" if a["memory_bound_s"] >= 0.5 * a["time_s"] else "compute"
            )
        return rows

    def summary(self) -> dict[str, Any]:
        tot = self.trace.totals()
        return {
            "model": self.trace.model,
            "precision": self.trace.precision,
            "ceilings": self.ceilings.name,
            "batch_size": self.trace.batch_size,
            "height": self.trace.height,
            "width": self.trace.width,
            "gflops": tot["flops"] / 1e9,
            "gbytes": tot["bytes"] / 1e9,
            "kernels": int(tot["kernels"]),
            "min_step_s": self.min_step_s,
            "compute_only_s": self.compute_only_s,
            "memory_only_s": self.memory_only_s,
            "memory_bound_share": self.memory_bound_share,
            "max_images_per_s": self.max_images_per_s,
            "unmodelled_ops": [r["op"] for r in self.unmodelled],
            "unmodelled_share": self.unmodelled_share,
        }


def op_time(op: OpCost, ceilings: Ceilings, min_kernel_s: float = 0.0) -> OpTime:
    """One operator on the roofline: the least time it can take.

    An operator cannot finish before its FLOPs are done at the peak for its dtype nor
    before its bytes have moved at the bandwidth, so its time is at least the larger of
    the two (and at least ``min_kernel_s``, a launch's latency, when given)."""
    compute = op.other_flops / (ceilings.vector_tflops * 1e12)
    if op.mma_flops:  # 0 for an unmodelled operator (complex, fp64...)
        kind = "matmul" if op.op_class == "matmul" else "conv"
        compute += op.mma_flops / (ceilings.mma_peak(op.dtype, kind) * 1e12)
    memory = op.bytes / (ceilings.bandwidth_gbs * 1e9)
    return OpTime(op, compute, memory, max(compute, memory, min_kernel_s))


def predict(
    trace: StepTrace,
    ceilings: Ceilings,
    *,
    min_kernel_s: float = 0.0,
    optimizer: str | None = "adam",
) -> Prediction:
    """The roofline's lower bound on a traced step on ``ceilings`` (see ``Prediction``).

    ``min_kernel_s`` puts a floor under each operator (launch latency: a few
    microseconds on a GPU); ``optimizer`` adds ``optimizer_bytes`` at the memory
    bandwidth (None: leave the optimizer out).
    """
    if min_kernel_s < 0:
        raise ValueError(f"min_kernel_s must be >= 0, got {min_kernel_s}")
    times = [op_time(o, ceilings, min_kernel_s) for o in trace.ops]
    opt_s = 0.0
    if optimizer is not None:
        amp = trace.precision == "amp-fp16"
        opt_s = optimizer_bytes(trace.parameters, optimizer, amp) / (
            ceilings.bandwidth_gbs * 1e9
        )
    return Prediction(trace, ceilings, times, opt_s)


# --------------------------------------------------------------------------------------
# the input pipeline against the step: what bounds an epoch
# --------------------------------------------------------------------------------------


def loader_images_per_s(
    load_s_per_image: float, workers: int, cores: int, reserved_cores: int = 1
) -> float:
    """Images per second a DataLoader can deliver, under a stated model.

    ``load_s_per_image`` is the CPU time to read, decode and transform one image in one
    process (measured with ``workers=0``). With ``workers=0`` the training process does
    it itself, one image after another. With ``workers >= 1`` the workers run in
    parallel, one per core, on the cores the training process leaves free (``cores -
    reserved_cores``, at least one): throughput scales linearly with workers up to that
    many and is flat beyond. Linear scaling is the model's assumption; the chapter
    checks it where it can.
    """
    if load_s_per_image <= 0:
        raise ValueError(f"load_s_per_image must be positive, got {load_s_per_image}")
    if workers < 0 or cores < 1 or reserved_cores < 0:
        raise ValueError(
            f"need workers >= 0, cores >= 1, reserved_cores >= 0; got "
            f"{workers}, {cores}, {reserved_cores}"
        )
    if workers == 0:
        return 1.0 / load_s_per_image
    return min(workers, max(cores - reserved_cores, 1)) / load_s_per_image


def epoch_images_per_s(
    load_s_per_image: float,
    step_s_per_image: float,
    workers: int,
    cores: int,
    reserved_cores: int = 1,
) -> dict[str, Any]:
    """Images per second of a training epoch, and what bounds it.

    With ``workers=0`` loading and the step take turns (a loop that reads the loss back
    each step, as most do, waits for the GPU): ``1 / (load + step)`` per image. With
    workers the two overlap and the slower one sets the pace: ``min(loader, 1 / step)``.
    """
    if step_s_per_image <= 0:
        raise ValueError(f"step_s_per_image must be positive, got {step_s_per_image}")
    loader = loader_images_per_s(load_s_per_image, workers, cores, reserved_cores)
    compute = 1.0 / step_s_per_image
    if workers == 0:
        rate = 1.0 / (load_s_per_image + step_s_per_image)
        bound = "loader and step in turn"
    else:
        rate = min(loader, compute)
        bound = "loader" if loader < compute else "step"
    return {
        "images_per_s": rate,
        "loader_images_per_s": loader,
        "step_images_per_s": compute,
        "bound": bound,
    }


# --------------------------------------------------------------------------------------
# the post's setting from its memory figures
# --------------------------------------------------------------------------------------


def solve_pixels(
    fp32_line, amp_line, fp32_bytes: float, amp_bytes: float, slack: float = 1.0
) -> dict[str, float]:
    """The pixels per batch at which two reported memory figures agree with the model.

    ``fp32_line`` and ``amp_line`` are ``ampbook.measure.memory.Line`` fits of the new
    bytes saved for backward against the pixels of a batch (the book's one memory
    definition). Model of a reported figure: ``fixed + slack * line(pixels)``, where
    ``fixed`` (CUDA context, cuDNN workspace, weights, gradients and optimizer state) is
    the same for both runs and ``slack`` (>= 1) is the caching allocator's overhead on
    the activations. The difference of the two figures then fixes the pixels; the fp32
    figure fixes ``fixed``.
    """
    if slack < 1:
        raise ValueError(f"slack must be >= 1 (the allocator only adds), got {slack}")
    per_pixel = slack * (fp32_line.slope - amp_line.slope)
    if per_pixel <= 0:
        raise ValueError(
            "AMP saves no bytes per pixel under these lines: no setting fits"
        )
    pixels = (
        fp32_bytes - amp_bytes - slack * (fp32_line.intercept - amp_line.intercept)
    ) / per_pixel
    if pixels <= 0:
        raise ValueError(
            f"the figures differ by {fp32_bytes - amp_bytes:.3g} bytes, less than "
            "AMP's fixed saving: no positive batch fits"
        )
    return {
        "pixels": pixels,
        "fp32_saved_bytes": fp32_line(pixels),
        "amp_saved_bytes": amp_line(pixels),
        "fixed_bytes": fp32_bytes - slack * fp32_line(pixels),
    }


# --------------------------------------------------------------------------------------
# one-line verdicts for the conclusions that depend on the machine
# --------------------------------------------------------------------------------------


def reserved_verdict(
    runs: Sequence[Any], slack: Sequence[float], where: str = "the committed GPU runs"
) -> str:
    """Whether a reported memory figure can be read as allocated memory times an
    allocator slack in ``slack`` (low, high), as ``solve_pixels`` assumes, from GPU
    runs that measured both their peak allocated and their peak reserved memory.

    ``runs``: ``ampbook.results.TrainRun``s of one GPU and setting (an fp32 baseline
    and an AMP run), read through ``mode_label``, ``cuda_allocated_bytes`` and
    ``cuda_reserved_bytes``. Where every run's reserved over allocated lies in the
    slack's range, the assumption held there; where it does not, a monitor that shows
    reserved memory would not follow the activations, and a solve from the difference
    of two such figures holds only if the figures tracked allocated memory."""
    lo, hi = float(slack[0]), float(slack[-1])
    if not 1 <= lo <= hi:
        raise ValueError(f"slack must be 1 <= low <= high, got {list(slack)}")
    got = [
        r for r in runs if r.cuda_allocated_bytes and r.cuda_reserved_bytes is not None
    ]
    assumed = f"the assumed slack of {lo:.2f}-{hi:.2f}"
    if len(got) < 2:
        return (
            "No committed GPU pair recorded both its peak allocated and its peak "
            f"reserved memory: {assumed} is untested here, and the solve assumes the "
            "post's figure tracked allocated memory."
        )
    ratios = ", ".join(
        f"{r.cuda_reserved_bytes / r.cuda_allocated_bytes:.2f}x for {r.mode_label}"
        for r in got
    )
    reserved = ", ".join(f"{r.cuda_reserved_bytes / 1e9:.2f}" for r in got)
    head = (
        f"In {where} peak reserved over peak allocated memory was {ratios} "
        f"(reserved {reserved} GB)"
    )
    inside = all(
        lo <= r.cuda_reserved_bytes / r.cuda_allocated_bytes <= hi for r in got
    )
    if inside:
        return (
            f"{head}: inside {assumed}, so there a reserved figure followed the "
            "allocated one."
        )
    return (
        f"{head}: outside {assumed}. A figure of reserved memory need not follow the "
        "activations, so the solve below holds only if the post's figure tracked "
        "allocated memory."
    )


def bound_verdict(
    min_s: float, measured_s: float, what: str = "the epoch", timed_alone: bool = False
) -> str:
    """Compare a roofline lower bound with a measured time, in one line. An epoch's
    time may be set by something other than the device (the loader), so the bound
    alone leaves the pace open; a step ``timed_alone`` (no loader, data already in
    place) is the device's own work, and the ratio is the share of the roofline its
    kernels, with the gaps between them, reached."""
    if min_s <= 0 or measured_s <= 0:
        raise ValueError(f"times must be positive, got {min_s} and {measured_s}")
    if min_s > measured_s:
        return (
            f"The bound ({min_s:.3g} s) exceeds the measured {measured_s:.3g} s for "
            f"{what}: the model's counts or ceilings are wrong for this run."
        )
    if timed_alone:
        return (
            f"The bound ({min_s:.3g} s) is below the measured {measured_s:.3g} s for "
            f"{what}: timed without a loader, its kernels and the gaps between them "
            f"reached {min_s / measured_s:.0%} of the roofline."
        )
    return (
        f"The bound ({min_s:.3g} s) is below the measured {measured_s:.3g} s for "
        f"{what}: "
        f"kernels at {min_s / measured_s:.0%} of the roofline would take that long, so "
        "the bound alone does not say what set the pace."
    )


def range_verdict(low_s: float, high_s: float, measured_s: float, what: str) -> str:
    """Whether a measured time lies in a modelled range ``[low_s, high_s]``, in one
    line."""
    if not 0 < low_s <= high_s:
        raise ValueError(f"need 0 < low_s <= high_s, got {low_s} and {high_s}")
    span = f"{low_s:.3g} to {high_s:.3g} s"
    if measured_s < low_s:
        return (
            f"{what} ({measured_s:.3g} s) is below the range ({span}): "
            "the bound is broken."
        )
    if measured_s <= high_s:
        return (
            f"{what} ({measured_s:.3g} s) lies inside the range ({span}): the GPU "
            "alone "
            "could have taken that long, so the range does not decide."
        )
    return (
        f"{what} ({measured_s:.3g} s) lies above the range ({span}): the GPU's kernels "
        "alone would have been faster, so something else set the pace."
    )


@dataclass(frozen=True)
class MeasuredEfficiency:
    """A measured share of the roofline: ``value`` = bound / measured time of one
    network on one GPU (``kind``: "kernel" when measured from kernel time, "step" from
    wall time), with what measured it."""

    network: str
    device: str
    value: float
    kind: str = "kernel"
    source: str = ""


def efficiency_range_verdict(
    min_s: float,
    efficiencies: Sequence[MeasuredEfficiency],
    measured_s: float,
    what: str,
    *,
    network: str,
    device: str,
) -> str:
    """Turn a lower bound into a range with measured efficiencies and hold a measured
    time against it, in one line.

    A kernel's share of the roofline depends on the network, the GPU, its software and
    the setting, so this range uses only efficiencies measured for ``network`` on
    ``device``; carrying shares from other GPUs is a calibration with an error of its
    own (``ampbook.predict.calibration``, chapter 6), not a measurement of this one. The
    range runs from the bound at the highest of them to the bound at the lowest (bounded
    above by what was measured, never by the roofline itself). With none (or none at or
    below 1: a bound that was not a bound), no efficiency is measured there and the
    bound stays a bound; the efficiencies measured elsewhere are named so the reader
    sees what was not used."""
    if min_s <= 0 or measured_s <= 0:
        raise ValueError(f"times must be positive, got {min_s} and {measured_s}")
    same = [
        e.value
        for e in efficiencies
        if e.network == network and e.device == device and 0 < e.value <= 1
    ]
    if not same:
        elsewhere = sorted(
            {f"{e.network} on {e.device}" for e in efficiencies if e.device != device}
        )
        note = (
            f"; the efficiencies measured elsewhere ({', '.join(elsewhere)}) are not "
            "used here: carried to another GPU they are a calibrated estimate, not a "
            "measurement of it"
            if elsewhere
            else ""
        )
        inner = what[:1].lower() + what[1:]
        return (
            f"No profile of {network} on {device} is committed, so no kernel "
            f"efficiency is measured there: the bound ({min_s:.3g} s) stays a lower "
            f"bound for {inner} ({measured_s:.3g} s){note}."
        )
    lo_eff, hi_eff = min(same), max(same)
    low_s, high_s = min_s / hi_eff, min_s / lo_eff
    span = f"{low_s:.3g} to {high_s:.3g} s at the {len(same)} measured efficiencies"
    span += f" ({lo_eff:.0%}-{hi_eff:.0%})" if len(same) > 1 else f" ({lo_eff:.0%})"
    if measured_s < low_s:
        return (
            f"{what} ({measured_s:.3g} s) is below the range ({span}): its kernels ran "
            "closer to the roofline than any measured profile."
        )
    if measured_s <= high_s:
        return (
            f"{what} ({measured_s:.3g} s) lies inside the range ({span}): the GPU "
            "alone could have taken that long, so the range does not decide."
        )
    return (
        f"{what} ({measured_s:.3g} s) lies above the range ({span}): the GPU's kernels "
        "alone would have been faster, so something else set the pace."
    )


def roofline_ratio_verdict(
    roofline_ratio: float,
    measured_speedup: float,
    what: str,
    tolerance: float = 0.02,
    kind: str = "measured",
) -> str:
    """Hold a measured AMP speedup against the roofline ratio of the same network, GPU
    and setting, in one line. The ratio of two lower bounds is the speedup if both
    precisions reach the same share of their bound; it is not an upper bound, and a
    precision whose kernels get closer to their bound beats it. ``kind`` says how the
    speedup was obtained ("measured" here, or "published" for a source's figure)."""
    if roofline_ratio <= 0 or measured_speedup <= 0:
        raise ValueError(
            f"ratios must be positive, got {roofline_ratio} and {measured_speedup}"
        )
    head = (
        f"{what}: {kind} {measured_speedup:.2f}x against a roofline ratio of "
        f"{roofline_ratio:.2f}x"
    )
    if measured_speedup > roofline_ratio * (1 + tolerance):
        return (
            f"{head}, above it: AMP's steps got closer to their bound than the "
            "baseline's, so the ratio is no upper bound."
        )
    if measured_speedup < roofline_ratio / (1 + tolerance):
        return (
            f"{head}, below it: AMP's steps got less close to their bound than the "
            "baseline's."
        )
    return f"{head}: both reached about the same share of their bound."


@dataclass(frozen=True)
class SettingCandidate:
    """A training setting the memory figures allow, held against the time figures:
    ``needed_efficiency`` is the least share of the roofline the kernels must reach for
    the GPU's part of an epoch to fit in the measured epoch (bound / measured; the
    higher of the runs compared)."""

    label: str
    memory_fits: bool
    needed_efficiency: float


def setting_verdict(
    candidates: Sequence[SettingCandidate],
    reference: MeasuredEfficiency | None = None,
) -> str:
    """Choose a setting that fits both the memory and the time figures, in one line.

    A candidate fits the time bound when its kernels would need at most 100% of the
    roofline; among the candidates that fit both, the one that needs the lowest share
    is chosen (the others need kernels closer to the roofline than it does).
    ``reference``, the highest efficiency measured for the network anywhere, is
    printed beside the needs as context: it was measured on another GPU and does not
    decide."""
    if not candidates:
        raise ValueError("no candidate settings to weigh")
    needs = "; ".join(
        f"{c.label} {'fits' if c.memory_fits else 'does not fit'} the memory and needs "
        f"{c.needed_efficiency:.0%}"
        for c in candidates
    )
    context = (
        f" (for scale: {reference.network}'s {reference.kind}s reached at most "
        f"{reference.value:.0%} of their roofline on {reference.device}, another GPU)"
        if reference
        else ""
    )
    both = [c for c in candidates if c.memory_fits and c.needed_efficiency <= 1]
    if not both:
        return (
            f"No candidate fits both the memory and the time figures: {needs}{context}."
        )
    best = min(both, key=lambda c: c.needed_efficiency)
    others = [c for c in both if c is not best]
    why = (
        f"; the others that fit need {min(c.needed_efficiency for c in others):.0%} "
        "or more"
        if others
        else ""
    )
    return (
        f"{best.label} fits both: its kernels need only {best.needed_efficiency:.0%} "
        f"of the roofline to finish within the post's epoch{why}. All candidates: "
        f"{needs}{context}."
    )


def speedup_verdict(ratios: Sequence[float], name: str = "AMP") -> str:
    """Read repeated speedups (fp32 time / other time, one per round) in one line; a
    single round is read as one timing, with no spread to judge by."""
    from ampbook.core.words import plural

    if not ratios:
        raise ValueError("no speedups to read: time at least one round")
    lo, hi = min(ratios), max(ratios)
    med = (
        sorted(ratios)[len(ratios) // 2]
        if len(ratios) % 2
        else (sum(sorted(ratios)[len(ratios) // 2 - 1 : len(ratios) // 2 + 1]) / 2)
    )
    n = len(ratios)
    if n == 1:  # one ratio: no median, no spread, no "every round"
        way = "faster than" if lo > 1 else "slower than" if lo < 1 else "as fast as"
        return (
            f"{name} was {way} fp32 in the one round timed ({lo:.2f}x); one round: "
            "no spread to judge by."
        )
    rounds = plural(n, "round")
    spread = f"median {med:.2f}x, {rounds} from {lo:.2f}x to {hi:.2f}x"
    if hi < 1:
        return f"{name} was slower than fp32 in every round ({spread})."
    if lo > 1:
        return f"{name} was faster than fp32 in every round ({spread})."
    return f"The rounds disagree ({spread}): no difference is resolved at this size."


def lowp_verdict(
    flags: Sequence[str] | None, lowp_over_fp32: float, what: str = "bf16"
) -> str:
    """Whether this CPU's low-precision matmul is fast, in one line, from its measured
    rate over fp32's (``lowp_over_fp32``). ``flags``, the low-precision CPU flags it
    lists, are reported beside the measurement when given (None: not mentioned); the
    verdict never rests on them: which kernels PyTorch runs is measured, not read from
    the flags (``ampbook.measure.cpu_kernels``)."""
    if lowp_over_fp32 <= 0:
        raise ValueError(f"lowp_over_fp32 must be positive, got {lowp_over_fp32}")
    if flags is None:
        listed = ""
    else:
        listed = f" (it lists {', '.join(flags) or 'no bf16/fp16 units'})"
    if lowp_over_fp32 >= 1:
        return (
            f"This CPU's {what} matmul runs at {lowp_over_fp32:.2f}x fp32's "
            f"rate{listed}: low precision can pay here."
        )
    return (
        f"This CPU's {what} matmul runs at {lowp_over_fp32:.2f}x fp32's rate{listed}: "
        "the kernels PyTorch runs here for it are slower than fp32's, and AMP costs "
        "time."
    )


def loader_check_verdict(measured: dict, model: dict) -> str:
    """Chapter 5's check of the loader model: images per second measured with the
    fewest workers above 0 against what the model predicts for them (both keyed by the
    worker count), and how far that carries into the epoch times taken from the model.
    """
    workers = min((w for w in measured if w > 0 and w in model), default=None)
    if workers is None:
        return (
            "No run with workers was measured, so the loader model is unchecked here."
        )
    off = measured[workers] / model[workers]
    plural = "worker" if workers == 1 else "workers"
    return (
        f"With {workers} {plural} the loader delivered {off:.2f} of the model's rate: "
        f"the check is off by {abs(off - 1):.0%}, and the epoch times below, from the "
        "model, carry an error of that order."
    )


def pace_verdict(
    loader_images_per_s: float,
    step_images_per_s: float,
    where: str = "here",
    step_is_bound: bool = False,
) -> str:
    """Which of the loader and the step sets an epoch's pace, in one line.

    ``step_is_bound``: ``step_images_per_s`` is the roofline's most (a bound, not a
    measurement). Real kernels reach a share of it, so a loader slower than the bound
    sets the pace only while the kernels run above the share ``loader / bound``; below
    it the step does. The verdict is then conditional."""
    if loader_images_per_s <= 0 or step_images_per_s <= 0:
        raise ValueError("rates must be positive")
    if step_is_bound:
        if loader_images_per_s < step_images_per_s:
            share = loader_images_per_s / step_images_per_s
            return (
                f"The loader sets the pace {where} only if the kernels reach more than "
                f"{share:.0%} of the roofline: it delivers {loader_images_per_s:.3g} "
                f"images/s against the step's {step_images_per_s:.3g} at most; with "
                "kernels at or below that share the step sets it."
            )
        return (
            f"The step sets the pace {where}: even at the roofline it trains at most "
            f"{step_images_per_s:.3g} images/s, against the loader's "
            f"{loader_images_per_s:.3g}; a faster step shortens the epoch."
        )
    if loader_images_per_s < step_images_per_s:
        return (
            f"The loader sets the pace {where}: {loader_images_per_s:.3g} images/s "
            f"against the step's {step_images_per_s:.3g}; a faster step gains nothing."
        )
    return (
        f"The step sets the pace {where}: {step_images_per_s:.3g} images/s against the "
        f"loader's {loader_images_per_s:.3g}; a faster step shortens the epoch."
    )


def hypotheses_verdict(
    step_speedup: float,
    epoch_speedup: float,
    data_wait_share: float,
    *,
    wait_measured: bool = True,
) -> str:
    """Weigh the chapter's two explanations of "AMP gave no speedup" against one GPU
    pair run on the post's 2020 software (PyTorch 1.7, cuDNN 8.0): hypothesis (b) is
    about that software, so its label means nothing for a pair of today's software
    (read those with ``ampbook.chapters.ch3.gpu_pair_verdict``).

    ``step_speedup``: fp32 step time / AMP step time with the DataLoader taken out (or
    the step alone); ``epoch_speedup``: the same for whole epochs; ``data_wait_share``:
    the AMP run's time waiting for data over its waiting plus stepping. (a) the loader
    bounds the epoch: the loop spends at least half its time waiting for data, so a
    faster step barely shows in the epoch. (b) the AMP step itself is no faster than
    fp32's (at most 1.05x); against a TF32 baseline that need not mean slow fp16
    kernels, only that 16 bits add nothing to what TF32 already gained. Both can hold at
    once.

    ``wait_measured=False``: the share was inferred by difference (the epoch minus its
    steps timed without the loader), so it is an upper bound (steps inside the loop can
    take longer than alone) and cannot show (a) by itself. (a) then rests on the epochs:
    equal epochs (within 5%) from steps that differ by more than 5% did not follow the
    step, and the share must be at least half for the loader to have held the rest.
    """
    slow_step = step_speedup <= 1.05
    if wait_measured:
        loader = data_wait_share >= 0.5
        wait = f"the loader took {data_wait_share:.0%} of the loop"
    else:
        epochs_equal = abs(epoch_speedup - 1) <= 0.05
        steps_differ = abs(step_speedup - 1) > 0.05
        loader = data_wait_share >= 0.5 and epochs_equal and steps_differ
        wait = (
            f"at most {data_wait_share:.0%} of the loop was left for data (by "
            "difference, not measured)"
        )
        if loader:
            wait = (
                f"the epochs were equal ({epoch_speedup:.2f}x) while the steps were "
                f"not, and {wait}"
            )
    if slow_step and loader:
        return f"Both: the AMP step alone ran at {step_speedup:.2f}x fp32's; {wait}."
    if slow_step:
        return (
            f"(b) the AMP step is no faster: alone it ran at {step_speedup:.2f}x "
            f"fp32's, and {wait}."
        )
    if loader:
        return (
            f"(a) the loader: the AMP step alone was {step_speedup:.2f}x faster, the "
            f"epoch {epoch_speedup:.2f}x; {wait}."
        )
    return (
        f"Neither: the AMP step was {step_speedup:.2f}x faster and the epoch "
        f"{epoch_speedup:.2f}x; {wait}."
    )
