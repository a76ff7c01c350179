"""The error layer every ``python -m ampbook...`` command shares.

A command's ``main`` is wrapped by ``@command("python -m ampbook.x")``; argparse stays
(``ArgumentParser`` here prints one ``error:`` line instead of a usage block). The
promise to a user, the same for every command:

* a known failure is one ``error:`` line on stderr that names the file or setting and
  what to do, and the exit status says which kind: **2** bad settings, inputs or
  environment (found before any work, nothing changed), **1** a run that started and
  stopped (what it kept is named), **130** Ctrl-C and **143** SIGTERM;
* SIGTERM is handled exactly as Ctrl-C (``Terminated`` is a ``KeyboardInterrupt``), so
  every cleanup written for Ctrl-C runs for it too, at any moment: ``install`` (called
  by ``ampbook/__init__.py`` when the process is an ``ampbook`` command) covers the
  start-up imports before ``main`` runs;
* outputs are checked before any work or deletion (``check_output_file``,
  ``check_output_dir``: long names, files in the way, read-only or missing folders,
  free space where the size is known), and inputs are read only from regular files
  (``check_input_file``: a FIFO or a device would block or never end);
* numbers from the command line are numbers (``positive_int``, ``positive_float``,
  ``seed``...: argparse types that refuse 0, negatives, NaN and inf where they make no
  sense).

Only the standard library is imported here: the module is loaded before torch.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import json
import math
import os
import shutil
import signal
import stat
import sys
import threading
from pathlib import Path
from typing import Callable

NAME_MAX = 255  # bytes in one path component (Linux, macOS)
PATH_MAX = 4096
SEED_MAX = 2**32 - 1  # numpy's legacy seeding takes 0 .. 2**32 - 1
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


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's ``KeyboardInterrupt`` would be: every cleanup
    written for Ctrl-C runs for it too. The exit status is 143 instead of 130."""


_state = {"signal": None, "held": None, "raised": False}
# held: a stop held back during an import; raised: a stop was raised in the command


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


def _held_back(signum, frame) -> bool:
    """A stop that lands inside an import is not raised there: an exception thrown
    through a C extension's initialisation (torch's pybind11 code) can abort the process
    (SIGABRT, a C++ ``terminate``) instead of unwinding. The signal is delivered again
    shortly after, until the import has finished, and raised then."""
    if not _in_import(frame):
        _state["held"] = None
        return False
    _state["held"] = signum
    import _thread

    timer = threading.Timer(_RETRY_S, _thread.interrupt_main, args=(signum,))
    timer.daemon = True
    timer.start()
    return True


def _on_sigterm(signum, frame):
    if _state["raised"]:
        return  # the command is stopping already: see stopping()
    _state["signal"] = signal.SIGTERM
    if not _held_back(signum, frame):
        _state["raised"] = True
        raise Terminated()


def _on_sigint(signum, frame):
    if _state["raised"]:
        return  # the command is stopping already: see stopping()
    _state["signal"] = signal.SIGINT
    if not _held_back(signum, frame):
        _state["raised"] = True
        raise KeyboardInterrupt()


def stopping() -> bool:
    """Whether a stop (Ctrl-C, SIGTERM, SIGHUP) has been raised in the running command.

    A command stops once: after the first stop is raised, the
    cleanup written for it (a results record marked interrupted, half-written files
    removed, loader workers and drawing processes joined) runs to its end, and a second
    Ctrl-C or a SIGTERM meanwhile is not raised inside it (where it would leave the
    cleanup half done, or a traceback from a finalizer it interrupted); the exit
    status is the first stop's, 130 or 143."""
    return bool(_state["raised"])


def _start_up_stop() -> str:
    how = signal_name()
    return f"interrupted ({how}) while starting up; nothing was started or written"


def _end_start_up(err: BaseException | None = None) -> None:
    """A stop before ``main`` runs: one line, and the process ends with 130/143."""
    say(_start_up_stop())
    _flush()
    os._exit(stop_code(err))


def _on_start_up_stop(signum, frame):
    """Before ``main`` runs nothing was started or written: a stop ends the process at
    once, with one line (not an exception raised inside an import)."""
    if signum != signal.SIGINT:
        _state["signal"] = signal.SIGTERM
    elif _state["signal"] is None:
        _state["signal"] = signal.SIGINT
    _end_start_up()


def _flush() -> None:
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
    pairs = [(signal.SIGTERM, _on_sigterm), (signal.SIGINT, _on_sigint)]
    if hasattr(signal, "SIGHUP"):  # the terminal closed: as SIGTERM
        pairs.append((signal.SIGHUP, _on_sigterm))
    old = {s: signal.signal(s, h) for s, h in pairs}
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


def say(message: str) -> None:
    """Print ``message`` as the one ``error:`` line (its lines joined)."""
    text = " ".join(str(message).split("\n")).strip()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"error: {text}\n")
        sys.stderr.flush()


# --- start-up: before main() runs -----------------------------------------------------


def is_command(argv: list[str] | None = None) -> bool:
    """Whether this process was started as ``python -m ampbook...``."""
    argv = list(getattr(sys, "orig_argv", []) if argv is None else argv)
    skip = False
    for i, arg in enumerate(argv[1:], 1):
        if skip:
            skip = False
        elif arg == "-m":
            return i + 1 < len(argv) and argv[i + 1].split(".")[0] == "ampbook"
        elif arg.startswith("-m"):  # -mampbook.train
            return arg[2:].split(".")[0] == "ampbook"
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


class LockBusy(UserError):
    """``hold_lock``: another process holds the lock; ``holder`` says which."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


def hold_lock(path: str | os.PathLike) -> int:
    """An exclusive ``fcntl.flock`` on ``path`` (created), the holder's pid, host and
    time written into it: the file descriptor to keep open while the work runs
    (``release_lock``). The kernel releases it when the process dies, so a killed
    process leaves no stale lock. ``LockBusy`` (naming the holder) when another
    process holds it; ``OSError`` when it cannot be created."""
    import fcntl
    import socket
    from datetime import datetime, timezone

    path = Path(path)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 300).decode(errors="replace").strip()
            os.close(fd)
            raise LockBusy(holder or "unknown process") from None
        try:  # the previous holder may have removed the file between open and flock
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    since = datetime.now(timezone.utc).isoformat(timespec="seconds")
    os.write(
        fd, f"pid {os.getpid()} on {socket.gethostname()} since {since}\n".encode()
    )
    return fd


def release_lock(path: str | os.PathLike, fd: int) -> None:
    with contextlib.suppress(OSError):
        Path(path).unlink()
    with contextlib.suppress(OSError):
        os.close(fd)


def _hold_further_stops() -> None:
    """While a stopped command ends (its message, the exit), a second Ctrl-C,
    SIGTERM or SIGHUP is recorded, not raised: the exit status stays 130/143 rather
    than the process dying of the signal mid-message (the handlers come back with
    ``kept_handlers``)."""
    if not _main_thread():
        return

    def hold(signum, frame):
        pass

    _on_stops(hold)


_STOPS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP")
    if hasattr(signal, name)
)


def _on_stops(handler) -> None:
    """``handler`` for Ctrl-C, SIGTERM and SIGHUP."""
    for stop in _STOPS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(stop, handler)


_depth = [0]  # commands running in this process (one calls another as a function)


@contextlib.contextmanager
def _stops_blocked_after(outermost: bool):
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


def _end_process(code: int) -> None:
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
        _flush()
        os._exit(code)

    _on_stops(end)
    with contextlib.suppress(ValueError, OSError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)  # a pending one ends it here
    with contextlib.suppress(Exception):
        threading._shutdown()  # non-daemon threads finish, as at a normal exit
    import atexit

    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    _flush()
    os._exit(code)


def _text_streams() -> None:
    """A terminal whose locale cannot encode a character the commands print (an en
    dash under LANG=C) gets its ASCII spelling (``plain_text_errors``), not a
    UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            with contextlib.suppress(Exception):
                stream.reconfigure(errors=plain_text_errors())


def install(early: list | None = None) -> None:
    """For a process started as an ``ampbook`` command: SIGTERM is Ctrl-C from now on,
    and either of them before ``main`` catches it (during the start-up imports) ends
    the process with one line and 130/143 instead of a traceback. ``early``: the
    signals ``ampbook/__init__``'s first handler saw."""
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


# --- the wrapper of every main() ------------------------------------------------------


def describe(err: BaseException) -> tuple[int, str] | None:
    """(exit status, message) of a failure every command knows, or None."""
    if isinstance(err, (UserError, Stopped)):
        return err.exit_code, str(err)
    if isinstance(err, OSError):
        return os_error(err)
    if isinstance(err, MemoryError):
        return EXIT_STOPPED, "out of memory: use smaller sizes"
    if isinstance(err, RuntimeError):
        text = str(err)
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
    code = EXIT_STOPPED if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO) else 2
    return code, f"{what}{why}" + (f"; {advice}" if advice else "")


def command(prog: str) -> Callable:
    """Wrap a command's ``main(argv) -> int``: signals as Ctrl-C, a known failure left
    over by ``main`` turned into one ``error:`` line and its exit status, 130 turned
    into 143 when the stop came from SIGTERM."""

    def wrap(main: Callable) -> Callable:
        @functools.wraps(main)
        def run(argv: list[str] | None = None) -> int:
            _depth[0] += 1
            try:
                code = _run(argv)
            finally:
                _depth[0] -= 1
            if _depth[0] == 0 and is_command():
                _end_process(code)
            return code

        def _run(argv: list[str] | None) -> int:
            if _state["signal"] is not None and is_command():
                # A stop during the start-up imports that an import swallowed (a bare
                # ``except:`` in a library): the command does not start.
                say(_start_up_stop())
                return stop_code()
            _state["signal"] = None
            _state["raised"] = False
            with kept_handlers(), signals(), _stops_blocked_after(_depth[0] == 1):
                try:
                    code = main(argv)
                    if _state["held"] is not None:  # main ended before it was raised
                        _state["held"] = None
                        # ...unless its re-delivery reached the command's own handler
                        # (build.run's) and main answered with the stop's status
                        if code not in (EXIT_SIGINT, EXIT_SIGTERM):
                            raise Terminated() if terminated() else KeyboardInterrupt()
                except KeyboardInterrupt as err:
                    _hold_further_stops()  # a second signal: still 130/143
                    say(
                        f"{prog} interrupted ({signal_name()}) before it finished; "
                        "what it had not finished was not written"
                    )
                    if is_command():
                        # The process ends here (main's own cleanup has run): a stop
                        # that landed inside an import (torch's, in main) can leave a
                        # C extension that aborts in the interpreter's teardown
                        # (SIGABRT instead of 130/143).
                        _flush()
                        os._exit(stop_code(err))
                    return stop_code(err)
                except SystemExit as err:  # argparse: --help (0), a bad option (2)
                    code = err.code
                    return code if isinstance(code, int) else (0 if code is None else 2)
                except BaseException as err:  # noqa: BLE001 -- only known ones kept
                    if isinstance(err, BrokenPipeError) and _stdout_reader_gone():
                        return EXIT_PIPE  # quiet: the reader has what it wanted
                    known = describe(err)
                    if known is None:
                        raise
                    say(known[1])
                    return known[0]
            code = 0 if code is None else code
            if code == EXIT_SIGINT and terminated():
                code = EXIT_SIGTERM
            return code

        run.ampbook_command = prog  # tests/test_errors.py finds every command by it
        return run

    return wrap


def _stdout_reader_gone() -> bool:
    """True when stdout is a pipe nobody reads any more (``| head`` has exited); stdout
    then goes to /dev/null, so the interpreter's last flush raises nothing more."""
    import select

    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        gone = any(ev & select.POLLERR for _, ev in poll.poll(0))
    except (OSError, ValueError, AttributeError):
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return gone


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a bad argument reported as one ``error:`` line and exit 2."""

    def error(self, message: str):
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


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def nonnegative_float(text: str) -> float:
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def seed(text: str) -> int:
    value = _number(text, int)
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(
            f"must be between 0 and {SEED_MAX} (numpy's seeds), got {value}"
        )
    return value


def check_seed(value, what: str = "seed") -> int:
    """A seed numpy accepts, else ``UserError`` naming it."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or not 0 <= value <= SEED_MAX:
        raise UserError(
            f"{what} must be an integer from 0 to {SEED_MAX} (numpy's seeds), got "
            f"{value!r}"
        )
    return value


# --- the open-file limit --------------------------------------------------------------


def open_files_in_use() -> int | None:
    """File descriptors this process has open (None where they cannot be counted)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return max(0, len(os.listdir(folder)) - 1)  # less the listing's own
    return None


def check_open_files(needed: int, what: str) -> None:
    """Make sure ``needed`` more files can be open at once (``what`` needs them: loader
    workers, a kernel's sockets), before the work starts. The soft limit is raised
    toward the hard one when that is short (any process may); a hard limit that is
    too low (``ulimit -n 20`` sets both) is ``UserError`` naming the limit and what to
    raise it to, rather than a run that fails later with "Too many open files" in a
    worker thread or a socket library."""
    try:
        import resource
    except ImportError:  # not a POSIX system: no limit to read
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    total = needed + (open_files_in_use() or 0)
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or soft >= total:
        return
    if hard == unlimited or hard >= total:
        target = max(total, 1024) if hard == unlimited else min(hard, max(total, 1024))
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
    raise UserError(
        f"the open-file limit (ulimit -n) is {soft}, and {what} need about {total} "
        f"open files: raise it (ulimit -n {max(total, 1024)} in the shell that runs "
        "the command)"
    )


def too_many_open_files(err: BaseException) -> bool:
    """Whether ``err`` says the process ran out of file descriptors (EMFILE, ENFILE,
    or torch's DataLoader saying so in its own words)."""
    if isinstance(err, OSError) and err.errno in (errno.EMFILE, errno.ENFILE):
        return True
    return isinstance(err, RuntimeError) and "Too many open files" in str(err)


def open_files_advice() -> str:
    """What to do after running out of file descriptors, with the limit named."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return "raise the open-file limit (ulimit -n)"
    return (
        f"the open-file limit (ulimit -n) is {soft}: raise it (ulimit -n "
        f"{max(2 * soft, 1024)}) or use fewer workers"
    )


# --- paths ----------------------------------------------------------------------------


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def check_names(path: Path, what: str) -> None:
    """Each component of ``path`` at most ``NAME_MAX`` bytes, the whole at most
    ``PATH_MAX``."""
    raw = os.fsencode(str(path))
    if len(raw) >= PATH_MAX:
        raise UserError(
            f"{what}: the path is {len(raw)} bytes long, over the system's "
            f"{PATH_MAX}; choose a shorter one"
        )
    for part in Path(path).parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise UserError(
                f"{what}: the name {part[:40]}... is {size} bytes long, over the "
                f"{NAME_MAX} a file system allows; choose a shorter one"
            )


def _writable_folder(folder: Path, what: str) -> None:
    try:
        readonly = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        readonly = False
    if readonly:
        raise UserError(
            f"{what}: {folder} is on a read-only file system; choose a writable folder"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(
            f"{what}: {folder} cannot be written (permission denied); choose a "
            "writable folder"
        )


def _existing_ancestor(path: Path, what: str) -> Path:
    """The nearest folder of ``path`` (itself included) that exists; a file there
    cannot hold the rest."""
    path = Path(os.path.abspath(path))
    for folder in (path, *path.parents):
        try:
            mode = os.stat(folder).st_mode
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            continue
        except OSError as err:
            raise UserError(f"{what}: {folder}: {err.strerror}") from None
        if not stat.S_ISDIR(mode):
            kind = "a file" if stat.S_ISREG(mode) else _kind(mode)
            raise UserError(
                f"{what}: {folder} is {kind}, so {path} cannot be made below it; "
                "choose another path"
            )
        return folder
    return Path(path.anchor)


def check_free_space(folder: Path, size: int, what: str) -> None:
    """Refuse when ``folder``'s file system has less than ``size`` bytes free."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free < size:
        raise UserError(
            f"{what}: {folder} has {free / 2**20:.1f} MiB free but {size / 2**20:.1f} "
            "MiB are needed; free some space or choose another folder"
        )


def file_kind(path: str | os.PathLike) -> str | None:
    """The ``schema`` a JSON file names (``"ampbook.train"``, ``"ampbook.doctor/2"``
    ...), or None for any other file (not JSON, no schema, too large to be one of
    the commands' records, unreadable). Read without following more than a few MiB."""
    p = Path(path)
    try:
        if p.stat().st_size > 32 * 2**20:
            return None
        with open(p, "rb") as f:
            head = f.read(32 * 2**20)
        record = json.loads(head.decode("utf-8"), parse_int=_small_int)
    except (OSError, ValueError, RecursionError):
        return None
    schema = record.get("schema") if isinstance(record, dict) else None
    return schema if isinstance(schema, str) else None


def _small_int(digits: str) -> int:
    if len(digits) > 24:
        raise ValueError("an integer too long for a record")
    return int(digits)


def check_output_file(
    path: str | os.PathLike,
    what: str,
    size: int | None = None,
    create_parents: bool = True,
    *,
    kind: str | None = None,
    overwrite: bool = False,
) -> Path:
    """A file a command will write, checked before any work: a name, not too long, not
    a folder or a special file, its folder existing (or creatable: nothing but folders
    above it) and writable, with ``size`` bytes free when given. ``UserError``
    otherwise.

    No command replaces what another wrote: an existing non-empty file is refused
    unless it is a record of this command's ``kind`` (a JSON file whose ``schema`` is
    ``kind``: an earlier run of the same command) or ``overwrite`` is given (the
    command's ``--overwrite``); the error names the file and what it holds."""
    if path is None or not str(path).strip():
        raise UserError(f"{what} is an empty path; give a file name")
    p = Path(path).expanduser()
    check_names(p, what)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:
        mode = None  # reported below, with the file in the way
    except OSError as err:
        raise UserError(f"{what}: {p}: {err.strerror}") from None
    if mode is not None and not (
        stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)
    ):  # a FIFO or /dev/stdout is written into; a folder or a socket cannot be
        raise UserError(
            f"{what}: {p} is {_kind(mode)}; give the name of a file to write"
        )
    if mode is not None and not stat.S_ISREG(mode):
        return p  # written into as it is (write_text_atomic)
    if mode is not None and not overwrite:
        _check_replaceable(p, what, kind)
    folder = _existing_ancestor(p.parent, what)
    if folder != Path(os.path.abspath(p.parent)) and not create_parents:
        raise UserError(
            f"{what}: cannot write {p}: folder {p.parent} does not exist; create it or "
            "choose another path"
        )
    _writable_folder(folder, what)
    if size:
        check_free_space(folder, size, what)
    return p


def _check_replaceable(p: Path, what: str, kind: str | None) -> None:
    try:
        empty = p.stat().st_size == 0
    except OSError:
        return
    if empty:
        return
    held = file_kind(p)
    if kind is not None and held == kind:
        return  # this command's own record, written by an earlier run
    holds = (
        f"a record of schema {held}" if held else "a file this command did not write"
    )
    wants = f" (this command writes {kind} records)" if kind else ""
    raise UserError(
        f"{what}: {p} exists and holds {holds}{wants}; choose another file, or "
        "pass --overwrite to replace it"
    )


def check_output_dir(
    path: str | os.PathLike, what: str, size: int | None = None
) -> Path:
    """A folder a command will write into, checked before any work (as
    ``check_output_file``)."""
    if path is None or not str(path).strip():
        raise UserError(f"{what} is an empty path; give a folder")
    p = Path(path).expanduser()
    check_names(p, what)
    try:
        mode = os.stat(p).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as err:
        raise UserError(f"{what}: {p}: {err.strerror}") from None
    if mode is not None and not stat.S_ISDIR(mode):
        kind = "a file" if stat.S_ISREG(mode) else _kind(mode)
        raise UserError(f"{what}: {p} is {kind}, not a folder; give a folder")
    folder = _existing_ancestor(p, what)
    _writable_folder(folder, what)
    if size:
        check_free_space(folder, size, what)
    return p


def check_input_file(path: str | os.PathLike, what: str) -> Path:
    """A file a command will read: it exists and is a regular file (a FIFO or a
    device would block the read or never end). ``UserError`` otherwise."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise UserError(f"{what}: {p} does not exist") from None
    except OSError as err:
        raise UserError(f"{what}: {p}: {err.strerror}") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"{what}: {p} is {_kind(mode)}, not a file; give a file")
    return p


def is_special(path: str | os.PathLike) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a folder."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def read_text(path: str | os.PathLike, what: str) -> str:
    """The text of a regular file (``check_input_file``); ``UserError`` names the file
    when it cannot be read or decoded."""
    p = check_input_file(path, what)
    try:
        return p.read_text()
    except UnicodeDecodeError as err:
        raise UserError(f"{what}: {p} is not text ({err.reason})") from None
    except OSError as err:
        raise UserError(f"{what}: {p}: {err.strerror or err}") from None


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it: a full disk
    leaves the earlier file (or none), never half a file. Creates missing folders."""
    p = Path(path)
    if is_special(p):  # /dev/stdout, a FIFO someone reads: written into, not replaced
        with open(p, "w") as f:
            f.write(text)
        return p
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, p)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return p


def save_result(path: str | os.PathLike, result, what: str = "the numbers") -> Path:
    """Write a command's result as JSON at the end of its work (``path`` was checked
    with ``check_output_file`` before it began); ``Stopped`` when the disk refuses,
    saying where the result is still to be read."""
    try:
        return write_text_atomic(path, json.dumps(result, indent=1) + "\n")
    except OSError as err:
        raise Stopped(
            f"could not write {path}: {os_error(err)[1]} ({what} are printed above)"
        ) from None


# --- what a command prints on a terminal (the doctor's; for every command) -----------

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


# --- --help ---------------------------------------------------------------------------

HELP_WIDTH_MAX = 100  # columns of --help on a wide terminal


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` as every command prints it (``formatter_class=cli.HelpFormatter``):
    each option's default after its help, "(default: 4)", unless there is none to
    show (``None``, a flag's ``False``, an empty value) or the help already says it;
    wrapped at the terminal's width (``$COLUMNS``; at most ``HELP_WIDTH_MAX``); a
    description or epilog keeps its paragraphs, and its indented lines (a list of
    commands, an example) as they are."""

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
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text, width, indent):
        import textwrap

        out = []
        for block in textwrap.dedent(text).strip("\n").split("\n\n"):
            lines = block.split("\n")
            if any(line[:1].isspace() for line in lines):
                out.append(
                    "\n".join(self._fill_line(ln, width, indent) for ln in lines)
                )
            else:
                out.append(
                    textwrap.fill(
                        " ".join(block.split()),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                        break_on_hyphens=False,
                    )
                )
        return "\n\n".join(out)

    @staticmethod
    def _fill_line(line, width, indent):
        """An indented line kept as a line, wrapped under its second column: "  name
        what it does" continues under "what"."""
        import re
        import textwrap

        lead = re.match(r"\s*(\S+\s{2,})?", line)
        hang = " " * lead.end() if lead.group(1) else " " * (lead.end() + 2)
        first = line[: len(line) - len(line.lstrip())]
        return textwrap.fill(
            line.strip(),
            width,
            initial_indent=indent + first,
            subsequent_indent=indent + hang,
            break_on_hyphens=False,
        )
