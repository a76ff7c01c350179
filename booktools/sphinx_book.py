"""Sphinx extension: the book's citation style and its notebook downloads.

- Citations: ``bibtex_reference_style = "author_year_round"``, sphinxcontrib-bibtex's
  author-year style with round brackets and "; " between sources: ``{cite:p}`` gives
  "(Romera et al., 2018)", ``{cite:t}`` "Romera et al. (2018)". The reader's copies
  write the same text (``booktools.reader.cite_text``). The References page uses
  ``bibtex_default_style = "ampbook"``: pybtex's plain style with surnames first; its
  entries' labels are hidden by ``book/_static/ampbook.css`` (an author-year list
  needs none).
- Downloads: a chapter's download button offers its reader's copy
  (``_static/notebooks/<stem>.ipynb``, staged by ``python -m booktools.book``:
  glue roles replaced by their values, captions under the figures), not the executed
  notebook Sphinx copies to ``_sources/``; the link has a ``download`` attribute, so
  a click saves the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

STYLE_NAME = "author_year_round"
BIBLIOGRAPHY_STYLE = "ampbook"  # the References page: "Last, F." names, by author
NOTEBOOKS = "_static/notebooks"  # the reader's copies, inside the staged book


def _register_style() -> None:
    from sphinxcontrib.bibtex.plugin import register_plugin
    from sphinxcontrib.bibtex.style.referencing import BracketStyle
    from sphinxcontrib.bibtex.style.referencing.author_year import (
        AuthorYearReferenceStyle,
    )

    def round_brackets():
        return BracketStyle(left="(", right=")", sep="; ")

    @dataclass
    class AuthorYearRound(AuthorYearReferenceStyle):
        bracket_parenthetical: BracketStyle = field(default_factory=round_brackets)
        bracket_textual: BracketStyle = field(default_factory=round_brackets)
        bracket_author: BracketStyle = field(default_factory=round_brackets)
        bracket_label: BracketStyle = field(default_factory=round_brackets)
        bracket_year: BracketStyle = field(default_factory=round_brackets)

    register_plugin(
        "sphinxcontrib.bibtex.style.referencing", STYLE_NAME, AuthorYearRound
    )

    import pybtex.plugin
    from pybtex.style.formatting.plain import Style as Plain
    from pybtex.style.sorting.author_year_title import SortingStyle

    class AuthorSort(SortingStyle):
        """By author, year and title; an author in braces (``{PyTorch}``, a body
        rather than a person) sorts by its name, not after every "z"."""

        def person_key(self, person):
            return super().person_key(person).replace("{", "").replace("}", "")

    class ByAuthor(Plain):
        """pybtex's plain style with names written surname first, sorted by author,
        as an author-year reference list reads."""

        default_name_style = "lastfirst"
        default_sorting_style = "ampbook_author"

    pybtex.plugin.register_plugin("pybtex.style.sorting", "ampbook_author", AuthorSort)
    pybtex.plugin.register_plugin(
        "pybtex.style.formatting", BIBLIOGRAPHY_STYLE, ByAuthor
    )


def reader_copy_path(srcdir: Path | str, pagename: str) -> str | None:
    """The reader's copy of page ``pagename`` relative to the book's root, when the
    build staged one (chapters only)."""
    if not pagename.startswith("chapters/"):
        return None
    rel = f"{NOTEBOOKS}/{pagename.split('/', 1)[1]}.ipynb"
    return rel if (Path(srcdir) / rel).is_file() else None


def _reader_download(app, pagename, templatename, context, doctree):
    """Point the page's ``.ipynb`` download at the reader's copy; drop the link to
    the raw source (the executed notebook, with its glue roles unresolved)."""
    rel = reader_copy_path(app.srcdir, pagename)
    if rel is None:
        return
    url = context["pathto"](rel, 1)
    for group in context.get("header_buttons", []):
        if group.get("label") != "download-buttons":
            continue
        kept = []
        for button in group.get("buttons", []):
            if button.get("label") in (
                "download-notebook-button",
                "download-source-button",
            ):
                continue
            kept.append(button)
        kept.insert(
            0,
            {
                "type": "link",
                "url": url,
                "text": ".ipynb",
                "icon": "fas fa-code",
                "tooltip": "Download the notebook (reader's copy: numbers in the "
                "text, captions under the figures)",
                "label": "download-notebook-button",
            },
        )
        group["buttons"] = kept


def _download_attribute(app, exception):
    """Give each page's link to its reader's copy a ``download`` attribute (the theme's
    link buttons have no way to set one), so that a click saves the notebook rather
    than opening its JSON in a new tab."""
    if exception is not None or app.builder.format != "html":
        return
    import re

    outdir = Path(app.outdir)
    for page in sorted((outdir / "chapters").glob("*.html")):
        html = page.read_text(encoding="utf-8")
        link = re.compile(
            r'<a href="(?P<href>(?:\.\./)*'
            + re.escape(NOTEBOOKS)
            + r'/(?P<name>[^"/]+\.ipynb))" target="_blank"'
        )
        new = link.sub(r'<a href="\g<href>" download="\g<name>"', html)
        if new != html:
            page.write_text(new, encoding="utf-8")


def setup(app):
    _register_style()
    # after sphinx-book-theme's add_header_buttons (priority 501)
    app.connect("html-page-context", _reader_download, priority=600)
    app.connect("build-finished", _download_attribute)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
