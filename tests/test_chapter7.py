"""Chapter 7 with smoke parameters against the fictitious GPU's fixture ladder: the GPU
section renders from the committed ladder (measured, with its provenance), and this
machine's own ladder, the targets and the recipe run."""

from __future__ import annotations

import re

import pytest
from _chapters import FIXTURES, execute_with_fixtures, output_text

from ampbook.bench import ladder as bl
from ampbook.results import load_results_dir


def smoke_rungs() -> list[int]:
    from ampbook.build import run as runner

    return runner.load_profiles()["smoke"]["07_making_amp_pay"]["rungs"]


@pytest.fixture(scope="module")
def chapter7(tmp_path_factory) -> str:
    return output_text(execute_with_fixtures("7", tmp_path_factory.mktemp("ch7")))


def test_gpu_ladder_renders_from_the_fixture(chapter7):
    (ladder,) = load_results_dir(FIXTURES).ladders
    assert "Measured: Fixture GPU (fictitious) · 2026-01-01" in chapter7
    assert "No GPU ladder is committed" not in chapter7  # there is one
    for rung in ladder.rungs:  # every rung's row: TF32 and AMP steps, their ratio
        a, b = ladder.cell(rung.index, "amp-fp16"), ladder.cell(rung.index, "fp32-tf32")
        assert (
            f"| {rung.index}: {rung.key} | {b.step_s * 1e3:.1f} | {a.step_s * 1e3:.1f} "
            f"| {b.step_s / a.step_s:.2f} |"
        ) in chapter7
    assert bl.rung_verdict(ladder, 5, ["fp32-tf32", "amp-fp16"]) in chapter7
    for target in bl.check_targets(ladder):
        assert f"- {target.line()}" in chapter7
    # the top rungs, each precision over TF32 and over strict fp32
    assert "| 5: amp-fp16 + GradScaler | 20.0 | 3.00 | 10.25 | 2.70 | 294 |" in chapter7


def test_this_machines_ladder_and_the_recipe_run(chapter7):
    assert "rung        mode       step ms  ops ms idle ms" in chapter7  # a CPU here
    lines = [line for line in chapter7.splitlines() if line.startswith(("0 post",))]
    assert {line.split()[2] for line in lines} == {"fp32", "amp-bf16"}
    assert all("error" not in line for line in lines)
    top = max(smoke_rungs())  # compared with the measured rung below it
    assert f"- Rung {top} ({bl.RUNGS[top].title}): fp32 " in chapter7
    assert "losses, read once at the end: [" in chapter7


def test_without_a_gpu_ladder_the_chapter_says_it_predicts(executed_notebooks):
    """data/results holds the H200's profiles and runs but no ladder: the smoke run of
    the book's own notebook shows the prediction, and says so."""
    import nbformat

    if load_results_dir().gpu_ladders():
        pytest.skip("a GPU ladder is committed: the chapter shows it instead")
    nb = nbformat.read(executed_notebooks / "07_making_amp_pay.ipynb", as_version=4)
    out = output_text(nb)
    assert "No GPU ladder is committed in the results folder yet" in out
    assert re.search(
        r"Predicted from the layer profiles measured on (NVIDIA )?H200", out
    )
    assert "This ladder has no rung 5 (+ torch.compile)" in out


def test_the_chapter_names_the_stream_flag_by_its_name():
    """The runner's flag is --16-bit-stream (the CPU ladder's rung 4 runs in bf16);
    --fp16-stream is said once, as its older name."""
    from ampbook.core.paths import REPO_ROOT

    text = (REPO_ROOT / "notebooks" / "07_making_amp_pay.py").read_text()
    assert (
        text.count("--fp16-stream") == 1
        and "older" in text.split("--fp16-stream")[0][-40:]
    )
    assert "--16-bit-stream --compile default" in text
