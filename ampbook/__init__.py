"""AMP Book's library: the tested code behind the notebooks.

A stack of subpackages, bottom first: ``core`` (the command line, paths, parameters,
precisions, devices, the environment, page helpers), ``segmentation`` (ERFNet,
Cityscapes and its synthetic stand-in, metrics), ``measure`` (timing, memory, autocast
observed), ``numerics`` (formats, gradients, loss scaling), ``results`` (the record
schemas and their reader), ``train`` (the training runner), ``predict`` (the cost model,
calibration, the doctor), ``bench`` (benchmarks), ``chapters`` (what each chapter says)
and ``build`` (runs the notebooks, builds and checks the HTML book). Imports point down
the stack only; see DEVELOPING.md, "Layout".
"""

__version__ = "0.1.0"


def _as_command() -> None:
    """A process started as ``python -m ampbook...``: SIGTERM is Ctrl-C, and either
    one during the start-up imports ends it with one line
    (``ampbook.core.cli.install``). The first handlers use only what the interpreter has
    loaded already, so that the window before them is as short as it can be."""
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
    for name, default in (
        ("SIGTERM", _signal.SIG_DFL),
        ("SIGINT", _signal.default_int_handler),
        ("SIGHUP", _signal.SIG_DFL),
    ):
        if (
            hasattr(_signal, name)
            and _signal.getsignal(getattr(_signal, name)) == default
        ):
            _signal.signal(getattr(_signal, name), early_stop)
    from ampbook.core import cli

    cli.install(early=stopped)


_as_command()
