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


# Every command a user runs, as the argv after ``python -m``; the reason is set where
# the command's --help is not light yet (an xfail until it is).
COMMANDS: tuple[tuple[tuple[str, ...], str | None], ...] = (
    (("ampbook.bench",), None),
    (("ampbook.bench", "loader"), None),
    (("ampbook.bench", "step"), None),
    (("ampbook.bench", "ladder"), None),
    (("ampbook.bench", "matmul"), None),
    (("booktools.doctor_bench",), None),
    (("ampbook.evaluate",), None),
    (("booktools.gpucheck",), None),
    (("ampbook.data",), None),
    (("ampbook.data", "synthesize"), None),
    (("ampbook.data", "info"), None),
    (("ampbook.train",), None),
    (("ampbook.doctor",), None),
    (("ampbook.calibration",), None),
    (("booktools.run",), None),
    (("booktools.book",), None),
    (("booktools.bookcheck",), None),
    (("booktools.nbstats",), None),
)


def commands() -> list:
    """``COMMANDS`` as pytest parameters, each with its id and xfail mark."""
    import pytest

    return [
        pytest.param(
            argv,
            id=" ".join(argv),
            marks=[pytest.mark.xfail(strict=False, reason=why)] if why else [],
        )
        for argv, why in COMMANDS
    ]
