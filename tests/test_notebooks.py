"""The notebook sources, their pairs, their parameters, and the runner that executes
them."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

from ampbook.core.paths import PROFILES_FILE, REPO_ROOT
from booktools import run as runner

SOURCES = runner.all_notebooks()
IDS = [p.stem for p in SOURCES]


def _cells(nb):
    """What must agree between a pair: cell types, sources and tags."""
    return [
        (c.cell_type, c.source.strip(), sorted(c.get("metadata", {}).get("tags", [])))
        for c in nb.cells
    ]


def test_there_are_notebooks_and_the_toc_lists_them_all():
    from booktools.book import toc_chapters

    assert SOURCES, "no notebooks/NN_topic.py found"
    assert toc_chapters() == IDS, "book/_toc.yml and notebooks/ disagree"


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_pair_in_sync_and_without_outputs(source: Path):
    pair = source.with_suffix(".ipynb")
    assert pair.exists(), f"{pair.name} missing: run `jupytext --to ipynb {source}`"
    nb = nbformat.read(pair, as_version=4)
    with_outputs = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count"))
    ]
    assert not with_outputs, (
        f"{pair.name} is committed with outputs in cells {with_outputs}"
    )
    assert _cells(jupytext.read(source)) == _cells(nb), (
        f"{pair.name} is out of sync with {source.name}: run `make sync`"
    )


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_one_parameters_cell_and_profiles_match_it(source: Path):
    nb = jupytext.read(source)
    _, names = runner.parameters_cell(nb)
    profiles = yaml.safe_load(PROFILES_FILE.read_text())
    for profile in runner.PROFILES:
        params = (profiles[profile] or {}).get(source.stem)
        assert params is not None, f"profile {profile} has no section for {source.stem}"
        unknown = set(params) - set(names)
        assert not unknown, (
            f"profile {profile} sets {unknown}, not in {source.stem}'s parameters cell"
        )


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_chapter_structure(source: Path):
    """One title; opens with what you will learn and need; ends with summary and
    exercises; prints the environment first."""
    nb = jupytext.read(source)
    md = [c.source for c in nb.cells if c.cell_type == "markdown"]
    titles = [l for text in md for l in text.splitlines() if l.startswith("# ")]
    assert len(titles) == 1, f"{source.name} needs exactly one '# ' title, has {titles}"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    text = "\n".join(md).lower()
    for needed in ("what you will learn", "what you need", "summary", "exercises"):
        assert needed in text, f"{source.name} lacks a '{needed}' part"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert "print_environment" in code[1].source


# --- the runner -----------------------------------------------------------------------

NOTEBOOK = """# %% [markdown]
# # A test notebook

# %% tags=["parameters"]
n = 3

# %%
print(n * 2)
{extra}
"""


def _write(tmp_path: Path, name: str, extra: str = "") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(NOTEBOOK.format(extra=extra))
    return path


def _definitions(source: str) -> list[str]:
    """The functions and classes a notebook's code cells define, with their lines."""
    import ast

    nb = jupytext.reads(source, fmt="py:percent")
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return [
        f"{type(n).__name__} {n.name} (code line {n.lineno})"
        for n in ast.walk(ast.parse(code))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_notebook_defines_no_functions(source: Path):
    # the library defines, the page calls (and shows a definition's source where it
    # teaches one): a function written in a notebook is untested and defined twice
    # once a second chapter needs it
    assert _definitions(source.read_text()) == [], source.name


def test_a_function_in_a_notebook_is_found():
    text = "# %%\nx = 1\n\n# %%\nfor i in range(2):\n    def f(): ...\n"
    assert _definitions(text) == ["FunctionDef f (code line 3)"]


@functools.cache
def _library_definitions() -> dict[str, list[tuple[str, str]]]:
    """Every function and class of ampbook by qualified name: (module path, its
    docstring)."""
    import ast

    found: dict[str, list[tuple[str, str]]] = {}

    def walk(body, prefix, path):
        for n in body:
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + n.name
                found.setdefault(name, []).append((path, ast.get_docstring(n) or ""))
                walk(n.body, name + ".", path)

    for path in sorted((REPO_ROOT / "ampbook").rglob("*.py")):
        walk(ast.parse(path.read_text()).body, "", str(path.relative_to(REPO_ROOT)))
    return found


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_code_a_page_shows_says_which_chapter_shows_it(source: Path):
    # a page teaches the library code it prints (inspect.getsource): its docstring
    # sends a reader of the library back to that page
    import re

    defs = _library_definitions()
    chapter = int(source.stem[:2])
    for shown in re.findall(r"inspect\.getsource\(([\w.]+)\)", source.read_text()):
        parts = shown.split(".")
        # the longest dotted suffix naming a definition: memory.SavedTensorMeter._pack
        name = next(
            ".".join(parts[i:])
            for i in range(len(parts))
            if ".".join(parts[i:]) in defs
        )
        docs = defs[name]
        assert any(
            f"Shown on the page in chapter {chapter} ({source.stem})" in doc
            for _, doc in docs
        ), f"{source.name} prints {shown}; its docstring ({docs[0][0]}) does not say so"


def test_runner_executes_and_injects_parameters(tmp_path):
    source = _write(tmp_path, "ok")
    run = runner.execute(source, tmp_path / "out", {"n": 21}, "smoke")
    nb = nbformat.read(run.output, as_version=4)
    outputs = [
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    ]
    assert "42\n" in outputs
    assert run.executed_cells == 2 and run.seconds > 0


def test_the_runner_writes_the_notebook_as_each_code_cell_starts_and_at_the_end(
    tmp_path, monkeypatch
):
    """papermill writes the whole notebook twice per cell, Markdown cells included;
    the runner's engine writes it as each code cell starts (the file then holds the
    outputs of every cell before it) and once at the end."""
    import papermill.engines as engines

    extra = (
        "\n# %% [markdown]\n# Between.\n\n# %%\nprint('two')\n"
        "\n# %% [markdown]\n# End.\n"
    )
    source = _write(tmp_path, "writes", extra=extra)
    written = []
    write = engines.write_ipynb

    def counted(nb, path):
        code = [c for c in nb.cells if c.cell_type == "code"]
        outputs = [o for c in code for o in c.get("outputs", [])]
        written.append([o.get("text") or o.get("evalue", "") for o in outputs])
        write(nb, path)

    monkeypatch.setattr(engines, "write_ipynb", counted)
    run = runner.execute(source, tmp_path / "out", {"n": 5}, "smoke")
    nb = nbformat.read(run.output, as_version=4)
    code_cells = sum(c.cell_type == "code" for c in nb.cells)
    assert code_cells == 4  # the parameters, papermill's injected ones, two prints
    assert len(written) == 1 + code_cells + 1, written
    assert written[-2] == ["10\n"] and written[-1] == ["10\n", "two\n"]
    # a failed cell is written as it fails, before the kernel shuts down
    written.clear()
    bad = _write(tmp_path, "bad", extra="\n# %%\nraise ValueError('planted')\n")
    with pytest.raises(runner.RunError):
        runner.execute(bad, tmp_path / "out", {}, "smoke")
    assert written[-2] == ["6\n", "planted"] and len(written) == 1 + 3 + 1 + 1


def test_runner_failure_names_notebook_and_cell_and_keeps_output(tmp_path):
    source = _write(
        tmp_path, "bad", extra='\n# %%\nraise ValueError("deliberate failure")\n'
    )
    with pytest.raises(runner.RunError) as err:
        runner.execute(source, tmp_path / "out", {}, "smoke")
    message = str(err.value)
    assert "bad failed in code cell 3" in message
    assert "deliberate failure" in message and "bad.py line" in message
    kept = tmp_path / "out" / "bad.ipynb"
    assert kept.exists(), "the partly executed notebook must be kept"
    nb = nbformat.read(kept, as_version=4)
    assert any(
        o.get("text") == "6\n"
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )


def test_runner_rejects_notebook_without_code(tmp_path):
    path = tmp_path / "empty.py"
    path.write_text("# %% [markdown]\n# # Only prose\n")
    with pytest.raises(runner.RunError, match="parameters"):
        runner.execute(path, tmp_path / "out", {}, "smoke")


def test_runner_rejects_notebook_that_executed_no_code(tmp_path):
    # Only a parameters cell: papermill runs it, but no code of the notebook itself ran.
    path = tmp_path / "params_only.py"
    path.write_text('# %% [markdown]\n# # Title\n\n# %% tags=["parameters"]\n\n')
    with pytest.raises(runner.RunError, match="no code cell"):
        runner.execute(path, tmp_path / "out", {}, "smoke")


def test_unknown_profile_and_parameter_are_errors_before_any_run(tmp_path):
    with pytest.raises(runner.RunError, match="unknown profile"):
        runner.run_notebooks(IDS[:1], profile="huge", out_dir=tmp_path)
    nb = jupytext.read(SOURCES[0])
    with pytest.raises(runner.RunError, match="parameters cell defines only"):
        runner.profile_parameters(
            {"smoke": {SOURCES[0].stem: {"no_such_parameter": 1}}},
            "smoke",
            SOURCES[0],
            nb,
        )
    with pytest.raises(runner.RunError, match="no notebook"):
        runner.resolve_notebook("99_missing")


def test_resolve_notebook_by_path_stem_and_number():
    first = SOURCES[0]
    assert runner.resolve_notebook(str(first)) == first.resolve()
    assert runner.resolve_notebook(first.stem) == first
    assert runner.resolve_notebook(str(int(first.stem[:2]))) == first


def test_cli_reports_failure_with_exit_code(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "booktools.run",
            "--profile",
            "smoke",
            "--out",
            str(tmp_path),
            "99_missing",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 2  # a notebook that does not exist: the settings
    assert "no notebook '99_missing'" in proc.stderr


def test_all_notebooks_run_with_smoke_profile(executed_notebooks):
    report = json.loads((executed_notebooks / "run_report.json").read_text())
    assert report["profile"] == "smoke"
    assert [n["name"] for n in report["notebooks"]] == IDS
    for entry in report["notebooks"]:
        assert entry["status"] == "ok" and entry["executed_cells"] > 0, entry
        nb = nbformat.read(executed_notebooks / f"{entry['name']}.ipynb", as_version=4)
        errors = [
            o
            for c in nb.cells
            if c.cell_type == "code"
            for o in c.outputs
            if o.get("output_type") == "error"
        ]
        assert not errors


def test_every_figure_cell_shows_exactly_one_image(executed_notebooks):
    """A cell captioned as a figure must display one image: none means the figure was
    lost (e.g. a non-inline backend), two means the book gets duplicate figure labels
    (end the cell with plt.show(), not with the figure object)."""
    bad = []
    for source in SOURCES:
        nb = nbformat.read(executed_notebooks / f"{source.stem}.ipynb", as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "code" or "figure" not in cell.metadata.get(
                "mystnb", {}
            ):
                continue
            images = sum(1 for o in cell.outputs if "image/png" in o.get("data", {}))
            if images != 1:
                name = cell.metadata["mystnb"]["figure"].get("name")
                bad.append(f"{source.stem}: figure {name} shows {images} images")
    assert not bad, bad
