"""Stops: Ctrl-C, SIGTERM and SIGHUP in an ``ampbook`` command.

SIGTERM is Ctrl-C (``Terminated`` is a ``KeyboardInterrupt``), so every cleanup written
for Ctrl-C runs for it too; a stop inside an import is held back until the import has
finished. A command stops once: a second stop is not raised inside the first one's
cleanup, and the exit status is the first stop's. ``install`` covers the start-up
imports before ``main`` runs; ``end_process`` ends the process with the command's
status; ``ampbook.core.cli.command`` wraps every ``main`` in these. Standard library
only: the module is loaded before torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

from ampbook.core.errors import EXIT_SETTINGS, EXIT_SIGINT, EXIT_SIGTERM, say
from ampbook.core.terminal import plain_text_errors


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's ``KeyboardInterrupt`` would be (exit 143)."""


_state = {"signal": None, "held": None, "raised": False}
# held: a stop held back during an import; raised: a stop was raised in the command
_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: terminal closed
_RETRY_S = 0.05  # how soon a stop held back during an import is tried again


def _in_frozen(frame) -> bool:
    """Whether the main thread is inside an import (a C extension's initialisation
    that called back into Python, where an exception can abort the process), or in a
    frozen standard-library module that C code called back into (``<frozen abc>``:
    an exception raised there can come out as a ``SystemError``)."""
    top = frame
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib._bootstrap") or (
            frame is top and name.startswith("<frozen ")
        ):
            return True
        frame = frame.f_back
    return False


def _held_back(signum, frame) -> bool:
    """A stop that lands in ``_in_frozen`` code is not raised there: the signal is
    sent again shortly after, as a real signal (a blocking call the import was
    followed by is interrupted), until the main thread is out of it."""
    if not _in_frozen(frame):
        _state["held"] = None
        return False
    _state["held"] = signum
    main = threading.main_thread().ident
    timer = threading.Timer(_RETRY_S, signal.pthread_kill, args=(main, signum))
    timer.daemon = True
    timer.start()
    return True


def _on_stop(signum, frame):
    """SIGINT raises ``KeyboardInterrupt``; SIGTERM and SIGHUP raise ``Terminated``."""
    if _state["raised"]:
        return  # the command is stopping already: it stops once
    interrupt = signum == signal.SIGINT
    _state["signal"] = signal.SIGINT if interrupt else signal.SIGTERM
    if not _held_back(signum, frame):
        _state["raised"] = True
        raise KeyboardInterrupt() if interrupt else Terminated()


def record_stop(signum: int) -> None:
    """A command's own stop handler saw ``signum``: the exit status follows it."""
    _state["signal"] = signum


def begin() -> None:
    """A command starts: no stop seen or raised yet."""
    _state.update(signal=None, raised=False)


def start_up_stop_pending() -> bool:
    """Whether a stop came during the start-up imports (and an import swallowed it)."""
    return _state["signal"] is not None


def take_held() -> bool:
    """Whether a stop held back during an import is still pending (it is taken)."""
    held, _state["held"] = _state["held"], None
    return held is not None


def start_up_stop_text() -> str:
    how = signal_name()
    return f"interrupted ({how}) while starting up; nothing was started or written"


def _end_start_up(err: BaseException | None = None) -> None:
    """A stop before ``main`` runs: one line, and the process ends with 130/143."""
    say(start_up_stop_text())
    flush()
    os._exit(stop_code(err))


def _on_start_up_stop(signum, frame):
    """Before ``main`` runs nothing was started: a stop ends the process at once."""
    if signum != signal.SIGINT:
        _state["signal"] = signal.SIGTERM
    elif _state["signal"] is None:
        _state["signal"] = signal.SIGINT
    _end_start_up()


def flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def terminated() -> bool:
    """Whether the last stop signal this process received was SIGTERM."""
    return _state["signal"] == signal.SIGTERM


def stop_code(err: BaseException | None = None) -> int:
    """130 after Ctrl-C, 143 after SIGTERM."""
    return EXIT_SIGTERM if isinstance(err, Terminated) or terminated() else EXIT_SIGINT


def signal_name() -> str:
    return "SIGTERM" if terminated() else "Ctrl-C"


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals():
    """SIGTERM raises ``Terminated``, SIGINT ``KeyboardInterrupt``, for the block."""
    with kept_handlers():
        if _main_thread():
            _on_stops(_on_stop)
        yield


_KEPT = (*_STOPS, signal.SIGQUIT, signal.SIGPIPE, signal.SIGALRM)


@contextlib.contextmanager
def kept_handlers():
    """Whatever a command installs while it runs (signal handlers, ``sys.excepthook``)
    is undone when it returns or raises: a command called as a function (a test, a
    notebook) leaves its caller's process as it found it."""
    if not _main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in _KEPT}
    hook = sys.excepthook
    try:
        yield
    finally:
        for s, h in old.items():
            if h is not None:  # None: set outside Python, cannot be put back
                with contextlib.suppress(ValueError, OSError, TypeError):
                    signal.signal(s, h)
        sys.excepthook = hook


# --- start-up: before main() runs -----------------------------------------------------


COMMAND_ROOTS = ("ampbook", "booktools")  # names only: nothing here imports booktools


def is_command(argv: list[str] | None = None, roots=COMMAND_ROOTS) -> bool:
    """Whether this process is ``python -m ROOT...`` for one of ``roots``."""
    argv = list(getattr(sys, "orig_argv", []) if argv is None else argv)
    skip = False
    for i, arg in enumerate(argv[1:], 1):
        if skip:
            skip = False
        elif arg == "-m":
            return i + 1 < len(argv) and argv[i + 1].split(".")[0] in roots
        elif arg.startswith("-m"):  # -mampbook.train
            return arg[2:].split(".")[0] in roots
        elif arg in ("-X", "-W"):
            skip = True  # their value follows
        elif not arg.startswith("-"):
            return False
    return False


def _excepthook(kind, value, tb):
    if issubclass(kind, KeyboardInterrupt):
        _end_start_up(value)
    _previous_hook(kind, value, tb)


_previous_hook = sys.excepthook


def hold_further_stops() -> None:
    """While a stopped command ends (its message, the exit), a second stop is ignored:
    the exit status stays 130/143, no death by the signal mid-message."""
    if _main_thread():
        _on_stops(lambda signum, frame: None)


def _on_stops(handler) -> None:
    for stop in _STOPS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(stop, handler)


@contextlib.contextmanager
def stops_blocked_after(outermost: bool):
    """Once the outermost command's ``main`` has its outcome, stop signals wait (the
    kernel keeps them pending) while the handlers are put back, until ``end_process``
    delivers them to a handler that ends with that outcome."""
    try:
        yield
    finally:
        if outermost and is_command() and _main_thread():
            with contextlib.suppress(ValueError, OSError):
                signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)


def end_process(code: int) -> None:
    """End the process with the command's status: the atexit callbacks run, then it
    exits without the interpreter's finalization (over half a second with torch
    loaded, default handlers back). A stop meanwhile ends it at once, same status."""
    if not _main_thread():
        return

    def end(signum, frame):
        flush()
        os._exit(code)

    _on_stops(end)
    with contextlib.suppress(ValueError, OSError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)  # a pending one ends it here
    with contextlib.suppress(Exception):
        threading._shutdown()  # non-daemon threads finish, as at a normal exit
    import atexit

    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    flush()
    os._exit(code)


# --- the process's start: streams, locale, address space ------------------------------

STREAM_ENCODING = "AMPBOOK_STREAM_ENCODING"  # the locale's, for stdout and stderr
# `import torch` (2.14.1, this project's venv, CPU wheel with its CUDA libraries) maps
# 3,258,068 kB of address space (VmPeak, measured 2026-12-05); under `ulimit -v
# 3000000` it aborts, under 1500000 it is an ImportError. The check keeps a margin.
TORCH_ADDRESS_SPACE = int(3.5 * 2**30)


def _is_utf8(encoding: str | None) -> bool:
    return (encoding or "").lower().replace("-", "").replace("_", "") == "utf8"


def _restart_in_utf8_mode() -> None:
    """Under a locale that is not UTF-8 (``LC_ALL=C``) the command starts again in
    Python's UTF-8 mode, so every file it writes is UTF-8 (a report's en dash was a
    UnicodeEncodeError); stdout and stderr keep the locale's (``_text_streams``)."""
    if sys.flags.utf8_mode or STREAM_ENCODING in os.environ:
        return  # already restarted once (or asked for UTF-8 mode)
    try:
        import _locale

        encoding = _locale.getencoding()
    except (ImportError, AttributeError):
        return
    argv = getattr(sys, "orig_argv", [])
    if _is_utf8(encoding) or not argv:
        return
    os.environ[STREAM_ENCODING] = encoding
    os.environ["PYTHONUTF8"] = "1"  # its child processes too
    with contextlib.suppress(OSError):
        os.execv(sys.executable, [sys.executable, "-X", "utf8", *argv[1:]])


def _text_streams() -> None:
    """A character the terminal's encoding cannot hold (an en dash under LANG=C) is
    written in ASCII (``plain_text_errors``); after a restart in UTF-8 mode, stdout
    and stderr get the locale's encoding back (unless ``PYTHONIOENCODING`` chose)."""
    chosen = os.environ.get("PYTHONIOENCODING")
    locale_encoding = None if chosen else os.environ.get(STREAM_ENCODING)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if locale_encoding:
                stream.reconfigure(encoding=locale_encoding, errors=plain_text_errors())
            elif not _is_utf8(getattr(stream, "encoding", None)):
                stream.reconfigure(errors=plain_text_errors())


def closed_streams() -> None:
    """Started with stderr closed (``2>&-``): its lines go to /dev/null. With stdout
    closed (``>&-``): refused, exit 2 (what it prints would be lost)."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 -- for the process's life
    if sys.stdout is None:
        say(
            "standard output is closed (>&-): run the command with its output going "
            "somewhere (a terminal, a file, > /dev/null)"
        )
        sys.exit(EXIT_SETTINGS)


def address_space_problem(limit: int | None = None) -> str | None:
    """An error naming the address-space limit when it is too small to load torch."""
    import resource

    if limit is None:
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY or limit >= TORCH_ADDRESS_SPACE:
        return None
    return (
        f"the address-space limit (ulimit -v {limit // 1024}) is "
        f"{limit / 2**30:.1f} GiB; loading torch takes about "
        f"{TORCH_ADDRESS_SPACE / 2**30:.1f} GiB of it: raise it "
        "(ulimit -v unlimited) and run the command again"
    )


def _start_up_checks() -> None:
    """Before any torch import: closed streams, the locale, the address space."""
    closed_streams()
    _restart_in_utf8_mode()
    argv = getattr(sys, "orig_argv", [])
    if "-h" in argv or "--help" in argv:
        return  # the help needs no torch
    problem = address_space_problem()
    if problem:
        say(problem)
        sys.exit(EXIT_SETTINGS)


def install() -> None:
    """For a process started as an ``ampbook`` command, after the start-up checks (one
    ``error:`` line and exit 2): a stop before ``main`` catches it ends the process
    with one line and 130/143 instead of a traceback."""
    _start_up_checks()
    _text_streams()
    if not _main_thread():
        return
    defaults = {
        signal.SIGTERM: signal.SIG_DFL,
        signal.SIGINT: signal.default_int_handler,
        signal.SIGHUP: signal.SIG_DFL,
    }
    with contextlib.suppress(ValueError, OSError):
        for stop, default in defaults.items():
            if signal.getsignal(stop) in (default, None):
                signal.signal(stop, _on_start_up_stop)
    sys.excepthook = _excepthook
