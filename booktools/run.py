"""Execute the book's notebooks with papermill, from their jupytext sources.

    python -m booktools.run [--profile smoke|cpu|gpu] [--out DIR]
                                [-p NAME VALUE ...] [NOTEBOOK ...]

NOTEBOOK is a path, a stem or a chapter number (all by default). Each source gets its
profile's parameters (``notebooks/profiles.yml``; ``-p NAME VALUE``, read as YAML,
overrides one, checked before anything runs) and papermill runs it into
``DIR/NN_topic.ipynb``, marked in its metadata (``ampbook.status``: complete, failed,
interrupted; a run over an earlier complete notebook writes into ``DIR/new/`` until it
ran through). A time table ends the run and ``DIR/run_report.json`` records it; a
closed stdout (``| head``) stops it between notebooks (exit 141). Kernels talk over
local IPC sockets, not TCP (``booktools.kernels``). DEVELOPING.md, "The build tools".
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ampbook.core import cli
from ampbook.core.paths import BOOK_DIR, NOTEBOOKS_DIR, PROFILES_FILE, REPO_ROOT
from ampbook.core.words import nearest, plural
from booktools.kernels import (
    end_kernels,
    failing_cell,
    forward_sigint,
    kernel_manager_class,
    mark,
    register_engine,
    run_mark,
    run_status,
)
from booktools.sources import all_notebooks, read_source

PROFILES = ("smoke", "cpu", "gpu")
# Files a kernel (and the runner's side of its sockets) has open at once, with room to
# spare: chapter 1's smoke run died starting its kernel under ulimit -n 50, hung at 60
# and ran at 80. Loader workers started in a notebook check their own need.
KERNEL_FILES = 160
DEFAULT_OUT = REPO_ROOT / "build" / "executed"
ASIDE = "new"  # DIR/new/: a notebook running over an earlier complete one


class RunError(RuntimeError, cli.UserError):
    """A notebook could not be run: the settings (a notebook, profile, parameter or
    output folder that cannot work; exit 2); the message says which and why."""


class NotebookFailed(RunError):
    """A notebook started and stopped on an error (exit 1; 2 when the error is a
    parameter check's, ``ampbook.core.params.ParameterError``: a bad ``-p`` value)."""

    exit_code = cli.EXIT_STOPPED

    def __init__(self, message: str, parameter: bool = False):
        super().__init__(message)
        if parameter:
            self.exit_code = cli.EXIT_SETTINGS


class RunInterrupted(NotebookFailed):
    """Ctrl-C or SIGTERM during a run."""


class OutputClosed(RunError):
    """Standard output's reader went away (``| head``): the run stops as at Ctrl-C,
    between notebooks, those that ran kept and reported (exit 141, as ``cat``)."""

    exit_code = cli.EXIT_PIPE


def _guarded_log(log, state: dict):
    """``log`` that turns a broken pipe into ``OutputClosed`` once (stdout then goes
    to /dev/null) and says nothing after it."""

    def say(text: str) -> None:
        if state.get("closed"):
            return
        try:
            log(text)
        except BrokenPipeError:
            state["closed"] = True
            cli.stdout_reader_gone()  # the interpreter's last flush raises no more
            raise OutputClosed("standard output's reader went away") from None

    return say


@dataclass
class NotebookRun:
    name: str
    source: Path
    output: Path
    parameters: dict
    seconds: float = 0.0
    code_cells: int = 0
    executed_cells: int = 0
    status: str = "pending"
    error: str | None = None
    extra: dict = field(default_factory=dict)


def resolve_notebook(spec: str) -> Path:
    """A path, a stem or a chapter number -> the notebook's ``.py`` source."""
    candidates = all_notebooks()
    path = Path(spec)
    if path.suffix in (".py", ".ipynb") and path.exists():
        source = path.with_suffix(".py")
        if not source.exists():
            raise RunError(f"{spec}: no jupytext source {source.name} beside it")
        try:  # a FIFO or a device would block the read
            cli.check_input_file(source, "notebook")
        except cli.UserError as err:
            raise RunError(str(err)) from None
        return source.resolve()
    stem = path.stem if path.suffix in (".py", ".ipynb") else spec
    for cand in candidates:
        if cand.stem == stem or (
            stem.isdigit() and cand.stem.startswith(f"{int(stem):02d}_")
        ):
            return cand
    near = nearest(stem, [c.stem for c in candidates])
    if near:
        raise RunError(
            f"no notebook {spec!r}; did you mean {' or '.join(near)}? (a path, a "
            f"stem or a chapter number, 1 to {len(candidates)})"
        )
    known = ", ".join(c.stem for c in candidates)
    raise RunError(f"no notebook {spec!r}; known notebooks: {known}")


def default_profile() -> str:
    env = os.environ.get("AMPBOOK_PROFILE", "").strip()
    if env:
        if env not in PROFILES:
            raise RunError(
                f"environment variable AMPBOOK_PROFILE={env!r} is not a profile; "
                f"set it to one of {', '.join(PROFILES)}, or unset it"
            )
        return env
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def load_profiles(path: Path = PROFILES_FILE) -> dict:
    """``notebooks/profiles.yml``, checked: YAML, a mapping of profile -> notebook stem
    -> parameter -> value. ``RunError`` names the file, the place and the fix."""
    try:
        text = cli.read_text(path, "profiles")
    except cli.UserError as err:
        raise RunError(str(err)) from None
    try:
        profiles = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise RunError(
            f"{path} is not valid YAML{at}: {problem}; fix that line"
        ) from None
    if not isinstance(profiles, dict):
        raise RunError(
            f"{path} holds a {type(profiles).__name__}, not a mapping of profiles "
            f"({', '.join(PROFILES)}) to notebooks to parameters"
        )
    missing = [p for p in PROFILES if p not in profiles]
    if missing:
        raise RunError(
            f"{path}: profiles {missing} are missing (need {list(PROFILES)})"
        )
    for profile, notebooks in profiles.items():
        if notebooks is None:
            continue
        if not isinstance(notebooks, dict):
            raise RunError(
                f"{path}: profile {profile!r} is a {type(notebooks).__name__}; it must "
                "map notebook stems (01_floating_point...) to their parameters"
            )
        for stem, params in notebooks.items():
            if params is not None and not isinstance(params, dict):
                raise RunError(
                    f"{path}: {profile}.{stem} is a {type(params).__name__}; it must "
                    "map parameter names to values"
                )
            bad = [k for k in params or {} if not isinstance(k, str)]
            if bad:
                raise RunError(
                    f"{path}: {profile}.{stem} has parameter names that are not "
                    f"names: {bad}"
                )
    return profiles


def parameters_cell(nb) -> tuple[int, dict]:
    """Index of the one cell tagged ``parameters`` and the names it assigns (with values
    where they are literals)."""
    tagged = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        and "parameters" in c.get("metadata", {}).get("tags", [])
    ]
    if len(tagged) != 1:
        raise RunError(
            f"expected exactly one cell tagged 'parameters', found {len(tagged)}"
        )
    source = nb.cells[tagged[0]].source
    names: dict = {}
    for node in ast.parse(source).body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
            value = node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
            value = node.value
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    names[target.id] = ast.literal_eval(value)
                except ValueError:
                    names[target.id] = None
    return tagged[0], names


def profile_parameters(profiles: dict, profile: str, source: Path, nb) -> dict:
    if profile not in profiles:
        raise RunError(
            f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}"
        )
    params = dict((profiles[profile] or {}).get(source.stem) or {})
    _, names = parameters_cell(nb)
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise RunError(
            f"{PROFILES_FILE.name}: profile {profile!r} sets {unknown} for "
            f"{source.stem}, "
            f"but its parameters cell defines only {sorted(names)}"
        )
    return params


def execute(
    source: Path,
    out_dir: Path,
    params: dict,
    profile: str,
    log=print,
    threads: int | None = None,
    run_id: str | None = None,
) -> NotebookRun:
    """Run one notebook; raise RunError (partly executed notebook kept) on failure.
    ``threads`` sets the kernel's intra-op thread count (``OMP_NUM_THREADS``); None
    keeps torch's default. ``run_id`` goes into the notebook's mark and the run
    report, which ``python -m booktools.book`` matches."""
    import papermill as pm

    nb, run, final, existed = _prepare(source, out_dir, params)
    output = run.output
    start = time.perf_counter()
    # Local IPC sockets in a private folder: no TCP port, so the kernel has nothing to
    # warn about ("Kernel is running over TCP without encryption") and nothing is
    # exposed.
    sockets = tempfile.mkdtemp(prefix="ampbook-kernel-")
    kernel_config = {
        "KernelManager": {"transport": "ipc", "ip": os.path.join(sockets, "k")}
    }
    kernels, started = kernel_manager_class()
    interrupted: list = []
    kept = "" if output == final else f"; the earlier complete {final} is unchanged"
    with _kernel_environment(profile, threads):
        old_handler = forward_sigint((kernels, started), interrupted)
        try:
            from traitlets.config import Config

            pm.execute_notebook(
                nb,
                str(output),
                parameters=params,
                kernel_name="python3",
                cwd=str(source.parent),
                progress_bar=sys.stderr.isatty(),
                log_output=False,
                report_mode=False,
                config=Config(kernel_config),
                kernel_manager_class=kernels,
                engine_name=register_engine(),
            )
        except pm.PapermillExecutionError as err:
            run.seconds = time.perf_counter() - start
            _cell_failed(err, run, final, existed, bool(interrupted), run_id, kept)
        except KeyboardInterrupt:
            how = cli.signal_name()
            mark(output, "interrupted", f"interrupted ({how})", run_id)
            raise RunInterrupted(
                f"{source.stem} was interrupted ({how}); the partly executed notebook "
                f"(if any) is kept at {output}, marked interrupted" + kept
            ) from None
        except Exception as err:  # kernel died, timeout, bad parameters...
            _kernel_failed(err, run, bool(interrupted), run_id, kept)
        finally:
            if old_handler is not None:
                for signum, handler in old_handler.items():
                    signal.signal(signum, handler)
            end_kernels(started)
            shutil.rmtree(sockets, ignore_errors=True)
    run.seconds = time.perf_counter() - start
    return _finish(run, final, run_id)


def _prepare(source: Path, out_dir: Path, params: dict):
    """(the notebook, its run, the final path, whether that existed). An earlier
    complete notebook is replaced only by one that ran through: until then the run
    writes into DIR/new/ (kept there, marked, when it fails or is stopped)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    nb = read_source(source)
    parameters_cell(nb)  # exactly one, or RunError
    kernel = {"name": "python3", "display_name": "Python 3 (ipykernel)"}
    nb.metadata.setdefault("kernelspec", {**kernel, "language": "python"})
    final = output = out_dir / f"{source.stem}.ipynb"
    if (existed := final.exists()) and run_status(final) == "complete":
        output = out_dir / ASIDE / final.name
        output.parent.mkdir(exist_ok=True)
        output.unlink(missing_ok=True)
    run = NotebookRun(source.stem, source, output, params)
    run.code_cells = sum(1 for c in nb.cells if c.cell_type == "code")
    if run.code_cells == 0:
        raise RunError(f"{source.stem}: the notebook has no code cell to execute")
    return nb, run, final, existed


@contextlib.contextmanager
def _kernel_environment(profile: str, threads: int | None):
    """The environment the kernel inherits, restored afterwards."""
    from ampbook.core.env import RUN_PROFILE_VAR

    saved = {
        k: os.environ.get(k)
        for k in ("AMPBOOK_PROFILE", RUN_PROFILE_VAR, "MPLBACKEND", "OMP_NUM_THREADS")
    }
    os.environ["AMPBOOK_PROFILE"] = profile
    # What print_environment names: the profile whose parameters were injected (a
    # variable of its own: $AMPBOOK_PROFILE in a reader's shell says nothing about a
    # notebook run by hand in Jupyter).
    os.environ[RUN_PROFILE_VAR] = profile
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    # The kernel inherits the environment: figures must go to the notebook, not to Agg.
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _cell_failed(err, run: NotebookRun, final, existed, interrupted, run_id, kept):
    """Mark the notebook where a cell raised ``err`` and raise what the command says."""
    import nbformat

    source, output = run.source, run.output
    where = failing_cell(nbformat.read(output, as_version=4), source)
    if interrupted and err.ename == "KeyboardInterrupt":
        how = cli.signal_name()
        mark(output, "interrupted", f"interrupted ({how}) in {where}", run_id)
        raise RunInterrupted(
            f"{source.stem} was interrupted ({how}) in {where}; the partly "
            f"executed notebook is kept at {output}, marked "
            "interrupted" + kept
        ) from None
    evalue = (str(err.evalue).strip().splitlines() or [""])[0]
    mark(output, "failed", f"{err.ename}: {evalue}", run_id)
    if err.ename == "ParameterError":  # a parameter check: the settings
        if output != final or not existed:  # it ran nothing: nothing is kept
            output.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                (final.parent / ASIDE).rmdir()
        raise NotebookFailed(
            f"{source.stem}: {evalue}; change it (-p or notebooks/profiles.yml)",
            parameter=True,
        ) from None
    raise NotebookFailed(
        f"{source.stem} failed in {where}: {err.ename}: {evalue}; the partly "
        f"executed notebook is kept at {output}, marked failed" + kept
    ) from None


def _kernel_failed(err, run: NotebookRun, interrupted, run_id, kept):
    """Mark the notebook whose kernel could not run it and raise what the command
    says."""
    stem, output = run.source.stem, run.output
    if interrupted:  # the signal reached a kernel still starting: it died of it
        how = cli.signal_name()
        mark(output, "interrupted", f"interrupted ({how})", run_id)
        raise RunInterrupted(
            f"{stem} was interrupted ({how}) while its kernel started; "
            f"the notebook (if any) is kept at {output}, marked interrupted" + kept
        ) from None
    first = (str(err).strip().splitlines() or [""])[0]
    mark(output, "failed", f"{type(err).__name__}: {first}", run_id)
    raise NotebookFailed(
        f"{stem} could not be executed: {type(err).__name__}: {first}; "
        f"the partly executed notebook (if any) is at {output}, marked "
        "failed" + kept
    ) from None


def _finish(run: NotebookRun, final: Path, run_id: str | None) -> NotebookRun:
    """Mark a notebook that ran through complete, move it over the earlier one, and
    check that its cells ran."""
    import nbformat

    output = run.output
    mark(output, "complete", run_id=run_id)
    if output != final:
        os.replace(output, final)
        with contextlib.suppress(OSError):
            output.parent.rmdir()
        output = run.output = final
    executed = nbformat.read(output, as_version=4)
    run.executed_cells = sum(
        1
        for c in executed.cells
        if c.cell_type == "code"
        and c.get("execution_count") is not None
        and "injected-parameters" not in c.get("metadata", {}).get("tags", [])
    )
    if run.executed_cells == 0:
        raise RunError(
            f"{run.source.stem}: no code cell was executed (output at {output})"
        )
    run.status = "ok"
    return run


def check_out_dir(out_dir: Path) -> Path:
    """The output folder, resolved; refused when it is a file, inside the sources, or
    under a folder that does not exist (only the folder itself is made, as the
    doctor's ``--json`` makes only its file; the default's ``build/`` is made)."""
    out_dir = Path(out_dir).expanduser().resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise RunError(
            f"--out {out_dir} is a file; give a folder for the executed notebooks"
        )
    for sources in (NOTEBOOKS_DIR, BOOK_DIR):
        if out_dir == sources or sources in out_dir.parents:
            raise RunError(
                f"--out {out_dir} is inside {sources}, the book's sources: the run "
                f"would overwrite them; use another folder (default {DEFAULT_OUT})"
            )
    try:  # long names, a file in the way, read-only, a little room for the notebooks
        cli.check_output_dir(out_dir, "--out", size=REPORT_ROOM)
    except cli.UserError as err:
        raise RunError(str(err)) from None
    if not out_dir.exists() and not out_dir.parent.is_dir() and out_dir != DEFAULT_OUT:
        # As the doctor's --json and bench ladder's --json: the run makes its own
        # folder, not a missing path above it (a typo would create a tree)
        raise RunError(
            f"--out: cannot create {out_dir}: folder {out_dir.parent} does not exist; "
            "create it or choose another path"
        )
    return out_dir


REPORT = "run_report.json"
REPORT_ROOM = 4 * 2**20  # bytes free below which a run could not keep its notebooks
REPORT_KEYS = {"name": str, "status": str, "seconds": (int, float), "run": str}


def load_run_report(path: Path) -> dict:
    """``run_report.json`` as ``write_run_report`` writes it, checked: ``RunError``
    names the file and the field that is missing or of the wrong type."""
    try:
        report = json.loads(cli.read_text(path, "run report"))
    except cli.UserError as err:
        raise RunError(str(err)) from None
    except ValueError as err:
        raise RunError(f"{path} is not JSON ({err})") from None

    def bad(field: str, want: str) -> RunError:
        return RunError(f"{path}: field {field} is missing or not {want}")

    if not isinstance(report, dict):
        raise bad("(the whole file)", "a JSON object")
    if not isinstance(report.get("profile"), str):
        raise bad("profile", "a profile name")
    if not isinstance(report.get("notebooks"), list):
        raise bad("notebooks", "a list")
    for i, entry in enumerate(report["notebooks"]):
        if not isinstance(entry, dict):
            raise bad(f"notebooks[{i}]", "an object")
        for key, kind in REPORT_KEYS.items():
            value = entry.get(key)
            if isinstance(value, bool) or not isinstance(value, kind):
                raise bad(f"notebooks[{i}].{key}", kind_name(kind))
        cells = entry.get("executed_cells")
        if isinstance(cells, bool) or not isinstance(cells, int) or cells < 0:
            raise bad(f"notebooks[{i}].executed_cells", "a count")
        if not (entry["seconds"] >= 0 and entry["seconds"] < float("inf")):
            raise bad(f"notebooks[{i}].seconds", "a time in seconds")
    env = report.get("environment")
    if env is not None and not isinstance(env, dict):
        raise bad("environment", "an object")
    return report


def kind_name(kind) -> str:
    return "a string" if kind is str else "a number"


def write_run_report(out_dir: Path, report: dict) -> None:
    """Write ``run_report.json``: this run's notebooks, and the entries of an earlier
    report for notebooks not run this time that are still the ones it describes (the
    run id in their mark matches). Atomic: a report is whole or absent."""
    path = out_dir / REPORT
    mine = {n["name"] for n in report["notebooks"]}
    kept = []
    try:
        earlier = load_run_report(path) if path.exists() else None
    except RunError:
        earlier = None
    if earlier is not None:
        for entry in earlier["notebooks"]:
            if entry["name"] in mine:
                continue
            nb = out_dir / f"{entry['name']}.ipynb"
            if nb.exists() and run_mark(nb).get("run") == entry["run"]:
                kept.append(entry)
    report = dict(report, notebooks=kept + report["notebooks"])
    cli.write_text_atomic(path, json.dumps(report, indent=2))


class _PlainYAML(yaml.SafeLoader):
    """YAML without anchors and aliases: a value of a few bytes whose aliases
    repeat one another (``&a [x,x] ... [*a,*a]``, nine levels deep) stands for
    billions of items, which the notebook's injected parameters cell would spell out
    (out of memory). A ``-p`` value has no need for them."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise RunError(
                "anchors and aliases (& and *) are not read in a -p value; write "
                "the value out"
            )
        return super().compose_node(parent, index)


def parse_value(text: str):
    """A ``-p`` value as papermill reads it: YAML (without anchors and aliases), with
    ``1e-3`` a number too."""
    try:
        value = yaml.load(text, Loader=_PlainYAML)  # noqa: S506 -- a SafeLoader
    except RunError as err:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise RunError(f"-p value {shown!r}: {err}") from None
    except yaml.YAMLError as err:
        raise RunError(
            f"-p value {text!r} is not valid YAML: {str(err).splitlines()[0]}"
        ) from None
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def apply_overrides(plans: list[tuple[Path, dict, dict]], overrides: dict) -> None:
    """Set each ``-p NAME VALUE`` in every plan (source, params, cell names) that
    defines NAME; a NAME none of them defines is an error that lists what they
    define."""
    for name, value in overrides.items():
        hits = [params for _, params, names in plans if name in names]
        if not hits:
            known = "; ".join(
                f"{src.stem}: {', '.join(sorted(names))}" for src, _, names in plans
            )
            raise RunError(
                f"-p {name}: no selected notebook has a parameter {name!r} "
                f"(their parameters: {known})"
            )
        for src, _, names in plans:
            if name in names:
                check_override_type(src.stem, name, value, names[name])
        for params in hits:
            params[name] = value


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_override_type(stem: str, name: str, value, default) -> None:
    """A ``-p`` value that is not a number where the parameters cell sets a number
    (``-p n_samples abc``) is refused before anything runs or is written: the
    notebook's own check would refuse it only in its kernel. Other kinds are left to
    the notebook (a string parameter may take a list, a flag a path); so are its
    finer rules (bounds, NaN)."""
    if _is_number(default) and not _is_number(value):
        raise RunError(
            f"parameter {name} = {value!r}: must be a number ({stem}'s parameters "
            f"cell sets {name} = {default!r}); nothing was run or written"
        )


def time_table(runs: list[NotebookRun], wall: float | None = None) -> str:
    width = max([len(r.name) for r in runs] + [8])
    lines = [f"{'notebook':<{width}}  {'status':<6}  {'cells':>5}  {'seconds':>8}"]
    for r in runs:
        lines.append(
            f"{r.name:<{width}}  {r.status:<6}  {r.executed_cells:>5}  "
            f"{r.seconds:>8.1f}"
        )
    lines.append(
        f"{'total':<{width}}  {'':<6}  {'':>5}  {sum(r.seconds for r in runs):>8.1f}"
    )
    if wall is not None:
        lines.append(
            f"run time {wall:.1f} s in all (wall clock, with conversion and kernel "
            "start-up)"
        )
    return "\n".join(lines)


def write_reader_copies(
    runs: list[NotebookRun], out_dir: Path, profile: str, log=print
) -> list[Path]:
    """The reader's copy of each notebook run (``booktools.reader``) in
    ``out_dir/reader/``. A reference that does not resolve costs that copy only, with a
    warning: the run itself succeeded (the book build refuses the chapter)."""
    errors: list[str] = []
    try:
        from booktools import reader

        written = reader.write_reader_copies(
            out_dir, [r.name for r in runs], profile=profile, errors=errors
        )
    except ImportError as err:  # a machine with the runner's packages only
        log(f"warning: no reader's copies ({err}); the executed notebooks are complete")
        return []
    for error in errors:
        log(f"warning: no reader's copy of {error}")
    if written:
        log(
            "reader's copies (roles replaced, captions under the figures):\n"
            f"  {out_dir / reader.READER_DIR}"
        )
    from booktools import runalong

    errors = []
    along = out_dir / runalong.RUN_ALONG_DIR
    try:
        made = runalong.write_run_along_copies(
            [r.source for r in runs], along, errors=errors
        )
    except OSError as err:  # the run is complete: a copy is a convenience
        log(
            f"warning: no run-along copies ({err}); the executed notebooks are complete"
        )
        made = []
    if made:
        log(
            "run-along copies (run them in Jupyter; the text follows the run):\n"
            f"  {along}"
        )
    for error in errors:
        log(f"warning: no run-along copy of {error}")
    return written


def run_notebooks(
    specs: list[str] | None = None,
    profile: str | None = None,
    out_dir: Path | str = DEFAULT_OUT,
    log=print,
    threads: int | None = None,
    overrides: dict | None = None,
) -> list[NotebookRun]:
    """Execute notebooks (all by default); raise RunError at the first failure.
    ``overrides`` (``-p NAME VALUE``) replace parameters of the profile."""
    started = time.perf_counter()
    log = _guarded_log(log, {})
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{time.time_ns() % 10**6}"
    profile = profile or default_profile()
    if profile not in PROFILES:
        raise RunError(
            f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}"
        )
    try:  # before anything is made: a kernel short of files dies or hangs starting
        cli.check_open_files(KERNEL_FILES, "a notebook's kernel and its sockets")
    except cli.UserError as err:
        raise RunError(str(err)) from None
    out_dir = check_out_dir(out_dir)
    plans = _plans(specs, profile, overrides)
    runs: list[NotebookRun] = []
    finished = False
    try:
        log(f"profile {profile}: {plural(len(plans), 'notebook')} -> {out_dir}")
        for n, (source, params, _) in enumerate(plans, 1):
            log(f"[{n}/{len(plans)}] {source.stem} {params if params else ''}".rstrip())
            try:
                run = execute(
                    source, out_dir, params, profile, log, threads, run_id=run_id
                )
                runs.append(run)
            except RunError as err:
                if err.exit_code == cli.EXIT_SETTINGS:  # a parameter check: no entry
                    raise
                runs.append(_failed_run(err, source, out_dir, params))
                raise
            log(f"      done in {runs[-1].seconds:.1f} s")
        write_reader_copies(runs, out_dir, profile, log)
        finished = True
    except OutputClosed:
        done = [r for r in runs if r.status == "ok"]
        if done:  # complete notebooks: their copies, as a run of them alone makes
            write_reader_copies(done, out_dir, profile, log)
        kept = f"; {out_dir / REPORT} lists them" if done else ""
        raise OutputClosed(
            "standard output's reader went away (a pipe such as | head closed "
            f"early): the run stopped after {len(done)} of {len(plans)} notebooks"
            f"{kept}; send its output to a file to see it all"
        ) from None
    finally:
        _report(runs, out_dir, profile, threads, run_id, started, finished, log)
    return runs


def _plans(specs, profile: str, overrides: dict | None) -> list[tuple]:
    """(source, parameters, the parameters cell's names) of each notebook to run,
    every notebook's checked before any runs, so that a typo costs nothing."""
    sources = [resolve_notebook(s) for s in specs] if specs else all_notebooks()
    if not sources:
        raise RunError(f"no notebooks found in {NOTEBOOKS_DIR}")
    profiles = load_profiles()
    plans = []
    for source in sources:
        try:
            nb = read_source(source)
            params = profile_parameters(profiles, profile, source, nb)
            plans.append((source, params, parameters_cell(nb)[1]))
        except RunError as err:
            raise RunError(f"{source.stem}: {err}") from None
    apply_overrides(plans, overrides or {})
    return plans


def _failed_run(err: RunError, source: Path, out_dir: Path, params) -> NotebookRun:
    status = "STOPPED" if isinstance(err, RunInterrupted) else "FAILED"
    final = out_dir / f"{source.stem}.ipynb"
    failed = NotebookRun(
        source.stem, source, final, params, status=status, error=str(err)
    )
    # kept aside (DIR/new/): the earlier complete one and its entry stay
    failed.extra["aside"] = run_status(final) == "complete"
    return failed


def _report(runs, out_dir: Path, profile, threads, run_id, started, finished, log):
    """Print the time table and write the run report (also after a failure)."""
    reported = [r for r in runs if not r.extra.get("aside")]
    closed = None
    if runs:
        wall = time.perf_counter() - started
        try:
            log(time_table(runs, wall))
        except OutputClosed as err:  # the report is still written
            closed = err
    if reported:
        from ampbook.core.env import environment

        report = {
            "profile": profile,
            "threads": threads,
            "seconds": round(wall, 2),
            "environment": environment(),
            "notebooks": [
                {
                    "name": r.name,
                    "status": r.status,
                    "seconds": round(r.seconds, 2),
                    "executed_cells": r.executed_cells,
                    "parameters": r.parameters,
                    "error": r.error,
                    "run": run_id,
                }
                for r in reported
            ],
        }
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            write_run_report(out_dir, report)
        except OSError as err:
            if finished:  # else the run's own error is the one to report
                raise cli.Stopped(
                    f"the notebooks ran, but {out_dir / REPORT} could not be "
                    f"written: {cli.os_error(err)[1]}; the book needs it"
                ) from None
    if closed is not None and finished:
        raise OutputClosed(
            "standard output's reader went away (a pipe such as | head closed "
            f"early): the run completed; {out_dir / REPORT} has its time table"
        ) from None


@cli.command("python -m booktools.run")
def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(
        prog="python -m booktools.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "notebooks",
        nargs="*",
        metavar="NOTEBOOK",
        help="path, stem or chapter number (default: all)",
    )
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="parameter profile (default: gpu with CUDA, else cpu; "
        "or $AMPBOOK_PROFILE)",
    )
    parser.add_argument(
        "--out", default=str(DEFAULT_OUT), help=f"output folder (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--threads",
        type=cli.positive_int,
        default=None,
        help="CPU threads for torch in each kernel (default: torch's choice)",
    )
    parser.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="override one parameter (VALUE read as YAML); repeatable",
    )
    args = parser.parse_args(argv)
    cli.closed_streams()  # a kernel started with stdout closed dies starting
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    try:
        overrides = {name: parse_value(value) for name, value in args.parameter}
        run_notebooks(
            args.notebooks,
            args.profile,
            args.out,
            threads=args.threads,
            overrides=overrides,
        )
    except RunInterrupted as err:
        cli.say(str(err))
        return cli.stop_code()
    except RunError as err:  # 2: the settings; 1: a notebook that failed
        cli.say(str(err))
        return err.exit_code
    except KeyboardInterrupt:
        cli.say("interrupted before any notebook ran; nothing was written")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
