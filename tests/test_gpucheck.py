"""python -m ampbook.gpucheck: the dry run writes the file set; budgets cut stages
short."""

import json
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from ampbook.gpucheck import PLANS, STAGE_NAMES, parse_stages, select_stages, slug
from ampbook.paths import REPO_ROOT
from ampbook.results import load_results_dir

FILE_SET = {"report.json", "gpucheck.log", "results.tar.gz", "notebooks.tar.gz"}


def gpucheck(*args, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "ampbook.gpucheck", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def check_file_set(out: Path) -> dict:
    files = list(out.iterdir())
    assert {f.name for f in files} == FILE_SET
    assert len(files) <= 8
    for f in files:
        assert f.is_file() and re.fullmatch(r"[A-Za-z0-9._-]+", f.name)
        assert f.stat().st_size <= 16 * 2**20
    return json.loads((out / "report.json").read_text())


def dry_run(stages: tuple[str, ...], out: Path) -> tuple[dict, float]:
    start = time.monotonic()
    done = gpucheck(
        "--stages", ",".join(stages), "--dry-run", "--out", str(out), timeout=2400
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return check_file_set(out), elapsed


def extract_results(out: Path, to: Path):
    with tarfile.open(out / "results.tar.gz") as tar:
        tar.extractall(to, filter="data")
    return load_results_dir(to)


# The suite dry-runs each plan's stages but one or two notebooks: every notebook stage
# is the same code with another chapter (``stage_notebook``), and the book's own smoke
# execution runs every chapter. The whole plans are dry-run before a GPU session
# (DEVELOPING.md, "The GPU check on a lent machine": ``make gpucheck-dry``).
PLAN_A_DRY = tuple(n for n in PLANS["A"] if n != "nb06")
PLAN_B_DRY = ("wheels", "env", "data", "nb02", "nb03", "loader")


def test_the_plans_and_what_the_suite_dry_runs_of_them():
    assert PLANS["A"] == (
        "wheels", "env", "data", "tests", "profile", "ladder", "compile", "nb06"
    )  # fmt: skip
    assert PLANS["B"] == (
        "wheels", "env", "data", "nb01", "nb02", "nb03", "loader", "nb04", "nb05"
    )  # fmt: skip
    assert set(PLAN_B_DRY) <= set(PLANS["B"]) and set(PLAN_A_DRY) <= set(PLANS["A"])
    # every notebook a plan runs is a chapter the book's smoke execution runs
    assert {n for n in PLANS["A"] + PLANS["B"] if n.startswith("nb")} <= {
        f"nb{p.stem[:2]}" for p in (REPO_ROOT / "notebooks").glob("0*.py")
    }


@pytest.fixture(scope="module")
def plan_a(tmp_path_factory):
    """One dry run of plan A's stages but chapter 6, shared by the assertions."""
    out = tmp_path_factory.mktemp("plan-a") / "out"
    report, elapsed = dry_run(PLAN_A_DRY, out)
    return out, report, elapsed


@pytest.fixture(scope="module")
def plan_b(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan-b") / "out"
    report, elapsed = dry_run(PLAN_B_DRY, out)
    return out, report, elapsed


def _statuses(report: dict) -> dict:
    return {s["name"]: s["status"] for s in report["stages"]}


@pytest.mark.slow
def test_plan_a_dry_run_runs_its_stages_and_keeps_the_ladder(plan_a, tmp_path):
    out, report, elapsed = plan_a
    assert report["finished"] and report["dry_run"] and report["plan"] is None
    assert report["cut_short"] == [] and report["elapsed_s"] <= elapsed
    status = _statuses(report)
    assert {n for n, st in status.items() if st != "not selected"} == set(PLAN_A_DRY)
    assert status["wheels"] == "skipped"
    assert all(status[n] == "ok" for n in PLAN_A_DRY if n != "wheels"), status
    assert all(s["writes"] for s in report["stages"] if s["name"] in PLAN_A_DRY[1:])
    log = (out / "gpucheck.log").read_text()
    assert "TORCH_COMPILE_DISABLE=1" in log and "done in" in log
    assert "nothing compiled, no compile cache to archive" in log
    with tarfile.open(out / "notebooks.tar.gz") as tar:
        assert tar.getnames() == []
    rs = extract_results(out, tmp_path / "results")
    assert rs.ignored == [] and rs.train_runs == []
    assert len(rs.layer_profiles) == 4  # fp32 and amp-fp16, NCHW and channels_last
    assert sorted(bool(p.record["channels_last"]) for p in rs.layer_profiles) == [
        False,
        False,
        True,
        True,
    ]
    (ladder,) = rs.ladders
    assert ladder.complete and ladder.record["settings"]["isolate"] == "precision"
    cells = {(c.rung, c.mode): c.ok for c in ladder.cells}
    assert cells == {
        (0, "fp32-tf32"): True,
        (0, "fp32"): True,
        (4, "fp32-tf32"): True,
        (4, "fp32"): True,
        (5, "fp32-tf32"): True,  # the compile stage, merged into the same file
    }
    assert sorted(report["results"]) == sorted(
        p.name for p in (tmp_path / "results").iterdir()
    )


@pytest.mark.slow
def test_plan_b_dry_run_runs_the_chapters_and_the_loader(plan_b, tmp_path):
    out, report, elapsed = plan_b
    assert report["finished"] and report["cut_short"] == []
    status = _statuses(report)
    assert {n for n, st in status.items() if st != "not selected"} == set(PLAN_B_DRY)
    assert all(status[n] == "ok" for n in PLAN_B_DRY if n != "wheels"), status
    with tarfile.open(out / "notebooks.tar.gz") as tar:
        assert sorted(tar.getnames()) == [
            "02_tensor_cores.ipynb",
            "03_amp_training.ipynb",
        ]
    rs = extract_results(out, tmp_path / "results")
    assert rs.ignored == [] and rs.ladders == []
    assert rs.train_runs and len(rs.matmul_sweeps) == 1 and len(rs.loader_sweeps) == 1
    assert all(
        p.name.startswith("train_")
        for p in (tmp_path / "results").iterdir()
        if json.loads(p.read_text())["schema"] == "ampbook.train"
    )


def test_a_process_over_its_budget_is_stopped_with_its_children(tmp_path):
    from ampbook.gpucheck import Check

    check = Check(tmp_path / "out", 60, True, ("env",))
    code = (
        "import subprocess, sys, time; p = subprocess.Popen(['sleep', '120']); "
        "print(p.pid, flush=True); time.sleep(120)"
    )
    start = time.monotonic()
    status, detail = check.run_process([sys.executable, "-c", code], timeout=3)
    assert (status, detail) == ("cut short", "stopped after 3 s, its time budget")
    assert time.monotonic() - start < 15
    grandchild = int((tmp_path / "out" / "gpucheck.log").read_text().split()[0])
    time.sleep(0.5)
    stat = Path(f"/proc/{grandchild}/stat")  # gone, or a zombie nobody reaped yet
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert check.run_process(
        [sys.executable, "-c", "print('x'); raise SystemExit(3)"], 10
    ) == ("error", "exit 3: x")
    check.log_file.close()


def test_a_stage_over_its_budget_is_reported_cut_short(tmp_path, monkeypatch):
    from ampbook import gpucheck

    def slow_child(self, name, timeout):
        return self.run_process(
            [sys.executable, "-c", "import time; time.sleep(60)"], timeout
        )

    monkeypatch.setattr(gpucheck.Check, "run_child", slow_child)
    out = tmp_path / "out"
    start = time.monotonic()
    code = gpucheck.Check(out, 25, True, ("wheels", "env", "nb04")).run()
    elapsed = time.monotonic() - start
    assert code == 1
    report = check_file_set(out)
    status = {s["name"]: s["status"] for s in report["stages"]}
    assert status["env"] == "cut short" and status["nb04"] == "skipped"
    assert report["cut_short"] == ["env"] and status["nb03"] == "not selected"
    assert elapsed < 25  # inside the budget: env got what was left, nb04 nothing
    assert "only" in next(s["detail"] for s in report["stages"] if s["name"] == "nb04")


def test_bad_arguments_are_one_line_errors(tmp_path):
    for args, message in (
        (["--dry-run"], "--out DIR is required"),
        (["--out", str(tmp_path), "--stages", "nb09"], "unknown stage(s) nb09"),
        (["--out", str(tmp_path), "--budget-s", "5"], "--budget-s must be more"),
        (["--out", str(tmp_path)], "give --plan A or --plan B"),
        (["--out", str(tmp_path), "--plan", "C"], "unknown plan 'C'"),
    ):
        done = gpucheck(*args, timeout=60)
        assert (
            done.returncode == 2
            and done.stderr.startswith("error:")
            and message in done.stderr
        )
    afile = tmp_path / "f"
    afile.write_text("x")
    done = gpucheck("--plan", "A", "--out", str(afile), timeout=60)
    assert done.returncode == 2 and "not a folder" in done.stderr


def test_each_plans_budgets_fit_one_call_and_two_calls_fit_a_lease():
    from ampbook.gpucheck import DEFAULT_BUDGET_S, RESERVE_S, STAGES

    budget = {s.name: s.budget_s for s in STAGES}
    assert DEFAULT_BUDGET_S <= 330
    for plan, names in PLANS.items():
        assert sum(budget[n] for n in names) <= DEFAULT_BUDGET_S - RESERVE_S, plan
    # a 15-minute lease: ~100 s to start, two calls with ~30 s of start-up and packing
    assert 100 + 2 * (DEFAULT_BUDGET_S + 30) <= 15 * 60
    assert set(PLANS["A"]) | set(PLANS["B"]) | {"nb07"} == set(STAGE_NAMES)


def test_check_profile_sets_only_parameters_of_each_checked_notebook():
    """The check's own profile covers every notebook it runs, with names the notebooks'
    parameters cells define (the runner would reject others, but only on the GPU)."""
    import yaml

    from ampbook.build.run import parameters_cell, read_source
    from ampbook.gpucheck import CHECK_PROFILE, NOTEBOOKS
    from ampbook.paths import NOTEBOOKS_DIR, PROFILES_FILE

    check = yaml.safe_load(PROFILES_FILE.read_text())[CHECK_PROFILE]
    for stem in NOTEBOOKS.values():
        assert stem in check, f"{CHECK_PROFILE} has no section for {stem}"
        _, names = parameters_cell(read_source(NOTEBOOKS_DIR / f"{stem}.py"))
        assert set(check[stem]) <= set(names), stem


def test_a_stage_that_ends_early_leaves_its_time_to_the_next(tmp_path):
    """Budgets are shares of what is left: the last stage gets all the time the stages
    before it left, however long they took (on a loaded machine env may take long)."""
    from ampbook.gpucheck import RESERVE_S

    # on a CPU the profile stage ends at once (it needs CUDA): its budget is the point
    done = gpucheck(
        "--out", str(tmp_path), "--budget-s", "60", "--stages", "env,profile",
        timeout=200,
    )  # fmt: skip
    report = json.loads((tmp_path / "report.json").read_text())
    by = {s["name"]: s for s in report["stages"]}
    spent = by["wheels"]["seconds"] + by["env"]["seconds"]
    assert by["profile"]["status"] == "error" and "CUDA" in by["profile"]["detail"]
    assert by["profile"]["budget_s"] == pytest.approx(60 - RESERVE_S - spent, abs=5), (
        done.stdout,
        by,
    )
    assert by["tests"]["status"] == "not selected"


def test_stage_selection_and_slug():
    assert parse_stages(None) == STAGE_NAMES
    assert parse_stages("nb05,profile") == ("wheels", "env", "profile", "nb05")
    with pytest.raises(ValueError, match="unknown stage"):
        parse_stages("nb3")
    assert select_stages("a", None) == PLANS["A"]
    assert select_stages("B", "nb01") == ("wheels", "env", "nb01")  # --stages wins
    assert slug("NVIDIA H200") == "h200"
    assert slug("NVIDIA GeForce RTX 3070") == "rtx-3070"
    assert slug("Fixture GPU (fictitious)") == "fixture-gpu-fictitious"


def test_sizing_figures_order():
    from ampbook.gpucheck import sizing

    step = {(key, label): s for key, label, s in sizing(("fp32", "amp-fp16"))}
    h200, rtx = "h200-sxm", "rtx3070-desktop"
    assert (
        step[h200, "fp32, TF32 off"]
        > step[h200, "fp32, TF32 on"]
        > step[h200, "amp-fp16"]
    )
    # the RTX 3070's TF32 peak is its fp32 peak: TF32 changes nothing there
    assert step[rtx, "fp32, TF32 off"] == pytest.approx(step[rtx, "fp32, TF32 on"])
    assert all(
        step[rtx, label] > 5 * step[h200, label] for _, label in step if _ == h200
    )


def test_sigterm_stops_the_stage_and_writes_the_report(tmp_path):
    import signal

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ampbook.gpucheck",
            "--dry-run",
            "--stages",
            "nb04",
            "--out",
            str(out),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(8)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, stdout[-2000:]
    report = check_file_set(out)
    assert report["finished"] and len(report["cut_short"]) == 1
    stage = next(s for s in report["stages"] if s["status"] == "cut short")
    assert "SIGTERM" in stage["detail"]


def test_the_tests_stage_collects_every_file_with_a_cuda_test():
    from ampbook.gpucheck import cuda_test_files

    files = cuda_test_files()
    names = {f.name for f in files}
    assert "test_bench_ladder.py" in names and "test_gpucheck.py" not in names
    for f in (REPO_ROOT / "tests").glob("test_*.py"):
        lines = f.read_text("utf-8").splitlines()
        has = any(line.strip().startswith("@pytest.mark.cuda") for line in lines)
        assert (f in files) >= has, f.name  # no file with a cuda test left out


def test_an_archive_over_the_file_limit_stops_early_and_keeps_the_previous(
    tmp_path, monkeypatch, capsys
):
    """Compression stops at the first write past the limit (not after the whole
    cache), the previous archive stays, and the log says why; one that fits replaces
    it."""
    import os

    from ampbook import gpucheck as gc

    monkeypatch.setattr(gc, "MAX_FILE_BYTES", 64 * 1024)
    (tmp_path / "w").mkdir()
    check = gc.Check(tmp_path / "out", 60.0, True, ("env",), work=tmp_path / "w")
    src = tmp_path / "src"
    src.mkdir()
    small = src / "small.bin"
    small.write_bytes(b"x" * 1000)
    check._archive("c.tar.gz", [(small, "small.bin")])
    before = (tmp_path / "out" / "c.tar.gz").read_bytes()
    big = [src / f"big{i}.bin" for i in range(40)]
    for p in big:
        p.write_bytes(os.urandom(32 * 1024))  # incompressible: 1.25 MiB in all
    written = []
    real_add = tarfile.TarFile.add

    def add(self, name, *a, **kw):
        written.append(name)
        return real_add(self, name, *a, **kw)

    monkeypatch.setattr(tarfile.TarFile, "add", add)
    check._archive("c.tar.gz", [(p, p.name) for p in big])
    assert (tmp_path / "out" / "c.tar.gz").read_bytes() == before
    assert len(written) <= 4  # stopped at the limit, not after 40 files
    assert not list((tmp_path / "out").glob(".*tmp"))
    log = (tmp_path / "out" / "gpucheck.log").read_text()
    assert "passed the 0.0625 MiB a file may be (40 files)" in log
    assert "kept the previous one" in log
    check.archive_compile_cache()  # a dry run compiles nothing: no archive, a line
    assert not (tmp_path / "out" / gc.COMPILE_ARCHIVE).exists()
    assert "nothing compiled" in (tmp_path / "out" / "gpucheck.log").read_text()
    check.log_file.close()
