"""The notebook runner's kernels (``booktools.run``): the kernel manager that records
the kernels it starts, Ctrl-C forwarded to the running kernel as Jupyter's stop button
does, no kernel left alive after its notebook, the failing cell named in the
reader's terms, and the mark an executed notebook carries (how its run ended).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from pathlib import Path

from ampbook.core import cli


def mark(
    output: Path, status: str, error: str | None = None, run_id: str | None = None
) -> None:
    """Record in an executed notebook's metadata how its run ended
    (``ampbook.status``) and which run it was (``ampbook.run``, also in the run
    report)."""
    import nbformat

    if not output.exists():
        return
    try:
        nb = nbformat.read(output, as_version=4)
    except Exception:  # noqa: BLE001 -- half-written by a killed run: nothing to mark
        return
    nb.metadata["ampbook"] = {"status": status, "error": error, "run": run_id}
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    nbformat.write(nb, tmp)
    os.replace(tmp, output)


def run_status(path: Path) -> str | None:
    """How the run of an executed notebook ended (``mark``), or None when unmarked."""
    return run_mark(path).get("status")


def run_mark(path: Path) -> dict:
    """An executed notebook's mark (``mark``): ``status``, ``error``, ``run``; ``{}``
    when unmarked, ``{"status": "unreadable"}`` when it cannot be read."""
    import nbformat

    if cli.is_special(path):
        return {"status": "unreadable"}
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 -- unreadable: certainly not a complete run
        return {"status": "unreadable"}
    mark = nb.metadata.get("ampbook")
    return dict(mark) if isinstance(mark, dict) else {}


def failing_cell(nb, source: Path) -> str:
    """Where the failing cell is, in the reader's terms: its code-cell number
    (papermill's injected cell not counted), its first line, and its line in the ``.py``
    source."""
    code_no = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        if "injected-parameters" not in tags:
            code_no += 1
        if any(out.get("output_type") == "error" for out in cell.get("outputs", [])):
            first = next((l for l in cell.source.splitlines() if l.strip()), "")
            where = f"code cell {code_no} ({first.strip()!r}"
            text = source.read_text().splitlines()
            line = next(
                (n for n, l in enumerate(text, 1) if first and l == first), None
            )
            if line:
                where += f", {source.name} line {line}"
            return where + ")"
    return "an unknown cell"


def kernel_manager_class():
    """A kernel manager class that records the kernels it starts, and the list it
    fills."""
    from jupyter_client import AsyncKernelManager

    started: list = []

    class RecordingKernelManager(AsyncKernelManager):
        async def _async_post_start_kernel(self, **kw):
            await super()._async_post_start_kernel(**kw)
            started.append(self)

        async def _async_interrupt_kernel(self):
            # jupyter_client's shutdown interrupts the kernel (SIGINT) before it
            # asks it to shut down. The kernel is idle then (its cells ran, or the
            # runner's own Ctrl-C already stopped the running one), so the signal
            # only lands in its event loop, which logs "KeyboardInterrupt caught in
            # kernel" to stderr when it arrives at the wrong moment (under load). The
            # shutdown request (then SIGTERM, SIGKILL after shutdown_wait_time) ends
            # the kernel without it.
            if getattr(self, "shutting_down", False):
                return
            await super()._async_interrupt_kernel()

    return RecordingKernelManager, started


def forward_sigint(kernels, interrupted: list):
    """Ctrl-C (or SIGTERM, handled alike) while a notebook runs interrupts its kernel,
    as Jupyter's stop button does: the running cell stops with KeyboardInterrupt and
    the run ends cleanly, the notebook marked interrupted. A second signal stops the
    runner at once. Returns the previous handlers (None when none could be set)."""
    started = kernels[1] if isinstance(kernels, tuple) else None

    def handler(signum, frame):
        cli.record_stop(signum)
        stop = cli.Terminated if signum == signal.SIGTERM else KeyboardInterrupt
        managers = started if started is not None else []
        if interrupted or not managers:
            raise stop
        interrupted.append(time.time())
        try:
            os.kill(managers[-1].provisioner.pid, signal.SIGINT)
        except (AttributeError, OSError, TypeError):
            raise stop from None

    try:
        return {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: leave Ctrl-C alone
        return None


def end_kernels(managers: list) -> None:
    """No kernel outlives its notebook's run: one still alive (the runner stopped
    while papermill waited on it) is ended, SIGTERM then SIGKILL."""
    import subprocess

    for manager in managers:
        proc = getattr(getattr(manager, "provisioner", None), "process", None)
        if proc is None or not hasattr(proc, "poll") or proc.poll() is not None:
            continue
        for stop in (proc.terminate, proc.kill):
            with contextlib.suppress(OSError):
                stop()
            try:
                proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue


ENGINE = "ampbook"  # the papermill engine ``booktools.run`` executes with


@functools.cache  # one registration a process
def register_engine() -> str:
    """Register papermill's nbclient engine with fewer writes of the output notebook,
    and return its name (``ENGINE``).

    papermill writes the whole notebook as each cell starts and again as it ends,
    Markdown cells included: chapter 5's 94 cells meant 188 writes, each a deep copy,
    a schema check and the JSON of every output so far (seconds of the runner's time
    per chapter). This engine writes the notebook as each code cell starts, so the
    file holds every finished cell's outputs while the next one runs (what a stop or
    a timeout keeps), and once at the end, whatever ended the run."""
    from papermill.engines import (
        NBClientEngine,
        NotebookExecutionManager,
        papermill_engines,
    )

    class CodeCellWrites(NotebookExecutionManager):
        write = True

        def save(self, **kwargs):
            if self.write:
                super().save(**kwargs)

        def cell_start(self, cell, cell_index=None, **kwargs):
            self.write = cell.cell_type == "code"
            try:
                super().cell_start(cell, cell_index, **kwargs)
            finally:
                self.write = True

        def cell_complete(self, cell, cell_index=None, **kwargs):
            # a failed (or stopped) cell is written now, before the kernel shuts
            # down; another, by the next code cell's start or the end
            self.write = cell.metadata.papermill.get("status") == self.FAILED
            try:
                super().cell_complete(cell, cell_index, **kwargs)
            finally:
                self.write = True

    class Engine(NBClientEngine):
        @classmethod
        def execute_notebook(cls, nb, kernel_name, output_path=None, **kwargs):
            manager = CodeCellWrites(
                nb,
                output_path=output_path,
                progress_bar=kwargs.pop("progress_bar", True),
                log_output=kwargs.get("log_output", False),
                autosave_cell_every=kwargs.pop("autosave_cell_every", 30),
            )
            manager.notebook_start()
            try:
                cls.execute_managed_notebook(manager, kernel_name, **kwargs)
            finally:
                manager.cleanup_pbar()
                manager.notebook_complete()
            return manager.nb

    papermill_engines.register(ENGINE, Engine)
    return ENGINE
