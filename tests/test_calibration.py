"""Calibrated speedups: the published references and their checks, efficiencies from
layer profiles, the launch floor, and the range for ResNet-50 on an A100 against
NVIDIA's published 2.63x."""

from __future__ import annotations

import statistics

import pytest
import yaml

from ampbook import calibration as cmd
from ampbook.chapters.ch6 import diagnosis, report_text
from ampbook.core.devices import load_devices
from ampbook.core.paths import REPO_ROOT
from ampbook.predict import calibrate as cal
from ampbook.predict import references as refs_mod
from ampbook.predict import specs
from ampbook.predict.opcost import OP_CLASSES
from ampbook.predict.references import references
from ampbook.results import load_results_dir

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "results"


def test_published_references_are_checked_against_their_own_speedups(tmp_path):
    refs = refs_mod.load_published()
    assert {r.key for r in refs} >= {"dle-resnet50-a100", "dle-resnet50-v100"}
    for r in refs:
        assert r.source["url"].startswith("https://") and r.source["bib"]
        assert r.speedup == pytest.approx(r.published_speedup, rel=0.02)
    rn50 = next(r for r in refs if r.key == "dle-resnet50-a100")
    assert (rn50.baseline.images_per_s, rn50.amp.images_per_s) == (938, 2470)
    doc = yaml.safe_load(refs_mod.PUBLISHED_FILE.read_text())
    doc["references"]["dle-resnet50-a100"]["amp"]["images_per_s"] = 2740  # a typo
    bad = tmp_path / "t.yml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(refs_mod.CalibrationError, match="the source says 2.63x"):
        refs_mod.load_published(bad)


def test_stored_bounds_are_the_cost_models():
    """The committed bounds of a published reference equal a fresh trace (rerun
    ``python -m ampbook.calibration --write`` after a change to the cost model)."""
    ref = next(r for r in refs_mod.load_published() if r.key == "dle-resnet50-v100")
    stored = refs_mod.load_bounds()[ref.key]
    fresh = refs_mod.reference_bounds(ref)
    for side in refs_mod.SIDES:
        assert stored[side]["kernels"] == fresh[side]["kernels"]
        for c in OP_CLASSES:
            assert stored[side]["by_class_s"][c] == pytest.approx(
                fresh[side]["by_class_s"][c], rel=1e-9
            )


def test_published_efficiencies_reproduce_the_published_speedup():
    for ref in refs_mod.published_references():
        bounds = refs_mod.load_bounds()[ref.key]
        fam = "tf32" if "tf32" in ref.families else "fp32"
        t32 = cal.step_time(bounds["baseline"]["by_class_s"], ref, fam)
        t16 = cal.step_time(bounds["amp"]["by_class_s"], ref, "16-bit")
        b32, b16 = bounds["baseline"]["batch"], bounds["amp"]["batch"]
        assert (b16 / t16) / (b32 / t32) == pytest.approx(ref.measured_speedup)
        assert all(0 < e < 1 for e in ref.efficiency.values()), ref.key


def test_layer_profiles_give_efficiencies_per_class():
    (ref,) = refs_mod.profile_references(FIXTURES)
    assert ref.kind == "profile" and ref.model == "erfnet"
    lps = {lp.precision: lp for lp in load_results_dir(FIXTURES).layer_profiles}
    conv = [x for x in lps["amp-fp16"].layers if refs_mod.layer_class(x.type) == "conv"]
    expected = sum(x.predicted_s for x in conv) / sum(x.measured_s for x in conv)
    assert ref.efficiency[("16-bit", "conv")] == pytest.approx(expected)
    assert {f for f, _ in ref.efficiency} == {"tf32", "16-bit"}
    assert sum(ref.mix.values()) == pytest.approx(1.0)


def test_launch_floor_is_the_smallest_elementwise_calls():
    floor = cal.launch_floor(FIXTURES)
    (sweep,) = load_results_dir(FIXTURES).matmul_sweeps
    ew = sweep.record["elementwise"]
    small = min(r["numel"] for r in ew)
    assert floor.per_kernel_s == statistics.median(
        r["median_s"] for r in ew if r["numel"] == small
    )
    assert floor.floor_s(100) == pytest.approx(100 * floor.per_kernel_s)
    assert cal.launch_floor(REPO_ROOT / "tests" / "fixtures") is not None
    empty = REPO_ROOT / "data" / "reference"
    assert cal.launch_floor(empty) is None


def test_distances():
    assert cal.gpu_distance("a100-sxm-80gb", "a100-sxm-80gb") == "same GPU"
    assert cal.gpu_distance("a100-sxm-80gb", "rtx3070-desktop") == "same architecture"
    assert cal.gpu_distance("a100-sxm-80gb", "h200-sxm") == "same segment"
    assert cal.gpu_distance("h100-sxm", "h200-sxm") == "same chip"
    assert cal.gpu_distance("rtx3090", "a10") == "same chip"
    assert cal.gpu_distance("v100-sxm2", "rtx4090") == "other architecture"
    mix = dict.fromkeys(OP_CLASSES, 0.25)
    assert cal.mix_distance(mix, mix) == 0
    assert cal.mix_distance({"conv": 1.0}, {"norm": 1.0}) == 1


def _diagnose(spec, shape, batch, gpus, fmt, precisions=("amp-fp16",)):
    cfg = diagnosis.DoctorConfig(
        spec, shape, batch, "cpu", list(precisions), list(gpus), measure=False,
        memory_format=fmt,
    )  # fmt: skip
    return diagnosis.diagnose(cfg)


@pytest.fixture(scope="module")
def resnet50_a100():
    """ResNet-50 at batch 256 on the A100 as NVIDIA's AMP run had it (channels_last)."""
    return _diagnose(
        "torchvision:resnet50", (3, 224, 224), 256, ["a100"], "channels_last"
    )


@pytest.fixture(scope="module")
def resnet50_a100_nchw():
    return _diagnose(
        "torchvision:resnet50", (3, 224, 224), 256, ["a100"], "channels_first"
    )


def test_resnet50_batch_256_on_a100_range_contains_the_published_speedup(
    resnet50_a100,
):
    (rng,) = resnet50_a100["verdict"]["ranges"]
    assert rng["low"] <= 2.63 <= rng["high"]
    assert rng["low"] < rng["point"] < rng["high"]
    own = next(r for r in rng["rows"] if r["key"] == "dle-resnet50-a100")
    assert own["same_network"] and own["gpu_distance"] == "same GPU"
    assert rng["basis"][0] == "dle-resnet50-a100"  # the closest sets it
    # its own efficiencies reproduce its figure but for the optimizer (Adam here,
    # SGD there), the batch of its fp32 run and its fp32 layout (NCHW there)
    assert own["speedup"] == pytest.approx(2.63, rel=0.03)
    assert rng["equal_share"] < 2.63  # the ratio of the bounds is no upper bound


def test_the_layout_changes_the_bytes_and_the_range(resnet50_a100, resnet50_a100_nchw):
    """The bound leaves out cuDNN's NCHW transposes (a lower bound holds only what is
    certain: ``stepmodel``): channels_last adds one copy of the input, NCHW nothing;
    the ranges still differ (the references weigh by layout), and each names its
    references and the layouts it was predicted for."""
    cl, cf = resnet50_a100, resnet50_a100_nchw
    assert cl["memory_format"] == "channels_last"
    for p in ("fp32", "amp-fp16"):
        assert cf["totals"][p]["bytes"] < cl["totals"][p]["bytes"]
        assert cf["totals"][p]["kernels"] == cl["totals"][p]["kernels"] - 1
    (a,), (b,) = cl["verdict"]["ranges"], cf["verdict"]["ranges"]
    assert a["layouts"] == ["channels_last"] * 2
    assert b["layouts"] == ["channels_first"] * 2
    assert (a["low"], a["high"]) != (b["low"], b["high"]) and b["point"] < a["point"]
    for r in (a, b):
        assert r["basis"] and "set by" in r["line"]
        assert (
            report_text.first_screen({**cl, "verdict": {"ranges": [r]}}).count("x (")
            == 1
        )
    assert "NHWC" in a["line"] and "NCHW" in b["line"]
    assert "Both precisions in channels_last" in report_text.to_markdown(cl)
    with pytest.raises(specs.DoctorError, match="--memory-format"):
        _diagnose("torchvision:resnet18", (3, 32, 32), 2, ["a100"], "nhwc")


def test_the_erfnet_h200_profile_reproduces_its_kernel_ratio():
    """The profile applied to its own network, GPU, batch and layout through the
    doctor gives back its measured kernel ratio (54.29 / 45.85 ms): measured time and
    traced operators are classed alike (casts with the convolution that needs them)."""
    rep = _diagnose("erfnet", (3, 512, 1024), 6, ["h200"], "channels_first")
    (rng,) = rep["verdict"]["ranges"]
    (ref,) = [r for r in refs_mod.profile_references() if r.gpu == "h200-sxm"]
    assert ref.measured_speedup == pytest.approx(54.29 / 45.85, abs=0.005)
    own = next(r for r in rng["rows"] if r["key"] == ref.key)
    assert own["kernel_speedup"] == pytest.approx(ref.measured_speedup, rel=0.05)
    assert own["layout_match"] and own["same_network"]
    # and the report shows the committed measurement beside the prediction
    assert any(m["speedup"] == ref.measured_speedup for m in rng["committed"])
    assert "Measured: 1.18x" in rng["line"]
    # the references table prints like with like: its kernel ratio here, not the step
    table = " ".join(report_text.references_table(rng).split())
    here = f"{own['kernel_speedup']:.2f} (kernel time)"
    assert f"{here}" in table and f"{own['speedup']:.2f} (kernel time)" not in table
    assert " (step) | " in table and " (step) |" in table  # published: step, step
    assert table.count(" (kernel time) |") == 2  # the profile: kernel, kernel


def test_every_published_reference_reproduces_itself():
    refs = refs_mod.references()
    for ref in refs:
        alone = cal.reference_prediction(ref, [ref], exclude_own=False)
        (row,) = alone["rows"]
        assert row["kernel_speedup"] == pytest.approx(ref.measured_speedup, rel=0.05)
        assert alone["point"] == pytest.approx(ref.measured_speedup, rel=0.05)


def test_the_checklist_ranks_like_with_like():
    """Every AMP precision ranks by the step predicted for PyTorch's example loop
    (fp16's measured 0.99x, timed by the book's runner, used to rank against bf16's
    predicted 1.11x); the step timed alone is on the first screen, beside the step
    predicted for the runner's loop, not repeated in the detail."""
    rep = _diagnose("erfnet", (3, 512, 1024), 6, ["h200"], "channels_first")
    ranges = {r["precision"]: r for r in rep["verdict"]["ranges"]}
    items = [i for i in rep["verdict"]["items"] if i["item"].startswith("train")]
    assert items
    for i in items:
        rng = ranges[i["item"].split("(")[1].rstrip(")")]
        assert i["gain"] == rng["point"] and i["source"].startswith("predicted step")
    fp16 = next(i for i in items if "amp-fp16" in i["item"])
    run = ranges["amp-fp16"]["runner"]
    # the detail points to the measurements, without repeating them
    assert fp16["detail"].split("; ")[1:] == ["measured at this setting: section 5"], (
        fp16
    )
    screen = " ".join(report_text.first_screen(rep).split())
    assert (
        "step timed alone 0.99x (the book's runner, 3 steps, no spread) against "
        f"{run['point']:.2f}x"
    ) in screen, screen


def test_leaving_a_reference_out(resnet50_a100):
    roof = resnet50_a100["roofline"][0]
    refs = refs_mod.references()
    rng = cal.calibrated_range(
        roof["fp32_by_class_s"], roof["amp_by_class_s"], "a100-sxm-80gb", refs,
        model="torchvision:resnet50", exclude="dle-resnet50-a100",
    )  # fmt: skip
    assert "dle-resnet50-a100" not in {r["key"] for r in rng["rows"]}
    assert rng["rows"] and rng["low"] <= rng["point"] <= rng["high"]
    shares = [r["weight_share"] for r in rng["rows"]]
    assert sum(shares) == pytest.approx(1.0)
    assert rng["min"] <= rng["point"] <= rng["max"]


def test_predictions_table_is_the_leave_one_out(capsys, tmp_path, monkeypatch):
    """The table as Markdown in the --markdown file; the terminal gets it laid out
    within 80 columns, no Markdown table (its widest line was 152 columns)."""
    refs = refs_mod.references()
    loo = cal.leave_one_out(refs)
    assert loo["n"] == len(refs) and not loo["no_range"]
    monkeypatch.setenv("COLUMNS", "80")
    md = tmp_path / "loo.md"
    assert cmd.main(["--predictions", "--markdown", str(md)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert all(len(x) <= 80 for x in shown), max(shown, key=len)
    assert not [x for x in shown if x.startswith("|")]
    assert cmd.main([]) == 0  # the references' list too
    shown = capsys.readouterr().out.splitlines()
    assert all(len(x) <= 80 for x in shown) and "H200 SXM" in " ".join(shown)
    notes = tmp_path / "notes.md"  # never replaced without --overwrite
    notes.write_text("mine\n")
    assert cmd.main(["--markdown", str(notes)]) == 2
    assert notes.read_text() == "mine\n"
    out = md.read_text()
    lines = [x for x in out.splitlines() if x.startswith("| ") and "---" not in x]
    assert len(lines) == 1 + loo["n"]
    rows = sorted(loo["rows"], key=lambda r: r["what"] != "step time")
    for row, line in zip(rows, lines[1:]):  # step ratios first, then kernel ratios
        cells = [c.strip() for c in line.strip("|").split("|")]
        # the reference says where it comes from and what its measured ratio is of:
        # the kernel time (a layer profile) or the whole step (a published throughput)
        kind = "kernel ratio" if row["key"].startswith("profile-") else "step ratio"
        source = ("committed layer profiles" if kind == "kernel ratio"
                  else next(r for r in refs if r.key == row["key"])
                  .source["publisher"])  # fmt: skip
        assert cells[0] == f"{row['label']}, {source} ({kind})"
        assert cells[2] == f"{row['point']:.2f} ({row['low']:.2f}-{row['high']:.2f})"
        assert cells[3] == f"{row['measured']:.2f}"
        assert cells[4] == ("yes" if row["low"] <= row["measured"] <= row["high"]
                            else "no")  # fmt: skip
        assert cells[5].split("; ")[0] == cal.loo_names(loo)[row["basis"][0]]
    inside = sum(r["inside"] for r in loo["rows"])
    assert f"({inside} of {loo['n']} in all, {loo['inside']:.0%})" in out
    assert f"median width (high / low) of {loo['median_width']:.2f}x" in out
    assert cal.leave_one_out_text(loo) in out  # the page's sentence, the same words


def test_the_leave_one_out_scores_like_with_like():
    """A kernel ratio (a layer profile) is listed and counted apart from the step
    ratios (published throughputs), each against the range of its own quantity."""

    def row(key, what, inside):
        return {"key": key, "label": key, "publisher": "p", "layouts": ["x", "x"],
                "point": 1.2, "low": 1.0, "high": 1.3, "basis": ["b"],
                "measured": 1.1, "what": what, "inside": inside,
                "width": 1.3}  # fmt: skip

    rows = [row("k", "kernel time", True), row("s1", "step time", True),
            row("s2", "step time", False)]  # fmt: skip
    loo = {"rows": rows, "n": 3, "inside": 2 / 3, "median_width": 1.3, "no_range": []}
    table = cal.leave_one_out_table(loo).splitlines()[2:]
    assert [x.split(" | ")[0] for x in table] == [
        "| s1, p (step ratio)", "| s2, p (step ratio)", "| k, p (kernel ratio)"
    ]  # fmt: skip
    text = cal.leave_one_out_text(loo)
    assert text.startswith(
        "1 of 2 step ratios inside the step range the others predict; 1 of 1 kernel "
        "ratio inside the kernel range the others predict (2 of 3 in all, 67%)"
    )
    assert "not met" in text and "No other reference" not in text
    loo.update(inside=1.0, no_range=["far"], no_range_names={"far": "X on Y (Z)"})
    for r in rows:
        r["inside"] = True
    text = cal.leave_one_out_text(loo)
    assert "is met." in text and text.endswith("applies to: X on Y (Z).")
    # with no range at all, the references without one are still named
    none = {"rows": [], "n": 0, "no_range": ["far"], "no_range_names": {}}
    assert cal.leave_one_out_text(none) == (
        "No reference has a range the others predict. No other reference applies "
        "to: far."
    )


def test_the_command_says_how_far_the_calibration_holds(capsys, tmp_path):
    """Without --predictions: the references' table (batches and layouts per side),
    the notes on published speedups, each layer profile's self-check and its stored
    bound, and the GPUs of the device table that no reference of their generation
    covers, the same sentences chapter 6 reads."""
    refs, md = references(FIXTURES), tmp_path / "refs.md"
    assert cmd.main(["--results-dir", str(FIXTURES), "--markdown", str(md)]) == 0
    out = " ".join(md.read_text().split())
    for part in (
        cal.self_check_lines(refs),
        cal.profile_bound_lines(FIXTURES),
        cal.unreferenced_text(list(load_devices()), refs),
    ):
        assert " ".join(part.split()) in out
    assert "| V100 SXM2 | published | 112 / 256 |" in out  # NVIDIA's ResNet-50
    # the share of the V100's baseline is fp32's (no TF32 there), the A100's TF32's
    assert "| 80% (fp32) |" in out and "| 43% (TF32) |" in out
    # the A100's two ResNet-50 references apart: NVIDIA's at one batch, Lambda's not
    assert "ResNet-50 v1.5 on the A100 SXM 80GB (640 / 1280)" in out
    assert "ResNet-50 v1.5 on the A100 SXM 80GB (256 / 256)" not in out
    assert "it is AMP and the batch together, and the layout where" in out
    assert "3.27x here, 3.26x in the source's own table" in out


def test_the_calibration_checks_fail_on_what_they_name():
    """The self-check flags a profile whose efficiencies no longer give back its own
    ratio; the coverage names a GPU whose generation has no reference, in the
    singular for one and the plural for several."""
    import dataclasses

    ref = refs_mod.profile_references()[0]  # the committed H200 profile
    assert cal.self_check_lines([ref]).endswith("within 5%: consistent.")
    assert "-0.0%" not in cal.self_check_lines([ref])
    off = dataclasses.replace(ref, measured_speedup=ref.measured_speedup * 1.2)
    assert cal.self_check_lines([off]).endswith("beyond 5%: inconsistent.")
    refs = references()
    one = cal.unreferenced_text(["l4"], refs)
    assert "of the L4 (Ada, data centre): its ranges" in one
    two = cal.unreferenced_text(["l4", "l40s"], refs)
    assert ": their ranges carry" in two
    assert cal.unreferenced_text([refs[0].gpu], refs).startswith("Every GPU here")


def test_every_option_has_help():
    from ampbook.calibration import build_parser

    for action in build_parser()._actions:
        assert action.help, action.option_strings


def test_the_stored_weights_and_error_model_are_the_fit():
    """WEIGHTS and ERRORS are what ``fit`` gives on the committed references: a
    reference added or changed without refitting fails here."""
    assert cal.fit() == (cal.WEIGHTS, cal.ERRORS)


def test_held_out_published_results_fall_inside_their_ranges():
    """The published results the calibration never sees (Lambda's ResNet-50 rows held
    out), predicted from every reference: the share inside and the median width
    meet the goal (at least 90%, at most 1.4x), the widths differ with the distance,
    and a range as narrow as the references' own spread would miss them."""
    from ampbook.predict.references import heldout_references

    refs, held = references(), heldout_references()
    assert len(held) >= 4 and not {h.key for h in held} & {r.key for r in refs}
    out = cal.leave_one_out(refs, targets=held)
    assert out["n"] == len(held)
    assert out["inside"] >= 0.9 and out["median_width"] <= 1.4, out["rows"]
    widths = [r["width"] for r in out["rows"]]
    assert max(widths) / min(widths) > 1.1  # no constant width
    far = max(out["rows"], key=lambda r: r["distance"])
    assert far["width"] == max(widths)  # the farthest from its references: widest
    # planted: a constant narrow error (a floor-like width) misses the goal
    narrow = cal.ErrorModel(base=0.02, slope=0.0, cover=1.0)
    assert cal.leave_one_out(refs, targets=held, errors=narrow)["inside"] < 0.9


def test_the_layout_factor_comes_from_one_network_on_one_gpu_in_both_layouts():
    refs = references()
    f = cal.layout_factor(refs)
    a = next(r for r in refs if r.key == "lambda-resnet50-a100-sxm-80gb")
    b = next(r for r in refs if r.key == "dle-resnet50-a100")
    want = a.step_efficiency["16-bit"] / b.step_efficiency["16-bit"]
    assert f == pytest.approx(want) and f < 1  # NCHW keeps less of its efficiency
    assert cal.layout_factor(refs, exclude=b.key) is None  # the only pair


def test_error_fit_holds_its_cover():
    rows = [{"distance": d, "log_error": e} for d, e in
            [(0, 0.05), (0.5, -0.1), (1, 0.12), (2, -0.2), (3, 0.3), (0.2, 0.02),
             (1.5, 0.15), (0.7, -0.05), (2.5, 0.25), (0.1, 0.01)]]  # fmt: skip
    m = cal.fit_errors(rows)
    assert m.base > 0 and m.slope > 0
    held = sum(abs(r["log_error"]) <= m.error(r["distance"]) for r in rows)
    assert held >= 9


def test_each_gpu_distance_has_its_weight_and_an_unknown_one_is_refused():
    w = cal.WEIGHTS
    assert w.gpu("same GPU") == 1.0
    assert [w.gpu(d) for d in cal.GPU_DISTANCES[1:]] == [
        getattr(w, d.replace(" ", "_")) for d in cal.GPU_DISTANCES[1:]
    ]
    with pytest.raises(AttributeError):  # a misspelt distance is not the same GPU
        w.gpu("same chipp")


def test_a_results_folder_given_as_a_file_is_called_a_file(tmp_path, capsys):
    bad = tmp_path / "r.json"
    bad.write_text("{}")
    assert cmd.main(["--results-dir", str(bad)]) == 2
    assert "r.json is a file, not a folder" in capsys.readouterr().err
