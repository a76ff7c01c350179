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


def terminal_text(markdown: str, width: int | None = None) -> str:
    """A Markdown report as a terminal shows it: escapes read as their characters, each
    paragraph and list item wrapped at ``width`` (default: the terminal's,
    ``shutil.get_terminal_size``; 80 when stdout is not one), a list item's lines
    indented under its text; tables (lines starting with ``|``), headings and blank
    lines as they are. A ``--markdown`` file keeps the unwrapped text."""
    import re
    import string
    import textwrap

    width = width or shutil.get_terminal_size((80, 24)).columns
    width = max(40, width - 1)  # one column spare: a full line would wrap twice
    # A Markdown escape (``\_``, ``\<``) shows as its character; a table keeps ``\|``.
    escaped = re.compile("\\\\([" + re.escape(string.punctuation) + "])")
    out = []
    for line in markdown.split("\n"):
        if line.lstrip().startswith("|"):
            line = escaped.sub(lambda m: m[0] if m[1] == "|" else m[1], line)
        else:
            line = escaped.sub(r"\1", line)
        stripped = line.lstrip()
        if len(line) <= width or not stripped or stripped[0] in "|#":
            out.append(line)
            continue
        lead = line[: len(line) - len(stripped)]
        bullet = ""
        for mark in ("- ", "* ", "1. "):
            if stripped.startswith(mark):
                bullet = mark
                break
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
    return "\n".join(out)


def time_left_text(spent_s: float, done: int, total: int) -> str:
    """``"about 12 s left"`` after ``done`` of ``total`` equal parts took
    ``spent_s``: the mean part times the parts left (minutes past 100 s)."""
    if done <= 0 or done >= total:
        return ""
    left = spent_s / done * (total - done)
    return (
        f"about {left / 60:.0f} min left" if left >= 100 else f"about {left:.0f} s left"
    )


class Progress:
    """Progress lines on stderr while a command waits (a load, a trace, timed
    rounds): ``progress(text)`` prints ``NAME: text``; ``progress.count(what, done,
    total)`` prints ``NAME: what: 3 of 10, about 12 s left`` from the time since
    ``start()`` (or the first count). Silent where stderr is not a terminal (a piped
    or captured run), unless ``on`` says otherwise."""

    def __init__(self, name: str, on: bool | None = None, stream=None):
        self.name = name
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", lambda: False)
        try:
            self.on = bool(isatty()) if on is None else bool(on)
        except (OSError, ValueError):
            self.on = False
        self._start: float | None = None

    def __call__(self, text: str) -> None:
        if self.on:
            with contextlib.suppress(OSError, ValueError):
                print(f"{self.name}: {text}", file=self.stream, flush=True)

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
