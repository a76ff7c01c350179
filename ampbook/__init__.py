"""AMP Book's library: the tested code behind the notebooks. A stack of subpackages,
bottom first (``core``, ``segmentation``, ``measure``, ``numerics``, ``results``,
``train``, ``predict``), then ``chapters`` (each chapter's own code) and the commands;
imports point down the stack only (DEVELOPING.md, "Layout").
"""

__version__ = "0.1.0"


def _as_command() -> None:
    """A process started as ``python -m ampbook...``: the start-up checks, and a stop
    during the start-up imports ends it with one line (``ampbook.core.stops``)."""
    from ampbook.core import stops

    if stops.is_command(roots=("ampbook",)):
        stops.install()


_as_command()
