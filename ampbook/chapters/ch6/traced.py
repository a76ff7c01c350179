"""Sections 1 to 3 of the doctor's report, read from the traced step: coverage (what
autocast runs in 16 bits, what stays fp32 and why), memory and the roofline."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from ampbook.core.devices import display_name
from ampbook.core.precision import AUTOCAST_DTYPES, torch_name
from ampbook.core.words import plural
from ampbook.measure.autocast_rules import aten_base, cuda_category
from ampbook.measure.memory import ADAM_STATE_BYTES_PER_PARAM
from ampbook.numerics.gradstats import CAST_WEIGHT_TYPES
from ampbook.predict.opcost import OpCost
from ampbook.predict.references import class_bounds
from ampbook.predict.roofline import Ceilings, Prediction, predict
from ampbook.predict.steptrace import AUTOGRAD, LOSS, StepTrace

SIXTEEN_BIT = ("float16", "bfloat16")
_CREATION_OPS = {"zeros", "ones", "full", "arange", "scalar_tensor", "randn", "rand"}


def fp32_reason(op: OpCost) -> str:
    """Why an operator of an AMP trace ran in fp32 (an op autocast does not list runs
    in its inputs' dtype, as a residual sum)."""
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
    if op.scope == AUTOGRAD:
        return "gradient accumulation (autograd)"
    if op.scope == LOSS:
        return f"{of}loss on fp32 values"
    if op.op in _CREATION_OPS or op.op.startswith("new_"):
        return "created in fp32"
    return "gradient of an fp32 op" if grad else "fp32 input (e.g. residual sum)"


def unmodelled_line(rows: Sequence[dict[str, Any]]) -> str | None:
    """One warning naming the operators the cost model has no FLOPs for, or None."""
    if not rows:
        return None
    names = ", ".join(
        f"{r['op']} ({r.get('why') or 'FLOPs unknown'}: {r['bytes_share']:.1%} of the "
        f"bytes, {r['time_share']:.1%} of the predicted time)"
        for r in rows[:5]
    )
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    return (
        f"{plural(len(rows), 'operator')} not modelled: "
        f"{names}{more}; their FLOPs are left out of the roofline"
    )


def coverage(trace: StepTrace) -> dict[str, Any]:
    """Section 1: the 16-bit share of an AMP trace per phase, and the fp32 rest."""
    shares = {}
    for phase in ("forward", "backward"):
        ops = trace.select(phase)
        low = [o for o in ops if o.dtype in SIXTEEN_BIT]
        shares[phase] = {
            f"{k}_16bit": sum(getattr(o, k) for o in low)
            / (sum(getattr(o, k) for o in ops) or 1.0)
            for k in ("flops", "bytes", "mma_flops")
        }
    total_bytes = sum(o.bytes for o in trace.ops) or 1.0
    groups: dict[tuple, dict[str, Any]] = {}
    for o in [o for o in trace.ops if o.dtype == "float32"]:
        g = groups.setdefault((o.phase, o.op, o.scope_type), {
            "phase": o.phase, "op": o.op, "layer_type": o.scope_type, "count": 0,
            "bytes_share": 0.0, "reason": fp32_reason(o),
        })  # fmt: skip
        g["count"] += 1
        g["bytes_share"] += o.bytes / total_bytes
    fp32_ops = sorted(groups.values(), key=lambda g: -g["bytes_share"])
    return {"precision": trace.precision, "phases": shares, "fp32_ops": fp32_ops}


def added_kernels(traces: dict[str, StepTrace], precision: str, op: str) -> int:
    """The kernels of ``op`` an AMP step adds over fp32's."""
    return sum(o.kernels * (1 if t == precision else -1) for t in (precision, "fp32")
               for o in traces[t].ops if o.op == op)  # fmt: skip


def memory_at_size(traces: dict[str, StepTrace], amp: str | None) -> dict[str, Any]:
    """Bytes saved for backward at the requested size, on the traced steps."""
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
        f32 = out["fp32_bytes"]
        out.update(
            amp_precision=amp, amp_bytes=a["new_bytes"],
            amp_over_fp32=a["new_bytes"] / f32 if f32 else None,
            amp_fp32_part=a["by_dtype"].get("float32", 0),
        )  # fmt: skip
    return out


def weight_copy_bytes(model: nn.Module) -> int:
    """Bytes of autocast's 16-bit weight copies: at most what backward keeps of them."""
    return 2 * sum(
        m.weight.numel()
        for m in model.modules()
        if isinstance(m, CAST_WEIGHT_TYPES)
        and isinstance(getattr(m, "weight", None), torch.Tensor)
    )


def roofline(
    traces: dict[str, StepTrace], gpus: Sequence[str], devices
) -> list[dict[str, Any]]:
    """Section 3: per GPU and AMP precision, the bounds; fp32 with TF32 (the baseline),
    with PyTorch's defaults (not for matrix products) and without it."""
    rows = []
    batch = traces["fp32"].batch_size
    fp32_kernels = int(traces["fp32"].totals()["kernels"])
    for key in gpus:
        d = devices[key]
        on = Ceilings.from_device(d, tf32=True, matmul_tf32=True)
        p_on, p_def, p_off = (
            predict(traces["fp32"], Ceilings.from_device(d, tf32=a, matmul_tf32=b))
            for a, b in ((True, True), (True, False), (False, False))
        )
        for prec, tr in traces.items():
            if prec == "fp32":
                continue
            dtype = torch_name(AUTOCAST_DTYPES[prec])
            row = {
                "gpu": key, "gpu_name": display_name(key, devices), "precision": prec,
                "fp32_tf32_s": p_on.min_step_s, "fp32_default_s": p_def.min_step_s,
                "fp32_strict_s": p_off.min_step_s, "fp32_kernels": fp32_kernels,
                "fp32_by_class_s": class_bounds(p_on),
            }  # fmt: skip
            if dtype not in on.mma_tflops:
                rows.append(row | {"amp_s": None})
                continue
            p = predict(tr, on)
            t, by_class = p.min_step_s, class_bounds(p)
            row.update(
                amp_s=t, amp_by_class_s=by_class, speedup_tf32=p_on.min_step_s / t,
                amp_kernels=int(tr.totals()["kernels"]),
                memory_bound_share=p.memory_bound_share,
                images_per_s_needed=batch / t, fusable_s=by_class["elementwise"],
            )  # fmt: skip
            rows.append(row)
    return rows


def where_time_goes(p: Prediction, top: int = 6) -> list[dict[str, Any]]:
    """The layer types that take most of a predicted step, their intensity and bound."""
    rows = p.by_type()
    total = sum(r["time_s"] for r in rows) or 1.0
    nbytes = sum(r["bytes"] for r in rows) or 1.0
    return [
        {"layer_type": r["type"], "modules": r["modules"],
         "time_share": r["time_s"] / total, "bytes_share": r["bytes"] / nbytes,
         "flops_per_byte": r["intensity"], "bound": r["bound"]}
        for r in rows[:top]
    ]  # fmt: skip
