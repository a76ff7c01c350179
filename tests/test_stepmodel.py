"""One step model everywhere the book predicts (issue 40, item 1): chapter 5's verdict
and layout table, chapter 6's gain line, chapter 7's rung bound and the doctor's
roofline table, rendered for one setting (ERFNet, H200, batch 6 x 3x512x1024, NCHW,
amp-fp16 against TF32), print one bound. The intro and Findings quote chapter 5's
glue, so they follow it.

On the code before this test (chapter 5 layout-free, the doctor and chapter 6 with a
transpose around every 16-bit convolution) chapter 5 printed 1.49x or 1.50x and the
doctor 1.01x: the test failed there."""

from __future__ import annotations

import re

import pytest

from ampbook.chapters import ch5, ch6
from ampbook.chapters.ch6 import report_text
from ampbook.chapters.ch6.diagnosis import DoctorConfig, diagnose
from ampbook.core.devices import load_devices
from ampbook.predict.stepmodel import layout_bounds, step_trace
from ampbook.results import load_results_dir
from ampbook.segmentation.cityscapes import NUM_CLASSES
from ampbook.segmentation.model import ERFNet

B, H, W = 6, 512, 1024


@pytest.fixture(scope="module")
def doctor_report():
    return diagnose(
        DoctorConfig(
            model="erfnet", input=(3, H, W), batch=B, gpus=["h200"],
            precisions=["fp32", "amp-fp16"], measure=False, progress=False,
        )
    )  # fmt: skip


def _ratio(pattern: str, text: str) -> str:
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in: {text[:400]}"
    return m.group(1)


def test_every_place_prints_one_bound_for_one_setting(doctor_report):
    model = ERFNet(num_classes=NUM_CLASSES)
    devices = load_devices()
    printed = {}
    # chapter 5: the committed H200 pair's verdict (TF32 against amp-fp16)
    checks = [
        c
        for c in ch5.bound_checks(load_results_dir(), model, devices)
        if c.device_key == "h200-sxm"
        and c.pair.baseline.mode == "fp32-tf32"
        and c.pair.amp.mode == "amp-fp16"
        and (c.pair.setting.batch_size, c.pair.setting.height) == (B, H)
    ]
    assert checks, "the committed H200 pair at 6 x 512x1024 is gone"
    printed["ch5 verdict"] = _ratio(r"AMP would gain (\d+\.\d\d)x", checks[0].verdict())
    # chapter 5: the layout table's book row (and the assumed one differs from it)
    rows = layout_bounds(
        model, B, H, W, "amp-fp16", {"h200-sxm": devices["h200-sxm"]},
        lambda b, h, w, p: step_trace(model, b, h, w, p),
    )  # fmt: skip
    printed["ch5 layout table"] = f"{rows[0]['ratio']:.2f}"
    assert f"{rows[1]['ratio']:.2f}" != printed["ch5 layout table"]
    # the doctor's roofline table and chapter 6's line from the same report
    md = report_text.to_markdown(doctor_report)
    row = next(x for x in md.splitlines() if x.startswith("| H200 SXM | amp-fp16 |"))
    printed["doctor roofline"] = row.strip("|").split("|")[4].strip()
    printed["ch6 gain line"] = _ratio(
        r"bound is (\d+\.\d\d)x smaller", ch6.gain_verdict(doctor_report, "h200-sxm")
    )
    assert len(set(printed.values())) == 1, printed


def test_chapter_7s_rung_bound_is_the_doctors(doctor_report):
    """Chapter 7's predicted rung 4 scales kernels by the AMP bound with and without
    the 16-bit stream; the bound without it is the doctor's AMP bound."""
    from ampbook.chapters.ch7.ladder_measure import traced_bound
    from ampbook.predict.roofline import Ceilings

    ceil = Ceilings.from_device(load_devices()["h200-sxm"])
    ref, _ = traced_bound(ceil, "amp-fp16", False, B, H, W)
    row = next(r for r in doctor_report["roofline"] if r["precision"] == "amp-fp16")
    assert ref == pytest.approx(row["amp_s"], rel=1e-6)


def test_the_doctor_predicts_the_step_and_holds_the_measured_step_alone(doctor_report):
    """ERFNet on the H200 (issue 40, item 2): the doctor's range is of the step
    (kernels plus the modelled host idle), labelled, with the step without host idle
    beside it; beside it the measured step timed alone and the step in the loop per
    epoch, read
    from data/results; the step predicted for the loop that measured it (the runner
    of 2026-11-30) holds the step timed alone."""
    rs = load_results_dir()
    ((b, a),) = [(b, a) for b, a in rs.profile_pairs() if a.mode == "amp-fp16"]
    (q,) = [q for q in rs.pairs()
            if (q.amp.mode, q.baseline.mode) == ("amp-fp16", "fp32-tf32")]  # fmt: skip
    alone, lo, hi = b.step_s / a.step_s, min(q.step_speedups), max(q.step_speedups)
    (r,) = [r for r in doctor_report["verdict"]["ranges"]
            if r["precision"] == "amp-fp16"]  # fmt: skip
    assert r["host"] and r["kernel_point"] > r["point"]  # the host's idle costs AMP
    run = r["runner"]
    assert run["low"] <= alone <= run["high"]
    line = r["line"]
    assert "predicted step speedup (kernels plus the host's idle time" in line
    assert (  # the per-sync idle is a fit, said as one, not "measured on every GPU"
        "3.9 ms per sync, fitted: all idle of the 2 H200 SXM profiles over their 6 "
        "syncs (4.1 and 3.6 ms each), assumed independent of kernel count, batch and "
        "GPU"
    ) in line
    assert "predicted step without the modelled host idle" in line
    assert f"Measured: {alone:.2f}x (step timed alone" in line
    assert f"{lo:.2f}x to {hi:.2f}x over {len(q.step_speedups)} epochs" in line
    assert "predicted for that loop: inside the range" in line
    screen = " ".join(report_text.first_screen(doctor_report).split())
    assert f"measured (amp-fp16): step timed alone {alone:.2f}x" in screen
    assert f"step in the loop {lo:.2f}x to {hi:.2f}x per epoch" in screen
