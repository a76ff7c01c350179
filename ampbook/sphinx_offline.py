"""Sphinx extension: serve MathJax 3 from the built book itself, so math renders with no
network (a reader opens the HTML from disk, maybe offline).

MathJax's files come from the ``sphinx-mathjax-offline`` distribution (a pip dependency that
ships MathJax 3's ``es5`` bundle); this extension copies them to ``_static/mathjax`` after a
successful build and points ``mathjax_path`` there."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sphinx.errors import ExtensionError
from sphinx.util.fileutil import copy_asset

MATHJAX_ENTRY = "mathjax/tex-chtml.js"


def mathjax_source() -> Path:
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(
            "MathJax for offline use is missing: pip install sphinx-mathjax-offline"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax"
    if not (path / "tex-chtml.js").exists():
        raise ExtensionError(f"MathJax files not found in {path}")
    return path


def _copy(app, exc):
    if exc is None and app.builder.format == "html":
        copy_asset(str(mathjax_source()), str(Path(app.outdir) / "_static" / "mathjax"))


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    """sphinx-thebe, loaded by Jupyter Book, registers its inline config script twice, which
    throws a JavaScript error on every page; keep one copy of each script."""
    seen, kept = set(), []
    for script in context.get("script_files", []):
        key = (
            str(getattr(script, "filename", script) or ""),
            getattr(script, "attributes", {}).get("body"),
        )
        if key not in seen:
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


def setup(app):
    mathjax_source()  # fail early, with the fix in the message
    app.config.mathjax_path = MATHJAX_ENTRY
    app.connect("build-finished", _copy)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
