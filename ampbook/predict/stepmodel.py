"""The book's one model of a training step's GPU work: the trace, the memory format
and the roofline bound, as every chapter and the doctor print them.

A bound is set per (network, GPU, batch and size, memory format, precision) by one
path: ``steptrace.trace_step`` on fake tensors, ``steptrace.with_memory_format`` for
the layout, ``roofline.predict`` on the GPU's ceilings. Chapters 5, 6 and 7, the
intro (through chapter 5's glue), Findings and the doctor go through it, and
``tests/test_stepmodel.py`` renders their sentences for one setting and fails when
two of them print different bounds.

**The layout.** The bound leaves out the NCHW-to-NHWC transposes cuDNN *may* put
around a 16-bit convolution on NCHW tensors (its documentation says it may pad, fold
or convert NCHW to NHWC to reach its tensor-core kernels, not that it always does:
``cudnn-legacy-api`` in book/references.bib): a lower bound holds only work that is
certain. The committed H200 layer profiles are the measurement that decided it:
ERFNet's NCHW fp16 convolutions took less kernel time than its TF32 ones
(``convolution_evidence``), where a transpose around every one would make the fp16
convolutions' bound larger than TF32's. The other bound, with the transposes, is an
assumption; ``layout_bounds`` prints both side by side (chapter 5).
"""

from __future__ import annotations

from typing import Any

from ampbook.predict.roofline import Ceilings, Prediction, predict
from ampbook.predict.steptrace import StepTrace, trace_step, with_memory_format

# The layout the RTX 3070 blog post and the book's H200 runs trained in.
BOOK_LAYOUT = "channels_first"


def step_trace(
    model, batch: int, height: int, width: int, precision: str,
    memory_format: str = BOOK_LAYOUT, transposes: bool = False, **kwargs,
) -> StepTrace:  # fmt: skip
    """One training step of ``model`` traced at ``batch`` x ``height`` x ``width`` in
    ``precision`` and ``memory_format`` (``transposes``: cuDNN's NCHW transposes
    assumed around every 16-bit convolution; off for the bound)."""
    tr = trace_step(model, batch, height, width, precision, **kwargs)
    return with_memory_format(tr, memory_format, transposes)


def bound_pair(
    traces: dict[str, StepTrace], device, amp: str, baseline_tf32: bool = True
) -> dict[str, Any]:
    """fp32's and ``amp``'s bounds on ``device`` (a device-table entry) from their
    traces (``{"fp32": ..., amp: ...}``): fp32 with TF32 for convolutions and matrix
    products when ``baseline_tf32``, AMP with it (its fp32 leftovers run as a TF32
    baseline's do). Returns ``{"fp32", "amp"}`` Predictions and ``ratio``: fp32's bound
    over AMP's, the speedup if both reached the same share of their bounds."""
    base = Ceilings.from_device(device, tf32=baseline_tf32, matmul_tf32=baseline_tf32)
    on = Ceilings.from_device(device, tf32=True, matmul_tf32=True)
    p32: Prediction = predict(traces["fp32"], base)
    p16: Prediction = predict(traces[amp], on)
    return {"fp32": p32, "amp": p16, "ratio": p32.min_step_s / p16.min_step_s}


def layout_bounds(
    model, batch: int, height: int, width: int, amp: str, devices: dict, trace=None
) -> list[dict[str, Any]]:
    """The bound of one NCHW step two ways on each GPU of ``devices`` (key -> entry):
    the book's (no transposes) and with cuDNN's transposes assumed around every 16-bit
    convolution. Rows: ``gpu``, ``variant``, ``fp32_s``, ``amp_s``, ``ratio``,
    ``bytes_ratio`` (AMP's bytes over fp32's). ``trace``: a cached
    ``trace_step``-like function of (batch, height, width, precision)."""
    trace = trace or (lambda b, h, w, p: trace_step(model, b, h, w, p))
    raw = {p: trace(batch, height, width, p) for p in ("fp32", amp)}
    variants = {
        "the book's bound (no transposes)": raw,
        "every 16-bit convolution transposed (assumed)": {
            p: with_memory_format(t, "channels_first", transposes=True)
            for p, t in raw.items()
        },
    }
    rows = []
    for key, dev in devices.items():
        for name, traces in variants.items():
            b = bound_pair(traces, dev, amp)
            rows.append(
                {
                    "gpu": key,
                    "variant": name,
                    "fp32_s": b["fp32"].min_step_s,
                    "amp_s": b["amp"].min_step_s,
                    "ratio": b["ratio"],
                    "bytes_ratio": traces[amp].totals()["bytes"]
                    / traces["fp32"].totals()["bytes"],
                }
            )
    return rows


def convolution_evidence(results_dir=None) -> list[dict[str, Any]]:
    """Per committed NCHW layer-profile pair on a GPU of the device table: the
    convolutions' measured kernel time in fp32 (TF32) and amp-fp16 and their ratio,
    beside the ratio of their bounds without and with the transposes: the measurement
    that decides whether the book's bound carries them (``BOOK_LAYOUT``)."""
    from ampbook.core.devices import load_devices
    from ampbook.predict.references import class_bounds, layer_class, profile_groups
    from ampbook.predict.specs import load_model

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
            tr = {
                p: with_memory_format(t, layout, transposes=moved)
                for p, t in raw.items()
            }
            b = bound_pair(tr, devices[key], "amp-fp16")
            conv = {p: class_bounds(b[q])["conv"] for p, q in
                    (("fp32", "fp32"), ("amp-fp16", "amp"))}  # fmt: skip
            ratios[moved] = conv["fp32"] / conv["amp-fp16"]
        out.append(
            {
                "gpu": key,
                "setting": f"batch {batch} x 3x{h}x{w}",
                "fp32_conv_s": measured["fp32"],
                "amp_conv_s": measured["amp-fp16"],
                "measured_ratio": measured["fp32"] / measured["amp-fp16"],
                "bound_ratio": ratios[False],
                "bound_ratio_transposed": ratios[True],
            }
        )
    return out
