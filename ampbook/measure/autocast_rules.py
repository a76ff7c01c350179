"""Autocast's rules: which dtype each op runs in under autocast, as the torch.amp docs
list it ("Autocast Op Reference",
https://pytorch.org/docs/stable/amp.html#autocast-op-reference, kept in
``data/reference/autocast_ops.yml``: ``documented_ops``) and as the installed torch's
dispatcher registers it (``registered_ops``: every other op falls through autocast).

``autocast_region`` is an autocast region on either device; without a GPU a CUDA region
runs on *fake* CUDA tensors (a device and a dtype, no data), so the dispatcher's CUDA
autocast kernels make their real decisions while no arithmetic happens.
``CudaAutocastRules`` makes CUDA's decisions inside a CPU autocast region, for the cost
model's CPU trace of a training step.
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves, tree_map

from ampbook.core.paths import load_reference
from ampbook.core.precision import torch_name

CATEGORIES = ("lower_precision", "float32", "promote")
DEVICE_TYPES = ("cpu", "cuda")
_DISPATCH_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}
_DEFAULT_DTYPE = {"cpu": torch.bfloat16, "cuda": torch.float16}


def check_device_type(device_type: str) -> str:
    """``device_type``, or a ValueError naming ``DEVICE_TYPES``."""
    if device_type not in DEVICE_TYPES:
        raise ValueError(
            f"device_type must be one of {DEVICE_TYPES}, got {device_type!r}"
        )
    return device_type


def default_dtype(device_type: str) -> torch.dtype:
    """Autocast's default 16-bit dtype on the device (chapter 4 measures in it)."""
    return _DEFAULT_DTYPE[check_device_type(device_type)]


def dtype_name(dtype: torch.dtype | None) -> str:
    """A dtype as chapter 4's tables write it (``"bfloat16"``), ``"-"`` for None."""
    return "-" if dtype is None else torch_name(dtype)


@functools.lru_cache(maxsize=1)
def _reference() -> dict:
    return load_reference("autocast_ops")


def documented_ops(device_type: str) -> dict[str, list[str]]:
    """The torch.amp docs' op lists for ``device_type``: ``{"lower_precision": [...],
    "float32": [...], "promote": [...]}`` (names as the docs write them); chapter 4
    counts the registered ops they leave unnamed."""
    section = _reference()[check_device_type(device_type)]
    return {c: list(section[c]) for c in CATEGORIES}


def documented_category(
    op: str, device_type: str, aliases: tuple[str, ...] = ()
) -> str | None:
    """The docs' category of ``op`` (or one of its ``aliases``); None if unlisted."""
    lists = documented_ops(device_type).items()
    return next((c for c, ops in lists if {op, *aliases} & set(ops)), None)


def registered_ops(device_type: str) -> list[str]:
    """Sorted names of the ops with a kernel for the device's autocast dispatch key in
    the installed torch, overloads merged (``aten::conv2d.padding`` -> ``conv2d``).
    Works without the device: the registrations are part of the build."""
    key = _DISPATCH_KEYS[check_device_type(device_type)]
    # No public API lists a dispatch key's registrations: the dispatcher's own answer
    regs = torch._C._dispatch_get_registrations_for_dispatch_key(key)
    return sorted({r.split("::", 1)[-1].split(".", 1)[0] for r in regs})


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
    directly (``torch.autocast`` refuses CUDA without a GPU): results have dtypes and
    shapes but no values."""
    check_device_type(device_type)
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


# CUDA's autocast op lists as the installed torch declares them (the macros
# AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32 and AT_FORALL_FP32_SET_OPT_DTYPE in
# torch/include/ATen/autocast_mode.h; tests/test_autocast_rules.py checks these sets
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
# Python functions whose ATen ops CPU autocast lists under another name (beside
# ``_max_pool3d`` and ``max_pool3d_with_indices`` for ``max_pool3d``): a call CUDA's
# lists leave alone must not reach CPU autocast's fp32 kernels for these.
_PY_TO_ATEN = {
    "grid_sample": ("grid_sampler", "grid_sampler_2d", "grid_sampler_3d"),
    "pad": tuple(
        f"{kind}_pad{n}d" for kind in ("reflection", "replication") for n in (1, 2, 3)
    ),
}


def is_autocast_eligible(t) -> bool:
    """Whether autocast casts the tensor ``t``: floating, not fp64 (as CUDA decides)."""
    return (
        isinstance(t, torch.Tensor)
        and t.is_floating_point()
        and t.dtype != torch.float64
    )


@functools.lru_cache(maxsize=None)
def _cpu_lists(name: str) -> bool:
    """Whether CPU autocast has a kernel for the Python function ``name`` (under its own
    name or the ATen ops it reaches)."""
    bare = name.lstrip("_").removesuffix("_with_indices")
    names = {name, bare, *_PY_TO_ATEN.get(name, ())}
    return bool(names & set(registered_ops("cpu")))


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
    floats = [t.dtype for t in tensors if is_autocast_eligible(t)]
    return functools.reduce(torch.promote_types, floats) if floats else None


class CudaAutocastRules(TorchFunctionMode):
    """Inside a CPU autocast region, make the decisions CUDA's autocast would make.

    The cost model traces a training step on the CPU (a backward pass on fake CUDA
    tensors needs a GPU). CUDA's autocast keeps norms, softmax, sums, exponentials,
    most losses and upsampling in fp32, and CPU autocast has rules CUDA's lists lack
    (FFTs, 3-D pooling, pads, linear algebra in fp32). This mode applies CUDA's lists to
    the torch functions called while CPU autocast is on (ops both list alike are left
    to CPU autocast and its cast cache); it does not see the functions a composite such
    as ``F.multi_head_attention_forward`` calls inside it (``CudaKernels`` does)."""

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
            if kwargs.get("dtype") is None and is_autocast_eligible(first):
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

    def cast_to(d, tree, complex_to=None):
        def cast(t):
            if complex_to and isinstance(t, torch.Tensor) and t.is_complex():
                return t.to(complex_to)
            return t.to(d) if is_autocast_eligible(t) else t

        return tree_map(cast, tree)

    if dtype is not None:
        args, kwargs = cast_to(dtype, (args, kwargs))
    with torch.autocast("cpu", enabled=False):
        try:
            return func(*args, **kwargs)
        except (NotImplementedError, RuntimeError):
            low = _widest(tree_leaves((args, kwargs)))
            if dtype is not None or low not in (torch.float16, torch.bfloat16):
                raise
        out = func(*cast_to(torch.float32, args), **kwargs)
    half = torch.complex32 if low == torch.float16 else torch.complex64
    return cast_to(low, out, complex_to=half)
