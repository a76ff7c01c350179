"""The book's one model of a training step's GPU work, as every chapter and the
doctor print it (``tests/test_stepmodel.py`` fails when two print different bounds).

**The layout.** The bound leaves out the NCHW-to-NHWC transposes cuDNN *may* put
around a 16-bit convolution on NCHW tensors (its documentation says it may, not that
it always does: ``cudnn-legacy-api`` in book/references.bib): a lower bound holds only
certain work. The committed H200 layer profiles agree: ERFNet's NCHW fp16 convolutions
took less kernel time than its TF32 ones (``convolution_evidence``), where transposes
would make their bound larger. ``layout_bounds`` prints both bounds (chapter 5).
"""

from __future__ import annotations

from typing import Any

from ampbook.core.devices import load_devices
from ampbook.predict.references import class_bounds, layer_class, profile_groups
from ampbook.predict.roofline import Ceilings, Prediction, predict
from ampbook.predict.specs import load_model
from ampbook.predict.steptrace import StepTrace, trace_step, with_memory_format

# The layout the RTX 3070 blog post and the book's H200 runs trained in.
BOOK_LAYOUT = "channels_first"


def step_trace(
    model, batch: int, height: int, width: int, precision: str,
    memory_format: str = BOOK_LAYOUT,
) -> StepTrace:  # fmt: skip
    """One training step of ``model`` traced in ``precision`` and ``memory_format``
    (without cuDNN's NCHW transposes, as the bound leaves them out)."""
    tr = trace_step(model, batch, height, width, precision)
    return with_memory_format(tr, memory_format)


def bound_pair(
    traces: dict[str, StepTrace], device, amp: str, baseline_tf32: bool = True
) -> dict[str, Any]:
    """fp32's (TF32 when ``baseline_tf32``) and ``amp``'s (its fp32 leftovers with
    TF32) Predictions on a device-table entry, and ``ratio``: fp32's bound over AMP's,
    the speedup if both reached the same share of their bounds."""
    base = Ceilings.from_device(device, tf32=baseline_tf32, matmul_tf32=baseline_tf32)
    on = Ceilings.from_device(device, tf32=True, matmul_tf32=True)
    p32: Prediction = predict(traces["fp32"], base)
    p16: Prediction = predict(traces[amp], on)
    return {"fp32": p32, "amp": p16, "ratio": p32.min_step_s / p16.min_step_s}


def layout_bounds(
    model, batch: int, height: int, width: int, amp: str, devices: dict, trace=None
) -> list[dict[str, Any]]:
    """The bound of one NCHW step on each GPU of ``devices``, the book's and with
    cuDNN's transposes assumed (``trace``: a cached ``trace_step``-like function of
    batch, height, width, precision)."""
    trace = trace or (lambda b, h, w, p: trace_step(model, b, h, w, p))
    raw = {p: trace(batch, height, width, p) for p in ("fp32", amp)}
    variants = {
        "the book's bound (no transposes)": raw,
        "every 16-bit convolution transposed (assumed)": {
            p: with_memory_format(t, "channels_first", True) for p, t in raw.items()
        },
    }
    rows = []
    for key, dev in devices.items():
        for name, traces in variants.items():
            b = bound_pair(traces, dev, amp)
            nbytes = {p: t.totals()["bytes"] for p, t in traces.items()}
            rows.append(
                {"gpu": key, "variant": name, "fp32_s": b["fp32"].min_step_s,
                 "amp_s": b["amp"].min_step_s, "ratio": b["ratio"],
                 "bytes_ratio": nbytes[amp] / nbytes["fp32"]}
            )  # fmt: skip
    return rows


def convolution_evidence(results_dir=None) -> list[dict[str, Any]]:
    """Per committed NCHW layer-profile pair: the convolutions' measured fp32/amp-fp16
    kernel-time ratio beside their bounds' ratio without and with the transposes."""
    devices = load_devices()
    out = []
    for (key, batch, h, w, layout), g in profile_groups(results_dir):
        if key not in devices or layout != "channels_first":
            continue
        measured = {
            p: sum(x.measured_s for x in g[p].layers if layer_class(x.type) == "conv")
            for p in ("fp32", "amp-fp16")
        }
        model = load_model("erfnet")
        raw = {p: trace_step(model, batch, h, w, p) for p in ("fp32", "amp-fp16")}
        ratios = {}
        for moved in (False, True):
            tr = {p: with_memory_format(t, layout, moved) for p, t in raw.items()}
            b = bound_pair(tr, devices[key], "amp-fp16")
            conv = {k: class_bounds(b[k])["conv"] for k in ("fp32", "amp")}
            ratios[moved] = conv["fp32"] / conv["amp"]
        out.append(
            {"gpu": key, "setting": f"batch {batch} x 3x{h}x{w}",
             "fp32_conv_s": measured["fp32"], "amp_conv_s": measured["amp-fp16"],
             "measured_ratio": measured["fp32"] / measured["amp-fp16"],
             "bound_ratio": ratios[False], "bound_ratio_transposed": ratios[True]}
        )  # fmt: skip
    return out
