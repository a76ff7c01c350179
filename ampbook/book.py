"""Build the HTML book from executed notebooks (Jupyter Book 1.x, never re-executing them).

    python -m ampbook.book [--executed DIR] [--out DIR]

``book/`` (config, table of contents, front matter) is staged with the executed notebooks of
``DIR`` (default ``build/executed``, written by ``python -m ampbook.run``) under
``chapters/``, then built with Sphinx warnings as errors. The result is static HTML at
``OUT/_build/html/index.html`` that opens from disk with no network.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from .paths import BOOK_DIR, REPO_ROOT

DEFAULT_EXECUTED = REPO_ROOT / "build" / "executed"
DEFAULT_OUT = REPO_ROOT / "build" / "book"


class BookError(RuntimeError):
    pass


def toc_chapters(book_dir: Path = BOOK_DIR) -> list[str]:
    """The notebook stems the table of contents lists under ``chapters/``."""
    toc = yaml.safe_load((book_dir / "_toc.yml").read_text())
    files = [entry["file"] for entry in toc.get("chapters", [])]
    for part in toc.get("parts", []):
        files += [entry["file"] for entry in part.get("chapters", [])]
    return [f.split("/", 1)[1] for f in files if f.startswith("chapters/")]


def _build_section(report: dict) -> str:
    from .plots import md_table_text

    rows = [(n["name"], n["status"], n["executed_cells"], n["seconds"]) for n in report["notebooks"]]
    total = sum(n["seconds"] for n in report["notebooks"])
    env = report.get("environment", {})
    lines = [
        "",
        "## How this copy was built",
        "",
        f"The notebooks of this copy were executed with the `{report['profile']}` profile"
        + (f" on {env.get('device_name')} ({env.get('device')}), torch {env.get('torch')}" if env else "")
        + f"; they took {total:.0f} s in all.",
        "",
        md_table_text(rows, ["notebook", "status", "code cells run", "seconds"], [None, None, None, ".1f"]),
        "",
    ]
    return "\n".join(lines)


def stage(executed: Path, staging: Path, book_dir: Path = BOOK_DIR) -> Path:
    """Copy the book sources and the executed notebooks into a fresh staging folder."""
    executed = Path(executed)
    missing = [s for s in toc_chapters(book_dir) if not (executed / f"{s}.ipynb").exists()]
    if missing:
        raise BookError(f"executed notebooks missing in {executed}: {missing}; "
                        f"run `python -m ampbook.run --out {executed}` first")
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(book_dir, staging, ignore=shutil.ignore_patterns("_build", "chapters"))
    chapters = staging / "chapters"
    chapters.mkdir()
    for stem in toc_chapters(book_dir):
        shutil.copy2(executed / f"{stem}.ipynb", chapters / f"{stem}.ipynb")
    report_file = executed / "run_report.json"
    if report_file.exists() and (staging / "reproducing.md").exists():
        report = json.loads(report_file.read_text())
        with open(staging / "reproducing.md", "a") as f:
            f.write(_build_section(report))
    return staging


def build(executed: Path | str = DEFAULT_EXECUTED, out: Path | str = DEFAULT_OUT, log=print) -> Path:
    """Stage and build; return the path of ``index.html``. Raises BookError on any warning."""
    out = Path(out).resolve()
    staging = stage(Path(executed).resolve(), out / "src")
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(staging), "--path-output", str(out),
           "--warningiserror", "--nitpick", "--keep-going", "--all"]
    log("building the book: jupyter-book " + " ".join(cmd[1:]))
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log_file = out / "build.log"
    log_file.write_text(proc.stdout + "\n" + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        raise BookError(f"jupyter-book build failed (exit {proc.returncode}); full log at {log_file}\n{tail}")
    index = out / "_build" / "html" / "index.html"
    if not index.exists():
        raise BookError(f"the build reported success but {index} is missing; log at {log_file}")
    log(f"book built in {time.perf_counter() - start:.0f} s: {index}")
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ampbook.book", description=__doc__.split("\n\n")[0])
    parser.add_argument("--executed", default=str(DEFAULT_EXECUTED), help="folder of executed notebooks")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output folder")
    args = parser.parse_args(argv)
    try:
        index = build(args.executed, args.out)
    except BookError as err:
        print(f"ERROR: {err}", file=sys.stderr)
        return 1
    print(f"Open the book: file://{index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
