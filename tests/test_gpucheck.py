"""python -m booktools.gpucheck: the dry run writes the file set; budgets cut stages
short."""

import json
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from ampbook.chapters.ch7.ladder_run import PARTIAL_END
from ampbook.chapters.ch7.rungs import RUNG_SETS
from ampbook.core.paths import REPO_ROOT
from ampbook.core.words import slug
from ampbook.results import load_results_dir
from booktools.gpuplan import (
    BY_NAME,
    DEFAULT_BUDGET_S,
    MIN_STAGE_S,
    RESERVE_S,
    STAGE_NAMES,
    STAGE_SIZES,
    STAGES,
    parse_stages,
    replay,
    select_stages,
    should_start,
    stage_timeout,
)

FILE_SET = {"report.json", "gpucheck.log", "results.tar.gz", "notebooks.tar.gz"}


def gpucheck(*args, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "booktools.gpucheck", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def check_file_set(out: Path) -> dict:
    """At most 8 flat files with plain names, each within 16 MiB: the four a dry run
    writes (no compile cache: nothing was compiled)."""
    files = list(out.iterdir())
    assert {f.name for f in files} == FILE_SET
    assert len(files) <= 8
    for f in files:
        assert f.is_file() and re.fullmatch(r"[A-Za-z0-9._-]+", f.name)
        assert f.stat().st_size <= 16 * 2**20
    return json.loads((out / "report.json").read_text())


def dry_run(stages: tuple[str, ...], out: Path, work: Path) -> tuple[dict, float]:
    start = time.monotonic()
    done = gpucheck(
        "--stages", ",".join(stages), "--dry-run", "--out", str(out),
        "--work", str(work), timeout=2400,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return check_file_set(out), elapsed


def extract_results(out: Path, to: Path):
    with tarfile.open(out / "results.tar.gz") as tar:
        tar.extractall(to, filter="data")
    return load_results_dir(to)


# The suite's one-call dry run: every stage of the lease but those that run another
# stage's code with other settings: the chapters, whose notebook stage is the same code
# for every chapter (``stage_notebook``) and which the book's own smoke execution runs
# (chapter 2 stays: it names its results file), the NCHW profiles (``profile``: the
# code of ``profile-cl``) and the ladder's last cells (``ladder-rest``: the code of
# ``ladder-extra``). The whole lease is dry-run before a GPU session (DEVELOPING.md,
# "The GPU check on a lent machine": ``make gpucheck-dry``).
SAME_CODE = ("profile", "ladder-rest")
LEASE_DRY = tuple(
    n
    for n in STAGE_NAMES
    if (not n.startswith("nb") or n == "nb02") and n not in SAME_CODE
)


def test_the_lease_puts_the_ladder_first_and_the_committed_profiles_last():
    order = list(STAGE_NAMES)
    assert order[:8] == [
        "wheels", "env", "data", "ladder", "compile", "profile-cl", "ladder-extra",
        "tests",
    ]  # fmt: skip
    chapters = [n for n in order if n.startswith("nb")]
    assert order.index("profile") > max(order.index(n) for n in chapters[:-1])
    assert chapters[-1] == "nb07"  # its own small ladder: least needed
    # the stages every later one needs have their minimum shares with margin
    assert (BY_NAME["wheels"].share_s, BY_NAME["env"].share_s) == (30, 15)
    assert BY_NAME["data"].share_s == 25
    # every share says what it was sized from: an H200 figure or a CPU proxy
    assert all(st.h200 != "-" or st.cpu != "-" for st in STAGES if st.name != "nb07")
    # the cells of the two comparisons first: TF32 and amp-fp16, rung by rung, the
    # rungs read from chapter 7's table
    cells = STAGE_SIZES["gpu"]["cells"]
    assert cells["ladder"] == (("fp32-tf32", "amp-fp16"), RUNG_SETS["eager"])
    assert cells["compile"] == (("amp-fp16", "fp32-tf32"), RUNG_SETS["compiled"])
    assert cells["ladder-extra"] == (("amp-bf16", "fp32"), RUNG_SETS["ends"])
    for mode in ("amp-bf16", "fp32"):  # the extra modes' eager rungs, every one
        got = [r for _, (ms, rungs) in cells.items() if mode in ms for r in rungs]
        assert sorted(got) == list(RUNG_SETS["eager"])
    # the stages through the tests fit the default budget, and it the tool's 600 s
    upto = sum(st.share_s for st in STAGES[: order.index("tests") + 1])
    assert upto <= DEFAULT_BUDGET_S - RESERVE_S and DEFAULT_BUDGET_S + 40 <= 600


# The last H200 lease's measured stage seconds (data/gpucheck/2026-11-30_h200_try*.log,
# the slowest of each) and, for the stages that never ran there, the CPU proxies of
# ../GPU-FINDINGS.md ("Sizing the next lease") at their upper ends.
H200_TOOK = {
    "wheels": 6.2,
    "env": 6.3,
    # 2.2 s per 32 images at 2048x1024: ~11 s for the 50 + 24 + 84 of the sets
    "data": 17.0,
    # a cell ~10 s, after ~8 s of process start and the first cost-model traces
    "ladder": [8 + 10 * (i + 1) for i in range(10)],
    # per mode: Dynamo + AOTAutograd 8 s, a cold Inductor compile 60 s, the cell 10 s,
    # the epochs' recompilation 15 s
    "compile": [93.0, 186.0],
    "profile-cl": 20.6,
    "ladder-extra": [18.0, 33.0, 43.0, 58.0],  # amp-bf16 ~10 s, strict fp32 ~15 s
    "tests": 23.8,
    "loader": 25.0,
    "nb04": 61.0,
    "nb05": 68.0,
    "nb02": 25.3,
    "nb01": 13.9,
}


def test_the_budget_rule_replayed_on_the_h200_times_keeps_the_whole_ladder():
    got = replay(H200_TOOK)
    end = DEFAULT_BUDGET_S - RESERVE_S
    ladder, compiled = got["ladder"], got["compile"]
    assert ladder["status"] == "ok" and ladder["cells"] == 10  # TF32, fp16: rungs 0-4
    assert compiled["status"] == "ok" and compiled["cells"] == 2  # both rung-5 cells
    assert compiled["start"] + compiled["seconds"] <= end
    assert got["profile-cl"]["status"] == got["tests"]["status"] == "ok"
    # strict fp32 and amp-bf16 at rungs 0 and 4 fit in what the ladder left
    assert got["ladder-extra"]["status"] == "ok"
    # what the early stages did not use went to the chapters after them
    ran = [n for n, r in got.items() if r["status"] != "skipped"]
    assert {"nb06", "loader", "nb04"} <= set(ran)
    assert all(r["start"] + r["seconds"] <= end + 1e-9 for r in got.values())
    # with wheels, env and data taking their whole shares, the ladder and both
    # compiled cells still finish: their limits are their shares, whatever came first
    slow = {**H200_TOOK, "wheels": 30.0, "env": 15.0, "data": 25.0}
    got = replay(slow)
    assert got["ladder"]["cells"] == 10 and got["compile"]["cells"] == 2
    # a compile stage twice as slow as the proxy keeps the cells it wrote in its limit
    got = replay({**H200_TOOK, "compile": [186.0, 372.0]})
    assert got["compile"]["status"] == "cut short" and got["compile"]["cells"] == 1
    assert got["compile"]["seconds"] == BY_NAME["compile"].share_s


def test_developing_md_shows_the_shares_table_the_code_runs():
    from booktools.gpuplan import sizing_markdown

    text = (REPO_ROOT / "DEVELOPING.md").read_text()
    assert sizing_markdown() in text, "rewrite DEVELOPING.md's table from the code"


def test_the_budget_rule_gives_a_stage_its_share_or_the_time_later_ones_leave():
    assert stage_timeout(120, 400, 545) == 145  # the later shares fit in 400: more
    assert stage_timeout(120, 1000, 545) == 120  # they do not: its share
    assert stage_timeout(120, 1000, 50) == 50  # never past the budget
    assert stage_timeout(25, 0, 300) == 300  # a rerun's last stage: all that is left
    assert should_start(60, 30) and not should_start(60, 29)
    assert should_start(200, 30) and not should_start(6, 2.9)


@pytest.fixture(scope="module")
def lease_dry(tmp_path_factory):
    """One dry run of the lease's stages but the chapters, shared by the assertions."""
    base = tmp_path_factory.mktemp("lease")
    report, elapsed = dry_run(LEASE_DRY, base / "out", base / "work")
    return base / "out", report, elapsed


def _statuses(report: dict) -> dict:
    return {s["name"]: s["status"] for s in report["stages"]}


@pytest.mark.slow
def test_the_one_call_dry_run_runs_every_stage_and_returns_eight_files_at_most(
    lease_dry, tmp_path
):
    out, report, elapsed = lease_dry
    assert report["finished"] and report["dry_run"] and report["cut_short"] == []
    assert report["elapsed_s"] <= elapsed
    status = _statuses(report)
    assert {n for n, st in status.items() if st != "not selected"} == set(LEASE_DRY)
    assert status["wheels"] == "skipped"
    assert all(status[n] == "ok" for n in LEASE_DRY if n != "wheels"), status
    log = (out / "gpucheck.log").read_text().splitlines()
    assert (
        log[-1]
        == report["rerun"]
        == ("rerun: none needed, no stage was cut short or skipped")
    )
    text = "\n".join(log)
    assert "TORCH_COMPILE_DISABLE=1" in text
    assert "compile_cache.bin left out: --dry-run: nothing compiled" in text
    assert "-m cuda -v -rA --durations=0" in text  # every test named, timed
    rs = extract_results(out, tmp_path / "results")
    assert rs.ignored == [] and len(rs.loader_sweeps) == len(rs.matmul_sweeps) == 1
    assert [bool(p.record["channels_last"]) for p in rs.layer_profiles] == [True] * 2
    (ladder,) = rs.ladders
    assert ladder.complete and ladder.record["settings"]["isolate"] == "none"
    cells = {(c.rung, c.mode): c.record["epoch"] for c in ladder.cells if c.ok}
    dry = STAGE_SIZES["dry"]["cells"]
    want = {
        (r, m)
        for name, stage in dry.items()
        if name in LEASE_DRY
        for m in stage[0]
        for r in stage[1]
    }  # the ladder, the compiled rung and the extra cells, in one file
    assert cells == {cell: "measured" for cell in want}


def _watch(cmd: list[str], log: Path, until, limit_s: float = 600):
    """Start the check, wait until ``until(lines of its log)`` holds, SIGTERM it (the
    check alone: it stops its stage's process group itself) and return its output."""
    import signal

    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and until(log.read_text().splitlines()):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the check ended before the moment to stop it"
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, stdout


def _cell_lines(lines: list[str]) -> tuple[list[tuple[int, str]], list[tuple]]:
    """(rung, mode) of the ladder's cell lines in the log: written whole (with their
    epochs), and written once their step was measured."""
    whole, early = [], []
    for line in lines:
        m = re.match(r"\s*rung (\d) ([^\s:]+):?\s+step .*", line)
        if m:
            cell = (int(m[1]), m[2])
            (early if line.endswith(PARTIAL_END) else whole).append(cell)
    return whole, early


def _lease_cmd(stages: str, out: Path, work: Path) -> list[str]:
    return [
        sys.executable, "-m", "booktools.gpucheck", "--dry-run", "--stages", stages,
        "--out", str(out), "--work", str(work),
    ]  # fmt: skip


def _ladder_of(out: Path, to: Path):
    (ladder,) = extract_results(out, to).ladders
    return ladder


@pytest.fixture(scope="module")
def killed_ladder(tmp_path_factory):
    """One check of the ladder stage stopped by SIGTERM once its first cell was written
    whole and the second begun: (exit status, output, out, work), shared by the test of
    what it kept and the test that runs its rerun line."""
    base = tmp_path_factory.mktemp("killed")
    out, work = base / "out", base / "work"
    rc, stdout = _watch(
        _lease_cmd("ladder", out, work),
        out / "gpucheck.log",
        lambda lines: len(_cell_lines(lines)[0]) >= 1,
    )
    return rc, stdout, out, work


def test_a_check_killed_in_the_middle_of_the_ladder_returns_every_finished_cell(
    killed_ladder, tmp_path
):
    rc, stdout, out, work = killed_ladder
    assert rc == 143, stdout[-2000:]
    report = check_file_set(out)
    assert report["finished"] and report["cut_short"] == ["ladder"]
    lines = (out / "gpucheck.log").read_text().splitlines()
    whole, early = _cell_lines(lines)
    ladder = _ladder_of(out, tmp_path / "results")
    assert ladder.status == "running"  # stopped part-way, and says so
    got = {(c.rung, c.mode): c for c in ladder.cells if c.ok}
    assert set(whole) <= set(got) and set(early) == set(got)
    assert whole[0] == (0, "fp32-tf32") and len(got) <= 2
    for cell, c in got.items():
        assert c.step_s > 0 and c.kernel_s is not None
        assert c.record["epoch"] == ("measured" if cell in whole else "pending")
        assert (c.images_per_s is not None) == (cell in whole)
    # the log's last line: what was cut, and the command that reruns it
    assert lines[-1] == report["rerun"]
    assert lines[-1].startswith("rerun: cut ladder (cut short); in the lease's ~")
    assert f"--dry-run --stages ladder --work {work} --budget-s " in lines[-1]
    assert "--out $OUT (timeout_s " in lines[-1]


@pytest.mark.slow
def test_the_rerun_line_run_as_given_measures_only_the_cells_the_first_call_lacked(
    killed_ladder, tmp_path
):
    """Killed in the ladder, then its rerun line run as printed (in the same work
    folder, as on the warm machine): the cells measured whole are kept as they were,
    the others measured, and the second call's results hold the whole ladder."""
    rc, _, out, work = killed_ladder
    assert rc == 143
    first = _ladder_of(out, tmp_path / "r1")
    whole = {(c.rung, c.mode): c.step_s for c in first.cells if c.images_per_s}
    line = json.loads((out / "report.json").read_text())["rerun"]
    cmd = line.split(": ", 2)[2].rsplit(" (timeout_s", 1)[0].split()
    assert cmd[:3] == ["python3", "-m", "booktools.gpucheck"]
    out2 = tmp_path / "out2"
    cmd = [sys.executable, *cmd[1:]]
    cmd[cmd.index("$OUT")] = str(out2)
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:]
    second = _ladder_of(out2, tmp_path / "r2")
    assert second.complete and len([c for c in second.cells if c.ok]) == 4
    for cell, step_s in whole.items():
        assert second.cell(*cell).step_s == step_s  # kept, not measured again
    again = _cell_lines((out2 / "gpucheck.log").read_text().splitlines())
    assert whole and not set(whole) & set(again[0] + again[1])


def test_a_check_killed_in_the_compiled_rung_keeps_the_step_it_timed(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    rc, stdout = _watch(
        _lease_cmd("compile", out, work),
        out / "gpucheck.log",
        lambda lines: (5, "fp32-tf32") in _cell_lines(lines)[1],
    )
    assert rc == 143, stdout[-2000:]
    report = check_file_set(out)
    assert report["cut_short"] == ["compile"]
    whole, early = _cell_lines((out / "gpucheck.log").read_text().splitlines())
    c = _ladder_of(out, tmp_path / "results").cell(5, "fp32-tf32")
    assert c is not None and c.step_s > 0 and c.record["first_step_s"] > 0
    # its epochs were cut (unless they ended before the signal, as the log then says)
    done = (5, "fp32-tf32") in whole
    assert c.record["epoch"] == ("measured" if done else "pending")


def test_the_rerun_line_says_what_was_cut_and_how_long_a_rerun_may_take(tmp_path):
    """The stages cut short, skipped or never reached are rerun in what the lease has
    left after this call and the rerun's transfers, or at the next lease when that is
    too little; stages that ran to an end (ok or error) are not."""
    from booktools.gpulease import Check, StageResult
    from booktools.gpuplan import RERUN_MARGIN_S

    selected = ("wheels", "env", "ladder", "compile", "tests", "nb04")
    check = Check(tmp_path / "out", 560, False, selected, lease_left_s=780)
    check.t0 = time.monotonic() - 500  # this call has taken 500 s
    check.results = [
        StageResult("wheels", 30, status="ok", ok=True),
        StageResult("env", 15, status="ok", ok=True),
        StageResult("ladder", 120, status="ok", ok=True),
        StageResult("compile", 200, status="cut short"),
        StageResult("tests", 35, status="error"),
        StageResult("nb04", 60, status="skipped"),
    ]
    line = check.rerun_line()
    budget = 780 - 500 - RERUN_MARGIN_S
    assert line == (
        "rerun: cut compile (cut short), nb04 (skipped); in the lease's ~280 s left: "
        f"python3 -m booktools.gpucheck --stages compile,nb04 --budget-s {budget} "
        f"--out $OUT (timeout_s {budget + 30})"
    )
    assert parse_stages("compile,nb04") == ("wheels", "env", "compile", "nb04")
    check.results = check.results[:3]  # killed in the ladder: the rest not reached
    check.t0 = time.monotonic() - 700
    line = check.rerun_line()
    assert line.startswith("rerun: cut compile (not reached), tests (not reached)")
    assert line.endswith(
        "too few for a rerun: at the next lease, python3 -m booktools.gpucheck "
        "--stages compile,tests,nb04 --out $OUT"
    )
    check.results = [StageResult(n, 1, status="ok", ok=True) for n in selected]
    assert check.rerun_line() == "rerun: none needed, no stage was cut short or skipped"
    check.close()


def test_a_process_over_its_budget_is_stopped_with_its_children(tmp_path):
    from booktools.gpulease import Check

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
    from booktools import gpulease

    def slow_child(self, name, timeout):
        return self.run_process(
            [sys.executable, "-c", "import time; time.sleep(60)"], timeout
        )

    monkeypatch.setattr(gpulease.Check, "run_child", slow_child)
    out = tmp_path / "out"
    start = time.monotonic()
    # env gets the least a stage starts with, 2 s to spare, and nothing is left after
    budget = RESERVE_S + MIN_STAGE_S + 2
    code = gpulease.Check(out, budget, True, ("wheels", "env", "nb04")).run()
    elapsed = time.monotonic() - start
    assert code == 1
    report = check_file_set(out)
    status = {s["name"]: s["status"] for s in report["stages"]}
    assert status["env"] == "cut short" and status["nb04"] == "skipped"
    assert report["cut_short"] == ["env"] and status["nb03"] == "not selected"
    assert elapsed < budget  # env got what was left, nb04 nothing
    assert "only" in next(s["detail"] for s in report["stages"] if s["name"] == "nb04")


def test_bad_arguments_are_one_line_errors(tmp_path):
    for args, message in (
        (["--dry-run"], "--out DIR is required"),
        (["--out", str(tmp_path), "--stages", "nb09"], "1 unknown stage: nb09"),
        (["--out", str(tmp_path), "--budget-s", "5"], "--budget-s must be more"),
        (["--out", str(tmp_path)], "give --lease"),
        (["--out", str(tmp_path), "--plan", "A"], "--plan is gone"),
        (["--out", str(tmp_path), "--lease", "--lease-left-s", "0"], "--lease-left-s"),
    ):
        done = gpucheck(*args, timeout=60)
        assert (
            done.returncode == 2
            and done.stderr.startswith("error:")
            and message in done.stderr
        )
    afile = tmp_path / "f"
    afile.write_text("x")
    done = gpucheck("--lease", "--out", str(afile), timeout=60)
    assert done.returncode == 2 and "not a folder" in done.stderr


def test_check_profile_sets_only_parameters_of_each_checked_notebook():
    """The check's own profile covers every notebook it runs, with names the notebooks'
    parameters cells define (the runner would reject others, but only on the GPU)."""
    import yaml

    from ampbook.core.paths import NOTEBOOKS_DIR, PROFILES_FILE
    from booktools.gpuplan import CHECK_PROFILE, NOTEBOOKS
    from booktools.run import parameters_cell
    from booktools.sources import read_source

    check = yaml.safe_load(PROFILES_FILE.read_text())[CHECK_PROFILE]
    for stem in NOTEBOOKS.values():
        assert stem in check, f"{CHECK_PROFILE} has no section for {stem}"
        _, names = parameters_cell(read_source(NOTEBOOKS_DIR / f"{stem}.py"))
        assert set(check[stem]) <= set(names), stem


def test_a_stage_that_ends_early_leaves_its_time_to_the_next(tmp_path):
    """Budgets are shares of what is left: the last stage gets all the time the stages
    before it left, however long they took (on a loaded machine env may take long)."""
    from booktools.gpuplan import RESERVE_S

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
    assert parse_stages("profile,nb05") == ("wheels", "env", "nb05", "profile")
    with pytest.raises(ValueError, match="unknown stage"):
        parse_stages("nb3")
    assert select_stages(True, None) == STAGE_NAMES
    assert select_stages(True, "nb01") == ("wheels", "env", "nb01")  # --stages wins
    with pytest.raises(ValueError, match="give --lease"):
        select_stages(False, None)
    assert slug("NVIDIA H200") == "h200"
    assert slug("NVIDIA GeForce RTX 3070") == "rtx-3070"
    assert slug("Fixture GPU (fictitious)") == "fixture-gpu-fictitious"


def test_sizing_figures_order():
    from booktools.gpucheck import sizing

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
    out = tmp_path / "out"
    rc, stdout = _watch(  # stopped as the stage starts its notebook
        _lease_cmd("nb04", out, tmp_path / "work"),
        out / "gpucheck.log",
        lambda lines: any("04_loss_scaling: profile smoke" in line for line in lines),
    )
    assert rc == 143, stdout[-2000:]
    report = check_file_set(out)
    assert report["finished"] and len(report["cut_short"]) == 1
    stage = next(s for s in report["stages"] if s["status"] == "cut short")
    assert "SIGTERM" in stage["detail"]


def test_the_tests_stage_collects_every_file_with_a_cuda_test():
    from booktools.gpucheck import cuda_test_files

    files = cuda_test_files()
    names = {f.name for f in files}
    assert "test_ladder_run.py" in names and "test_gpucheck.py" not in names
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

    from booktools import gpulease as gc

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
    check.copy_compile_cache()  # a dry run compiles nothing: no file, a line
    assert not (tmp_path / "out" / gc.COMPILE_CACHE).exists()
    log = (tmp_path / "out" / "gpucheck.log").read_text()
    assert "compile_cache.bin left out: --dry-run: nothing compiled" in log
    # a cache over the limit is left out, with its size; one that fits is copied
    (tmp_path / "w" / gc.COMPILE_CACHE).write_bytes(os.urandom(80 * 1024))
    check.copy_compile_cache()
    assert not (tmp_path / "out" / gc.COMPILE_CACHE).exists()
    assert (
        "left out: 0.1 MiB, over the 0.0625 MiB"
        in (tmp_path / "out" / "gpucheck.log").read_text()
    )
    (tmp_path / "w" / gc.COMPILE_CACHE).write_bytes(b"artifacts")
    check.copy_compile_cache()
    assert (tmp_path / "out" / gc.COMPILE_CACHE).read_bytes() == b"artifacts"
    check.log_file.close()
