"""Stops: Ctrl-C, SIGTERM and SIGHUP in an ``ampbook`` command.

SIGTERM is handled exactly as Ctrl-C (``Terminated`` is a ``KeyboardInterrupt``), so
every cleanup written for Ctrl-C runs for it too, at any moment; a stop inside an
import is held back until the import has finished. A command stops once: while the
cleanup written for the first stop runs (a record marked interrupted, half-written files
removed, workers joined), a second Ctrl-C or SIGTERM is not raised inside it, and the
exit status is the first stop's. ``install`` (called by ``ampbook/__init__.py`` when
the process is an ``ampbook`` command) covers the start-up imports before ``main``
runs, and ``end_process`` ends the process with the command's status.
``ampbook.core.cli``'s ``command`` wraps every ``main`` in these.

Only the standard library is imported here: the module is loaded before torch.
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
    """SIGTERM, raised where Ctrl-C's ``KeyboardInterrupt`` would be: every cleanup
    written for Ctrl-C runs for it too. The exit status is 143 instead of 130."""


_state = {"signal": None, "held": None, "raised": False}
# held: a stop held back during an import; raised: a stop was raised in the command


_STOPS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP")
    if hasattr(signal, name)
)


_IMPORT_FILES = (
    "<frozen importlib._bootstrap>",
    "<frozen importlib._bootstrap_external>",
)
_RETRY_S = 0.05  # how soon a stop held back during an import is tried again


def _in_import(frame) -> bool:
    """Whether the main thread is inside an ``import`` (its module's code, or a C
    extension's initialisation that called back into Python)."""
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_FILES:
            return True
        frame = frame.f_back
    return False


def _in_frozen(frame) -> bool:
    """Whether the main thread is in a frozen standard-library module (``<frozen
    abc>``'s ``__instancecheck__``...), which C code calls back into: an exception
    raised there can come out of that C code as a ``SystemError`` ("returned a result
    with an exception set") instead of the stop itself (numpy reading a ``Path``)."""
    return frame is not None and frame.f_code.co_filename.startswith("<frozen ")


def _held_back(signum, frame) -> bool:
    """A stop that lands inside an import is not raised there: an exception thrown
    through a C extension's initialisation (torch's pybind11 code) can abort the process
    (SIGABRT, a C++ ``terminate``) instead of unwinding. Nor is one that lands in a
    frozen standard-library module (``_in_frozen``). The signal is delivered again
    shortly after, until the main thread is out of both, and raised then."""
    if not (_in_import(frame) or _in_frozen(frame)):
        _state["held"] = None
        return False
    _state["held"] = signum
    timer = threading.Timer(_RETRY_S, _deliver_again, args=(signum,))
    timer.daemon = True
    timer.start()
    return True


def _deliver_again(signum: int) -> None:
    """Send ``signum`` to the main thread again, as a real signal where the platform
    has ``pthread_kill``: a blocking call the import was followed by (a ``sleep``, a
    ``read``) is interrupted and the stop raised at once. ``interrupt_main`` only sets
    a flag, which Python reads when that call returns, seconds or minutes later."""
    if hasattr(signal, "pthread_kill"):
        signal.pthread_kill(threading.main_thread().ident, signum)
    else:  # pragma: no cover - Windows
        import _thread

        _thread.interrupt_main(signum)


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
    """A command's own stop handler saw ``signum``: the exit status follows it (143
    for SIGTERM, 130 for Ctrl-C)."""
    _state["signal"] = signum


def begin() -> None:
    """A command starts: no stop seen or raised yet."""
    _state["signal"] = None
    _state["raised"] = False


def start_up_stop_pending() -> bool:
    """Whether a stop came during the start-up imports (and an import swallowed it)."""
    return _state["signal"] is not None


def take_held() -> bool:
    """Whether a stop held back during an import is still pending (``main`` ended
    before it was raised); it is taken, not raised again."""
    held = _state["held"] is not None
    _state["held"] = None
    return held


def start_up_stop_text() -> str:
    how = signal_name()
    return f"interrupted ({how}) while starting up; nothing was started or written"


def _end_start_up(err: BaseException | None = None) -> None:
    """A stop before ``main`` runs: one line, and the process ends with 130/143."""
    say(start_up_stop_text())
    flush()
    os._exit(stop_code(err))


def _on_start_up_stop(signum, frame):
    """Before ``main`` runs nothing was started or written: a stop ends the process at
    once, with one line (not an exception raised inside an import)."""
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
    """SIGTERM raises ``Terminated`` and SIGINT ``KeyboardInterrupt`` (recording which
    came) for the duration; the previous handlers come back after."""
    if not _main_thread():
        yield
        return
    old = {s: signal.signal(s, _on_stop) for s in _STOPS}  # SIGHUP: terminal closed
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


_KEPT = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGPIPE", "SIGALRM")
    if hasattr(signal, name)
)


@contextlib.contextmanager
def kept_handlers():
    """Whatever a command installs while it runs (signal handlers, ``sys.excepthook``)
    is undone when it returns or raises: a command called as a function (a test, a
    notebook, another command) leaves its caller's process as it found it."""
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


def is_command(argv: list[str] | None = None) -> bool:
    """Whether this process was started as ``python -m ampbook...`` (or as one of the
    book's tools, ``python -m booktools...``)."""
    argv = list(getattr(sys, "orig_argv", []) if argv is None else argv)
    skip = False
    for i, arg in enumerate(argv[1:], 1):
        if skip:
            skip = False
        elif arg == "-m":
            return i + 1 < len(argv) and argv[i + 1].split(".")[0] in COMMAND_ROOTS
        elif arg.startswith("-m"):  # -mampbook.train
            return arg[2:].split(".")[0] in COMMAND_ROOTS
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
    """While a stopped command ends (its message, the exit), a second Ctrl-C,
    SIGTERM or SIGHUP is recorded, not raised: the exit status stays 130/143 rather
    than the process dying of the signal mid-message (the handlers come back with
    ``kept_handlers``)."""
    if not _main_thread():
        return

    def hold(signum, frame):
        pass

    _on_stops(hold)


def _on_stops(handler) -> None:
    """``handler`` for Ctrl-C, SIGTERM and SIGHUP."""
    for stop in _STOPS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(stop, handler)


@contextlib.contextmanager
def stops_blocked_after(outermost: bool):
    """Once the outermost command's ``main`` has its outcome, stop signals wait (the
    kernel keeps them pending) while the handlers are put back, until ``_end_process``
    delivers them to a handler that ends with that outcome: no window in which a late
    stop meets a start-up handler or the default action."""
    try:
        yield
    finally:
        if outermost and is_command() and _main_thread():
            with contextlib.suppress(ValueError, OSError):
                signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)


def end_process(code: int) -> None:
    """The command has its exit status: end the process with it. What is left is the
    teardown: the atexit callbacks run here (torch's import modules), then the process
    exits without the interpreter's module-by-module finalization (over half a second
    with torch loaded, and with the default signal handlers back in place). A Ctrl-C,
    SIGTERM or SIGHUP arriving meanwhile ends it at once with the same status: no
    traceback from a callback it interrupted, no death by the signal after the
    command's own ``error:`` line."""
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
    """Under a locale that is not UTF-8 (``LC_ALL=C`` with ``PYTHONUTF8=0``) the
    command starts again in Python's UTF-8 mode (``-X utf8``), so that every file it
    writes is UTF-8 whatever the locale (a report's en dash was a UnicodeEncodeError);
    its stdout and stderr keep the locale's encoding (``_text_streams``)."""
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
    """A terminal whose locale cannot encode a character the commands print (an en
    dash under LANG=C) gets its ASCII spelling (``plain_text_errors``), not a
    UnicodeEncodeError; after a restart in UTF-8 mode, stdout and stderr are given
    the locale's encoding back (unless ``PYTHONIOENCODING`` chose one)."""
    locale_encoding = os.environ.get(STREAM_ENCODING)
    if os.environ.get("PYTHONIOENCODING"):
        locale_encoding = None
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if locale_encoding and hasattr(stream, "reconfigure"):
            with contextlib.suppress(Exception):
                stream.reconfigure(encoding=locale_encoding, errors=plain_text_errors())
        elif encoding != "utf8" and hasattr(stream, "reconfigure"):
            with contextlib.suppress(Exception):
                stream.reconfigure(errors=plain_text_errors())


def closed_streams() -> None:
    """Started with stderr closed (``2>&-``): its lines go to /dev/null, no crash.
    With stdout closed (``>&-``): refused, exit 2 (what it prints would be lost).
    Run by ``install`` for every ``ampbook`` command; ``booktools.run`` runs it too,
    before a kernel (which dies on a closed stdout) is started."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 -- for the process's life
    if sys.stdout is None:
        say(
            "standard output is closed (>&-): run the command with its output going "
            "somewhere (a terminal, a file, > /dev/null)"
        )
        sys.exit(EXIT_SETTINGS)


def address_space_problem(limit: int | None = None) -> str | None:
    """The address-space limit (``ulimit -v``) when it is too small to load torch,
    as an error naming it; None when there is none or it is large enough."""
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


def install(early: list | None = None) -> None:
    """For a process started as an ``ampbook`` command: SIGTERM is Ctrl-C from now on,
    and either of them before ``main`` catches it (during the start-up imports) ends
    the process with one line and 130/143 instead of a traceback. ``early``: the
    signals ``ampbook/__init__``'s first handler saw. Before that, the start-up
    checks (``_start_up_checks``: closed streams, a locale that is not UTF-8, an
    address-space limit too small for torch: one ``error:`` line and exit 2)."""
    _start_up_checks()
    _text_streams()
    if not _main_thread():
        return
    if early:
        _state["signal"] = signal.SIGTERM
    with contextlib.suppress(ValueError, OSError):
        for name, default in (
            ("SIGTERM", signal.SIG_DFL),
            ("SIGINT", signal.default_int_handler),
            ("SIGHUP", signal.SIG_DFL),
        ):
            if not hasattr(signal, name):
                continue
            current = signal.getsignal(getattr(signal, name))
            if current in (default, None) or getattr(current, "__name__", "") == (
                "early_stop"
            ):
                signal.signal(getattr(signal, name), _on_start_up_stop)
    sys.excepthook = _excepthook
