"""The error layer's words: exit statuses, the two known failures, the one ``error:``
line (``say``) and what a known failure means to a user. Standard library only."""

from __future__ import annotations

import contextlib
import errno
import os
import sys

NAME_MAX = 255  # bytes in one path component (Linux, macOS)
PATH_MAX = 4096
EXIT_SETTINGS = 2
EXIT_STOPPED = 1
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
EXIT_PIPE = 141  # stdout's reader went away (``| head``): 128 + SIGPIPE, as cat exits


class UserError(Exception):
    """Bad settings, inputs or environment, found before any work (exit 2)."""

    exit_code = EXIT_SETTINGS


class Stopped(Exception):
    """A run that started and stopped; the message says what it kept (exit 1)."""

    exit_code = EXIT_STOPPED


def say(message: str) -> None:
    """``message`` as the one ``error:`` line, wrapped where stderr is a terminal."""
    text = " ".join(str(message).split("\n")).strip()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(error_text(text, _stderr_width()) + "\n")
        sys.stderr.flush()


def error_text(text: str, width: int | None = None) -> str:
    """``error: TEXT`` wrapped at ``width`` columns (None: not); no word or path is
    broken, so joining the lines gives the message back."""
    line = f"error: {text}"
    if not width or len(line) <= width:
        return line
    import textwrap

    whole = dict(break_long_words=False, break_on_hyphens=False)
    return "\n".join(
        textwrap.wrap(line, max(width, 40), subsequent_indent="  ", **whole)
    )


def _stderr_width() -> int | None:
    with contextlib.suppress(AttributeError, ValueError):
        if sys.stderr.isatty():
            import shutil

            return shutil.get_terminal_size((80, 24)).columns
    return None


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type's name when empty)."""
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


def describe(err: BaseException) -> tuple[int, str] | None:
    if isinstance(err, (UserError, Stopped)):
        return err.exit_code, str(err)
    if isinstance(err, OSError):
        return os_error(err)
    if isinstance(err, MemoryError):
        return EXIT_STOPPED, "out of memory: use smaller sizes"
    if isinstance(err, ImportError) and "failed to map segment" in str(err):
        return EXIT_SETTINGS, (
            f"{first_line(err)[:160]}: a library could not be loaded, probably for "
            "an address-space limit (ulimit -v): raise it (ulimit -v unlimited)"
        )
    if isinstance(err, RuntimeError):
        text = str(err)
        if "can't allocate memory" in text or "not enough memory" in text:
            # torch's allocator: "[enforce fail at alloc_cpu.cpp:127] err == 0.
            # DefaultCPUAllocator: can't allocate memory: you tried to allocate ..."
            what = first_line(err)
            what = what[max(0, what.find("DefaultCPUAllocator")) :]
            return EXIT_STOPPED, (
                f"out of memory ({what[:160]}): use smaller sizes or raise the "
                "memory limit (ulimit -v)"
            )
        if "PytorchStreamWriter failed" in text or "file write failed" in text:
            return EXIT_STOPPED, (
                "could not write a file (the disk is probably full): free some "
                "space or choose another folder"
            )
        if type(err).__name__ == "OutOfMemoryError":
            return EXIT_STOPPED, (
                f"out of GPU memory ({text.splitlines()[0][:160]}): use a smaller "
                "batch or size"
            )
    return None


_ADVICE = {
    errno.ENOSPC: "free some space or choose another folder",
    errno.EDQUOT: "free some space or choose another folder",
    errno.EROFS: "the file system is read-only: choose a writable folder",
    errno.EACCES: "choose a folder you may write to",
    errno.EPERM: "choose a folder you may write to",
    errno.ENAMETOOLONG: f"use names of at most {NAME_MAX} bytes per folder or file",
    errno.ENOTDIR: "a file is in the way of that path: choose another path",
    errno.EISDIR: "that path is a folder: give a file name",
    errno.ENOENT: "check the path",
    errno.EEXIST: "choose another path",
}


def os_error(err: OSError) -> tuple[int, str]:
    """(exit status, message) of an ``OSError``: a full disk or an I/O error stops a
    run (1); a path that cannot be used is a setting (2)."""
    what = f"{err.filename}: " if err.filename else ""
    why = err.strerror or str(err) or type(err).__name__
    advice = _ADVICE.get(err.errno)
    if not err.filename and _stdout_fails(err.errno):  # ``> /dev/full``
        what = "standard output: "
        advice = "send the output to another file, or to the terminal"
    code = EXIT_STOPPED if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO) else 2
    return code, f"{what}{why}" + (f"; {advice}" if advice else "")


def _stdout_fails(code: int | None) -> bool:
    """Whether writing stdout fails with errno ``code`` now (``> /dev/full``)."""
    if code is None:
        return False
    try:
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), b"")
    except OSError as err:
        return err.errno == code
    except (ValueError, AttributeError):
        return False
    return False
