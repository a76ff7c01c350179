"""Building the book, apart from the library the chapters teach with.

``run`` executes the notebooks with papermill (``python -m ampbook.build.run``),
``book`` builds the HTML from those executions (``python -m ampbook.build.book``),
``bookcheck`` opens the built pages in headless Chromium
(``python -m ampbook.build.bookcheck``), ``nbstats`` measures the chapters (code-cell
sizes, computed displays thrown away) and ``sphinx_scripts`` is a Sphinx extension the
book's build loads.
"""

import sys

# jsonschema (under nbformat, which jupytext and papermill import) imports the optional
# ``rfc3987_syntax`` when it is installed (jupyter-events' extras pull it in), and that
# package builds a Lark grammar as it loads: 2.8 s of every build process's start
# here, for the "iri" string format, which no notebook schema uses. The build's
# processes leave it out (``import rfc3987_syntax`` then fails; jsonschema goes on).
sys.modules.setdefault("rfc3987_syntax", None)
