"""What chapter 4 (04_loss_scaling) shows of autocast: the op probes on CPU and CUDA
and where they part from the docs, ERFNet's layers, casts and dtypes under autocast, a
layer used twice in a forward, and the reading of the loss-scaling runs.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Iterable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ampbook.chapters.ch4.op_probes import PROBE_NAMES, ProbeResult, disagreements
from ampbook.measure.autocast_rules import (
    DEVICE_TYPES,
    autocast_region,
    default_dtype,
    dtype_name,
)
from ampbook.measure.model_dtypes import CastCounter, trace_layers

if TYPE_CHECKING:
    from ampbook.numerics.loss_scaling import ScalingRun

# short: the table must fit a 1000 px page
PROBE_HEADERS = ["op", "CPU ran", "CPU docs", "CUDA ran", "CUDA docs"]


def probe_rows(probes: dict[str, dict[str, ProbeResult]]) -> list[tuple]:
    """Per probed op: observed and documented behaviour on CPU and CUDA."""
    return [
        (
            op,
            probes["cpu"][op].observed,
            probes["cpu"][op].documented or "unlisted",
            probes["cuda"][op].observed,
            probes["cuda"][op].documented or "unlisted",
        )
        for op in PROBE_NAMES
    ]


def probe_verdict(probes: dict[str, dict[str, ProbeResult]]) -> str:
    """Where CPU and CUDA autocast differ, and where either departs from its docs."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for op in PROBE_NAMES:
        a, b = probes["cpu"][op].observed, probes["cuda"][op].observed
        if a != b:
            pairs.setdefault((a, b), []).append(op)
    differ = (
        "; ".join(
            f"{', '.join(ops)} ({a} on CPU, {b} on CUDA)"
            for (a, b), ops in pairs.items()
        )
        or "none"
    )
    undocumented = []
    for d in DEVICE_TYPES:
        bad = disagreements(list(probes[d].values()))
        items = ", ".join(
            f"{r.op} ({r.observed}, documented {r.documented or 'unlisted'})"
            for r in bad
        )
        undocumented.append(f"{d.upper()}: {items or 'none'}")
    return (
        f"Ops CPU and CUDA autocast treat differently: {differ}. Observed behaviour "
        f"the documented lists do not predict: {'; '.join(undocumented)}."
    )


def layer_rows(model: nn.Module, x: torch.Tensor, device: torch.device) -> list[tuple]:
    """``(device, layer type, input dtypes, output dtype, calls)`` of one forward under
    autocast on the CPU and on CUDA (fake CUDA tensors without a GPU)."""
    rows = []
    for d in DEVICE_TYPES:
        if d == "cuda" and device.type != "cuda":
            found, label = trace_layers(model, tuple(x.shape), "cuda"), "cuda (fake)"
        else:
            dev = torch.device("cpu") if d == "cpu" else device
            found, label = trace_layers(model.to(dev), x.to(dev), d), d
        rows += [(label, *r) for r in summarize_by_type(found)]
    model.cpu()
    return rows


def dtypes_after_step(
    model: nn.Module,
    x: torch.Tensor,
    target: torch.Tensor,
    device_type: str,
    dtype: torch.dtype | None,
) -> dict[str, dict[str, int]]:
    """``parameter_and_grad_dtypes`` after one step (autocast in ``dtype``, or off)."""
    with torch.autocast(
        device_type, dtype=dtype or torch.float32, enabled=dtype is not None
    ):
        loss = F.cross_entropy(model(x).float(), target, ignore_index=255)
    loss.backward()
    return parameter_and_grad_dtypes(model)


def dtype_counts(counts: dict[str, int]) -> str:
    """``{"float32": 97}`` as ``"float32: 97"``."""
    return ", ".join(f"{k}: {v}" for k, v in counts.items())


class SameLayerTwice(nn.Module):
    """One ``Linear`` applied twice in a forward: autocast's cast cache at work."""

    def __init__(self, features: int = 64):
        super().__init__()
        self.lin = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.lin(x))


# --- what autocast does to ERFNet: layers, casts, dtypes, backward kernels ---


def summarize_by_type(rows: list[dict], key: str = "type") -> list[tuple]:
    """Distinct (type, input dtypes, output dtypes) with their counts, from
    ``trace_layers`` (``key="type"``) or ``trace_ops`` rows (``key="op"``)."""
    counts = Counter(
        (r[key], *([r["module"]] if key == "op" else []))
        + (", ".join(sorted(set(r["inputs"]))) or "-", ", ".join(r["output"]))
        for r in rows
    )
    return [(*k, n) for k, n in sorted(counts.items())]


def count_casts(
    model: nn.Module,
    x: torch.Tensor,
    device_type: str,
    dtype: torch.dtype | None = None,
    forwards: int = 1,
    cache_enabled: bool = True,
    one_region: bool = True,
) -> CastCounter:
    """The casts of ``forwards`` forward passes under autocast, all in one region (the
    cast cache lives as long as it) or one region each; gradients enabled, as the cache
    keeps only casts of leaves that require grad."""
    dtype = dtype or default_dtype(device_type)
    regions, per_region = (1, forwards) if one_region else (forwards, 1)
    with CastCounter(model=model) as counter:
        for _ in range(regions):
            with autocast_region(device_type, dtype, cache_enabled=cache_enabled):
                for _ in range(per_region):
                    model(x)
    return counter


def parameter_and_grad_dtypes(model: nn.Module) -> dict[str, dict[str, int]]:
    """``{"params": {dtype: count}, "grads": {dtype: count}}`` of a model."""
    params = list(model.parameters())
    grads = ("none" if p.grad is None else dtype_name(p.grad.dtype) for p in params)
    kinds = Counter(dtype_name(p.dtype) for p in params)
    return {"params": dict(kinds), "grads": dict(Counter(grads))}


class _BackwardOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name.endswith("_backward") or name == "_to_copy":
            outs = out if isinstance(out, (tuple, list)) else (out,)
            for o in outs:
                if isinstance(o, torch.Tensor) and o.is_floating_point():
                    self.counts[(name, dtype_name(o.dtype))] += 1
        return out


def backward_dtypes(
    model: nn.Module,
    x: torch.Tensor,
    target: torch.Tensor,
    device_type: str,
    dtype: torch.dtype | None = None,
) -> dict[tuple[str, str], int]:
    """``{(op, dtype): count}`` of the outputs of the backward kernels (``*_backward``)
    and casts (``_to_copy``) after one forward under autocast: low-precision ops make
    low-precision gradients, the casts' backward turns them fp32 before ``.grad``."""
    dtype = dtype or default_dtype(device_type)
    model.zero_grad(set_to_none=True)
    with autocast_region(device_type, dtype):
        loss = F.cross_entropy(model(x), target)
    rec = _BackwardOps()
    with rec:
        loss.backward()
    model.zero_grad(set_to_none=True)
    return dict(sorted(rec.counts.items()))


# --- the loss-scaling runs ---


def grad_scaler_defaults(device_type: str = "cpu") -> dict[str, float]:
    """GradScaler's defaults, read from a freshly made ``torch.amp.GradScaler``."""
    s = torch.amp.GradScaler(device_type)
    return {
        "init_scale": s.get_scale(),
        "growth_factor": s.get_growth_factor(),
        "backoff_factor": s.get_backoff_factor(),
        "growth_interval": s.get_growth_interval(),
    }


def choose_fp16_mode(
    requested: str, device_type: str, seconds: dict[str, float]
) -> tuple[str, str]:
    """``(mode, why)``: ``requested``; auto: autocast on CUDA, the faster on a CPU."""
    ratio = (
        f"real fp16 autocast took {seconds['autocast'] / seconds['off']:.1f}x the fp32 "
        f"time, the emulation {seconds['emulate'] / seconds['off']:.1f}x"
    )
    if requested != "auto":
        if requested not in ("emulate", "autocast"):
            raise ValueError(
                f"fp16_mode must be 'auto', 'emulate' or 'autocast', got {requested!r}"
            )
        return requested, f"chosen by the parameter fp16_mode; {ratio}"
    if device_type == "cuda":
        return "autocast", f"the GPU runs fp16 natively; {ratio}"
    mode = "autocast" if seconds["autocast"] <= seconds["emulate"] else "emulate"
    return mode, f"the faster of the two on this CPU; {ratio}"


def scaling_plan(
    fixed_scales: Iterable[float], fp16: str
) -> list[tuple[str, str, float, str]]:
    """Chapter 4's runs (label, regime, scale, fp16 mode), the fp32 reference first."""
    plan = [("fp32 reference", "none", 1.0, "off"), ("no scaling", "none", 1.0, fp16)]
    plan += [
        (f"fixed 2^{math.log2(s):g}", "fixed", float(s), fp16) for s in fixed_scales
    ]
    return plan + [("dynamic (GradScaler)", "dynamic", 1.0, fp16)]


def reference_run(runs: list[ScalingRun]) -> ScalingRun:
    """The fp32 reference among ``runs`` (the run with fp16 gradients off)."""
    ref = next((r for r in runs if r.fp16 == "off"), None)
    if ref is None:
        raise ValueError("no fp32 reference run (fp16='off') among the runs")
    return ref


def run_table(runs: list[ScalingRun]) -> tuple[list[str], list[tuple], list]:
    """``(headers, rows, formats)`` for ``md_table``: each run against fp32's."""
    ref = reference_run(runs)
    headers = ["run", "final loss", "final - fp32", "largest difference"]
    headers.append("overflow steps (skipped)")
    formats = [None, ".4f", "+.2e", ".2e", None]
    emulated = any(not math.isnan(f) for r in runs for f in r.flushed)
    if emulated:
        headers.append("mean flushed")
        formats.append(".4%")
    rows = []
    for run in runs:
        ok = run.weights_finite
        diff = max(abs(a - b) for a, b in zip(run.losses, ref.losses))
        row = [
            run.label,
            run.losses[-1],
            run.losses[-1] - ref.losses[-1] if ok else math.nan,
            diff if ok else math.nan,
            f"{sum(run.overflowed)} ({sum(run.skipped)})",
        ]
        if emulated:
            flushed = [f for f in run.flushed if not math.isnan(f)]
            row.append(sum(flushed) / len(flushed) if flushed else None)
        rows.append(tuple(row))
    return headers, rows, formats


def scaling_verdict(runs: list[ScalingRun]) -> str:
    """The dynamic run's scale history, the NaN runs, the run furthest from fp32."""
    dyn = next(r for r in runs if r.regime == "dynamic")
    ref = reference_run(runs)
    growths = sum(1 for a, b in zip(dyn.scales, dyn.scales[1:]) if b > a)
    steps, skipped = len(dyn.skipped), sum(dyn.skipped)
    text = (
        f"GradScaler started at 2^{math.log2(dyn.scales[0]):g}, skipped "
        f"{skipped} of {steps} steps, grew its scale {growths} "
        f"times and ended at 2^{math.log2(dyn.scales[-1]):g}. "
    )
    broken = [r.label for r in runs if not r.weights_finite]
    text += (
        f"Weights became NaN in: {', '.join(broken)}."
        if broken
        else "No run lost its weights to NaN."
    )
    finite = [r for r in runs if r is not ref and r.weights_finite]
    if not finite:
        return text
    far = max(finite, key=lambda r: abs(r.losses[-1] - ref.losses[-1]))
    gap = far.losses[-1] - ref.losses[-1]
    if far is dyn:
        text += (
            f" Of the runs with finite weights, GradScaler's ended furthest from the "
            f"fp32 reference ({gap:+.2e} in final loss)"
        )
        if skipped:
            text += (
                f": it skipped {skipped} of {steps} steps, so its weights took "
                f"{steps - skipped} updates to the reference's {len(ref.losses)}."
            )
        else:
            text += ", without skipping a step."
        return text
    dyn_gap = dyn.losses[-1] - ref.losses[-1] if dyn.weights_finite else math.nan
    return text + (
        f" Of the runs with finite weights, {far.label} ended furthest from the fp32 "
        f"reference ({gap:+.2e} in final loss); GradScaler's ended {dyn_gap:+.2e} from "
        f"it after skipping {skipped} of {steps} steps."
    )
