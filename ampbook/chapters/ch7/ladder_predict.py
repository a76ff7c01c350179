"""A ladder predicted from a GPU's measured layer profiles and training runs, where
no measured GPU ladder is committed (``predict_ladder``), and the assumptions it makes
(``ASSUMPTIONS``)."""

from __future__ import annotations

import inspect
import json

from ampbook.chapters.ch7.ladder_measure import _source_key
from ampbook.chapters.ch7.ladder_record import new_record, write_record
from ampbook.chapters.ch7.rungs import EAGER_TOP, LadderSpec
from ampbook.core.modes import MODES

# The modes a predicted ladder holds: amp-fp16 against fp32 with TF32.
AMP, BASE = "amp-fp16", "fp32-tf32"


# --------------------------------------------------------------------------------------
# a prediction from measured layer profiles (where no GPU ladder is committed)
# --------------------------------------------------------------------------------------

# NHWC batch norm against NCHW: about twice as fast (NVIDIA/cudnn-frontend#134, on an
# H100); the prediction halves batch norm's measured time at rung 2.
NHWC_BATCH_NORM_SPEEDUP = 2.0


def _stream_effect(ceil, b: int, h: int, w: int) -> tuple[float, float, int, int]:
    """The cost model's amp-fp16 bound with and without the 16-bit stream, and the
    bytes saved for backward with and without it, at batch ``b`` and ``h`` x ``w``.
    Two traces at full size cost seconds each, so the four numbers are kept in
    ``ampbook.core.paths.cache_dir()`` under a key of everything they depend on (the
    ceilings, the size, torch's version and the sources of the model, the cost model and
    the saved-tensor meter)."""
    from ampbook.core.paths import cache_dir
    from ampbook.predict.roofline import predict
    from ampbook.predict.steptrace import trace_step
    from ampbook.segmentation import model
    from ampbook.segmentation.cityscapes import NUM_CLASSES

    key = _source_key(repr(ceil), b, h, w)
    path = cache_dir() / "ladder-prediction" / f"{key}.json"
    if path.exists():
        try:
            return tuple(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    stream = trace_step(model.ERFNet(NUM_CLASSES, fp16_stream=True), b, h, w, AMP)
    ref = trace_step(model.ERFNet(NUM_CLASSES), b, h, w, AMP)
    out = (
        predict(stream, ceil).min_step_s,
        predict(ref, ceil).min_step_s,
        int(stream.saved_tensors["new_bytes"]),
        int(ref.saved_tensors["new_bytes"]),
    )
    write_record(list(out), path)
    return out


# The fields of a ladder cell whose provenance a predicted ladder records per cell
# ("measured", "predicted" or "assumed"), and the text of each assumption.
PROVENANCE_FIELDS = (
    "step_s",
    "kernel_s",
    "idle_s",
    "memory_bytes",
    "images_per_s",
    "data_wait_share",
)
ASSUMPTIONS = {
    "data_wait_share": "the prediction sets the data wait to 0 from rung 1 on",
    "idle_s": "the prediction sets the GPU's idle time to 0 from rung 3 on",
}


def predict_ladder(
    results, device_name: str | None = None, ceilings=None
) -> dict | None:
    """A ladder record *predicted* from a GPU's committed layer profiles (fp32 with TF32
    and amp-fp16, one setting) and its training runs at that setting, or None where
    there are none. Modes fp32-tf32 and amp-fp16, rungs 0 to 4; nothing for rung 5
    (what compilation fuses is not in an eager profile). The record says
    ``"predicted": true`` and lists its assumptions in ``"prediction"``:

    * rung 0 is measured: the profile's step (``step_s``) and kernel time (its modules
      and the unattributed rest), the training run's images/s, data wait and peak
      allocated memory;
    * rung 1: the data wait gone, images/s = batch / step;
    * rung 2: batch norm's kernel time divided by ``NHWC_BATCH_NORM_SPEEDUP``;
    * rung 3: no idle time (the host runs ahead of the GPU), the step = its kernels;
    * rung 4 (amp-fp16 only changes): kernels scaled by the cost model's bound with the
      16-bit stream over the bound without, peak memory less the bytes saved for
      backward the stream removes (both traced on fake tensors). The bounds use the
      device table's ceilings (``ceilings`` for a GPU not in it; without them there is
      no rung 4).
    """
    from ampbook.core.devices import find_device
    from ampbook.predict.roofline import Ceilings
    from ampbook.segmentation.model import ERFNet

    profiles = [
        lp
        for lp in results.layer_profiles
        if lp.device.startswith("cuda")
        and (device_name is None or lp.device_name == device_name)
        and not lp.record.get("channels_last")
    ]
    by_mode = {}
    for lp in profiles:
        tf32 = lp.precision == "fp32" and lp.record.get("tf32")
        mode = BASE if tf32 else lp.precision
        if mode in (BASE, AMP):
            by_mode.setdefault(mode, lp)
    if set(by_mode) != {BASE, AMP}:
        return None
    lp_amp = by_mode[AMP]
    setting = (lp_amp.batch_size, lp_amp.height, lp_amp.width)
    if (by_mode[BASE].batch_size, by_mode[BASE].height, by_mode[BASE].width) != setting:
        return None
    b, h, w = setting
    entry = find_device(lp_amp.device_name)
    runs = {}
    for run in results.gpu_runs():
        at = (run.setting.batch_size, run.setting.height, run.setting.width)
        same = run.device_name == lp_amp.device_name and at == setting
        if same and run.mode in (BASE, AMP):
            runs.setdefault(run.mode, run)
    stream = "fp16_stream" in inspect.signature(ERFNet).parameters
    # The profiles' own bounds (the device table's ceilings, TF32 on); with the stream,
    # the cost model's bound and saved bytes of the 16-bit stream against the reference.
    bounds = {mode: lp.predicted_step_s for mode, lp in by_mode.items()}
    saved = {}
    ceil = ceilings or (Ceilings.from_device(entry) if entry is not None else None)
    if ceil is not None and stream:
        bounds["stream"], bounds["ref"], saved["stream"], saved["ref"] = _stream_effect(
            ceil, b, h, w
        )
    cells = []
    for mode, lp in by_mode.items():
        run = runs.get(mode)
        kernel = lp.measured_total_s
        idle = max(lp.step_s - kernel, 0.0)
        bn = sum(t.measured_s for t in lp.layers if t.type == "BatchNorm2d")
        memory = run.memory_bytes if run else None
        for rung in range(EAGER_TOP + 1):
            if rung == 2:
                kernel -= bn * (1 - 1 / NHWC_BATCH_NORM_SPEEDUP)
            if rung == 3:
                idle = 0.0
            bound = bounds.get(mode)
            if rung == 4 and mode == AMP:
                if "stream" in bounds:
                    kernel *= bounds["stream"] / bounds["ref"]
                    bound = bounds["stream"]
                    if memory is not None:
                        memory -= saved["ref"] - saved["stream"]
                else:
                    continue
            step = kernel + idle
            measured = rung == 0
            if measured:
                kinds = dict.fromkeys(PROVENANCE_FIELDS, "measured")
            else:
                kinds = dict.fromkeys(PROVENANCE_FIELDS, "predicted")
                kinds["data_wait_share"] = "assumed"
                if rung >= 3:
                    kinds["idle_s"] = "assumed"
            cells.append(
                {
                    "rung": rung,
                    "mode": mode,
                    "status": "ok",
                    "error": None,
                    "step_s": step,
                    "kernel_s": kernel,
                    "idle_s": idle,
                    "memory_bytes": memory,
                    "images_per_s": (
                        run.images_per_s if measured and run else b / step
                    ),
                    "data_wait_share": (
                        run.data_wait_share if measured and run else 0.0
                    ),
                    "bound_s": bound,
                    "bound_share": bound / step if bound else None,
                    "measured": measured,
                    "provenance": kinds,
                }
            )
    cells.sort(key=lambda c: (c["rung"], MODES.index(c["mode"])))
    env = dict(lp_amp.record["environment"])
    spec = LadderSpec(height=h, width=w, batch_size=b)
    record = new_record(spec, env, "none")
    record.update(
        status="complete",
        created=lp_amp.record.get("created"),
        cells=cells,
        rungs=[x for x in record["rungs"] if x["index"] <= EAGER_TOP],
        predicted=True,
        prediction={
            "from": [lp.path for lp in by_mode.values()]
            + [r.path for r in runs.values() if r.path],
            "nhwc_batch_norm_speedup": NHWC_BATCH_NORM_SPEEDUP,
            "fp16_stream_bound_ratio": (
                bounds["stream"] / bounds["ref"] if "stream" in bounds else None
            ),
            # the two AMP bounds the ratio is computed from (s)
            "fp16_stream_bounds_s": (
                [bounds["stream"], bounds["ref"]] if "stream" in bounds else None
            ),
            "fp16_stream_saved_bytes": (
                saved["ref"] - saved["stream"] if saved else None
            ),
        },
    )
    return record
