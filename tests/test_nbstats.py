"""Every computed sentence and table reaches the page (issue 12): statically, no display
value is thrown away in any notebook; and in the executed notebooks, every cell that
ends in one shows it."""

from __future__ import annotations

import ast

import nbformat
import pytest

from booktools import run as runner
from booktools.nbstats import (
    DISPLAY_FACTORIES,
    _called_name,
    _code,
    discarded_displays,
    notebook_stats,
)

SOURCES = runner.all_notebooks()
IDS = [p.stem for p in SOURCES]


@pytest.mark.parametrize(
    "source, lost",
    [
        ('x = 1\nif x:\n    md("yes")\nelse:\n    md("no")\n', [(3, "md"), (5, "md")]),
        ('md("first")\nmd("second")\n', [(1, "md")]),
        (
            'for i in range(2):\n    md_table([[i]], ["i"])\nprint(1)\n',
            [(2, "md_table")],
        ),
        ('def f():\n    Markdown("lost")\n    return 1\nf()\n', [(2, "Markdown")]),
        ('%time x = 1\nplots.md("shown")\n', []),
        ('display(md("a"))\nmd("b")\n', []),
        ("t = md_table([], [])\nt\n", []),
        ('glue("x", md("kept by glue"), display=False)\n', []),
        ('x = 1\nmd(f"{x}") if x else md("no")\n', []),
    ],
)
def test_discarded_displays_finds_lost_values(source, lost):
    assert discarded_displays(source) == lost


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_no_display_value_is_thrown_away(source):
    """A md(...)/md_table(...) that is not the cell's last bare expression (e.g. inside
    an if/else) is computed and never shown."""
    lost = notebook_stats(source).discarded
    assert not lost, f"{source.name}: {lost}"


def _ends_in_display(src: str) -> bool:
    tree = ast.parse(_code(src))
    return (
        bool(tree.body)
        and isinstance(tree.body[-1], ast.Expr)
        and _called_name(tree.body[-1].value) in DISPLAY_FACTORIES
    )


def test_executed_cells_show_their_markdown(executed_notebooks):
    """In the smoke executions, each cell that ends in md(...)/md_table(...) has a
    markdown output, and no markdown output is empty."""
    missing = []
    for source in SOURCES:
        nb = nbformat.read(executed_notebooks / f"{source.stem}.ipynb", as_version=4)
        for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
            shown = [
                o["data"]["text/markdown"]
                for o in cell.outputs
                if "text/markdown" in o.get("data", {})
            ]
            if _ends_in_display(cell.source) and not shown:
                missing.append(f"{source.stem} code cell {i + 1}: no markdown output")
            missing += [
                f"{source.stem} code cell {i + 1}: empty markdown"
                for text in shown
                if not text.strip()
            ]
    assert not missing, missing


def test_notebook_stats_measures_what_the_issue_counts(tmp_path):
    source = tmp_path / "99_demo.py"
    source.write_text(
        "# %% [markdown]\n# # Demo\n#\n# Some static prose here.\n\n"
        "# %%\nx = 1\n\ny = 2\n\n"
        '# %%\ndef helper():\n    return 1\n\n\nmd(f"{x} is computed prose")\n\n'
        '# %%\nif x:\n    md("lost")\nprint(x)\n'
    )
    s = notebook_stats(source)
    assert s.code_lines == 2 + 3 + 3 and s.median_cell_lines == 3
    assert s.functions == ["helper"]
    prose = len("# Demo\n\nSome static prose here.")
    assert s.fstring_prose_share == pytest.approx(
        len(" is computed prose") / (len(" is computed prose") + prose)
    )
    assert s.discarded == ["code cell 3, line 2: md(...) is never displayed"]
