"""Will AMP help *this* model? One command that diagnoses any ``nn.Module``.

    python -m ampbook.doctor --model SPEC [--input C,H,W] [--batch N]
        [--device auto|cpu|cuda] [--precisions fp32,amp-fp16,amp-bf16]
        [--gpus rtx3070-desktop,a100,h100,h200] [--loader-images-per-s X]
        [--loss cross-entropy|mse] [--json FILE] [--markdown FILE]

``SPEC`` is ``erfnet`` (the book's network), ``torchvision:NAME`` (any torchvision
model, built with ``weights=None``: nothing is downloaded) or
``package.module:callable`` (called with no arguments, it must return an
``nn.Module``). The loss is cross-entropy
against random targets shaped like the output (``N x C`` logits: one class per image;
``N x C x ...``: one class per pixel), or ``--loss mse`` against random values.

The report has five sections, printed as tables and kept in one JSON-ready dict
(``diagnose``):

1. **coverage**: of the traced step's forward and backward FLOPs and bytes, the share
   that CUDA's autocast runs in 16 bits, and the operators left in fp32 with the reason
   (autocast's fp32 list, a promotion, or an fp32 input such as a residual sum); ops the
   cost model does not model are named with the share of the step they leave out;
2. **memory**: bytes saved for backward (the book's memory figure, ``ampbook.memory``),
   fp32 against AMP, predicted for ``--batch`` from a line through batch 1 and 2 at the
   full input, and measured on this device;
3. **roofline** per GPU of the device table (``ampbook.costmodel.predict``): fp32 with
   TF32 on and off, each AMP precision, the speedup, the share of the step in
   memory-bound operators, and the images/s the input pipeline must deliver;
4. **measured** on this device: the runner's own step (``ampbook.train.TrainStep``) per
   precision at a small size on a CPU (bf16 stands in for fp16 there except at tiny
   sizes: fp16 convolutions on a CPU without fp16 units are many times slower), at
   the full size on CUDA, with channels_last and cudnn.benchmark variants;
5. **verdict**: the expected AMP speedup per GPU as a range (the roofline's bound, and
   the bound scaled by the kernel efficiencies measured in committed GPU layer profiles,
   ``ampbook.results``), and a checklist ranked by predicted gain.

Every FLOP and byte comes from ``ampbook.costmodel.trace_step`` (fake tensors: the full
size costs seconds, not memory), every dtype from the CPU autocast that stands in for
CUDA's (``ampbook.autocast_trace``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import logging
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from ampbook import cli
from ampbook import costmodel as cm
from ampbook.precision import (
    AUTOCAST_DTYPES,
    backend_flags,
    native_cpu_flags,
    torch_name,
)
from ampbook.results import PEAK_CUDA
from ampbook.results import SAVED_FOR_BACKWARD as SAVED

PRECISIONS = cm.PRECISIONS
AMP_PRECISIONS = tuple(p for p in PRECISIONS if p != "fp32")
LOSSES = ("cross-entropy", "mse")
# Largest batch x pixels at which a CPU step is timed in fp16 (on CPUs without fp16
# units its convolutions run many times slower than fp32; bf16 stands in above this).
CPU_FP16_MAX_PIXELS = 2 * 32 * 32
# A CPU step is timed at an input scaled down to about this many pixels on a side.
CPU_MEASURE_SIDE = 64
ERFNET_INPUT = (3, 512, 1024)
DEFAULT_INPUT = (3, 224, 224)
SIXTEEN_BIT = ("float16", "bfloat16")
# Measured steps within this fraction of each other are reported as the same speed.
SAME_SPEED = 0.05


class DoctorError(ValueError, cli.UserError):
    """Bad input to the doctor: the message says what is wrong and what to do."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


# --------------------------------------------------------------------------------------
# the model, the input and the GPUs
# --------------------------------------------------------------------------------------


def load_model(spec: str) -> nn.Module:
    """The module ``spec`` names: ``erfnet``, ``torchvision:NAME`` (weights=None) or
    ``package.module:callable``."""
    if spec == "erfnet":
        from ampbook.data import NUM_CLASSES
        from ampbook.model import ERFNet

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
        return torchvision.models.get_model(name, weights=None)
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


def default_input(spec: str) -> tuple[int, int, int]:
    """ERFNet's book setting (3 x 512 x 1024), else an ImageNet image (3 x 224 x
    224)."""
    return ERFNET_INPUT if spec == "erfnet" else DEFAULT_INPUT


def parse_input(text: str) -> tuple[int, int, int]:
    """``"3,224,224"`` -> (3, 224, 224): channels, height, width, all positive."""
    parts = [p.strip() for p in str(text).replace("x", ",").split(",")]
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise DoctorError(
            f"--input {text!r}: give C,H,W as three positive integers, e.g. 3,224,224"
        )
    return dims  # type: ignore[return-value]


def parse_precisions(text: str | Sequence[str]) -> list[str]:
    """The precisions asked for; fp32 (the baseline) is always among them."""
    items = text.split(",") if isinstance(text, str) else list(text)
    items = [p.strip() for p in items if p.strip()]
    bad = [p for p in items if p not in PRECISIONS]
    if bad or not items:
        raise DoctorError(
            f"--precisions {','.join(items) or repr(text)}: unknown {bad or 'empty'}; "
            f"choose from {','.join(PRECISIONS)}"
        )
    return ["fp32"] + [p for p in AMP_PRECISIONS if p in items]


def resolve_gpus(names: str | Sequence[str] | None, devices=None) -> list[str]:
    """Keys of the device table for ``names``: a key itself, or a short name that is
    part of exactly one key (``h200`` -> ``h200-sxm``). None or empty: every GPU."""
    from ampbook.devices import load_devices

    devices = load_devices() if devices is None else devices
    if not names:
        return list(devices)
    items = names.split(",") if isinstance(names, str) else list(names)
    keys = []
    for raw in (n.strip().lower() for n in items if n.strip()):
        if raw in devices:
            hits = [raw]
        else:
            hits = [k for k in devices if raw in k]
        if len(hits) != 1:
            what = "ambiguous" if hits else "unknown"
            raise DoctorError(
                f"--gpus: {what} GPU {raw!r}; choose from {', '.join(hits or devices)}"
            )
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


def output_shape(model: nn.Module, shape: Sequence[int], batch: int) -> tuple[int, ...]:
    """The model's output shape for ``batch`` inputs of ``shape``, from a forward on
    fake tensors (nothing computed). A model that rejects the input raises DoctorError
    with the model's own message."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    was_training = model.training
    model.eval()
    try:
        with _quiet_fake(), FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
            y = model(torch.empty(batch, *shape))
    except Exception as fake_error:
        err: BaseException = fake_error
        # The model's own complaint about the shape: a real forward of one image says
        # it in the model's words (fake tensors report their own meta-kernel messages).
        try:
            with torch.no_grad():
                model(torch.zeros(1, *shape))
        except Exception as real:
            err = real
        c, h, w = shape
        raise DoctorError(
            f"the model rejects input {c}x{h}x{w}: "
            f"{type(err).__name__}: {_first_line(err)}; pass --input C,H,W it accepts"
        ) from None
    finally:
        model.train(was_training)
    if not isinstance(y, torch.Tensor):
        raise DoctorError(
            f"the model returned {type(y).__name__}, not a tensor: wrap it so that "
            "forward returns the logits"
        )
    return tuple(y.shape)


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


def _base_op(op: str) -> str:
    """``native_layer_norm_backward`` -> ``layer_norm``: the name autocast's lists
    use."""
    name = op.removesuffix("_backward_data").removesuffix("_backward")
    name = name.removesuffix("_forward").lstrip("_")
    return name.removeprefix("native_")


def fp32_reason(op: cm.OpCost) -> str:
    """Why an operator of an AMP trace ran in fp32, in a few words: autocast's fp32 list
    or promotion (named), a cast, the loss, the autograd engine, or an fp32 input (an op
    autocast does not list runs in its inputs' dtype, so one fp32 input, such as the
    skip path of a residual sum, makes it fp32)."""
    from ampbook.autocast_trace import documented_category

    base = _base_op(op.op)
    grad = op.phase == "backward"
    if op.op == "_to_copy":
        return "gradient cast to fp32" if grad else "cast to fp32"
    category = documented_category(
        base, "cuda", aliases=(op.op, base.removesuffix("2d"))
    )
    of = "gradient of " if grad else ""
    if category == "float32":
        return f"{of}fp32 list ({base})"
    if category == "promote":
        return f"{of}promoted to widest input ({base})"
    if op.scope == cm.AUTOGRAD:
        return "gradient accumulation (autograd)"
    if op.scope == cm.LOSS:
        return f"{of}loss on fp32 values"
    return "gradient of an fp32 op" if grad else "fp32 input (e.g. residual sum)"


def unmodelled(p: cm.Prediction) -> list[dict[str, Any]]:
    """Operators whose FLOPs the cost model does not know (``StepTrace.unmodelled``):
    their bytes are counted, their FLOPs are not; each with its share of the step's
    bytes and of the predicted time."""
    return [dict(r) for r in p.unmodelled]


def unmodelled_line(rows: Sequence[dict[str, Any]]) -> str | None:
    """One warning line naming the unmodelled operators and their share, or None."""
    if not rows:
        return None
    names = ", ".join(
        f"{r['op']} ({r['bytes_share']:.1%} of the bytes, {r['time_share']:.1%} of the "
        "predicted time)"
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


# --------------------------------------------------------------------------------------
# 2. memory
# --------------------------------------------------------------------------------------


def _saved_bytes(model, x, y, loss: str, dtype) -> int:
    """New bytes saved for backward by one real forward on the CPU, under CUDA's
    autocast lists (``autocast_trace.CudaAutocastRules``) when ``dtype`` is set."""
    from ampbook.autocast_trace import CudaAutocastRules
    from ampbook.memory import saved_for_backward

    fn = nn.MSELoss() if loss == "mse" else nn.CrossEntropyLoss(ignore_index=255)
    with CudaAutocastRules():
        return saved_for_backward(model, x, y, "cpu", dtype, loss_fn=fn)["new_bytes"]


def predict_memory(
    model: nn.Module,
    shape: Sequence[int],
    batch: int,
    loss: str,
    small: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Bytes saved for backward at ``batch`` x ``shape``, fp32 and AMP, from a line in
    the pixels of a batch (``ampbook.memory.fit_line``, the book's memory line) through
    batch 1 and 2 at the input ``small`` (default: ``shape``): real forwards on the CPU
    under CUDA's autocast lists, bf16 standing in for fp16 (the same bytes)."""
    from ampbook.memory import fit_line

    small = tuple(small or shape)
    out = output_shape(model, small, 1)
    g = torch.Generator().manual_seed(0)
    lines = {}
    for name, dtype in (("fp32", None), ("amp", torch.bfloat16)):
        points = []
        for n in (1, 2):
            x = torch.randn(n, *small, generator=g)
            y = targets(loss, (n, *out[1:]), g)
            pixels = n * small[1] * small[2]
            points.append((pixels, _saved_bytes(model, x, y, loss, dtype)))
        lines[name] = fit_line(points)
    pixels = batch * shape[1] * shape[2]
    fp32, amp = lines["fp32"](pixels), lines["amp"](pixels)
    size = "x".join(map(str, small[1:]))
    return {
        "batch": batch,
        "fp32_bytes": fp32,
        "amp_bytes": amp,
        "amp_over_fp32": amp / fp32 if fp32 else None,
        "fixed_amp_bytes": lines["amp"].intercept,
        "method": f"a line in the pixels of a batch through batch 1 and 2 at {size} "
        "(real forwards on the CPU under CUDA's autocast lists, bf16: the same bytes "
        "as fp16)",
    }


# --------------------------------------------------------------------------------------
# 3. roofline per GPU
# --------------------------------------------------------------------------------------


def roofline(
    traces: dict[str, cm.StepTrace],
    gpus: Sequence[str],
    loader_images_per_s: float | None = None,
    devices=None,
) -> list[dict[str, Any]]:
    """Section 3: per GPU and AMP precision, the predicted steps and what they need."""
    from ampbook.devices import load_devices

    devices = load_devices() if devices is None else devices
    rows = []
    batch = traces["fp32"].batch_size
    for key in gpus:
        d = devices[key]
        on, off = (
            cm.Ceilings.from_device(d, tf32=True),
            cm.Ceilings.from_device(d, tf32=False),
        )
        p_on, p_off = cm.predict(traces["fp32"], on), cm.predict(traces["fp32"], off)
        for prec, tr in traces.items():
            if prec == "fp32":
                continue
            dtype = torch_name(AUTOCAST_DTYPES[prec])
            row = {
                "gpu": key,
                "gpu_name": d.name,
                "precision": prec,
                "fp32_tf32_s": p_on.min_step_s,
                "fp32_strict_s": p_off.min_step_s,
                "fp32_memory_bound_share": p_on.memory_bound_share,
            }
            if dtype not in on.mma_tflops:
                row.update(amp_s=None, note=f"{d.name} has no {dtype} tensor cores")
                rows.append(row)
                continue
            p = cm.predict(tr, on)
            row.update(
                amp_s=p.min_step_s,
                speedup_tf32=p_on.min_step_s / p.min_step_s,
                speedup_strict=p_off.min_step_s / p.min_step_s,
                memory_bound_share=p.memory_bound_share,
                mma_share=_mma_share(p),
                images_per_s_needed=batch / p.min_step_s,
                fp32_images_per_s_needed=batch / p_on.min_step_s,
            )
            if loader_images_per_s:
                row["epoch_bound"] = (
                    "loader"
                    if loader_images_per_s < row["images_per_s_needed"]
                    else "step"
                )
                row["pace"] = cm.pace_verdict(
                    loader_images_per_s, row["images_per_s_needed"], f"on {d.name}"
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


def measure_size(
    model: nn.Module, shape: Sequence[int], batch: int, device: torch.device
) -> tuple[tuple[int, int, int], int]:
    """Where to time steps: the full size on CUDA; on a CPU an input scaled to about
    ``CPU_MEASURE_SIDE`` pixels a side (multiples of 32) and batch <= 2, or the full
    input at batch 1 when the model accepts no other."""
    if device.type == "cuda":
        return tuple(shape), batch  # type: ignore[return-value]
    c, h, w = shape
    f = max(1, math.ceil(max(h, w) / CPU_MEASURE_SIDE))
    small = (c, max(32, round(h / f / 32) * 32), max(32, round(w / f / 32) * 32))
    small = (c, min(small[1], h), min(small[2], w))
    try:
        output_shape(model, small, 1)
        return small, min(batch, 2)
    except DoctorError:
        return tuple(shape), 1  # type: ignore[return-value]


def _variants(device: torch.device, precisions: Sequence[str], pixels: int):
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
    out = [("fp32", "fp32", False, False, False, None)]
    for p in precisions[1:]:
        why = None
        if p == "amp-fp16" and pixels > CPU_FP16_MAX_PIXELS:
            why = (
                "not timed: fp16 convolutions on a CPU without fp16 units run many "
                f"times slower than fp32 (timed only at <= {CPU_FP16_MAX_PIXELS} "
                "pixels a batch); amp-bf16 stands in"
            )
        out.append((p, p, False, False, False, why))
    return out


class _Variant:
    """One timed variant: its own copy of the model, optimizer and the runner's step,
    with the CUDA flags it runs under."""

    def __init__(self, model, device, prec, tf32, cl, bench, x, y):
        from ampbook.train import TrainStep

        net = copy.deepcopy(model).to(device)
        if cl:
            net = net.to(memory_format=torch.channels_last)
        opt = torch.optim.Adam(net.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler(device.type) if prec == "amp-fp16" else None
        crit = nn.MSELoss() if y.is_floating_point() else nn.CrossEntropyLoss()
        dtype = AUTOCAST_DTYPES[prec]
        self.net, self.device = net, device
        self.step = TrainStep(net, opt, crit, device, dtype, scaler, channels_last=cl)
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
        from ampbook.timing import benchmark

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
        from ampbook.memory import SavedTensorMeter

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


def measure(
    model: nn.Module,
    shape: Sequence[int],
    batch: int,
    loss: str,
    precisions: Sequence[str],
    device: torch.device,
    repeats: int = 3,
) -> dict[str, Any]:
    """Section 4: the runner's step timed per precision (and layout/flag) here."""
    from ampbook.env import cpu_name

    mshape, mbatch = measure_size(model, shape, batch, device)
    out = output_shape(model, mshape, mbatch)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(mbatch, *mshape, generator=g)
    y = targets(loss, out, g)
    pixels = mbatch * mshape[1] * mshape[2]
    rows, live = [], []
    for label, prec, tf32, cl, bench, why in _variants(device, precisions, pixels):
        row = {"variant": label, "precision": prec, "skipped": why}
        rows.append(row)
        if why is not None:
            continue
        try:  # two warm-up steps (the first calls build oneDNN/cuDNN kernels)
            v = _Variant(model, device, prec, tf32, cl, bench, x, y)
            if device.type == "cuda":  # one after another: its peak holds only its own
                v.time(2, repeats)
                _finish(row, v)
                del v
                torch.cuda.empty_cache()
            else:
                v.time(2, 1)
                live.append((row, v))
        except Exception as e:  # e.g. an op without a kernel for this dtype here
            row["skipped"] = f"failed: {type(e).__name__}: {_first_line(e)}"
    # On a CPU the variants take turns, so a machine busy with other work slows
    # every variant alike.
    for _ in range(repeats - 1):
        for _, v in live:
            v.time(0, 1)
    for row, v in live:
        _finish(row, v)
    base = rows[0].get("step_s")
    for r in rows:
        if r.get("step_s") and base:
            r["speedup"] = base / r["step_s"]
    if device.type == "cuda":
        what = torch.cuda.get_device_name(device)
    else:
        flags = native_cpu_flags()
        what = f"{cpu_name()} (16-bit units: {', '.join(flags) or 'none listed'})"
    return {
        "device": device.type,
        "device_name": what,
        "input": list(mshape),
        "batch": mbatch,
        "rows": rows,
    }


# --------------------------------------------------------------------------------------
# 5. verdict
# --------------------------------------------------------------------------------------


def profile_efficiencies(results_dir=None) -> dict[str, dict[str, Any]]:
    """Kernel efficiency (roofline bound / measured step) of every committed GPU layer
    profile (``ampbook.results``), per GPU and precision: ``{gpu name: {"key": table
    key or None, "fp32": e, "amp-fp16": e, ...}}``."""
    from ampbook.results import load_results_dir

    out: dict[str, dict[str, Any]] = {}
    for lp in load_results_dir(results_dir).layer_profiles:
        if not lp.step_s > 0:
            continue
        e = out.setdefault(lp.device_name, {"key": table_key(lp.device_name)})
        e[lp.precision] = lp.efficiency
    return out


def _efficiency_for(gpu: str, precision: str, effs: dict) -> tuple[float, str] | None:
    """The efficiency ratio AMP/fp32 to apply on ``gpu``: its own profiles when
    committed, else those of another GPU (named)."""
    pairs = [(name, e) for name, e in effs.items() if "fp32" in e and precision in e]
    own = [(n, e) for n, e in pairs if e["key"] == gpu]
    pick = (own or pairs)[:1]
    if not pick:
        return None
    name, e = pick[0]
    return e[precision] / e["fp32"], name


def speedup_range_verdict(
    gpu_name: str, precision: str, bound: float, at_efficiency: float | None, source=""
) -> str:
    """The expected AMP speedup on one GPU, in one line: the roofline's ratio and, when
    kernel efficiencies were measured, the ratio at those efficiencies."""
    if bound <= 0 or (at_efficiency is not None and at_efficiency <= 0):
        raise ValueError("speedups must be positive")
    if at_efficiency is None:
        lo = hi = bound
        how = "the roofline's ratio alone: no committed GPU layer profile"
    else:
        lo, hi = sorted((bound, at_efficiency))
        how = (
            f"roofline {bound:.2f}x; {at_efficiency:.2f}x at the kernel efficiencies "
            f"of ERFNet's layer profiles on {source}"
        )
    span = f"{lo:.2f}x" if lo == hi else f"{lo:.2f}x to {hi:.2f}x"
    if hi < 1.1:
        gist = "little or nothing to gain"
    elif lo >= 1.5:
        gist = "a clear gain"
    else:
        gist = "a modest gain"
    return f"{gpu_name}: {precision} over fp32 (TF32 on) {span}, {gist} ({how})."


def checklist(
    roof: list[dict[str, Any]],
    preds: dict[str, cm.Prediction],
    loader_images_per_s: float | None,
    measured: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """What to try for this model, ranked by predicted (or measured) gain on the step:
    AMP, TF32 for the fp32 baseline, fusing the non-matrix ops (an upper bound), the
    input pipeline (with a loader rate), channels_last and cudnn.benchmark (measured on
    CUDA)."""
    items = []
    amp_rows = [r for r in roof if r.get("amp_s")]
    if amp_rows:
        best = max(amp_rows, key=lambda r: r["speedup_tf32"])
        gains = [r["speedup_tf32"] for r in amp_rows]
        items.append(
            {
                "item": "train with AMP",
                "gain": best["speedup_tf32"],
                "detail": f"roofline {min(gains):.2f}x to {max(gains):.2f}x over the "
                f"GPUs; most on {best['gpu_name']} ({best['precision']})",
                "source": "predicted",
            }
        )
        tf = [r["fp32_strict_s"] / r["fp32_tf32_s"] for r in amp_rows]
        items.append(
            {
                "item": "for fp32, allow TF32 (the allow_tf32 flags)",
                "gain": max(tf),
                "detail": f"roofline {min(tf):.2f}x to {max(tf):.2f}x over the GPUs",
                "source": "predicted",
            }
        )
    for gpu, p in preds.items():
        ops_s = sum(t.time_s for t in p.times)
        mma_s = sum(t.time_s for t in p.times if t.op.mma_flops)
        if mma_s > 0:
            items.append(
                {
                    "item": "fuse element-wise ops (torch.compile)",
                    "gain": (ops_s + p.optimizer_s) / (mma_s + p.optimizer_s),
                    "detail": f"at most, on {p.ceilings.name} with AMP: the non-matrix "
                    f"ops take {1 - mma_s / ops_s:.0%} of the bound",
                    "source": "upper bound",
                }
            )
        break  # one GPU (the first asked for) stands for the rest here
    if loader_images_per_s and amp_rows:
        need = max(r["images_per_s_needed"] for r in amp_rows)
        if loader_images_per_s < need:
            items.append(
                {
                    "item": "speed up the input pipeline (more workers, faster "
                    "decoding)",
                    "gain": need / loader_images_per_s,
                    "detail": f"the loader's {loader_images_per_s:.3g} images/s bound "
                    f"the epoch; the fastest GPU here needs {need:.3g}",
                    "source": "predicted",
                }
            )
    if measured and measured["device"] == "cuda":
        rows = {r["variant"]: r for r in measured["rows"] if r.get("step_s")}
        for r in rows.values():
            for what in ("channels_last", "cudnn.benchmark"):
                if r["variant"].endswith(what) and r["precision"] in rows:
                    items.append(
                        {
                            "item": f"{what} with {r['precision']}",
                            "gain": rows[r["precision"]]["step_s"] / r["step_s"],
                            "detail": f"measured on {measured['device_name']}",
                            "source": "measured",
                        }
                    )
    return sorted(items, key=lambda i: -i["gain"])


def table_key(device_name: str) -> str | None:
    """The device-table key of a GPU named as ``torch.cuda.get_device_name`` names it
    (None when the table has no entry, or several match)."""
    from ampbook.devices import find_device

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
    from ampbook.devices import load_devices

    devices = load_devices() if devices is None else devices
    c = cm.Ceilings.from_device(devices[gpu], tf32=True)
    dtype = torch_name(AUTOCAST_DTYPES[precision])
    if dtype not in c.mma_tflops:
        return None
    return c.mma_tflops[dtype] / c.mma_tflops["float32"]


def gain_verdict(report: dict[str, Any], gpu: str, precision: str = "amp-fp16") -> str:
    """Which of the two ratios a model's predicted AMP gain on ``gpu`` follows, in one
    line: the bytes (a memory-bound step gains what autocast halves) or the tensor
    cores' peak (a math-bound step gains what the matrix units add)."""
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
        "its bytes set the gain"
        if peak is None or abs(math.log(speed / nb)) <= abs(math.log(speed / peak))
        else "the tensor cores' peak sets the gain"
    )
    peak_text = f"{peak:.2f}x" if peak else "none"
    return (
        f"{report['model']} on {row['gpu_name']}: {precision} {speed:.2f}x at the "
        f"roofline, {row['memory_bound_share']:.0%} of the step memory-bound; bytes "
        f"shrink {nb:.2f}x, the matrix peak grows {peak_text}: {follows}."
    )


def measured_verdict(measured: dict[str, Any]) -> str:
    """What the timed steps on this device say, in one line: the fastest AMP variant
    against fp32, and on a CPU whether it lists 16-bit units."""
    rows = [r for r in measured["rows"] if r.get("step_s")]
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
    where = "this GPU" if measured["device"] == "cuda" else "this CPU"
    return (
        f"On {where}, the fastest AMP step ({best['variant']}) ran at "
        f"{best['speedup']:.2f}x fp32's speed at batch {measured['batch']} x "
        f"{'x'.join(map(str, measured['input']))}: {way} here."
    )


def measured_speedup_verdict(
    gpu_name: str, measured: float, low: float, high: float
) -> str:
    """A measured AMP step speedup held against the doctor's predicted range, in one
    line."""
    if not 0 < low <= high or measured <= 0:
        raise ValueError(f"need 0 < low <= high and measured > 0, got {low}, {high}")
    span = f"{low:.2f}x" if low == high else f"{low:.2f}x to {high:.2f}x"
    if measured < low:
        where = "below the predicted range: the kernels fell short of the model"
    elif measured <= high:
        where = "inside the predicted range"
    else:
        where = "above the predicted range: fp32 ran further from its roofline"
    return (
        f"{gpu_name}: measured AMP step speedup {measured:.2f}x against "
        f"{span} predicted, {where}."
    )


# --------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------


@dataclass
class DoctorConfig:
    model: str
    input: tuple[int, int, int] | None = None
    batch: int | None = None
    device: str = "auto"
    precisions: list[str] = field(default_factory=lambda: list(PRECISIONS))
    gpus: list[str] | None = None
    loader_images_per_s: float | None = None
    loss: str = "cross-entropy"
    measure: bool = True
    repeats: int = 3
    results_dir: str | None = None


def diagnose(cfg: DoctorConfig, model: nn.Module | None = None) -> dict[str, Any]:
    """The whole report as a JSON-ready dict (sections ``coverage``, ``memory``,
    ``roofline``, ``where``, ``measured``, ``verdict``). ``model`` overrides
    ``cfg.model``'s construction (the spec is then only its label)."""
    from ampbook.devices import load_devices
    from ampbook.env import pick_device

    if cfg.loss not in LOSSES:
        raise DoctorError(f"--loss {cfg.loss!r}: choose {' or '.join(LOSSES)}")
    if cfg.batch is not None and cfg.batch < 1:
        raise DoctorError(f"--batch {cfg.batch}: must be a positive integer")
    if cfg.loader_images_per_s is not None and not cfg.loader_images_per_s > 0:
        raise DoctorError(
            f"--loader-images-per-s {cfg.loader_images_per_s}: must be positive"
        )
    precisions = parse_precisions(cfg.precisions)
    devices = load_devices()
    gpus = resolve_gpus(cfg.gpus, devices)
    try:
        device = pick_device(cfg.device)
    except (RuntimeError, ValueError) as e:
        raise DoctorError(f"--device {cfg.device}: {_first_line(e)}") from None
    model = load_model(cfg.model) if model is None else model
    shape = tuple(cfg.input) if cfg.input else default_input(cfg.model)
    batch = cfg.batch or (6 if cfg.model == "erfnet" else 32)
    clock = time.perf_counter()
    seconds: dict[str, float] = {}

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[name] = now - clock
        clock = now

    out = output_shape(model, shape, batch)
    _check_loss(cfg.loss, out)
    c, h, w = shape
    traces = {}
    for p in precisions:
        try:
            with _quiet_fake():
                traces[p] = cm.trace_step(
                    model, batch, h, w, p, in_channels=c, loss=_loss_fn(cfg.loss)
                )
        except DoctorError:
            raise
        except Exception as e:
            raise DoctorError(
                f"tracing the {p} step failed: {type(e).__name__}: {_first_line(e)}"
            ) from None
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
    small, _ = measure_size(model, shape, batch, torch.device("cpu"))
    try:
        predicted = predict_memory(model, shape, batch, cfg.loss, small)
    except Exception as e:  # the model cannot run a real step here: say so, go on
        predicted = {"error": f"{type(e).__name__}: {_first_line(e)}", "batch": batch}
    memory = {"predicted": predicted}
    lap("memory")
    measured = None
    if cfg.measure:
        measured = measure(
            model, shape, batch, cfg.loss, precisions, device, cfg.repeats
        )
        memory["measured"] = [
            {
                "variant": r["variant"],
                "bytes": r["memory_bytes"],
                "measure": r["memory_measure"],
            }
            for r in measured["rows"]
            if r.get("memory_bytes") is not None
        ]
        memory["measured_input"], memory["measured_batch"] = (
            measured["input"],
            measured["batch"],
        )
    lap("measured")
    effs = profile_efficiencies(cfg.results_dir)
    ranges = []
    for r in roof:
        if not r.get("amp_s"):
            continue
        e = _efficiency_for(r["gpu"], r["precision"], effs)
        at = r["speedup_tf32"] * e[0] if e else None
        ranges.append(
            {
                "gpu": r["gpu"],
                "precision": r["precision"],
                "bound": r["speedup_tf32"],
                "at_efficiency": at,
                "efficiency_source": e[1] if e else None,
                "low": min(r["speedup_tf32"], at or r["speedup_tf32"]),
                "high": max(r["speedup_tf32"], at or r["speedup_tf32"]),
                "line": speedup_range_verdict(
                    r["gpu_name"],
                    r["precision"],
                    r["speedup_tf32"],
                    at,
                    e[1] if e else "",
                ),
            }
        )
    amp_preds = {first.key: preds[amp]} if amp in preds else {}
    cover = coverage(traces[amp], preds.get(amp)) if amp else None
    unknown = unmodelled(preds.get(amp) or preds["fp32"])
    warning = unmodelled_line(unknown)
    return {
        "schema": "ampbook.doctor/1",
        "model": cfg.model,
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "input": list(shape),
        "batch": batch,
        "output": list(out),
        "loss": cfg.loss,
        "precisions": precisions,
        "gpus": gpus,
        "totals": {p: tr.totals() for p, tr in traces.items()},
        "coverage": cover,
        "memory": memory,
        "roofline": roof,
        "where": {
            "gpu": first.name,
            "precision": amp or "fp32",
            "types": where_time_goes(preds.get(amp) or preds["fp32"]),
        },
        "measured": measured,
        "verdict": {
            "ranges": ranges,
            "checklist": checklist(roof, amp_preds, cfg.loader_images_per_s, measured),
        },
        "unmodelled": unknown,
        "warnings": [warning] if warning else [],
        "seconds": seconds,
    }


# --------------------------------------------------------------------------------------
# printing
# --------------------------------------------------------------------------------------


def _mib(b):
    return None if b is None else b / 2**20


def sections(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The report as (title, one-line lead, Markdown table) per section."""
    from ampbook.plots import md_table_text

    out = []
    cov = report["coverage"]
    if cov:
        ph = cov["phases"]
        rows = [
            (k, v["flops_16bit"], v["mma_flops_16bit"], v["bytes_16bit"])
            for k, v in ph.items()
        ]
        lead = (
            f"{cov['precision']} on CUDA's autocast rules (traced on the CPU), "
            f"{report['batch']} x {'x'.join(map(str, report['input']))}"
        )
        table = md_table_text(
            rows,
            [
                "phase",
                "FLOPs in 16 bits",
                "matrix FLOPs in 16 bits",
                "bytes in 16 bits",
            ],
            [None, ".1%", ".1%", ".1%"],
        )
        fp32 = [
            (
                g["phase"],
                g["op"],
                g["layer_type"],
                g["count"],
                g["flops_share"],
                g["bytes_share"],
                g["reason"],
            )
            for g in cov["fp32_ops"][:12]
        ]
        table += "\n\nLeft in fp32 (largest share of the step's bytes first):\n\n"
        table += md_table_text(
            fp32 or [("-", "none", "-", 0, 0.0, 0.0, "-")],
            ["phase", "op", "layer type", "kernels", "FLOPs", "bytes", "why fp32"],
            [None, None, None, None, ".2%", ".2%", None],
        )
        if report["unmodelled"]:
            table += "\n\nNot modelled (bytes counted, FLOPs left out):\n\n"
            table += md_table_text(
                [
                    (u["op"], u["count"], u["bytes_share"], u["time_share"])
                    for u in report["unmodelled"]
                ],
                ["op", "kernels", "share of bytes", "share of predicted time"],
                [None, None, ".1%", ".1%"],
            )
        out.append(("1. Coverage", lead, table))
    mem = report["memory"]
    pm = mem["predicted"]
    if "error" in pm:
        rows = [(f"predicted, batch {pm['batch']}: failed ({pm['error']})", None, None)]
    else:
        rows = [
            (f"predicted, batch {pm['batch']} (fp32)", _mib(pm["fp32_bytes"]), None),
            (
                f"predicted, batch {pm['batch']} (AMP)",
                _mib(pm["amp_bytes"]),
                pm["amp_over_fp32"],
            ),
        ]
    measured = mem.get("measured", [])
    for m in measured:
        rows.append(
            (
                f"measured here ({m['variant']}, {m['measure']})",
                _mib(m["bytes"]),
                m["bytes"] / measured[0]["bytes"] if measured[0]["bytes"] else None,
            )
        )
    lead = pm.get("method", "no prediction: a real forward failed on this CPU")
    if measured:
        lead += (
            f"; measured at batch {mem['measured_batch']} x "
            f"{'x'.join(map(str, mem['measured_input']))}"
        )
    out.append(
        (
            "2. Memory: bytes saved for backward",
            lead,
            md_table_text(rows, ["", "MiB", "over fp32"], [None, ".1f", ".2f"]),
        )
    )
    rows = []
    for r in report["roofline"]:
        rows.append(
            (
                r["gpu"],
                r["precision"],
                r["fp32_tf32_s"] * 1e3,
                r["fp32_strict_s"] * 1e3,
                r["amp_s"] * 1e3 if r["amp_s"] else None,
                r.get("speedup_tf32"),
                r.get("speedup_strict"),
                r.get("memory_bound_share"),
                r.get("images_per_s_needed"),
                r.get("epoch_bound", r.get("note", "")),
            )
        )
    out.append(
        (
            "3. Roofline per GPU (lower bounds)",
            f"batch {report['batch']}; images/s: what the input pipeline must deliver "
            "to keep the GPU busy at the bound",
            md_table_text(
                rows,
                [
                    "GPU",
                    "AMP",
                    "fp32 TF32 (ms)",
                    "fp32 strict (ms)",
                    "AMP (ms)",
                    "speedup vs TF32",
                    "vs strict",
                    "memory-bound",
                    "images/s",
                    "epoch bound",
                ],
                [None, None, ".3g", ".3g", ".3g", ".2f", ".2f", ".0%", ".4g", None],
            ),
        )
    )
    wh = report["where"]
    out.append(
        (
            f"Where the time goes ({wh['gpu']}, {wh['precision']})",
            "predicted share of the step's time and bytes per layer type",
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
                ],
                [
                    "layer type",
                    "modules",
                    "share of step",
                    "share of bytes",
                    "FLOPs/byte",
                    "bound",
                ],
                [None, None, ".0%", ".0%", ".3g", None],
            ),
        )
    )
    me = report["measured"]
    if me:
        rows = [
            (
                r["variant"],
                r["step_s"] * 1e3 if r.get("step_s") else None,
                r.get("speedup"),
                r["skipped"] or "",
            )
            for r in me["rows"]
        ]
        out.append(
            (
                "4. Measured on this device",
                f"{me['device_name']}; the runner's step, batch {me['batch']} x "
                f"{'x'.join(map(str, me['input']))}",
                md_table_text(
                    rows,
                    ["variant", "median step (ms)", "speedup", "note"],
                    [None, ".1f", ".2f", None],
                ),
            )
        )
    ver = report["verdict"]
    lines = "\n".join(f"- {r['line']}" for r in ver["ranges"])
    table = md_table_text(
        [
            (i + 1, c["item"], c["gain"], c["source"], c["detail"])
            for i, c in enumerate(ver["checklist"])
        ],
        ["rank", "try", "gain (x)", "from", "detail"],
        [None, None, ".2f", None, None],
    )
    out.append(("5. Verdict", "expected AMP speedup per GPU", lines + "\n\n" + table))
    return out


def to_markdown(report: dict[str, Any]) -> str:
    head = (
        f"# AMP doctor: {report['model']} ({report['model_class']}, "
        f"{report['parameters'] / 1e6:.1f} M parameters)\n"
    )
    body = "\n".join(
        f"## {t}\n\n{lead}\n\n{tab}\n" for t, lead, tab in sections(report)
    )
    return head + "\n" + body


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ampbook.doctor",
        description="Will AMP help this model? Coverage, memory, roofline per GPU, a "
        "measured step here, and a verdict.",
    )
    p.add_argument(
        "--model",
        required=True,
        help="erfnet, torchvision:NAME or package.module:callable",
    )
    p.add_argument(
        "--input", help="C,H,W (default 3,512,1024 for erfnet, else 3,224,224)"
    )
    p.add_argument(
        "--batch", type=int, help="batch size (default 6 for erfnet, else 32)"
    )
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (measured here)")
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument(
        "--gpus",
        help="device-table keys or short names such as h200 "
        "(default: every GPU of the table)",
    )
    p.add_argument(
        "--loader-images-per-s",
        type=cli.positive_float,
        help="what your input pipeline delivers: says which side bounds the epoch",
    )
    p.add_argument("--loss", default="cross-entropy", choices=LOSSES)
    p.add_argument("--no-measure", action="store_true", help="skip the timed steps")
    p.add_argument("--repeats", type=int, default=3, help="timed steps per variant")
    p.add_argument("--results-dir", help="committed GPU results (default data/results)")
    p.add_argument("--json", help="write the report as JSON here")
    p.add_argument("--markdown", help="write the report as Markdown here")
    return p


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one error line, as every ampbook command
        raise DoctorError(message)


@cli.command("python -m ampbook.doctor")
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    parser.__class__ = _Parser
    try:
        a = parser.parse_args(argv)
        check_outputs(a.json, a.markdown)
        if a.repeats < 1:
            raise DoctorError(f"--repeats {a.repeats}: must be at least 1")
        cfg = DoctorConfig(
            model=a.model,
            input=parse_input(a.input) if a.input else None,
            batch=a.batch,
            device=a.device,
            precisions=parse_precisions(a.precisions),
            gpus=resolve_gpus(a.gpus) if a.gpus else None,
            loader_images_per_s=a.loader_images_per_s,
            loss=a.loss,
            measure=not a.no_measure,
            repeats=a.repeats,
            results_dir=a.results_dir,
        )
        report = diagnose(cfg)
    except DoctorError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for w in report["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    text = to_markdown(report)
    print(text)
    if a.json:
        cli.save_result(a.json, _jsonable(report), "the report's numbers")
    if a.markdown:
        try:
            cli.write_text_atomic(a.markdown, text)
        except OSError as err:
            raise cli.Stopped(
                f"could not write {a.markdown}: {cli.os_error(err)[1]} (the report "
                "is printed above)"
            ) from None
    return 0


def check_outputs(json_path: str | None, markdown_path: str | None) -> None:
    """``--json`` and ``--markdown`` checked before the diagnosis: two different files
    (one would overwrite the other), each writable in an existing folder."""
    outputs = {"--json": json_path, "--markdown": markdown_path}
    for flag, f in outputs.items():
        if f is not None:
            try:
                cli.check_output_file(f, flag, create_parents=False)
            except cli.UserError as err:
                raise DoctorError(str(err)) from None
    if json_path and markdown_path:
        same = Path(json_path).resolve() == Path(markdown_path).resolve()
        if same:
            raise DoctorError(
                f"--json and --markdown both name {json_path}: the second would "
                "overwrite the first; give two files"
            )


if __name__ == "__main__":
    sys.exit(main())
