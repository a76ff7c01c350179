"""A traced step held against a device's ceilings: the roofline's lower bound.

``predict`` holds a trace (``ampbook.predict.steptrace.StepTrace``) against a device's
ceilings (``Ceilings``: ``Ceilings.from_device`` for an entry of
``ampbook.core.devices``, ``Ceilings.for_device`` for the device a process runs on):
each operator takes ``max(compute time, memory time)`` where compute time is ``mma FLOPs
/ tensor peak + other FLOPs / vector peak`` at the operator's dtype and memory time is
``bytes / bandwidth``; the step is the sum (operators run one after another). It is a
*lower bound* on the step time: real kernels reach a fraction of either peak, and kernel
launch latency (``min_kernel_s``) is not in it unless asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import torch

from ampbook.core.precision import torch_name
from ampbook.predict.opcost import OpCost
from ampbook.predict.steptrace import StepTrace, optimizer_bytes


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
    # ``for_device``'s ceilings, per (device, tf32)
    _FOR_DEVICE: ClassVar[dict[tuple[str, bool | None], "Ceilings"]] = {}

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

    @classmethod
    def for_device(cls, device: torch.device, tf32: bool = True) -> "Ceilings":
        """The ceilings to predict with on ``device``, once per process per device and
        ``tf32``: the device table's entry for a listed GPU (``from_device``); for
        anything else (a CPU, an unlisted GPU) ceilings measured here with one
        fp32/bf16/fp16 matmul and one fp32 elementwise add (``ampbook.measure.timing``),
        named as measured."""
        key = (str(device), tf32 if device.type == "cuda" else None)
        if key not in cls._FOR_DEVICE:
            cls._FOR_DEVICE[key] = cls._for_device(device, tf32)
        return cls._FOR_DEVICE[key]

    @classmethod
    def _for_device(cls, device: torch.device, tf32: bool) -> "Ceilings":
        from ampbook.core.devices import find_device

        if device.type == "cuda":
            entry = find_device(torch.cuda.get_device_name(device))
            if entry is not None:
                return cls.from_device(entry, tf32=tf32)
        from ampbook.measure.timing import time_elementwise, time_matmul

        n = 256 if device.type == "cpu" else 4096
        kw = {
            "device": device,
            "warmup": 1,
            "repeats": 3,
            "min_time": 0.02,
            "max_time": 0.3,
        }
        mma = {}
        for dtype in ("fp32", "bf16", "fp16"):
            try:
                mma[torch_name(dtype)] = time_matmul(n, dtype=dtype, **kw).tflops
            except (RuntimeError, ValueError):  # a dtype this device cannot multiply
                continue
        add = time_elementwise(2**22, "fp32", **kw)
        return cls(
            f"{device.type} measured here (matmul n={n}, fp32 add)",
            mma,
            vector_tflops=mma["float32"],
            bandwidth_gbs=add.gbps,
            notes="measured, not a data-sheet figure",
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
    a fraction of the roofline: ``efficiency_of`` says what fraction a measured step
    reached.
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
