"""The GPU check's plan: its stages in the order a lease runs them (``STAGES``), each
one's share of the budget and what it was sized from, the sizes the stages measure at
(``STAGE_SIZES``), and the budget rule (``stage_timeout``, ``should_start``;
``replay`` replays it on stage times). ``booktools.gpucheck`` runs the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from ampbook.chapters.ch7.rungs import RUNG_SETS
from ampbook.core.paths import REPO_ROOT
from ampbook.core.words import plural

# The device tool's limit for one command is 600 s: the call ends inside 560 s, which
# leaves 40 s for the transfers and a slow start of the interpreter.
DEFAULT_BUDGET_S = 560.0
RESERVE_S = 15.0  # kept back from the budget for packaging the files
MIN_STAGE_S = 3.0  # a stage with less time than this left is not started
# A lease: 15 minutes of device time less the machine's start (~100 s) and the first
# call's transfers (~20 s): what is left when the call starts (or --lease-left-s).
LEASE_LEFT_S = 15 * 60 - 100 - 20
RERUN_MARGIN_S = 45  # a rerun's transfers, start and packing, beside its budget
MIN_RERUN_S = 60  # a rerun with less budget than this is not worth its start
WORK_DIR = REPO_ROOT / "build" / "gpucheck-work"
# TorchInductor's cache of the compile stage: under build/ (ignored by git, kept between
# calls on a warm machine, so a rerun finds it).
INDUCTOR_CACHE = REPO_ROOT / "build" / "inductor-cache"
# The portable compile cache (torch.compiler.save_cache_artifacts): what a call returns,
# and where the next lease's compile stage looks for it (carried with the tree).
COMPILE_CACHE = "compile_cache.bin"
CARRIED_COMPILE_CACHE = REPO_ROOT / "build" / COMPILE_CACHE
# What the notebook runner needs beyond the device image (importable names).
NOTEBOOKS = {
    "nb01": "01_floating_point",
    "nb02": "02_tensor_cores",
    "nb03": "03_amp_training",
    "nb04": "04_loss_scaling",
    "nb05": "05_rtx3070",
    "nb06": "06_will_amp_help",
    "nb07": "07_making_amp_pay",
}
# The notebooks' sizes in the check: notebooks/profiles.yml's "gpucheck" profile, the
# gpu profile cut to fit the stage shares (a reader's GPU run uses "gpu").
CHECK_PROFILE = "gpucheck"
PYTEST_TIMEOUT_S = 60  # per CUDA test (the slowest took ~8 s on the H200)


@dataclass(frozen=True)
class Stage:
    name: str
    share_s: float  # seconds on one H200 (sized from h200 and cpu below)
    dry_budget_s: float  # at the dry-run sizes on a 2-core CPU, with room for its load
    h200: str  # what the last H200 lease measured (data/gpucheck/2026-11-30_*.log)
    cpu: str  # the CPU proxy: measured here (the dry run, 2 cores) or at H200 rates
    writes: str = ""  # what it leaves in the output
    always: bool = False


# The lease, most valuable first: the shares, and beside them what they were sized
# from. "h200": the stage's seconds in the 2026-11-30 lease (data/gpucheck/), "-" where
# it did not run then; "cpu": a proxy measured on a CPU (../GPU-FINDINGS.md, "Sizing
# the next lease": a ladder cell at the H200's step times costs ~10 s, a cost-model
# trace 3.1 s first, Dynamo + AOTAutograd 8 s for rung 5's first step) and the stage's
# seconds in this dry run on 2 cores. A share carries a margin of at least a third
# over the upper figure; wheels, env and data, which every later stage needs, have
# fixed minimums (30, 15, 25 s) far above what they took. The shares up to ``tests``
# sum to 520 s of the 545 s the default budget leaves after RESERVE_S; the chapters
# after them run in what is left plus what the earlier stages did not use.
STAGES = (
    Stage("wheels", 30, 5, "3.6-6.2 s", "-", "", always=True),
    Stage(
        "env", 15, 120, "4.3-6.3 s", "dry 3 s", "environment.json in report.json",
        always=True,
    ),
    Stage(
        "data", 25, 120, "-",
        "2.2 s per 32 images at 2048x1024 (16 cores): ~11 s; dry 6 s",
        "the synthetic sets in build/cache (not in the output)",
    ),
    Stage(
        "ladder", 120, 240, "-",
        "10 cells x ~10 s + ~8 s start and first traces; dry 37 s",
        "ladder_<gpu>.json, fp32-tf32 and amp-fp16 rungs 0-4 (every cell at once)",
    ),
    Stage(
        "compile", 200, 240, "-",
        "2 x (8 s Dynamo + 25-60 s Inductor + ~10 s cell + ~15 s epochs' "
        "recompile); dry 15 s (eager)",
        "rung 5 of amp-fp16 and fp32-tf32 into ladder_<gpu>.json; compile_cache.bin",
    ),
    Stage(
        "profile-cl", 25, 120, "20.6 s (the two NCHW profiles)", "dry 17 s",
        "layer_profile_<gpu>_{fp32,amp-fp16}_1024x512_cl.json",
    ),
    Stage(
        "ladder-extra", 70, 180, "-",
        "4 cells: amp-bf16 ~10 s, strict fp32 ~15 s each, + ~8 s start; dry 12 s",
        "amp-bf16 and fp32 rungs 0 and 4 into ladder_<gpu>.json",
    ),
    Stage(
        "tests", 35, 240, "23.8 s (9 tests)", "dry 11 s (no CUDA test to run)",
        "the log of pytest -m cuda -v -rA --durations=0",
    ),
    Stage("nb06", 25, 240, "-", "dry 46 s", "06_will_amp_help.ipynb"),
    Stage(
        "loader", 25, 180, "cut at 25 s (synthetic set 2.2 s)", "dry 6 s",
        "loader_<gpu>.json",
    ),
    Stage("nb04", 60, 240, "cut at 55-61 s", "dry 29 s", "04_loss_scaling.ipynb"),
    Stage("nb05", 72, 300, "cut at 68 s", "dry 52 s", "05_rtx3070.ipynb"),
    Stage(
        "nb02", 30, 180, "25.3 s", "dry 23 s",
        "02_tensor_cores.ipynb, tensor_cores_<gpu>.json",
    ),
    Stage("nb01", 18, 180, "12.9-13.9 s", "dry 16 s", "01_floating_point.ipynb"),
    Stage(
        "nb03", 75, 300, "250.6 s at the gpu profile", "dry 43 s",
        "03_amp_training.ipynb, train_<gpu>_*.json (every epoch)",
    ),
    Stage(
        "profile", 25, 120, "20.6 s", "dry 52 s",
        "layer_profile_<gpu>_{fp32,amp-fp16}_1024x512.json (committed already)",
    ),
    Stage(
        "ladder-rest", 75, 180, "-", "6 cells; dry 38 s", "amp-bf16 and fp32 rungs 1-3",
    ),
    Stage("nb07", 45, 300, "-", "dry 97 s", "07_making_amp_pay.ipynb"),
)  # fmt: skip
STAGE_NAMES = tuple(s.name for s in STAGES)
BY_NAME = {s.name: s for s in STAGES}
# the stages that must finish inside the default budget (a test replays the rule)
LADDER_STAGES = ("ladder", "compile", "ladder-extra", "ladder-rest")

# The ladder stages' rungs, from chapter 7's table: every eager rung, the compiled ones,
# the ends (the post's setup and every eager change at once) and the eager ones between.
EAGER, COMPILED, ENDS = (RUNG_SETS[k] for k in ("eager", "compiled", "ends"))
MIDDLE = tuple(r for r in EAGER if r not in ENDS)

# Sizes of the data, profile, ladder and loader stages (the notebooks' sizes are in
# notebooks/profiles.yml, profile "gpucheck").
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
        "ladder": {
            "height": 512,
            "width": 1024,
            "batch_size": 6,
            "warmup": 3,
            "steps": 10,
            "profile_steps": 3,
            "epochs": 2,
            "train_images": 48,
            "val_images": 2,
        },
        # (modes in the order they run, rungs) of each ladder stage
        "cells": {
            "ladder": (("fp32-tf32", "amp-fp16"), EAGER),
            "compile": (("amp-fp16", "fp32-tf32"), COMPILED),
            "ladder-extra": (("amp-bf16", "fp32"), ENDS),
            "ladder-rest": (("amp-bf16", "fp32"), MIDDLE),
        },
        "loader": {
            "images": 24,
            "height": 512,
            "width": 1024,
            "batch_size": 6,
            "workers": (0, 2, 4, 8, 12),
            "passes": 1,
        },
    },
    "dry": {
        "profile": {
            "batch_size": 1,
            "height": 16,
            "width": 32,
            "steps": 1,
            "warmup": 1,
            "timed_steps": 1,
        },
        "ladder": {
            "height": 16,
            "width": 32,
            "batch_size": 1,
            "warmup": 1,
            "steps": 2,
            "profile_steps": 1,
            "epochs": 2,
            "train_images": 2,
            "val_images": 1,
        },
        # two modes taking turns, as on the GPU; a CPU has no fp16 training and runs
        # amp-bf16 several times slower without native bf16, so the dry run takes fp32
        # twice (with and without the TF32 setting, which a CPU ignores) and amp-bf16
        # once
        "cells": {
            "ladder": (("fp32-tf32", "fp32"), ENDS),
            "compile": (("fp32-tf32",), COMPILED),
            "ladder-extra": (("amp-bf16",), ENDS[:1]),
            "ladder-rest": (("fp32",), MIDDLE[:1]),
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


def stage_timeout(share_s: float, later_s: float, left_s: float) -> float:
    """The budget rule: a stage may run for its share, or longer when the shares of
    the stages after it (``later_s``) still fit in what is left after it, and never
    past what is left of the budget (``left_s``)."""
    return max(min(left_s, max(share_s, left_s - later_s)), 0.0)


def replay(
    took: dict[str, float | list[float]],
    selected: tuple[str, ...] = STAGE_NAMES,
    budget_s: float = DEFAULT_BUDGET_S,
) -> dict[str, dict]:
    """The budget rule replayed on stage times: ``took[name]`` is the seconds a stage
    needs, or for a ladder stage the seconds at which each of its cells is written
    (counted from the stage's start, the last one its end). Returns per stage its
    time limit, start, seconds, status (ok, cut short, skipped) and the cells that
    were written inside its limit, as ``Check`` runs them."""
    t, out = 0.0, {}
    names = [n for n in STAGE_NAMES if n in selected]
    for i, name in enumerate(names):
        stage = BY_NAME[name]
        left = budget_s - RESERVE_S - t
        later = sum(BY_NAME[n].share_s for n in names[i + 1 :])
        limit = stage_timeout(stage.share_s, later, left)
        need = took.get(name, stage.share_s)
        cells = need if isinstance(need, list) else [need]
        if not should_start(0.0 if stage.always else stage.share_s, limit):
            out[name] = {"limit": limit, "start": t, "seconds": 0.0, "cells": 0,
                         "status": "skipped"}  # fmt: skip
            continue
        spent = min(cells[-1], limit)
        out[name] = {
            "limit": limit,
            "start": t,
            "seconds": spent,
            "cells": sum(c <= limit for c in cells),
            "status": "ok" if cells[-1] <= limit else "cut short",
        }
        t += spent
    return out


def should_start(share_s: float, limit_s: float) -> bool:
    """Whether a stage is started with ``limit_s`` of time: at least ``MIN_STAGE_S``
    and half its share (a chapter started with less would be cut before it wrote
    anything; it is named in the rerun line instead)."""
    return limit_s >= max(MIN_STAGE_S, min(share_s / 2, 30.0))


def parse_stages(text: str | None) -> tuple[str, ...]:
    if not text:
        return STAGE_NAMES
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in STAGE_NAMES]
    if unknown or not names:
        what = (
            f"{plural(len(unknown), 'unknown stage')}: {', '.join(unknown)}"
            if unknown
            else "no stage given"
        )
        raise ValueError(f"{what}; choose from {', '.join(STAGE_NAMES)}")
    chosen = set(names) | {s.name for s in STAGES if s.always}
    return tuple(n for n in STAGE_NAMES if n in chosen)


def default_budget(selected: tuple[str, ...], dry_run: bool) -> float:
    """A call's budget: ``DEFAULT_BUDGET_S`` on a GPU; in a dry run the selected
    stages' dry budgets and the reserve (a loaded CPU takes what it takes)."""
    if not dry_run:
        return DEFAULT_BUDGET_S
    return sum(s.dry_budget_s for s in STAGES if s.name in selected) + RESERVE_S


def select_stages(lease: bool, stages: str | None) -> tuple[str, ...]:
    """Every stage (``--lease``), or those of ``--stages`` (which wins: a rerun); one
    of the two is needed."""
    if stages:
        return parse_stages(stages)
    if not lease:
        raise ValueError(
            "give --lease (every stage, the whole lease in one call) or --stages a,b "
            "(a rerun)"
        )
    return STAGE_NAMES


def sizing_markdown() -> str:
    """``STAGES`` as DEVELOPING.md's Markdown table (a test keeps the two equal)."""
    rows = [
        "| stage | share (s) | dry run (s) | H200, 2026-11-30 | CPU proxy | writes |",
        "|---|---|---|---|---|---|",
    ]
    for st in STAGES:
        rows.append(
            f"| {st.name} | {st.share_s:.0f} | {st.dry_budget_s:.0f} | {st.h200} | "
            f"{st.cpu} | {st.writes or '-'} |"
        )
    return "\n".join(rows)


def sizing_table() -> str:
    """The stages in order: share, dry-run budget and what each was sized from."""
    rows = [f"{'stage':<13}{'share s':>8}{'dry s':>7}  H200 (2026-11-30)  |  CPU proxy"]
    for st in STAGES:
        rows.append(
            f"{st.name:<13}{st.share_s:>8.0f}{st.dry_budget_s:>7.0f}  {st.h200}  |  "
            f"{st.cpu}"
        )
    return "\n".join(rows)
