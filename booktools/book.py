"""Build the HTML book from executed notebooks (Jupyter Book 1.x, never re-executing
them).

    python -m booktools.book [--executed DIR] [--out DIR]

``book/`` (config, table of contents, front matter) is staged with the executed
notebooks of ``DIR`` (default ``build/executed``, written by ``python -m
booktools.run``) under ``chapters/``, then built with Sphinx warnings as errors. The
result is static HTML at ``OUT/_build/html/index.html`` that opens from disk with no
network.

A failed or interrupted run is refused: its ``run_report.json`` names a notebook that
did not finish, a notebook is marked so by ``python -m booktools.run``, or a cell
shows an error. OUT must be a new or empty folder, or one this tool made (it leaves
``OUT/.ampbook-book`` there); the tool replaces only its own staging folder ``OUT/src``
and Jupyter Book's ``OUT/_build``, and refuses an OUT inside the sources (``book/``,
``notebooks/``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ampbook.core import cli
from ampbook.core.paths import BOOK_DIR, NOTEBOOKS_DIR, REPO_ROOT

DEFAULT_EXECUTED = REPO_ROOT / "build" / "executed"
DEFAULT_OUT = REPO_ROOT / "build" / "book"
MARKER = ".ampbook-book"
BOOK_ROOM = 64 * 2**20  # about what the HTML, its sources and a build take


class BookError(RuntimeError, cli.UserError):
    """The inputs or the output folder cannot make a book (exit 2)."""


class BuildFailed(BookError):
    """Jupyter Book ran and failed (exit 1); the message carries its log's tail."""

    exit_code = cli.EXIT_STOPPED


def toc_chapters(book_dir: Path = BOOK_DIR) -> list[str]:
    """The notebook stems the table of contents lists under ``chapters/``."""
    toc = yaml.safe_load((book_dir / "_toc.yml").read_text())
    files = [entry["file"] for entry in toc.get("chapters", [])]
    for part in toc.get("parts", []):
        files += [entry["file"] for entry in part.get("chapters", [])]
    return [f.split("/", 1)[1] for f in files if f.startswith("chapters/")]


def _build_section(report: dict) -> str:
    from ampbook.core.page import md_table_text

    rows = [
        (n["name"], n["status"], n["executed_cells"], n["seconds"])
        for n in report["notebooks"]
    ]
    total = sum(n["seconds"] for n in report["notebooks"])
    env = report.get("environment", {})
    lines = [
        "",
        "## How this copy was built",
        "",
        f"The notebooks of this copy were executed with the `{report['profile']}` "
        "profile"
        + (
            f" on {env.get('device_name')} ({env.get('device')}), torch "
            f"{env.get('torch')}"
            if env
            else ""
        )
        + f"; they took {total:.0f} s in all.",
        "",
        md_table_text(
            rows,
            ["notebook", "status", "code cells run", "seconds"],
            [None, None, None, ".1f"],
        ),
        "",
    ]
    return "\n".join(lines)


def check_executed(executed: Path, book_dir: Path = BOOK_DIR) -> None:
    """Refuse a folder of executed notebooks that is missing a chapter or holds a run
    that failed: a notebook the run report or the notebook's own mark says did not
    finish, or a cell with an error output (one not tagged ``raises-exception``)."""
    import nbformat

    from booktools.run import REPORT, RunError, load_run_report, run_mark

    executed = Path(executed)
    again = f"run `python -m booktools.run --out {executed}` again"
    if not executed.is_dir():
        raise BookError(f"no folder of executed notebooks at {executed}; {again}")
    chapters = toc_chapters(book_dir)
    missing = [s for s in chapters if not (executed / f"{s}.ipynb").exists()]
    if missing:
        raise BookError(f"executed notebooks missing in {executed}: {missing}; {again}")
    report_file = executed / REPORT
    entries = {}
    if report_file.exists():
        try:
            report = load_run_report(report_file)
        except RunError as err:
            raise BookError(f"{err}; {again}") from None
        entries = {n["name"]: n for n in report["notebooks"]}
        bad = [
            (n["name"], n["status"])
            for n in report["notebooks"]
            if n["status"] != "ok" and n["name"] in chapters
        ]
        if bad:
            names = ", ".join(f"{n} ({status})" for n, status in bad)
            raise BookError(
                f"the run in {executed} did not finish: {names}; fix it and {again}"
            )
    for stem in chapters:
        path = executed / f"{stem}.ipynb"
        mark = run_mark(path)
        status = mark.get("status")
        if status is None:  # a run killed before it marked its notebook
            raise BookError(
                f"{path} carries no mark of a finished run (a run killed while "
                f"executing it leaves it so); {again}"
            )
        if status != "complete":
            raise BookError(
                f"{path} is from a run that did not finish (marked {status}); {again}"
            )
        if report_file.exists():
            entry = entries.get(stem)
            if entry is None or entry["run"] != mark.get("run"):
                raise BookError(
                    f"{report_file} does not describe {path} (it is from another run "
                    f"of the notebooks); {again}, or delete {report_file}"
                )
        nb = nbformat.read(path, as_version=4)
        for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
            if "raises-exception" in cell.get("metadata", {}).get("tags", []):
                continue
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    raise BookError(
                        f"{path} shows an error in a cell ({out.get('ename')}: "
                        f"{str(out.get('evalue', '')).splitlines()[:1]}); the book "
                        f"would print it. Fix the notebook and {again}"
                    )


def check_out(out: Path) -> Path:
    """The output folder, resolved: new, empty, or made by this tool (its marker, or the
    ``build.log`` and ``src/_toc.yml`` of a build made before the marker existed)."""
    out = Path(out).expanduser().resolve()
    for sources in (BOOK_DIR, NOTEBOOKS_DIR):
        if out == sources or sources in out.parents:
            raise BookError(
                f"--out {out} is inside {sources}, the book's sources; use another "
                f"folder (default {DEFAULT_OUT})"
            )
    if out == REPO_ROOT or out in REPO_ROOT.parents:
        raise BookError(
            f"--out {out} holds the repository; use a folder of its own "
            f"(default {DEFAULT_OUT})"
        )
    if out.exists() and not out.is_dir():
        raise BookError(f"--out {out} is a file; give a folder")
    try:  # long names, a file in the way, read-only, room for the HTML
        cli.check_output_dir(out, "--out", size=BOOK_ROOM)
    except cli.UserError as err:
        raise BookError(str(err)) from None
    if out.is_dir() and any(out.iterdir()):
        ours = (out / MARKER).exists() or (
            (out / "build.log").is_file() and (out / "src" / "_toc.yml").is_file()
        )
        if not ours:
            raise BookError(
                f"--out {out} holds files this tool did not make; it replaces "
                "OUT/src and OUT/_build, so give a new or empty folder"
            )
    return out


def stage(executed: Path, staging: Path, book_dir: Path = BOOK_DIR) -> Path:
    """Copy the book sources and the executed notebooks into a fresh staging folder
    (replacing an older one only when it is this tool's: the caller checks
    ``check_out``)."""
    executed = Path(executed)
    check_executed(executed, book_dir)
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(
        book_dir, staging, ignore=shutil.ignore_patterns("_build", "chapters")
    )
    chapters = staging / "chapters"
    chapters.mkdir()
    for stem in toc_chapters(book_dir):
        stage_notebook(executed / f"{stem}.ipynb", chapters / f"{stem}.ipynb")
    report_file = executed / "run_report.json"
    report: dict = {}
    if report_file.exists():
        from booktools.run import load_run_report

        report = load_run_report(report_file)  # checked by check_executed
        chapters = set(toc_chapters(book_dir))
        report["notebooks"] = [n for n in report["notebooks"] if n["name"] in chapters]
    if report and (staging / "reproducing.md").exists():
        with open(staging / "reproducing.md", "a") as f:
            f.write(_build_section(report))
    stage_reader_copies(executed, staging, report.get("profile"), book_dir)
    return staging


def stage_notebook(executed: Path, staged: Path) -> None:
    """Copy an executed notebook for the book, with papermill's injected-parameters
    cell tagged ``remove-cell``: the book shows the chapter's lesson, and the profile's
    values are on the environment line and the reproducing page."""
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    for cell in nb.cells:
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, staged)


def stage_reader_copies(
    executed: Path, staging: Path, profile: str | None, book_dir: Path = BOOK_DIR
) -> list[Path]:
    """Each chapter's reader's copy (``booktools.reader``), made afresh from the
    executed notebook into the staged ``_static/notebooks/``, where the download
    button points (``booktools.sphinx_book``)."""
    from booktools import reader
    from booktools.sphinx_book import NOTEBOOKS

    try:
        return reader.write_reader_copies(
            executed,
            toc_chapters(book_dir),
            staging / NOTEBOOKS,
            book_dir=book_dir,
            profile=profile,
        )
    except reader.ReaderCopyError as err:
        raise BookError(
            f"the reader's copy of {err} (the book's download of that chapter); fix "
            "the reference in the notebook"
        ) from None


def build(
    executed: Path | str = DEFAULT_EXECUTED, out: Path | str = DEFAULT_OUT, log=print
) -> Path:
    """Stage and build; return the path of ``index.html``. Raises BookError on any
    warning."""
    out = check_out(out)
    executed = Path(executed).expanduser().resolve()
    check_executed(executed)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text(
        "made by python -m booktools.book; it replaces src/ and _build/\n"
    )
    staging = stage(executed, out / "src")
    cmd = [
        str(Path(sys.executable).with_name("jupyter-book")),
        "build",
        str(staging),
        "--path-output",
        str(out),
        "--warningiserror",
        "--nitpick",
        "--keep-going",
        "--all",
    ]
    log("building the book: jupyter-book " + " ".join(cmd[1:]))
    start = time.perf_counter()
    proc = run_ended(cmd)
    log_file = out / "build.log"
    log_file.write_text(proc.stdout + "\n" + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        raise BuildFailed(
            f"jupyter-book build failed (exit {proc.returncode}); full log at "
            f"{log_file}\n{tail}"
        )
    index = out / "_build" / "html" / "index.html"
    if not index.exists():
        raise BuildFailed(
            f"the build reported success but {index} is missing; log at {log_file}"
        )
    log(f"book built in {time.perf_counter() - start:.0f} s: {index}")
    return index


def run_ended(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run ``cmd`` (Jupyter Book and the Sphinx it starts) in its own process group,
    capturing its output; Ctrl-C or SIGTERM here ends the whole group before the
    interruption goes on: nothing is left running."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate()
    except BaseException:
        end_group(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def end_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM to ``proc``'s process group; SIGKILL to whatever of it is left after
    ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        proc.poll()  # reap the leader, so that it does not count as alive
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


def build_parser() -> cli.ArgumentParser:
    """The command's options."""
    parser = cli.ArgumentParser(
        prog="python -m booktools.book",
        description="Build the HTML book from executed notebooks (Jupyter Book, "
        "never re-executing them), with Sphinx warnings as errors. A failed or "
        "interrupted run is refused.",
        formatter_class=cli.HelpFormatter,
    )
    parser.add_argument(
        "--executed",
        default=str(DEFAULT_EXECUTED),
        metavar="DIR",
        help="folder of executed notebooks (python -m booktools.run writes it)",
    )
    parser.add_argument(
        "--out",
        default=str(DEFAULT_OUT),
        metavar="DIR",
        help="output folder: new, empty, or one this tool made; the book is "
        "DIR/_build/html/index.html",
    )
    return parser


@cli.command("python -m booktools.book")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        index = build(args.executed, args.out)
    except BookError as err:
        message, _, tail = str(err).partition("\n")
        if tail:  # the build log's last lines first, then the one error line
            print(tail, file=sys.stderr)
        cli.say(message)
        return err.exit_code  # 2: the inputs or --out; 1: the build failed
    except KeyboardInterrupt:
        print(
            f"error: interrupted ({cli.signal_name()}); the book was not built",
            file=sys.stderr,
        )
        return cli.stop_code()
    print(f"Open the book: file://{index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
