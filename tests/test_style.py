"""The code fits the page: ruff's formatter and linter (configured in pyproject.toml)
pass on the library and the tests, and every code line of a notebook is at most 88
columns."""

from __future__ import annotations

import subprocess
import sys

import jupytext
import pytest

from ampbook.core.paths import NOTEBOOKS_DIR, REPO_ROOT

MAX_COLUMNS = 88


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )


def test_ruff_format_leaves_the_code_as_it_is():
    out = _ruff("format", "--check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_check_finds_nothing():
    out = _ruff("check", "--output-format", "concise", ".")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(
    "path", sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem
)
def test_notebook_code_fits_88_columns(path):
    nb = jupytext.read(path)
    long = [
        line
        for cell in nb.cells
        if cell.cell_type == "code"
        for line in cell.source.splitlines()
        if len(line) > MAX_COLUMNS
    ]
    assert not long, f"{len(long)} code lines over {MAX_COLUMNS} columns: {long[:3]}"


def test_the_linter_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx=1\n")
    assert _ruff("check", "--isolated", str(bad)).returncode != 0
    assert _ruff("format", "--isolated", "--check", str(bad)).returncode != 0
