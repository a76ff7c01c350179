"""AMP Book's library: the tested code behind the notebooks.

Modules: ``env`` (environment report), ``precision`` (precisions, dtype names, backend
flags), ``formats`` (floating-point formats), ``timing`` and ``devices`` (measuring and
peak figures), ``model`` (ERFNet), ``data`` (Cityscapes) and ``synthetic`` (the
synthetic set), ``metrics``, ``evaluate``, ``train`` (the training runner, a package),
``memory`` (saved-for-backward bytes), ``gradstats``, ``loss_scaling`` and
``autocast_trace`` (chapter 4's instruments), ``costmodel`` (per-layer roofline model),
``bench`` (benchmarks), ``plots``. ``ampbook.build`` runs the notebooks and builds and
checks the HTML book. See DEVELOPING.md.
"""

__version__ = "0.1.0"


def _as_command() -> None:
    """A process started as ``python -m ampbook...``: SIGTERM is Ctrl-C, and either
    one during the start-up imports ends it with one line (``ampbook.cli.install``)."""
    import sys

    argv = getattr(sys, "orig_argv", [])
    if "-m" in argv[1:] or any(a.startswith("-mampbook") for a in argv[1:]):
        from ampbook import cli

        if cli.is_command(argv):
            cli.install()


_as_command()
