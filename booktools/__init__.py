"""The book's own tooling, apart from the library the chapters teach with.

Nothing in ``ampbook`` or the notebooks imports this package (tests/test_layers.py).
The book: ``run`` executes the notebooks with papermill (``python -m booktools.run``;
``kernels``: its kernels),
``book`` builds the HTML from those executions (``python -m booktools.book``),
``bookcheck`` opens the built pages in headless Chromium
(``python -m booktools.bookcheck``), ``nbstats`` measures the chapters, ``reader`` and
``runalong`` make the reader's and the run-along copies, ``sphinx_scripts`` and
``sphinx_book`` are Sphinx extensions the build loads. The GPU check:
``python -m booktools.gpucheck`` (``gpuplan``, ``gpulease``, ``gpuwheels``, and
``layers``, the per-module profiles only the check records). ``doctor_bench`` times the
doctor's full report (``python -m booktools.doctor_bench``), ``bench_step`` the training
runner's step against a bare loop (``python -m booktools.bench_step``).
"""
