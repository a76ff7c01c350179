"""Will AMP help *this* model? The diagnosis of any ``nn.Module`` behind ``python -m
ampbook.predict.doctor`` (the command, ``ampbook.predict.doctor``, parses the flags and
prints):

    python -m ampbook.doctor --model SPEC [--input C,H,W] [--batch N] [--output KEY]
        [--device auto|cpu|cuda] [--precisions fp32,amp-fp16,amp-bf16]
        [--gpus rtx3070-desktop,a100,h100,h200,4090,l4] [--loader-images-per-s X]
        [--memory-format channels_first|channels_last] [--forward-only]
        [--loss cross-entropy|mse] [--json FILE] [--markdown FILE]

``SPEC`` is ``erfnet`` (the book's network), ``torchvision:NAME`` (any torchvision
model, built with every weights argument off, ``weights=None`` and
``weights_backbone=None``: nothing is downloaded) or ``package.module:callable``
(called with no arguments, it must return an ``nn.Module``). ``--input`` is one sample's
shape, of any rank (``3,224,224`` for an image, ``3,16,112,112`` for a video clip,
``64,1000`` for a sequence). The loss is cross-entropy against random targets shaped
like the output (``N x C`` logits: one class per sample; ``N x C x ...``: one class per
pixel), or ``--loss mse`` against random values.

**What the model returns.** A tensor is the output. Otherwise the doctor reads one
tensor by a fixed rule (``select_output``): from a dict, its ``"out"`` entry
(torchvision's segmentation models), else its only tensor; from a tuple or list (a
named tuple too), its first tensor (the logits, before auxiliary heads). ``--output
KEY`` picks another: a dict key, a tuple index or a named-tuple field. The other
outputs are computed in the forward and get no gradient. A model whose ``forward``
takes several inputs, or whose shapes depend on its input's values (detection's box
selection), cannot be traced from one tensor of fake data: the doctor says so, and a
wrapper module whose ``forward(x)`` builds the inputs from one tensor makes it
traceable (the README's doctor section has one).

The report has five sections, printed as Markdown and kept in one JSON-ready dict
(``diagnose``):

1. **coverage**: of the traced step's forward and backward FLOPs and bytes, the share
   that CUDA's autocast runs in 16 bits, and the operators left in fp32 with the reason
   (autocast's fp32 list, a promotion, or an fp32 input such as a residual sum); ops the
   cost model does not model (unknown FLOPs, or a dtype such as complex64 it has no
   peak for) are named with the share of the step they leave out;
2. **memory**: bytes saved for backward (the book's memory figure,
``ampbook.measure.memory``),
   fp32 against AMP, counted at the requested size on the traced step (fake tensors: the
   autograd graph of the real size, with CUDA's attention and recurrent kernels, and no
   data), beside a real step measured on this device;
3. **roofline** per GPU of the device table (``ampbook.predict.costmodel.predict``): the
bound
   of fp32 with TF32 (for convolutions and matrix products), of each AMP precision,
   their ratio (the speedup if both precisions reached the same share of their bound:
   not an upper bound), the kernel counts, and the images/s the input pipeline must
   deliver;
4. **measured** on this device: the runner's own step (``ampbook.train.TrainStep``) per
   precision, on a CPU at a small size by chapter 5's rounds method
   (``ampbook.bench.step.time_rounds``: the precisions take turns, and the verdict
   says "no difference resolved" when the rounds disagree), fp16 at a tiny size with
   its measured ratio; on CUDA at the full size, with channels_last and cudnn.benchmark
   variants;
The report opens with its answer (``first_screen``, 24 lines x 80 columns): the
setting predicted (batch, input, the memory format of ``--memory-format``, default
channels_first, PyTorch's), one line per GPU with its faster AMP precision, the point
estimate, its range, the verdict in words ("a gain" or "a loss" only when the whole
range is on one side of 1.0), what bounds the step (launch, memory or compute) and a
committed measurement of the same network and GPU, then the warnings (a precision
whose step cannot fit a GPU's memory, with the largest batch that fits). ``diagnose``
hands it to its caller (``on_prediction``) before any step is timed.

5. **verdict**: the expected AMP speedup per GPU as a calibrated range
   (``ampbook.predict.calibration``: kernel efficiencies per operator class and dtype
   family from committed GPU layer profiles and published training throughputs, each
   named with its distance from this model), with the launch floor (kernels times the
   measured host time per kernel) and the cast kernels AMP adds, and a checklist per
   GPU: predicted and measured gains, upper bounds apart.

Every FLOP and byte comes from ``ampbook.predict.costmodel.trace_step`` (fake tensors:
the full size costs seconds, not memory), every dtype from the CPU autocast that stands
in for CUDA's (``ampbook.measure.autocast_trace``).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import logging
import math
import statistics
import time
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from ampbook.core import cli
from ampbook.core.precision import (
    AUTOCAST_DTYPES,
    backend_flags,
    torch_name,
)
from ampbook.core.words import plural
from ampbook.predict import costmodel as cm
from ampbook.results import PEAK_CUDA
from ampbook.results import SAVED_FOR_BACKWARD as SAVED

PRECISIONS = cm.PRECISIONS
AMP_PRECISIONS = tuple(p for p in PRECISIONS if p != "fp32")
LOSSES = ("cross-entropy", "mse")
# Largest batch x pixels at which a CPU step is timed in fp16 (batch 2 of 32 x 32):
# fp16 training steps on CPUs were measured many times slower than fp32; the doctor
# prints the ratio it measures there, and no cause.
CPU_FP16_MAX_PIXELS = 2 * 32 * 32
# A CPU step is timed at an input scaled down to about this many pixels on a side.
CPU_MEASURE_SIDE = 32
# Rounds of the CPU timing (chapter 5's method: the precisions take turns).
CPU_ROUNDS = 5
ERFNET_INPUT = (3, 512, 1024)
DEFAULT_INPUT = (3, 224, 224)
SIXTEEN_BIT = ("float16", "bfloat16")
# Measured steps within this fraction of each other are reported as the same speed.
SAME_SPEED = 0.05
# A model that rejects the fake input is run on one real zero sample to say why in its
# own words, only up to this many elements (12 MiB of fp32: 3 x 1024 x 1024).
REAL_PROBE_MAX_ELEMENTS = 3 * 1024 * 1024
REPORT_SCHEMA = "ampbook.doctor/2"  # the --json report's schema (``diagnose``)


class DoctorError(ValueError, cli.UserError):
    """Bad input to the doctor: the message says what is wrong and what to do."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


# --------------------------------------------------------------------------------------
# the model, the input and the GPUs
# --------------------------------------------------------------------------------------


def _torchvision_model(name: str) -> nn.Module:
    """A torchvision model with every weights argument off (``weights=None``, and
    ``weights_backbone=None`` for the models built on a backbone): nothing is
    downloaded."""
    import torchvision

    builder = torchvision.models.get_model_builder(name)
    params = inspect.signature(builder).parameters
    kwargs = {k: None for k in ("weights", "weights_backbone") if k in params}
    return builder(**kwargs)


def load_model(spec: str) -> nn.Module:
    """The module ``spec`` names: ``erfnet``, ``torchvision:NAME`` (no weights) or
    ``package.module:callable``."""
    if spec == "erfnet":
        from ampbook.segmentation.cityscapes import NUM_CLASSES
        from ampbook.segmentation.model import ERFNet

        return ERFNet(NUM_CLASSES)
    if ":" not in spec:
        raise DoctorError(
            f"unknown model {spec!r}: use 'erfnet', 'torchvision:NAME' or "
            "'package.module:callable'"
        )
    where, name = spec.split(":", 1)
    if not where.strip() or not name.strip() or where.startswith("."):
        raise DoctorError(
            f"model {spec!r}: give package.module:callable with a module name that is "
            "not relative and a callable's name, e.g. mypackage.models:build"
        )
    if where == "torchvision":
        import torchvision

        names = torchvision.models.list_models()
        if name not in names:
            near = [n for n in names if name.lower() in n] or names[:6]
            raise DoctorError(
                f"unknown torchvision model {name!r}: try one of {', '.join(near[:8])} "
                f"(torchvision.models.list_models() has {len(names)})"
            )
        return _torchvision_model(name)
    try:
        module = importlib.import_module(where)
    except ImportError as e:
        raise DoctorError(
            f"cannot import {where!r} for model {spec!r} ({_first_line(e)}): is the "
            "package on PYTHONPATH?"
        ) from None
    except (Exception, SystemExit) as e:  # the user's module failed as it loaded
        raise DoctorError(
            f"importing {where!r} for model {spec!r} raised {type(e).__name__}: "
            f"{_first_line(e)}"
        ) from None
    factory = getattr(module, name, None)
    if factory is None or not callable(factory):
        raise DoctorError(f"{where} has no callable {name!r} for model {spec!r}")
    try:
        model = factory()
    except SystemExit as e:  # a script's sys.exit(): not a model, and not a success
        raise DoctorError(
            f"{spec}() called sys.exit({e.code!r}) instead of returning a model: "
            "make it return the nn.Module"
        ) from None
    except Exception as e:  # the user's code: report it in one line
        raise DoctorError(
            f"{spec}() raised {type(e).__name__}: {_first_line(e)}"
        ) from e
    if not isinstance(model, nn.Module):
        raise DoctorError(
            f"{spec}() returned {type(model).__name__}, not an nn.Module: make it "
            "return the model"
        )
    return model


def default_input(spec: str) -> tuple[int, ...]:
    """ERFNet's book setting (3 x 512 x 1024), else an ImageNet image (3 x 224 x
    224)."""
    return ERFNET_INPUT if spec == "erfnet" else DEFAULT_INPUT


def parse_input(text: str) -> tuple[int, ...]:
    """``"3,224,224"`` -> (3, 224, 224): one sample's shape, any number of positive
    dimensions (``3,16,112,112`` for a video clip: C, T, H, W)."""
    parts = [p.strip() for p in str(text).replace("x", ",").split(",")]
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if not dims or min(dims) < 1:
        raise DoctorError(
            f"--input {text!r}: give one sample's shape as positive integers, e.g. "
            "3,224,224 (C,H,W) or 3,16,112,112 (C,T,H,W)"
        )
    return dims


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


def parse_precisions(text: str | Sequence[str]) -> list[str]:
    """The precisions asked for; the baseline is always among them, named "fp32" in
    the list returned (and the report's JSON). The doctor's baseline is fp32 with TF32
    on for convolutions and matrix products where the GPU has TF32, so its mode name,
    ``fp32-tf32`` (``modes.TF32_MODE``), is accepted for it, and so is ``fp32``."""
    from ampbook.core.modes import TF32_MODE

    items = text.split(",") if isinstance(text, str) else list(text)
    items = [p.strip() for p in items if p.strip()]
    bad = [p for p in items if p not in (TF32_MODE, *PRECISIONS)]
    if bad or not items:
        raise DoctorError(
            f"--precisions {','.join(items) or repr(text)}: unknown {bad or 'empty'}; "
            f"choose from {','.join((TF32_MODE, *AMP_PRECISIONS))} ({TF32_MODE}, the "
            "baseline, may also be written fp32)"
        )
    return ["fp32"] + [p for p in AMP_PRECISIONS if p in items]


def _gpu_name(text: str) -> str:
    """A GPU name as ``--gpus`` compares it: lower case, without the vendor, spaces,
    hyphens or underscores (``"GeForce RTX 4090"`` -> ``"rtx4090"``)."""
    text = text.lower().replace("nvidia", "").replace("geforce", "")
    return "".join(ch for ch in text if ch.isalnum())


def gpu_hits(raw: str, devices) -> list[str]:
    """The table keys one ``--gpus`` name can mean, best rule first: the key itself,
    an alias (``a100``), the short name (``RTX 4090``, ``l4``), then any key or short
    name containing it (``4090``)."""
    raw = raw.strip().lower()
    norm = _gpu_name(raw)
    rules = (
        lambda k, d: k == raw,
        lambda k, d: raw in d.aliases or norm in map(_gpu_name, d.aliases),
        lambda k, d: norm == _gpu_name(d.short_name) or norm == _gpu_name(k),
        lambda k, d: bool(norm) and (norm in _gpu_name(k)
                                     or norm in _gpu_name(d.short_name)),
    )  # fmt: skip
    for rule in rules:
        hits = [k for k, d in devices.items() if rule(k, d)]
        if hits:
            return hits
    return []


def resolve_gpus(names: str | Sequence[str] | None, devices=None) -> list[str]:
    """Keys of the device table for ``names`` (``gpu_hits``: a key, an alias such as
    ``a100``, a short name such as ``l4`` or ``RTX 4090``, or a part of exactly one
    key or short name such as ``4090``). None: every GPU. An unknown or ambiguous
    name, or a value that names none (``""``, ``",,"``), is an error that lists what
    the table knows."""
    from ampbook.core.devices import load_devices

    devices = load_devices() if devices is None else devices
    if names is None:
        return list(devices)
    items = names.split(",") if isinstance(names, str) else list(names)
    if not any(str(n).strip() for n in items):
        known = ", ".join(f"{k} ({d.short_name})" for k, d in devices.items())
        given = names if isinstance(names, str) else ",".join(map(str, items))
        raise DoctorError(
            f"--gpus {given!r} names no GPU; give one or more, comma-separated, of "
            f"{known} (or leave --gpus out for all of them)"
        )
    keys = []
    for raw in (n.strip().lower() for n in items if n.strip()):
        hits = gpu_hits(raw, devices)
        if len(hits) != 1:
            known = ", ".join(
                f"{k} ({devices[k].short_name})" for k in (hits or devices)
            )
            what = (
                f"ambiguous GPU {raw!r}: it names {known}"
                if hits
                else (f"unknown GPU {raw!r}; the table knows {known}")
            )
            raise DoctorError(f"--gpus: {what} (a key, a short name or an alias)")
        if hits[0] not in keys:
            keys.append(hits[0])
    return keys


def _loss_fn(loss: str):
    """The traced loss: cross-entropy (trace_step's own) or MSE against zeros."""
    if loss == "cross-entropy":
        return "cross_entropy"
    return lambda y: nn.functional.mse_loss(y, torch.zeros_like(y))


@contextlib.contextmanager
def _quiet_fake():
    """Silence the fake-tensor module's logged traceback while a model's own error
    propagates (the doctor reports it in one line)."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


# --------------------------------------------------------------------------------------
# what the model returns
# --------------------------------------------------------------------------------------

OUTPUT_RULE = (
    "a tensor as it is; a dict's 'out' entry, else its only tensor; a tuple's or "
    "list's first tensor; --output KEY picks another"
)


def _pick(y, key: str | None):
    """The tensor ``select_output`` reads, or a DoctorError naming what was there."""
    if isinstance(y, torch.Tensor) and key is None:
        return y
    if isinstance(y, dict):
        keys = list(y)
        if key is not None:
            if key not in y:
                raise DoctorError(
                    f"--output {key!r}: the model returns a dict with keys "
                    f"{keys}; pass one of them"
                )
            return y[key]
        if "out" in y:
            return y["out"]
        tensors = [k for k, v in y.items() if isinstance(v, torch.Tensor)]
        if len(tensors) == 1:
            return y[tensors[0]]
        raise DoctorError(
            f"the model returns a dict with keys {keys} and no 'out': pass --output "
            "KEY to say which one is the output"
        )
    if isinstance(y, (tuple, list)):
        if key is not None:
            fields = getattr(y, "_fields", ())
            if key in fields:
                return getattr(y, key)
            try:
                return y[int(key)]
            except (ValueError, IndexError):
                named = f" or one of {list(fields)}" if fields else ""
                raise DoctorError(
                    f"--output {key!r}: the model returns a {type(y).__name__} of "
                    f"{len(y)}; pass an index below {len(y)}{named}"
                ) from None
        first = next((v for v in y if isinstance(v, torch.Tensor)), None)
        if first is None:
            raise DoctorError(
                f"the model returns a {type(y).__name__} without a tensor in it: pass "
                "--output KEY, or wrap it so that forward returns the logits"
            )
        return first
    if isinstance(y, torch.Tensor):
        raise DoctorError(f"--output {key!r}: the model returns one tensor; drop it")
    raise DoctorError(
        f"the model returned {type(y).__name__}, not a tensor: wrap it so that "
        "forward returns the logits"
    )


def select_output(y, key: str | None = None) -> torch.Tensor:
    """The output the doctor's loss reads (``OUTPUT_RULE``)."""
    out = _pick(y, key)
    if not isinstance(out, torch.Tensor):
        raise DoctorError(
            f"the output the doctor read ({key or 'by its rule'}) is a "
            f"{type(out).__name__}, not a tensor: pass --output KEY"
        )
    return out


class SelectOutput(nn.Module):
    """``model`` whose forward returns the one tensor ``select_output`` reads."""

    def __init__(self, model: nn.Module, key: str | None = None):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x):
        return select_output(self.model(x), self.key)


def _forward_inputs(model: nn.Module) -> list[str]:
    """The names of the positional inputs ``model.forward`` requires."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return ["x"]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in kinds and p.default is p.empty]


def _data_dependent(err: BaseException) -> bool:
    """Whether a fake-tensor forward failed because an output's shape depends on the
    input's values (``nonzero``, non-maximum suppression, ``.item()``)."""
    from torch._subclasses import fake_tensor as ft

    kinds = tuple(
        getattr(ft, n)
        for n in ("DataDependentOutputException", "DynamicOutputShapeException")
        if hasattr(ft, n)
    )
    text = f"{type(err).__name__} {err}"
    return isinstance(err, kinds) or any(
        w in text for w in ("data-dependent", "data dependent", "DataDependent")
    )


WRAP_HINT = (
    "wrap it in a module whose forward(x) builds them from one tensor (see the "
    "README's doctor section)"
)


def _fake_forward(model: nn.Module, shape: Sequence[int], batch: int):
    """One training-mode forward of ``model`` on fake tensors (its parameters and
    buffers replaced by fake copies: nothing computed, nothing changed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call

    with _quiet_fake(), FakeTensorMode():

        def fake(t):
            return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype)

        state = {n: fake(p) for n, p in model.named_parameters()}
        state.update({n: fake(b) for n, b in model.named_buffers()})
        was = model.training
        model.train()
        try:
            with torch.no_grad():
                return functional_call(model, state, (torch.empty(batch, *shape),))
        finally:
            model.train(was)


_PROBES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def output_shape(
    model: nn.Module, shape: Sequence[int], batch: int, key: str | None = None
) -> tuple[int, ...]:
    """The shape of the output the doctor reads (``select_output``) for ``batch``
    inputs of ``shape``, from a training-mode forward on fake tensors (nothing
    computed). A model that rejects the input, needs several inputs or has
    data-dependent shapes raises DoctorError saying so."""
    return _probe(model, shape, batch, key)[0]


def returns_tensor(model: nn.Module, shape: Sequence[int], batch: int) -> bool:
    """Whether the model's forward returns a plain tensor (else the doctor wraps it in
    ``SelectOutput``)."""
    return _probe(model, shape, batch, None)[1]


def _probe(model, shape, batch, key) -> tuple[tuple[int, ...], bool, str]:
    cache = _PROBES.setdefault(model, {})
    k = (tuple(shape), batch, key)
    if k not in cache:
        cache[k] = _probe_uncached(model, shape, batch, key)
    return cache[k]


def _probe_uncached(model, shape, batch, key) -> tuple[tuple[int, ...], bool, str]:
    needs = _forward_inputs(model)
    if len(needs) > 1:
        raise DoctorError(
            f"the model's forward takes {len(needs)} inputs ({', '.join(needs)}); the "
            f"doctor feeds one tensor: {WRAP_HINT}"
        )
    try:
        y = _fake_forward(model, shape, batch)
    except DoctorError:
        raise
    except Exception as fake_error:
        if _data_dependent(fake_error):
            raise DoctorError(
                "the model's shapes depend on its input's values (an operator such as "
                "nonzero or non-maximum suppression, as in detection models), which "
                "fake tensors cannot trace: give the doctor the part whose shapes are "
                f"fixed (the backbone), or {WRAP_HINT}"
            ) from None
        err: BaseException = fake_error
        # The model's own complaint about the shape: a real forward of one sample says
        # it in the model's words (fake tensors report their own meta-kernel messages),
        # where one sample is small enough to run here.
        try:
            if math.prod(shape) > REAL_PROBE_MAX_ELEMENTS:
                raise fake_error
            with torch.no_grad():
                was = model.training
                model.eval()
                try:
                    model(torch.zeros(1, *shape))
                finally:
                    model.train(was)
        except Exception as real:
            err = real
        targets = "targets" in inspect.signature(model.forward).parameters
        hint = (
            f"; it takes targets in training mode (a detection model?): {WRAP_HINT}"
            if targets
            else "; pass --input with a shape it accepts"
        )
        raise DoctorError(
            f"the model rejects input {_shape_text(shape)} at batch {batch}: "
            f"{type(err).__name__}: {_first_line(err)}{hint}"
        ) from None
    return tuple(select_output(y, key).shape), isinstance(y, torch.Tensor), _how(y, key)


def _how(y, key: str | None) -> str:
    """Which output ``select_output`` read, in words."""
    if key is not None:
        return f"--output {key}"
    if isinstance(y, torch.Tensor):
        return "the tensor it returns"
    kind = type(y).__name__
    if isinstance(y, dict):
        if "out" in y:
            return f"the {kind}'s 'out' entry"
        only = next(k for k, v in y.items() if isinstance(v, torch.Tensor))
        return f"the {kind}'s only tensor, {only!r}"
    return f"the first tensor of the {kind}"


def output_rule(model: nn.Module, shape: Sequence[int], batch: int, key=None) -> str:
    """Which output the doctor reads for this model, in words (``OUTPUT_RULE``)."""
    return _probe(model, shape, batch, key)[2]


def _check_loss(loss: str, out: Sequence[int]) -> None:
    if loss == "cross-entropy" and len(out) < 2:
        raise DoctorError(
            f"cross-entropy needs N x C (x ...) logits; the model returns shape "
            f"{tuple(out)}: pass --loss mse"
        )


def targets(loss: str, out: Sequence[int], generator=None) -> torch.Tensor:
    """Random targets shaped like the output: class indices per image or per pixel for
    cross-entropy, values for MSE."""
    if loss == "mse":
        return torch.randn(tuple(out), generator=generator)
    return torch.randint(0, out[1], (out[0], *out[2:]), generator=generator)


# --------------------------------------------------------------------------------------
# 1. coverage
# --------------------------------------------------------------------------------------

_CREATION_OPS = {"zeros", "ones", "full", "arange", "scalar_tensor", "randn", "rand"}


def fp32_reason(op: cm.OpCost) -> str:
    """Why an operator of an AMP trace ran in fp32, in a few words: CUDA autocast's
    fp32 list or promotion (named, from the installed torch's lists:
    ``autocast_trace.cuda_category``), a cast, the loss, the autograd engine, a tensor
    created in fp32, or an fp32 input (an op autocast does not list runs in its inputs'
    dtype, so one fp32 input, such as the skip path of a residual sum, makes it
    fp32)."""
    from ampbook.measure.autocast_trace import aten_base, cuda_category

    base = aten_base(op.op)
    grad = op.phase == "backward"
    of = "gradient of " if grad else ""
    if op.op == "_to_copy":
        return "gradient cast to fp32" if grad else "cast to fp32"
    category = cuda_category(op.op)
    if category == "float32":
        return f"{of}fp32 list ({base})"
    if category == "promote":
        return f"{of}promoted to widest input ({base})"
    if op.scope == cm.AUTOGRAD:
        return "gradient accumulation (autograd)"
    if op.scope == cm.LOSS:
        return f"{of}loss on fp32 values"
    if op.op in _CREATION_OPS or op.op.startswith("new_"):
        return "created in fp32"
    return "gradient of an fp32 op" if grad else "fp32 input (e.g. residual sum)"


def unmodelled(p: cm.Prediction) -> list[dict[str, Any]]:
    """Operators whose FLOPs the cost model does not know, or that compute in a dtype
    it has no peak for (``StepTrace.unmodelled``): their bytes are counted, their FLOPs
    are not; each with its share of the step's bytes and of the predicted time."""
    return [dict(r) for r in p.unmodelled]


def unmodelled_line(rows: Sequence[dict[str, Any]]) -> str | None:
    """One warning line naming the unmodelled operators and their share, or None."""
    if not rows:
        return None
    names = ", ".join(
        f"{r['op']} ({r.get('why') or 'FLOPs unknown'}: {r['bytes_share']:.1%} of the "
        f"bytes, {r['time_share']:.1%} of the predicted time)"
        for r in rows[:5]
    )
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    return (
        f"{len(rows)} operator{'s' if len(rows) != 1 else ''} not modelled: "
        f"{names}{more}; their FLOPs are left out of the roofline"
    )


def coverage(trace: cm.StepTrace, p: cm.Prediction | None = None) -> dict[str, Any]:
    """Section 1: the 16-bit share of an AMP trace, per phase, the fp32 rest, and (with
    its prediction ``p``) the operators left unmodelled."""
    shares = {}
    for phase in ("forward", "backward"):
        ops = trace.select(phase)
        flops = sum(o.flops for o in ops) or 1.0
        nbytes = sum(o.bytes for o in ops) or 1.0
        low = [o for o in ops if o.dtype in SIXTEEN_BIT]
        shares[phase] = {
            "flops_16bit": sum(o.flops for o in low) / flops,
            "bytes_16bit": sum(o.bytes for o in low) / nbytes,
            "mma_flops_16bit": sum(o.mma_flops for o in low)
            / (sum(o.mma_flops for o in ops) or 1.0),
        }
    total_flops = sum(o.flops for o in trace.ops) or 1.0
    total_bytes = sum(o.bytes for o in trace.ops) or 1.0
    groups: dict[tuple, dict[str, Any]] = {}
    for o in trace.ops:
        if o.dtype != "float32":
            continue
        key = (o.phase, o.op, o.scope_type)
        g = groups.setdefault(
            key,
            {
                "phase": o.phase,
                "op": o.op,
                "layer_type": o.scope_type,
                "count": 0,
                "flops_share": 0.0,
                "bytes_share": 0.0,
                "example": o.scope,
                "reason": fp32_reason(o),
            },
        )
        g["count"] += 1
        g["flops_share"] += o.flops / total_flops
        g["bytes_share"] += o.bytes / total_bytes
    fp32_ops = sorted(groups.values(), key=lambda g: -g["bytes_share"])
    return {
        "precision": trace.precision,
        "phases": shares,
        "fp32_ops": fp32_ops,
        "unmodelled": unmodelled(p) if p is not None else [],
    }


def cast_kernels(traces: dict[str, cm.StepTrace], precision: str) -> int:
    """The dtype conversions (``_to_copy``) an AMP step adds over fp32's: autocast's
    casts of weights and activations and their gradients' casts back."""

    def casts(tr: cm.StepTrace) -> int:
        return sum(o.kernels for o in tr.ops if o.op == "_to_copy")

    return casts(traces[precision]) - casts(traces["fp32"])


def layout_kernels(traces: dict[str, cm.StepTrace], precision: str) -> int:
    """The layout transposes an AMP step adds over fp32's: those ``with_memory_format``
    models around every 16-bit convolution in NCHW (assumed, not traced)."""

    def moves(tr: cm.StepTrace) -> int:
        return sum(o.kernels for o in tr.ops if o.op == cm.LAYOUT_TRANSPOSE)

    return moves(traces[precision]) - moves(traces["fp32"])


# --------------------------------------------------------------------------------------
# 2. memory
# --------------------------------------------------------------------------------------


def memory_at_size(traces: dict[str, cm.StepTrace], amp: str | None) -> dict[str, Any]:
    """Bytes saved for backward at the requested size, fp32 and AMP, counted on the
    traced steps (``StepTrace.saved_tensors``: the saved-tensor meter on the autograd
    graph of the real size, fake tensors without data, CUDA's autocast lists and
    kernels), and the weights, gradients and Adam state beside them."""
    from ampbook.measure.memory import ADAM_STATE_BYTES_PER_PARAM

    fp32 = traces["fp32"]
    out: dict[str, Any] = {
        "batch": fp32.batch_size,
        "input": list(fp32.input_shape or ()),
        "fp32_bytes": fp32.saved_tensors["new_bytes"],
        "state_bytes": ADAM_STATE_BYTES_PER_PARAM * fp32.parameters,
        "method": "counted at the requested size on the traced step (fake tensors: "
        "the real size's autograd graph, no data)",
    }
    if amp is not None:
        a = traces[amp].saved_tensors
        out.update(
            amp_precision=amp,
            amp_bytes=a["new_bytes"],
            amp_over_fp32=a["new_bytes"] / out["fp32_bytes"]
            if out["fp32_bytes"]
            else None,
            amp_fp32_part=a["by_dtype"].get("float32", 0),
        )
    return out


def weight_copy_bytes(model: nn.Module) -> int:
    """Bytes of the 16-bit copies autocast makes of the weights of convolutions and
    linear layers (2 bytes per element), once per step whatever the batch: at most what
    backward keeps of them (a convolution saves its cast weight; a linear layer only
    when its input needs a gradient, so not the first layer's)."""
    from ampbook.numerics.gradstats import LOW_PRECISION_LAYERS

    return 2 * sum(
        m.weight.numel()
        for m in model.modules()
        if isinstance(m, LOW_PRECISION_LAYERS)
        and isinstance(getattr(m, "weight", None), torch.Tensor)
    )


def fake_saved_bytes(
    model: nn.Module, shape: Sequence[int], batch: int, loss: str, precision: str
) -> int:
    """New bytes saved for backward by one forward and loss on fake tensors (a trace
    without its backward), to hold against a real step's count at the same size."""
    tr = cm.trace_step(
        model, batch, 1, 1, precision, input_shape=shape, backward=False,
        loss=_loss_fn(loss),
    )  # fmt: skip
    return tr.saved_tensors["new_bytes"]


# --------------------------------------------------------------------------------------
# 3. roofline per GPU
# --------------------------------------------------------------------------------------


def roofline(
    traces: dict[str, cm.StepTrace],
    gpus: Sequence[str],
    loader_images_per_s: float | None = None,
    devices=None,
) -> list[dict[str, Any]]:
    """Section 3: per GPU and AMP precision, the bounds and what they need.

    fp32 three ways: with TF32 for convolutions and matrix products (``fp32_tf32_s``,
    the baseline of every speedup), with PyTorch's defaults (TF32 for cuDNN's
    convolutions, not for matrix products: ``fp32_default_s``) and without TF32
    (``fp32_strict_s``)."""
    from ampbook.core.devices import display_name, load_devices
    from ampbook.predict.calibration import class_bounds

    devices = load_devices() if devices is None else devices
    rows = []
    batch = traces["fp32"].batch_size
    fp32_kernels = int(traces["fp32"].totals()["kernels"])
    for key in gpus:
        d = devices[key]
        on = cm.Ceilings.from_device(d, tf32=True, matmul_tf32=True)
        default = cm.Ceilings.from_device(d, tf32=True, matmul_tf32=False)
        off = cm.Ceilings.from_device(d, tf32=False, matmul_tf32=False)
        p_on = cm.predict(traces["fp32"], on)
        p_def = cm.predict(traces["fp32"], default)
        p_off = cm.predict(traces["fp32"], off)
        for prec, tr in traces.items():
            if prec == "fp32":
                continue
            dtype = torch_name(AUTOCAST_DTYPES[prec])
            row = {
                "gpu": key,
                "gpu_name": display_name(key, devices),
                "precision": prec,
                "fp32_tf32_s": p_on.min_step_s,
                "fp32_default_s": p_def.min_step_s,
                "fp32_strict_s": p_off.min_step_s,
                "fp32_memory_bound_share": p_on.memory_bound_share,
                "fp32_by_class_s": class_bounds(p_on),
                "fp32_kernels": fp32_kernels,
            }
            if dtype not in on.mma_tflops:
                row.update(
                    amp_s=None,
                    note=f"the {row['gpu_name']} has no {dtype} tensor cores",
                )
                rows.append(row)
                continue
            p = cm.predict(tr, on)
            row.update(
                amp_s=p.min_step_s,
                amp_by_class_s=class_bounds(p),
                amp_kernels=int(tr.totals()["kernels"]),
                speedup_tf32=p_on.min_step_s / p.min_step_s,
                speedup_default=p_def.min_step_s / p.min_step_s,
                speedup_strict=p_off.min_step_s / p.min_step_s,
                memory_bound_share=p.memory_bound_share,
                mma_share=_mma_share(p),
                images_per_s_needed=batch / p.min_step_s,
                fp32_images_per_s_needed=batch / p_on.min_step_s,
                fusable_s=class_bounds(p)["elementwise"],
            )
            if loader_images_per_s:
                row["epoch_bound"] = (
                    "loader"
                    if loader_images_per_s < row["images_per_s_needed"]
                    else "step"
                )
                row["pace"] = cm.pace_verdict(
                    loader_images_per_s,
                    row["images_per_s_needed"],
                    f"on the {row['gpu_name']}",
                )
            rows.append(row)
    return rows


def _mma_share(p: cm.Prediction) -> float:
    """Share of the predicted step (operators only) in convolutions/matrix products."""
    total = sum(t.time_s for t in p.times) or 1.0
    return sum(t.time_s for t in p.times if t.op.mma_flops) / total


def where_time_goes(p: cm.Prediction, top: int = 6) -> list[dict[str, Any]]:
    """The layer types that take most of a predicted step, with their intensity and
    whether they are memory-bound (``Prediction.by_type``)."""
    rows = p.by_type()
    total = sum(r["time_s"] for r in rows) or 1.0
    nbytes = sum(r["bytes"] for r in rows) or 1.0
    return [
        {
            "layer_type": r["type"],
            "modules": r["modules"],
            "time_share": r["time_s"] / total,
            "bytes_share": r["bytes"] / nbytes,
            "flops_per_byte": r["intensity"],
            "bound": r["bound"],
        }
        for r in rows[:top]
    ]


# --------------------------------------------------------------------------------------
# 4. measured on this device
# --------------------------------------------------------------------------------------


def _scaled(shape: Sequence[int], side: int) -> tuple[int, ...]:
    """``shape`` with its last two dimensions (the last one for a sequence, none for a
    vector) scaled down to about ``side`` each, multiples of 32 (at least 32, at most
    the original)."""
    shape = tuple(shape)
    n = min(2, len(shape) - 1)
    if n <= 0:
        return shape
    spatial = shape[-n:]
    f = max(1, math.ceil(max(spatial) / side))
    small = tuple(min(s, max(32, round(s / f / 32) * 32)) for s in spatial)
    return shape[:-n] + small


def measure_size(
    model: nn.Module,
    shape: Sequence[int],
    batch: int,
    device: torch.device,
    key: str | None = None,
) -> tuple[tuple[int, ...], int]:
    """Where to time steps: the full size on CUDA; on a CPU an input scaled to about
    ``CPU_MEASURE_SIDE`` pixels a side (``_scaled``) and batch <= 2, or the full input
    at batch 2 when the model accepts no other."""
    if device.type == "cuda":
        return tuple(shape), batch
    small = _scaled(shape, CPU_MEASURE_SIDE)
    try:
        output_shape(model, small, min(batch, 2), key)
        return small, min(batch, 2)
    except DoctorError:
        return tuple(shape), min(batch, 2)


def _variants(device: torch.device, precisions: Sequence[str]):
    """(label, precision, tf32, channels_last, cudnn_benchmark, skip reason)."""
    if device.type == "cuda":
        out = [("fp32 (TF32 on)", "fp32", True, False, False, None)]
        out.append(("fp32 (TF32 off)", "fp32", False, False, False, None))
        for p in precisions[1:]:
            ok = p != "amp-bf16" or torch.cuda.is_bf16_supported()
            why = None if ok else "this GPU has no bf16"
            out.append((p, p, True, False, False, why))
            out.append((f"{p} + channels_last", p, True, True, False, why))
            out.append((f"{p} + cudnn.benchmark", p, True, False, True, why))
        return out
    return [(p, p, False, False, False, None) for p in precisions]


class ForwardStep:
    """The forward pass and loss alone, under autocast when the precision has one and
    without autograd (``--forward-only``: inference, or a model with nothing to
    train); called as the runner's step is, ``step(x, y, meter=None)``."""

    def __init__(self, model, criterion, device, autocast_dtype, channels_last=False):
        self.model, self.criterion, self.device = model, criterion, device
        self.autocast_dtype, self.channels_last = autocast_dtype, channels_last

    def __call__(self, x, y, meter=None):
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        cast = (
            torch.autocast(self.device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        with torch.no_grad(), cast, meter or contextlib.nullcontext():
            return self.criterion(self.model(x), y)


class _Variant:
    """One timed variant: its own copy of the model, optimizer and the runner's step
    (or the forward pass alone, ``ForwardStep``, when ``backward`` is False), with the
    CUDA flags it runs under."""

    def __init__(self, model, device, prec, tf32, cl, bench, x, y, backward=True):
        from ampbook.train import TrainStep

        net = copy.deepcopy(model).to(device)
        if cl:
            net = net.to(memory_format=torch.channels_last)
        crit = nn.MSELoss() if y.is_floating_point() else nn.CrossEntropyLoss()
        dtype = AUTOCAST_DTYPES[prec]
        self.net, self.device = net, device
        if backward:
            opt = torch.optim.Adam(net.parameters(), lr=1e-4)
            scaler = torch.amp.GradScaler(device.type) if prec == "amp-fp16" else None
            self.step = TrainStep(
                net, opt, crit, device, dtype, scaler, channels_last=cl
            )
        else:
            self.step = ForwardStep(net, crit, device, dtype, channels_last=cl)
        self.x, self.y = x.to(device), y.to(device)
        self.tf32, self.bench = tf32, bench
        self.times: list[float] = []

    def flags(self):
        """The variant's TF32 and cudnn.benchmark flags on CUDA (restored after);
        nothing on a CPU."""
        if self.device.type != "cuda":
            return contextlib.nullcontext()
        return backend_flags(tf32=self.tf32, cudnn_benchmark=self.bench)

    def time(self, warmup: int, repeats: int) -> None:
        from ampbook.measure.timing import benchmark

        with self.flags():
            r = benchmark(
                self.step,
                lambda: (self.x, self.y),
                device=self.device,
                warmup=warmup,
                repeats=repeats,
                number=1,
                min_time=0.0,
                buffers=1,
                check_inputs=False,
            )
        self.times += list(r.times_s)

    def memory(self) -> tuple[int, str]:
        from ampbook.measure.memory import SavedTensorMeter

        with self.flags():
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(self.device)
                self.step(self.x, self.y)
                return torch.cuda.max_memory_allocated(self.device), PEAK_CUDA
            meter = SavedTensorMeter(model=self.net)
            self.step(self.x, self.y, meter=meter)
            return meter.new_bytes, SAVED


def _finish(row: dict, v: _Variant) -> None:
    """A timed variant's row: median and fastest step, samples, memory."""
    row["memory_bytes"], row["memory_measure"] = v.memory()
    row.update(
        step_s=statistics.median(v.times),
        min_step_s=min(v.times),
        samples=len(v.times),
    )


def _batch_for(model, shape, batch, loss, key, seed=0):
    out = output_shape(model, shape, batch, key)
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *shape, generator=g), targets(loss, out, g)


def _progress(progress) -> cli.Progress:
    """``progress`` as a ``cli.Progress``: one given, or a new one (``True`` on,
    ``False`` off, None: on where stderr is a terminal)."""
    if isinstance(progress, cli.Progress):
        return progress
    return cli.Progress("doctor", progress)


def _cpu_rounds(
    model, shape, batch, loss, precisions, key, rounds, progress=None, backward=True
):
    """The CPU's precisions timed by chapter 5's rounds method at one size: rows with
    each one's median step, the median of its per-round ratios to fp32 and the
    ratios. ``progress`` (a ``cli.Progress``) is told of each round as it ends."""
    from ampbook.measure.timing import time_rounds

    progress = _progress(progress or False)

    x, y = _batch_for(model, shape, batch, loss, key)
    dev = torch.device("cpu")
    rows, steps, live = [], {}, {}
    for p in precisions:
        row = {"variant": p, "precision": p, "skipped": None}
        rows.append(row)
        try:
            progress(f"first {p} step on the cpu (it builds the kernels; untimed)")
            v = _Variant(model, dev, p, False, False, False, x, y, backward)
            # the first step builds oneDNN's kernels: untimed, it counts the memory
            row["memory_bytes"], row["memory_measure"] = v.memory()
        except Exception as e:  # e.g. an op without a kernel for this dtype here
            row["skipped"] = f"failed: {type(e).__name__}: {_first_line(e)}"
            continue
        steps[p], live[p] = (v.step, (v.x, v.y), dev), v
    times: dict[str, list[float]] = {p: [] for p in steps}
    where = f"batch {batch} x {_shape_text(shape)}"
    if steps:
        progress(f"measuring {', '.join(steps)} on the cpu at {where}")
    start = time.monotonic()
    for i in range(rounds if steps else 0):  # one round at a time: the same turns
        for p, ts in time_rounds(steps, 1, warmup=False).items():
            times[p] += ts
        left = cli.time_left_text(time.monotonic() - start, i + 1, rounds)
        tail = f", {left}" if left else ""
        progress(f"measuring on cpu: round {i + 1} of {rounds}{tail}")
    for row in rows:
        p = row["precision"]
        if p not in live:
            continue
        t = times[p]
        row.update(step_s=statistics.median(t), min_step_s=min(t), samples=len(t))
        if p != "fp32" and "fp32" in times:
            ratios = [a / b for a, b in zip(times["fp32"], times[p])]
            row.update(speedup=statistics.median(ratios), ratios=ratios)
        elif p == "fp32":
            row["speedup"] = 1.0
    return rows


def measure(
    model: nn.Module,
    shape: Sequence[int],
    batch: int,
    loss: str,
    precisions: Sequence[str],
    device: torch.device,
    repeats: int = 3,
    key: str | None = None,
    size: tuple[Sequence[int], int] | None = None,
    rounds: int = CPU_ROUNDS,
    progress: bool | cli.Progress | None = None,
    backward: bool = True,
) -> dict[str, Any]:
    """Section 4: the runner's step timed per precision (and layout/flag) here.
    ``progress``: lines on stderr per CPU round and CUDA variant (a ``cli.Progress``,
    or True/False; None: on a terminal).

    On a CPU (``size`` overrides the input and batch chosen by ``measure_size``): fp32
    and amp-bf16 by chapter 5's rounds method (``rounds`` rounds, taking turns), with
    the verdict on their per-round ratios (``costmodel.speedup_verdict``: "no difference
    is resolved" when the rounds disagree); amp-fp16 at a tiny size
    (``CPU_FP16_MAX_PIXELS``), its ratio to fp32 there measured and printed with no
    cause. On CUDA: every variant at the full size, ``repeats`` timed steps each."""
    from ampbook.core.env import cpu_name

    mshape, mbatch = (
        (tuple(size[0]), int(size[1]))
        if size and device.type != "cuda"
        else measure_size(model, shape, batch, device, key)
    )
    if device.type != "cuda":
        main = [p for p in precisions if p != "amp-fp16"]
        tell = _progress(progress)
        rows = _cpu_rounds(
            model, mshape, mbatch, loss, main, key, rounds, tell, backward
        )
        extra = None
        if "amp-fp16" in precisions:
            tiny = _scaled(mshape, int(math.sqrt(CPU_FP16_MAX_PIXELS / 2)))
            try:
                output_shape(model, tiny, 2, key)
            except DoctorError:
                tiny = mshape
            fp32 = next((r for r in rows if r["precision"] == "fp32"), None)
            if (
                tuple(tiny) == tuple(mshape)
                and mbatch == 2
                and fp32
                and "step_s" in fp32
            ):
                # the same size as the rounds: fp16 beside their fp32 median
                fp16 = _cpu_rounds(
                    model, tiny, 2, loss, ["amp-fp16"], key, 1, tell, backward
                )[0]
                if fp16.get("step_s"):
                    fp16["speedup"] = fp32["step_s"] / fp16["step_s"]
                against = "fp32's median step"
            else:
                pair = _cpu_rounds(
                    model, tiny, 2, loss, ["fp32", "amp-fp16"], key, 1, tell, backward
                )
                fp16 = pair[1]
                against = "one fp32 step there"
            fp16["input"], fp16["batch"] = list(tiny), 2
            fp16["against"] = against
            if fp16.get("speedup"):
                fp16["note"] = (
                    f"one step at batch 2 x {_shape_text(tiny)}, a single timing "
                    f"against {against} ({fp16['speedup']:.2g}x its speed)"
                )
            order = list(precisions)
            rows = sorted(rows + [fp16], key=lambda r: order.index(r["precision"]))
            extra = fp16
        bf16 = next((r for r in rows if r["precision"] == "amp-bf16"), None)
        verdict = (
            cm.speedup_verdict(bf16["ratios"], "amp-bf16")
            if bf16 and bf16.get("ratios")
            else None
        )
        return {
            "device": "cpu",
            "device_name": cpu_name(),
            "input": list(mshape),
            "batch": mbatch,
            "rounds": rounds,
            "rows": rows,
            "rounds_verdict": verdict,
            "fp16": extra,
            "backward": backward,
        }
    x, y = _batch_for(model, mshape, mbatch, loss, key)
    rows = []
    tell = _progress(progress)
    todo = _variants(device, precisions)
    tell(f"measuring {len(todo)} variants on {device} at batch {mbatch}")
    tell.start()
    for i, (label, prec, tf32, cl, bench, why) in enumerate(todo):
        row = {"variant": label, "precision": prec, "skipped": why}
        rows.append(row)
        if why is not None:
            continue
        try:  # two warm-up steps (the first calls build cuDNN's kernels)
            v = _Variant(model, device, prec, tf32, cl, bench, x, y, backward)
            v.time(2, repeats)
            _finish(row, v)
            del v
            torch.cuda.empty_cache()
        except Exception as e:  # e.g. an op without a kernel for this dtype here
            row["skipped"] = f"failed: {type(e).__name__}: {_first_line(e)}"
        tell.count(f"measuring on {device.type}", i + 1, len(todo), "variant")
    base = rows[0].get("step_s")
    for r in rows:
        if r.get("step_s") and base:
            r["speedup"] = base / r["step_s"]
    return {
        "device": "cuda",
        "device_name": torch.cuda.get_device_name(device),
        "input": list(mshape),
        "batch": mbatch,
        "rows": rows,
        "rounds_verdict": None,
        "fp16": None,
        "backward": backward,
    }


# --------------------------------------------------------------------------------------
# 5. verdict
# --------------------------------------------------------------------------------------


def _span(lo: float, hi: float) -> str:
    return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}x to {hi:.2f}x"


def _gist(lo: float, hi: float, point: float | None = None) -> str:
    """Words for a range: "a gain" or "a loss" only when the whole range is on one
    side of 1.0; a range that spans 1.0 is "no clear gain" (its point estimate, as
    printed to two decimals, at 1.00 or above) or "no clear loss" (below)."""
    if lo > 1:
        return "a gain"
    if hi < 1:
        return "a loss"
    point = math.sqrt(lo * hi) if point is None else point
    return "no clear gain" if round(point, 2) >= 1 else "no clear loss"


def speedup_range_verdict(
    gpu_name: str,
    precision: str,
    rng: dict[str, Any],
    casts: int | None = None,
    transposes: int | None = None,
) -> str:
    """The expected AMP speedup on one GPU, in one line, from a calibrated range
    (``calibration.calibrated_range``): the range and how many references give it,
    the nearest of them, the ratio at equal shares of the bound (not a bound), and the
    launch floor when it binds."""
    equal = rng["equal_share"]
    if equal <= 0:
        raise ValueError("speedups must be positive")
    family = "TF32" if rng["family"] == "tf32" else "fp32"
    tf32 = "TF32 on" if family == "TF32" else "no TF32"
    head = f"{gpu_name}: {precision} over fp32 ({tf32})"
    same = f"{equal:.2f}x if both precisions reached the same share of their bound"
    rows = rng["rows"]
    if not rows:
        return (
            f"{head}: no reference measured the {family} and 16-bit efficiencies this "
            f"GPU needs, so no calibrated range; {same} (not a bound)."
        )
    lo, hi = rng["low"], rng["high"]
    from ampbook.predict.calibration import _layout_text

    n = len(rows)
    by = {r["key"]: r for r in rows}
    basis = ", ".join(
        f"{by[k]['label']} ({by[k]['weight_share']:.0%})" for k in rng["basis"][:3]
    )
    layout = _layout_text(rng["layouts"])
    line = (
        f"{head}, {layout}: {rng['point']:.2f}x ± {math.exp(rng['error']) - 1:.0%} "
        f"({_span(lo, hi)}), {_gist(lo, hi, rng['point'])}; set by {basis} of {n} "
        f"reference{'s' if n != 1 else ''} weighted by closeness; {same}."
    )
    if not any(r["layout_match"] for r in rows):
        ran = sorted({_layout_text(r["layouts"]) for r in rows})
        line += (
            f" No reference ran both precisions in {layout} (they ran "
            f"{', '.join(ran)}; 32-bit / AMP): their efficiencies are carried over to "
            f"{layout}, its bytes and kernels modelled, its kernels' speed not."
        )
    for m in rng.get("committed") or []:
        other = m.get("same_setting") is False and rng.get("setting")
        where = f", not this prediction's {rng['setting']}" if other else ""
        line += f" Measured: {m['speedup']:.2f}x ({m['what']}; {m['source']}{where})."
    launch = rng.get("launch")
    if launch and (launch.get("amp_bound") or launch.get("fp32_bound")):
        which = "AMP's" if launch.get("amp_bound") else "fp32's"
        kernels = launch["amp_kernels"] if launch.get("amp_bound") else None
        kernels = kernels or launch["fp32_kernels"]
        floor = launch["amp_floor_s"] if launch.get("amp_bound") else None
        floor = floor or launch["fp32_floor_s"]
        added = [f"its casts add {casts}"] if casts else []
        if transposes:
            added.append(f"the layout transposes assumed in NCHW {transposes}")
        more = kernels - launch["fp32_kernels"] - (casts or 0) - (transposes or 0)
        if added and more:
            count = plural(abs(more), "other operator").split(" ", 1)
            added.append(f"{count[0]} {'more' if more > 0 else 'fewer'} {count[1]}")
        cast = (
            f" (fp32's {launch['fp32_kernels']}; {', '.join(added)})"
            if added and which == "AMP's"
            else ""
        )
        assumed = (
            "; each layout transpose assumed to cost an eager operator's host time"
            if transposes and which == "AMP's"
            else ""
        )
        line += (
            f" Launch-bound: {which} {kernels} kernels{cast} need at least "
            f"{floor * 1e3:.2g} ms at {launch['per_kernel_s'] * 1e6:.2g} µs each "
            f"(host time per kernel measured on {launch.get('source') or 'one GPU'} "
            f"and assumed on every GPU{assumed}), longer than their calibrated "
            "kernel time."
        )
    return line


def _nearness(row: dict[str, Any]) -> tuple:
    order = {"same GPU": 0, "same architecture": 1, "other architecture": 2}
    return (not row["same_network"], order[row["gpu_distance"]], row["mix_distance"])


def verdict_ranges(
    roof: list[dict[str, Any]],
    traces: dict[str, cm.StepTrace],
    refs,
    floor,
    model: str | None,
    devices=None,
    memory_format: str = "channels_first",
    batch: int | None = None,
) -> list[dict[str, Any]]:
    """Section 5's ranges: per GPU and AMP precision, the calibrated range
    (``calibration.calibrated_range``, both precisions in ``memory_format``, at
    ``batch``) with its verdict line."""
    from ampbook.predict.calibration import calibrated_range

    out = []
    for r in roof:
        if not r.get("amp_s"):
            continue
        rng = calibrated_range(
            r["fp32_by_class_s"],
            r["amp_by_class_s"],
            r["gpu"],
            refs,
            kernels={"fp32": r["fp32_kernels"], "amp": r["amp_kernels"]},
            floor=floor,
            model=model,
            devices=devices,
            memory_format=memory_format,
            batch=batch,
        )
        casts = cast_kernels(traces, r["precision"])
        moves = layout_kernels(traces, r["precision"])
        out.append(
            {
                "gpu": r["gpu"],
                "gpu_name": r["gpu_name"],
                "precision": r["precision"],
                "casts": casts,
                "transposes": moves,
                "memory_bound_share": r.get("memory_bound_share"),
                **rng,
                "line": speedup_range_verdict(
                    r["gpu_name"], r["precision"], rng, casts, moves
                ),
            }
        )
    return out


def memory_warnings(
    traces: dict[str, cm.StepTrace], gpus: Sequence[str], devices, copies: int = 0
) -> list[str]:
    """One line per precision and GPU whose step at the requested batch cannot fit:
    the bytes saved for backward (counted on the traced step) with the weights,
    gradients and Adam state, against the GPU's memory (its datasheet's GB), and the
    largest batch whose activations fit (they grow with the batch; the state and
    autocast's weight copies do not). A lower bound of the need: cuDNN's workspace,
    the allocator's reserve and the CUDA context come on top."""
    from ampbook.measure.memory import ADAM_STATE_BYTES_PER_PARAM

    out = []
    for prec, tr in traces.items():
        if not tr.saved_tensors:
            continue
        saved = tr.saved_tensors["new_bytes"]
        fixed = ADAM_STATE_BYTES_PER_PARAM * tr.parameters
        fixed += copies if prec != "fp32" else 0
        per_sample = max(saved - (copies if prec != "fp32" else 0), 0) / tr.batch_size
        for key in gpus:
            d = devices[key]
            have = d.memory_gb * 1e9
            if saved + fixed <= have:
                continue
            fits = int((have - fixed) // per_sample) if per_sample else 0
            most = (
                f"the largest batch whose activations fit is about {fits}"
                if fits >= 1
                else "no batch fits"
            )
            out.append(
                f"{prec} at batch {tr.batch_size} cannot fit the {d.short_name}: "
                f"{saved / 2**30:,.1f} GiB saved for backward and "
                f"{fixed / 2**30:,.2f} GiB of weights, gradients and optimizer state "
                f"against its {d.memory_gb:g} GB; {most} (before cuDNN's workspace "
                "and the allocator's reserve)."
            )
    return out


def setting_text(batch: int, shape: Sequence[int]) -> str:
    """A step's setting as the committed measurements name theirs."""
    return f"batch {batch} x {_shape_text(shape)}"


def committed_measurements(
    model: str, gpus: Sequence[str], results_dir=None, refs=None
) -> dict[str, list[dict[str, Any]]]:
    """What the committed results (``data/results/``) measured of ``model`` on each
    of ``gpus``: a layer-profile pair's kernel-time ratio (a reference of the same
    network and GPU) and, for the book's ERFNet, the training runs' step-time ratio
    of each AMP precision over fp32 with TF32. Each names its ``setting``
    (``setting_text``). Empty where nothing was measured."""
    out: dict[str, list[dict[str, Any]]] = {g: [] for g in gpus}
    for ref in refs or []:
        if ref.kind == "profile" and ref.model == model and ref.gpu in out:
            out[ref.gpu].append(
                {
                    "precision": "amp-fp16",
                    "what": "kernel time, amp-fp16 over fp32 (TF32 on)",
                    "speedup": ref.measured_speedup,
                    "setting": ref.setting,
                    "source": f"{ref.source.get('title', ref.key)} ({ref.setting}, "
                    f"{ref.layout.get('16-bit')})",
                }
            )
    if model != "erfnet":
        return out
    from ampbook.results import load_results_dir

    try:
        pairs = load_results_dir(results_dir).pairs()
    except Exception:  # an unreadable results folder is the results module's to say
        pairs = []
    for q in pairs:
        if q.amp.mode not in AUTOCAST_DTYPES or q.baseline.mode != "fp32-tf32":
            continue
        key = table_key(q.setting.device_name)
        if key in out:
            where = setting_text(
                q.setting.batch_size, (3, q.setting.height, q.setting.width)
            )
            out[key].append(
                {
                    "precision": q.amp.mode,
                    "what": f"step time, {q.amp.mode} over fp32 (TF32 on), "
                    "training runs",
                    "speedup": q.step_speedup,
                    "setting": where,
                    "source": f"committed training runs in data/results, {where}",
                }
            )
    return out


def checklist(
    roof: list[dict[str, Any]],
    ranges: list[dict[str, Any]],
    loader_images_per_s: float | None,
    measured: dict[str, Any] | None,
) -> dict[str, list[dict[str, Any]]]:
    """What to try, per GPU (one GPU per row, named), ranked by gain within each GPU:
    AMP (the calibrated range's middle, or the ratio at equal shares without one), TF32
    for matrix products (off by default in PyTorch), TF32 for convolutions (on by
    default: listed, never ranked), the input pipeline (with a loader rate), and
    channels_last and cudnn.benchmark as measured on this GPU. ``upper_bounds`` apart:
    fusing the element-wise operators (``torch.compile``) if they vanished entirely;
    normalisation layers stay (training BatchNorm reads and writes its input whatever
    is fused into it)."""
    items: list[dict[str, Any]] = []
    bounds: list[dict[str, Any]] = []
    by_gpu = {(r["gpu"], r["precision"]): r for r in ranges}
    seen = set()
    for r in roof:
        gpu, name = r["gpu"], r["gpu_name"]
        rng = by_gpu.get((gpu, r["precision"]))
        if rng is not None:
            # a measurement of this network, GPU and setting outranks a prediction
            done = [m for m in rng.get("committed") or [] if m.get("same_setting")]
            if done:
                m = done[-1]
                gain, src = m["speedup"], "measured (committed)"
                detail = (
                    f"{m['what']}; predicted {_span(rng['low'], rng['high'])}"
                    if (rng["rows"])
                    else m["what"]
                )
            elif rng["rows"]:
                lo, hi = rng["low"], rng["high"]
                gain, src = rng["point"], "calibrated"
                n = len(rng["rows"])
                detail = f"{_span(lo, hi)} from {n} reference{'s' if n != 1 else ''}"
            else:
                gain, src = rng["equal_share"], "equal shares of the bound"
                detail = "no reference for this GPU's families"
            items.append(
                {"gpu": name, "item": f"train with AMP ({r['precision']})",
                 "gain": gain, "source": src, "detail": detail}
            )  # fmt: skip
        if gpu in seen:
            continue
        seen.add(gpu)
        mm = r["fp32_default_s"] / r["fp32_tf32_s"]
        if mm > 1.005:
            items.append(
                {
                    "gpu": name,
                    "item": "fp32: allow TF32 for matrix products "
                    "(torch.backends.cuda.matmul.allow_tf32, off by default)",
                    "gain": mm,
                    "source": "equal shares of the bound",
                    "detail": "the fp32 step's matrix products on TF32 tensor cores",
                }
            )
        conv = r["fp32_strict_s"] / r["fp32_default_s"]
        if conv > 1.005:
            items.append(
                {
                    "gpu": name,
                    "item": "fp32: TF32 for convolutions (torch.backends.cudnn."
                    "allow_tf32) is on by default",
                    "gain": None,
                    "source": "already on",
                    "detail": f"turning it off would cost {conv:.2f}x at equal shares",
                }
            )
        if r.get("amp_s"):
            total = r["amp_s"]
            fusable = r["fusable_s"]
            if 0 < fusable < total:
                bounds.append(
                    {
                        "gpu": name,
                        "item": "fuse element-wise ops (torch.compile)",
                        "gain": total / (total - fusable),
                        "source": "upper bound",
                        "detail": "if the element-wise operators' "
                        f"{fusable / total:.0%} of the AMP bound vanished (their "
                        "share of the time taken as their share of the bound); "
                        "normalisation stays",
                    }
                )
        if loader_images_per_s and r.get("images_per_s_needed"):
            need = r["images_per_s_needed"]
            if loader_images_per_s < need:
                items.append(
                    {
                        "gpu": name,
                        "item": "speed up the input pipeline (more workers, faster "
                        "decoding)",
                        "gain": need / loader_images_per_s,
                        "source": "bound",
                        "detail": f"the loader's {loader_images_per_s:,.0f} images/s "
                        f"against the {need:,.0f} the AMP bound uses",
                    }
                )
    if measured and measured["device"] == "cuda":
        from ampbook.core.devices import display_name

        name = display_name(measured["device_name"])
        rows = {r["variant"]: r for r in measured["rows"] if r.get("step_s")}
        for r in rows.values():
            for what in ("channels_last", "cudnn.benchmark"):
                if r["variant"].endswith(what) and r["precision"] in rows:
                    items.append(
                        {
                            "gpu": name,
                            "item": f"{what} with {r['precision']}",
                            "gain": rows[r["precision"]]["step_s"] / r["step_s"],
                            "source": "measured",
                            "detail": f"measured on this {name}",
                        }
                    )
    order = list(dict.fromkeys(i["gpu"] for i in items))
    items.sort(
        key=lambda i: (order.index(i["gpu"]), i["gain"] is None, -(i["gain"] or 0))
    )
    return {"items": items, "upper_bounds": bounds}


def table_key(device_name: str) -> str | None:
    """The device-table key of a GPU named as ``torch.cuda.get_device_name`` names it
    (None when the table has no entry, or several match)."""
    from ampbook.core.devices import find_device

    try:
        entry = find_device(device_name)
    except ValueError:
        return None
    return entry.key if entry else None


def bytes_ratio(report: dict[str, Any], precision: str = "amp-fp16") -> float:
    """How much AMP shrinks the step's traffic: fp32 bytes over ``precision``'s."""
    t = report["totals"]
    return t["fp32"]["bytes"] / t[precision]["bytes"]


def peak_ratio(gpu: str, precision: str = "amp-fp16", devices=None) -> float | None:
    """The tensor cores' gain on ``gpu``: the 16-bit matrix peak over fp32's with TF32
    on (None when the GPU has no 16-bit peak for ``precision``)."""
    from ampbook.core.devices import load_devices

    devices = load_devices() if devices is None else devices
    c = cm.Ceilings.from_device(devices[gpu], tf32=True)
    dtype = torch_name(AUTOCAST_DTYPES[precision])
    if dtype not in c.mma_tflops:
        return None
    return c.mma_tflops[dtype] / c.mma_tflops["float32"]


def gain_verdict(report: dict[str, Any], gpu: str, precision: str = "amp-fp16") -> str:
    """Which of two ratios a model's bound ratio on ``gpu`` follows, in one line: the
    bytes (a memory-bound step's bound shrinks by what autocast halves) or the tensor
    cores' peak (a math-bound step's bound by what the matrix units add). Both are
    ratios of bounds: the speedup if both precisions reached the same share of their
    bound, which real kernels do not (the calibrated range says by how much)."""
    row = next(
        (
            r
            for r in report["roofline"]
            if r["gpu"] == gpu and r["precision"] == precision and r.get("amp_s")
        ),
        None,
    )
    if row is None:
        raise ValueError(f"no {precision} prediction for {gpu} in this report")
    speed, nb = row["speedup_tf32"], bytes_ratio(report, precision)
    peak = peak_ratio(gpu, precision)
    follows = (
        "its bytes set the ratio"
        if peak is None or abs(math.log(speed / nb)) <= abs(math.log(speed / peak))
        else "the tensor cores' peak sets the ratio"
    )
    peak_text = f"{peak:.2f}x" if peak else "none"
    bound = f"{speed:.2f}x smaller" if speed >= 1 else f"{1 / speed:.2f}x larger"
    moved = f"bytes shrink {nb:.2f}x" if nb >= 1 else f"bytes grow {1 / nb:.2f}x"
    return (
        f"{report['model']} on the {row['gpu_name']}: {precision}'s bound is "
        f"{bound}, {row['memory_bound_share']:.0%} of it memory-bound; "
        f"{moved}, the matrix peak grows {peak_text}: {follows}."
    )


def measured_verdict(measured: dict[str, Any]) -> str:
    """What the timed steps on this device say, in one line: on a CPU, the rounds
    method's verdict on amp-bf16 (the per-round ratios: "no difference is resolved"
    when they disagree) and fp16's measured ratio; on CUDA, the fastest AMP variant
    against fp32."""
    rows = [r for r in measured["rows"] if r.get("step_s")]
    where = f"batch {measured['batch']} x {_shape_text(measured['input'])}"
    if measured["device"] != "cuda":
        parts = []
        if measured.get("rounds_verdict"):
            said = measured["rounds_verdict"]
            said = said[:1].lower() + said[1:]  # after the colon
            parts.append(f"At {where} on this CPU: {said}")
        fp16 = measured.get("fp16")
        if fp16 and fp16.get("speedup"):
            against = fp16.get("against") or "fp32's step"
            parts.append(
                f"One amp-fp16 step at batch {fp16['batch']} x "
                f"{_shape_text(fp16['input'])}, a single timing on this machine, ran "
                f"at {fp16['speedup']:.2g}x the speed of {against}: one timing, no "
                "spread to judge by."
            )
        if not parts:
            return "On this CPU no AMP step was timed against fp32."
        return " ".join(parts)
    if not rows or rows[0]["precision"] != "fp32":
        return (
            f"On {measured['device_name']} no fp32 step was timed: nothing to compare."
        )
    amp = [r for r in rows[1:] if r["precision"] != "fp32"]
    if not amp:
        return f"On {measured['device_name']} no AMP step was timed."
    best = max(amp, key=lambda r: r["speedup"])
    if best["speedup"] > 1 + SAME_SPEED:
        way = "faster than fp32"
    elif best["speedup"] >= 1 - SAME_SPEED:
        way = f"within {SAME_SPEED:.0%} of fp32, no difference resolved"
    else:
        way = "slower than fp32"
    return (
        f"On this GPU, the fastest AMP step ({best['variant']}) ran at "
        f"{best['speedup']:.2f}x fp32's speed at {where}: {way} here."
    )


def range_position(value: float, low: float, high: float) -> str:
    """Where ``value`` lies against the range ``low``-``high``: "below the range",
    "inside the range" or "above the range"."""
    if value < low:
        return "below the range"
    return "inside the range" if value <= high else "above the range"


def measured_speedup_verdict(
    gpu_name: str, measured: float, low: float, high: float
) -> str:
    """A measured AMP step speedup held against a predicted range, in one line: a
    cross-check, not a test, when the range was calibrated on the same run."""
    if not 0 < low <= high or measured <= 0:
        raise ValueError(f"need 0 < low <= high and measured > 0, got {low}, {high}")
    span = _span(low, high)
    where = range_position(measured, low, high)
    return (
        f"{gpu_name}: measured AMP step speedup {measured:.2f}x against {span} "
        f"predicted, {where}."
    )


# --------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------


@dataclass
class DoctorConfig:
    model: str
    input: tuple[int, ...] | None = None
    batch: int | None = None
    device: str = "auto"
    precisions: list[str] = field(default_factory=lambda: list(PRECISIONS))
    gpus: list[str] | None = None
    loader_images_per_s: float | None = None
    loss: str = "cross-entropy"
    measure: bool = True
    repeats: int = 3
    results_dir: str | None = None
    output: str | None = None  # --output KEY: which of several outputs the loss reads
    # where a CPU times its steps: (input shape, batch); None: ``measure_size``'s
    measure_size: tuple[tuple[int, ...], int] | None = None
    rounds: int = CPU_ROUNDS
    # the memory format the user's loop runs (``costmodel.MEMORY_FORMATS``)
    memory_format: str = "channels_first"
    # progress lines on stderr while the doctor waits: a ``cli.Progress``, or True /
    # False; None: when stderr is a terminal
    progress: bool | cli.Progress | None = None
    # False: the forward pass alone is traced and timed (``--forward-only``)
    backward: bool = True
    # who is asking: "python" (this API) or "cli" (the command): advice names the
    # keyword argument or the flag (``option_name``)
    caller: str = "python"


# A setting's name as the caller gives it: (the command's flag, DoctorConfig's field).
_OPTIONS = {"backward": ("--forward-only", "backward=False")}


def option_name(cfg: DoctorConfig, what: str) -> str:
    """How the user sets ``what`` where they called the doctor: the flag on the
    command line, the ``DoctorConfig`` argument in Python."""
    flag, arg = _OPTIONS[what]
    return flag if cfg.caller == "cli" else f"DoctorConfig({arg})"


def check_device(text: str) -> str:
    """``--device``: auto, cpu or cuda[:N] (where a training step can be timed);
    anything else (meta, a typo) is refused, never measured on the CPU instead."""
    t = str(text).strip().lower()
    kind, _, index = t.partition(":")
    if t in ("auto", "cpu") or (kind == "cuda" and (not _ or index.isdigit())):
        return t
    raise DoctorError(
        f"--device {text!r}: the doctor times its steps on auto (CUDA when there is "
        "one), cpu or cuda[:N]; pass one of those (--no-measure predicts without "
        "timing)"
    )


def check_size(batch: int, shape: Sequence[int], devices) -> None:
    """Refuse a batch whose input alone (fp32) is larger than the largest GPU of the
    device table: no GPU could run it, and its trace's numbers would overflow."""
    elements = batch * math.prod(shape)
    big = max(devices.values(), key=lambda d: d.memory_gb)
    if elements * 4 > big.memory_gb * 1e9:
        raise DoctorError(
            f"batch {batch} x input {_shape_text(shape)}: the input alone is "
            f"{elements * 4 / 2**30:,.0f} GiB in fp32, more than the largest GPU of "
            f"the table holds ({big.short_name}, {big.memory_gb:g} GB); give a "
            "smaller --batch or --input"
        )


def diagnose(
    cfg: DoctorConfig,
    model: nn.Module | None = None,
    on_prediction=None,
) -> dict[str, Any]:
    """The whole report as a JSON-ready dict (sections ``coverage``, ``memory``,
    ``roofline``, ``where``, ``measured``, ``verdict``). ``model`` overrides
    ``cfg.model``'s construction (the spec is then only its label).

    The prediction comes first: ``on_prediction(report)``, when given, is called with
    the report before any step is timed (``measured`` None, the checklist without
    measurements), so a caller can print the answer (``report_head``) while the
    measurement runs; the returned report has both."""
    from ampbook.core.devices import load_devices, pick_device
    from ampbook.predict import calibration

    tell = _progress(cfg.progress)
    if cfg.loss not in LOSSES:
        raise DoctorError(f"--loss {cfg.loss!r}: choose {' or '.join(LOSSES)}")
    if cfg.batch is not None and not cli.is_positive_int(cfg.batch):
        raise DoctorError(f"--batch {cfg.batch}: must be a positive integer")
    if cfg.loader_images_per_s is not None and not cfg.loader_images_per_s > 0:
        raise DoctorError(
            f"--loader-images-per-s {cfg.loader_images_per_s}: must be positive"
        )
    if cfg.memory_format not in cm.MEMORY_FORMATS:
        raise DoctorError(
            f"--memory-format {cfg.memory_format!r}: choose "
            f"{' or '.join(cm.MEMORY_FORMATS)}"
        )
    precisions = parse_precisions(cfg.precisions)
    devices = load_devices()
    gpus = resolve_gpus(cfg.gpus, devices)
    try:
        device = pick_device(check_device(cfg.device))
    except (RuntimeError, ValueError) as e:
        raise DoctorError(f"--device {cfg.device}: {_first_line(e)}") from None
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise DoctorError(
            f"--device {cfg.device}: this machine has "
            f"{plural(torch.cuda.device_count(), 'CUDA device')}; give cuda or cuda:0"
        )
    shape = tuple(cfg.input) if cfg.input else default_input(cfg.model)
    batch = cfg.batch or (6 if cfg.model == "erfnet" else 32)
    check_size(batch, shape, devices)
    clock = time.perf_counter()
    seconds: dict[str, float] = {}

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[name] = now - clock
        clock = now

    if model is None:
        tell(f"building {cfg.model}")
        model = load_model(cfg.model)
    if cfg.backward and not any(p.requires_grad for p in model.parameters()):
        raise DoctorError(
            f"{cfg.model} has no trainable parameter: a training step has nothing to "
            f"compute backward; pass {option_name(cfg, 'backward')} to diagnose the "
            "forward pass alone"
        )
    tell(f"tracing batch {batch} x {_shape_text(shape)} (fake tensors: no data)")
    out = output_shape(model, shape, batch, cfg.output)
    _check_loss(cfg.loss, out)
    traced = model
    if cfg.output is not None or not returns_tensor(model, shape, batch):
        traced = SelectOutput(model, cfg.output)
    lap("model")
    traces = {}
    for p in precisions:
        if p == "amp-bf16" and "amp-fp16" in traces:  # the same operators, relabelled
            traces[p] = cm.relabel(traces["amp-fp16"], p)
            continue
        tell(f"tracing the {p} {'step' if cfg.backward else 'forward pass'}")
        try:
            with _quiet_fake(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="ComplexHalf support")
                traces[p] = cm.trace_step(
                    traced, batch, 1, 1, p, input_shape=shape, loss=_loss_fn(cfg.loss),
                    backward=cfg.backward,
                )  # fmt: skip
        except DoctorError:
            raise
        except Exception as e:
            why = _first_line(e)
            if "nothing to trace backward" in why:
                raise DoctorError(
                    "the loss does not depend on any trainable parameter: nothing to "
                    f"trace backward; pass {option_name(cfg, 'backward')} to diagnose "
                    "the forward pass alone"
                ) from None
            raise DoctorError(
                f"tracing the {p} step failed: {type(e).__name__}: {why}"
            ) from None
    traces = {
        p: cm.with_memory_format(tr, cfg.memory_format) for p, tr in traces.items()
    }
    lap("trace")
    amp = next((p for p in ("amp-fp16", "amp-bf16") if p in traces), None)
    roof = roofline(traces, gpus, cfg.loader_images_per_s, devices)
    first = devices[gpus[0]]
    ceil = cm.Ceilings.from_device(first)
    preds = {
        p: cm.predict(tr, ceil)
        for p, tr in traces.items()
        if p == "fp32" or torch_name(AUTOCAST_DTYPES[p]) in ceil.mma_tflops
    }
    lap("roofline")
    memory: dict[str, Any] = {
        "at_size": memory_at_size(traces, amp),
        "weight_copies_bytes": weight_copy_bytes(model) if amp else 0,
    }
    tell("calibrating the speedup ranges on the committed references")
    refs = calibration.references(cfg.results_dir)
    floor = calibration.launch_floor(cfg.results_dir)
    ranges = verdict_ranges(
        roof, traces, refs, floor, cfg.model, devices, cfg.memory_format, batch
    )
    committed = committed_measurements(cfg.model, gpus, cfg.results_dir, refs)
    here = setting_text(batch, shape)
    for r in ranges:  # a measurement of the same network and GPU beside the range
        r["setting"] = here
        r["committed"] = [
            {**m, "same_setting": m.get("setting") == here}
            for m in committed.get(r["gpu"], [])
            if m["precision"] == r["precision"]
        ]
        r["line"] = speedup_range_verdict(
            r["gpu_name"], r["precision"], r, r["casts"], r.get("transposes")
        )
    cover = coverage(traces[amp], preds.get(amp)) if amp else None
    unknown = unmodelled(preds.get(amp) or preds["fp32"])
    warnings_ = [w for w in [unmodelled_line(unknown)] if w]
    warnings_ += memory_warnings(traces, gpus, devices, weight_copy_bytes(model))
    lap("verdict")
    report = {
        "schema": REPORT_SCHEMA,
        "model": cfg.model,
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "input": list(shape),
        "batch": batch,
        "output": list(out),
        "output_rule": output_rule(model, shape, batch, cfg.output),
        "loss": cfg.loss,
        "backward": cfg.backward,
        "precisions": precisions,
        "memory_format": cfg.memory_format,
        "gpus": gpus,
        "totals": {p: tr.totals() for p, tr in traces.items()},
        "coverage": cover,
        "memory": memory,
        "roofline": roof,
        "where": {
            "gpu": gpus[0],
            "gpu_name": roof[0]["gpu_name"] if roof else first.short_name,
            "precision": amp or "fp32",
            "types": where_time_goes(preds.get(amp) or preds["fp32"]),
        },
        "measured": None,
        "verdict": {
            "ranges": ranges,
            "launch_floor": None
            if floor is None
            else {"per_kernel_s": floor.per_kernel_s, "source": floor.source},
            **checklist(roof, ranges, cfg.loader_images_per_s, None),
        },
        "unmodelled": unknown,
        "warnings": warnings_,
        "seconds": seconds,
    }
    if on_prediction is not None:
        on_prediction(report)
    if not cfg.measure:
        seconds["measured"] = 0.0
        return report
    measured = measure(
        traced, shape, batch, cfg.loss, precisions, device, cfg.repeats,
        size=cfg.measure_size, rounds=cfg.rounds, progress=tell,
        backward=cfg.backward,
    )  # fmt: skip
    memory["measured"] = [
        {
            "variant": r["variant"],
            "bytes": r["memory_bytes"],
            "measure": r["memory_measure"],
        }
        for r in measured["rows"]
        if r.get("memory_bytes") is not None and not r.get("input")
    ]
    memory["measured_input"], memory["measured_batch"] = (
        measured["input"],
        measured["batch"],
    )
    if device.type != "cuda" and memory["measured"]:
        memory["fake_at_measured"] = fake_saved_bytes(
            traced, measured["input"], measured["batch"], cfg.loss, "fp32"
        )
    report["measured"] = measured
    report["verdict"].update(checklist(roof, ranges, cfg.loader_images_per_s, measured))
    lap("measured")
    return report


# --------------------------------------------------------------------------------------
# printing
# --------------------------------------------------------------------------------------


def _mib(b):
    return None if b is None else b / 2**20


def _ms(s):
    return None if s is None else s * 1e3


def _coverage_section(report: dict[str, Any]) -> tuple[str, str, str] | None:
    from ampbook.core.page import md_table_text

    cov = report["coverage"]
    if not cov:
        return None
    rows = [
        (k, v["flops_16bit"], v["mma_flops_16bit"], v["bytes_16bit"])
        for k, v in cov["phases"].items()
    ]
    lead = (
        f"{cov['precision']} on CUDA's autocast rules and kernels (traced on the "
        f"CPU), batch {report['batch']} x {_shape_text(report['input'])}"
    )
    table = md_table_text(
        rows,
        ["phase", "FLOPs in 16 bits", "matrix FLOPs in 16 bits", "bytes in 16 bits"],
        [None, ".1%", ".1%", ".1%"],
    )
    fp32 = [
        (g["phase"], f"{g['op']} in {g['layer_type']}", g["count"], g["bytes_share"],
         g["reason"])
        for g in cov["fp32_ops"][:8]
    ]  # fmt: skip
    table += "\n\nLeft in fp32 (largest share of the step's bytes first):\n\n"
    table += md_table_text(
        fp32 or [("-", "none", 0, 0.0, "-")],
        ["phase", "op in layer type", "kernels", "bytes", "why fp32"],
        [None, None, None, ".1%", None],
    )
    if report["unmodelled"]:
        table += "\n\nNot modelled (bytes counted, FLOPs left out):\n\n"
        table += md_table_text(
            [
                (
                    u["op"],
                    u.get("why") or "FLOPs unknown",
                    u["count"],
                    u["bytes_share"],
                    u["time_share"],
                )
                for u in report["unmodelled"]
            ],  # fmt: skip
            ["op", "why", "kernels", "share of bytes", "share of the bound"],
            [None, None, None, ".1%", ".1%"],
        )
    return ("1. Coverage", lead, table)


def _memory_section(report: dict[str, Any]) -> tuple[str, str, str]:
    from ampbook.core.page import md_table_text

    mem = report["memory"]
    at = mem["at_size"]
    size = f"batch {at['batch']} x {_shape_text(at['input'])}"
    rows = [(f"fp32, {size}", _mib(at["fp32_bytes"]), 1.0)]
    if at.get("amp_bytes") is not None:
        rows.append(
            (f"{at['amp_precision']}, {size}", _mib(at["amp_bytes"]),
             at["amp_over_fp32"])
        )  # fmt: skip
        rows.append(
            (f"of which left in fp32 ({at['amp_precision']})",
             _mib(at["amp_fp32_part"]), None)
        )  # fmt: skip
    rows.append(("weights, gradients and Adam state (not saved)",
                 _mib(at["state_bytes"]), None))  # fmt: skip
    measured = mem.get("measured", [])
    if measured:
        where = f"batch {mem['measured_batch']} x {_shape_text(mem['measured_input'])}"
        for m in measured:
            rows.append(
                (f"measured here: {m['variant']}, {where} ({m['measure']})",
                 _mib(m["bytes"]),
                 m["bytes"] / measured[0]["bytes"] if measured[0]["bytes"] else None)
            )  # fmt: skip
        if mem.get("fake_at_measured") is not None:
            rows.append(
                (f"traced: fp32, {where} (the count above, on fake tensors)",
                 _mib(mem["fake_at_measured"]), None)
            )  # fmt: skip
    lead = at["method"]
    note = weight_copy_note(mem)
    if note:
        lead = f"{lead}. {note}"
    return (
        "2. Memory: bytes saved for backward",
        lead,
        md_table_text(rows, ["", "MiB", "AMP / fp32"], [None, ",.4g", ".2f"]),
    )


def weight_copy_note(mem: dict[str, Any]) -> str | None:
    """Why AMP can save more bytes than fp32: the 16-bit weight copies, a fixed cost
    per step, against activations that grow with the batch. Said only where an AMP
    count exceeds fp32's by no more than the copies (the measured rows, the requested
    size); None elsewhere."""
    copies = mem.get("weight_copies_bytes") or 0
    if not copies:
        return None
    places = []
    measured = mem.get("measured") or []
    if measured and measured[0]["bytes"]:
        base = measured[0]["bytes"]
        more = [
            m["variant"] for m in measured[1:] if base < m["bytes"] <= base + copies
        ]
        if more:
            places.append(f"at the small measured size ({' and '.join(more)})")
    at = mem["at_size"]
    amp = at.get("amp_bytes")
    if amp and at["fp32_bytes"] < amp <= at["fp32_bytes"] + copies:
        places.append(f"at the requested size ({at['amp_precision']})")
    if not places:
        return None
    share = (
        f" At the requested size the copies are at most {copies / amp:.1%} of "
        f"{at['amp_precision']}'s saved bytes."
        if amp
        else ""
    )
    return (
        f"The saved bytes include autocast's 16-bit copies of the weights (up to "
        f"{_mib(copies):,.4g} MiB: every convolution's, and a linear layer's when its "
        f"input needs a gradient), a fixed cost whatever the batch: they are why AMP "
        f"keeps more bytes for backward than fp32 {' and '.join(places)}, where the "
        f"activations are small.{share}"
    )


def _roofline_section(report: dict[str, Any]) -> tuple[str, str, str]:
    from ampbook.core.page import md_table_text

    rows = []
    small = min(r["fp32_tf32_s"] for r in report["roofline"]) < 1e-5
    unit, scale = ("µs", 1e6) if small else ("ms", 1e3)
    for r in report["roofline"]:
        amp_s = r["amp_s"] * scale if r["amp_s"] else None
        rows.append(
            (r["gpu_name"], r["precision"], r["fp32_tf32_s"] * scale, amp_s,
             r.get("speedup_tf32"),
             None if r.get("images_per_s_needed") is None
             else round(r["images_per_s_needed"]))
        )  # fmt: skip
    lead = (
        f"lower bounds of one step at batch {report['batch']} (fp32 with TF32 for "
        "convolutions and matrix products); their ratio is the speedup if both "
        "precisions reached the same share of their bound, which real kernels do not "
        "(section 5); images/s: what the input pipeline must deliver at the AMP bound"
    )
    return (
        "3. Roofline per GPU",
        lead,
        md_table_text(
            rows,
            [
                "GPU",
                "AMP",
                f"fp32 bound ({unit})",
                f"AMP bound ({unit})",
                "ratio (x)",
                "images/s",
            ],
            [None, None, ".3g", ".3g", ".2f", ",d"],
        ),  # fmt: skip
    )


def _where_section(report: dict[str, Any]) -> tuple[str, str, str]:
    from ampbook.core.page import md_table_text

    wh = report["where"]
    return (
        f"Where the time goes ({wh['gpu_name']}, {wh['precision']})",
        "share of the bound and of the bytes per layer type",
        md_table_text(
            [
                (
                    t["layer_type"],
                    t["modules"],
                    t["time_share"],
                    t["bytes_share"],
                    t["flops_per_byte"],
                    t["bound"],
                )
                for t in wh["types"]
            ],  # fmt: skip
            [
                "layer type",
                "modules",
                "share of bound",
                "share of bytes",
                "FLOPs/byte",
                "bound",
            ],  # fmt: skip
            [None, None, ".0%", ".0%", ".3g", None],
        ),
    )


def _measured_section(report: dict[str, Any]) -> tuple[str, str, str] | None:
    me = report["measured"]
    if not me:
        return None
    lead, text = measured_table(me)
    return ("4. Measured on this device", lead, text + "\n\n" + measured_verdict(me))


def measured_table(me: dict[str, Any]) -> tuple[str, str]:
    """Section 4's lead and Markdown table: each timed variant's median and fastest
    step and its speedup, with columns that say which (on a CPU, the ratio of the
    medians shown and the median of the per-round ratios the verdict reads)."""
    from ampbook.core.page import md_table_text

    cpu = me["device"] == "cpu"
    base = next(
        (r for r in me["rows"] if r["precision"] == "fp32" and r.get("step_s")), None
    )
    rows = []
    for r in me["rows"]:
        of_medians = (
            base["step_s"] / r["step_s"]
            if base and r.get("step_s") and r.get("input") is None
            else None
        )
        row = [r["variant"], _ms(r.get("step_s")), _ms(r.get("min_step_s"))]
        ratio = r.get("speedup")
        if cpu and r.get("samples") == 1 and r.get("step_s"):
            # one timed step: no median, no fastest round, no median of ratios
            row[1:] = [f"{_ms(r['step_s']):.1f} (one step)", None]
            if ratio is not None and r["precision"] != "fp32":
                ratio = f"{ratio:.2f} (one timing)"
        row += [of_medians, ratio] if cpu else [ratio]
        rows.append(row + [r.get("note") or r["skipped"] or ""])
    n = me.get("rounds")
    if cpu:
        how = (
            f"{plural(n, 'round')} taking turns (chapter 5's method): the time is the "
            f"median step of the {plural(n, 'round')} and the fastest of them; the "
            "speedups are "
            "fp32's time over this one's, from the medians beside them and as the "
            "median of the per-round ratios (the verdict reads the latter; the two "
            "differ when the rounds drift); a variant timed for one step says so in "
            "its cells"
        )
        heads = [
            "variant",
            f"median of {plural(n, 'round')} (ms)",
            "fastest round (ms)",
            "fp32 / this, medians (x)",
            "median of round ratios (x)",
            "note",
        ]
        fmts = [None, ".1f", ".1f", ".2f", ".2f", None]
    else:
        how = "timed steps: the median and the fastest; speedup from the medians"
        heads = [
            "variant",
            "median step (ms)",
            "fastest step (ms)",
            "speedup (x)",
            "note",
        ]
        fmts = [None, ".1f", ".1f", ".2f", None]
    lead = (
        f"{me['device_name']}; the runner's step, batch {me['batch']} x "
        f"{_shape_text(me['input'])}, {how}"
    )
    return lead, md_table_text(rows, heads, fmts)


def references_table(rng: dict[str, Any]) -> str:
    """The references behind one calibrated range, nearest first."""
    from ampbook.core.page import md_table_text
    from ampbook.predict.calibration import distance_text

    rows = sorted(rng["rows"], key=_nearness)
    return md_table_text(
        [
            (
                r["label"],
                r["kind"],
                distance_text(r),
                r["speedup"],
                r["measured_speedup"],
            )
            for r in rows
        ],  # fmt: skip
        ["reference", "from", "distance", "speedup here (x)", "measured there (x)"],
        [None, None, None, ".2f", ".2f"],
    )


def launch_table(ranges: Sequence[dict[str, Any]]) -> str | None:
    """Per GPU and AMP precision: the AMP step's kernels, its launch floor (predicted:
    kernels x the assumed host time per kernel), its calibrated kernel time (predicted:
    the median reference's) and the word ``bound_text`` gives; None without a floor."""
    from ampbook.core.page import md_table_text

    rows = [
        (
            r["gpu_name"],
            r["precision"],
            r["launch"]["amp_kernels"],
            r["launch"]["amp_floor_s"] * 1e3,
            r["launch"]["amp_kernel_s"] * 1e3,
            r["launch"]["amp_floor_s"] / r["launch"]["amp_kernel_s"],
            bound_text(r),
        )
        for r in ranges
        if (r.get("launch") or {}).get("amp_kernel_s")
    ]
    if not rows:
        return None
    return md_table_text(
        rows,
        [
            "GPU",
            "AMP",
            "AMP kernels",
            "launch floor (ms)",
            "calibrated kernel time (ms)",
            "floor / kernel time",
            "word",
        ],  # fmt: skip
        [None, None, None, ".3f", ".3f", ".2f", None],
    )


def _verdict_section(report: dict[str, Any]) -> tuple[str, str, str]:
    from ampbook.core.page import md_table_text

    ver = report["verdict"]
    lines = "\n".join(f"- {r['line']}" for r in ver["ranges"])
    text = lines
    first = next((r for r in ver["ranges"] if r["rows"]), None)
    if first is not None:
        text += (
            f"\n\nThe references behind the {first['gpu_name']} range "
            f"({first['precision']}; each one's efficiencies applied to this model, "
            "beside the speedup it measured):\n\n" + references_table(first)
        )
    fl = ver.get("launch_floor")
    if fl:
        text += (
            f"\n\nLaunch floor: {fl['per_kernel_s'] * 1e6:.2g} µs of host time per "
            f"kernel (the smallest element-wise calls measured on {fl['source']}), "
            "assumed the same on every GPU and for every kernel counted, cuDNN's "
            "layout transposes included (counted as if each cost an eager "
            "operator's host time)."
        )
    floors = launch_table(ver["ranges"])
    if floors:
        text += (
            "\n\nThe launch floor (AMP's kernels times the host time per kernel "
            "above) beside the calibrated AMP kernel time (the median reference's), "
            "both predicted, per GPU: the first screen's launch-bound when a floor is "
            "longer than its kernel time (AMP's or fp32's), near the launch floor when "
            f"AMP's is at least {NEAR_FLOOR:.0%} of it, else its word from the "
            "roofline:\n\n" + floors
        )
    text += "\n\nWhat to try, per GPU:\n\n" + md_table_text(
        [
            (c["gpu"], c["item"], c["gain"], c["source"], c["detail"])
            for c in ver["items"]
        ],  # fmt: skip
        ["GPU", "try", "gain (x)", "from", "detail"],
        [None, None, ".2f", None, None],
    )
    if ver["upper_bounds"]:
        text += "\n\nUpper bounds (if the work vanished entirely):\n\n" + md_table_text(
            [
                (c["gpu"], c["item"], c["gain"], c["detail"])
                for c in ver["upper_bounds"]
            ],  # fmt: skip
            ["GPU", "at most", "gain (x)", "detail"],
            [None, None, ".2f", None],
        )
    return ("5. Verdict", "expected AMP speedup per GPU", text)


def sections(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The report as (title, one-line lead, Markdown body) per section."""
    parts = [
        _coverage_section(report),
        _memory_section(report),
        _roofline_section(report),
        _where_section(report),
        _measured_section(report),
        _verdict_section(report),
    ]
    return [p for p in parts if p is not None]


# The AMP step is "near the launch floor" when its floor is at least this share of its
# calibrated kernel time (``bound_text``): the roofline's word would not hold there.
NEAR_FLOOR = 0.8

BOUND_WORDS_TEXT = (
    "The last word comes from one of two tests: launch-bound when the launch floor "
    "is longer than the calibrated kernel time, near the launch floor when it is at "
    f"least {NEAR_FLOOR:.0%} of AMP's (section 5 prints both); else memory- or "
    "compute-bound by the larger share of the roofline bound (section 3)."
)


def bound_text(r: dict[str, Any]) -> str:
    """What bounds one range's AMP step, in a word, by one of two tests. First the
    launch floor against the calibrated kernel time (the median reference's,
    ``calibration.calibrated_range``): launch-bound when the kernels' host time
    (``calibration.launch_floor``) is longer than their calibrated time (AMP's or
    fp32's), near the launch floor when AMP's floor is at least ``NEAR_FLOOR`` of
    AMP's calibrated kernel time. Otherwise the roofline: memory-bound or
    compute-bound by the larger share of the predicted bound."""
    launch = r.get("launch") or {}
    if launch.get("amp_bound") or launch.get("fp32_bound"):
        return "launch-bound"
    kernel = launch.get("amp_kernel_s")
    if kernel and launch.get("amp_floor_s", 0) >= NEAR_FLOOR * kernel:
        return "near the launch floor"
    share = r.get("memory_bound_share")
    if share is None:
        return ""
    return "memory-bound" if share >= 0.5 else "compute-bound"


def _screen_line(r: dict[str, Any]) -> str:
    if not r["rows"]:
        return (
            f"- {r['gpu_name']}: {r['precision']} no reference applies; "
            f"{r['equal_share']:.2f}x at equal shares of the bound (not a bound)"
        )
    line = (
        f"- {r['gpu_name']}: {r['precision']} {r['point']:.2f}x "
        f"({_span(r['low'], r['high'])}), {_gist(r['low'], r['high'], r['point'])}"
    )
    bound = bound_text(r)
    line += f"; {bound}" if bound else ""
    for m in r.get("committed") or []:
        line += f"; measured {m['speedup']:.2f}x ({m['what'].split(',')[0]})"
    return line


def first_screen(report: dict[str, Any]) -> str:
    """The answer first, for a screen of 24 lines x 80 columns: what was predicted
    (batch, input, memory format), then one line per GPU with its faster AMP
    precision: the point estimate, its range, the verdict in words (``_gist``), what
    bounds the step (``bound_text``) and a committed measurement where there is one;
    the warnings last."""
    from ampbook.predict.calibration import _layout_text

    fmt = report.get("memory_format", "channels_first")
    ranges = report["verdict"]["ranges"]
    best: dict[str, dict[str, Any]] = {}
    for r in ranges:  # the faster AMP precision per GPU (the first of a tie)
        old = best.get(r["gpu"])
        if old is None or (
            r["rows"] and (not old["rows"] or r["point"] > old["point"])
        ):
            best[r["gpu"]] = r
    shape = "x".join(map(str, report.get("input") or []))
    what = f"batch {report['batch']}" + (f" x {shape}" if shape else "")
    step = "forward pass" if report.get("backward") is False else "training step"
    families = {r.get("family") for r in best.values()}
    if families == {"tf32"}:
        base = "fp32 with TF32 (fp32-tf32)"
    elif "tf32" in families:
        base = "fp32 (with TF32, fp32-tf32, on the GPUs that have it)"
    else:
        base = "fp32 (no TF32 on these GPUs)"
    precs = list(dict.fromkeys(r["precision"] for r in ranges))
    which = (
        f"{precs[0]} on each GPU (section 5 has its detail)"
        if len(precs) == 1
        else "the faster AMP precision of each GPU (section 5 has "
        + ("both" if len(precs) == 2 else f"all {len(precs)}")
        + ")"
    )
    lines = [
        f"Expected AMP {step} speedup over {base} per GPU, predicted for {what}, "
        f"both precisions in {fmt} ({_layout_text([fmt, fmt])}), calibrated on "
        "committed layer profiles and published training throughputs; "
        f"{which}:",
        "",
    ]
    lines += [_screen_line(r) for r in best.values()]
    if any(bound_text(r) for r in best.values()):
        lines += ["", BOUND_WORDS_TEXT]
    for w in report.get("warnings", []):
        lines.append(f"- warning: {w}")
    return "\n".join(lines) + "\n"


def report_head(report: dict[str, Any], level: int = 1) -> str:
    """The title, the output read and ``first_screen``: what ``python -m
    ampbook.predict.doctor`` prints as soon as the step is traced."""
    return (
        _title(
            f"AMP doctor: {report['model']} ({report['model_class']}, "
            f"{report['parameters'] / 1e6:.1f} M parameters)",
            level,
            level,
        )
        + f"\n\nOutput: shape {_shape_text(report['output'])} "
        f"({report['output_rule']}); loss: {report['loss']}.\n\n" + first_screen(report)
    )


def report_body(report: dict[str, Any], level: int = 1) -> str:
    """The detailed sections (``sections``), each under a heading one below
    ``level``."""
    return "\n".join(
        f"{_title(t, level + 1, level)}\n\n{lead}\n\n{tab}\n"
        for t, lead, tab in sections(report)
    )


def _title(text: str, depth: int, level: int) -> str:
    return f"{'#' * depth} {text}" if level else f"**{text}**"


def to_markdown(report: dict[str, Any], level: int = 1) -> str:
    """The report as Markdown (``report_head`` then ``report_body``); ``level`` is the
    title's heading level (the sections one below); 0 sets the titles in bold instead
    of headings (for a page that has its own)."""
    return report_head(report, level) + "\n\n" + report_body(report, level)


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------


def check_outputs(
    json_path: str | None, markdown_path: str | None, overwrite: bool = False
) -> None:
    """``--json`` and ``--markdown`` checked before the diagnosis: two different files
    (one would overwrite the other), each writable in an existing folder, neither
    replacing a file the doctor did not write unless ``overwrite``
    (``cli.check_output_file``; an earlier JSON report is the doctor's own)."""
    outputs = {"--json": json_path, "--markdown": markdown_path}
    kinds = {"--json": REPORT_SCHEMA, "--markdown": None}
    for flag, f in outputs.items():
        if f is not None:
            try:
                cli.check_output_file(
                    f,
                    flag,
                    create_parents=False,
                    kind=kinds[flag],
                    overwrite=overwrite,
                )
            except cli.UserError as err:
                raise DoctorError(str(err)) from None
    if json_path and markdown_path:
        same = Path(json_path).resolve() == Path(markdown_path).resolve()
        if same:
            raise DoctorError(
                f"--json and --markdown both name {json_path}: the second would "
                "overwrite the first; give two files"
            )
