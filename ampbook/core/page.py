"""Figure style and display helpers shared by the chapters. Figures must read in
grayscale: each series gets a line style, a marker and a hatch as well as a colour."""

from __future__ import annotations

import html
import math
import re
from typing import Iterable, Sequence

from ampbook.core.provenance import TABLE_MARKS, Value, glue_text

# The book's byte units (binary): tables and prose show MiB and GiB.
MIB = 2**20
GIB = 2**30

_COLORS = "#1b1b1b #3b6ea8 #c0504d #6b8e23 #8064a2 #d08c2f #4bacc6 #7f7f7f".split()
_DASHES = ((5, 1), (3, 1, 1, 1, 1, 1), (1, 1), (8, 2))  # on, off, ... in points
_LINES = ["-", "--", "-.", ":", *((0, d) for d in _DASHES)]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
_HATCHES = ["", "//", "..", "xx", "\\\\", "++", "oo", "--"]


def use_style() -> None:
    """The book's matplotlib defaults (call once per notebook)."""
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.figsize": (7.0, 4.0),
            "figure.dpi": 110,
            "savefig.dpi": 110,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "font.size": 10,
            "legend.frameon": False,
        }
    )


def series_style(i: int) -> dict:
    """Colour, line style and marker for the i-th series of a line plot."""
    return {
        "color": _COLORS[i % len(_COLORS)],
        "linestyle": _LINES[i % len(_LINES)],
        "marker": _MARKERS[i % len(_MARKERS)],
    }


def bar_style(i: int) -> dict:
    """Face colour, hatch and edge for the i-th series of a bar chart."""
    return {
        "color": _COLORS[i % len(_COLORS)],
        "hatch": _HATCHES[i % len(_HATCHES)],
        "edgecolor": "white" if i == 0 else "black",
        "linewidth": 0.5,
    }


# Characters that start Markdown, MyST or HTML markup anywhere in a line (code, roles,
# links, HTML and entities, tables, emphasis, strike-through, math) and the backslash.
_MD_ALWAYS = set("`{}[]<>&|*~$")
_PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def md_escape(text) -> str:
    """``text`` as Markdown that shows exactly that text: a value from a results file,
    a model or a command line becomes page text only through here, so it cannot add
    markup. Idempotent: a value escaped at two layers shows once."""
    text = re.sub(r"[\x00-\x1f\x7f\u2028\u2029\x85]", " ", str(text))
    out = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            if i + 1 < n and text[i + 1] in _PUNCT:
                out.append(text[i : i + 2])  # an escape already: kept
                i += 2
                continue
            out.append("\\\\")
        elif ch in _MD_ALWAYS:
            out.append("\\" + ch)
        elif ch == "_" and not (
            0 < i < n - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
        ):
            out.append("\\_")  # emphasis; inside a word (max_pool2d) it is none
        elif ch == ":" and (text[i : i + 3] == ":::" or out[-1:] == ["\\:"]):
            out.append("\\:")  # a colon fence
        else:
            out.append(ch)
        i += 1
    text = "".join(out)
    # What starts a block at the start of a line: a heading, a list, a break, a
    # comment, a target, a numbered list.
    m = re.match(r"\s*(#|%|[-+=](?=\s|$|[-+=])|\((?=.*\)=)|\d+[.)](?=\s|$))", text)
    if m:
        k = m.end(1) - 1
        text = text[:k] + "\\" + text[k:]
    return text


def _text(value) -> str:
    """A cell or header: an ``md(...)`` object's Markdown (the code's), else text."""
    data = getattr(value, "data", None)
    if isinstance(data, str) and hasattr(value, "_repr_markdown_"):
        return data.replace("\n", " ").replace("|", "\\|")
    return md_escape(value)


def _cell(value, fmt: str | None) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, Value):  # a predicted or assumed cell carries its mark
        return value.number(fmt or "", unit=False) + TABLE_MARKS.get(value.kind, "")
    return format(value, fmt or ".4g") if isinstance(value, float) else _text(value)


def md_table_text(
    rows: Iterable[Sequence],
    headers: Sequence[str],
    formats: Sequence[str | None] | None = None,
) -> str:
    """A Markdown (pipe) table as text; ``formats``: a format spec per column for
    floats. Strings are text (``md_escape``); a cell made by ``md(...)`` is kept."""
    formats = list(formats) if formats is not None else [None] * len(headers)
    lines = ["| " + " | ".join(map(_text, headers)) + " |", "|---" * len(headers) + "|"]
    marked: dict[str, dict[str, None]] = {}  # kind -> its sources, in order
    for row in rows:
        row = list(row)
        for v in row:
            if isinstance(v, Value) and v.kind in TABLE_MARKS:
                marked.setdefault(v.kind, {})[v.source] = None
        if len(row) != len(headers):
            cols = f"the table has {len(headers)} columns"
            raise ValueError(f"row {row!r} has {len(row)} cells, {cols}")
        lines.append(
            "| " + " | ".join(_cell(v, f) for v, f in zip(row, formats)) + " |"
        )
    notes = [
        f"{TABLE_MARKS[kind]} {kind}: " + "; ".join(sources)
        for kind, sources in marked.items()
    ]
    return "\n".join(lines + ([""] + ["<br>".join(notes)] if notes else []))


def md_table(
    rows: Iterable[Sequence],
    headers: Sequence[str],
    formats: Sequence[str | None] | None = None,
):
    """The same table as an IPython Markdown object."""
    return md(md_table_text(rows, headers, formats))


def md(text: str):
    """A computed sentence, displayed as Markdown (numbers in prose come from cells)."""
    from IPython.display import Markdown

    return Markdown(text)


class Dropdown:
    """A titled block that opens on a click: an HTML ``<details>`` around Markdown
    (the book and Jupyter both render it), with a plain-text form for a terminal."""

    def __init__(self, title: str, body: str, plain: str | None = None, lead: str = ""):
        self.title, self.body, self.lead = title, body, lead
        self.plain = plain if plain is not None else body

    def _repr_markdown_(self) -> str:
        # Blank lines around the body: both Markdown parsers end the HTML block there
        # and read the body as Markdown (a table stays a table).
        title = html.escape(self.title)
        lead = f"{self.lead.strip()}\n\n" if self.lead.strip() else ""
        return (
            f'{lead}<details class="ampbook-dropdown">\n<summary>{title}</summary>'
            f"\n\n{self.body.strip()}\n\n</details>\n"
        )

    def __repr__(self) -> str:
        lead = f"{self.lead.strip()}\n" if self.lead.strip() else ""
        return f"{lead}{self.title}:\n{self.plain.rstrip()}"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))


def dropdown(title: str, content, plain: str | None = None, lead: str = "") -> Dropdown:
    """``content`` (Markdown) behind a one-line ``title``; ``lead``: Markdown always
    shown above it; ``plain``: what a terminal prints instead of the content."""
    body = getattr(content, "data", content)
    if not isinstance(body, str):
        raise TypeError(
            f"dropdown content must be Markdown text or a Markdown object, got "
            f"{type(content).__name__}"
        )
    if not title.strip() or "\n" in title:
        raise ValueError(f"dropdown title must be one non-empty line, got {title!r}")
    lead = getattr(lead, "data", lead)
    return Dropdown(title.strip(), body, plain, lead)


def glue_all(**values) -> None:
    """``myst_nb.glue`` each value under its name without displaying it, for the prose's
    ``{glue:text}`name:.3g```. A ``Value`` is glued as its text (with its marker), so a
    reference to it writes ``:s``; a numeric spec on it fails the build."""
    from myst_nb import glue

    for name, value in values.items():
        glue(name, glue_text(value), display=False)
