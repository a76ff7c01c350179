"""Chapter 7 with smoke parameters against the fictitious GPU's fixture ladder: the GPU
section renders from the committed ladder (measured, with its provenance), and this
machine's own ladder, the targets and the recipe run."""

from __future__ import annotations

import re

import pytest
from _chapters import FIXTURES, execute_with_fixtures, output_text

from ampbook.chapters import ch7
from ampbook.chapters.ch7 import ladder_report
from ampbook.chapters.ch7 import rungs as bl
from ampbook.results import MODE_LABELS, load_results_dir


def smoke_rungs() -> list[int]:
    from booktools import run as runner

    return bl.parse_rungs(runner.load_profiles()["smoke"]["07_making_amp_pay"]["rungs"])


@pytest.fixture(scope="module")
def chapter7(tmp_path_factory) -> str:
    """The chapter against the fixtures. Its own ladder here is fp32 alone: what it
    shows of this machine is read from the book's smoke run (``here``)."""
    out = tmp_path_factory.mktemp("ch7")
    return output_text(execute_with_fixtures("7", out, precisions=["fp32"]))


@pytest.fixture(scope="module")
def here(executed_notebooks) -> str:
    """Chapter 7 of the book's smoke run: this machine's ladder, profile and recipe."""
    import nbformat

    path = executed_notebooks / "07_making_amp_pay.ipynb"
    return output_text(nbformat.read(path, as_version=4))


@pytest.mark.slow
def test_gpu_ladder_renders_from_the_fixture(chapter7):
    (ladder,) = load_results_dir(FIXTURES).ladders
    assert "Measured: Fixture GPU (fictitious) · 2026-01-01" in chapter7
    assert "No GPU ladder is committed" not in chapter7  # there is one
    for rung in ladder.rungs:  # every rung's row: TF32 and AMP steps, their ratio
        a, b = ladder.cell(rung.index, "amp-fp16"), ladder.cell(rung.index, "fp32-tf32")
        name = ladder_report.rung_label(rung)
        assert (
            f"| {rung.index}: {name} | {b.step_s * 1e3:.1f} | {a.step_s * 1e3:.1f} "
            f"| {b.step_s / a.step_s:.2f} |"
        ) in chapter7
    assert ch7.rung_verdict(ladder, 5, ["fp32-tf32", "amp-fp16"]) in chapter7
    for target in ladder_report.check_targets(ladder):
        assert f"- {target.line()}" in chapter7
    # the top rungs, each precision over TF32 and over strict fp32
    assert "| 5: amp-fp16 + GradScaler | 20.0 | 3.00 | 10.25 | 2.70 | 294 |" in chapter7
    # with fp32 alone measured here, nothing on the page reads "nan"
    assert not re.search(r"\bnan\b", chapter7, re.I)


@pytest.mark.slow
def test_this_machines_ladder_and_the_recipe_run(here):
    assert "rung        mode       step ms  ops ms idle ms" in here  # a CPU here
    # rung 0 is the ERFNet authors' defaults, named so (its record key stays "post")
    assert "0 post" not in here and "0: post" not in here
    lines = [line for line in here.splitlines() if line.startswith(("0 defaults",))]
    assert {line.split()[2] for line in lines} == {"fp32", "amp-bf16"}
    assert all("error" not in line for line in lines)
    top = max(smoke_rungs())  # compared with the measured rung below it
    assert f"- Rung {top} ({bl.RUNGS[top].title}): fp32 " in here
    assert re.search(
        r"losses, read once at the end \(cpu, autocast to torch.bfloat16, random "
        r"labels\): \[",
        here,
    )
    # the recipe's source, from ampbook.chapters.ch7.recipe, on the page
    assert "def optimised_training(model, images_u8, labels, dtype" in here


@pytest.mark.slow
def test_the_page_profiles_the_step_and_runs_rung_4s_cast(here):
    """The profiler cell prints wall, busy and idle time per step, saying where it was
    measured, and kineto's start and stop lines stay off the page; the cast cell shows
    the concatenation's dtype both ways (bf16 autocast on this CPU)."""
    assert re.search(
        r"^measured here on .+ \(cpu, \d+ threads?\),\n"
        r"3 steps of the recipe, autocast to",
        here,
        re.M,
    )
    plain, wall, busy, idle = (
        float(re.search(rf"{name}[^:]*:\s+([\d.]+) ms per step", here).group(1))
        for name in ("wall time, not profiled", "wall time, profiled", "busy", "idle")
    )
    assert plain > 0 and 0 < busy <= wall
    assert idle == pytest.approx(wall - busy, abs=0.011)
    assert "profiler_start" not in here and "profiler_stop" not in here
    assert "fp16_stream=False: torch.cat gives torch.float32" in here
    assert "fp16_stream=True: torch.cat gives torch.bfloat16" in here
    assert "pool = pool.to(conv.dtype)" in here  # the two lines' source


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
    # the targets' verdicts say what the prediction assumed, and rung 0's runner syncs
    targets = next(x for x in out.split("\n\n") if "The predicted verdicts rest" in x)
    for said in (
        "no idle time (assumed, rung 3)",
        "applied to every kernel by assumption",
        "batch norm 2 times faster in NHWC (assumed",
        "Part of that idle time is the runner's, not AMP's",
    ):
        assert said in targets, said
    assert re.search(r"bound ratio 0\.\d+ \(computed: .* [\d.]+ / [\d.]+ ms\)", out)
    # a predicted memory ratio is met or missed by its value (0.571 > 0.570 misses)
    m = re.search(
        r"peak memory <= ([\d.]+): predicted to (meet|MISS) \(([\d.]+) pre", out
    )
    assert m and "predicted at the target" not in out
    assert (float(m[3]) <= float(m[1])) == (m[2] == "meet")
    # a rung 0 measurement carried up unchanged is glued as rung 0's, not "(predicted)"
    glued = {
        o["metadata"]["scrapbook"]["name"]: o["data"][
            "application/papermill.record/text/plain"
        ]
        for c in nb.cells
        for o in c.get("outputs", [])
        if "scrapbook" in o.get("metadata", {})
    }
    for name in ("ch7_r1_amp_step", "ch7_r2_amp_idle"):
        assert re.fullmatch(r"'[\d.]+ ms \(rung 0, measured, carried\)'", glued[name])


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


# --- the chapter's library: its readings of a ladder, the recipe, rung 4's cast -------


def fixture_ladder():
    (ladder,) = load_results_dir(FIXTURES).ladders
    return ladder


def test_the_page_shows_the_recipes_source():
    """The recipe lives in ampbook.chapters.ch7.recipe (no notebook defines a function:
    tests/test_notebooks.py); the page prints its source, then calls it."""
    from ampbook.core.paths import REPO_ROOT

    text = (REPO_ROOT / "notebooks" / "07_making_amp_pay.py").read_text()
    assert "inspect.getsource(recipe.optimised_training)" in text
    assert "recipe.optimised_training(" in text


def test_the_profiler_cell_shows_and_calls_profile_steps_never_re_types_it():
    """One source for the profiler: the page prints ladder_measure.profile_steps (and
    the union it uses) and calls it; no code cell re-types a line of either, or
    drives torch.profiler itself."""
    import inspect

    import nbformat

    from ampbook.chapters.ch7 import ladder_measure
    from ampbook.core.paths import REPO_ROOT

    nb = nbformat.read(REPO_ROOT / "notebooks" / "07_making_amp_pay.ipynb", 4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for name in ("profile_steps", "union_us"):
        assert f"inspect.getsource(ladder_measure.{name})" in code
        body = inspect.getsource(getattr(ladder_measure, name)).splitlines()[1:]
        typed = [x.strip() for x in body if len(x.strip()) > 24]
        retyped = [x for x in typed if not x.startswith(('"', "#")) and x in code]
        assert not retyped, retyped
    assert "ladder_measure.profile_steps(step, " in code
    for driving in ("from torch.profiler", "ProfilerActivity", ".events()"):
        assert driving not in code, driving


def test_cell_values_say_how_each_number_was_obtained():
    ladder = fixture_ladder()
    got = ch7.cell_values(ladder, 4, "amp-fp16")
    assert set(got) == set(ch7.FIELDS)
    c = ladder.cell(4, "amp-fp16")
    assert float(got["step"]) == c.step_s and got["step"].is_measured
    assert float(got["gib"]) == c.memory_bytes
    # no such cell: nan, not a zero that reads as a measurement
    assert all(v != v for v in ch7.cell_values(ladder, 9, "amp-fp16").values())
    assert all(v != v for v in ch7.cell_values(None, 0, "amp-fp16").values())


def test_speedup_is_a_value_of_its_inputs_kind():
    ladder = fixture_ladder()
    base, amp = (
        ladder_report.cell_value(ladder, ladder.cell(0, m), "step_s")
        for m in ("fp32-tf32", "amp-fp16")
    )
    r = ch7.speedup(base, amp)
    assert float(r) == pytest.approx(float(base) / float(amp)) and r.is_measured
    assert str(r).endswith("x")
    nan = ch7.speedup(float("nan"), float("nan"))
    assert nan != nan


def test_top_rows_compare_each_precision_on_one_rung():
    ladder = fixture_ladder()
    rows = {row[0]: row for row in ch7.top_rows(ladder, 5, "fp32-tf32")}
    assert set(rows) == {f"5: {MODE_LABELS[m]}" for m in ladder.modes()}
    amp = rows["5: amp-fp16 + GradScaler"]
    a, b = ladder.cell(5, "amp-fp16"), ladder.cell(5, "fp32-tf32")
    assert float(amp[1]) == pytest.approx(a.step_s * 1e3)
    assert float(amp[2]) == pytest.approx(b.step_s / a.step_s)
    assert float(rows["5: fp32 (TF32 on)"][2]) == pytest.approx(1.0)


def test_here_speedup_needs_both_cells_on_the_rung():
    ladder = fixture_ladder()
    assert ch7.here_amp_mode(ladder) == "amp-fp16"
    assert ch7.compared_rungs(ladder) == [r.index for r in ladder.rungs]
    fp32, amp = ladder.cell(0, "fp32"), ladder.cell(0, "amp-fp16")
    assert float(ch7.here_speedup(ladder, 0)) == pytest.approx(fp32.step_s / amp.step_s)
    missing = ch7.here_speedup(ladder, 9)
    assert missing != missing


def test_the_recipe_lowers_the_loss_on_a_fixed_batch():
    """optimised_training's step, on a CPU in bf16 (as the chapter runs it there),
    trains: ten steps on one tiny batch lower its loss; the losses stay on the device
    (a tensor each, read by the caller)."""
    import torch

    from ampbook.chapters.ch7.recipe import optimised_training
    from ampbook.segmentation.model import ERFNet

    torch.manual_seed(0)
    images = torch.randint(0, 256, (2, 3, 16, 32), dtype=torch.uint8)
    labels = torch.randint(0, 19, (2, 16, 32))
    step = optimised_training(
        ERFNet(19, fp16_stream=True), images, labels, torch.bfloat16, lr=2e-3
    )
    index = torch.arange(2)
    losses = [step(index) for _ in range(10)]
    assert all(isinstance(x, torch.Tensor) and not x.requires_grad for x in losses)
    assert losses[-1].item() < losses[0].item()


def test_rung_4s_cast_keeps_the_concatenation_16_bit():
    """The chapter's cast cell: under autocast the reference downsampler's torch.cat
    promotes the 16-bit convolution and the fp32 pool to fp32; with fp16_stream both
    halves, and the concatenation, stay 16-bit."""
    import torch

    from ampbook.segmentation.model import Downsampler

    x = torch.randn(1, 3, 16, 32)
    got = {}
    for fp16_stream in (False, True):
        block = Downsampler(3, 16, fp16_stream)
        seen = []
        block.bn.register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = block(x)
        got[fp16_stream] = (seen[0], out.dtype)
    assert got == {
        False: (torch.float32, torch.float32),
        True: (torch.bfloat16, torch.bfloat16),
    }


def test_rung_0_twice_once_a_ladder_re_measured_it(tmp_path):
    """Chapter 7 puts the runner-of-2026-11-30 rung 0 (layer profiles) beside a
    committed ladder's rung 0 measured with today's runner; before such a ladder is
    committed it says which runner measured the one shown (fixture copies here:
    nothing under data/results)."""
    import json
    import shutil

    for f in FIXTURES.glob("layer_profile_fixture-gpu_*.json"):
        shutil.copy(f, tmp_path / f.name)
    rec = json.loads((FIXTURES / "ladder_fixture-gpu.json").read_text())
    (tmp_path / "ladder_fixture-gpu.json").write_text(json.dumps(rec))
    old = load_results_dir(tmp_path)
    ladder, predicted = ch7.gpu_ladder(old)
    assert not predicted
    # the fixture ladder is dated before the runner changed: no second rung 0
    assert ch7.rung0_comparison(old, ladder, predicted).startswith("No rung 0")
    assert "4 times per AMP step and 2 per fp32 step" in ch7.rung0_comparison(
        old, None, False
    )
    rec["created"] = "2026-12-06T10:00:00+00:00"
    (tmp_path / "ladder_fixture-gpu.json").write_text(json.dumps(rec))
    new = load_results_dir(tmp_path)
    ladder, predicted = ch7.gpu_ladder(new)
    text = ch7.rung0_comparison(new, ladder, predicted)
    rows = [x for x in text.splitlines() if x.startswith("| ") and "---" not in x][1:]
    assert len(rows) == 4
    assert sum("runner of 2026-11-30" in r for r in rows) == 2
    assert sum("ladder of 2026-12-06" in r for r in rows) == 2
    lp = {p.mode: p for p in new.layer_profiles}
    cell = ladder.cell(0, "amp-fp16")
    amp_rows = [r for r in rows if r.startswith(f"| {MODE_LABELS['amp-fp16']} |")]
    assert f"| {lp['amp-fp16'].step_s * 1e3:.1f} |" in amp_rows[0]
    assert f"| {cell.step_s * 1e3:.1f} |" in amp_rows[1]
    assert f"{lp['fp32-tf32'].step_s / lp['amp-fp16'].step_s:.2f}" in amp_rows[0]


def test_three_timed_steps_give_no_verdict():
    """With 3 timed steps per cell pure noise separates two cells completely one time
    in ten: no "faster in every timed step" verdict below MIN_TIMED_STEPS."""
    import dataclasses

    (ladder,) = load_results_dir(FIXTURES).ladders
    a, b = ladder.cell(1, "amp-fp16"), ladder.cell(2, "amp-fp16")
    assert "every timed step" in ch7.step_change(a, b, ladder)
    short = [
        dataclasses.replace(c, record={**c.record, "step_times_s":
                                       c.record["step_times_s"][:3]})
        for c in (a, b)
    ]  # fmt: skip
    text = ch7.step_change(*short, ladder)
    assert text.startswith("no verdict: 3 timed steps, fewer than 5")
