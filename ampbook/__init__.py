"""AMP Book's library: the tested code behind the notebooks. A stack of subpackages,
bottom first (``core``, ``segmentation``, ``measure``, ``numerics``, ``results``,
``train``, ``predict``), then ``chapters`` (each chapter's own code) and the commands;
imports point down the stack only (DEVELOPING.md, "Layout").
"""

__version__ = "0.1.0"


def _as_command() -> None:
    """A process started as ``python -m ampbook...``: a stop during the start-up imports
    ends it with one line (``ampbook.core.stops.install``). The first handlers use
    only what the interpreter has loaded, so the window before them is short."""
    import sys

    argv = getattr(sys, "orig_argv", [])
    module, skip = "", False
    for i, arg in enumerate(argv[1:], 1):  # python [options] -m MODULE ...
        if skip:
            skip = False
        elif arg.startswith("-m"):
            module = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            break
        elif arg in ("-X", "-W"):
            skip = True  # their value follows
        elif not arg.startswith("-"):
            return
    if module.split(".")[0] != "ampbook":
        return
    import _signal
    import os

    stopped = []

    def end() -> None:
        how = "SIGTERM" if stopped else "Ctrl-C"
        sys.stderr.write(
            f"error: interrupted ({how}) while starting up; nothing was started "
            "or written\n"
        )
        sys.stderr.flush()
        os._exit(143 if stopped else 130)

    def early_stop(signum, frame):
        # Nothing was started: end at once (an exception raised here could land inside
        # a C extension's initialisation and abort the process instead).
        if signum != _signal.SIGINT:
            stopped.append(signum)
        end()

    def early_hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            end()
        sys.__excepthook__(kind, value, tb)

    sys.excepthook = early_hook
    for stop, default in (
        (_signal.SIGTERM, _signal.SIG_DFL),
        (_signal.SIGINT, _signal.default_int_handler),
        (_signal.SIGHUP, _signal.SIG_DFL),
    ):
        if _signal.getsignal(stop) == default:
            _signal.signal(stop, early_stop)
    from ampbook.core import cli

    cli.install(early=stopped)


_as_command()
