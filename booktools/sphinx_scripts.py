"""Sphinx extension: one ``<script>`` tag per script on every page.

sphinx-thebe, which Jupyter Book loads even with thebe off, registers its inline
configuration script twice, and the second copy throws a JavaScript error on every page
(``python -m booktools.bookcheck`` fails on page errors). This extension drops the
repeated entries before a page is written.

Math needs nothing from here: the ``sphinx-mathjax-offline`` extension (listed beside
this one in ``book/_config.yml``) copies MathJax 3 into the built book and points
``mathjax_path`` at it, so math renders with no network.
"""

from __future__ import annotations


def _dedupe_scripts(app, pagename, templatename, context, doctree):
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
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
