"""The error layer every command's ``main`` shares through ``@command``: a known failure
is one ``error:`` line and an exit status (2 bad settings, 1 a run that stopped, 130
Ctrl-C, 143 SIGTERM). Also the front door (``cli.X``) of the layer's modules. Standard
library only: the module is loaded before torch."""

from __future__ import annotations

import functools
import os
import stat
import sys
from typing import Callable

from ampbook.core import stops
from ampbook.core.args import (  # noqa: F401 -- cli.X for every command
    HELP_WIDTH_MAX,
    ArgumentParser,
    HelpFormatter,
    check_seed,
    is_positive_int,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    seed,
)
from ampbook.core.errors import (  # noqa: F401 -- cli.X for every command
    EXIT_PIPE,
    EXIT_SETTINGS,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    EXIT_STOPPED,
    Stopped,
    UserError,
    describe,
    error_text,
    os_error,
    say,
)
from ampbook.core.files import (  # noqa: F401 -- cli.X for every command
    LockBusy,
    check_free_space,
    check_input_file,
    check_open_files,
    check_output_dir,
    check_output_file,
    file_kind,
    hold_lock,
    is_special,
    mode_kind,
    open_files_advice,
    read_text,
    release_lock,
    save_result,
    too_many_open_files,
    write_text_atomic,
)
from ampbook.core.stops import (  # noqa: F401 -- cli.X for every command
    Terminated,
    closed_streams,
    is_command,
    kept_handlers,
    record_stop,
    signal_name,
    signals,
    stop_code,
    terminated,
)
from ampbook.core.terminal import (  # noqa: F401 -- cli.X for every command
    Progress,
    plain_text_errors,
    terminal_text,
)

_depth = [0]  # commands running in this process (one calls another as a function)


def command(prog: str) -> Callable:
    """Wrap a command's ``main(argv) -> int``: signals as Ctrl-C, a known failure left
    by ``main`` turned into one ``error:`` line and its exit status."""

    def wrap(main: Callable) -> Callable:
        @functools.wraps(main)
        def run(argv: list[str] | None = None) -> int:
            _depth[0] += 1
            try:
                code = _run(argv)
            finally:
                _depth[0] -= 1
            if _depth[0] == 0 and is_command():
                stops.end_process(code)
            return code

        def _run(argv: list[str] | None) -> int:
            if stops.start_up_stop_pending() and is_command():
                # A stop during the start-up imports that an import swallowed (a bare
                # ``except:`` in a library): the command does not start.
                say(stops.start_up_stop_text())
                return stop_code()
            stops.begin()
            with signals(), stops.stops_blocked_after(_depth[0] == 1):
                try:
                    code = main(argv)
                    # a stop held back ended main before it was raised (unless main
                    # had its own handler and answered with the stop's status)
                    if stops.take_held() and code not in (EXIT_SIGINT, EXIT_SIGTERM):
                        raise Terminated() if terminated() else KeyboardInterrupt()
                except KeyboardInterrupt as err:
                    stops.hold_further_stops()  # a second signal: still 130/143
                    say(
                        f"{prog} interrupted ({signal_name()}) before it finished; "
                        "what it had not finished was not written"
                    )
                    if is_command():
                        # main's cleanup has run; a stop inside torch's import can
                        # leave a C extension that aborts in the teardown (SIGABRT)
                        stops.flush()
                        os._exit(stop_code(err))
                    return stop_code(err)
                except SystemExit as err:  # argparse: --help (0), a bad option (2)
                    code = err.code
                    return code if isinstance(code, int) else (0 if code is None else 2)
                except BaseException as err:  # noqa: BLE001 -- only known ones kept
                    if isinstance(err, BrokenPipeError) and stdout_reader_gone():
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

        run.ampbook_command = prog  # tests/test_cli.py finds every command by it
        return run

    return wrap


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe nobody reads any more (``| head`` exited); it then goes
    to /dev/null, so the last flush raises nothing."""
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
