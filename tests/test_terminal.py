"""``cli.terminal_text``: a Markdown report as a terminal shows it."""

from __future__ import annotations

import io
import sys

from _cli import one_error

from ampbook.core import cli
from ampbook.core.page import md_escape


def test_escapes_read_as_their_characters_in_prose_and_in_table_cells():
    name = "_to_copy <x> [y] a|b"
    prose = cli.terminal_text(f"op {md_escape(name)} left in fp32", width=200)
    assert prose == f"op {name} left in fp32"
    row = cli.terminal_text(f"| {md_escape(name)} | 4.7% |", width=200)
    assert row == f"{name}  4.7%"  # an escaped bar is the cell's, not a column's


def test_prose_and_list_items_wrap_at_the_width():
    item = "- H200 SXM: " + "word " * 30
    out = cli.terminal_text(f"{item}\n\nafter", width=60).splitlines()
    wrapped = out[: out.index("")]
    assert len(wrapped) > 1 and all(len(line) <= 59 for line in wrapped)
    assert all(line.startswith("  ") for line in wrapped[1:])  # under the item's text


TABLE = "\n".join(
    [
        "| GPU | try | gain (x) | detail |",
        "|---|---|---|---|",
        "| RTX 3070 Laptop | train with AMP (amp-bf16) | 2.72 | 2.40x to 3.10x from 4 "
        "references |",
        "| H200 SXM | keep fp32: AMP (amp-fp16) predicted 0.61x, a loss | – | 0.52x "
        "to 0.70x |",
    ]
)


def test_a_table_that_fits_is_aligned_columns_without_markdown():
    out = cli.terminal_text(TABLE, width=200).splitlines()
    assert not any("|" in line for line in out)  # no Markdown on a terminal
    head, rule, first, second = out
    assert head.split() == ["GPU", "try", "gain", "(x)", "detail"]
    assert set(rule) == {"-", " "}
    # columns start where their headers do; numbers are right-aligned
    assert first.index("train with AMP") == head.index("try")
    assert first.index("2.72") + 4 == head.index("(x)") + 3
    assert second.index("–") + 1 == first.index("2.72") + 4


def test_a_table_too_wide_wraps_its_widest_cells_then_becomes_a_list():
    out = cli.terminal_text(TABLE, width=90).splitlines()
    assert all(len(line) <= 89 for line in out), out
    assert not any("|" in line for line in out)
    text = " ".join(" ".join(out).split())
    for cell in ("RTX 3070 Laptop", "train with AMP (amp-bf16)", "0.52x to 0.70x"):
        assert all(word in text for word in cell.split())
    assert out[0].startswith("GPU ") and out[1].strip() == "(x)"  # the header wraps
    assert "" in out and out[3].startswith("RTX 3070 Laptop  train")  # rows apart
    listed = cli.terminal_text(TABLE, width=40).splitlines()
    assert all(len(line) <= 39 for line in listed), listed
    assert listed[:5] == [
        "- RTX 3070 Laptop",
        "  try: train with AMP (amp-bf16)",
        "  gain (x): 2.72",
        "  detail: 2.40x to 3.10x from 4",
        "      references",
    ]
    assert "- H200 SXM" in listed
    assert listed[-1] == "  gain (x): –; detail: 0.52x to 0.70x"  # short ones share


def test_a_transient_progress_line_is_replaced_and_erased():
    import io

    stream = io.StringIO()
    tell = cli.Progress("doctor", True, stream, transient=True)
    tell("loading torch")
    tell("tracing")
    tell.clear()
    tell.clear()  # once is enough
    assert stream.getvalue() == (
        "\r\x1b[Kdoctor: loading torch\r\x1b[Kdoctor: tracing\r\x1b[K"
    )
    kept = io.StringIO()
    lines = cli.Progress("doctor", True, kept)
    lines("a")
    lines.clear()
    assert kept.getvalue() == "doctor: a\n"


def test_a_reader_gone_from_stdout_ends_the_command_quietly(monkeypatch, capsys):
    """``python -m ampbook.calibration | head -1``: once head has exited, a write
    raises BrokenPipeError; the command exits 141 (as cat does) without an error
    line, and a broken pipe that is not stdout's is still an error."""
    import io
    import os

    @cli.command("python -m ampbook.x")
    def main(argv):
        print("row\n" * 10, flush=True)
        return 0

    read, write = os.pipe()
    os.close(read)  # the reader has gone
    with os.fdopen(write, "w") as pipe, capsys.disabled():
        monkeypatch.setattr("sys.stdout", pipe)
        err = io.StringIO()
        monkeypatch.setattr("sys.stderr", err)
        assert main([]) == cli.EXIT_PIPE
        assert err.getvalue() == ""

    @cli.command("python -m ampbook.y")
    def other(argv):
        raise BrokenPipeError(32, "Broken pipe")  # a child's pipe, stdout fine

    assert other([]) == 2
    assert "Broken pipe" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_error_lines_wrap_at_the_terminal_and_read_back_whole(monkeypatch):
    """An ``error:`` line longer than the terminal (a 429-column GPU list) wraps at
    its width, continuation lines indented by two spaces and never starting with
    ``error:``; to a file or a pipe it stays one line. ``one_error`` reads it whole."""
    message = "--gpus: unknown GPU 'h300'; the table knows " + ", ".join(
        f"gpu-{n} (GPU {n})" for n in range(40)
    )
    monkeypatch.setenv("COLUMNS", "80")
    for stream, wrapped in ((_Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stream)
        cli.say(message)
        lines = stream.getvalue().splitlines()
        assert (len(lines) > 1) == wrapped
        if wrapped:
            assert all(len(line) <= 80 for line in lines)
            assert all(line.startswith("  ") and line[2] != " " for line in lines[1:])
        assert one_error(stream.getvalue(), "gpu-0 (GPU 0)", "gpu-39 (GPU 39)") == (
            f"error: {message}"
        )
    assert cli.error_text("short", 80) == "error: short"
