"""Building the book, apart from the library the chapters teach with.

``run`` executes the notebooks with papermill (``python -m ampbook.build.run``),
``book`` builds the HTML from those executions (``python -m ampbook.build.book``),
``bookcheck`` opens the built pages in headless Chromium
(``python -m ampbook.build.bookcheck``), ``nbstats`` measures the chapters (code-cell
sizes, computed displays thrown away) and ``sphinx_scripts`` is a Sphinx extension the
book's build loads.
"""
