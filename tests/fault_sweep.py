"""The fault sweep: every command of the book under bad input and faults, as a careless
or unlucky user would meet them (issue 22).

    .venv/bin/python -m tests.fault_sweep              # every case, 2 at a time
    .venv/bin/python -m tests.fault_sweep --quick      # the subset make test runs
    .venv/bin/python -m tests.fault_sweep --only signals,numbers --jobs 1 -v
    .venv/bin/python -m tests.fault_sweep --repo DIR   # another checkout (e.g. main)

Each case runs one command (``python -m ampbook...``) in a fresh temporary folder and
is classified:

* **clear**: the exit status promised (2 settings/inputs/environment, 1 a run that
  stopped, 130 Ctrl-C, 143 SIGTERM; 0 where the command should cope), exactly one
  ``error:`` line naming what the case expects, no traceback, and the case's own check
  of what is on disk (nothing lost, nothing partial taken for whole) passes;
* **unclear**: no traceback and nothing wrong on disk, but another exit status, no
  single ``error:`` line or one that does not name the problem;
* **traceback**: a Python traceback on stderr;
* **wrong result**: the disk holds a wrong result afterwards (an earlier result lost,
  a partial set marked whole, a report that does not match...) or a command that
  should fail exited 0;
* **hang**: the command did not end within the case's time limit.

The classes of fault (``CLASSES``) follow the issue: settings, numbers, parameters
(``-p`` of a notebook), filesystem, signals, files (hand-edited or foreign),
environment, special files and results (lost or wrong). Prints the counts per class
and writes every case's outcome to ``--json``. File-system cases mount a small tmpfs
(read-only, or full) and are skipped, with the reason, where mounting is not allowed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent.parent
CLASSES = (
    "settings",
    "numbers",
    "parameters",
    "filesystem",
    "signals",
    "files",
    "environment",
    "special",
    "results",
    "untrusted",
)
OUTCOMES = ("clear", "unclear", "traceback", "wrong result", "hang", "skipped")
ALIAS_BOMB = (
    "[&a [x,x,x,x,x,x,x,x,x],"
    + ",".join(
        f"&{b} [{','.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")
    )
    + "]"
)  # nine levels of nine aliases: 9**9 items spelled out
LONG = "n" * 300  # a path component over the 255 bytes a file system allows
TINY = ["--height", "16", "--width", "32"]
TRAIN = [
    "--device",
    "cpu",
    "--epochs",
    "1",
    "--batch-size",
    "2",
    *TINY,
    "--workers",
    "0",
    "--progress",
    "off",
]


class Skip(Exception):
    """A case that cannot run here (no tmpfs, no FIFO...)."""


@dataclass
class Ctx:
    """What a case's functions see: its own folder, the shared inputs, the repo."""

    tmp: Path
    shared: Path
    repo: Path
    mounts: list = field(default_factory=list)

    @property
    def data(self) -> Path:
        """A tiny synthetic Cityscapes (4 train, 2 val, 64x32), shared read-only."""
        return self.shared / "data"

    def copy_data(self) -> Path:
        dest = self.tmp / "data"
        if not dest.exists():
            shutil.copytree(self.data, dest)
        return dest

    def finished(self) -> Path:
        """A copy of a folder holding one finished run ``a`` (its .json and .ckpt)."""
        dest = self.tmp / "runs"
        if not dest.exists():
            shutil.copytree(self.shared / "runs", dest)
        return dest

    def tmpfs(self, name: str, size: str = "1m", readonly: bool = False) -> Path:
        where = self.tmp / name
        where.mkdir(parents=True, exist_ok=True)
        opts = f"size={size}" + (",ro" if readonly else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise Skip(f"cannot mount a tmpfs here: {done.stderr.strip()[:80]}")
        self.mounts.append(where)
        return where

    def readonly(self) -> Path:
        return self.tmpfs("ro", readonly=True)

    def fifo(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkfifo(path)
        except (OSError, AttributeError) as err:
            raise Skip(f"no FIFO here: {err}") from None
        return path

    def blocker(self) -> Path:
        """A plain file where a folder would be needed."""
        f = self.tmp / "blocker"
        f.write_text("in the way\n")
        return f

    def repo_copy(self) -> Path:
        """A copy of the repository's sources (to break notebooks/profiles.yml)."""
        dest = self.tmp / "repo"
        if not dest.exists():
            ignore = shutil.ignore_patterns(
                ".venv", "build", ".git", "__pycache__", "*.egg-info", "_build"
            )
            shutil.copytree(self.repo, dest, ignore=ignore)
        return dest

    def cleanup(self) -> None:
        for where in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


Arg = Callable[[Ctx], list] | list


@dataclass
class Case:
    cls: str
    name: str
    argv: Arg  # after "python -m"
    expect: tuple = (2,)
    words: tuple = ()
    setup: Callable[[Ctx], None] | None = None
    check: Callable[[Ctx, "Result"], str | None] | None = None
    env: Callable[[Ctx], dict] | dict | None = None
    signal: int | None = None
    trigger: Callable[[Ctx, str], bool] | float | None = None
    timeout: float = 240
    quick: bool = False
    cwd: Callable[[Ctx], Path] | None = None
    then: tuple | None = None  # (signal, seconds): a second stop after the first
    quiet: bool = False  # stderr closed: no error line to read, the status says it


@dataclass
class Result:
    case: Case
    outcome: str
    code: int | None = None
    seconds: float = 0.0
    why: str = ""
    stderr: str = ""
    stdout: str = ""


# --- running one case -----------------------------------------------------------------


def _resolve(value, ctx):
    return value(ctx) if callable(value) else value


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_case(case: Case, shared: Path, repo: Path, keep: bool = False) -> Result:
    tmp = Path(tempfile.mkdtemp(prefix=f"sweep-{case.cls}-"))
    ctx = Ctx(tmp=tmp, shared=shared, repo=repo)
    start = time.monotonic()
    try:
        return _run(case, ctx, start)
    except Skip as err:
        return Result(case, "skipped", why=str(err))
    finally:
        ctx.cleanup()
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _send(proc, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        if sig == signal.SIGINT:  # a terminal: the group
            os.killpg(proc.pid, signal.SIGINT)
        else:  # kill, timeout: the process
            proc.send_signal(sig)


def _run(case: Case, ctx: Ctx, start: float) -> Result:
    try:
        if case.setup:
            case.setup(ctx)
        argv = [str(a) for a in _resolve(case.argv, ctx)]
    except Skip:
        raise
    except Exception as err:  # noqa: BLE001 -- the code under test failed in setup
        raise Skip(f"setup failed: {type(err).__name__}: {err}") from None
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "AMPBOOK_CACHE": str(ctx.shared / "cache"),
        "MPLBACKEND": "Agg",
    }
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    cwd = case.cwd(ctx) if case.cwd else ctx.repo
    env["PYTHONPATH"] = str(cwd)
    env.update({k: str(v) for k, v in (_resolve(case.env, ctx) or {}).items()})
    out_path, err_path = ctx.tmp / ".stdout", ctx.tmp / ".stderr"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        command = argv if argv[0] == "-c" else ["-m", *argv]
        proc = subprocess.Popen(
            [sys.executable, *command],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        hung = False
        deadline = time.monotonic() + case.timeout
        sent = case.signal is None
        while proc.poll() is None:
            now = time.monotonic()
            if now > deadline:
                hung = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            if not sent:
                text = out_path.read_text(errors="replace") + err_path.read_text(
                    errors="replace"
                )
                ready = (
                    now - start >= case.trigger
                    if isinstance(case.trigger, (int, float))
                    else case.trigger(ctx, text)
                )
                if ready:
                    sent = now
                    _send(proc, case.signal)
            elif case.then is not None and sent is not True:
                if now - sent >= case.then[1]:  # during the first one's cleanup
                    _send(proc, case.then[0])
                    sent = True
            time.sleep(0.05)
    seconds = time.monotonic() - start
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    res = Result(case, "clear", proc.returncode, seconds, "", stderr, stdout)
    # Children left behind (a kernel, jupyter-book, loader workers): a wrong result.
    orphans = False
    for _ in range(40):
        orphans = _group_alive(proc.pid)
        if not orphans:
            break
        time.sleep(0.1)
    if orphans:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    if hung:
        res.outcome, res.why = "hang", f"still running after {case.timeout:.0f} s"
        return res
    wrong = None
    if orphans:
        wrong = "child processes outlived the command"
    if wrong is None and case.check:
        try:
            wrong = case.check(ctx, res)
        except Exception as err:  # noqa: BLE001 -- what is on disk is not readable
            wrong = f"the check of the result failed: {type(err).__name__}: {err}"
    if wrong is None and 0 not in case.expect and proc.returncode == 0:
        wrong = "exit 0 for a case that must fail"
    if wrong is None and case.expect == (0,) and proc.returncode != 0:
        wrong = f"exit {proc.returncode} where the command should cope"
    if wrong:
        res.outcome, res.why = "wrong result", wrong
        return res
    if case.signal is not None and not sent:
        res.outcome = "unclear"
        res.why = "ended before the signal was sent (case too fast to test)"
        return res
    if case.then is not None and sent is not True:
        res.outcome = "unclear"
        res.why = "ended before the second signal was sent (case too fast to test)"
        return res
    if "Traceback (most recent call last)" in stderr:
        res.outcome = "traceback"
        res.why = next(
            (l for l in reversed(stderr.splitlines()) if l.strip()), "traceback"
        )[:200]
        return res
    lines = [l for l in stderr.splitlines() if l.startswith("error:")]
    if proc.returncode not in case.expect:
        res.outcome = "unclear"
        res.why = f"exit {proc.returncode}, expected {case.expect}: " + (
            lines[0][:160] if lines else stderr.strip()[-160:]
        )
        return res
    if proc.returncode != 0 and not case.quiet:
        if len(lines) != 1:
            res.outcome = "unclear"
            res.why = f"{len(lines)} error: lines: {stderr.strip()[-200:]}"
            return res
        missing = [w for w in case.words if w.lower() not in lines[0].lower()]
        if missing:
            res.outcome = "unclear"
            res.why = f"does not name {missing}: {lines[0][:200]}"
            return res
    return res


def png_bytes(width: int, height: int, value: int = 0) -> bytes:
    """A valid 8-bit grayscale PNG of ``width`` x ``height`` pixels."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\0" + bytes([value]) * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


# --- checks of what is on disk --------------------------------------------------------


def unchanged(folder_of: Callable[[Ctx], Path]):
    """The folder's files are those it held before the case (a snapshot by setup)."""

    def check(ctx: Ctx, res: Result) -> str | None:
        folder = folder_of(ctx)
        before = json.loads((ctx.tmp / ".snapshot.json").read_text())
        now = snapshot(folder)
        if now != before:
            gone = sorted(set(before) - set(now))
            changed = sorted(k for k in before if k in now and now[k] != before[k])
            return f"{folder} changed (gone {gone}, changed {changed})"
        return None

    return check


def snapshot(folder: Path) -> dict:
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): p.stat().st_size
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def take_snapshot(folder_of: Callable[[Ctx], Path]):
    def setup(ctx: Ctx) -> None:
        folder = folder_of(ctx)
        (ctx.tmp / ".snapshot.json").write_text(json.dumps(snapshot(folder)))

    return setup


def nothing_at(path_of: Callable[[Ctx], Path]):
    def check(ctx: Ctx, res: Result) -> str | None:
        p = path_of(ctx)
        if p.exists() and (not p.is_dir() or any(p.iterdir())):
            return f"{p} was written"
        return None

    return check


def all_of(*checks):
    def check(ctx, res):
        for c in checks:
            if c is None:
                continue
            why = c(ctx, res)
            if why:
                return why
        return None

    return check


def chain(*setups):
    def setup(ctx):
        for s in setups:
            if s is not None:
                s(ctx)

    return setup


# --- shared inputs --------------------------------------------------------------------


def prepare(shared: Path, repo: Path) -> None:
    """The tiny data set and a finished run, made once by the code under test."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    env["AMPBOOK_CACHE"] = str(shared / "cache")
    steps = [
        [
            "ampbook.data",
            "synthesize",
            "--root",
            str(shared / "data"),
            "--train",
            "4",
            "--val",
            "2",
            "--height",
            "32",
            "--width",
            "64",
        ],
        [
            "ampbook.train",
            *TRAIN,
            "--quiet",
            "--data-root",
            str(shared / "data"),
            "--out",
            str(shared / "runs"),
            "--name",
            "a",
        ],
    ]
    for argv in steps:
        done = subprocess.run(
            [sys.executable, "-m", *argv],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise SystemExit(f"could not prepare {argv[:2]}: {done.stderr[-2000:]}")
    # A folder shaped like a finished run of the notebooks, and one HTML page.
    executed = shared / "executed"
    executed.mkdir()
    code = f"""
import json, shutil, sys
sys.path.insert(0, {str(repo)!r})
from booktools import book, run
names = book.toc_chapters()
for stem in names:
    shutil.copy({str(repo)!r} + f"/notebooks/{{stem}}.ipynb", {str(executed)!r})
    path = __import__("pathlib").Path({str(executed)!r}) / f"{{stem}}.ipynb"
    try:
        run.mark(path, "complete", run_id="sweep-run")
    except TypeError:  # a checkout from before run ids
        run.mark(path, "complete")
report = {{"profile": "smoke", "notebooks": [
    {{"name": n, "status": "ok", "seconds": 1.0, "executed_cells": 1,
      "run": "sweep-run"}} for n in names]}}
open({str(executed)!r} + "/run_report.json", "w").write(json.dumps(report))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"could not prepare executed/: {done.stderr[-2000:]}")
    html = shared / "html"
    html.mkdir()
    (html / "index.html").write_text("<html><body><p>page</p></body></html>\n")


# --- the cases ------------------------------------------------------------------------


def train(*argv, out=True) -> Callable[[Ctx], list]:
    def build(ctx: Ctx) -> list:
        base = ["ampbook.train", *TRAIN, "--quiet", "--data-root", str(ctx.data)]
        if out:
            base += ["--out", str(ctx.tmp / "out")]
        return base + [a(ctx) if callable(a) else a for a in argv]

    return build


def cmd(*argv) -> Callable[[Ctx], list]:
    def build(ctx: Ctx) -> list:
        return [a(ctx) if callable(a) else a for a in argv]

    return build


def T(name):  # a path in the case's folder
    return lambda ctx: str(ctx.tmp / name)


def RO(name):  # a path on a read-only tmpfs
    return lambda ctx: str(ctx.readonly() / name)


def BELOW_FILE(name):  # a path below a plain file
    return lambda ctx: str(ctx.blocker() / name)


def LONGP(name=""):  # a path with a 300-byte component
    return lambda ctx: str(ctx.tmp / LONG / name) if name else str(ctx.tmp / LONG)


DATA = lambda ctx: str(ctx.data)  # noqa: E731
HTML = lambda ctx: str(ctx.shared / "html")  # noqa: E731


def settings_cases() -> list[Case]:
    c = "settings"
    return [
        Case(c, "train: unknown precision", train("--precision", "fp7"), words=["fp7"]),
        Case(
            c, "train: epochs 0", train("--epochs", "0"), words=["epochs"], quick=True
        ),
        Case(c, "train: height not /8", train("--height", "12"), words=["height"]),
        Case(
            c,
            "train: --precision fp32-tf32 with --tf32 off",
            train("--precision", "fp32-tf32", "--tf32", "off"),
            words=["fp32-tf32", "--tf32 off"],
            check=nothing_at(lambda ctx: ctx.tmp / "out"),
        ),
        Case(
            c,
            "train: --batch-size 10**30",
            train("--batch-size", str(10**30)),
            words=["batch_size", "training images"],
            check=nothing_at(lambda ctx: ctx.tmp / "out"),
        ),
        Case(
            c,
            "train: --precision fp32-tf32 and --fp16-stream (the older name) run",
            train("--precision", "fp32-tf32", "--fp16-stream"),
            expect=(0,),
        ),
        Case(
            c, "train: resume without checkpoint", train("--resume"), words=["resume"]
        ),
        Case(
            c,
            "train: data root missing",
            train("--data-root", T("missing")),
            words=["missing"],
        ),
        Case(c, "train: cuda without CUDA", train("--device", "cuda"), words=["cuda"]),
        Case(
            c,
            "train: resume and overwrite",
            train("--resume", "--overwrite"),
            words=["contradict"],
        ),
        Case(
            c,
            "evaluate: no prediction folder",
            cmd("ampbook.evaluate", T("preds"), "--data-root", DATA),
            words=["preds"],
            quick=True,
        ),
        Case(
            c,
            "evaluate: data root missing",
            cmd("ampbook.evaluate", T("."), "--data-root", T("nowhere")),
            words=["nowhere"],
        ),
        Case(
            c,
            "evaluate: cuda without CUDA",
            cmd("ampbook.evaluate", T("."), "--data-root", DATA, "--device", "cuda"),
            words=["cuda"],
        ),
        Case(
            c,
            "evaluate: unknown split",
            cmd("ampbook.evaluate", T("."), "--data-root", DATA, "--split", "bogus"),
            words=["bogus"],
        ),
        Case(
            c,
            "data synthesize: no images",
            cmd(
                "ampbook.data",
                "synthesize",
                "--root",
                T("ds"),
                "--train",
                "0",
                "--val",
                "0",
            ),
            words=["positive number of images"],
            check=nothing_at(lambda ctx: ctx.tmp / "ds"),
        ),
        Case(
            c,
            "data synthesize: too small",
            cmd(
                "ampbook.data",
                "synthesize",
                "--root",
                T("ds"),
                "--train",
                "1",
                "--val",
                "1",
                "--height",
                "8",
            ),
            words=["16x16"],
            check=nothing_at(lambda ctx: ctx.tmp / "ds"),
        ),
        Case(
            c,
            "data info: root missing",
            cmd("ampbook.data", "info", "--root", T("nowhere")),
            words=["nowhere"],
        ),
        Case(c, "data: no subcommand", cmd("ampbook.data"), words=["command"]),
        Case(
            c, "bench: unknown benchmark", cmd("ampbook.bench", "nope"), words=["nope"]
        ),
        Case(
            c,
            "bench loader: root missing",
            cmd("ampbook.bench", "loader", "--root", T("nowhere")),
            words=["nowhere"],
        ),
        Case(
            c,
            "bench loader: workers not counts",
            cmd("ampbook.bench", "loader", "--workers", "a,b"),
            words=["--workers"],
        ),
        Case(
            c,
            "bench step: device nonsense",
            cmd("booktools.bench_step", "--device", "nonsense"),
            words=["nonsense"],
        ),
        Case(
            c,
            "bench matmul: device nonsense",
            cmd("ampbook.bench", "matmul", "--device", "nonsense", "--quick"),
            words=["nonsense"],
        ),
        Case(
            c,
            "bench matmul: unknown dtype",
            cmd("ampbook.bench", "matmul", "--quick", "--dtypes", "fp7"),
            words=["fp7"],
        ),
        Case(
            c,
            "doctor: unknown model",
            cmd("ampbook.doctor", "--model", "nosuch"),
            words=["nosuch"],
        ),
        Case(
            c,
            "doctor: unknown torchvision model",
            cmd("ampbook.doctor", "--model", "torchvision:nosuch", "--no-measure"),
            words=["nosuch"],
        ),
        Case(
            c,
            "doctor: input not numbers",
            cmd("ampbook.doctor", "--model", "erfnet", "--input", "3,x,4"),
            words=["--input"],
        ),
        Case(
            c,
            "doctor: unknown GPU",
            cmd("ampbook.doctor", "--model", "erfnet", "--gpus", "zz99"),
            words=["zz99"],
        ),
        Case(
            c,
            "doctor: unknown memory format",
            cmd("ampbook.doctor", "--model", "erfnet", "--memory-format", "nhwc"),
            words=["--memory-format", "nhwc"],
        ),
        Case(
            c,
            "doctor: unknown precision",
            cmd("ampbook.doctor", "--model", "erfnet", "--precisions", "fp7"),
            words=["fp7"],
        ),
        *doctor_settings_cases(c),
        *wrong_input_cases(c),
        Case(
            c,
            "gpucheck: no --out",
            cmd("booktools.gpucheck", "--dry-run"),
            words=["--out"],
        ),
        Case(
            c,
            "gpucheck: unknown stage",
            cmd("booktools.gpucheck", "--out", T("gc"), "--stages", "nb09"),
            words=["nb09"],
        ),
        Case(
            c,
            "build.run: unknown notebook",
            cmd("booktools.run", "--profile", "smoke", "--out", T("x"), "99"),
            words=["99"],
        ),
        Case(
            c,
            "build.run: -p of no notebook",
            cmd(
                "booktools.run",
                "--profile",
                "smoke",
                "--out",
                T("x"),
                "-p",
                "nosuch",
                "1",
                "1",
            ),
            words=["nosuch"],
        ),
        Case(
            c,
            "build.run: unknown profile",
            cmd("booktools.run", "--profile", "huge", "1"),
            words=["huge"],
        ),
        Case(
            c,
            "build.book: no executed folder",
            cmd("booktools.book", "--executed", T("none"), "--out", T("b")),
            words=["none"],
            quick=True,
        ),
        Case(
            c,
            "build.book: --out in the sources",
            lambda ctx: [
                "booktools.book",
                "--executed",
                str(ctx.shared / "executed"),
                "--out",
                str(ctx.repo / "book" / "x"),
            ],
            words=["sources"],
        ),
        Case(
            c,
            "bookcheck: no folder",
            cmd("booktools.bookcheck", T("none")),
            words=["none"],
        ),
        Case(
            c,
            "nbstats: no notebook",
            cmd("booktools.nbstats", T("x.py")),
            words=["x.py"],
        ),
        Case(
            c,
            "bench doctor: unknown model",
            cmd("booktools.doctor_bench", "--model", "nosuch"),
            words=["nosuch"],
        ),
    ]


def wrong_input_cases(c: str) -> list[Case]:
    """Typos a user makes: one error line naming the problem and the nearest valid
    choice, exit 2, nothing created."""
    ladder = ("ampbook.bench", "ladder", "--rungs", "0")
    return [
        Case(
            c,
            "doctor: --modle (a misspelt option)",
            cmd("ampbook.doctor", "--modle", "erfnet"),
            words=["unrecognized option --modle", "did you mean --model?"],
        ),
        Case(
            c,
            "bench ladder: --device tpu",
            cmd(*ladder, "--device", "tpu"),
            words=["'tpu'", "auto, cpu, cuda"],
        ),
        Case(
            c,
            "doctor: torchvision:resnet999",
            cmd("ampbook.doctor", "--model", "torchvision:resnet999", "--no-measure"),
            words=["resnet999", "resnet18", "resnet50"],
        ),
        Case(
            c,
            "bench ladder: --json in a missing folder",
            cmd(*ladder, "--json", T("nowhere/dir/x.json")),
            words=["--json", "does not exist"],
            check=nothing_at(lambda ctx: ctx.tmp / "nowhere"),
        ),
    ]


def doctor_settings_cases(c: str) -> list[Case]:
    """The doctor's --gpus that names no GPU or an unknown one, and a --device where
    no step can be timed: refused, naming the value and what is known."""
    doctor = ("ampbook.doctor", "--model", "erfnet", "--no-measure")
    return [
        Case(
            c,
            "doctor: --gpus ,, names no GPU",
            cmd(*doctor, "--gpus", ",,"),
            words=["--gpus ',,'", "names no GPU", "h200-sxm"],
        ),
        Case(
            c,
            "doctor: --gpus empty",
            cmd(*doctor, "--gpus", ""),
            words=["names no GPU", "a100-sxm-80gb"],
        ),
        Case(
            c,
            "doctor: --gpus one known, one unknown",
            cmd(*doctor, "--gpus", "h200,b900"),
            words=["unknown GPU 'b900'", "did you mean"],
        ),
        Case(
            c,
            "doctor: --device meta",
            cmd(*doctor, "--device", "meta"),
            words=["--device 'meta'", "cpu, cuda"],
        ),
        Case(
            c,
            "doctor: --device unknown",
            cmd("ampbook.doctor", "--model", "erfnet", "--device", "tpu:0"),
            words=["--device 'tpu:0'", "auto"],
        ),
        Case(
            c,
            "doctor: --measure with --no-measure",
            cmd(*doctor, "--measure"),
            words=["--measure", "not allowed with", "--no-measure"],
        ),
    ]


def doctor_numbers_cases(c: str) -> list[Case]:
    """Sizes no GPU could hold are one error line, found before any work; a huge
    input that the model rejects is never allocated to say why (the case runs under
    a 16 GiB address-space limit: a real 40 GB tensor would fail to allocate)."""
    limited = (
        "import resource, runpy, sys\n"
        "cap = 16 * 2**30\n"
        "resource.setrlimit(resource.RLIMIT_AS, (cap, cap))\n"
        "sys.argv = ['ampbook.doctor'] + sys.argv[1:]\n"
        "runpy.run_module('ampbook.doctor', run_name='__main__')\n"
    )

    def no_allocation(ctx, res):
        text = res.stderr.lower()
        return "a real tensor was allocated" if "allocate" in text else None

    return [
        Case(
            c,
            "doctor: --input larger than any GPU",
            cmd(
                "ampbook.doctor",
                "--model",
                "erfnet",
                "--no-measure",
                "--input",
                "3,100000,100000",
                "--batch",
                "8",
            ),  # fmt: skip
            words=["input alone is", "GiB in fp32", "largest GPU", "--batch"],
        ),
        Case(
            c,
            "doctor: --batch larger than any GPU",
            cmd("ampbook.doctor", "--model", "erfnet", "--batch", "100000000"),
            words=["batch 100000000", "largest GPU"],
        ),
        Case(
            c,
            "doctor: a 40 GB input the model rejects is not allocated",
            [
                "-c",
                limited,
                "--model",
                "torchvision:resnet18",
                "--no-measure",
                "--input",
                "1,100000,100000",
                "--batch",
                "1",
                "--gpus",
                "h200",
            ],  # fmt: skip
            words=["rejects input 1x100000x100000", "3 channels"],
            check=no_allocation,
        ),
        Case(
            c,
            "bench matmul --sizes 100000 (beyond the limit)",
            cmd("ampbook.bench", "matmul", "--sizes", "100000"),
            words=["--sizes 100000", "limit is 32768"],
        ),
    ]


def numbers_cases() -> list[Case]:
    c = "numbers"
    out = []
    for flag, value, word in (
        ("--lr", "nan", "lr"),
        ("--lr", "inf", "lr"),
        ("--lr", "-1", "lr"),
        ("--seed", "-1", "seed"),
        ("--seed", str(2**32), "seed"),
        ("--clip-grad", "0", "clip_grad"),
        ("--weight-decay", "nan", "weight_decay"),
        ("--poly-power", "inf", "poly_power"),
        ("--batch-size", "-1", "batch_size"),
        ("--workers", "-1", "workers"),
        ("--synthetic-train", "0", "synthetic_train"),
        ("--max-nonfinite", "0", "max_nonfinite"),
        ("--sync-every", "0", "sync"),
        ("--sync-every", "nan", "sync"),
    ):
        out.append(
            Case(
                c,
                f"train {flag} {value}",
                train(flag, value),
                words=[word],
                quick=value == "nan" and flag == "--lr",
            )
        )
    bench = (
        ("step", ["--height", "0"], "--height"),
        ("step", ["--rounds", "0"], "--rounds"),
        ("step", ["--width", "-8"], "--width"),
        ("step", ["--low-height", "0"], "--low-height"),
        ("matmul", ["--quick", "--min-time", "nan"], "--min-time"),
        ("matmul", ["--min-time", "inf"], "--min-time"),
        ("matmul", ["--min-time", "0"], "--min-time"),
        ("matmul", ["--quick", "--max-call-s", "-1"], "--max-call-s"),
        ("matmul", ["--quick", "--sizes", "0"], "--sizes"),
        ("matmul", ["--quick", "--rounds", "0"], "--rounds"),
        ("matmul", ["--quick", "--threads", "0"], "--threads"),
        ("matmul", ["--quick", "--numel", "-5"], "--numel"),
        ("loader", ["--passes", "0"], "--passes"),
        ("loader", ["--batch-size", "0"], "--batch-size"),
        ("loader", ["--height", "-1"], "--height"),
        ("ladder", ["--height", "0"], "--height"),
        ("ladder", ["--steps", "nan"], "--steps"),
        ("ladder", ["--warmup", "-1"], "--warmup"),
        ("ladder", ["--threads", "0"], "--threads"),
        ("doctor", ["--target-s", "nan"], "--target-s"),
        ("doctor", ["--batch", "0"], "--batch"),
    )
    BENCH = {"step": ("booktools.bench_step",)}  # the runner's bench is the tooling's
    for which, argv, word in bench:
        out.append(
            Case(
                c,
                f"bench {which} {' '.join(argv)}",
                cmd(
                    *BENCH.get(which, ("ampbook.bench", which)),
                    *argv,
                    "--json",
                    T("r.json"),
                ),
                words=[word],
                check=nothing_at(lambda ctx: ctx.tmp / "r.json"),
                quick=argv == ["--height", "0"],
            )
        )
    for argv, word in (
        (["--batch", "0"], "--batch"),
        (["--loader-images-per-s", "nan"], "--loader-images-per-s"),
        (["--loader-images-per-s", "inf"], "--loader-images-per-s"),
        (["--loader-images-per-s", "0"], "--loader-images-per-s"),
        (["--repeats", "0"], "--repeats"),
        (["--input", "3,0,224"], "--input"),
    ):
        out.append(
            Case(
                c,
                f"doctor {' '.join(argv)}",
                cmd("ampbook.doctor", "--model", "erfnet", *argv),
                words=[word],
            )
        )
    out += doctor_numbers_cases(c)
    for value in ("nan", "inf", "-5"):
        out.append(
            Case(
                c,
                f"gpucheck --budget-s {value}",
                cmd("booktools.gpucheck", "--out", T("gc"), "--budget-s", value),
                words=["--budget-s"],
                check=nothing_at(lambda ctx: ctx.tmp / "gc"),
            )
        )
    for argv, word in (
        (["--seed", "-1"], "seed"),
        (["--seed", str(2**40)], "seed"),
        (["--train", "-3"], "train"),
        (["--width", "0"], "width"),
    ):
        out.append(
            Case(
                c,
                f"data synthesize {' '.join(argv)}",
                cmd(
                    "ampbook.data",
                    "synthesize",
                    "--root",
                    T("ds"),
                    "--train",
                    "1",
                    "--val",
                    "1",
                    *argv,
                ),
                words=[word],
                check=nothing_at(lambda ctx: ctx.tmp / "ds"),
            )
        )
    out.append(
        Case(
            c,
            "build.run --threads 0",
            cmd("booktools.run", "--threads", "0", "1"),
            words=["--threads"],
        )
    )
    return out


def parameters_cases() -> list[Case]:
    """Bad ``-p`` values: stopped by the notebook's parameter checks (exit 2, the
    parameter named) before any work, not deep in a chapter."""
    c = "parameters"
    out = []
    for nb, name, value in (
        ("1", "n_samples", "nan"),
        ("1", "seed", "-1"),
        ("1", "seed", str(2**40)),
        ("2", "min_time", "inf"),
        ("2", "matmul_sizes", "5"),
        ("2", "save_results", "BLOCKER/r.json"),
        ("2", "results_dir", "MISSING"),
        ("3", "precisions", "5"),
        ("3", "workers", "-1"),
        ("3", "seed", "-1"),
        ("3", "shuffle", "maybe"),
        ("3", "data_root", "MISSING"),
        ("3", "out_dir", "BLOCKER/runs"),
        ("4", "height", "abc"),
        ("4", "memory_sizes", "5"),
        ("4", "fixed_scales", "[0]"),
        ("4", "seed", "-1"),
        ("5", "loader_workers", "5"),
        ("5", "sensitivity", "5"),
        ("5", "loader_images", "0"),
        ("5", "results_dir", "MISSING"),
        ("6", "erfnet_input", "5"),
        ("6", "gpus", "5"),
        ("6", "results_dir", "MISSING"),
        ("9", "fp8_gpu", "h2000"),
        ("9", "fp8_gpu", "a100"),
    ):

        def argv(ctx, nb=nb, name=name, value=value):
            v = value.replace("BLOCKER", str(ctx.blocker())).replace(
                "MISSING", str(ctx.tmp / "missing")
            )
            return [
                "booktools.run",
                "--profile",
                "smoke",
                "--threads",
                "1",
                "--out",
                str(ctx.tmp / "out"),
                "-p",
                name,
                v,
                nb,
            ]

        out.append(
            Case(
                c,
                f"notebook {nb}: -p {name} {value}",
                argv,
                words=[f"parameter {name}"],
                timeout=300,
                quick=(nb, name) == ("2", "min_time"),
            )
        )
    out.append(  # a few bytes of YAML that stand for 9**9 items
        Case(
            c,
            "notebook 1: -p n_samples an alias bomb",
            cmd(
                "booktools.run",
                "--profile",
                "smoke",
                "--out",
                T("out"),
                "-p",
                "n_samples",
                ALIAS_BOMB,
                "1",
            ),
            words=["-p", "alias"],
            check=nothing_at(lambda ctx: ctx.tmp / "out"),
            timeout=60,
        )
    )
    return out


def _kept_epoch_1(out: Path) -> str | None:
    """A run stopped by a full disk in epoch 2 keeps epoch 1 (record and
    checkpoint)."""
    runs = list(out.glob("*.json"))
    if len(runs) != 1:
        return f"expected one run record, found {len(runs)}"
    epochs = [e.get("epoch") for e in json.loads(runs[0].read_text())["epochs"]]
    if epochs != [1]:
        return f"the record lists epochs {epochs}, not [1]"
    if not runs[0].with_suffix(".ckpt").is_file():
        return "epoch 1's checkpoint was lost"
    return None


def fs_cases() -> list[Case]:
    c = "filesystem"
    out = []
    for label, where in (
        ("read-only", RO),
        ("name over 255 bytes", LONGP),
        ("below a file", BELOW_FILE),
    ):
        out += [
            Case(
                c,
                f"train --out {label}",
                train("--out", where("runs")),
                quick=label == "read-only",
            ),
            Case(
                c,
                f"train --save-predictions {label}",
                train("--save-predictions", where("preds")),
            ),
            Case(
                c,
                f"data synthesize --root {label}",
                cmd(
                    "ampbook.data",
                    "synthesize",
                    "--root",
                    where("ds"),
                    "--train",
                    "1",
                    "--val",
                    "1",
                    "--height",
                    "32",
                    "--width",
                    "64",
                ),
            ),
            Case(
                c,
                f"bench loader --json {label}",
                cmd(
                    "ampbook.bench",
                    "loader",
                    "--root",
                    DATA,
                    "--workers",
                    "0",
                    "--passes",
                    "1",
                    "--height",
                    "16",
                    "--width",
                    "32",
                    "--json",
                    where("r.json"),
                ),
                check=lambda ctx, res: (
                    "measured before refusing" if "images/s" in res.stdout else None
                ),
            ),
            Case(
                c,
                f"bench step --json {label}",
                cmd("booktools.bench_step", "--json", where("r.json")),
            ),
            Case(
                c,
                f"bench matmul --save {label}",
                cmd("ampbook.bench", "matmul", "--quick", "--save", where("r.json")),
            ),
            Case(
                c,
                f"bench doctor --json {label}",
                cmd("booktools.doctor_bench", "--json", where("r.json")),
            ),
            Case(
                c,
                f"doctor --json {label}",
                cmd(
                    "ampbook.doctor",
                    "--model",
                    "erfnet",
                    "--no-measure",
                    "--json",
                    where("r.json"),
                ),
            ),
            Case(
                c,
                f"doctor --markdown {label}",
                cmd(
                    "ampbook.doctor",
                    "--model",
                    "erfnet",
                    "--no-measure",
                    "--markdown",
                    where("r.md"),
                ),
            ),
            Case(
                c,
                f"gpucheck --out {label}",
                cmd("booktools.gpucheck", "--lease", "--dry-run", "--out", where("gc")),
            ),
            Case(
                c,
                f"build.run --out {label}",
                cmd("booktools.run", "--profile", "smoke", "--out", where("ex"), "1"),
            ),
            Case(
                c,
                f"build.book --out {label}",
                lambda ctx, where=where: [
                    "booktools.book",
                    "--executed",
                    str(ctx.shared / "executed"),
                    "--out",
                    where("book")(ctx),
                ],
            ),
        ]
    out += [
        Case(
            c,
            "evaluate: prediction folder name over 255 bytes",
            cmd("ampbook.evaluate", LONGP("p"), "--data-root", DATA),
        ),
        Case(
            c, "train --data-root name over 255 bytes", train("--data-root", LONGP("d"))
        ),
        Case(
            c,
            "bookcheck: name over 255 bytes",
            cmd("booktools.bookcheck", LONGP("h")),
        ),
        Case(
            c,
            "train: no room for a checkpoint",
            lambda ctx: train("--out", str(ctx.tmpfs("full", size="200k")))(ctx),
            expect=(2,),
            words=["checkpoint", "MiB free"],
            quick=True,
            check=lambda ctx, res: (
                "the refused run left files"
                if any((ctx.tmp / "full").iterdir())
                else None
            ),
        ),
        Case(
            c,
            "train: disk full while writing the second checkpoint",
            lambda ctx: train(
                "--epochs", "2", "--out", str(ctx.tmpfs("full", size="40m"))
            )(ctx),
            expect=(1,),
            words=["space"],
            check=lambda ctx, res: _kept_epoch_1(ctx.tmp / "full"),
        ),
        Case(
            c,
            "data synthesize: disk full half-way",
            lambda ctx: [
                "ampbook.data",
                "synthesize",
                "--root",
                str(ctx.tmpfs("full", size="300k") / "ds"),
                "--train",
                "40",
                "--val",
                "2",
                "--height",
                "64",
                "--width",
                "128",
            ],
            expect=(1,),
            words=["space"],
            check=lambda ctx, res: (
                "a partial set was left"
                if (ctx.tmp / "full" / "ds" / "leftImg8bit").exists()
                else None
            ),
        ),
        Case(
            c,
            "bench loader --json in a missing folder (refused, nothing made)",
            cmd(
                "ampbook.bench",
                "loader",
                "--root",
                DATA,
                "--workers",
                "0",
                "--passes",
                "1",
                "--height",
                "16",
                "--width",
                "32",
                "--json",
                T("new/sub/r.json"),
            ),
            words=["--json", "folder", "does not exist"],
            check=nothing_at(lambda ctx: ctx.tmp / "new"),
        ),
    ]
    return out


def _signal_case(
    c,
    name,
    argv,
    sig,
    trigger,
    expect,
    words=(),
    check=None,
    setup=None,
    timeout=240,
    quick=False,
):
    return Case(
        c,
        name,
        argv,
        expect=(expect,),
        words=words,
        signal=sig,
        trigger=trigger,
        check=check,
        setup=setup,
        timeout=timeout,
        quick=quick,
    )


def text_seen(pattern: str):
    return lambda ctx, text: re.search(pattern, text) is not None


def file_seen(path_of):
    return lambda ctx, text: path_of(ctx).exists()


def signals_cases() -> list[Case]:
    c = "signals"
    INT, TERM = signal.SIGINT, signal.SIGTERM
    out = []
    startup = (
        ("train", train()),
        (
            "data synthesize",
            cmd(
                "ampbook.data",
                "synthesize",
                "--root",
                T("ds"),
                "--train",
                "1",
                "--val",
                "1",
            ),
        ),
        ("bench step", cmd("booktools.bench_step")),
        ("doctor", cmd("ampbook.doctor", "--model", "erfnet")),
        (
            "gpucheck",
            cmd("booktools.gpucheck", "--lease", "--dry-run", "--out", T("gc")),
        ),
        (
            "build.run",
            cmd("booktools.run", "--profile", "smoke", "--out", T("ex"), "1"),
        ),
        (
            "build.book",
            lambda ctx: [
                "booktools.book",
                "--executed",
                str(ctx.shared / "executed"),
                "--out",
                str(ctx.tmp / "b"),
            ],
        ),
        ("bookcheck", cmd("booktools.bookcheck", HTML)),
    )
    for name, argv in startup:
        for sig, code in ((INT, 130), (TERM, 143)):
            out.append(
                _signal_case(
                    c,
                    f"{name}: {sig.name} during start-up",
                    argv,
                    sig,
                    1.5,
                    code,
                    quick=(name, sig) == ("bench step", TERM),
                )
            )
    # evaluate's start-up imports no torch now (its --help answers without it): a stop
    # lands in main, which answers a bad folder within the 50 ms a stop held during an
    # import waits (two lines, the answer and the stop: tests/test_cli.py's race).
    # A stop while main imports torch is bench step's case above.

    def run_status(ctx, res, want="interrupted"):
        p = ctx.tmp / "out" / "s.json"
        if not p.exists():
            return None  # stopped before the first record: nothing to mark
        status = json.loads(p.read_text()).get("status")
        return None if status == want else f"run status {status!r} after a stop"

    long_train = train(
        "--epochs", "50", "--batch-size", "1", "--name", "s", "--progress", "on"
    )
    for sig, code in ((INT, 130), (TERM, 143)):
        out.append(
            _signal_case(
                c,
                f"train: {sig.name} in epoch 2",
                long_train,
                sig,
                file_seen(lambda ctx: ctx.tmp / "out" / "s.json"),
                code,
                words=["interrupted"],
                check=run_status,
                quick=sig == TERM,
            )
        )
        out.append(
            _signal_case(
                c,
                f"doctor: {sig.name} while measuring",
                cmd(
                    "ampbook.doctor",
                    "--model",
                    "torchvision:resnet18",
                    "--batch",
                    "2",
                    "--input",
                    "3,64,64",
                    "--repeats",
                    "50",
                ),
                sig,
                # the answer is printed as the measurement starts
                text_seen("Expected AMP training step speedup"),
                code,
                words=["interrupt"],
            )
        )
        out.append(
            _signal_case(
                c,
                f"bench step: {sig.name} while measuring",
                cmd("booktools.bench_step", "--rounds", "200", "--json", T("r.json")),
                sig,
                text_seen("device:"),
                code,
                check=nothing_at(lambda ctx: ctx.tmp / "r.json"),
            )
        )
        out.append(
            _signal_case(
                c,
                f"bench matmul: {sig.name} while measuring",
                cmd(
                    "ampbook.bench",
                    "matmul",
                    "--sizes",
                    "256",
                    "512",
                    "--min-time",
                    "0.5",
                    "--rounds",
                    "20",
                ),
                sig,
                6.0,
                code,
            )
        )
        out.append(
            _signal_case(
                c,
                f"bench loader: {sig.name} while measuring",
                cmd(
                    "ampbook.bench",
                    "loader",
                    "--root",
                    DATA,
                    "--passes",
                    "400",
                    "--workers",
                    "0,1",
                    "--height",
                    "16",
                    "--width",
                    "32",
                ),
                sig,
                6.0,
                code,
            )
        )

        def gc_report(ctx, res):
            p = ctx.tmp / "gc" / "report.json"
            if not p.exists():
                return "no report.json after the stop"
            report = json.loads(p.read_text())
            return None if report.get("finished") else "report not finished"

        out.append(
            _signal_case(
                c,
                f"gpucheck: {sig.name} in a stage",
                cmd(
                    "booktools.gpucheck",
                    "--dry-run",
                    "--out",
                    T("gc"),
                    "--stages",
                    "nb03",
                ),
                sig,
                text_seen("== nb03"),
                code,
                check=gc_report,
                words=[] if sig == TERM else [],
            )
        )

        def nb_marked(ctx, res):
            from_run = ctx.tmp / "ex" / "slow.ipynb"
            if not from_run.exists():
                return None
            text = from_run.read_text()
            return (
                None if '"interrupted"' in text else "notebook not marked interrupted"
            )

        def slow_notebook(ctx):
            (ctx.tmp / "slow.py").write_text(
                '# %% [markdown]\n# # Slow\n\n# %% tags=["parameters"]\nn = 1\n\n'
                "# %%\nprint('started', flush=True)\n\n# %%\nimport time\n"
                "time.sleep(300)\n"
            )

        out.append(
            _signal_case(
                c,
                f"build.run: {sig.name} in a cell",
                cmd(
                    "booktools.run",
                    "--profile",
                    "smoke",
                    "--out",
                    T("ex"),
                    T("slow.py"),
                ),
                sig,
                file_seen(lambda ctx: ctx.tmp / "ex" / "slow.ipynb"),
                code,
                check=nb_marked,
                setup=slow_notebook,
            )
        )
        out.append(
            _signal_case(
                c,
                f"build.book: {sig.name} during jupyter-book",
                lambda ctx: [
                    "booktools.book",
                    "--executed",
                    str(ctx.shared / "executed"),
                    "--out",
                    str(ctx.tmp / "b"),
                ],
                sig,
                text_seen("building the book"),
                code,
                timeout=400,
            )
        )

        def no_partial_set(ctx, res):
            root = ctx.tmp / "ds"
            marker = (root / "SYNTHETIC.json").exists()
            images = list(root.rglob("*.png")) if root.exists() else []
            if marker and len(images) != 2 * 61:
                return "a partial set is marked whole"
            if not marker and images:
                return "half-written images left behind"
            return None

        out.append(
            _signal_case(
                c,
                f"data synthesize: {sig.name} while writing",
                cmd(
                    "ampbook.data",
                    "synthesize",
                    "--root",
                    T("ds"),
                    "--train",
                    "60",
                    "--val",
                    "1",
                    "--height",
                    "128",
                    "--width",
                    "256",
                ),
                sig,
                file_seen(lambda ctx: ctx.tmp / "ds" / "gtFine"),
                code,
                check=no_partial_set,
            )
        )

        def replace_setup(ctx):
            shutil.copytree(ctx.data, ctx.tmp / "ds")

        def no_old_marker(ctx, res):
            root = ctx.tmp / "ds"
            meta = root / "SYNTHETIC.json"
            if meta.exists() and json.loads(meta.read_text()).get("train") != 60:
                if len(list(root.rglob("*_leftImg8bit.png"))) != 6:
                    return "the old set's marker stands over a partial set"
            return None

        out.append(
            _signal_case(
                c,
                f"data synthesize: {sig.name} while replacing a set",
                cmd(
                    "ampbook.data",
                    "synthesize",
                    "--root",
                    T("ds"),
                    "--train",
                    "60",
                    "--val",
                    "1",
                    "--height",
                    "128",
                    "--width",
                    "256",
                ),
                sig,
                file_seen(lambda ctx: ctx.tmp / "ds" / "SYNTHETIC.partial"),
                code,
                check=no_old_marker,
                setup=replace_setup,
            )
        )

    def kill_a_loader_worker(ctx, text):
        """Once the run has written its first record: SIGKILL one of its DataLoader
        workers (a fork of the run: the same command line, the run as parent)."""
        if not (ctx.tmp / "out" / "s.json").exists():
            return False
        mark = str(ctx.tmp / "out").encode()
        runs = {}
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if entry.name.isdigit() and mark in (entry / "cmdline").read_bytes():
                    stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    runs[int(entry.name)] = int(stat[1])  # its parent
        workers = [pid for pid, parent in runs.items() if parent in runs]
        for pid in workers[:1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return bool(workers)

    out.append(
        Case(
            c,
            "train: a loader worker killed (SIGKILL) in epoch 2",
            train(
                "--epochs",
                "50",
                "--batch-size",
                "1",
                "--name",
                "s",
                "--workers",
                "1",
            ),
            expect=(1,),
            words=["DataLoader worker", "--workers"],
            signal=0,  # the trigger sends the signal, to the worker
            trigger=kill_a_loader_worker,
            check=lambda ctx, res: run_status(ctx, res, want="failed"),
        )
    )

    # A second stop while the command cleans up after the first (a second Ctrl-C, or
    # a supervisor's SIGTERM): the cleanup still finishes, the status is the first's.
    def no_half_set(ctx, res):
        root = ctx.tmp / "ds2"
        marker = (root / "SYNTHETIC.json").exists()
        images = list(root.rglob("*.png")) if root.exists() else []
        if marker and len(images) != 2 * 401:
            return "a partial set is marked whole"
        if not marker and images:
            return "half-written images left behind"
        return None

    big_set = cmd(
        "ampbook.data",
        "synthesize",
        "--root",
        T("ds2"),
        "--train",
        "400",
        "--val",
        "1",
        "--height",
        "256",
        "--width",
        "512",
    )
    for second in (INT, TERM):
        out.append(
            Case(
                c,
                f"train: SIGINT, then {second.name} during its cleanup",
                long_train,
                expect=(130,),
                words=["interrupted"],
                signal=INT,
                trigger=file_seen(lambda ctx: ctx.tmp / "out" / "s.json"),
                then=(second, 0.01),
                check=run_status,
            )
        )
        out.append(
            Case(
                c,
                f"data synthesize: SIGINT, then {second.name} during its cleanup",
                big_set,
                expect=(130,),
                words=["interrupted"],
                signal=INT,
                trigger=file_seen(lambda ctx: ctx.tmp / "ds2" / "gtFine"),
                then=(second, 0.02),
                check=no_half_set,
            )
        )
    out.append(
        _signal_case(
            c,
            "train --overwrite: Ctrl-C before the first record",
            lambda ctx: train(
                "--out",
                str(ctx.finished()),
                "--name",
                "a",
                "--overwrite",
                "--epochs",
                "5",
                "--batch-size",
                "1",
                out=False,
            )(ctx),
            INT,
            file_seen(lambda ctx: ctx.finished() / ".a.json.replaced"),
            130,
            setup=take_snapshot(lambda ctx: ctx.finished()),
            check=unchanged(lambda ctx: ctx.finished()),
        )
    )
    return out


def _edit_json(path_of, edit):
    def setup(ctx):
        p = path_of(ctx)
        rec = json.loads(p.read_text())
        edit(rec)
        p.write_text(json.dumps(rec))

    return setup


def _edit_ckpt(edit):
    def setup(ctx):
        code = (
            "import sys, torch; p = sys.argv[1]; "
            "c = torch.load(p, weights_only=True); "
            f"{edit}; torch.save(c, p)"
        )
        subprocess.run(
            [sys.executable, "-c", code, str(ctx.finished() / "a.ckpt")], check=True
        )

    return setup


RESUME = lambda ctx: train(  # noqa: E731
    "--out", str(ctx.finished()), "--name", "a", "--resume", out=False
)(ctx)


def _results_reader(ctx: Ctx) -> list:
    code = (
        "from ampbook.results import load_results_dir; import sys; "
        "rs = load_results_dir(sys.argv[1]); "
        "print('ignored', len(rs.ignored)); "
        "[print('why', i.reason) for i in rs.ignored]; "
        "[r.images_per_s for r in rs.train_runs]; "
        "[l.efficiency for l in rs.layer_profiles]"
    )
    return ["-c", code, str(ctx.tmp / "results")]


def _result_file(kind: str, edit: Callable[[dict], None]):
    def setup(ctx):
        folder = ctx.tmp / "results"
        folder.mkdir()
        if kind == "train":
            rec = json.loads((ctx.shared / "runs" / "a.json").read_text())
        elif kind == "layer":
            rec = {
                "schema": "ampbook.layer_profile/1",
                "environment": {"device_name": "X", "device": "cuda"},
                "layers": [
                    {
                        "scope": "a",
                        "type": "Conv2d",
                        "measured_s": 1e-3,
                        "predicted_s": 1e-3,
                    }
                ],
                "precision": "fp32",
                "batch_size": 1,
                "height": 8,
                "width": 8,
                "time_source": "cuda",
                "steps": 1,
                "step_s": 1e-3,
                "predicted_step_s": 1e-3,
                "unattributed_s": 0.0,
                "ceilings": "x",
            }
        else:
            rec = {
                "schema": "ampbook.loader_sweep/1",
                "environment": {"device_name": "X"},
                "results": [{"workers": 0, "images_per_s": 10.0}],
                "cpu_count": 2,
                "height": 8,
                "width": 8,
                "batch_size": 1,
                "images": 4,
                "synthetic": True,
                "decode_resize_images_per_s": 5.0,
            }
        edit(rec)
        (folder / "r.json").write_text(json.dumps(rec))

    return setup


def _ignored(ctx, res):
    return None if "ignored 1" in res.stdout else "the bad file was not set aside"


def files_cases() -> list[Case]:
    c = "files"
    a_json = lambda ctx: ctx.finished() / "a.json"  # noqa: E731
    out = []
    for label, edit in (
        ("epochs a string", lambda r: r.update(epochs="x")),
        ("epoch number a list", lambda r: r["epochs"][0].update(epoch=[1])),
        ("resumed a number", lambda r: r.update(resumed=5)),
        ("started a number", lambda r: r.update(started=5)),
        ("wall_s a string", lambda r: r["epochs"][0].update(wall_s="x")),
    ):
        out.append(
            Case(
                c,
                f"train --resume: run JSON {label}",
                RESUME,
                setup=_edit_json(a_json, edit),
                expect=(0, 2),
                quick=label == "epochs a string",
            )
        )
    out.append(
        Case(
            c,
            "train --resume: run JSON not JSON",
            RESUME,
            expect=(0,),
            setup=lambda ctx: a_json(ctx).write_text("{not json"),
        )
    )
    for label, edit in (
        ("epoch 0", "c['epoch'] = 0"),
        ("epoch 7 of 1", "c['epoch'] = 7"),
        ("epoch a string", "c['epoch'] = 'one'"),
        ("records empty", "c['records'] = '[]'"),
        ("records not JSON", "c['records'] = '[{'"),
        ("rng missing", "del c['rng']"),
        ("counters wrong", "c['counters'] = {'x': 1}"),
        ("model tensors dropped", "c['model'] = {}"),
    ):
        out.append(
            Case(
                c,
                f"train --resume: checkpoint {label}",
                RESUME,
                words=["resume"],
                setup=chain(
                    _edit_ckpt(edit), take_snapshot(lambda ctx: ctx.finished())
                ),
                check=unchanged(lambda ctx: ctx.finished()),
            )
        )
    out.append(
        Case(
            c,
            "train --resume: checkpoint with NaN weights",
            lambda ctx: RESUME(ctx) + ["--epochs", "2"],
            expect=(1,),
            words=["not finite"],
            setup=_edit_ckpt(
                "import json; d = json.loads(c['config']); d['epochs'] = 2; "
                "c['config'] = json.dumps(d); "
                "[v.fill_(float('nan')) for v in c['model'].values() "
                "if v.is_floating_point()]"
            ),
            check=lambda ctx, res: (
                None
                if json.loads((ctx.finished() / "a.json").read_text())["status"]
                == "stopped: nothing learned"
                else "the record does not say nothing was learned"
            ),
        )
    )
    out.append(
        Case(
            c,
            "train --resume: checkpoint truncated",
            RESUME,
            words=["resume"],
            setup=lambda ctx: (ctx.finished() / "a.ckpt").write_bytes(
                (ctx.finished() / "a.ckpt").read_bytes()[:999]
            ),
        )
    )
    for kind, label, edit in (
        ("train", "wall_s zero", lambda r: r["epochs"][0].update(wall_s=0)),
        ("train", "step_s a string", lambda r: r["epochs"][0].update(step_s="x")),
        ("train", "images zero", lambda r: r["epochs"][0].update(images=0)),
        ("train", "height a string", lambda r: r["config"].update(height="x")),
        ("train", "epochs missing", lambda r: r.pop("epochs")),
        ("layer", "step_s zero", lambda r: r.update(step_s=0)),
        ("layer", "steps a string", lambda r: r.update(steps="x")),
        (
            "loader",
            "images_per_s zero",
            lambda r: r["results"][0].update(images_per_s=0),
        ),
        ("loader", "cpu_count a string", lambda r: r.update(cpu_count="two")),
    ):
        out.append(
            Case(
                c,
                f"results reader: {kind} {label}",
                _results_reader,
                expect=(0,),
                setup=_result_file(kind, edit),
                check=_ignored,
            )
        )

    def report(edit):
        def setup(ctx):
            shutil.copytree(ctx.shared / "executed", ctx.tmp / "executed")
            p = ctx.tmp / "executed" / "run_report.json"
            if edit is None:
                p.write_text("{not json")
                return
            rec = json.loads(p.read_text())
            edit(rec)
            p.write_text(json.dumps(rec))

        return setup

    book_argv = lambda ctx: [  # noqa: E731
        "booktools.book",
        "--executed",  # noqa: E731
        str(ctx.tmp / "executed"),
        "--out",
        str(ctx.tmp / "b"),
    ]
    for label, edit in (
        ("not JSON", None),
        ("without notebooks", lambda r: r.pop("notebooks")),
        ("an entry without seconds", lambda r: r["notebooks"][0].pop("seconds")),
        (
            "an entry without executed_cells",
            lambda r: r["notebooks"][0].pop("executed_cells"),
        ),
        ("profile a number", lambda r: r.update(profile=3)),
    ):
        out.append(
            Case(
                c,
                f"build.book: run_report.json {label}",
                book_argv,
                setup=report(edit),
                words=["run_report.json"],
                check=nothing_at(lambda ctx: ctx.tmp / "b"),
                quick=label == "without notebooks",
            )
        )

    def profiles(text):
        def setup(ctx):
            (ctx.repo_copy() / "notebooks" / "profiles.yml").write_text(text)

        return setup

    for label, text in (
        ("a YAML syntax error", "smoke: {01_floating_point: [\n"),
        ("a list", "- smoke\n- cpu\n"),
        ("a profile that is a string", "smoke: tiny\ncpu: {}\ngpu: {}\n"),
        (
            "a notebook entry that is a list",
            "smoke: {01_floating_point: [1, 2]}\ncpu: {}\ngpu: {}\n",
        ),
    ):
        out.append(
            Case(
                c,
                f"build.run: profiles.yml {label}",
                cmd("booktools.run", "--profile", "smoke", "--out", T("ex"), "1"),
                setup=profiles(text),
                words=["profiles.yml"],
                cwd=lambda ctx: ctx.repo_copy(),
            )
        )

    for label, text in (
        ("truncated", '{"key": "x", "weights": [1.0, 2'),
        ("too few weights", None),
    ):

        def setup(ctx, text=text):
            env = {
                **os.environ,
                "AMPBOOK_CACHE": str(ctx.tmp / "cache"),
                "OMP_NUM_THREADS": "1",
                "PYTHONPATH": str(ctx.repo),
            }
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ampbook.train",
                    *TRAIN,
                    "--quiet",
                    "--data-root",
                    str(ctx.data),
                    "--class-weights",
                    "enet",
                    "--no-checkpoint",
                    "--out",
                    str(ctx.tmp / "setup-out"),
                ],
                cwd=ctx.repo,
                env=env,
                capture_output=True,
                check=True,
            )
            for f in (ctx.tmp / "cache" / "class-weights").glob("*.json"):
                if text is None:
                    rec = json.loads(f.read_text())
                    rec["weights"] = rec["weights"][:3]
                    f.write_text(json.dumps(rec))
                else:
                    f.write_text(text)

        def cache_ok(ctx, res):
            for f in (ctx.tmp / "cache" / "class-weights").glob("*.json"):
                rec = json.loads(f.read_text())
                if len(rec.get("weights", [])) != 19:
                    return "the damaged class-weight cache was kept"
            return None

        out.append(
            Case(
                c,
                f"train: class-weight cache {label}",
                train("--class-weights", "enet", "--no-checkpoint"),
                expect=(0,),
                setup=setup,
                check=cache_ok,
                env=lambda ctx: {"AMPBOOK_CACHE": str(ctx.tmp / "cache")},
            )
        )
    for spec, word in (
        (":x", ":x"),
        (".x:y", ".x:y"),
        ("os:getcwd", "getcwd"),
        ("sweepbad:build", "sweepbad"),
        ("json:x", "x"),
    ):

        def setup(ctx):
            (ctx.tmp / "sweepbad.py").write_text("def build(:\n")

        out.append(
            Case(
                c,
                f"doctor: model spec {spec}",
                cmd("ampbook.doctor", "--model", spec, "--no-measure"),
                words=[word],
                setup=setup,
                env=lambda ctx: {"PYTHONPATH": f"{ctx.tmp}:{ctx.repo}"},
            )
        )

    def sysexit(code):
        def setup(ctx):
            (ctx.tmp / "quitter.py").write_text(
                f"import sys\ndef build():\n    sys.exit({code})\n"
            )

        return setup

    for code in (0, 3):
        out.append(
            Case(
                "results",
                f"doctor: model factory calls sys.exit({code})",
                cmd("ampbook.doctor", "--model", "quitter:build", "--no-measure"),
                words=["sys.exit"],
                setup=sysexit(code),
                cwd=lambda ctx: ctx.tmp,
                env=lambda ctx: {"PYTHONPATH": f"{ctx.tmp}:{ctx.repo}"},
                quick=code == 0,
            )
        )

    def predictions(ctx, damage: bool) -> None:
        """A prediction for each val image: 1x1 (the wrong size), or of the right size
        with one byte of its pixel data flipped (a damaged file)."""
        preds = ctx.tmp / "preds"
        for gt in sorted((ctx.data / "gtFine" / "val").rglob("*_labelIds.png")):
            stem = gt.name.replace("_gtFine_labelIds.png", "")
            dest = preds / gt.parent.name / f"{stem}_pred.png"
            dest.parent.mkdir(parents=True, exist_ok=True)
            if damage:
                raw = bytearray(gt.read_bytes())
                raw[raw.find(b"IDAT") + 12] ^= 0xFF
                dest.write_bytes(bytes(raw))
            else:
                dest.write_bytes(png_bytes(1, 1))

    def damaged_label(ctx):
        root = ctx.copy_data()
        label = sorted((root / "gtFine" / "train").rglob("*.png"))[1]
        raw = bytearray(label.read_bytes())
        raw[raw.find(b"IDAT") + 12] ^= 0xFF
        label.write_bytes(bytes(raw))

    out += [
        Case(
            c,
            "evaluate: predictions of the wrong size",
            cmd("ampbook.evaluate", T("preds"), "--data-root", DATA),
            setup=lambda ctx: predictions(ctx, False),
            words=["W x H"],
        ),
        Case(
            c,
            "evaluate: a damaged prediction PNG (one byte flipped)",
            cmd("ampbook.evaluate", T("preds"), "--data-root", DATA),
            setup=lambda ctx: predictions(ctx, True),
            words=["CRC"],
        ),
        Case(
            c,
            "train: a damaged label PNG (one byte flipped)",
            lambda ctx: train("--data-root", str(ctx.copy_data()))(ctx),
            setup=damaged_label,
            expect=(1, 2),
            words=["CRC"],
        ),
    ]
    return out


def ulimit_n(limit: int, argv: Callable[[Ctx], list]) -> Callable[[Ctx], list]:
    """``argv`` (after ``python -m``) run under ``ulimit -n LIMIT`` (soft and hard)."""

    def build(ctx: Ctx) -> list:
        code = (
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit})); "
            "os.execv(sys.executable, [sys.executable, '-m', *sys.argv[1:]])"
        )
        return ["-c", code, *[str(a) for a in argv(ctx)]]

    return build


def ulimit_v(kib: int, argv: Callable[[Ctx], list]) -> Callable[[Ctx], list]:
    """``argv`` (after ``python -m``) run under ``ulimit -v KIB`` (soft and hard)."""

    def build(ctx: Ctx) -> list:
        code = (
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_AS, ({kib * 1024}, {kib * 1024})); "
            "os.execv(sys.executable, [sys.executable, '-m', *sys.argv[1:]])"
        )
        return ["-c", code, *[str(a) for a in argv(ctx)]]

    return build


def closed_fd(fd: int, argv: Callable[[Ctx], list]) -> Callable[[Ctx], list]:
    """``argv`` (after ``python -m``) started with file descriptor ``fd`` closed
    (``>&-`` for 1, ``2>&-`` for 2)."""

    def build(ctx: Ctx) -> list:
        code = (
            "import os, sys; "
            f"os.close({fd}); "
            "os.execv(sys.executable, [sys.executable, '-m', *sys.argv[1:]])"
        )
        return ["-c", code, *[str(a) for a in argv(ctx)]]

    return build


def start_up_cases(c: str) -> list[Case]:
    """A locale that is not UTF-8, an address-space limit too small for torch, a
    closed stdout or stderr: one error line or a clean run, never a traceback."""
    doctor = ("ampbook.doctor", "--model", "erfnet", "--no-measure", "--gpus", "h200")
    return [
        Case(
            c,
            "doctor --markdown: LC_ALL=C, PYTHONUTF8=0 (a UTF-8 file, ASCII stdout)",
            cmd(*doctor, "--markdown", T("r.md")),
            expect=(0,),
            env={
                "LC_ALL": "C",
                "LANG": "C",
                "PYTHONUTF8": "0",
                "PYTHONCOERCECLOCALE": "0",
                "PYTHONIOENCODING": "",
            },
            check=lambda ctx, res: (
                None
                if "\u2013" in (ctx.tmp / "r.md").read_text(encoding="utf-8")
                and res.stdout.isascii()
                else "the report is not UTF-8 or stdout is not ASCII"
            ),
        ),
        Case(
            c,
            "train: ulimit -v 1500000 (too small to load torch)",
            ulimit_v(1_500_000, train()),
            words=["ulimit -v 1500000", "torch"],
            check=nothing_at(lambda ctx: ctx.tmp / "out"),
        ),
        Case(
            c,
            "doctor: ulimit -v 1500000",
            ulimit_v(1_500_000, cmd(*doctor)),
            words=["address-space limit"],
        ),
        Case(
            c,
            "bench step: ulimit -v 4500000, a step too large to allocate",
            ulimit_v(
                4_500_000,
                cmd(
                    "booktools.bench_step",
                    "--height",
                    "1024",
                    "--width",
                    "2048",
                    "--batch-size",
                    "16",
                    "--rounds",
                    "1",
                ),
            ),
            expect=(1,),
            words=["out of memory", "ulimit -v"],
        ),
        Case(
            c,
            "doctor: stdout closed (>&-)",
            closed_fd(1, cmd(*doctor)),
            words=["standard output is closed"],
        ),
        Case(
            c,
            "doctor: stderr closed (2>&-)",
            closed_fd(2, cmd(*doctor)),
            expect=(0,),
        ),
        Case(
            c,
            "doctor: stderr closed (2>&-), a misspelt option",
            closed_fd(2, cmd("ampbook.doctor", "--modle", "erfnet")),
            quiet=True,
        ),
    ]


def env_cases() -> list[Case]:
    c = "environment"
    out = [*start_up_cases(c)]
    # The open-file limit: checked before loader workers or a kernel start.
    out += [
        Case(
            c,
            "train: ulimit -n 20 with 2 loader workers",
            ulimit_n(20, train("--workers", "2")),
            words=["ulimit -n", "20"],
            check=nothing_at(lambda ctx: ctx.tmp / "out"),
        ),
        Case(
            c,
            "build.run: ulimit -n 20",
            ulimit_n(
                20,
                cmd("booktools.run", "--profile", "smoke", "--out", T("ex"), "1"),
            ),
            words=["ulimit -n", "20"],
            check=nothing_at(lambda ctx: ctx.tmp / "ex"),
        ),
    ]
    # A matplotlib backend that does not exist, a locale that is not UTF-8.
    for label, env in (
        ("MPLBACKEND=nonsense", {"MPLBACKEND": "nonsense"}),
        ("LC_ALL=C", {"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": ""}),
    ):
        out += [
            Case(
                c,
                f"train: {label}",
                train(),
                expect=(0,),
                env=env,
            ),
            Case(
                c,
                f"data synthesize: {label}",
                cmd(
                    "ampbook.data",
                    "synthesize",
                    "--root",
                    T("ds"),
                    "--train",
                    "1",
                    "--val",
                    "1",
                    "--height",
                    "16",
                    "--width",
                    "16",
                ),
                expect=(0,),
                env=env,
            ),
            Case(
                c,
                f"build.run: {label}",
                cmd("booktools.run", "--profile", "smoke", "--out", T("ex"), "1"),
                expect=(0,),
                env=env,
                timeout=300,
            ),
        ]
    for label, env, word in (
        ("WORLD_SIZE=two", {"WORLD_SIZE": "two"}, "WORLD_SIZE"),
        ("WORLD_SIZE=2 without torchrun", {"WORLD_SIZE": "2"}, "torchrun"),
        ("WORLD_SIZE=0", {"WORLD_SIZE": "0"}, "WORLD_SIZE"),
        (
            "RANK=5 of 2",
            {"WORLD_SIZE": "2", "RANK": "5", "MASTER_ADDR": "x", "MASTER_PORT": "1"},
            "RANK",
        ),
        ("LOCAL_RANK=-1", {"LOCAL_RANK": "-1"}, "LOCAL_RANK"),
        (
            "CITYSCAPES_DATASET missing",
            {"CITYSCAPES_DATASET": "/nonexistent/cs"},
            "CITYSCAPES_DATASET",
        ),
    ):

        def argv(ctx, env=env):
            base = ["ampbook.train", *TRAIN, "--quiet", "--out", str(ctx.tmp / "o")]
            if "CITYSCAPES_DATASET" not in env:
                base += ["--data-root", str(ctx.data)]
            return base

        out.append(
            Case(
                c,
                f"train: {label}",
                argv,
                env=env,
                words=[word],
                quick=label == "WORLD_SIZE=two",
            )
        )

    def cache_file(ctx):
        f = ctx.tmp / "cachefile"
        f.write_text("x")
        return {"AMPBOOK_CACHE": str(f)}

    out += [
        Case(
            c,
            "train: AMPBOOK_CACHE a file",
            lambda ctx: [
                "ampbook.train",
                *TRAIN,
                "--quiet",
                "--synthetic-train",
                "2",
                "--synthetic-val",
                "1",
                "--out",
                str(ctx.tmp / "o"),
            ],
            env=cache_file,
            words=["AMPBOOK_CACHE"],
        ),
        Case(
            c,
            "bench loader: AMPBOOK_CACHE a file",
            cmd("ampbook.bench", "loader", "--passes", "1"),
            env=cache_file,
            words=["AMPBOOK_CACHE"],
        ),
        Case(
            c,
            "train: AMPBOOK_CACHE read-only",
            lambda ctx: [
                "ampbook.train",
                *TRAIN,
                "--quiet",
                "--synthetic-train",
                "2",
                "--synthetic-val",
                "1",
                "--out",
                str(ctx.tmp / "o"),
            ],
            env=lambda ctx: {"AMPBOOK_CACHE": str(ctx.readonly() / "c")},
            words=["AMPBOOK_CACHE"],
        ),
        Case(
            c,
            "evaluate: CITYSCAPES_DATASET missing",
            cmd("ampbook.evaluate", T(".")),
            env={"CITYSCAPES_DATASET": "/nonexistent/cs"},
            words=["CITYSCAPES_DATASET"],
        ),
        Case(
            c,
            "bookcheck: CHROMIUM missing",
            cmd("booktools.bookcheck", HTML),
            env={"CHROMIUM": "/nonexistent/chromium"},
            words=["CHROMIUM"],
        ),
        Case(
            c,
            "bookcheck: CHROMIUM not a browser",
            cmd("booktools.bookcheck", HTML),
            env={"CHROMIUM": "/bin/true"},
            words=["true"],
            quick=True,
        ),
        Case(
            c,
            "build.run: AMPBOOK_PROFILE unknown",
            cmd("booktools.run", "--out", T("ex"), "1"),
            env={"AMPBOOK_PROFILE": "huge"},
            words=["AMPBOOK_PROFILE"],
        ),
        Case(
            c,
            "bench loader: CITYSCAPES_DATASET missing",
            cmd("ampbook.bench", "loader"),
            env={"CITYSCAPES_DATASET": "/nonexistent/cs"},
            words=["CITYSCAPES_DATASET"],
        ),
    ]
    return out


def special_cases() -> list[Case]:
    c = "special"

    def pred_fifo(ctx):
        gt = sorted((ctx.data / "gtFine" / "val").rglob("*_labelIds.png"))[0]
        stem = gt.name.replace("_gtFine_labelIds.png", "")
        ctx.fifo(ctx.tmp / "preds" / "midhaven" / f"{stem}_pred.png")

    def data_fifo(ctx):
        root = ctx.copy_data()
        label = sorted((root / "gtFine" / "train").rglob("*.png"))[0]
        label.unlink()
        ctx.fifo(label)

    def ckpt_fifo(ctx):
        p = ctx.finished() / "a.ckpt"
        p.unlink()
        ctx.fifo(p)

    def json_fifo(ctx):
        p = ctx.finished() / "a.json"
        p.unlink()
        ctx.fifo(p)

    def results_fifo(ctx):
        ctx.fifo(ctx.tmp / "results" / "r.json")

    def nb_fifo(ctx):
        ctx.fifo(ctx.tmp / "x.py")

    def executed_fifo(ctx):
        shutil.copytree(ctx.shared / "executed", ctx.tmp / "executed")
        first = sorted((ctx.tmp / "executed").glob("*.ipynb"))[0]
        first.unlink()
        ctx.fifo(first)

    def profiles_fifo(ctx):
        p = ctx.repo_copy() / "notebooks" / "profiles.yml"
        p.unlink()
        ctx.fifo(p)

    return [
        Case(
            c,
            "evaluate: a prediction that is a FIFO",
            cmd("ampbook.evaluate", T("preds"), "--data-root", DATA),
            setup=pred_fifo,
            words=["FIFO"],
            timeout=90,
            quick=True,
        ),
        Case(
            c,
            "evaluate: prediction folder /dev/null",
            cmd("ampbook.evaluate", "/dev/null", "--data-root", DATA),
            words=["/dev/null"],
            timeout=90,
        ),
        Case(
            c,
            "train: a label that is a FIFO",
            lambda ctx: train("--data-root", str(ctx.copy_data()))(ctx),
            setup=data_fifo,
            words=["FIFO"],
            timeout=90,
        ),
        Case(
            c,
            "train --resume: checkpoint a FIFO",
            RESUME,
            setup=ckpt_fifo,
            words=["regular file"],
            timeout=90,
        ),
        Case(
            c,
            "train --resume: run JSON a FIFO",
            RESUME,
            setup=json_fifo,
            expect=(0,),
            timeout=90,
        ),
        Case(
            c,
            "results reader: a results file that is a FIFO",
            _results_reader,
            setup=results_fifo,
            expect=(0,),
            check=_ignored,
            timeout=90,
        ),
        Case(
            c,
            "build.run: notebook source a FIFO",
            cmd("booktools.run", "--profile", "smoke", "--out", T("ex"), T("x.py")),
            setup=nb_fifo,
            words=["FIFO"],
            timeout=90,
        ),
        Case(
            c,
            "build.book: an executed notebook that is a FIFO",
            lambda ctx: [
                "booktools.book",
                "--executed",
                str(ctx.tmp / "executed"),
                "--out",
                str(ctx.tmp / "b"),
            ],
            setup=executed_fifo,
            timeout=90,
        ),
        Case(
            c,
            "build.run: profiles.yml a FIFO",
            cmd("booktools.run", "--profile", "smoke", "--out", T("ex"), "1"),
            setup=profiles_fifo,
            words=["FIFO"],
            timeout=90,
            cwd=lambda ctx: ctx.repo_copy(),
        ),
        Case(
            c,
            "nbstats: a FIFO",
            cmd("booktools.nbstats", T("x.py")),
            setup=nb_fifo,
            words=["FIFO"],
            timeout=90,
        ),
        Case(
            c,
            "bench loader --json a socket-free device (/dev/null) is written",
            cmd(
                "ampbook.bench",
                "loader",
                "--root",
                DATA,
                "--workers",
                "0",
                "--passes",
                "1",
                "--height",
                "16",
                "--width",
                "32",
                "--json",
                "/dev/null",
            ),
            expect=(0,),
            timeout=120,
        ),
    ]


def results_cases() -> list[Case]:
    c = "results"
    fin = lambda ctx: ctx.finished()  # noqa: E731
    over = lambda *a: (  # noqa: E731
        lambda ctx: train(
            "--out", str(ctx.finished()), "--name", "a", "--overwrite", *a, out=False
        )(ctx)
    )
    out = [
        Case(
            c,
            "train --overwrite with a missing data root",
            over("--data-root", "/nonexistent/data"),
            words=["nonexistent"],
            setup=take_snapshot(fin),
            check=unchanged(fin),
            quick=True,
        ),
        Case(
            c,
            "train --overwrite with a bad height",
            over("--height", "12"),
            words=["height"],
            setup=take_snapshot(fin),
            check=unchanged(fin),
        ),
        Case(
            c,
            "train --overwrite with a label that breaks mid-epoch",
            lambda ctx: over("--data-root", str(ctx.copy_data()))(ctx),
            setup=chain(
                take_snapshot(fin),
                lambda ctx: sorted(
                    (ctx.copy_data() / "gtFine" / "train").rglob("*.png")
                )[1].write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 90),
            ),
            expect=(1, 2),
            check=unchanged(fin),
        ),
        Case(
            c,
            "train --overwrite replaces a finished run",
            over(),
            expect=(0,),
            check=lambda ctx, res: (
                None
                if json.loads((ctx.finished() / "a.json").read_text())["status"]
                == "complete"
                and not list(ctx.finished().glob(".*replaced"))
                else "not replaced"
            ),
        ),
        Case(
            c,
            "train: a second run of a name is refused",
            lambda ctx: train("--out", str(ctx.finished()), "--name", "a", out=False)(
                ctx
            ),
            words=["already holds"],
            setup=take_snapshot(fin),
            check=unchanged(fin),
        ),
    ]

    def other_preds(ctx):
        folder = ctx.tmp / "preds" / "city"
        folder.mkdir(parents=True)
        (folder / "x_000000_000019_pred.png").write_bytes(b"not mine")

    out.append(
        Case(
            c,
            "train --save-predictions into another run's predictions",
            train("--save-predictions", T("preds")),
            setup=other_preds,
            words=["predictions"],
            check=lambda ctx, res: (
                None
                if (
                    ctx.tmp / "preds" / "city" / "x_000000_000019_pred.png"
                ).read_bytes()
                == b"not mine"
                else "another run's predictions were replaced"
            ),
        )
    )

    def cache_damaged(how):
        def setup(ctx):
            env = {
                **os.environ,
                "AMPBOOK_CACHE": str(ctx.tmp / "cache"),
                "OMP_NUM_THREADS": "1",
                "PYTHONPATH": str(ctx.repo),
            }
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from ampbook.segmentation.synthetic import synthetic_root; "
                    "print(synthetic_root(2, 1, 32, 64))",
                ],
                cwd=ctx.repo,
                env=env,
                capture_output=True,
                check=True,
            )
            root = next((ctx.tmp / "cache").glob("synthetic-*"))
            if how == "deleted":
                next(root.rglob("*_leftImg8bit.png")).unlink()
            elif how == "emptied":
                next(root.rglob("*_labelIds.png")).write_bytes(b"")
            elif how == "marker":
                meta = json.loads((root / "SYNTHETIC.json").read_text())
                meta["train"] = 7
                (root / "SYNTHETIC.json").write_text(json.dumps(meta))
            elif how == "partial":
                (root / "SYNTHETIC.json").unlink()
                (root / "SYNTHETIC.partial").write_text("x")

        return setup

    def cache_whole(ctx, res):
        root = next((ctx.tmp / "cache").glob("synthetic-*"), None)
        if root is None:
            return "no cached set"
        n = len(list(root.rglob("*_leftImg8bit.png")))
        empty = [p for p in root.rglob("*.png") if p.stat().st_size == 0]
        return None if n == 3 and not empty else f"cached set reused: {n} images"

    for how in ("deleted", "emptied", "marker", "partial"):
        out.append(
            Case(
                c,
                f"train: cached synthetic set with a file {how}",
                lambda ctx: [
                    "ampbook.train",
                    *TRAIN,
                    "--quiet",
                    "--synthetic-train",
                    "2",
                    "--synthetic-val",
                    "1",
                    "--out",
                    str(ctx.tmp / "o"),
                ],
                expect=(0,),
                setup=cache_damaged(how),
                check=cache_whole,
                env=lambda ctx: {"AMPBOOK_CACHE": str(ctx.tmp / "cache")},
                quick=False,
            )
        )

    def partial_root(ctx):
        root = ctx.copy_data()
        (root / "SYNTHETIC.json").unlink()
        (root / "SYNTHETIC.partial").write_text("x")

    out += [
        Case(
            c,
            "train on a synthetic set stopped half-way",
            lambda ctx: train("--data-root", str(ctx.copy_data()))(ctx),
            setup=partial_root,
            words=["stopped"],
        ),
        Case(
            c,
            "data synthesize over a set stopped half-way",
            lambda ctx: [
                "ampbook.data",
                "synthesize",
                "--root",
                str(ctx.copy_data()),
                "--train",
                "1",
                "--val",
                "1",
                "--height",
                "32",
                "--width",
                "64",
            ],
            setup=partial_root,
            expect=(0,),
            check=lambda ctx, res: (
                None
                if (ctx.tmp / "data" / "SYNTHETIC.json").exists()
                and not (ctx.tmp / "data" / "SYNTHETIC.partial").exists()
                else "no whole set"
            ),
        ),
        Case(
            c,
            "data synthesize --root '' writes nothing here",
            cmd(
                "ampbook.data",
                "synthesize",
                "--root",
                "",
                "--train",
                "1",
                "--val",
                "1",
                "--height",
                "32",
                "--width",
                "64",
            ),
            cwd=lambda ctx: ctx.tmp,
            words=["empty"],
            env=lambda ctx: {"PYTHONPATH": str(ctx.repo)},
            check=lambda ctx, res: (
                "wrote into the current folder"
                if (ctx.tmp / "leftImg8bit").exists()
                else None
            ),
        ),
        Case(
            c,
            "doctor --json and --markdown the same file",
            cmd(
                "ampbook.doctor",
                "--model",
                "erfnet",
                "--no-measure",
                "--json",
                T("r"),
                "--markdown",
                T("r"),
            ),
            words=["--markdown"],
            check=nothing_at(lambda ctx: ctx.tmp / "r"),
        ),
        Case(
            c,
            "gpucheck into an earlier check's --out",
            cmd("booktools.gpucheck", "--dry-run", "--out", T("gc"), "--stages", "env"),
            setup=lambda ctx: (
                (ctx.tmp / "gc").mkdir(),
                (ctx.tmp / "gc" / "report.json").write_text("{}"),
            ),
            words=["earlier"],
            check=lambda ctx, res: (
                None
                if (ctx.tmp / "gc" / "report.json").read_text() == "{}"
                else "the earlier report was replaced"
            ),
        ),
    ]

    def stale(ctx):
        shutil.copytree(ctx.shared / "executed", ctx.tmp / "executed")
        p = ctx.tmp / "executed" / "run_report.json"
        rec = json.loads(p.read_text())
        for n in rec["notebooks"]:
            n["run"] = "an-older-run"
        p.write_text(json.dumps(rec))

    def unmarked(ctx):
        shutil.copytree(ctx.shared / "executed", ctx.tmp / "executed")
        first = sorted((ctx.tmp / "executed").glob("*.ipynb"))[0]
        nb = json.loads(first.read_text())
        nb["metadata"].pop("ampbook", None)
        first.write_text(json.dumps(nb))

    def partial_report(ctx):
        shutil.copytree(ctx.shared / "executed", ctx.tmp / "executed")
        p = ctx.tmp / "executed" / "run_report.json"
        rec = json.loads(p.read_text())
        rec["notebooks"] = rec["notebooks"][:1]
        p.write_text(json.dumps(rec))

    book_argv = lambda ctx: [  # noqa: E731
        "booktools.book",
        "--executed",  # noqa: E731
        str(ctx.tmp / "executed"),
        "--out",
        str(ctx.tmp / "b"),
    ]
    out += [
        Case(
            c,
            "build.book: a run report of another run",
            book_argv,
            setup=stale,
            words=["run_report.json"],
            check=nothing_at(lambda ctx: ctx.tmp / "b"),
            quick=True,
        ),
        Case(
            c,
            "build.book: an unmarked (killed) notebook",
            book_argv,
            setup=unmarked,
            words=["mark"],
            check=nothing_at(lambda ctx: ctx.tmp / "b"),
        ),
        Case(
            c,
            "build.book: a report of a partial rerun",
            book_argv,
            setup=partial_report,
            words=["run_report.json"],
            check=nothing_at(lambda ctx: ctx.tmp / "b"),
        ),
    ]
    return out


def _two_ignored(ctx, res):
    if "ignored 2" not in res.stdout or "one setting" not in res.stdout:
        return "two records of one setting were not both set aside, naming each other"
    return None


def _page_text(ctx: Ctx) -> list:
    code = (
        "from ampbook.results import load_results_dir; import sys; "
        "rs = load_results_dir(sys.argv[1]); "
        "[print(r.provenance) for r in rs.train_runs]"
    )
    return ["-c", code, str(ctx.tmp / "results")]


def _shown_as_text(ctx, res):
    if "<script>" in res.stdout or "{download}`" in res.stdout:
        return "markup from a results file reached the page text unescaped"
    if "\\<script\\>" not in res.stdout:
        return "the planted device name was not shown"
    return None


def _raw_file(text: str):
    def setup(ctx):
        folder = ctx.tmp / "results"
        folder.mkdir()
        (folder / "r.json").write_text(text)

    return setup


def _two_of_one_setting(ctx):
    folder = ctx.tmp / "results"
    folder.mkdir()
    for name in ("a.json", "b.json"):
        shutil.copy(ctx.shared / "runs" / "a.json", folder / name)


def _interrupted_run(ctx, res):
    p = ctx.tmp / "out" / "s.json"
    if not p.exists():
        return None  # stopped before the first record: nothing to mark
    status = json.loads(p.read_text()).get("status")
    return None if status == "interrupted" else f"run status {status!r} after a stop"


def _held_synthesis(ctx):
    """The synthesis lock of a folder held (as a running synthesize holds it)."""
    from ampbook.core import cli
    from ampbook.segmentation.synthetic import SYNTHESIS_LOCK

    root = ctx.tmp / "syn"
    root.mkdir()
    ctx.lock_fd = cli.hold_lock(root / SYNTHESIS_LOCK)


def _nothing_synthesized(ctx, res):
    os.close(ctx.lock_fd)
    if (ctx.tmp / "syn" / "leftImg8bit").exists():
        return "a second synthesize wrote into a folder another one is writing"
    return None


def untrusted_cases() -> list[Case]:
    """Issue 30: a results file is input from strangers; no command replaces what
    another wrote."""
    c = "untrusted"
    fin = lambda ctx: ctx.finished()  # noqa: E731
    a_json = lambda ctx: ctx.finished() / "a.json"  # noqa: E731
    hostile = (
        "NVIDIA <script>alert(1)</script> {download}`../../secret.txt` "
        "```{include} /etc/passwd\n```"
    )
    out = [
        Case(
            c,
            "page text: markup in a training run's device name and torch version",
            _page_text,
            expect=(0,),
            setup=_result_file(
                "train",
                lambda r: r["environment"].update(device_name=hostile, torch=hostile),
            ),
            check=_shown_as_text,
            quick=True,
        ),
        Case(
            c,
            "results reader: 200,000 nested brackets",
            _results_reader,
            expect=(0,),
            setup=_raw_file("[" * 200_000 + "]" * 200_000),
            check=_ignored,
        ),
        Case(
            c,
            "results reader: a 5,000-digit integer",
            _results_reader,
            expect=(0,),
            setup=_raw_file('{"schema": "ampbook.train", "n": ' + "9" * 5000 + "}"),
            check=_ignored,
        ),
        Case(
            c,
            "results reader: two records of one setting",
            _results_reader,
            expect=(0,),
            setup=_two_of_one_setting,
            check=_two_ignored,
        ),
    ]
    for label, edit in (
        (
            "data_wait_s 2.5 times wall_s",
            lambda r: r["epochs"][0].update(data_wait_s=r["epochs"][0]["wall_s"] * 2.5),
        ),
        (
            "step_s 40 times wall_s",
            lambda r: r["epochs"][0].update(step_s=r["epochs"][0]["wall_s"] * 40),
        ),
        (
            "wall_s 1e-300",
            lambda r: [e.update(wall_s=1e-300, step_s=1e-301) for e in r["epochs"]],
        ),
        ("final_val_miou 7.5", lambda r: r["summary"].update(final_val_miou=7.5)),
        (
            "pixel accuracy -3",
            lambda r: r["summary"].update(final_val_pixel_accuracy=-3.0),
        ),
        ("a string loss", lambda r: r["summary"].update(final_train_loss="low")),
    ):
        out.append(
            Case(
                c,
                f"results reader: train {label}",
                _results_reader,
                expect=(0,),
                setup=_result_file("train", edit),
                check=_ignored,
            )
        )
    out += [
        _signal_case(
            c,
            "train: SIGHUP in epoch 2 (as SIGTERM)",
            train(
                "--epochs",
                "50",
                "--batch-size",
                "1",
                "--name",
                "s",
                "--progress",
                "on",
            ),  # fmt: skip
            signal.SIGHUP,
            file_seen(lambda ctx: ctx.tmp / "out" / "s.json"),
            143,
            words=["interrupted"],
            check=_interrupted_run,
        ),
        Case(
            c,
            "data synthesize into a folder another synthesize is writing",
            cmd(
                "ampbook.data",
                "synthesize",
                "--root",
                T("syn"),
                "--train",
                "2",
                "--val",
                "1",
            ),  # fmt: skip
            words=["another process"],
            setup=_held_synthesis,
            check=_nothing_synthesized,
        ),
        Case(
            c,
            "doctor: a terminal that encodes ASCII only",
            cmd(
                "ampbook.doctor",
                "--model",
                "erfnet",
                "--input",
                "3,32,32",
                "--no-measure",
                "--gpus",
                "h200",
            ),  # fmt: skip
            expect=(0,),
            env={"PYTHONIOENCODING": "ascii"},
        ),
        Case(
            c,
            "doctor: LC_ALL=C without UTF-8 mode writes ASCII spellings",
            cmd(
                "ampbook.doctor",
                "--model",
                "torchvision:resnet18",
                "--batch",
                "8",
                "--no-measure",
                "--gpus",
                "h200",
            ),  # fmt: skip
            expect=(0,),
            env={
                "LC_ALL": "C",
                "LANG": "C",
                "PYTHONUTF8": "0",
                "PYTHONCOERCECLOCALE": "0",
            },  # fmt: skip
            check=lambda ctx, res: (
                None
                if "+/-" in res.stdout and "\\x" not in res.stdout
                else "the report is not in ASCII spellings (+/- for the plus-minus)"
            ),
        ),
        Case(
            c,
            "doctor --json over a training record",
            lambda ctx: cmd(
                "ampbook.doctor",
                "--model",
                "erfnet",
                "--input",
                "3,32,32",
                "--no-measure",
                "--gpus",
                "h200",
                "--json",
                str(a_json(ctx)),
            )(ctx),  # fmt: skip
            words=["--overwrite", "ampbook.train"],
            setup=take_snapshot(fin),
            check=unchanged(fin),
        ),
        Case(
            c,
            "train: every step of an epoch skipped (lr 1e30)",
            train(
                "--lr",
                "1e30",
                "--max-nonfinite",
                "100000",
                "--epochs",
                "3",
                "--batch-size",
                "1",
            ),  # fmt: skip
            expect=(1,),
            words=["learned nothing"],
        ),
        Case(
            c,
            "bench step --json over a training record",
            lambda ctx: cmd(
                "booktools.bench_step", "--device", "cpu", "--json", str(a_json(ctx))
            )(ctx),
            words=["--overwrite"],
            setup=take_snapshot(fin),
            check=unchanged(fin),
            quick=True,
        ),
    ]
    return out


def all_cases() -> list[Case]:
    return (
        settings_cases()
        + numbers_cases()
        + parameters_cases()
        + fs_cases()
        + signals_cases()
        + files_cases()
        + env_cases()
        + special_cases()
        + results_cases()
        + untrusted_cases()
    )


# --- the command ----------------------------------------------------------------------


def summary(results: list[Result]) -> str:
    width = max(len(c) for c in CLASSES) + 2
    head = f"{'class':<{width}}" + "".join(f"{o:>14}" for o in OUTCOMES) + f"{'all':>7}"
    lines = [head]
    for cls in CLASSES:
        mine = [r for r in results if r.case.cls == cls]
        if not mine:
            continue
        counts = [sum(r.outcome == o for r in mine) for o in OUTCOMES]
        lines.append(
            f"{cls:<{width}}" + "".join(f"{n:>14}" for n in counts) + f"{len(mine):>7}"
        )
    totals = [sum(r.outcome == o for r in results) for o in OUTCOMES]
    lines.append(
        f"{'all':<{width}}" + "".join(f"{n:>14}" for n in totals) + f"{len(results):>7}"
    )
    return "\n".join(lines)


def _record(r: Result) -> dict:
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    return {
        "class": r.case.cls,
        "case": r.case.name,
        "outcome": r.outcome,
        "exit": r.code,
        "seconds": round(r.seconds, 1),
        "why": r.why,
        "error_line": lines[0] if lines else None,
    }


def default_sigint() -> None:
    """A sweep started in the background by a shell without job control inherits
    SIGINT ignored, and so would every command it starts: give them Ctrl-C as a
    terminal does (a Python handler here is reset to the default on exec)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.fault_sweep", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--quick", action="store_true", help="the make-test subset")
    ap.add_argument("--only", help="comma-separated classes")
    ap.add_argument("--match", help="only cases whose name contains this (A|B: either)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repo", default=str(HERE), help="the checkout to sweep")
    ap.add_argument("--json", help="write every case's outcome here")
    ap.add_argument("--keep", action="store_true", help="keep each case's folder")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    default_sigint()
    repo = Path(args.repo).resolve()
    cases = all_cases()
    if args.quick:
        cases = [c for c in cases if c.quick]
    if args.only:
        keep = set(args.only.split(","))
        cases = [c for c in cases if c.cls in keep]
    if args.match:
        cases = [c for c in cases if any(m in c.name for m in args.match.split("|"))]
    shared = Path(tempfile.mkdtemp(prefix="sweep-shared-"))
    started = time.monotonic()
    load = os.getloadavg()
    print(f"{len(cases)} cases on {repo}; load {load[0]:.1f}", flush=True)
    results: list[Result] = []
    try:
        prepare(shared, repo)
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = [pool.submit(run_case, c, shared, repo, args.keep) for c in cases]
            for fut in concurrent.futures.as_completed(futures):
                r = fut.result()
                results.append(r)
                if args.json:  # one line per case as it ends: nothing lost
                    with open(args.json + "l", "a") as f:
                        f.write(json.dumps(_record(r)) + "\n")
                if args.verbose or r.outcome not in ("clear", "skipped"):
                    print(
                        f"[{r.outcome:>12}] {r.case.cls}: {r.case.name} "
                        f"(exit {r.code}, {r.seconds:.0f} s) {r.why}",
                        flush=True,
                    )
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    order = {c.name: i for i, c in enumerate(cases)}
    results.sort(key=lambda r: order[r.case.name])
    print()
    print(summary(results))
    print(
        f"\n{len(results)} cases in {time.monotonic() - started:.0f} s; load average "
        f"{load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    if args.json:
        Path(args.json).write_text(json.dumps([_record(r) for r in results], indent=1))
    bad = [r for r in results if r.outcome not in ("clear", "skipped")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
