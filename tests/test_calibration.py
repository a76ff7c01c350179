"""Calibrated speedups: the published references and their checks, efficiencies from
layer profiles, the launch floor, and the range for ResNet-50 on an A100 against
NVIDIA's published 2.63x."""

from __future__ import annotations

import statistics

import pytest
import yaml

from ampbook import calibration as cal
from ampbook import doctor
from ampbook.costmodel import OP_CLASSES
from ampbook.paths import REPO_ROOT
from ampbook.results import load_results_dir

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "results"


def test_published_references_are_checked_against_their_own_speedups(tmp_path):
    refs = cal.load_published()
    assert {r.key for r in refs} >= {"dle-resnet50-a100", "dle-resnet50-v100"}
    for r in refs:
        assert r.source["url"].startswith("https://") and r.source["bib"]
        assert r.speedup == pytest.approx(r.published_speedup, rel=0.02)
    rn50 = next(r for r in refs if r.key == "dle-resnet50-a100")
    assert (rn50.baseline.images_per_s, rn50.amp.images_per_s) == (938, 2470)
    doc = yaml.safe_load(cal.PUBLISHED_FILE.read_text())
    doc["references"]["dle-resnet50-a100"]["amp"]["images_per_s"] = 2740  # a typo
    bad = tmp_path / "t.yml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(cal.CalibrationError, match="the source says 2.63x"):
        cal.load_published(bad)


def test_stored_bounds_are_the_cost_models():
    """The committed bounds of a published reference equal a fresh trace (rerun
    ``python -m ampbook.calibration --write`` after a change to the cost model)."""
    ref = next(r for r in cal.load_published() if r.key == "dle-resnet50-v100")
    stored = cal.load_bounds()[ref.key]
    fresh = cal.reference_bounds(ref)
    for side in cal.SIDES:
        assert stored[side]["kernels"] == fresh[side]["kernels"]
        for c in OP_CLASSES:
            assert stored[side]["by_class_s"][c] == pytest.approx(
                fresh[side]["by_class_s"][c], rel=1e-9
            )


def test_published_efficiencies_reproduce_the_published_speedup():
    for ref in cal.published_references():
        bounds = cal.load_bounds()[ref.key]
        fam = "tf32" if "tf32" in ref.families else "fp32"
        t32 = cal.step_time(bounds["baseline"]["by_class_s"], ref, fam)
        t16 = cal.step_time(bounds["amp"]["by_class_s"], ref, "16-bit")
        b32, b16 = bounds["baseline"]["batch"], bounds["amp"]["batch"]
        assert (b16 / t16) / (b32 / t32) == pytest.approx(ref.measured_speedup)
        assert all(0 < e < 1 for e in ref.efficiency.values()), ref.key


def test_layer_profiles_give_efficiencies_per_class():
    (ref,) = cal.profile_references(FIXTURES)
    assert ref.kind == "profile" and ref.per_class and ref.model == "erfnet"
    lps = {lp.precision: lp for lp in load_results_dir(FIXTURES).layer_profiles}
    conv = [x for x in lps["amp-fp16"].layers if cal.layer_class(x.type) == "conv"]
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
    assert cal.gpu_distance("a100-sxm-80gb", "h200-sxm") == "other architecture"
    mix = dict.fromkeys(OP_CLASSES, 0.25)
    assert cal.mix_distance(mix, mix) == 0
    assert cal.mix_distance({"conv": 1.0}, {"norm": 1.0}) == 1


@pytest.fixture(scope="module")
def resnet50_a100():
    cfg = doctor.DoctorConfig(
        "torchvision:resnet50", (3, 224, 224), 256, "cpu", ["amp-fp16"], ["a100"],
        measure=False,
    )  # fmt: skip
    return doctor.diagnose(cfg)


def test_resnet50_batch_256_on_a100_range_contains_the_published_speedup(
    resnet50_a100,
):
    (rng,) = resnet50_a100["verdict"]["ranges"]
    assert rng["low"] <= 2.63 <= rng["high"]
    own = next(r for r in rng["rows"] if r["key"] == "dle-resnet50-a100")
    assert own["same_network"] and own["gpu_distance"] == "same GPU"
    # its own efficiencies reproduce its figure but for the optimizer (Adam here,
    # SGD there) and the batch of its fp32 run
    assert own["speedup"] == pytest.approx(2.63, rel=0.03)
    assert rng["equal_share"] < 2.63  # the ratio of the bounds is no upper bound


def test_leaving_a_reference_out(resnet50_a100):
    roof = resnet50_a100["roofline"][0]
    refs = cal.references()
    rng = cal.calibrated_range(
        roof["fp32_by_class_s"], roof["amp_by_class_s"], "a100-sxm-80gb", refs,
        model="torchvision:resnet50", exclude="dle-resnet50-a100",
    )  # fmt: skip
    assert "dle-resnet50-a100" not in {r["key"] for r in rng["rows"]}
    assert rng["rows"] and rng["low"] <= rng["high"]


def test_predictions_table_has_every_published_reference(capsys):
    refs = cal.references()
    published = cal.load_published()
    assert cal.main(["--predictions"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 + len(published)
    for ref, line in zip(published, lines[2:]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == ref.network and cells[-1] == f"{ref.speedup:.2f}x"
        other = cal.published_prediction(ref, refs, exclude_own=True)
        assert cells[3].startswith(f"{other['low']:.2f}-{other['high']:.2f}x")
        assert f"({len(other['rows'])} refs)" in cells[3]
