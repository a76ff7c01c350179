"""Helpers shared by the command-line tests."""

from __future__ import annotations


def one_error(err: str, *words: str) -> str:
    """The one `error:` line of stderr (its continuation lines, indented by two
    spaces on a terminal, joined to it), checked to contain ``words``; no
    traceback."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("error:")]
    assert len(starts) == 1, err
    message = lines[starts[0]]
    for line in lines[starts[0] + 1 :]:
        if not line.startswith("  ") or line.startswith("   "):
            break
        message += " " + line[2:]
    for w in words:
        assert w in message, (w, message)
    return message


# Every command a user runs, as the argv after ``python -m``; the reason is set where
# the command's --help is not light yet (an xfail until it is).
COMMANDS: tuple[tuple[tuple[str, ...], str | None], ...] = (
    (("ampbook.bench",), None),
    (("ampbook.bench", "loader"), None),
    (("booktools.bench_step",), None),
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
