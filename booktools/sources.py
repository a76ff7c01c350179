"""The book's notebook sources: which they are, in reading order, and each read as a
notebook. The runner, the reader's copy and the run-along notes all start here."""

from __future__ import annotations

from pathlib import Path

from ampbook.core.paths import NOTEBOOKS_DIR


def all_notebooks() -> list[Path]:
    """The book's notebook sources, in reading order."""
    return sorted(p for p in NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py"))


def read_source(source: Path):
    """A notebook's jupytext source as a notebook, its cells numbered ``cell-N``
    (jupytext gives random ids: two runs of one source would differ by them)."""
    import jupytext

    nb = jupytext.read(source)
    for n, cell in enumerate(nb.cells):
        cell.id = f"cell-{n}"
    return nb
