"""AMP Book's library: the tested code behind the notebooks.

Modules: ``env`` (environment report), ``formats`` (floating-point formats), ``timing`` and
``devices`` (measuring and peak figures), ``model`` (ERFNet), ``data`` (Cityscapes and the
synthetic set), ``metrics``, ``evaluate``, ``train`` (the training runner), ``bench``
(benchmarks), ``plots``, ``run`` (notebook runner), ``book`` (Jupyter Book build).
"""

__version__ = "0.1.0"
