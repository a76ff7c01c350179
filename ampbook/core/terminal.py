"""What a command prints on a terminal: ASCII for what an output's encoding cannot hold,
a Markdown report laid out for the terminal's width, progress lines while a command
waits. Standard library only: the module is loaded before torch."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import string
import sys
import textwrap
import time

# Characters the commands print, in ASCII for an output that cannot hold them (LANG=C)
_ASCII = {
    **dict.fromkeys("\u2013\u2014\u2212", "-"),  # en dash, em dash, minus sign
    **dict.fromkeys("\u00b5\u03bc", "u"),  # micro sign, Greek mu
    **dict.fromkeys("\u2018\u2019", "'"),
    **dict.fromkeys("\u201c\u201d", '"'),
    **dict(zip("\u00d7\u2248\u00a0", "x~ ")),  # times, almost equal, no-break space
    "\u2192": "->",
    "\u00b1": "+/-",
    "\u2264": "<=",
    "\u2265": ">=",
    "\u2026": "...",
    "\u00b2": "^2",
}
PLAIN_ERRORS = "ampbook-plain"


def _plain(err: UnicodeError):
    """Codec error handler: the ASCII spelling of what the stream cannot encode."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start : err.end]
    return "".join(_ASCII.get(ch, "?") for ch in bad), err.end


def plain_text_errors() -> str:
    """The name of the ``_plain`` error handler, registered on first use."""
    import codecs

    try:
        codecs.lookup_error(PLAIN_ERRORS)
    except LookupError:
        codecs.register_error(PLAIN_ERRORS, _plain)
    return PLAIN_ERRORS


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells, split at the bars that are not escaped."""
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


# A column is wrapped no narrower than its longest word, nor than this or its widest
# body cell, whichever is less; a table whose columns cannot all get that is listed.
_MIN_COLUMN = 8
_GAP = "  "
_WHOLE_WORDS = dict(break_on_hyphens=False, break_long_words=False)


def _column_widths(rows: list[list[str]], width: int, header: bool) -> list[int] | None:
    """Each column's width in a grid ``width`` wide: the widest cell where all fit; else
    the widest columns narrowed, first to their widest body cell, then to their floor
    (their cells wrap); None when even that does not fit."""
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
    """A Markdown table in ``width`` columns: aligned columns (numbers to the right),
    cells wrapped within them where needed; or, where that is much longer or does not
    fit, a list: each row's first cell, then ``header: value`` fields."""
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
            cells = [
                (str.rjust if right[i] else str.ljust)(p[k] if k < len(p) else "", w)
                for i, (p, w) in enumerate(zip(parts, widths))
            ]
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
    """A Markdown report as a terminal shows it: escapes read, paragraphs and list items
    wrapped at ``width`` (default: the terminal's), tables laid out (``table_text``)."""
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
        indents = dict(
            initial_indent=lead + bullet, subsequent_indent=lead + " " * len(bullet)
        )
        text = stripped[len(bullet) :]
        out.append(textwrap.fill(text, width, **indents, **_WHOLE_WORDS))
    return "\n".join(out[:-1])


def duration_text(seconds: float) -> str:
    """``"12 s"``, or ``"3 min"`` from 100 s on."""
    return f"{seconds / 60:.0f} min" if seconds >= 100 else f"{seconds:.0f} s"


class Progress:
    """Progress lines on stderr while a command waits, ``NAME: text``; silent where
    stderr is not a terminal unless ``on``. ``transient``: each line replaces the one
    before, and ``clear()`` erases it before the report is printed."""

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
        if self._shown:
            with contextlib.suppress(OSError, ValueError):
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self._shown = False

    def start(self) -> None:
        self._start = time.monotonic()

    def count(self, what: str, done: int, total: int, unit: str = "") -> None:
        """``what: [unit ]done of total[, about N s left]``."""
        if self._start is None:
            self.start()
        left = ""
        if 0 < done < total:
            each = (time.monotonic() - self._start) / done
            left = f", about {duration_text(each * (total - done))} left"
        self(f"{what}: {unit + ' ' if unit else ''}{done} of {total}{left}")


@contextlib.contextmanager
def quiet_stderr_fd():
    """File descriptor 2 sent to /dev/null for the block: torch.profiler's kineto writes
    to it from C++ at every start and stop, past Python's ``sys.stderr``."""
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
