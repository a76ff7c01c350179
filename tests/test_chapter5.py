"""Chapter 5 with smoke parameters against the fictitious GPU's fixture results: the GPU
tables and lines render with the fixture's name and numbers."""

from __future__ import annotations

import pytest
from _chapters import FIXTURES, execute_with_fixtures, output_text

from ampbook.results import load_results_dir


@pytest.fixture(scope="module")
def chapter5(tmp_path_factory) -> str:
    return output_text(execute_with_fixtures("5", tmp_path_factory.mktemp("ch5")))


def test_gpu_pairs_and_verdicts_render(chapter5):
    rs = load_results_dir(FIXTURES)
    pairs = rs.pairs()
    assert pairs and "Fixture GPU (fictitious)" in chapter5
    for (
        q
    ) in pairs:  # every pair's numbers are in the table, and its verdict line printed
        assert f"| {q.speedup:.2f} | {q.step_speedup:.2f} |" in chapter5
        assert f"Fixture GPU (fictitious), {q.label}: " in chapter5
    # the other fictitious GPU's lone run does not pair with anything
    assert "Other Fixture GPU (fictitious), " not in chapter5


def test_layer_profiles_render_beside_the_model(chapter5):
    rs = load_results_dir(FIXTURES)
    for lp in rs.layer_profiles:
        top = lp.by_type()[0]
        assert (
            f"| {lp.device_name} | {lp.precision} | {top.type} | "
            f"{top.measured_s * 1e3:.2f} | {top.predicted_s * 1e3:.2f} |"
        ) in chapter5
        eff = min(1.0, lp.predicted_step_s / lp.step_s)
        assert (
            f"{lp.device_name}, {lp.precision}: steps at {eff:.0%} of the roofline"
            in chapter5
        )
