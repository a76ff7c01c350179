"""The command line's arguments: ``ArgumentParser``, the ``--help`` layout every
command shares and the argparse types of numbers. Standard library only."""

from __future__ import annotations

import argparse
import math
import re
import shutil
import sys
import textwrap

from ampbook.core.errors import EXIT_SETTINGS, UserError, say

SEED_MAX = 2**32 - 1  # numpy's legacy seeding takes 0 .. 2**32 - 1


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a bad argument reported as one ``error:`` line and exit 2; an
    unknown option is named first, with the nearest known ("did you mean --model?")."""

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def _options(self) -> set[str]:
        names = set(self._option_string_actions)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    names |= set(sub._option_string_actions)
        return names

    def unknown_option(self) -> str | None:
        """The first option given that no parser here knows, with the nearest."""
        from ampbook.core.words import nearest

        known = self._options()
        for token in getattr(self, "_given", []):
            if token == "--":
                break
            name = str(token).split("=", 1)[0]
            if not name.startswith("-") or name == "-" or name in known:
                continue
            if self._negative_number_matcher.match(name):
                continue
            if self.allow_abbrev and any(k.startswith(name) for k in known):
                continue  # an abbreviation argparse resolves (or calls ambiguous)
            near = nearest(name, sorted(k for k in known if k.startswith("--")), 1)
            hint = f"; did you mean {near[0]}?" if near else ""
            return f"unrecognized option {name}{hint}"
        return None

    def error(self, message: str):
        if message.startswith(("the following arguments", "unrecognized arguments")):
            message = self.unknown_option() or message
        say(f"{message} ({self.prog} --help lists the options)")
        sys.exit(EXIT_SETTINGS)


# --- numbers --------------------------------------------------------------------------


def _number(text: str, kind) -> float | int:
    try:
        value = kind(text)
    except (TypeError, ValueError):
        name = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {name}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def is_positive_int(value) -> bool:
    """The library's one positive-integer rule: an ``int`` of 1 or more, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _bounded(name: str, kind, ok, rule: str):

    def parse(text: str):
        value = _number(text, kind)
        if not ok(value):
            got = value if kind is int else text
            raise argparse.ArgumentTypeError(f"must be {rule}, got {got}")
        return value

    parse.__name__ = parse.__qualname__ = name
    return parse


positive_int = _bounded("positive_int", int, is_positive_int, "at least 1")
nonnegative_int = _bounded("nonnegative_int", int, lambda v: v >= 0, "0 or more")
positive_float = _bounded("positive_float", float, lambda v: v > 0, "more than 0")
nonnegative_float = _bounded("nonnegative_float", float, lambda v: v >= 0, "0 or more")
_SEEDS = f"between 0 and {SEED_MAX} (numpy's seeds)"
seed = _bounded("seed", int, lambda v: 0 <= v <= SEED_MAX, _SEEDS)


def check_seed(value, what: str = "seed") -> int:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or not 0 <= value <= SEED_MAX:
        raise UserError(
            f"{what} must be an integer from 0 to {SEED_MAX} (numpy's seeds), got "
            f"{value!r}"
        )
    return value


# --- --help ---------------------------------------------------------------------------

HELP_WIDTH_MAX = 100  # columns of --help on a wide terminal


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` as every command prints it: each option's default after its help,
    wrapped at the terminal's width (at most ``HELP_WIDTH_MAX``); a description or
    epilog keeps its paragraphs and its indented lines."""

    def __init__(self, prog, indent_increment=2, max_help_position=30, width=None):
        if width is None:
            columns = shutil.get_terminal_size().columns
            width = max(min(columns, HELP_WIDTH_MAX) - 2, 40)
        super().__init__(prog, indent_increment, max_help_position, width)

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or default is None
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or action.nargs == 0  # a flag (store_true, count...)
            or (isinstance(default, (str, list, tuple)) and not default)
        ):
            return text
        if isinstance(default, (list, tuple)):
            shown = ",".join(str(v) for v in default).replace("%", "%%")
        else:
            shown = "%(default)s"
        return f"{text} (default: {shown})" if text else f"default: {shown}"

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text, width, indent):
        out = []
        for block in textwrap.dedent(text).strip("\n").split("\n\n"):
            lines = block.split("\n")
            if any(line[:1].isspace() for line in lines):  # kept as lines
                out += ["\n".join(self._fill_line(ln, width, indent) for ln in lines)]
                continue
            para = " ".join(block.split())
            filled = textwrap.fill(para, width - len(indent), break_on_hyphens=False)
            out.append(textwrap.indent(filled, indent))
        return "\n\n".join(out)

    @staticmethod
    def _fill_line(line, width, indent):
        """An indented line kept as a line, wrapped under its second column."""
        lead = re.match(r"\s*(\S+\s{2,})?", line)
        hang = " " * lead.end() if lead.group(1) else " " * (lead.end() + 2)
        first = line[: len(line) - len(line.lstrip())]
        indents = dict(initial_indent=indent + first, subsequent_indent=indent + hang)
        return textwrap.fill(line.strip(), width, break_on_hyphens=False, **indents)
