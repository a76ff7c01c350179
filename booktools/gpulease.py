"""The GPU check's parent process: it runs the plan's stages (``booktools.gpuplan``)
one by one, each in its own process group under its time limit, and keeps the output
folder up to date after every stage (the report, the log, the archives, the compile
cache): ``Check``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from booktools.gpuplan import (
    BY_NAME,
    COMPILE_CACHE,
    DEFAULT_BUDGET_S,
    INDUCTOR_CACHE,
    LADDER_STAGES,
    LEASE_LEFT_S,
    MIN_RERUN_S,
    RERUN_MARGIN_S,
    RESERVE_S,
    STAGE_NAMES,
    STAGES,
    WORK_DIR,
    should_start,
    stage_timeout,
)
from booktools.gpuwheels import WHEEL_DIR, install_wheels
from ampbook.core import cli
from ampbook.core.paths import REPO_ROOT
from ampbook.core.words import slug

MAX_FILE_BYTES = 16 * 2**20


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Terminated(Exception):
    """The check received SIGTERM (an outer time limit): stop the stage, write the
    report."""


@dataclass
class StageResult:
    name: str
    budget_s: float  # its time limit in this call (the budget rule)
    share_s: float = 0.0  # its share (STAGES)
    seconds: float = 0.0
    status: str = "pending"  # ok | error | cut short | skipped | not selected
    ok: bool = False
    detail: str = ""
    writes: str = ""


@dataclass
class Check:
    out: Path
    budget_s: float
    dry_run: bool
    selected: tuple[str, ...]
    work: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="ampbook-gpucheck-"))
    )
    started: str = field(default_factory=_now)
    t0: float = field(default_factory=time.monotonic)
    results: list[StageResult] = field(default_factory=list)
    env: dict = field(default_factory=lambda: dict(os.environ))
    wheel_dir: Path = WHEEL_DIR
    lease: bool = False
    keep_work: bool = False  # a work folder given (--work): kept for a rerun
    lease_left_s: float = LEASE_LEFT_S
    rerun: str = ""

    def __post_init__(self):
        self.out.mkdir(parents=True, exist_ok=True)
        self.log_path = self.out / "gpucheck.log"
        self.log_file = self.log_path.open("w", buffering=1)
        for sub in ("results", "executed"):
            (self.work / sub).mkdir(exist_ok=True)
        paths = [str(REPO_ROOT)] + [
            p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p
        ]
        self.env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env.setdefault("MPLBACKEND", "Agg")
        if (
            self.dry_run
        ):  # smoke sizes: one thread each is faster than two that wait on each other
            self.env["OMP_NUM_THREADS"] = "1"

    def log(self, text: str) -> None:
        print(text, flush=True)
        self.log_file.write(text + "\n")

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.budget_s - RESERVE_S - self.elapsed()

    # ---- one stage -------------------------------------------------------------------
    def run_child(self, name: str, timeout: float) -> tuple[str, str]:
        cmd = [
            sys.executable,
            "-m",
            "booktools.gpucheck",
            "--stage-child",
            name,
            "--work",
            str(self.work),
        ]
        if self.dry_run:
            cmd.append("--dry-run")
        env = None
        if name in LADDER_STAGES:
            env = dict(self.env)
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR_CACHE))
            if self.dry_run and name == "compile":  # a CPU compiles ERFNet in minutes
                env["TORCH_COMPILE_DISABLE"] = "1"
                self.log("  --dry-run: TORCH_COMPILE_DISABLE=1 (compiled rungs run eager)")
        return self.run_process(cmd, timeout, env)

    def run_process(
        self, cmd: list[str], timeout: float, env: dict | None = None
    ) -> tuple[str, str]:
        """Run ``cmd`` in its own process group, its output into the log; past
        ``timeout``
        stop the whole group. Returns (status, detail)."""
        proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=env or self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        tail: list[str] = []

        def pump():
            for line in proc.stdout:
                line = line.rstrip("\n")
                self.log(f"  {line}")
                tail.append(line)
                del tail[:-20]

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            reader.join(timeout=5)
            return "cut short", f"stopped after {timeout:.0f} s, its time budget"
        finally:  # the check itself terminated: take the stage's process group with it
            if proc.poll() is None:
                self._kill(proc)
        reader.join(timeout=10)
        if rc == 0:
            return "ok", ""
        last = next((l for l in reversed(tail) if l.strip()), "")
        return "error", f"exit {rc}: {last.strip()[:500]}"

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def run(self) -> int:
        """Run the selected stages; the signal handlers it sets are undone when it
        returns or raises."""
        with cli.kept_handlers():
            return self._run()

    def _run(self) -> int:
        def terminate(signum, frame):
            cli.record_stop(signum)  # 143 for SIGTERM, 130 for Ctrl-C
            raise Terminated()

        signal.signal(signal.SIGTERM, terminate)
        signal.signal(signal.SIGINT, terminate)  # Ctrl-C ends the check alike
        names = [st.name for st in STAGES if st.name in self.selected]
        self.log(
            f"booktools.gpucheck {'--dry-run ' if self.dry_run else ''}"
            + ("--lease, " if self.lease else "")
            + f"budget {self.budget_s:.0f} s, "
            f"stages {', '.join(names)}; work folder {self.work}"
        )
        for stage in STAGES:
            if stage.name not in self.selected:
                self.results.append(StageResult(stage.name, 0.0, status="not selected"))
        for i, name in enumerate(names):
            stage = BY_NAME[name]
            if self.dry_run:
                budget = min(stage.dry_budget_s, max(self.left(), 0.0))
            else:  # the budget rule: its share, more where the later shares fit
                later = sum(BY_NAME[n].share_s for n in names[i + 1 :])
                budget = stage_timeout(stage.share_s, later, self.left())
            res = StageResult(
                stage.name, round(budget, 1), stage.share_s, writes=stage.writes
            )
            self.results.append(res)
            if stage.name == "wheels" and self.dry_run:
                res.status, res.ok, res.detail = (
                    "skipped",
                    True,
                    "--dry-run installs nothing",
                )
                self.finish_stage(res)
                continue
            timeout = min(budget, self.left())
            share = stage.dry_budget_s if self.dry_run else stage.share_s
            if not should_start(0.0 if stage.always else share, timeout):
                res.status, res.detail = (
                    "skipped",
                    f"only {max(self.left(), 0):.0f} s of the budget left",
                )
                self.log(f"== {stage.name}: skipped ({res.detail})")
                self.finish_stage(res)
                continue
            self.log(
                f"== {stage.name} (limit {timeout:.0f} s, share {share:.0f} s, "
                f"{self.elapsed():.0f} s elapsed)"
            )
            start = time.monotonic()
            try:
                if stage.name == "wheels":
                    res.detail = install_wheels(
                        self.env, self.wheel_dir, self.work / "site", timeout, self.log
                    )
                    res.status = "ok"
                else:
                    res.status, res.detail = self.run_child(stage.name, timeout)
            except (Terminated, KeyboardInterrupt):
                res.status = "cut short"
                res.detail = (
                    f"the check was stopped ({cli.signal_name()}) before the stage "
                    "ended"
                )
                res.seconds = round(time.monotonic() - start, 1)
                self.log(f"== {stage.name}: {res.detail}")
                self.rerun = self.rerun_line()
                self.finish_stage(res, final=True)
                self.log(self.rerun)
                self.close()
                cli.say(
                    f"the check was stopped ({cli.signal_name()}) in stage "
                    f"{stage.name}; {self.out / 'report.json'} says what ran"
                )
                return cli.stop_code()
            except Exception as err:  # a stage's failure is reported, the check goes on
                res.status, res.detail = "error", f"{type(err).__name__}: {err}"
            res.seconds = round(time.monotonic() - start, 1)
            res.ok = res.status == "ok"
            self.log(
                f"== {stage.name}: {res.status} in {res.seconds:.1f} s"
                + (f" ({res.detail})" if res.detail else "")
            )
            self.finish_stage(res)
        self.rerun = self.rerun_line()
        self.finish_stage(None, final=True)
        bad = [r for r in self.results if r.name in self.selected and not r.ok]
        self.log(
            f"done in {self.elapsed():.0f} s; "
            + (
                "every stage ok"
                if not bad
                else "not ok: " + ", ".join(f"{r.name} ({r.status})" for r in bad)
            )
        )
        self.log(self.rerun)  # the log's last line
        self.close()
        return 0 if not bad else 1

    def close(self) -> None:
        self.log_file.close()
        if not self.keep_work:
            shutil.rmtree(self.work, ignore_errors=True)

    def rerun_line(self) -> str:
        """The log's last line: the stages cut short, skipped or never reached, and the
        command that reruns them in the time left of the lease (or at the next)."""
        done = {r.name: r.status for r in self.results}
        again = [
            n
            for n in STAGE_NAMES
            if n in self.selected
            and n != "wheels"
            and done.get(n) in ("cut short", "skipped", "pending", None)
        ]
        if not again:
            return "rerun: none needed, no stage was cut short or skipped"
        left = self.lease_left_s - self.elapsed()
        budget = min(DEFAULT_BUDGET_S, left - RERUN_MARGIN_S)
        cut = ", ".join(f"{n} ({done.get(n) or 'not reached'})" for n in again)
        cmd = ["python3", "-m", "booktools.gpucheck"]
        if self.dry_run:
            cmd.append("--dry-run")
        cmd += ["--stages", ",".join(again)]
        if self.keep_work and self.work != WORK_DIR:
            cmd += ["--work", str(self.work)]
        if budget >= MIN_RERUN_S:
            cmd += ["--budget-s", f"{budget:.0f}", "--out", "$OUT"]
            return (
                f"rerun: cut {cut}; in the lease's ~{left:.0f} s left: "
                f"{' '.join(cmd)} (timeout_s {budget + 30:.0f})"
            )
        cmd += ["--out", "$OUT"]
        return (
            f"rerun: cut {cut}; the lease has ~{max(left, 0):.0f} s left, too few "
            f"for a rerun: at the next lease, {' '.join(cmd)}"
        )

    # ---- the output folder -----------------------------------------------------------
    def result_files(self) -> list[tuple[Path, str]]:
        """(file, name in the archive): training runs renamed ``train_<gpu>_<run
        name>.json``."""
        out = []
        for path in sorted((self.work / "results").glob("*.json")):
            name = path.name
            try:
                rec = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if rec.get("schema") == "ampbook.train":
                gpu = slug(rec["environment"]["device_name"])
                name = f"train_{gpu}_{rec['name']}.json"
            out.append((path, re.sub(r"[^A-Za-z0-9._-]", "_", name)))
        return out

    def finish_stage(self, res: StageResult | None, final: bool = False) -> None:
        """Bring the output folder up to date: archives, then report.json (written
        last)."""
        self._archive("results.tar.gz", self.result_files())
        executed = sorted((self.work / "executed").glob("*.ipynb"))
        self._archive("notebooks.tar.gz", [(p, p.name) for p in executed])
        if res is not None and res.name == "compile":
            self.copy_compile_cache()
        env_file = self.work / "environment.json"
        report = {
            "check": "booktools.gpucheck",
            "dry_run": self.dry_run,
            "lease": self.lease,
            "budget_s": self.budget_s,
            "lease_left_s": self.lease_left_s,
            "started": self.started,
            "updated": _now(),
            "finished": final,
            "elapsed_s": round(self.elapsed(), 1),
            "selected": list(self.selected),
            "environment": (
                json.loads(env_file.read_text()) if env_file.exists() else None
            ),
            "stages": [asdict(r) for r in self.results],
            "cut_short": [r.name for r in self.results if r.status == "cut short"],
            "results": [n for _, n in self.result_files()],
            "notebooks": [p.name for p in executed],
            "rerun": self.rerun,
        }
        tmp = self.out / ".report.json.tmp"
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        os.replace(tmp, self.out / "report.json")

    def copy_compile_cache(self) -> None:
        """The compile stage's ``compile_cache.bin`` into the output when it fits a
        file of it (16 MiB), else left out with a line saying so."""
        src = self.work / COMPILE_CACHE
        if not src.is_file():
            why = (
                "--dry-run: nothing compiled (TORCH_COMPILE_DISABLE=1)"
                if self.dry_run
                else "the compile stage saved no cache artifacts"
            )
            self.log(f"{COMPILE_CACHE} left out: {why}")
            return
        size = src.stat().st_size
        if size > MAX_FILE_BYTES:
            self.log(
                f"{COMPILE_CACHE} left out: {size / 2**20:.1f} MiB, over the "
                f"{MAX_FILE_BYTES / 2**20:g} MiB a file may be"
            )
            return
        tmp = self.out / f".{COMPILE_CACHE}.tmp"
        shutil.copyfile(src, tmp)
        os.replace(tmp, self.out / COMPILE_CACHE)
        self.log(f"{COMPILE_CACHE}: {size / 2**20:.1f} MiB in the output")

    def _archive(self, name: str, members: list[tuple[Path, str]]) -> None:
        """``members`` as ``name`` in the output, written aside and moved in whole;
        compression stops as soon as the archive passes the 16 MiB a file may be (a
        large compile cache costs no more time than the part that fits)."""
        tmp = self.out / f".{name}.tmp"
        try:
            with (
                open(tmp, "wb") as raw,
                tarfile.open(
                    fileobj=_CappedFile(raw, MAX_FILE_BYTES), mode="w:gz"
                ) as tar,
            ):
                for path, arcname in members:
                    tar.add(path, arcname=arcname)
        except _TooBig:
            self.log(
                f"warning: {name} passed the {MAX_FILE_BYTES / 2**20:g} MiB a file "
                f"may be ({len(members)} files): kept the previous one"
            )
            tmp.unlink(missing_ok=True)
            return
        os.replace(tmp, self.out / name)


class _TooBig(Exception):
    pass


class _CappedFile:
    """A binary file that raises ``_TooBig`` when a write would take it past
    ``limit`` bytes (what ``tarfile`` writes through gzip goes through ``write``)."""

    def __init__(self, raw, limit: int):
        self.raw, self.limit, self.size = raw, limit, 0

    def write(self, data) -> int:
        self.size += len(data)
        if self.size > self.limit:
            raise _TooBig
        return self.raw.write(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.raw.flush()
