"""The GPU check: one command that runs everything the book measures on a CUDA machine.

    python3 -m ampbook.gpucheck --out DIR [--budget-s 480] [--dry-run] [--stages a,b]

Run from the repository root with the machine's own ``python3`` (no virtual environment
needed). Stages, in order, each in its own process with its own time budget:

* ``wheels``: install the wheels carried in ``.whl/`` (``make gpu-wheels``) into a
  temporary folder when papermill, jupytext, ipykernel... are not importable (not in
  ``--dry-run``);
* ``env``: print the environment (``ampbook.env``, nvidia-smi, package versions);
* ``tests``: ``pytest -m cuda``, every test that needs a GPU (they skip without one);
* ``nb01`` to ``nb06``: execute each notebook with the ``gpucheck`` profile through
  ``ampbook.build.run`` (the runner of ``make book``); chapter 2 saves its sweep
  (``save_results``), chapter 3 its training runs (``out_dir``), the later chapters read
  them (``results_dir``);
* ``profile``: per-module GPU kernel time of the training step, fp32 (TF32 on) and
  amp-fp16, beside the cost model's prediction (``ampbook.layer_profile``);
* ``loader``: DataLoader images/s at 0 to 8 workers (``ampbook.bench_loader``).

``wheels`` and ``env`` always run; ``--stages`` picks the others (a second try that fits
what is left of a lease). ``--dry-run`` runs every stage on the CPU at the ``smoke``
sizes and writes the same files. The whole check ends inside ``--budget-s``: the
selected stages share it in the proportions of their budgets in ``STAGES`` (which sum to
the default less a reserve), each capped by the time left; a stage that overruns is
stopped (its whole process group) and reported as cut short, and the check goes on with
the next stage while time is left. SIGTERM stops the running stage the same way, writes
the report and exits 143. After every stage ``DIR`` is brought up to date, so an outside
kill loses at most the stage running. ``DIR`` holds at most 8 files, each at most
16 MiB, named only with letters, digits, ``.``, ``_``, ``-``:

* ``report.json``: every stage, its budget, seconds and status (ok, error, cut short,
  skipped);
* ``gpucheck.log``: everything the stages printed;
* ``results.tar.gz``: the result JSONs, named for ``data/results/`` (``tar -xzf
  results.tar.gz -C data/results`` puts them there; ``ampbook.results`` reads them);
* ``notebooks.tar.gz``: the executed notebooks (``ampbook.build.book --executed`` builds
  from them).

Exit status 0 when every selected stage is ok, 1 otherwise, 2 for bad arguments, 143 on
SIGTERM. ``--wheels DIR`` names another wheel folder; ``--list-wheels`` prints the wheel
list from the installed packages (``gpu-wheels.txt``); ``--sizing`` prints the cost
model's step times the budgets were sized from.
"""

from __future__ import annotations

import argparse
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

from ampbook import cli
from ampbook.paths import REPO_ROOT

DEFAULT_BUDGET_S = 480.0
RESERVE_S = 15.0  # kept back from the budget for packaging the files
MIN_STAGE_S = 3.0  # a stage with less time than this left is not started
WHEEL_DIR = REPO_ROOT / ".whl"
# What the notebook runner needs beyond the device image (importable names).
RUNNER_MODULES = (
    "papermill",
    "jupytext",
    "nbformat",
    "nbclient",
    "ipykernel",
    "IPython",
    "matplotlib_inline",
    "cityscapesscripts",
    "myst_nb",
)
NOTEBOOKS = {
    "nb01": "01_floating_point",
    "nb02": "02_tensor_cores",
    "nb03": "03_amp_training",
    "nb04": "04_loss_scaling",
    "nb05": "05_rtx3070",
    "nb06": "06_will_amp_help",
}
# The notebooks' sizes in the check: notebooks/profiles.yml's "gpucheck" profile, the
# gpu profile cut to fit the stage budgets (a reader's GPU run uses "gpu").
CHECK_PROFILE = "gpucheck"
MAX_FILE_BYTES = 16 * 2**20
SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class Stage:
    name: str
    budget_s: (
        float  # on one H200 at --budget-s 480 (data/results/README.md shows the sizing)
    )
    dry_budget_s: float  # at smoke sizes on a 2-core CPU
    always: bool = False


# Budgets sum to the 465 s left after RESERVE_S. They were sized again from the
# first run on an H200 (2026-11-30, data/gpucheck/): data/results/README.md ("Sizing the
# GPU check") shows the seconds each stage took and the sizes chosen from them.
STAGES = (
    Stage("wheels", 8, 5, always=True),
    Stage("env", 8, 15, always=True),
    Stage("tests", 30, 60),
    Stage("nb01", 20, 60),
    Stage("nb02", 34, 60),
    Stage("nb03", 120, 120),
    Stage("profile", 25, 60),
    Stage("loader", 30, 60),
    Stage("nb04", 70, 120),
    Stage("nb05", 90, 120),
    Stage("nb06", 30, 120),
)
STAGE_NAMES = tuple(s.name for s in STAGES)

# Sizes of the profile and loader stages (the notebooks' sizes are in
# notebooks/profiles.yml).
STAGE_SIZES = {
    "gpu": {
        "profile": {
            "batch_size": 6,
            "height": 512,
            "width": 1024,
            "steps": 3,
            "warmup": 3,
            "timed_steps": 10,
        },
        "loader": {
            "images": 24,
            "height": 512,
            "width": 1024,
            "batch_size": 6,
            "workers": (0, 2, 4, 8),
            "passes": 1,
        },
    },
    "dry": {
        "profile": {
            "batch_size": 1,
            "height": 32,
            "width": 64,
            "steps": 1,
            "warmup": 1,
            "timed_steps": 1,
        },
        "loader": {
            "images": 4,
            "height": 32,
            "width": 64,
            "batch_size": 2,
            "workers": (0, 1),
            "passes": 2,
        },
    },
}


def slug(device_name: str) -> str:
    """A file-name piece for a device: ``NVIDIA H200`` -> ``h200``."""
    s = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    s = re.sub(r"^(nvidia-)?(geforce-)?", "", s)
    return s or "device"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------
# the stages (each runs in a child process: python -m ampbook.gpucheck --stage-child
# NAME)
# --------------------------------------------------------------------------------------


def _device_name() -> str:
    from ampbook.env import environment

    return environment("auto")["device_name"]


def stage_env(work: Path, dry: bool) -> None:
    from importlib import metadata

    from ampbook.env import environment_report, format_environment

    info = environment_report("auto")
    print(format_environment(info))
    versions = {}
    for dist in (
        "torch",
        "torchvision",
        "numpy",
        "matplotlib",
        "pillow",
        "pyyaml",
        "pytest",
        "papermill",
        "jupytext",
        "nbformat",
        "nbclient",
        "ipykernel",
        "ipython",
        "cityscapesscripts",
    ):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    print("packages:", ", ".join(f"{k} {v}" for k, v in versions.items()))
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi], capture_output=True, text=True, timeout=20)
        print(out.stdout or out.stderr)
    print(f"cpu count: {os.cpu_count()}")
    (work / "environment.json").write_text(
        json.dumps(
            {"environment": info, "packages": versions, "cpu_count": os.cpu_count()},
            indent=1,
            default=str,
        )
    )


def stage_tests(work: Path, dry: bool) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "cuda",
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        str(REPO_ROOT / "tests"),
    ]
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=REPO_ROOT).returncode
    if rc not in (0, 5):  # 5: no test selected
        raise RuntimeError(f"pytest -m cuda exited with {rc}")


def notebook_overrides(work: Path, stem: str) -> dict:
    """Parameters the check sets in a notebook, where it has them: chapter 2 saves its
    sweep, chapter 3 writes its runs into the results folder; the later chapters read
    that folder
    (chapter 3 itself keeps reading data/results: its own runs are not committed ones).
    """
    results = str(work / "results")
    if stem == NOTEBOOKS["nb02"]:
        return {
            "save_results": str(
                work / "results" / f"tensor_cores_{slug(_device_name())}.json"
            )
        }
    if stem == NOTEBOOKS["nb03"]:
        return {"out_dir": results}
    return {"results_dir": results}


def stage_notebook(work: Path, dry: bool, stem: str) -> None:
    from ampbook.build.run import (
        execute,
        load_profiles,
        parameters_cell,
        profile_parameters,
        read_source,
    )
    from ampbook.paths import NOTEBOOKS_DIR

    profile = "smoke" if dry else CHECK_PROFILE
    source = NOTEBOOKS_DIR / f"{stem}.py"
    nb = read_source(source)
    params = profile_parameters(load_profiles(), profile, source, nb)
    _, names = parameters_cell(nb)
    params.update(
        {k: v for k, v in notebook_overrides(work, stem).items() if k in names}
    )
    (work / "results").mkdir(exist_ok=True)
    print(f"{stem}: profile {profile}, parameters {params}", flush=True)
    run = execute(source, work / "executed", params, profile)
    print(f"{stem}: {run.executed_cells} cells in {run.seconds:.1f} s", flush=True)


def stage_profile(work: Path, dry: bool) -> None:
    import torch

    from ampbook.layer_profile import profile_layers, save_json

    s = STAGE_SIZES["dry" if dry else "gpu"]["profile"]
    if not dry and not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA device: the profile stage needs one (use --dry-run on a CPU)"
        )
    for precision in ("fp32", "amp-fp16"):
        start = time.perf_counter()
        rec = profile_layers(
            precision,
            s["batch_size"],
            s["height"],
            s["width"],
            "cpu" if dry else "cuda",
            steps=s["steps"],
            warmup=s["warmup"],
            timed_steps=s["timed_steps"],
            tf32=True,
        )
        name = (
            f"layer_profile_{slug(rec['environment']['device_name'])}_{precision}_"
            f"{rec['width']}x{rec['height']}.json"
        )
        save_json(rec, work / "results" / name)
        top = sorted(rec["layers"], key=lambda x: -x["measured_s"])[:5]
        print(
            f"{precision}: step {rec['step_s'] * 1e3:.1f} ms measured, "
            f"{rec['predicted_step_s'] * 1e3:.1f} ms predicted ({rec['ceilings']}); "
            "largest: "
            + ", ".join(f"{x['scope']} {x['measured_s'] * 1e3:.2f} ms" for x in top)
            + f" [{time.perf_counter() - start:.1f} s]",
            flush=True,
        )


def stage_loader(work: Path, dry: bool) -> None:
    from ampbook.bench_loader import format_table
    from ampbook.layer_profile import loader_record, save_json
    from ampbook.synthetic import synthetic_root

    s = STAGE_SIZES["dry" if dry else "gpu"]["loader"]
    start = time.perf_counter()
    root = synthetic_root(
        train=s["images"], val=0, height=2 * s["height"], width=2 * s["width"]
    )
    print(
        f"synthetic set of {s['images']} images at {2 * s['width']}x{2 * s['height']}: "
        f"{time.perf_counter() - start:.1f} s",
        flush=True,
    )
    rec = loader_record(
        root=root,
        height=s["height"],
        width=s["width"],
        workers=s["workers"],
        batch_size=s["batch_size"],
        passes=s["passes"],
    )
    print(format_table(rec), flush=True)
    save_json(
        rec, work / "results" / f"loader_{slug(rec['environment']['device_name'])}.json"
    )


def run_stage_child(name: str, work: Path, dry: bool) -> None:
    (work / "results").mkdir(parents=True, exist_ok=True)
    if name == "env":
        stage_env(work, dry)
    elif name == "tests":
        stage_tests(work, dry)
    elif name in NOTEBOOKS:
        stage_notebook(work, dry, NOTEBOOKS[name])
    elif name == "profile":
        stage_profile(work, dry)
    elif name == "loader":
        stage_loader(work, dry)
    else:
        raise ValueError(f"no child stage {name!r}")


# --------------------------------------------------------------------------------------
# the parent: wheels, budgets, processes, the output folder
# --------------------------------------------------------------------------------------


class Terminated(Exception):
    """The check received SIGTERM (an outer time limit): stop the stage, write the
    report."""


@dataclass
class StageResult:
    name: str
    budget_s: float
    seconds: float = 0.0
    status: str = "pending"  # ok | error | cut short | skipped | not selected
    ok: bool = False
    detail: str = ""


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

    # ---- wheels ----------------------------------------------------------------------
    def missing_modules(self) -> list[str]:
        code = (
            "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] "
            "if importlib.util.find_spec(m) is None))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, *RUNNER_MODULES],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout.split()

    def install_wheels(self, timeout: float) -> str:
        missing = self.missing_modules()
        if not missing:
            return "nothing to install: the runner's packages are importable"
        wheels = sorted(self.wheel_dir.glob("*.whl"))
        if not wheels:
            raise RuntimeError(
                f"{', '.join(missing)} not importable and no wheels in "
                f"{self.wheel_dir}: "
                "run `make gpu-wheels` on a machine with PyPI and carry .whl"
            )
        target = self.work / "site"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--upgrade",
            "--target",
            str(target),
            *map(str, wheels),
        ]
        self.log(
            f"installing {len(wheels)} wheels for {', '.join(missing)} into {target}"
        )
        done = subprocess.run(
            cmd, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if done.stdout or done.stderr:
            self.log((done.stdout + done.stderr).strip())
        if done.returncode:
            raise RuntimeError(
                f"pip install of the carried wheels failed (exit {done.returncode})"
            )
        self.env["PYTHONPATH"] = os.pathsep.join([str(target), self.env["PYTHONPATH"]])
        still = self.missing_modules()
        if still:
            raise RuntimeError(
                f"still not importable after installing the wheels: {', '.join(still)}"
            )
        return f"installed {len(wheels)} wheels"

    # ---- one stage -------------------------------------------------------------------
    def run_child(self, name: str, timeout: float) -> tuple[str, str]:
        cmd = [
            sys.executable,
            "-m",
            "ampbook.gpucheck",
            "--stage-child",
            name,
            "--work",
            str(self.work),
        ]
        if self.dry_run:
            cmd.append("--dry-run")
        return self.run_process(cmd, timeout)

    def run_process(self, cmd: list[str], timeout: float) -> tuple[str, str]:
        """Run ``cmd`` in its own process group, its output into the log; past
        ``timeout``
        stop the whole group. Returns (status, detail)."""
        proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=self.env,
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
            cli._state["signal"] = signum  # 143 for SIGTERM, 130 for Ctrl-C
            raise Terminated()

        signal.signal(signal.SIGTERM, terminate)
        signal.signal(signal.SIGINT, terminate)  # Ctrl-C ends the check alike
        # The selected stages share the budget in the proportions of their own budgets,
        # and each stage's share is taken of what is left when it starts: the full check
        # at 480 s gets them as written, a rerun of a few stages gets more each, and a
        # stage that ends early leaves its time to the ones after it.
        pending = sum(st.budget_s for st in STAGES if st.name in self.selected)
        self.log(
            f"ampbook.gpucheck {'--dry-run ' if self.dry_run else ''}"
            f"budget {self.budget_s:.0f} s, "
            f"stages {', '.join(self.selected)}; work folder {self.work}"
        )
        for stage in STAGES:
            if stage.name not in self.selected:
                self.results.append(StageResult(stage.name, 0.0, status="not selected"))
                continue
            if self.dry_run:
                budget = stage.dry_budget_s
            else:
                budget = stage.budget_s / pending * max(self.left(), 0.0)
            pending -= stage.budget_s
            res = StageResult(stage.name, round(budget, 1))
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
            if timeout < MIN_STAGE_S:
                res.status, res.detail = (
                    "skipped",
                    f"only {max(self.left(), 0):.0f} s of the budget left",
                )
                self.log(f"== {stage.name}: skipped ({res.detail})")
                self.finish_stage(res)
                continue
            self.log(
                f"== {stage.name} (budget {timeout:.0f} s, "
                f"{self.elapsed():.0f} s elapsed)"
            )
            start = time.monotonic()
            try:
                if stage.name == "wheels":
                    res.detail = self.install_wheels(timeout)
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
                self.finish_stage(res, final=True)
                self.log_file.close()
                shutil.rmtree(self.work, ignore_errors=True)
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
        self.log_file.close()
        shutil.rmtree(self.work, ignore_errors=True)
        return 0 if not bad else 1

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
        env_file = self.work / "environment.json"
        report = {
            "check": "ampbook.gpucheck",
            "dry_run": self.dry_run,
            "budget_s": self.budget_s,
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
        }
        tmp = self.out / ".report.json.tmp"
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        os.replace(tmp, self.out / "report.json")

    def _archive(self, name: str, members: list[tuple[Path, str]]) -> None:
        tmp = self.out / f".{name}.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            for path, arcname in members:
                tar.add(path, arcname=arcname)
        if tmp.stat().st_size > MAX_FILE_BYTES:
            self.log(
                f"warning: {name} would be {tmp.stat().st_size / 2**20:.1f} MiB, "
                "over the "
                f"16 MiB a file may be: kept the previous one"
            )
            tmp.unlink()
            return
        os.replace(tmp, self.out / name)


# Distributions the book needs on the GPU machine beyond its imports' own closure: the
# notebook runner (papermill, the kernel) and myst-nb (the chapters glue values for the
# book).
WHEEL_ROOTS = (
    "papermill",
    "jupytext",
    "nbformat",
    "nbclient",
    "jupyter-client",
    "ipykernel",
    "ipython",
    "matplotlib-inline",
    "cityscapesscripts",
    "myst-nb",
)
# Never carried: the Python < 3.5 backport of the standard library's typing
# (cityscapesscripts asks for it; a copy on PYTHONPATH would shadow the real one).
WHEEL_NEVER = ("typing",)
PY312_LINUX = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def wheel_closure(roots=WHEEL_ROOTS, image_list: Path | None = None) -> dict[str, str]:
    """NAME -> VERSION of ``roots`` and everything they require (installed metadata,
    markers for Python 3.12 on Linux, no extras) that the device image lacks: what
    gpu-wheels.txt
    lists (``python -m ampbook.gpucheck --list-wheels`` prints it)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    image_list = (
        image_list or REPO_ROOT / "data" / "reference" / "device_image_packages.txt"
    )
    image = {
        norm(line.strip())
        for line in image_list.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    need: dict[str, str] = {}
    seen = {norm(n) for n in WHEEL_NEVER}
    stack = list(roots)
    while stack:
        name = norm(stack.pop())
        if name in seen:
            continue
        seen.add(name)
        if name in image:
            continue
        dist = md.distribution(name)
        need[name] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if not req.marker or req.marker.evaluate(PY312_LINUX):
                stack.append(req.name)
    return dict(sorted(need.items()))


def sizing() -> list[tuple[str, str, float]]:
    """The cost model's lower bound of one training step at the post's setting
    (1024x512,
    batch 6) on the H200 and the RTX 3070: (device key, precision and TF32, seconds)."""
    from ampbook.costmodel import Ceilings, predict, trace_step
    from ampbook.devices import load_devices
    from ampbook.model import ERFNet

    devices = load_devices()
    model = ERFNet(19)
    rows = []
    for precision in ("fp32", "amp-fp16", "amp-bf16"):
        trace = trace_step(model, 6, 512, 1024, precision)
        for key in ("h200-sxm", "rtx3070-desktop"):
            for tf32 in (True, False) if precision == "fp32" else (True,):
                label = precision + (
                    ", TF32 " + ("on" if tf32 else "off") if precision == "fp32" else ""
                )
                step = predict(
                    trace,
                    Ceilings.from_device(devices[key], tf32=tf32),
                    min_kernel_s=5e-6,
                )
                rows.append((key, label, step.min_step_s))
    return rows


def check_out(out: Path) -> None:
    """``--out`` can be written (long names, a file in the way, read-only, 64 MiB
    free for the archives) and holds no earlier check's files: a second check into
    the same folder would replace the first one's results."""
    cli.check_output_dir(out, "--out", size=4 * MAX_FILE_BYTES)
    earlier = [n for n in ("report.json", "results.tar.gz") if (out / n).exists()]
    if earlier:
        raise cli.UserError(
            f"--out {out} already holds an earlier check's {' and '.join(earlier)}; "
            "a second check would replace them: choose another --out, or move them "
            "away first"
        )


def parse_stages(text: str | None) -> tuple[str, ...]:
    if not text:
        return STAGE_NAMES
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in STAGE_NAMES]
    if unknown or not names:
        raise ValueError(
            f"unknown stage(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(STAGE_NAMES)}"
        )
    chosen = set(names) | {s.name for s in STAGES if s.always}
    return tuple(n for n in STAGE_NAMES if n in chosen)


@cli.command("python -m ampbook.gpucheck")
def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(
        prog="python -m ampbook.gpucheck", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--out", help="folder for report.json, the log and the archives"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="the whole check ends inside this many seconds "
        f"(default {DEFAULT_BUDGET_S:.0f})",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="every stage on the CPU at smoke sizes (no wheels step)",
    )
    parser.add_argument(
        "--stages",
        default=None,
        help=f"comma-separated stages to run (default all: {','.join(STAGE_NAMES)}); "
        "wheels and env always run",
    )
    parser.add_argument(
        "--wheels",
        default=str(WHEEL_DIR),
        help="folder of the carried wheels (default .whl, made by `make gpu-wheels`)",
    )
    parser.add_argument(
        "--list-wheels",
        action="store_true",
        help="print NAME==VERSION of every wheel the device needs "
        "(gpu-wheels.txt), and exit",
    )
    parser.add_argument(
        "--sizing",
        action="store_true",
        help="print the cost model's step times the budgets were sized from, and exit",
    )
    parser.add_argument("--stage-child", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage_child:
        run_stage_child(args.stage_child, Path(args.work), args.dry_run)
        return 0
    if args.list_wheels:
        print("\n".join(f"{k}=={v}" for k, v in wheel_closure().items()))
        return 0
    if args.sizing:
        for key, label, step_s in sizing():
            print(
                f"{key:<16} {label:<18} {step_s * 1e3:7.1f} ms per step "
                "(1024x512, batch 6; lower bound)"
            )
        return 0
    if not args.out:
        print(
            "error: --out DIR is required "
            "(the folder the report and results are written to)",
            file=sys.stderr,
        )
        return 2
    if not RESERVE_S + MIN_STAGE_S < args.budget_s < float("inf"):
        print(
            f"error: --budget-s must be more than {RESERVE_S + MIN_STAGE_S:.0f} s, "
            f"got {args.budget_s:g}",
            file=sys.stderr,
        )
        return 2
    try:
        selected = parse_stages(args.stages)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"error: --out {out} exists and is not a folder", file=sys.stderr)
        return 2
    check_out(out)
    return Check(
        out, args.budget_s, args.dry_run, selected, wheel_dir=Path(args.wheels)
    ).run()


if __name__ == "__main__":
    sys.exit(main())
