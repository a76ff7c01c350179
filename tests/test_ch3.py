"""Chapters 3 and 4 show committed GPU runs: run with smoke parameters and
``results_dir`` = the fictitious-GPU fixtures, their GPU tables carry the fixture GPU's
name and numbers, and only runs of one GPU and one setting pair."""

from __future__ import annotations

import pytest
from _chapters import FIXTURES, execute_with_fixtures

from ampbook import results

GPU, OTHER = "Fixture GPU (fictitious)", "Other Fixture GPU (fictitious)"
_execute = execute_with_fixtures


def _table(nb, header: str) -> str:
    """The markdown output whose first line starts with ``header``."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/markdown", "")
            if text.startswith(header):
                return text
    raise AssertionError(f"no table starting with {header!r}")


def _row(table: str, *cells: str) -> str:
    rows = [line for line in table.splitlines() if all(c in line for c in cells)]
    assert len(rows) == 1, f"{cells} in {len(rows)} rows of:\n{table}"
    return rows[0]


@pytest.fixture(scope="module")
def fixture_pairs():
    return results.load_results_dir(FIXTURES).pairs()


@pytest.mark.slow
def test_chapter3_shows_the_fixture_gpu_runs_and_pairs(tmp_path, fixture_pairs):
    nb = _execute(
        "03_amp_training",
        tmp_path,
        precisions=["fp32", "amp-bf16"],
        num_epochs=1,
        loop_steps=1,
    )
    text = "\n".join(
        o.get("data", {}).get("text/markdown", "") + o.get("text", "")
        for c in nb.cells
        for o in c.get("outputs", [])
    )
    # the answer first, from the fixture GPU's runs
    assert ":::{admonition} In short\nOn Fixture GPU (fictitious) (3 epochs" in text
    # one provenance line per GPU setting shown, with versions and settings
    prov = results.load_results_dir(FIXTURES).pairs()[0].provenance
    assert f"Provenance: {prov}" in text and "cuDNN" in prov
    pairs = _table(nb, "| pair | step in the loop (x) | epoch speedup (x) |")
    assert OTHER not in pairs and GPU not in pairs  # one GPU: named in the provenance
    assert len(pairs.splitlines()) == 2 + len(fixture_pairs) == 2 + 4
    for p in fixture_pairs:
        row = _row(pairs, f"| {p.label} |")
        assert f"{p.speedup:.2f}" in row and f"{p.step_speedup:.2f}" in row
        assert f"{p.memory_ratio:.2f}" in row
        assert f"{GPU}, {p.label}: " in text  # its verdict line
    # two GPU figures and this machine's, each one image
    figures = [
        c for c in nb.cells if c.get("metadata", {}).get("mystnb", {}).get("figure")
    ]
    names = [c.metadata["mystnb"]["figure"]["name"] for c in figures]
    assert names == ["fig-ch3-gpu-curves", "fig-ch3-gpu-bars", "fig-ch3-curves"]
    # the CPU's bytes saved for backward held against the GPU run's, per precision
    mem = _table(nb, "| precision | GPU run (GiB) | counted on this CPU (GiB) |")
    assert "| fp32 |" in mem and "| amp-fp16 |" in mem
    # the kernel probe ran and the plan reports what it measured
    assert "fp32: the 64-channel 3x1 convolution at 64x32 took" in text
    plan = _table(nb, "| precision | image size | training images | epochs |")
    assert "| fp32 |" in plan and "| amp-bf16 |" in plan
    # the runner's 60-line step is not printed on the page
    assert "def __call__" not in text and "_optimizer_step" not in text


@pytest.mark.slow
def test_chapter4_pairs_only_runs_of_one_gpu(tmp_path, fixture_pairs):
    nb = _execute("04_loss_scaling", tmp_path, num_steps=2)
    # one GPU pairs: it is named in the provenance line, not in every row
    table = _table(nb, "| pair | fp32 peak GiB |")
    fp16 = [p for p in fixture_pairs if p.amp.mode == "amp-fp16"]
    assert len(table.splitlines()) == 2 + len(fp16) == 2 + 2  # vs TF32 and strict fp32
    for p in fp16:
        row = _row(table, p.label)
        assert f"{1 - p.memory_ratio:.1%}" in row
        assert f"{p.amp.memory_bytes / 2**30:.2f}" in row
    lines = _table(nb, GPU)
    assert OTHER not in lines and fp16[0].setting.label in lines


def test_chapter3_clipping_cell_shows_what_its_prose_says(executed_notebooks):
    import re

    import nbformat
    from _chapters import output_text

    nb = nbformat.read(executed_notebooks / "03_amp_training.ipynb", as_version=4)
    text = output_text(nb)
    line = re.compile(
        r"^\| (SGD|Adam) \| (unscale\\_, then clip|clip only) \| (\S+) \| (\S+) \| "
        r"(\S+) \|$",
        re.M,
    )
    rows = {
        (m[1], m[2]): tuple(map(float, m.groups()[2:])) for m in line.finditer(text)
    }
    assert len(rows) == 4, text
    scale = 2.0**16
    for opt in ("SGD", "Adam"):
        right, wrong = rows[opt, "unscale\\_, then clip"], rows[opt, "clip only"]
        assert wrong[0] == pytest.approx(right[0] * scale, rel=1e-3)  # scaled norm
        assert right[1] == pytest.approx(1.0, rel=1e-3)  # max_norm handed over
        assert wrong[1] == pytest.approx(1.0 / scale, rel=1e-3)  # S times too small
    # SGD's step shrinks by the scale; Adam's keeps about its length
    assert rows["SGD", "clip only"][2] == pytest.approx(
        rows["SGD", "unscale\\_, then clip"][2] / scale, rel=0.05
    )
    assert rows["Adam", "clip only"][2] == pytest.approx(
        rows["Adam", "unscale\\_, then clip"][2], rel=0.1
    )
    assert "on the true ones: 65536 (the scale, 65536)" in text
    assert re.search(r"ERFNet's [\d,]+ parameters is 1\.\de-08 per element", text)
