"""What autocast does to a model, observed rather than assumed (chapter 4, for ERFNet):
the dtypes of every layer and functional op under autocast (on fake CUDA tensors
without a GPU), which gradients a real AMP step holds in low precision, and the casts
autocast makes (of each fp32 weight once per region: the cast cache).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ampbook.measure.autocast_rules import (
    autocast_region,
    check_device_type,
    cuda_is_fake,
    default_dtype,
    dtype_name,
)
from ampbook.measure.tracking import ModuleScopes


def _dtypes(obj) -> list[str]:
    tensors = [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]
    return [dtype_name(t.dtype) for t in tensors if t.is_floating_point()]


def _settings(device_type, dtype) -> tuple[torch.dtype, bool]:
    """The autocast dtype, and whether to run on fake tensors (CUDA without a GPU)."""
    fake = check_device_type(device_type) == "cuda" and cuda_is_fake()
    return dtype or default_dtype(device_type), fake


def _forward(model: nn.Module, x, device_type, dtype, fake):
    """Run ``model`` forward in an autocast region, on ``x`` (a tensor, or a shape for
    a random input); on fake copies of its state with ``fake``."""
    if fake:
        with autocast_region(device_type, dtype, fake=True) as dev:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else tuple(x)
            state = {
                n: torch.empty_like(t, device=dev).requires_grad_(t.requires_grad)
                for n, t in [*model.named_parameters(), *model.named_buffers()]
            }
            x = torch.randn(shape, device=dev)
            return torch.func.functional_call(model, state, (x,))
    if not isinstance(x, torch.Tensor):
        x = torch.randn(tuple(x), device=next(model.parameters()).device)
    with autocast_region(device_type, dtype):
        return model(x)


def trace_layers(
    model: nn.Module, x, device_type: str = "cpu", dtype: torch.dtype | None = None
) -> list[dict]:
    """Rows ``{"name", "type", "inputs", "output", "params"}`` of dtypes, for every leaf
    module call in one forward under autocast. ``x``: an input tensor on the model's
    device, or an input shape; CUDA without a GPU runs the model on fake CUDA copies of
    its parameters, and does not touch it."""
    dtype, fake = _settings(device_type, dtype)
    rows: list[dict] = []

    def hook(module, args, output, name):
        params = sorted({dtype_name(p.dtype) for p in module.parameters(recurse=False)})
        kind, ins, out = type(module).__name__, _dtypes(args), _dtypes(output)
        rows.append(dict(name=name, type=kind, inputs=ins, output=out, params=params))

    handles = [
        m.register_forward_hook(lambda mod, a, o, n=n: hook(mod, a, o, n))
        for n, m in model.named_modules()
        if not list(m.children())
    ]
    try:
        with torch.no_grad():
            _forward(model, x, device_type, dtype, fake)
    finally:
        for h in handles:
            h.remove()
    return rows


_SKIP_FUNCS = frozenset(
    "__get__ __set__ size dim numel shape dtype device is_floating_point __len__ "
    "__getitem__ __format__ __repr__ requires_grad_ register_hook untyped_storage "
    "data_ptr is_leaf grad_fn item __bool__ tolist".split()
)


def traced_call(func, out) -> str | None:
    """The op name ``trace_ops`` (and ``gradstats.emulate_fp16_grads``) records for a
    call returning ``out``; None for attribute reads, hooks, no floating output."""
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
            ins = _dtypes(list(args) + list(kwargs.values()))
            row = dict(module=scope[1], op=name, inputs=ins, output=_dtypes(out))
            self.rows.append(row)
        return out


def trace_ops(
    model: nn.Module, x, device_type: str = "cpu", dtype: torch.dtype | None = None
) -> list[dict]:
    """Every torch function the forward calls (``F.conv2d``, ``torch.cat``, ``y +
    x``...) with the dtypes of its floating inputs and outputs and the innermost module
    type running it. Catches what layer hooks miss: functional ops inside a block's own
    ``forward`` (chapter 4: ERFNet's concatenations and residual sums)."""
    dtype, fake = _settings(device_type, dtype)
    rows: list[dict] = []
    with ModuleScopes(model) as scopes, torch.no_grad(), _OpRecorder(scopes, rows):
        _forward(model, x, device_type, dtype, fake)
    return rows


def _low_precision_rows(trace, model, x, device_type, dtype) -> tuple[list, str]:
    """``trace``'s rows and the name of the low-precision dtype. A real forward in
    training mode updates batch norm's running statistics: it traces a copy."""
    dtype, fake = _settings(device_type, dtype)
    rows = trace(model if fake else copy.deepcopy(model), x, device_type, dtype)
    return rows, dtype_name(dtype)


def low_precision_layers(
    model: nn.Module, x, device_type: str = "cuda", dtype: torch.dtype | None = None
) -> set[str]:
    """Names of the leaf modules whose output (and so activation gradient, in a real AMP
    backward) is low precision under autocast (default: CUDA fp16), in the model's
    current train/eval mode."""
    rows, low = _low_precision_rows(trace_layers, model, x, device_type, dtype)
    return {r["name"] for r in rows if r["output"] and set(r["output"]) == {low}}


def low_precision_calls(
    model: nn.Module, x, device_type: str = "cuda", dtype: torch.dtype | None = None
) -> list[tuple[str, bool]]:
    """``(op, output is low precision)`` for every call ``trace_ops`` records in one
    forward under autocast (default: CUDA fp16), in call order: which gradients of the
    backward a real AMP step holds in low precision."""
    rows, low = _low_precision_rows(trace_ops, model, x, device_type, dtype)
    return [(r["op"], set(r["output"]) == {low}) for r in rows]


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
    to mark the casts of its parameters. Chapter 4 counts with it."""

    model: nn.Module | None = None
    casts: list[Cast] = field(default_factory=list)

    def __post_init__(self):
        super().__init__()
        params = self.model.parameters() if self.model is not None else ()
        self._params = {p.data_ptr() for p in params}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            src, dst = args[0], kwargs.get("dtype")
            if dst is not None and dst != src.dtype:
                names = dtype_name(src.dtype), dtype_name(dst)
                mine = src.data_ptr() in self._params
                self.casts.append(Cast(tuple(src.shape), *names, mine))
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
        casts = [c for c in self.casts if c.is_parameter]
        return sum(math.prod(c.shape) * getattr(torch, c.dst).itemsize for c in casts)
