"""Helpers shared by the command-line tests."""

from __future__ import annotations


def one_error(err: str, *words: str) -> str:
    """The one `error:` line of stderr, checked to contain ``words``; no traceback."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]
