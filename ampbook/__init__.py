"""AMP Book's library: the tested code behind the notebooks.

Modules: ``env`` (environment report), ``formats`` (floating-point formats), ``timing``
and ``devices`` (measuring and peak figures), ``model`` (ERFNet), ``data`` (Cityscapes
and the synthetic set), ``metrics``, ``evaluate``, ``train`` (the training runner),
``memory`` (saved-for-backward bytes), ``gradstats`` and ``autocast_trace`` (chapter 4's
instruments), ``costmodel`` (per-layer roofline model), ``bench`` (benchmarks),
``plots``, ``run`` (notebook runner), ``book`` and ``bookcheck`` (building and checking
the HTML book). See DEVELOPING.md.
"""

__version__ = "0.1.0"
