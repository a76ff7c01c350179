"""The book-building and data tools under bad input: `booktools.run`, `.book`,
`.bookcheck`, `.bench_step`, `ampbook.evaluate`, `.data synthesize`. A known failure
is one `error:` line, a nonzero exit, and nothing earlier lost."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch
from _cli import one_error

from ampbook import data as data_command
from ampbook import evaluate
from ampbook.core.paths import BOOK_DIR, NOTEBOOKS_DIR, REPO_ROOT
from ampbook.segmentation import cityscapes as data
from ampbook.segmentation import synthetic
from booktools import book, bookcheck, run
from booktools.bench_step import main as bench_step_main

NOTEBOOK = """# %% [markdown]
# # A test notebook

# %% tags=["parameters"]
n = 3
label = "x"

# %%
print(n * 2, label)
{extra}
"""


def _notebook(tmp_path: Path, name: str, extra: str = "") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(NOTEBOOK.format(extra=extra))
    return path


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _sources() -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(NOTEBOOKS_DIR.iterdir()) if p.is_file()}


# --- booktools.run ----------------------------------------------------------------


def test_run_refuses_an_output_folder_in_the_sources_or_a_file(tmp_path, capsys):
    before = _sources()
    for out in (NOTEBOOKS_DIR, NOTEBOOKS_DIR / "sub", BOOK_DIR):
        assert run.main(["--profile", "smoke", "--out", str(out), "1"]) == 2
        one_error(capsys.readouterr().err, "the book's sources")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert run.main(["--profile", "smoke", "--out", str(blocker), "1"]) == 2
    one_error(capsys.readouterr().err, "is a file")
    assert _sources() == before and blocker.read_text() == "x"
    assert not (NOTEBOOKS_DIR / "run_report.json").exists()
    # A missing folder above --out is refused, as the doctor's --json refuses one
    # above its file; --out itself may be new.
    deep = tmp_path / "missing" / "x"
    assert run.main(["--profile", "smoke", "--out", str(deep), "1"]) == 2
    one_error(capsys.readouterr().err, f"folder {deep.parent} does not exist")
    assert not deep.parent.exists()
    assert run.check_out_dir(tmp_path / "new") == tmp_path / "new"
    # A misspelt notebook: the nearest one, not all ten (a 225-column line)
    typo = ["--profile", "smoke", "--out", str(tmp_path / "new"), "03_amp_trainin"]
    assert run.main(typo) == 2
    line = one_error(capsys.readouterr().err, "did you mean 03_amp_training?")
    assert "01_floating_point" not in line


def test_run_parameter_overrides_are_yaml_and_unknown_names_are_refused(tmp_path):
    source = _notebook(tmp_path, "params")
    out = tmp_path / "out"
    proc = _cli(
        "booktools.run",
        "--profile",
        "smoke",
        "--out",
        str(out),
        "-p",
        "n",
        "21",
        "-p",
        "label",
        "[a, 1]",
        str(source),
    )
    assert proc.returncode == 0, proc.stderr
    nb = nbformat.read(out / "params.ipynb", as_version=4)
    printed = [
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    ]
    assert "42 ['a', 1]\n" in printed  # YAML: an int and a list
    assert nb.metadata["ampbook"]["status"] == "complete"
    report = json.loads((out / "run_report.json").read_text())
    assert report["notebooks"][0]["parameters"] == {"n": 21, "label": ["a", 1]}
    # Quiet: progress and the time table with the run's total, no transport warning.
    assert "without encryption" not in proc.stderr and "IPKernelApp" not in proc.stderr
    assert "run time" in proc.stdout and report["seconds"] > 0

    before = (out / "params.ipynb").read_bytes()
    proc = _cli(
        "booktools.run",
        "--profile",
        "smoke",
        "--out",
        str(out),
        "-p",
        "m",
        "1",
        str(source),
    )
    assert proc.returncode == 2  # the settings
    one_error(
        proc.stderr, "-p m", "no selected notebook has a parameter 'm'", "label, n"
    )
    assert (out / "params.ipynb").read_bytes() == before


def test_run_failure_is_one_line_and_marks_the_notebook(tmp_path, capsys):
    source = _notebook(
        tmp_path, "bad", extra='\n# %%\nraise ValueError("deliberate\\nsecond")\n'
    )
    out = tmp_path / "out"
    assert run.main(["--profile", "smoke", "--out", str(out), str(source)]) == 1
    one_error(
        capsys.readouterr().err,
        "bad failed in code cell 3",
        "ValueError: deliberate; the partly executed notebook",
        "marked failed",
    )
    assert run.run_status(out / "bad.ipynb") == "failed"
    report = json.loads((out / "run_report.json").read_text())
    assert report["notebooks"][0]["status"] == "FAILED"


def test_run_keeps_an_earlier_complete_notebook_when_the_new_run_fails(
    tmp_path, capsys
):
    source = _notebook(tmp_path, "bad", extra='\n# %%\nraise ValueError("late")\n')
    out = tmp_path / "out"
    out.mkdir()
    good = out / "bad.ipynb"  # an earlier run's complete notebook and its report
    nbformat.write(nbformat.v4.new_notebook(), good)
    run.mark(good, "complete", run_id="earlier")
    entry = {"name": "bad", "status": "ok", "seconds": 1.0, "executed_cells": 1}
    report = {"profile": "smoke", "notebooks": [dict(entry, run="earlier")]}
    (out / "run_report.json").write_text(json.dumps(report))
    before = {p: p.read_bytes() for p in (good, out / "run_report.json")}
    # A word where the parameters cell sets a number: refused before any kernel.
    argv = ["--profile", "smoke", "--out", str(out), str(source)]
    assert run.main(["-p", "n", "abc", *argv]) == 2
    one_error(capsys.readouterr().err, "parameter n = 'abc'", "must be a number")
    assert sorted(out.iterdir()) == sorted(before)
    # A failing cell: the failed notebook goes to DIR/new/, the earlier one stays.
    assert run.main(argv) == 1
    one_error(capsys.readouterr().err, f"kept at {out / 'new' / 'bad.ipynb'}")
    assert {p: p.read_bytes() for p in before} == before
    assert run.run_status(out / "new" / "bad.ipynb") == "failed"
    # The notebook's own parameter check (in its kernel) refuses a value: exit 2,
    # nothing written, no time table (the notebook is kept only when it was there).
    check = "class ParameterError(ValueError): pass\n"
    check += "if n < 5:\n    raise ParameterError('n')"
    checked = _notebook(tmp_path, "checked", extra=f"\n# %%\n{check}\n")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert (
        run.main(
            ["-p", "n", "1", "--profile", "smoke", "--out", str(fresh), str(checked)]
        )
        == 2
    )
    err = capsys.readouterr()
    one_error(err.err, "checked: n; change it")
    assert list(fresh.iterdir()) == [] and "total" not in err.out


def test_run_stops_cleanly_when_its_output_reader_goes_away(tmp_path):
    """``| head -1``: the print after the first notebook meets a broken pipe; the
    run stops there as at Ctrl-C, that notebook complete and reported, exit 141."""
    source = _notebook(tmp_path, "piped")
    out = tmp_path / "out"
    lines: list[str] = []

    def log(text: str) -> None:
        if "done in" in text:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        lines.append(text)

    with pytest.raises(run.OutputClosed, match="stopped after 1 of 1 notebooks") as err:
        run.run_notebooks([str(source)], "smoke", out, log=log)
    assert err.value.exit_code == 141 and len(lines) == 2  # nothing after the pipe
    assert run.run_status(out / "piped.ipynb") == "complete"
    report = json.loads((out / "run_report.json").read_text())
    assert [n["status"] for n in report["notebooks"]] == ["ok"]


def test_run_interrupted_marks_the_partial_notebook(tmp_path):
    source = _notebook(tmp_path, "slow", extra="\n# %%\nimport time\ntime.sleep(120)\n")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "booktools.run",
            "--profile",
            "smoke",
            "--out",
            str(out),
            str(source),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    # papermill saves the notebook after each cell: once cell 2 printed, cell 3 sleeps.
    while time.monotonic() < deadline:
        try:
            nb = nbformat.read(out / "slow.ipynb", as_version=4)
            if any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
                break
        except Exception:  # not written yet, or half-written
            pass
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    one_error(err, "slow was interrupted (Ctrl-C) in code cell 3", "marked interrupted")
    assert run.run_status(out / "slow.ipynb") == "interrupted"
    report = json.loads((out / "run_report.json").read_text())
    assert report["notebooks"][0]["status"] == "STOPPED"


# --- booktools.book ---------------------------------------------------------------


RUN = "test-run"


@pytest.fixture
def executed(tmp_path) -> Path:
    """A folder shaped like a finished run: each chapter (unexecuted), a report."""
    folder = tmp_path / "executed"
    folder.mkdir()
    names = book.toc_chapters()
    for stem in names:
        shutil.copy(NOTEBOOKS_DIR / f"{stem}.ipynb", folder / f"{stem}.ipynb")
        run.mark(folder / f"{stem}.ipynb", "complete", run_id=RUN)
    report = {
        "profile": "smoke",
        "notebooks": [
            {"name": n, "status": "ok", "seconds": 1.0, "executed_cells": 1, "run": RUN}
            for n in names
        ],
    }
    (folder / "run_report.json").write_text(json.dumps(report))
    return folder


def _book(capsys, *argv) -> tuple[int, str]:
    code = book.main(list(argv))
    return code, capsys.readouterr().err


def test_book_refuses_a_failed_run(executed, tmp_path, capsys):
    first = book.toc_chapters()[0]
    report = json.loads((executed / "run_report.json").read_text())
    report["notebooks"][0]["status"] = "FAILED"
    (executed / "run_report.json").write_text(json.dumps(report))
    out = tmp_path / "book"
    code, err = _book(capsys, "--executed", str(executed), "--out", str(out))
    assert code == 2
    one_error(err, "did not finish", f"{first} (FAILED)", "python -m booktools.run")
    assert not out.exists()

    report["notebooks"][0]["status"] = "ok"
    (executed / "run_report.json").write_text(json.dumps(report))
    run.mark(executed / f"{first}.ipynb", "interrupted", run_id=RUN)
    code, err = _book(capsys, "--executed", str(executed), "--out", str(out))
    assert code == 2 and "marked interrupted" in one_error(err)

    run.mark(executed / f"{first}.ipynb", "complete", run_id=RUN)
    nb = nbformat.read(executed / f"{first}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.outputs = [
        nbformat.v4.new_output(
            "error",
            ename="ZeroDivisionError",
            evalue="division by zero",
            traceback=["..."],
        )
    ]
    nbformat.write(nb, executed / f"{first}.ipynb")
    code, err = _book(capsys, "--executed", str(executed), "--out", str(out))
    assert code == 2
    one_error(err, "shows an error in a cell", "ZeroDivisionError")
    assert not out.exists()


def test_book_deletes_only_what_it_made(executed, tmp_path, capsys):
    foreign = tmp_path / "mine"
    (foreign / "src").mkdir(parents=True)
    (foreign / "src" / "notes.txt").write_text("not the book's")
    code, err = _book(capsys, "--executed", str(executed), "--out", str(foreign))
    assert code == 2
    one_error(err, "holds files this tool did not make")
    assert (foreign / "src" / "notes.txt").read_text() == "not the book's"
    for inside in (BOOK_DIR, NOTEBOOKS_DIR, REPO_ROOT):
        code, err = _book(capsys, "--executed", str(executed), "--out", str(inside))
        assert code == 2 and "error:" in one_error(err)
    # A folder the tool made (its marker) may be rebuilt: staging replaces src/ only.
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / book.MARKER).write_text("")
    assert book.check_out(ours) == ours.resolve()


# --- bookcheck, evaluate, bench_step --------------------------------------------------


def test_bookcheck_on_a_missing_or_empty_folder(tmp_path, capsys):
    assert bookcheck.main([str(tmp_path / "nowhere")]) == 2
    one_error(capsys.readouterr().err, "is not a folder")
    (tmp_path / "empty").mkdir()
    assert bookcheck.main([str(tmp_path / "empty")]) == 2
    one_error(capsys.readouterr().err, "no HTML pages", "python -m booktools.book")


@pytest.fixture(scope="module")
def val_root(tmp_path_factory) -> Path:
    return synthetic.synthesize(
        tmp_path_factory.mktemp("eval") / "ds", 1, 2, height=32, width=64
    )


def test_evaluate_prediction_folder_is_a_file(val_root, tmp_path, capsys):
    blocker = tmp_path / "preds"
    blocker.write_text("x")
    assert evaluate.main([str(blocker), "--data-root", str(val_root)]) == 2
    one_error(capsys.readouterr().err, "is a file")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_evaluate_on_cuda_without_cuda(val_root, tmp_path, capsys):
    (tmp_path / "preds").mkdir()
    assert (
        evaluate.main(
            [str(tmp_path / "preds"), "--data-root", str(val_root), "--device", "cuda"]
        )
        == 2
    )
    one_error(capsys.readouterr().err, "--device cuda", "no CUDA")


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--batch-size", "0"], ["--batch-size", "must be at least 1"]),
        (["--height", "0"], ["--height", "at least 1"]),
        (["--rounds", "0"], ["--rounds"]),
        (["--height", "12"], ["--height/--width", "multiple of 8"]),
        (
            ["--low-width", "8", "--low-height", "8"],
            ["--low-height/--low-width", "too small"],
        ),
        (["--device", "nonsense"], ["nonsense"]),
    ],
)
def test_bench_step_checks_its_arguments_before_measuring(
    argv, words, tmp_path, capsys
):
    assert bench_step_main([*argv, "--json", str(tmp_path / "r.json")]) == 2
    out = capsys.readouterr()
    one_error(out.err, *words)
    assert (
        "runner step vs bare loop" not in out.out and not (tmp_path / "r.json").exists()
    )


# --- data synthesize ------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--height", "8"], ["at least 16x16"]),
        (["--seed", "-1"], ["--seed", "between 0 and"]),
        (["--train", "0", "--val", "0"], ["positive number of images"]),
    ],
)
def test_synthesize_bad_arguments_write_nothing_and_a_retry_works(
    argv, words, tmp_path, capsys
):
    root = tmp_path / "ds"
    base = [
        "synthesize",
        "--root",
        str(root),
        "--train",
        "2",
        "--val",
        "1",
        "--height",
        "32",
        "--width",
        "64",
    ]
    assert data_command.main([*base, *argv]) == 2
    one_error(capsys.readouterr().err, *words)
    assert not root.exists()
    assert data_command.main(base) == 0
    assert (root / data.SYNTHETIC_MARKER).exists()


def test_synthesize_root_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert (
        data_command.main(
            [
                "synthesize",
                "--root",
                str(blocker),
                "--train",
                "1",
                "--val",
                "1",
                "--height",
                "32",
                "--width",
                "64",
            ]
        )
        == 2
    )
    one_error(capsys.readouterr().err, "is a file")
    assert blocker.read_text() == "x"


def test_synthesize_stopped_half_way_leaves_nothing_that_blocks_a_retry(
    tmp_path, capsys, monkeypatch
):
    root = tmp_path / "ds"
    real, calls = synthetic.synthetic_pair, []

    def failing(*args, **kw):  # the disk fills up after the first image
        calls.append(args)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kw)

    argv = [
        "synthesize",
        "--root",
        str(root),
        "--train",
        "3",
        "--val",
        "1",
        "--height",
        "32",
        "--width",
        "64",
    ]
    monkeypatch.setattr(synthetic, "synthetic_pair", failing)
    assert data_command.main(argv) == 1
    one_error(capsys.readouterr().err, "No space left", "run it again")
    assert not (root / "leftImg8bit").exists() and not (root / "gtFine").exists()
    monkeypatch.setattr(synthetic, "synthetic_pair", real)
    assert data_command.main(argv) == 0
    assert len(list((root / "leftImg8bit").rglob("*.png"))) == 4
