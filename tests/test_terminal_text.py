"""``cli.terminal_text``: a Markdown report as a terminal shows it."""

from __future__ import annotations

from ampbook.core import cli
from ampbook.core.page import md_escape


def test_escapes_read_as_their_characters_and_a_table_keeps_its_bars():
    name = "_to_copy <x> [y] a|b"
    prose = cli.terminal_text(f"op {md_escape(name)} left in fp32", width=200)
    assert prose == f"op {name} left in fp32"
    row = cli.terminal_text(f"| {md_escape(name)} | 4.7% |", width=200)
    assert row == "| _to_copy <x> [y] a\\|b | 4.7% |"


def test_prose_and_list_items_wrap_at_the_width_tables_do_not():
    item = "- H200 SXM: " + "word " * 30
    table = "| " + " | ".join(["cell"] * 30) + " |"
    out = cli.terminal_text(f"{item}\n\n{table}", width=60).splitlines()
    wrapped = out[: out.index("")]
    assert len(wrapped) > 1 and all(len(line) <= 59 for line in wrapped)
    assert all(line.startswith("  ") for line in wrapped[1:])  # under the item's text
    assert out[-1] == table


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
