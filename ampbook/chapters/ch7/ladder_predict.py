"""A ladder predicted from a GPU's measured layer profiles and training runs where no
measured GPU ladder is committed (``predict_ladder``), and its ``ASSUMPTIONS``."""

from __future__ import annotations

import itertools

from ampbook.chapters.ch7.ladder_measure import traced_bound
from ampbook.chapters.ch7.rungs import RUNGS, LadderSpec, new_record
from ampbook.core.modes import MODES

# The modes a predicted ladder holds: amp-fp16 against fp32 with TF32.
AMP, BASE = "amp-fp16", "fp32-tf32"


# NHWC batch norm against NCHW: about twice as fast (NVIDIA/cudnn-frontend#134, on an
# H100); the prediction halves batch norm's measured time at the layout rung.
NHWC_BATCH_NORM_SPEEDUP = 2.0


# The fields whose provenance a predicted cell records, and each assumption's text.
PROVENANCE_FIELDS = ("step_s", "kernel_s", "idle_s", "memory_bytes", "images_per_s",
                     "data_wait_share")  # fmt: skip
ASSUMPTIONS = {
    "data_wait_share": "the prediction sets the data wait to 0 from rung 1 on",
    "idle_s": "the prediction sets the GPU's idle time to 0 from rung 3 on",
}


def _no_change(s: dict, mode: str, ctx: dict) -> bool:
    return True


def _nhwc_batch_norm(s: dict, mode: str, ctx: dict) -> bool:
    s["kernel"] -= ctx["bn"] * (1 - 1 / NHWC_BATCH_NORM_SPEEDUP)
    return True


def _no_idle(s: dict, mode: str, ctx: dict) -> bool:
    s["idle"] = 0.0
    s["assumed"].add("idle_s")
    return True


def _stream_bound(s: dict, mode: str, ctx: dict) -> bool:
    """amp-fp16's kernels scaled by the bound ratio with and without the stream, its
    memory less the saved bytes it removes; no AMP cell without the bounds."""
    bounds, saved = ctx["bounds"], ctx["saved"]
    if mode != AMP:
        return True
    if "stream" not in bounds:
        return False
    s["kernel"] *= bounds["stream"] / bounds["ref"]
    s["bound"] = bounds["stream"]
    if s["memory"] is not None:
        s["memory"] -= saved["ref"] - saved["stream"]
    return True


# How the prediction treats a rung (``Rung.predicted``): each changes the state carried
# up (kernel, idle, memory, bound) for one mode and says whether it has a cell there.
EFFECTS = {
    "measured": _no_change, "no_data_wait": _no_change,
    "nhwc_batch_norm": _nhwc_batch_norm, "no_idle": _no_idle,
    "stream_bound": _stream_bound,
}  # fmt: skip


def _bounds(by_mode: dict, ceilings) -> tuple[dict, dict]:
    """The profiles' own bounds and, with the device's ceilings, the cost model's
    bound and saved bytes with the 16-bit stream ("stream") and without ("ref")."""
    from ampbook.core.devices import find_device
    from ampbook.predict.roofline import Ceilings

    lp = by_mode[AMP]
    bounds = {mode: p.predicted_step_s for mode, p in by_mode.items()}
    saved: dict = {}
    entry = find_device(lp.device_name)
    ceil = ceilings or (Ceilings.from_device(entry) if entry is not None else None)
    if ceil is not None:
        for key, stream in (("stream", True), ("ref", False)):
            size = (lp.batch_size, lp.height, lp.width)
            bounds[key], saved[key] = traced_bound(ceil, AMP, stream, *size)
    return bounds, saved


def _cell(rung, mode: str, s: dict, run, batch: int) -> dict:
    measured = rung.predicted == "measured"
    step = s["kernel"] + s["idle"]
    if measured:
        kinds = dict.fromkeys(PROVENANCE_FIELDS, "measured")
    else:
        kinds = dict.fromkeys(PROVENANCE_FIELDS, "predicted")
        kinds.update(dict.fromkeys(s["assumed"] | {"data_wait_share"}, "assumed"))
    bound, ran = s["bound"], measured and run
    return {
        "rung": rung.index, "mode": mode, "status": "ok", "error": None,
        "step_s": step, "kernel_s": s["kernel"], "idle_s": s["idle"],
        "memory_bytes": s["memory"],
        "images_per_s": run.images_per_s if ran else batch / step,
        "data_wait_share": run.data_wait_share if ran else 0.0,
        "bound_s": bound, "bound_share": bound / step if bound else None,
        "measured": measured, "provenance": kinds,
    }  # fmt: skip


def predict_ladder(
    results, device_name: str | None = None, ceilings=None
) -> dict | None:
    """A ladder record *predicted* from a GPU's layer profiles and training runs (None
    without): rung 0 measured, the rungs above through ``EFFECTS``."""
    by_mode: dict = {}  # the committed NCHW GPU layer profiles of BASE and AMP
    for lp in results.layer_profiles:
        if not lp.device.startswith("cuda") or lp.record.get("channels_last"):
            continue
        if device_name is not None and lp.device_name != device_name:
            continue
        tf32 = lp.precision == "fp32" and lp.record.get("tf32")
        by_mode.setdefault(BASE if tf32 else lp.precision, lp)
    by_mode = {m: lp for m, lp in by_mode.items() if m in (BASE, AMP)}
    settings = {(lp.batch_size, lp.height, lp.width) for lp in by_mode.values()}
    if len(by_mode) < 2 or len(settings) > 1:  # not both at one setting
        return None
    lp_amp = by_mode[AMP]
    b, h, w = lp_amp.batch_size, lp_amp.height, lp_amp.width
    runs: dict = {}  # the first GPU training run of each mode at the profiles' setting
    for r in results.gpu_runs():
        at = (r.device_name, r.setting.batch_size, r.setting.height, r.setting.width)
        if r.mode in (BASE, AMP) and at == (lp_amp.device_name, b, h, w):
            runs.setdefault(r.mode, r)
    bounds, saved = _bounds(by_mode, ceilings)
    rungs = list(itertools.takewhile(lambda r: r.predicted is not None, RUNGS))
    cells = []
    for mode, lp in by_mode.items():
        run = runs.get(mode)
        idle = max(lp.step_s - lp.measured_total_s, 0.0)
        memory = run.memory_bytes if run else None
        s = {"kernel": lp.measured_total_s, "idle": idle, "memory": memory,
             "assumed": set()}  # fmt: skip
        bn = sum(t.measured_s for t in lp.layers if t.type == "BatchNorm2d")
        ctx = {"bounds": bounds, "saved": saved, "bn": bn}
        for rung in rungs:
            s["bound"] = bounds.get(mode)
            if EFFECTS[rung.predicted](s, mode, ctx):
                cells.append(_cell(rung, mode, s, run, b))
    cells.sort(key=lambda c: (c["rung"], MODES.index(c["mode"])))
    spec = LadderSpec(height=h, width=w, batch_size=b)
    record = new_record(spec, dict(lp_amp.record["environment"]), "none")
    ratio = bounds["stream"] / bounds["ref"] if "stream" in bounds else None
    pair = [bounds["stream"], bounds["ref"]] if ratio else None
    removed = saved["ref"] - saved["stream"] if saved else None
    record.update(
        status="complete",
        created=lp_amp.record.get("created"),
        cells=cells,
        rungs=record["rungs"][: len(rungs)],
        predicted=True,
        prediction={
            "from": [lp.path for lp in by_mode.values()]
            + [r.path for r in runs.values() if r.path],
            "nhwc_batch_norm_speedup": NHWC_BATCH_NORM_SPEEDUP,
            "fp16_stream_bound_ratio": ratio,
            # the two AMP bounds the ratio is computed from (s)
            "fp16_stream_bounds_s": pair,
            "fp16_stream_saved_bytes": removed,
        },
    )
    return record
