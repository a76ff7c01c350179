"""What a command prints on a terminal: text an output's encoding cannot hold in
ASCII (``plain_text_errors``), a Markdown report wrapped at the terminal's width
(``terminal_text``) and progress lines while a command waits (``Progress``).

Only the standard library is imported here: the module is loaded before torch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys

# Characters the commands print, written in ASCII where the output's encoding (a C or
# POSIX locale, PYTHONIOENCODING=ascii) cannot hold them (``plain_text_errors``).
_ASCII = {
    "\u2013": "-",  # en dash
    "\u2014": "-",  # em dash
    "\u2212": "-",  # minus sign
    "\u2192": "->",
    "\u00b1": "+/-",
    "\u00b5": "u",  # micro sign
    "\u03bc": "u",  # Greek mu
    "\u00d7": "x",
    "\u2248": "~",
    "\u2264": "<=",
    "\u2265": ">=",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u2026": "...",
    "\u00b2": "^2",
    "\u00a0": " ",
}
PLAIN_ERRORS = "ampbook-plain"


def _plain(err: UnicodeError):
    """Codec error handler ``ampbook-plain``: the ASCII spelling of a character the
    stream cannot encode (an en dash as ``-``, ``µs`` as ``us``), else ``?``."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start : err.end]
    return "".join(_ASCII.get(ch, "?") for ch in bad), err.end


def plain_text_errors() -> str:
    """The name of the error handler that writes what an output's encoding cannot
    hold in ASCII (``_plain``), registered on first use; ``_text_streams`` sets it on
    stdout and stderr."""
    import codecs

    try:
        codecs.lookup_error(PLAIN_ERRORS)
    except LookupError:
        codecs.register_error(PLAIN_ERRORS, _plain)
    return PLAIN_ERRORS


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells: split at the bars that are not escaped (``\\|``
    is a bar inside a cell), each stripped."""
    import re

    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def _rule(line: str) -> bool:
    """A table's header rule (``|---|:--:|``)."""
    cells = _cells(line)
    return bool(cells) and all(c and set(c) <= set("-: ") for c in cells)


def _numeric(cell: str) -> bool:
    text = cell.replace(",", "").rstrip("x%").strip()
    try:
        float(text)
    except ValueError:
        return False
    return True


# A column is wrapped no narrower than its longest word, and than this or its widest
# body cell, whichever is less; a table whose columns cannot all get that much is
# listed.
_MIN_COLUMN = 8
_GAP = "  "


def _column_widths(rows: list[list[str]], width: int, header: bool) -> list[int] | None:
    """Each column's width for a grid of ``width`` columns: the widest cell where
    they all fit; else the columns narrowed, widest first, first down to their widest
    body cell (only the header wraps), then down to ``_MIN_COLUMN`` or their longest
    word (their cells wrap); None when even that does not fit."""
    n = max(len(r) for r in rows)
    body = rows[1:] if header else rows

    def widest(rs, i, part=len):
        return max((part(r[i]) for r in rs if i < len(r)), default=0)

    natural = [widest(rows, i) for i in range(n)]
    words = [
        widest(rows, i, lambda c: max((len(w) for w in c.split()), default=0))
        for i in range(n)
    ]
    floor = [max(words[i], min(widest(body, i), _MIN_COLUMN)) for i in range(n)]
    room = width - len(_GAP) * (n - 1)
    if sum(floor) > room:
        return None
    widths = list(natural)
    for stop in ([max(words[i], widest(body, i)) for i in range(n)], floor):
        while sum(widths) > room:  # narrow the widest column that can still give
            can = [j for j in range(n) if widths[j] > stop[j]]
            if not can:
                break
            widths[max(can, key=widths.__getitem__)] -= 1
    return widths


def table_text(lines: list[str], width: int) -> list[str]:
    """A Markdown table as a terminal shows it in ``width`` columns: aligned columns
    (numbers to the right) under a rule when it fits, cells wrapped within their
    columns when narrowing the widest columns makes it fit (a blank line between
    rows), or a list where that is much shorter or nothing else fits: each row's first
    cell, then its other cells as ``header: value``, short ones sharing a line and a
    long one wrapped on lines of its own. No line is wider than ``width`` unless one
    word is."""
    import textwrap

    header = _cells(lines[0]) if len(lines) > 1 and _rule(lines[1]) else None
    rows = ([header] if header else []) + [
        _cells(x) for x in (lines[2:] if header else lines)
    ]
    n = max(len(r) for r in rows)
    rows = [r + [""] * (n - len(r)) for r in rows]
    body = rows[1:] if header else rows
    listed = []
    for r in body:
        listed += textwrap.wrap(r[0] or "–", width, initial_indent="- ",
                                subsequent_indent="  ")  # fmt: skip
        line = ""  # short fields share a line, "; " apart
        for i in range(1, n):
            name = header[i] if header and header[i] else f"column {i + 1}"
            field = f"{name}: {r[i] or '–'}"
            if line and len(line) + 2 + len(field) <= width:
                line += "; " + field
                continue
            if line:
                listed.append(line)
            line = "  " + field
            if len(line) > width:  # a long field wraps on lines of its own
                listed += textwrap.wrap(field, width, initial_indent="  ",
                                        subsequent_indent="      ")  # fmt: skip
                line = ""
        if line:
            listed.append(line)
    widths = _column_widths(rows, width, header is not None)
    if widths is None:
        return listed
    right = [
        all(_numeric(r[i]) or r[i] in ("", "–", "-") for r in body)
        and any(_numeric(r[i]) for r in body)
        for i in range(n)
    ]
    wrapped = any(len(c) > w for r in body for c, w in zip(r, widths))

    def grid(row: list[str]) -> list[str]:
        parts = [
            textwrap.wrap(c, w, break_on_hyphens=False) or [""]
            for c, w in zip(row, widths)
        ]
        out = []
        for k in range(max(len(p) for p in parts)):
            cells = []
            for i, p in enumerate(parts):
                text = p[k] if k < len(p) else ""
                cells.append(text.rjust(widths[i]) if right[i] else
                             text.ljust(widths[i]))  # fmt: skip
            out.append(_GAP.join(cells).rstrip())
        return out

    out = []
    if header:
        out += grid(header)
        out.append(_GAP.join("-" * w for w in widths))
    for k, r in enumerate(body):
        if wrapped and k:
            out.append("")
        out += grid(r)
    # columns are easier to scan: the list only where it is four fifths or less
    return out if 4 * len(out) <= 5 * len(listed) else listed


def terminal_text(markdown: str, width: int | None = None) -> str:
    """A Markdown report as a terminal shows it: escapes read as their characters, each
    paragraph and list item wrapped at ``width`` (default: the terminal's,
    ``shutil.get_terminal_size``; 80 when stdout is not one), a list item's lines
    indented under its text; tables (lines starting with ``|``) as aligned columns, or
    wrapped or listed where they would be wider (``table_text``); headings and blank
    lines as they are. A ``--markdown`` file keeps the Markdown, unwrapped."""
    import re
    import string
    import textwrap

    width = width or shutil.get_terminal_size((80, 24)).columns
    width = max(40, width - 1)  # one column spare: a full line would wrap twice
    # A Markdown escape (``\_``, ``\<``) shows as its character; a table keeps ``\|``
    # until its cells are split.
    escaped = re.compile("\\\\([" + re.escape(string.punctuation) + "])")
    out: list[str] = []
    table: list[str] = []
    for line in markdown.split("\n") + [""]:
        if line.lstrip().startswith("|"):
            table.append(escaped.sub(lambda m: m[0] if m[1] == "|" else m[1], line))
            continue
        if table:
            out += table_text(table, width)
            table = []
        line = escaped.sub(r"\1", line)
        stripped = line.lstrip()
        if len(line) <= width or not stripped or stripped[0] == "#":
            out.append(line)
            continue
        lead = line[: len(line) - len(stripped)]
        bullet = next((m for m in ("- ", "* ", "1. ") if stripped.startswith(m)), "")
        out.append(
            textwrap.fill(
                stripped[len(bullet) :],
                width,
                initial_indent=lead + bullet,
                subsequent_indent=lead + " " * len(bullet),
                break_on_hyphens=False,
                break_long_words=False,
            )
        )
    return "\n".join(out[:-1])


def time_left_text(spent_s: float, done: int, total: int) -> str:
    """``"about 12 s left"`` after ``done`` of ``total`` equal parts took
    ``spent_s``: the mean part times the parts left (minutes past 100 s)."""
    if done <= 0 or done >= total:
        return ""
    return f"about {duration_text(spent_s / done * (total - done))} left"


def duration_text(seconds: float) -> str:
    """``"12 s"``, or ``"3 min"`` from 100 s on."""
    return f"{seconds / 60:.0f} min" if seconds >= 100 else f"{seconds:.0f} s"


class Progress:
    """Progress lines on stderr while a command waits (a load, a trace, timed
    rounds): ``progress(text)`` prints ``NAME: text``; ``progress.count(what, done,
    total)`` prints ``NAME: what: 3 of 10, about 12 s left`` from the time since
    ``start()`` (or the first count). Silent where stderr is not a terminal (a piped
    or captured run), unless ``on`` says otherwise. ``transient``: each line replaces
    the one before on the terminal (cut to its width), and ``clear()`` erases it
    before the command prints its report there: the report starts at the top of the
    screen, not under a column of progress lines."""

    def __init__(
        self, name: str, on: bool | None = None, stream=None, transient: bool = False
    ):
        self.name = name
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", lambda: False)
        try:
            self.on = bool(isatty()) if on is None else bool(on)
        except (OSError, ValueError):
            self.on = False
        self.transient = transient
        self._shown = False  # a transient line is on the screen
        self._start: float | None = None

    def __call__(self, text: str) -> None:
        if not self.on:
            return
        with contextlib.suppress(OSError, ValueError):
            line = f"{self.name}: {text}"
            if self.transient:
                cols = shutil.get_terminal_size((80, 24)).columns
                self.stream.write(f"\r\x1b[K{line[: max(20, cols - 1)]}")
                self.stream.flush()
                self._shown = True
            else:
                print(line, file=self.stream, flush=True)

    def clear(self) -> None:
        """Erase a transient line (nothing otherwise)."""
        if self._shown:
            with contextlib.suppress(OSError, ValueError):
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self._shown = False

    def start(self) -> None:
        """Start the clock of the next ``count``s."""
        import time

        self._start = time.monotonic()

    def count(self, what: str, done: int, total: int, unit: str = "") -> None:
        """``what: [unit ]done of total[, about N s left]``."""
        import time

        if self._start is None:
            self.start()
        left = time_left_text(time.monotonic() - self._start, done, total)
        self(
            f"{what}: {unit + ' ' if unit else ''}{done} of {total}"
            + (f", {left}" if left else "")
        )


@contextlib.contextmanager
def quiet_stderr_fd():
    """File descriptor 2 sent to /dev/null for the block: torch.profiler's kineto
    writes a line to it at every start and stop (and, on a CPU, that it found no GPU),
    from C++, past Python's ``sys.stderr`` (the ladder's ``profile_steps`` and chapter
    7's profiler cell)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
