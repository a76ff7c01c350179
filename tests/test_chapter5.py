"""Chapter 5 with smoke parameters against the fictitious GPU's fixture results: the GPU
tables and lines render with the fixture's name and numbers."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from ampbook import run as runner
from ampbook.results import load_results_dir

FIXTURES = Path(__file__).parent / "fixtures" / "results"


@pytest.fixture(scope="module")
def chapter5(tmp_path_factory) -> str:
    source = runner.resolve_notebook("5")
    nb = runner.read_source(source)
    params = runner.profile_parameters(runner.load_profiles(), "smoke", source, nb)
    out = tmp_path_factory.mktemp("ch5")
    runner.execute(
        source,
        out,
        {**params, "results_dir": str(FIXTURES)},
        "smoke",
        log=lambda *a: None,
        threads=1,
    )
    executed = nbformat.read(out / f"{source.stem}.ipynb", as_version=4)
    texts = []
    for cell in executed.cells:
        for o in cell.get("outputs", []):
            texts.append(o.get("text", "") + o.get("data", {}).get("text/markdown", ""))
    return "\n".join(texts)


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
