"""``--help`` of every command: it answers at once, without importing torch,
torchvision or matplotlib (seconds of start-up), and every option says what it does
and, where it has one, its default (``ampbook.core.cli.HelpFormatter``)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest
from _cli import COMMANDS, commands

from ampbook.core import cli
from ampbook.core.paths import REPO_ROOT

HEAVY = ("torch", "torchvision", "matplotlib")


def run_help(argv: tuple[str, ...], *extra: str, columns: int = 80):
    """``python -X importtime -m ARGV --help``: (exit status, stdout, the top-level
    packages imported)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), COLUMNS=str(columns))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", *argv, "--help", *extra],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    imported = set()
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", line)
        if m:
            imported.add(m.group(1).split(".")[0])
    return done.returncode, done.stdout, imported


def undocumented(text: str) -> list[str]:
    """The options and arguments of a help text that have no help after them."""
    missing, section = [], None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line and not line[0].isspace():
            section = line[:-1] if line.endswith(":") else None
            continue
        if section not in ("options", "positional arguments") or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent > 6:
            continue  # the help of the line above, wrapped or on its own line
        own = re.match(r"\s*\S.*?\s{2,}\S", line)
        after = lines[i + 1] if i + 1 < len(lines) else ""
        below = after.strip() and len(after) - len(after.lstrip()) > indent + 2
        if not own and not below:
            missing.append(line.strip())
    return missing


@pytest.mark.parametrize("argv", commands())
def test_help_is_light_and_every_option_says_what_it_does(argv):
    code, out, imported = run_help(argv)
    assert code == 0, out
    assert out.startswith("usage: python -m "), out[:200]
    heavy = sorted(set(HEAVY) & imported)
    assert not heavy, f"{' '.join(argv)} --help imported {', '.join(heavy)}"
    assert not undocumented(out), undocumented(out)


@pytest.mark.parametrize(
    "argv",
    [pytest.param(argv, id=" ".join(argv)) for argv, why in COMMANDS if why is None],
)
def test_help_fits_80_columns(argv):
    code, out, _ = run_help(argv)
    wide = [line for line in out.splitlines() if len(line) > 80]
    assert code == 0 and not wide, wide


def test_undocumented_finds_an_option_without_help():
    parser = cli.ArgumentParser(prog="x", formatter_class=cli.HelpFormatter)
    parser.add_argument("--said", default=3, help="what it is")
    parser.add_argument("--silent", default=4)
    parser.add_argument("--a-very-long-option-name-indeed", help="help below it")
    parser.add_argument("where", nargs="?")
    assert set(undocumented(parser.format_help())) == {"--silent SILENT", "where"}


def test_every_command_is_in_the_list():
    """A new ``python -m ampbook...`` entry point (or ``bench`` subcommand) is added
    to ``tests/_cli.py``'s ``COMMANDS``."""
    import test_cli  # imports torch: only here

    from ampbook import bench

    listed = {argv for argv, _ in COMMANDS}
    subs = {module: sub for sub, module in bench.COMMANDS.items()}
    for module in test_cli._commands():
        want = ("ampbook.bench", subs[module]) if module in subs else (module,)
        assert want in listed, want
    for name in bench.COMMANDS:
        assert ("ampbook.bench", name) in listed, name
        assert bench.SUMMARIES[name]


def test_bench_lists_its_benchmarks_with_a_line_each():
    code, out, imported = run_help(("ampbook.bench",))
    assert code == 0 and not imported & {
        "ampbook.chapters.ch7.rungs",
        "ampbook.chapters.ch7.ladder_run",
        *HEAVY,
    }
    from ampbook import bench

    for name, summary in bench.SUMMARIES.items():
        assert re.search(rf"^  {name}\s+{re.escape(summary[:30])}", out, re.M), name


# --- the formatter --------------------------------------------------------------------


def _help(*arguments: tuple[tuple, dict], width: int = 80) -> str:
    parser = cli.ArgumentParser(
        prog="python -m x",
        formatter_class=lambda prog: cli.HelpFormatter(prog, width=width),
        description="First paragraph, wrapped.\n\nSecond one:\n  a  one\n  b  two",
    )
    for args, kwargs in arguments:
        parser.add_argument(*args, **kwargs)
    return parser.format_help()


def test_help_formatter_shows_defaults_that_are_not_already_said():
    text = _help(
        (("--rounds",), dict(type=int, default=5, help="rounds")),
        (("--json",), dict(default=None, help="also write here")),
        (("--quick",), dict(action="store_true", help="fewer sizes")),
        (("--size",), dict(default=None, help="side (default: 128 on a CPU)")),
        (("--list",), dict(default=("a", "b"), help="names")),
        (("--name",), dict(default="", help="a name")),
        (("--pct",), dict(default="50%", help="share")),
    )
    assert "rounds (default: 5)" in text
    assert "also write here\n" in text and "None" not in text
    assert "fewer sizes\n" in text and "False" not in text
    assert text.count("default") == 4, text  # rounds, size (once), list, pct
    assert "names (default: a,b)" in text and "share (default: 50%)" in text


def test_help_formatter_keeps_paragraphs_and_wraps_at_the_width():
    long = "a word " * 30
    text = _help((("--long",), dict(default=1, help=long)), width=50)
    assert max(map(len, text.splitlines())) <= 50, text
    assert "First paragraph, wrapped.\n\nSecond one:\n  a  one\n  b  two" in text


def test_help_formatter_follows_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    parser = cli.ArgumentParser(prog="x", formatter_class=cli.HelpFormatter)
    parser.add_argument("--long", help="word " * 40)
    assert max(map(len, parser.format_help().splitlines())) <= 60
    monkeypatch.setenv("COLUMNS", "500")
    wide = parser.format_help()
    assert max(map(len, wide.splitlines())) <= cli.HELP_WIDTH_MAX


def test_data_command_parser_documents_every_option():
    """``ampbook.data`` holds ``python -m ampbook.data``'s parser
    apart from the loader (which imports torch)."""
    from ampbook.data import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subs.choices) == {"synthesize", "info"}
    for sub in (parser, *subs.choices.values()):
        text = sub.format_help()
        assert not undocumented(text), (sub.prog, undocumented(text))
    args = parser.parse_args(
        ["synthesize", "--root", "r", "--train", "2", "--val", "1"]
    )
    assert (args.height, args.width, args.seed) == (1024, 2048, 0)
