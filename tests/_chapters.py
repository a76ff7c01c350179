"""Running a chapter with smoke parameters against the fictitious-GPU fixtures."""

from __future__ import annotations

from pathlib import Path

import nbformat

from booktools import run as runner

FIXTURES = Path(__file__).parent / "fixtures" / "results"


def execute_with_fixtures(stem: str, out: Path, **extra) -> nbformat.NotebookNode:
    """Execute notebook ``stem`` with the smoke profile, ``extra`` parameters and
    ``results_dir`` = the fixtures; the executed notebook."""
    source = runner.resolve_notebook(stem)
    params = runner.profile_parameters(
        runner.load_profiles(), "smoke", source, runner.read_source(source)
    )
    params.update(extra, results_dir=str(FIXTURES))
    run = runner.execute(source, out, params, "smoke", log=lambda *a: None, threads=1)
    return nbformat.read(run.output, as_version=4)


def output_text(nb: nbformat.NotebookNode) -> str:
    """Every stream and markdown output of a notebook, joined."""
    texts = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            texts.append(o.get("text", "") + o.get("data", {}).get("text/markdown", ""))
    return "\n".join(texts)
