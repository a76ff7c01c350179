"""How readable a chapter's source is, and whether its computed prose reaches the page.

    python -m booktools.nbstats [NOTEBOOK ...]

prints per notebook: code lines (non-blank, in code cells), the median code cell's
lines, functions defined, the share of prose built by ``md(f"...")`` (characters of
f-string arguments to ``md``/``Markdown`` against those plus the markdown cells), and
every displayed value that is thrown away.

A cell displays only its last bare expression (and what it passes to ``display``). A
``md(...)`` written anywhere else, e.g. inside an ``if``, is computed and lost: it never
reaches the page. ``discarded_displays`` finds such calls statically.
"""

from __future__ import annotations

import ast
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import jupytext

from ampbook.core import cli

# Calls whose value is something to display (a sentence, a table): losing it loses text.
DISPLAY_FACTORIES = frozenset(
    {"md", "md_table", "dropdown", "Markdown", "HTML", "Latex", "Math"}
)


def _code(source: str) -> str:
    """A cell's source as Python: IPython magics and shell lines become comments."""
    return "\n".join(
        "#" + line if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    )


def _called_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name):
            return f.id
        if isinstance(f, ast.Attribute):
            return f.attr
    return None


def discarded_displays(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each display factory call in one cell whose value is dropped:
    a bare expression statement that is not the cell's last top-level statement."""
    tree = ast.parse(_code(source))
    last = tree.body[-1] if tree.body else None
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Expr) or node is last:
            continue
        name = _called_name(node.value)
        if name in DISPLAY_FACTORIES:
            out.append((node.lineno, name))
    return sorted(out)


@dataclass
class NotebookStats:
    name: str
    code_lines: int
    median_cell_lines: float
    functions: list[str]
    fstring_prose_share: float
    discarded: list[str]

    def row(self) -> list:
        return [
            self.name,
            self.code_lines,
            self.median_cell_lines,
            len(self.functions),
            self.fstring_prose_share,
            len(self.discarded),
        ]


def _fstring_prose_chars(tree: ast.AST) -> int:
    """Characters of literal text in f-strings passed to md()/Markdown()."""
    total = 0
    for node in ast.walk(tree):
        if _called_name(node) in ("md", "Markdown") and node.args:
            for sub in ast.walk(node.args[0]):
                if isinstance(sub, ast.JoinedStr):
                    total += sum(
                        len(v.value)
                        for v in sub.values
                        if isinstance(v, ast.Constant) and isinstance(v.value, str)
                    )
    return total


def notebook_stats(path: str | Path) -> NotebookStats:
    path = Path(path)
    nb = jupytext.read(path)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    prose = sum(len(c.source) for c in nb.cells if c.cell_type == "markdown")
    lines = [sum(1 for line in src.splitlines() if line.strip()) for src in code]
    functions, fprose, discarded = [], 0, []
    for i, src in enumerate(code):
        tree = ast.parse(_code(src))
        functions += [
            n.name
            for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        fprose += _fstring_prose_chars(tree)
        discarded += [
            f"code cell {i + 1}, line {line}: {name}(...) is never displayed"
            for line, name in discarded_displays(src)
        ]
    return NotebookStats(
        path.stem,
        sum(lines),
        statistics.median(lines) if lines else 0,
        functions,
        fprose / (fprose + prose) if fprose + prose else 0.0,
        discarded,
    )


@cli.command("python -m booktools.nbstats")
def main(argv: list[str] | None = None) -> int:
    from booktools.sources import all_notebooks

    ap = cli.ArgumentParser(prog="python -m booktools.nbstats", description=__doc__)
    ap.add_argument("notebooks", nargs="*", help="notebook sources (default: all)")
    args = ap.parse_args(argv)
    paths = [Path(p) for p in args.notebooks] or all_notebooks()
    for p in paths:
        if not p.exists():
            print(f"error: no notebook {p}", file=sys.stderr)
            return 2
        cli.check_input_file(p, "notebook")
    print(
        f"{'notebook':<20} {'code lines':>10} {'median cell':>11} {'functions':>9} "
        f"{'md(f) prose':>11} {'discarded':>9}"
    )
    bad = 0
    for p in paths:
        s = notebook_stats(p)
        print(
            f"{s.name:<20} {s.code_lines:>10} {s.median_cell_lines:>11g} "
            f"{len(s.functions):>9} {s.fstring_prose_share:>11.0%} "
            f"{len(s.discarded):>9}"
        )
        for d in s.discarded:
            print(f"    {d}")
        bad += len(s.discarded)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
