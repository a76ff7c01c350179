"""One training step traced on fake tensors: every operator with its cost and module.

Nothing is computed on fake tensors, so a step at 1024x512 costs seconds of CPU. Mixed
precision is traced under the CPU autocast with CUDA's op lists applied on top (the
tests check the dtypes against fake-CUDA traces); batch norm, in neither list, takes
the 16-bit activation and writes 16 bits as cuDNN's does. The trace is layout-free
(``with_memory_format``) and leaves out the optimizer step (``optimizer_bytes``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import shutil
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call
from torch.nn.modules import module as torch_module
from torch.utils._python_dispatch import TorchDispatchMode

from ampbook.core.args import is_positive_int
from ampbook.core.files import is_special, write_text_atomic
from ampbook.core.paths import CacheError, cache_dir
from ampbook.core.precision import AUTOCAST_DTYPES, PRECISIONS
from ampbook.core.precision import torch_name as _dtype_name
from ampbook.measure.autocast_rules import CudaAutocastRules, autocast_region
from ampbook.measure.cuda_kernels import CudaKernels
from ampbook.measure.memory import SavedTensorMeter
from ampbook.measure.tracking import ModuleScopes
from ampbook.predict.opcost import OpCost, op_cost

LOSS = "(loss)"
OUTSIDE = "(outside model)"
# Backward work outside every module: the loss gradient's seed, AccumulateGrad.
AUTOGRAD = "(autograd engine)"


class _CostRecorder(TorchDispatchMode):
    """Records every ATen operator with its cost and the module that launched it."""

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

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        cost = op_cost(func, args, kwargs, out, self.phase, self._scope)
        if cost is not None:
            self.ops.append(cost)
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
    # ``SavedTensorMeter.summary()`` of the traced forward and loss: the bytes saved
    # for backward, predicted (``new_bytes`` is the book's memory figure)
    saved_tensors: dict | None = None
    input_shape: tuple[int, ...] | None = None  # one sample's (C, H, W for an image)

    def select(self, phase: str) -> list[OpCost]:
        return [o for o in self.ops if o.phase == phase]

    def totals(self) -> dict[str, float]:
        """FLOPs, bytes and kernels of the step, in all and per phase."""
        out: dict[str, float] = {}
        keys = ("mma_flops", "flops", "bytes", "kernels")
        for phase in ("forward", "backward"):
            ops = self.select(phase)
            out.update({f"{phase}_{k}": sum(getattr(o, k) for o in ops) for k in keys})
        for k in ("flops", "mma_flops", "bytes", "kernels"):
            out[k] = out[f"forward_{k}"] + out[f"backward_{k}"]
        return out


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
    device_type: str = "cpu",
    autocast_rules: str = "cuda",
    input_shape: Sequence[int] | None = None,
) -> StepTrace:
    """Trace one training step of ``model`` (fake copies of its state).
    ``device_type="cuda"``: forward and loss under CUDA's own autocast, to check the
    CPU trace, whose ``autocast_rules="cuda"`` apply CUDA's lists and fused kernels.

    A trace costs seconds, and chapters, the doctor and the ladder ask for the same
    ones: a trace of ampbook's or torchvision's models is kept (``_cache_path``)."""
    shape = _check_trace(
        batch_size, height, width, precision, in_channels, backward, loss,
        device_type, autocast_rules, input_shape,
    )  # fmt: skip
    args = (batch_size, shape, precision, backward, loss, device_type, autocast_rules)
    path = _cache_path(model, args)
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
        d = json.loads(path.read_text())  # none kept (or no path): traced below
        ops = [OpCost(**o) for o in d.pop("ops")]
        return StepTrace(**{**d, "input_shape": tuple(d["input_shape"])}, ops=ops)
    cuda_rules = autocast_rules == "cuda" and device_type == "cpu"
    rules = CudaAutocastRules if cuda_rules else contextlib.nullcontext
    kernels = CudaKernels if cuda_rules else contextlib.nullcontext
    scopes = ModuleScopes(model, backward=backward)
    recorder = _CostRecorder(scopes)
    was_training = model.training
    model.train()
    try:
        with _fake_region(device_type, AUTOCAST_DTYPES[precision]) as (device, cast):
            state, x = _fake_state(model, batch_size, shape, device)
            params = [state[n] for n, _ in model.named_parameters()]
            meter = SavedTensorMeter(model=model, parameters=params)
            with scopes, recorder, meter:
                with cast(), rules(), kernels():
                    y = functional_call(model, state, (x,))
                    recorder.region = (LOSS, "loss")
                    value = _loss_value(y, loss, device)
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
    h, w = (shape[-2] if len(shape) >= 3 else 1), (shape[-1] if len(shape) >= 2 else 1)
    n = sum(p.numel() for p in model.parameters())
    trace = StepTrace(
        type(model).__name__, precision, batch_size, h, w, n, recorder.ops,
        meter.summary(), shape,
    )  # fmt: skip
    with contextlib.suppress(OSError, TypeError, ValueError, AttributeError):
        if not path.parent.exists():  # a new digest: the older traces are stale
            for old in path.parent.parent.glob("*"):
                shutil.rmtree(old, ignore_errors=True)
        write_text_atomic(path, json.dumps(dataclasses.asdict(trace)))
    return trace


CACHED_MODULES = ("ampbook.", "torchvision.", "torch.nn.")  # a kept trace's parts


def _cache_path(model: nn.Module, args: tuple) -> Path | None:
    """The trace's file in ``cache_dir()/steptrace``, or None: a user's module (its code
    unseen), compiled or hooked, a loss function, torch off its defaults, no folder."""
    hooks = ("forward", "forward_pre", "backward", "backward_pre")
    if any(getattr(torch_module, f"_global_{h}_hooks") for h in hooks) or not (
        torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        and not any(map(torch.is_autocast_enabled, ("cpu", "cuda")))
        and torch.get_default_dtype() == torch.float32
        and torch.get_default_device().type == "cpu"
    ):  # fmt: skip
        return None
    parts = []
    for name, m in model.named_modules():
        kind = f"{type(m).__module__}.{type(m).__qualname__}"
        own = (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks,
               m._backward_pre_hooks, m._compiled_call_impl)  # fmt: skip
        if not kind.startswith(CACHED_MODULES) or any(h for h in own if h):
            return None
        attrs = {k: v for k, v in vars(m).items() if k[0] != "_" and k != "training"}
        parts.append((name, kind, attrs))
    tensors = [
        (n, list(t.shape), str(t.dtype), list(t.stride()), t.requires_grad)
        for n, t in (*model.named_parameters(), *model.named_buffers())
    ]
    tv = getattr(sys.modules.get("torchvision"), "__version__", None)
    try:
        if callable(args[4]):  # the loss
            return None
        text = json.dumps([parts, tensors, args, torch.__version__, tv])
        digest, folder = _source_digest(), cache_dir() / "steptrace"
    except (TypeError, ValueError, CacheError):
        return None
    path = folder / digest / f"{hashlib.sha1(text.encode()).hexdigest()[:24]}.json"
    return None if is_special(path) else path


def _source_digest() -> str:
    """Of every ampbook source file's name, size and time: a change, a new folder."""
    root = Path(__file__).resolve().parents[1]
    stats = [(str(p.relative_to(root)), s.st_size, s.st_mtime_ns)
             for p in sorted(root.rglob("*.py")) for s in [p.stat()]]  # fmt: skip
    return hashlib.sha1(json.dumps(stats).encode()).hexdigest()[:16]


def _check_trace(
    batch_size, height, width, precision, in_channels, backward, loss, device_type,
    autocast_rules, input_shape,
) -> tuple[int, ...]:  # fmt: skip
    """One sample's shape; a ValueError naming a wrong argument."""
    for label, v, ok in (
        ("autocast_rules", autocast_rules, "'cuda' or 'cpu'"),
        ("device_type", device_type, "'cpu' or 'cuda'"),
    ):
        if v not in ("cuda", "cpu"):
            raise ValueError(f"{label} must be {ok}, got {v!r}")
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
    return shape


def _fake_state(model: nn.Module, batch_size: int, shape, device) -> tuple[dict, Any]:
    """Fake copies of ``model``'s parameters and buffers, and a fake fp32 input."""

    def fake(t: torch.Tensor, grad: bool) -> torch.Tensor:
        f = torch.empty_strided(
            tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device
        )
        return f.requires_grad_(grad)

    state = {n: fake(p, p.requires_grad) for n, p in model.named_parameters()}
    state.update({n: fake(b, False) for n, b in model.named_buffers()})
    x = torch.empty(batch_size, *shape, dtype=torch.float32, device=device)
    return state, x


def _loss_value(y, loss, device) -> torch.Tensor:
    """The traced step's loss of the model's output ``y``."""
    if isinstance(loss, str) and not isinstance(y, torch.Tensor):
        raise ValueError(
            f"the model returned a {type(y).__name__}, not a tensor: "
            "pass loss= a function of what it returns"
        )
    if loss == "cross_entropy":
        if y.dim() < 2:
            raise ValueError(
                f"cross_entropy needs N x C x ... logits; the model "
                f"returned shape {tuple(y.shape)}"
            )
        shape = (y.shape[0], *y.shape[2:])
        target = torch.zeros(shape, dtype=torch.long, device=device)
        return nn.functional.cross_entropy(y, target, ignore_index=255)
    if loss == "sum":
        return y.float().sum()
    return loss(y)


def relabel(trace: StepTrace, precision: str) -> StepTrace:
    """An AMP trace as the other 16-bit precision would trace (CUDA's autocast lists
    are the same for fp16 and bf16: only the dtype names change)."""
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
# The transposes cuDNN may put around a 16-bit convolution on NCHW tensors (the bound
# leaves them out: ``ampbook.predict.stepmodel``).
LAYOUT_TRANSPOSE = "nchw_nhwc_transpose"


def with_memory_format(
    trace: StepTrace, memory_format: str, transposes: bool = False
) -> StepTrace:
    """The traced step as it runs in ``memory_format``: NCHW as traced (``transposes``:
    cuDNN's assumed around every 16-bit 2-D convolution, 2 kernels moving its bytes
    once more); NHWC with one copy of each batch, outside the model."""
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
    if not transposes:
        return trace
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
    if device_type == "cuda" and autocast_dtype is not None:
        with autocast_region("cuda", autocast_dtype, fake=True) as device:
            yield device, contextlib.nullcontext
        return
    cast = contextlib.nullcontext  # with a dtype, device_type is "cpu" here
    if autocast_dtype is not None:
        cast = partial(torch.autocast, "cpu", dtype=autocast_dtype)
    with FakeTensorMode():
        yield torch.device(device_type), cast


def optimizer_bytes(
    parameters: int, optimizer: str = "adam", amp: bool = False
) -> float:
    """Bytes an optimizer step moves for ``parameters`` fp32 parameters: Adam reads
    parameter, gradient and both moments and writes parameter and moments (7 x 4 bytes);
    SGD with momentum 5 x 4; with ``amp`` GradScaler's unscale 2 x 4 more."""
    per = {"adam": 7, "adamw": 7, "sgd": 5}
    if optimizer not in per:
        raise ValueError(
            f"unknown optimizer {optimizer!r}; choose one of {sorted(per)}"
        )
    if parameters < 0:
        raise ValueError(f"parameters must be >= 0, got {parameters}")
    return float(parameters * 4 * (per[optimizer] + (2 if amp else 0)))
