"""A traced step held against a device's ceilings: the roofline's lower bound.

Each operator takes ``max(compute time, memory time)`` (``op_time``); the step is the
sum (operators run one after another). It is a *lower bound*: real kernels reach a
fraction of either peak, and launch latency (``min_kernel_s``) is left out unless asked
for.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from ampbook.core.devices import find_device
from ampbook.core.precision import torch_name
from ampbook.measure.timing import time_elementwise, time_matmul
from ampbook.predict.opcost import OpCost
from ampbook.predict.steptrace import StepTrace, optimizer_bytes

# The device table's peaks of 16-bit matrix work: fp16 with fp32 accumulation (what
# autocast's convolutions use) and bf16.
_16BIT_PEAKS = {"float16": "fp16_tflops_fp32acc", "bfloat16": "bf16_tflops"}


@dataclass(frozen=True)
class Ceilings:
    """The peaks a roofline holds operators against. ``matmul_fp32_tflops``: the fp32
    peak of matrix products where it differs from convolutions' (PyTorch allows TF32
    for cuDNN's convolutions by default, not for cuBLAS's matrix products)."""

    name: str
    mma_tflops: Mapping[str, float]
    vector_tflops: float
    bandwidth_gbs: float
    notes: str = ""
    matmul_fp32_tflops: float | None = None

    def __post_init__(self):
        peaks = dict(bandwidth_gbs=self.bandwidth_gbs, vector_tflops=self.vector_tflops)
        peaks.update({f"mma peak for {k}": v for k, v in self.mma_tflops.items()})
        for what, v in peaks.items():
            if not v or v <= 0:
                raise ValueError(f"{self.name}: {what} must be positive, got {v}")

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

    @classmethod
    def from_device(
        cls, device: Any, tf32: bool = True, matmul_tf32: bool | None = None
    ) -> "Ceilings":
        """Ceilings of a GPU from the device table: fp32 convolutions at the TF32
        tensor-core peak when ``tf32`` (PyTorch's default for cuDNN) and the device has
        one, fp32 matrix products likewise when ``matmul_tf32`` (PyTorch's default is
        off; None: as ``tf32``); vector work at the fp32 peak."""
        fp32 = device.fp32_tflops
        tf32_peak = getattr(device, "tf32_tflops", None)
        matmul_tf32 = tf32 if matmul_tf32 is None else matmul_tf32
        mma = {"float32": tf32_peak if tf32 and tf32_peak else fp32}
        mm_peak = tf32_peak if matmul_tf32 and tf32_peak else fp32
        for dtype, attr in _16BIT_PEAKS.items():
            if getattr(device, attr, None):
                mma[dtype] = getattr(device, attr)
        name = getattr(device, "name", None) or getattr(device, "key", "device")
        return cls(
            str(name), mma, fp32, device.mem_bandwidth_gbs,
            matmul_fp32_tflops=mm_peak if mm_peak != mma["float32"] else None,
        )  # fmt: skip

    @classmethod
    def for_device(cls, device: torch.device, tf32: bool = True) -> "Ceilings":
        """The ceilings to predict with on ``device``, once per process: the device
        table's for a listed GPU, else measured here with one matmul per dtype and one
        fp32 elementwise add, named as measured."""
        return _for_device(str(device), tf32 if device.type == "cuda" else None)


@functools.cache  # once per (device, tf32)
def _for_device(where: str, tf32: bool | None) -> Ceilings:
    device = torch.device(where)
    if device.type == "cuda":
        entry = find_device(torch.cuda.get_device_name(device))
        if entry is not None:
            return Ceilings.from_device(entry, tf32=tf32)
    n = 256 if device.type == "cpu" else 4096
    kw = dict(device=device, warmup=1, repeats=3, min_time=0.02, max_time=0.3)
    mma = {}
    for dtype in ("fp32", "bf16", "fp16"):
        try:
            mma[torch_name(dtype)] = time_matmul(n, dtype=dtype, **kw).tflops
        except (RuntimeError, ValueError):  # a dtype this device cannot multiply
            continue
    add = time_elementwise(2**22, "fp32", **kw)
    name = f"{device.type} measured here (matmul n={n}, fp32 add)"
    return Ceilings(name, mma, vector_tflops=mma["float32"], bandwidth_gbs=add.gbps)


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
    """A trace held against ceilings: per-operator times and the step's total, every
    one a **lower bound** (each operator at a peak no real kernel exceeds)."""

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
        memory = sum(t.time_s for t in self.times if t.bound == "memory")
        return memory / total if total else 0.0

    @property
    def unmodelled(self) -> list[dict[str, Any]]:
        """The operators whose FLOPs the model does not know, largest bytes first
        (``why``: "FLOPs unknown" or "dtype complex64"), with their predicted time and
        share: bytes counted, FLOPs not (weaker lower bounds than the rest)."""
        nbytes = sum(t.op.bytes for t in self.times)
        total = sum(t.time_s for t in self.times)
        rows: dict[str, dict[str, Any]] = {}
        time: dict[str, float] = {}
        for t in self.times:
            o = t.op
            if o.modelled:
                continue
            row = {"op": o.op, "why": o.why_unmodelled, "count": 0, "bytes": 0.0}
            r = rows.setdefault(o.op, {**row, "phases": [], "scopes": []})
            r["count"] += 1
            r["bytes"] += o.bytes
            time[o.op] = time.get(o.op, 0.0) + t.time_s
            for key, value in (("phases", o.phase), ("scopes", o.scope)):
                if value not in r[key]:
                    r[key].append(value)
        for r in rows.values():
            r["bytes_share"] = r["bytes"] / nbytes if nbytes else 0.0
            r["time_s"] = time[r["op"]]
            r["time_share"] = r["time_s"] / total if total else 0.0
        return sorted(rows.values(), key=lambda r: -r["bytes"])

    @property
    def max_images_per_s(self) -> float:
        """The most images per second the device can train (an upper bound)."""
        return self.trace.batch_size / self.min_step_s

    def min_epoch_s(self, images: int) -> float:
        """The least compute time of an epoch of ``images`` (a lower bound)."""
        return images / self.max_images_per_s

    def efficiency_of(self, measured_step_s: float) -> float:
        """The fraction of the roofline a measured step reached (above 1: the bound
        was not one)."""
        if measured_step_s <= 0:
            raise ValueError(f"measured_step_s must be positive, got {measured_step_s}")
        return self.min_step_s / measured_step_s

    def by_scope(self) -> list[dict[str, Any]]:
        """Per module (in order of first appearance): FLOPs, bytes and time, forward and
        backward, and whether most of its time is memory-bound."""
        rows: dict[str, dict[str, Any]] = {}
        sums = ("forward_flops", "backward_flops", "forward_bytes", "backward_bytes")
        for t in self.times:
            o = t.op
            r = rows.setdefault(
                o.scope,
                {"scope": o.scope, "type": o.scope_type, **dict.fromkeys(sums, 0.0),
                 "time_s": 0.0, "memory_bound_s": 0.0, "kernels": 0},
            )  # fmt: skip
            r[f"{o.phase}_flops"] += o.flops
            r[f"{o.phase}_bytes"] += o.bytes
            r["time_s"] += t.time_s
            r["kernels"] += 1
            if t.bound == "memory":
                r["memory_bound_s"] += t.time_s
        for r in rows.values():
            r["flops"] = r["forward_flops"] + r["backward_flops"]
            r["bytes"] = r["forward_bytes"] + r["backward_bytes"]
            _bound(r)
        return list(rows.values())

    def by_type(self) -> list[dict[str, Any]]:
        """``by_scope`` summed per module type (all Conv2d together), largest first."""
        agg: dict[str, dict[str, Any]] = {}
        sums = ("flops", "bytes", "time_s", "memory_bound_s")
        for r in self.by_scope():
            a = agg.setdefault(
                r["type"], {"type": r["type"], "modules": 0, **dict.fromkeys(sums, 0.0)}
            )
            a["modules"] += 1
            for k in sums:
                a[k] += r[k]
        return [_bound(a) for a in sorted(agg.values(), key=lambda a: -a["time_s"])]


def _bound(r: dict[str, Any]) -> dict[str, Any]:
    """A ``by_scope`` row's intensity and bound (memory when half its time is)."""
    r["intensity"] = r["flops"] / r["bytes"] if r["bytes"] else math.inf
    r["bound"] = "memory" if r["memory_bound_s"] >= 0.5 * r["time_s"] else "compute"
    return r


def op_time(op: OpCost, ceilings: Ceilings, min_kernel_s: float = 0.0) -> OpTime:
    """One operator on the roofline: the least time it can take.

    An operator cannot finish before its FLOPs are done at the peak for its dtype nor
    before its bytes have moved at the bandwidth, so its time is at least the larger of
    the two (and at least ``min_kernel_s``, a launch's latency, when given).

    Shown on the page in chapter 5 (05_rtx3070)."""
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
    """The roofline's lower bound on a traced step; ``min_kernel_s``: a floor under
    each operator; ``optimizer``: ``optimizer_bytes`` at the bandwidth (None: none)."""
    if min_kernel_s < 0:
        raise ValueError(f"min_kernel_s must be >= 0, got {min_kernel_s}")
    times = [op_time(o, ceilings, min_kernel_s) for o in trace.ops]
    opt_s = 0.0
    if optimizer is not None:
        nbytes = optimizer_bytes(
            trace.parameters, optimizer, trace.precision == "amp-fp16"
        )
        opt_s = nbytes / (ceilings.bandwidth_gbs * 1e9)
    return Prediction(trace, ceilings, times, opt_s)
