"""The ladder: the training step from the ERFNet authors' defaults to the optimised one,
one change per rung, in every precision.

    python -m ampbook.bench ladder [--device auto|cpu|cuda] [--rungs 0-5]
                                   [--precisions fp32-tf32,amp-fp16,...]
                                   [--height H --width W --batch-size B]
                                   [--steps N --warmup N --profile-steps N]
                                   [--epochs N --train-images N]
                                   [--isolate none|precision|cell]
                                   [--json PATH [--merge]]

Each rung adds one change to the rung before it (``RUNGS``; the changes are fields of
the runner's ``TrainConfig``, so every rung is a ``python -m ampbook.train`` command):

0. the ERFNet authors' defaults: NCHW, 4 loader workers, the loss read back every step;
1. + the data fixed: images decoded once to a cache, normalised on the device;
2. + channels_last and ``cudnn.benchmark``;
3. + a fused optimizer and no per-step host sync;
4. + the 16-bit residual stream (``fp16_stream``, the runner's ``--16-bit-stream``: the
   first downsampler's pool branch cast to the convolution's dtype, fp16 or bf16, so
   autocast no longer promotes the encoder to fp32);
5. + ``torch.compile``.

For every rung and mode (``MODES``: fp32 with TF32, strict fp32, amp-fp16 with a
GradScaler, amp-bf16) ``measure_rung`` takes, with the runner's own step
(``ampbook.train.build_training``):

* **step time**: the median of ``steps`` steps on one batch already on the device, as
  the period from one step's start to the next (CUDA events on a GPU, so a step's time
  includes every gap in which the GPU waited for the host); the first step (which pays
  for ``torch.compile`` and cuDNN's search) apart;
* **kernel and idle time**: ``profile_steps`` more steps under ``torch.profiler``. On a
  GPU, ``kernel_s`` is the time the GPU was busy (the union of its kernels, copies and
  fills) per step, and ``idle_s`` the median step less that: the GPU waiting for the
  host. On a CPU the profiler sees no device timeline: the CPU runs the operators and
  the Python and framework code between them on the same cores, so ``kernel_s`` is the
  time inside the top-level operators per step and ``idle_s`` the time outside them
  (Python, dispatch, the optimizer's loop); how busy the cores were inside an operator
  (its threads) it cannot say;
* **peak memory**: ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` over
  the timed steps on a GPU (the allocator's cache emptied after the warm-up, whose
  cuDNN search tries workspaces no step needs again); on a CPU, which has no
  allocator peak, the bytes autograd saved for backward in the epoch's first step (the
  book's CPU memory figure, ``ampbook.results``), with the growth of the process's peak
  resident set beside it;
* **an epoch** through the runner itself (``run_training``, loader or cache included):
  images per second and the share of the loop spent waiting for data, the median of the
  epochs after the first;
* **the roofline bound** of the step (``ampbook.predict.costmodel``, the device table's
  ceilings on a GPU it lists, ceilings measured here otherwise) and the share of it the
  step reached. The bound counts every eager operator's bytes; compiled code that fuses
  operators moves fewer, so at rung 5 the share is an eager yardstick.

Processes (``--isolate``): ``precision`` (the default on a GPU) runs each mode in its
own process, the rungs in order inside it, the allocator's cache emptied and its peaks
reset between rungs, so a mode's reserved memory is never another's; ``cell`` a process
per rung and mode; ``none`` (the default on a CPU) everything in this process, the
modes taking turns at each rung. On a GPU TF32 and amp-fp16 (the comparison the targets
name) go first. Each cell is written to the JSON as soon as its step, kernel/idle split
and memory are measured (``"epoch": "pending"``) and again with its epochs
(``"measured"``), so a ladder stopped part-way keeps what it measured.

``--json PATH`` writes the record (schema ``ampbook.ladder/1``, described in
``data/results/README.md`` and read by ``ampbook.results.read_ladder``); a folder (or a
path without ``.json``) gets ``ladder_<gpu>.json`` inside it. ``--merge`` adds the
cells to an existing record of the same device and size (the GPU check measures the
compiled rung in a second stage). At the end the table and the targets
(``TARGETS``: the H200 at 1024x512, batch 6) are printed one by one, met or missed, with
what the profile shows for a missed one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import gc
import inspect
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ampbook.core import cli
from ampbook.core.modes import MODES
from ampbook.core.words import plural
from ampbook.results import (
    LADDER_SCHEMA,
    MODE_LABELS,
    PEAK_CUDA,
    SAVED_FOR_BACKWARD,
    Ladder,
    LadderCell,
    read_ladder,
)
from ampbook.results import LadderRung as Rung

MODE_SETTINGS = {  # mode -> (precision, tf32)
    "fp32-tf32": ("fp32", "on"),
    "fp32": ("fp32", "off"),
    "amp-fp16": ("amp-fp16", "on"),
    "amp-bf16": ("amp-bf16", "on"),
}
# The order modes take turns in: the targets' comparison (TF32 against amp-fp16) first.
GPU_MODES = ("fp32-tf32", "amp-fp16", "amp-bf16", "fp32")
# A CPU has no TF32, and its mixed precision is bf16.
CPU_MODES = ("fp32", "amp-bf16")
SYNC_EVERY = 25  # rung 3's loss read-back interval, in steps
COMPILE_MODE = "default"


RUNGS = (
    Rung(
        0,
        "post",
        "the ERFNet authors' defaults",
        {
            "channels_last": False,
            "cudnn_benchmark": False,
            "data_cache": "none",
            "workers": 4,
            "fused_optimizer": False,
            "sync_every": 1,
            "fp16_stream": False,
            "compile": None,
        },
        "NCHW, 4 loader workers decoding PNGs, the loss read back every step",
    ),
    Rung(
        1,
        "data",
        "+ data cached",
        {"data_cache": "device"},
        "images decoded once at the training size, normalised on the device",
    ),
    Rung(
        2,
        "layout",
        "+ channels_last, cudnn.benchmark",
        {"channels_last": True, "cudnn_benchmark": True},
        "NHWC kernels for batch norm and the 16-channel convolutions; cuDNN picks "
        "the fastest algorithm per shape",
    ),
    Rung(
        3,
        "sync",
        "+ fused Adam, no per-step sync",
        {"fused_optimizer": True, "sync_every": SYNC_EVERY},
        "no per-step read-back of the GradScaler's found_inf flag or of the loss; "
        "the host runs ahead of the GPU",
    ),
    Rung(
        4,
        "stream",
        "+ 16-bit residual stream",
        {"fp16_stream": True},
        "the encoder's activations stay 16-bit under autocast",
    ),
    Rung(
        5,
        "compile",
        "+ torch.compile",
        {"compile": COMPILE_MODE},
        "elementwise operators fused into the kernels around them",
    ),
)
RUNG_INDICES = tuple(r.index for r in RUNGS)
EAGER_TOP = 4  # the last rung without torch.compile


class LadderError(ValueError):
    """Settings the ladder cannot run (checked before any measurement)."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------
# settings
# --------------------------------------------------------------------------------------


# A CPU's default ladder, sized for under a minute on 2 cores: the post's setup against
# every eager change at once (rungs 0 and 4), at 64x32, one image a step, 3 timed steps,
# one torch thread. Timed on a 2-core machine other work kept busy (load 3-4): 27 s
# with one thread, 83 s to 2.5 min with torch's two, whose threads wait for each other
# at every operator while another process holds a core (steps 10-25 times longer).
CPU_MINUTE = "under a minute on 2 cores, timed with other work running"
CPU_THREADS = 1  # the command's --threads on a CPU (run_ladder itself sets none)
CPU_DEFAULTS = dict(
    rungs=(0, 4),
    height=32,
    width=64,
    batch_size=1,
    warmup=1,
    steps=3,
    profile_steps=1,
    epochs=2,
    train_images=2,
    val_images=1,
)


@dataclass
class LadderSpec:
    """What to measure: device, size, rungs, modes, and how long to measure each."""

    device: str = "auto"
    height: int = 512
    width: int = 1024
    batch_size: int = 6
    rungs: tuple[int, ...] = RUNG_INDICES
    modes: tuple[str, ...] = GPU_MODES
    warmup: int = 3
    steps: int = 10
    profile_steps: int = 3
    epochs: int = 2
    train_images: int = 48
    val_images: int = 2
    workers_auto: bool = False  # rung 0 keeps the post's 4 workers
    compile_mode: str = COMPILE_MODE

    @classmethod
    def for_device(cls, device_type: str, **kw) -> "LadderSpec":
        """The defaults for a GPU (the post's setting) or a CPU (``CPU_DEFAULTS``)."""
        if device_type == "cpu":
            base = dict(CPU_DEFAULTS, modes=CPU_MODES)
        else:
            base = {}
        base.update({k: v for k, v in kw.items() if v is not None})
        return cls(**base)

    def check(self) -> None:
        for name in (
            "height",
            "width",
            "batch_size",
            "steps",
            "profile_steps",
            "train_images",
            "val_images",
        ):
            v = getattr(self, name)
            if not cli.is_positive_int(v):
                raise LadderError(f"{name} must be a positive integer, got {v!r}")
        if not cli.is_positive_int(self.warmup):
            raise LadderError(
                f"warmup must be at least 1 (the first step compiles), got "
                f"{self.warmup!r}"
            )
        if not isinstance(self.epochs, int) or self.epochs < 2:
            raise LadderError(
                f"epochs must be at least 2 (the first one warms up), got "
                f"{self.epochs!r}"
            )
        for name in ("height", "width"):
            if getattr(self, name) % 8:
                raise LadderError(
                    f"{name} must be a multiple of 8 (ERFNet halves it three times), "
                    f"got {getattr(self, name)}"
                )
        if self.train_images < self.batch_size:
            raise LadderError(
                f"train_images ({self.train_images}) must hold at least one batch of "
                f"{self.batch_size}"
            )
        bad = [r for r in self.rungs if r not in RUNG_INDICES]
        if bad or not self.rungs:
            raise LadderError(
                f"rungs {bad or '(none)'}: choose from {RUNG_INDICES[0]} to "
                f"{RUNG_INDICES[-1]}"
            )
        bad = [m for m in self.modes if m not in MODE_SETTINGS]
        if bad or not self.modes:
            raise LadderError(
                f"precisions {bad or '(none)'}: choose from {', '.join(MODES)}"
            )

    def settings(self, time_source: str, isolate: str) -> dict:
        return {
            "height": self.height,
            "width": self.width,
            "batch_size": self.batch_size,
            "warmup": self.warmup,
            "steps": self.steps,
            "profile_steps": self.profile_steps,
            "epochs": self.epochs,
            "train_images": self.train_images,
            "val_images": self.val_images,
            "time_source": time_source,
            "memory_measure": (
                PEAK_CUDA if time_source == "cuda" else SAVED_FOR_BACKWARD
            ),
            "isolate": isolate,
        }


def parse_rungs(text: str) -> tuple[int, ...]:
    """``"0-5"``, ``"0,2,4"`` or ``"3"`` -> rung indices (``LadderError`` if not)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise LadderError(
            f"--rungs {text!r}: give indices such as 0-5 or 0,2,4"
        ) from None
    bad = [r for r in out if r not in RUNG_INDICES]
    if bad or not out:
        raise LadderError(
            f"--rungs {text!r}: rungs are {RUNG_INDICES[0]} to {RUNG_INDICES[-1]}"
        )
    return tuple(sorted(set(out)))


def parse_modes(text: str) -> tuple[str, ...]:
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    bad = [m for m in modes if m not in MODE_SETTINGS]
    if bad or not modes:
        raise LadderError(f"--precisions {text!r}: choose from {', '.join(MODES)}")
    return tuple(dict.fromkeys(modes))


def rung_fields(index: int, compile_mode: str = COMPILE_MODE) -> dict:
    """The ``TrainConfig`` fields rung ``index`` sets: its changes and every rung's
    before it."""
    fields: dict = {}
    for rung in RUNGS[: index + 1]:
        fields.update(rung.changes)
    if fields.get("compile"):
        fields["compile"] = compile_mode
    return fields


def missing_fields() -> list[str]:
    """The rungs' ``TrainConfig`` fields this runner lacks (empty when it has them
    all)."""
    from ampbook.train import TrainConfig

    have = {f.name for f in dataclasses.fields(TrainConfig)}
    need = {k for r in RUNGS for k in r.changes}
    return sorted(need - have)


def rung_config(spec: LadderSpec, index: int, mode: str, device: str):
    """The runner's ``TrainConfig`` of rung ``index`` in ``mode``."""
    from ampbook.train import TrainConfig

    fields = rung_fields(index, spec.compile_mode)
    have = {f.name for f in dataclasses.fields(TrainConfig)}
    # A field this runner lacks is fine at rung 0's value (the runner does that
    # anyway); a rung that needs it changed cannot run.
    post = RUNGS[0].changes
    for k in [k for k in fields if k not in have and fields[k] == post.get(k)]:
        del fields[k]
    lacking = sorted(k for k in fields if k not in have)
    if lacking:
        raise LadderError(
            f"rung {index} needs TrainConfig.{', TrainConfig.'.join(lacking)}, which "
            "this runner does not have"
        )
    if spec.workers_auto and fields.get("workers") == 4:
        fields["workers"] = "auto"
    precision, tf32 = MODE_SETTINGS[mode]
    return TrainConfig(
        precision=precision,
        tf32=tf32,
        device=device,
        height=spec.height,
        width=spec.width,
        batch_size=spec.batch_size,
        epochs=spec.epochs,
        synthetic_train=spec.train_images,
        synthetic_val=spec.val_images,
        shuffle=False,
        checkpoint=False,
        quiet=True,
        **fields,
    )


# --------------------------------------------------------------------------------------
# measuring one rung in one mode
# --------------------------------------------------------------------------------------


def _batch(spec: LadderSpec, device, seed: int = 1):
    import torch

    from ampbook.segmentation.cityscapes import NUM_CLASSES

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(spec.batch_size, 3, spec.height, spec.width, generator=g)
    y = torch.randint(
        0, NUM_CLASSES, (spec.batch_size, spec.height, spec.width), generator=g
    )
    return x.to(device), y.to(device)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(step: Callable, x, y, n: int, device) -> list[float]:
    """Seconds per step of ``n`` steps in a row: the period from one step's start to
    the next (CUDA events on a GPU, recorded without synchronising in between)."""
    import torch

    _sync(device)
    if device.type == "cuda":
        events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        for i in range(n):
            events[i].record()
            step(x, y)
        events[n].record()
        torch.cuda.synchronize(device)
        return [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(n)]
    marks = [time.perf_counter()]
    for _ in range(n):
        step(x, y)
        marks.append(time.perf_counter())
    return [b - a for a, b in zip(marks, marks[1:])]


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@contextlib.contextmanager
def _quiet_stderr_fd():
    """File descriptor 2 sent to /dev/null for the block: torch.profiler's kineto
    writes a line to it at every start and stop (and, on a CPU, that it found no GPU),
    from C++, past Python's ``sys.stderr``."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def profile_steps(step: Callable, x, y, n: int, device) -> dict:
    """``n`` steps under ``torch.profiler``: per step, the device's busy time and its
    count of kernels (GPU), or the time inside top-level operators and their count
    (CPU), and the wall time of the profiled steps."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    _sync(device)
    with _quiet_stderr_fd(), profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(n):
            step(x, y)
        _sync(device)
        wall = time.perf_counter() - start
    events = prof.events()
    if cuda:
        gpu = [
            e
            for e in events
            if e.device_type == DeviceType.CUDA
            and not getattr(e, "is_user_annotation", False)
        ]
        busy_us = _union_us([(e.time_range.start, e.time_range.end) for e in gpu])
        count = len(gpu)
    else:
        top = [
            e
            for e in events
            if e.device_type == DeviceType.CPU
            and e.cpu_parent is None
            and not getattr(e, "is_user_annotation", False)
        ]
        busy_us = _union_us([(e.time_range.start, e.time_range.end) for e in top])
        count = len(top)
    return {
        "kernel_s": busy_us / n / 1e6,
        "kernels_per_step": count / n,
        "profiled_step_s": wall / n,
    }


_TRACES: dict = {}
_CEILINGS: dict = {}


def ceilings(device, tf32: bool):
    """The roofline ceilings of ``device`` (``layer_profile.ceilings_for``), once per
    process."""
    from ampbook.bench.layers import ceilings_for

    key = (str(device), tf32 if device.type == "cuda" else None)
    if key not in _CEILINGS:
        _CEILINGS[key] = ceilings_for(device, tf32)
    return _CEILINGS[key]


def _source_key(*parts) -> str:
    """A cache key of ``parts``, torch's version and the sources a trace depends on
    (the model, the cost model and the saved-tensor meter)."""
    import hashlib

    import torch

    from ampbook.measure import memory
    from ampbook.predict import costmodel
    from ampbook.segmentation import model

    return hashlib.sha1(
        json.dumps(
            [
                *parts,
                torch.__version__,
                *(inspect.getsource(m) for m in (model, costmodel, memory)),
            ]
        ).encode()
    ).hexdigest()[:20]


def bound_s(spec: LadderSpec, precision: str, fp16_stream: bool, ceil) -> float:
    """The cost model's lower bound on one step of ERFNet (with the 16-bit stream when
    asked) at the spec's size. A trace costs seconds of CPU whatever the size, and each
    precision runs in its own process, so the bound is kept in ``cache_dir()`` under a
    key of everything it depends on."""
    from ampbook.core.paths import cache_dir
    from ampbook.predict.costmodel import predict, trace_step
    from ampbook.segmentation.cityscapes import NUM_CLASSES
    from ampbook.segmentation.model import ERFNet

    key = (precision, fp16_stream, spec.batch_size, spec.height, spec.width)
    path = cache_dir() / "ladder-bound" / f"{_source_key(repr(ceil), *key)}.json"
    if path.exists():
        try:
            return float(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            pass
    if key not in _TRACES:
        kw = {}
        if fp16_stream and "fp16_stream" in inspect.signature(ERFNet).parameters:
            kw["fp16_stream"] = True
        _TRACES[key] = trace_step(
            ERFNet(NUM_CLASSES, **kw),
            spec.batch_size,
            spec.height,
            spec.width,
            precision,
        )
    out = predict(_TRACES[key], ceil).min_step_s
    with contextlib.suppress(OSError):  # a cache that cannot be written costs time only
        write_record(out, path)
    return out


def _epoch_phase(cfg) -> dict:
    """Train ``cfg`` for its epochs through the runner; the epochs after the first."""
    import warnings

    from ampbook.train import run_training

    with warnings.catch_warnings():  # rung 0's 4 workers on a small machine are the
        # post's setting, on purpose
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        rec = run_training(dataclasses.replace(cfg, out=None, name=None))
    epochs = rec["epochs"]
    timed = epochs[1:] if len(epochs) > 1 else epochs
    ips = statistics.median(e["images"] / e["wall_s"] for e in timed)
    wait = statistics.median(e["data_wait_s"] / e["wall_s"] for e in timed)
    compile_s = [e.get("compile_s") for e in epochs if e.get("compile_s") is not None]
    extra = {"epoch_compile_s": sum(compile_s)} if compile_s else {}
    saved = [e.get("saved_tensor_bytes") for e in epochs]
    return {
        "images_per_s": ips,
        "data_wait_share": wait,
        "saved_tensor_bytes": max((b for b in saved if b is not None), default=None),
        "epoch_wall_s": statistics.median(e["wall_s"] for e in timed),
        "epoch_images": int(timed[-1]["images"]),
        **extra,
    }


def measure_rung(
    spec: LadderSpec,
    index: int,
    mode: str,
    device=None,
    partial: Callable[[dict], None] | None = None,
) -> dict:
    """One cell of the ladder: rung ``index`` in ``mode`` (module docstring).
    ``partial`` is given the cell as soon as its step, kernel/idle split and (on a GPU)
    memory are measured, marked ``"epoch": "pending"``, before the epochs through the
    runner (which cost more than the rest, and at rung 5 compile again); the cell
    returned says ``"epoch": "measured"``."""
    import torch

    from ampbook.core.devices import pick_device
    from ampbook.core.precision import backend_flags
    from ampbook.measure.memory import current_rss_bytes, peak_rss_bytes, reset_peak_rss
    from ampbook.measure.timing import machine_load
    from ampbook.train import build_training, validate

    dev = pick_device(device or spec.device)
    cfg = rung_config(spec, index, mode, str(dev))
    res = validate(cfg)
    cuda = dev.type == "cuda"
    cell: dict = {"rung": index, "mode": mode, "status": "ok", "error": None}
    gc.collect()
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        cell["reserved_at_start_bytes"] = torch.cuda.memory_reserved(dev)
    flags = backend_flags(
        tf32=cfg.tf32 == "on", cudnn_benchmark=bool(cfg.cudnn_benchmark)
    )
    with flags:
        training = build_training(cfg, res)
        step = training.step
        x, y = _batch(spec, dev)
        start = time.perf_counter()
        step(x, y)
        _sync(dev)
        cell["first_step_s"] = time.perf_counter() - start
        for _ in range(spec.warmup - 1):
            step(x, y)
        # The peaks of the timed steps alone: cuDNN's algorithm search (warm-up) tries
        # workspaces a training step never needs again.
        _sync(dev)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        else:
            reset_peak_rss()
            rss0 = current_rss_bytes() or peak_rss_bytes()
        times = timed_steps(step, x, y, spec.steps, dev)
        if cuda:
            cell["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(dev)
            cell["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
            cell["memory_bytes"] = cell["peak_allocated_bytes"]
        else:
            cell["peak_rss_growth_bytes"] = max(peak_rss_bytes() - rss0, 0)
        prof = profile_steps(step, x, y, spec.profile_steps, dev)
    cell["step_s"] = statistics.median(times)
    cell["step_times_s"] = times
    cell.update(prof)
    cell["idle_s"] = max(cell["step_s"] - cell["kernel_s"], 0.0)
    del training, step, x, y
    if partial is not None:
        partial({**cell, "epoch": "pending"})
    if getattr(cfg, "compile", None):
        torch._dynamo.reset()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    cell.update(_epoch_phase(cfg))
    if not cuda:  # the book's memory figure on a CPU: the bytes saved for backward
        cell["memory_bytes"] = cell["saved_tensor_bytes"]
    ceil = ceilings(dev, cfg.tf32 == "on")
    cell["bound_s"] = bound_s(
        spec, cfg.precision, bool(getattr(cfg, "fp16_stream", False)), ceil
    )
    cell["ceilings"] = ceil.name
    cell["bound_share"] = cell["bound_s"] / cell["step_s"]
    cell["load_average"] = machine_load()["load1"]
    cell["epoch"] = "measured"
    if getattr(cfg, "compile", None):
        torch._dynamo.reset()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return cell


def measure_safely(
    spec: LadderSpec,
    index: int,
    mode: str,
    partial: Callable[[dict], None] | None = None,
) -> dict:
    """``measure_rung``, with a failure recorded as the cell's error (one line); a
    failure in the epochs after ``partial`` had the cell keeps its step, with the
    error beside it."""
    early: dict = {}

    def keep(cell: dict) -> None:
        early.update(cell)
        if partial is not None:
            partial(cell)

    try:
        return measure_rung(spec, index, mode, partial=keep)
    except KeyboardInterrupt:
        raise
    except Exception as err:  # a rung that fails is reported; the ladder goes on
        text = str(err).strip().splitlines()
        msg = f"{type(err).__name__}: {text[0] if text else ''}"[:400]
        gc.collect()
        try:
            import torch

            torch._dynamo.reset()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 (cleaning up after a failure)
            pass
        if early:  # the step was measured; the epochs failed
            return {**early, "epoch": "error", "epoch_error": msg}
        return {"rung": index, "mode": mode, "status": "error", "error": msg}


# --------------------------------------------------------------------------------------
# the record
# --------------------------------------------------------------------------------------


def ladder_path(json_arg: str | Path, device_name: str) -> Path:
    """``--json``'s file: the path itself when it ends in ``.json`` and is not a
    folder, else ``ladder_<gpu>.json`` inside it."""
    from ampbook.core.words import slug

    path = Path(json_arg)
    if path.suffix == ".json" and not path.is_dir():
        return path
    return path / f"ladder_{slug(device_name)}.json"


def new_record(spec: LadderSpec, environment: dict, isolate: str) -> dict:
    from ampbook.core.devices import find_device

    cuda = str(environment.get("device", "")).startswith("cuda")
    entry = find_device(environment["device_name"]) if cuda else None
    return {
        "schema": LADDER_SCHEMA,
        "created": _now(),
        "updated": _now(),
        "status": "running",
        "environment": environment,
        "device_key": entry.key if entry else None,
        "settings": spec.settings("cuda" if cuda else "cpu", isolate),
        "rungs": [
            {
                "index": r.index,
                "key": r.key,
                "title": r.title,
                "why": r.why,
                "changes": {
                    k: (spec.compile_mode if k == "compile" and v else v)
                    for k, v in r.changes.items()
                },
            }
            for r in RUNGS
        ],
        "cells": [],
    }


def write_record(record: dict, path: Path) -> None:
    """Write atomically (a temporary file beside it, then ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)


def add_cell(path: Path, cell: dict) -> None:
    """Put ``cell`` into the record at ``path`` (replacing the same rung and mode)."""
    record = json.loads(path.read_text())
    record["cells"] = [
        c
        for c in record["cells"]
        if (c["rung"], c["mode"]) != (cell["rung"], cell["mode"])
    ] + [cell]
    record["cells"].sort(key=lambda c: (c["rung"], MODES.index(c["mode"])))
    record["updated"] = _now()
    write_record(record, path)


def _same_setting(old: dict, new: dict) -> bool:
    keys = ("height", "width", "batch_size", "time_source")
    return old.get("environment", {}).get("device_name") == new["environment"][
        "device_name"
    ] and all(old.get("settings", {}).get(k) == new["settings"][k] for k in keys)


# --------------------------------------------------------------------------------------
# running the ladder: processes, order
# --------------------------------------------------------------------------------------


def plan(
    rungs: tuple[int, ...], modes: tuple[str, ...], isolate: str
) -> list[tuple[str, tuple[int, ...]]]:
    """The groups to run, in order, as (mode, rungs): a process per mode
    (``precision``), or one group per cell, rung by rung, the modes taking turns at
    each rung (``cell``: a process each; ``none``: all in this process, so a ladder
    stopped part-way has both modes of every rung below the one it stopped in)."""
    if isolate in ("cell", "none"):
        return [(m, (r,)) for r in rungs for m in modes]
    return [(m, tuple(rungs)) for m in modes]


def _fit(line: str) -> str:
    """``line`` wrapped at the terminal's width (80 columns where stdout is not a
    terminal), the lines after the first indented."""
    import textwrap

    width = max(40, shutil.get_terminal_size((80, 24)).columns - 1)
    return textwrap.fill(line, width, subsequent_indent="    ")


def _log_cell(cell: dict, log: Callable[[str], None]) -> None:
    """A cell measured whole (or failed): one result line (the table repeats it)."""
    head = f"rung {cell['rung']} {cell['mode']:<9}"
    if cell["status"] != "ok":
        log(_fit(f"{head} error: {cell['error']}"))
        return
    if cell.get("epoch") == "error":
        log(
            _fit(
                f"{head} step {cell['step_s'] * 1e3:7.2f} ms; epochs: "
                f"{cell['epoch_error']}"
            )
        )
        return
    busy = cell["kernel_s"] / cell["step_s"]  # above 1: the table's n/a
    log(
        f"{head} step {cell['step_s'] * 1e3:7.1f} ms, busy "
        f"{f'{busy:.0%}' if busy <= 1 else NOT_SPLIT:>4}, "
        f"{cell['images_per_s']:6.1f} img/s, wait {cell['data_wait_share']:4.0%}, "
        f"bound {cell['bound_share']:4.0%}"
    )


# How a cell's progress line (its step measured, its epochs to come) ends: the line
# ``progress_log`` shows on a terminal only, not a result.
PARTIAL_END = "its epochs next"


def _log_partial(cell: dict, log: Callable[[str], None]) -> None:
    log(
        f"rung {cell['rung']} {cell['mode']}: step {cell['step_s'] * 1e3:.2f} ms, "
        f"first step {cell['first_step_s']:.1f} s; {PARTIAL_END}"
    )


def finished_cells(path: Path) -> set[tuple[int, str]]:
    """(rung, mode) of the cells in the record at ``path`` measured whole (the step
    and the epochs), which a rerun into the same file need not measure again."""
    if not path.exists():
        return set()
    return {
        (c["rung"], c["mode"])
        for c in json.loads(path.read_text())["cells"]
        if c["status"] == "ok" and c.get("epoch", "measured") == "measured"
    }


def run_group(
    spec: LadderSpec, mode: str, rungs: tuple[int, ...], path: Path, log=print
) -> None:
    """Measure ``rungs`` of ``mode`` in this process, each cell written as soon as its
    step is measured and again when its epochs are."""

    def partial(cell: dict) -> None:
        add_cell(path, cell)
        _log_partial(cell, log)

    for index in rungs:
        cell = measure_safely(spec, index, mode, partial)
        add_cell(path, cell)
        _log_cell(cell, log)


def _child(spec: LadderSpec, mode: str, rungs: tuple[int, ...], path: Path, log):
    """Run one group in a fresh process; a group that dies leaves error cells."""
    with tempfile.NamedTemporaryFile(
        "w", suffix=".json", prefix="ampbook-ladder-", delete=False
    ) as f:
        json.dump(
            {
                "spec": dataclasses.asdict(spec),
                "mode": mode,
                "rungs": list(rungs),
                "path": str(path),
            },
            f,
        )
        spec_file = f.name
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ampbook.bench.ladder", "--child", spec_file],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        tail = []
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail = (tail + [line])[-5:]
            log(line)
        rc = proc.wait()
    finally:
        os.unlink(spec_file)
    if rc != 0:
        done = {(c["rung"], c["mode"]) for c in json.loads(path.read_text())["cells"]}
        last = next((t for t in reversed(tail) if t.strip()), "")
        for index in rungs:
            if (index, mode) not in done:
                add_cell(
                    path,
                    {
                        "rung": index,
                        "mode": mode,
                        "status": "error",
                        "error": f"its process ended with exit {rc} before this "
                        f"cell was measured: {last.strip()[:300]}",
                    },
                )


def run_ladder(
    spec: LadderSpec,
    path: Path,
    isolate: str = "precision",
    merge: bool = False,
    log: Callable[[str], None] = print,
    skip_finished: bool = False,
) -> Ladder:
    """Measure the ladder into ``path`` (the record written after every cell) and
    return it as ``ampbook.results.Ladder``; with ``merge`` and ``skip_finished``, the
    cells ``path`` holds whole are not measured again (a rerun after a cut)."""
    from ampbook.core.devices import pick_device
    from ampbook.core.env import environment

    spec.check()
    dev = pick_device(spec.device)
    spec = dataclasses.replace(spec, device=str(dev))
    record = new_record(spec, environment(dev), isolate)
    if merge and path.exists():
        old = json.loads(path.read_text())
        if not _same_setting(old, record):
            raise LadderError(
                f"--merge: {path} holds another device or size; write to another "
                "file or leave out --merge"
            )
        old["status"], old["updated"] = "running", _now()
        record = old
    write_record(record, path)
    done = finished_cells(path) if merge and skip_finished else set()
    for mode, rungs in plan(spec.rungs, spec.modes, isolate):
        rungs = tuple(r for r in rungs if (r, mode) not in done)
        if not rungs:
            continue
        if isolate == "none":
            run_group(spec, mode, rungs, path, log)
        else:
            _child(spec, mode, rungs, path, log)
    record = json.loads(path.read_text())
    record["status"], record["updated"] = "complete", _now()
    write_record(record, path)
    return read_ladder(record, str(path))


# --------------------------------------------------------------------------------------
# reading a ladder: the table and the targets
# --------------------------------------------------------------------------------------


def format_table(ladder: Ladder) -> str:
    """The ladder as text, one line per measured cell (79 columns), two lines saying
    what each column is (``COLUMNS_CPU`` or ``COLUMNS_CUDA``), and where a cell's
    operator time passes its step time, one line saying why its idle and busy columns
    read ``n/a``.

    The step time is the median of the timed steps (on a GPU, the period from one
    step's start to the next, CUDA events); the operator time is measured in separate
    steps under ``torch.profiler`` (``profile_steps``): on a CPU the time inside the
    top-level operators, on a GPU the time the GPU was busy. Idle is the step less
    that: Python, dispatch and the optimizer's loop between operators on a CPU, the GPU
    waiting for the host on a GPU. Busy is operator (GPU) time over the step; MiB the
    cell's ``memory_measure`` (a CPU: bytes saved for backward in a step; a GPU: peak
    CUDA memory allocated in the timed steps); img/s and wait (the loop's share spent
    waiting for data) the median of the epochs after the first through the training
    runner, its loader included; bound the cost model's roofline bound over the step."""
    unit = "GPU" if ladder.time_source == "cuda" else "ops"
    lines = [
        f"{'rung':<12}{'mode':<10}{'step ms':>8}{unit + ' ms':>8}{'idle ms':>8}"
        f"{'busy':>6}{'MiB':>7}{'img/s':>7}{'wait':>6}{'bound':>7}",
    ]
    inseparable = False
    for rung in ladder.rungs:
        for mode in MODES:
            c = next(
                (x for x in ladder.cells if x.rung == rung.index and x.mode == mode),
                None,
            )
            if c is None:
                continue
            head = f"{rung.index} {rung.key:<10}{mode:<10}"
            if not c.ok:
                lines.append(f"{head}error: {(c.error or '')[:58]}")
                continue
            # operator time above the step time: the profiled step ran slower than
            # the timed ones, and the step does not split into busy and idle time
            apart = (c.kernel_s or 0) <= c.step_s
            if not apart:
                inseparable = True
            lines.append(
                f"{head}{c.step_s * 1e3:8.2f}{(c.kernel_s or 0) * 1e3:8.2f}"
                + (f"{(c.idle_s or 0) * 1e3:8.2f}" if apart else f"{NOT_SPLIT:>8}")
                + f"{_pct(c.busy_share) if apart else NOT_SPLIT:>6}"
                f"{(c.memory_bytes or 0) / 2**20:7.0f}{_num(c.images_per_s):>7}"
                f"{_pct(c.data_wait_share):>6}{_pct(c.bound_share):>7}"
            )
    lines.extend(COLUMNS_CUDA if unit == "GPU" else COLUMNS_CPU)
    if inseparable:
        lines.append(
            f"{NOT_SPLIT}: {unit} time above the step (the profiled steps ran slower): "
            "not separable"
        )
    return "\n".join(lines)


# What each column of the table is, two lines under it (at most 80 columns each).
COLUMNS_CPU = (
    "step: median; ops: in operators (profiled apart); idle: rest; busy: ops/step;",
    "MiB: saved for backward; img/s, wait (data): runner epochs; bound: roofline/step",
)
COLUMNS_CUDA = (
    "step: start to start; GPU: busy (profiled apart); idle: rest; busy: GPU/step;",
    "MiB: peak allocated; img/s, wait (data): runner epochs; bound: roofline/step",
)
# The idle and busy columns of a cell whose operator time passes its step time.
NOT_SPLIT = "n/a"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def _bytes(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


@dataclass(frozen=True)
class Target:
    """One of the ladder's targets, read from a ladder. ``value`` (and ``start``) may
    be ``ampbook.core.provenance.Value``s: a target over a predicted value is
    *predicted* to be met or missed, and one over an assumed value is no test at all."""

    name: str
    limit: float
    kind: str  # "max": the value must be at most the limit; "min": at least
    unit: str  # "ms", "x", "share", "img/s"
    value: float | None
    start: float | None  # the same figure at rung 0
    where: str
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return (
            self.value <= self.limit
            if self.kind == "max"
            else (self.value >= self.limit)
        )

    @property
    def provenance(self) -> str:
        """How the value was obtained: ``"measured"`` (also for a plain number),
        ``"predicted"`` or ``"assumed"``."""
        from ampbook.core.provenance import MEASURED, PUBLISHED, kind_of

        kind = kind_of(self.value) or MEASURED
        return MEASURED if kind == PUBLISHED else kind

    def fmt(self, v: float | None) -> str:
        if v is None:
            return "not measured"
        v = float(v)
        if self.unit == "ms":
            return f"{v * 1e3:.1f} ms"
        if self.unit == "x":
            return f"{v:.2f}x"
        if self.unit == "share":
            return f"{v:.0%}"
        if self.unit == "ratio":
            return f"{v:.3f}"
        return f"{v:.0f} {self.unit}"

    def line(self) -> str:
        """One line: the target, the value, met or missed (measured), predicted to
        meet or miss (predicted), or set by an assumption (no test); for a missed one
        what the profile (or the prediction) shows."""
        op = "<=" if self.kind == "max" else ">="
        head = f"{self.name} {op} {self.fmt(self.limit)}: "
        if self.met is None:
            return head + f"not measured ({self.where})."
        if self.provenance == "assumed":
            return (
                f"{head}{self.fmt(self.value)} by assumption, not a test "
                f"({self.value.source}; {self.where})."
            )
        if self.provenance == "predicted":
            verdict = "predicted to meet" if self.met else "predicted to MISS"
            off = abs(float(self.value) / self.limit - 1) if self.limit else 1.0
            near = ""
            if off < PREDICTION_RESOLVES:
                verdict = (
                    f"predicted at the target, within {PREDICTION_RESOLVES:.0%}, the "
                    "error assumed for a prediction"
                )
                near = f", {off:.1%} from it"
            text = (
                f"{head}{verdict} ({self.fmt(self.value)} predicted{near}, {self.where}"
            )
        else:
            verdict = "met" if self.met else "MISSED"
            text = f"{head}{self.fmt(self.value)}, {verdict} ({self.where}"
        if self.start is not None:
            text += f"; rung 0 measured: {self.fmt(self.start)}"
        text += ")"
        if not self.met and self.note:
            text += f". {self.note[:1].upper()}{self.note[1:]}"
        return text + "."


# A prediction closer to its target than this (relative) is read as at the target,
# neither met nor missed: an assumed bound on the cost model's error, not measured.
PREDICTION_RESOLVES = 0.05

# The book's chosen targets for the H200 at the ERFNet authors' defaults (1024x512,
# batch 6).
TARGET_SETTING = ("h200", 512, 1024, 6)
TARGETS = {
    "step_eager": 0.020,
    "step_compiled": 0.011,
    "speedup_eager": 1.3,
    "speedup_compiled": 1.6,
    "busy": 0.90,
    "data_wait": 0.05,
    "images_per_s": 300.0,
    "memory_ratio": 0.57,
}
AMP, BASE = "amp-fp16", "fp32-tf32"


def _top(ladder: Ladder, modes: tuple[str, ...], eager: bool) -> int | None:
    """The highest rung (``eager``: without torch.compile) at which every one of
    ``modes`` has a measured cell, or None: a comparison of two modes is made at one
    rung, never one mode's rung 4 against the other's rung 2 after a cut."""
    rungs = [
        r.index
        for r in ladder.rungs
        if (r.index <= EAGER_TOP or not eager)
        and all(ladder.cell(r.index, m) for m in modes)
    ]
    return max(rungs) if rungs else None


def _top_cells(
    ladder: Ladder, modes: tuple[str, ...], eager: bool
) -> dict[str, LadderCell | None]:
    """Each of ``modes``' cell at ``_top(ladder, modes, eager)`` (None where none)."""
    index = _top(ladder, modes, eager)
    return {m: None if index is None else ladder.cell(index, m) for m in modes}


def _pair_where(ladder: Ladder, a: LadderCell, modes: tuple[str, ...]) -> str:
    """Which rung a two-mode comparison was made at, and why when one mode reached
    higher."""
    alone = max(_top(ladder, (m,), a.rung <= EAGER_TOP) or 0 for m in modes)
    if alone > a.rung:
        return f"rung {a.rung}, the highest both reached"
    return f"rung {a.rung}"


def _profile_note(c: LadderCell, ladder: Ladder) -> str:
    """What the profile of cell ``c`` shows (its device's busy and idle time, kernels
    per step, what sets the pace); for a predicted cell what the prediction says, with
    its assumptions named; where the profiled operators took longer than the timed
    step (a separate, slower profiled step), that the two do not separate."""
    from ampbook.core.provenance import ASSUMED, all_measured

    dev = "GPU" if ladder.time_source == "cuda" else "operators"
    step, kern, idle = (
        cell_value(ladder, c, f) for f in ("step_s", "kernel_s", "idle_s")
    )
    if kern is not None and float(kern) > float(step):
        return (
            f"{dev} time {float(kern) * 1e3:.1f} ms in a {float(step) * 1e3:.1f} ms "
            "step: the profiled step ran slower than the timed ones, so busy and idle "
            "time are not separable here"
        )
    measured_ = all_measured([step, kern, idle])
    what = "the profile" if measured_ else "the prediction"
    idle_text = f"{float(idle or 0) * 1e3:.1f} ms"
    if idle is not None and idle.kind == ASSUMED:
        idle_text += f" (assumed: {idle.source})"
    parts = [
        f"{what}: {dev} busy {float(kern or 0) * 1e3:.1f} ms and idle {idle_text} of "
        f"the {float(step) * 1e3:.1f} ms step"
    ]
    per = c.record.get("kernels_per_step")
    if per and measured_:
        parts.append(f"{per:.0f} {'kernels' if dev == 'GPU' else 'operators'} a step")
    sets = "sets" if measured_ else "would set"
    if float(idle or 0) / float(step) > 0.2:
        parts.append(f"the host {sets} the pace (launches and syncs), not the kernels")
    elif c.bound_share is not None:
        parts.append(
            f"the kernels {'set' if measured_ else sets} it, at "
            f"{c.bound_share:.0%} of the roofline bound"
        )
    return "; ".join(parts)


def check_targets(ladder: Ladder) -> list[Target]:
    """The targets, one by one, from ``ladder``: AMP is amp-fp16 against fp32
    with TF32 (on a CPU ladder, amp-bf16 against fp32); the eager figures come from the
    highest eager rung measured, the compiled ones from rung 5."""
    out: list[Target] = []
    have = ladder.modes()
    # On a CPU the mixed precision is bf16 and the baseline fp32 (no TF32).
    amp = "amp-fp16" if "amp-fp16" in have or "amp-bf16" not in have else "amp-bf16"
    base = "fp32-tf32" if "fp32-tf32" in have or "fp32" not in have else "fp32"
    r0 = {m: ladder.cell(0, m) for m in (amp, base)}
    eager = _top_cells(ladder, (amp, base), True)  # at the highest rung both reached
    amp_eager = _top_cells(ladder, (amp,), True)[amp]
    comp = {m: ladder.cell(5, m) for m in (amp, base)}
    final = _top_cells(ladder, (amp,), False)[amp]
    # a cell cut after its step was timed has no epochs: the end-to-end targets come
    # from the highest cell with them
    whole = [
        r.index
        for r in ladder.rungs
        if ladder.cell(r.index, amp)
        and ladder.cell(r.index, amp).images_per_s is not None
    ]
    final_epochs = ladder.cell(max(whole), amp) if whole else None

    amp_name = "AMP" if amp == "amp-fp16" else MODE_LABELS[amp]
    base_name = "TF32" if base == "fp32-tf32" else MODE_LABELS[base]

    def where(c: LadderCell | None) -> str:
        return f"rung {c.rung}" if c else f"no {MODE_LABELS[amp]} cell"

    for key, name, c in (
        ("step_eager", f"{amp_name} step, eager", amp_eager),
        ("step_compiled", f"{amp_name} step, compiled", comp[amp]),
    ):
        out.append(
            Target(
                name,
                TARGETS[key],
                "max",
                "ms",
                cell_value(ladder, c, "step_s") if c else None,
                cell_value(ladder, r0[amp], "step_s") if r0[amp] else None,
                where(c) if c or key == "step_eager" else "rung 5 not measured",
                _profile_note(c, ladder) if c else "",
            )
        )
    for key, name, pair in (
        ("speedup_eager", f"{amp_name} over {base_name}, eager", eager),
        ("speedup_compiled", f"{amp_name} over {base_name}, compiled", comp),
    ):
        a, b = pair[amp], pair[base]
        value = (
            cell_value(ladder, b, "step_s") / cell_value(ladder, a, "step_s")
            if a and b
            else None
        )
        start = (
            cell_value(ladder, r0[base], "step_s")
            / cell_value(ladder, r0[amp], "step_s")
            if r0[amp] and r0[base]
            else None
        )
        note = ""
        if a and b and a.kernel_s and b.kernel_s:
            note = (
                f"kernel time {base_name} {b.kernel_s * 1e3:.1f} ms, {amp_name} "
                f"{a.kernel_s * 1e3:.1f} ms ({b.kernel_s / a.kernel_s:.2f}x); idle "
                f"{base_name} {(b.idle_s or 0) * 1e3:.1f} ms, "
                f"{amp_name} {(a.idle_s or 0) * 1e3:.1f} ms"
            )
        out.append(
            Target(
                name,
                TARGETS[key],
                "min",
                "x",
                value,
                start,
                _pair_where(ladder, a, (amp, base))
                if a and b
                else f"a {base_name} and an {amp_name} cell needed",
                note,
            )
        )
    busy_note = data_note = ips_note = ""
    if final:
        busy_note = _profile_note(final, ladder)
    if final_epochs:
        step = cell_value(ladder, final_epochs, "step_s")
        step_ips = (ladder.batch_size / step).with_(fmt=".3g")
        ips = cell_value(ladder, final_epochs, "images_per_s").with_(fmt=".3g")
        wait = cell_value(ladder, final_epochs, "data_wait_share")
        trains = "trains" if step.is_measured else "would train"
        data_note = (
            f"the loop trained {ips} images/s against the step alone's {step_ips}"
        )
        ips_note = (
            f"the step alone {trains} {step_ips} images/s and the loop waited for "
            f"data {wait} of its time"
        )
    out.append(
        Target(
            "GPU busy" if ladder.is_cuda else "operators busy",
            TARGETS["busy"],
            "min",
            "share",
            cell_value(ladder, final, "busy_share") if final else None,
            cell_value(ladder, r0[amp], "busy_share") if r0[amp] else None,
            where(final),
            busy_note,
        )
    )
    out.append(
        Target(
            "data wait",
            TARGETS["data_wait"],
            "max",
            "share",
            cell_value(ladder, final_epochs, "data_wait_share")
            if final_epochs
            else None,
            cell_value(ladder, r0[amp], "data_wait_share") if r0[amp] else None,
            where(final_epochs),
            data_note,
        )
    )
    out.append(
        Target(
            "images/s end to end",
            TARGETS["images_per_s"],
            "min",
            "img/s",
            cell_value(ladder, final_epochs, "images_per_s") if final_epochs else None,
            cell_value(ladder, r0[amp], "images_per_s") if r0[amp] else None,
            where(final_epochs),
            ips_note,
        )
    )
    a, b = eager[amp], eager[base]
    ratio = (
        cell_value(ladder, a, "memory_bytes") / cell_value(ladder, b, "memory_bytes")
        if a and b and a.memory_bytes and b.memory_bytes
        else None
    )
    start = (
        cell_value(ladder, r0[amp], "memory_bytes")
        / cell_value(ladder, r0[base], "memory_bytes")
        if r0[amp] and r0[base] and r0[base].memory_bytes and r0[amp].memory_bytes
        else None
    )
    mem_note = ""
    if a and b and ratio is not None:
        ma, mb = (cell_value(ladder, x, "memory_bytes") for x in (a, b))
        mem_note = f"{ladder.memory_measure}: {amp_name} {ma}, {base_name} {mb}"
    out.append(
        Target(
            f"{amp_name} / {base_name} peak memory",
            TARGETS["memory_ratio"],
            "max",
            "ratio",
            ratio,
            start,
            _pair_where(ladder, a, (amp, base))
            if a and b
            else f"a {base_name} and an {amp_name} cell needed",
            mem_note,
        )
    )
    return out


def targets_apply(ladder: Ladder) -> bool:
    """Whether ``ladder`` is the targets' setting: an H200 at 1024x512, batch 6."""
    from ampbook.core.words import slug

    gpu, h, w, b = TARGET_SETTING
    return (
        ladder.is_cuda
        and slug(ladder.device_name) == gpu
        and (ladder.height, ladder.width, ladder.batch_size) == (h, w, b)
    )


def format_targets(ladder: Ladder) -> str:
    head = ["targets (set for an H200 at 1024x512, batch 6):"]
    if not targets_apply(ladder):
        head.append(
            textwrap.fill(
                f"(this ladder is {ladder.device_name} at {ladder.width}x"
                f"{ladder.height}, batch {ladder.batch_size}: read them as a "
                "yardstick)",
                88,
                initial_indent="  ",
                subsequent_indent="  ",
            )
        )
    lines = [
        textwrap.fill(t.line(), 88, initial_indent="  ", subsequent_indent="    ")
        for t in check_targets(ladder)
    ]
    return "\n".join(head + lines)


# --------------------------------------------------------------------------------------
# a prediction from measured layer profiles (where no GPU ladder is committed)
# --------------------------------------------------------------------------------------

# NHWC batch norm against NCHW: about twice as fast (NVIDIA/cudnn-frontend#134, on an
# H100); the prediction halves batch norm's measured time at rung 2.
NHWC_BATCH_NORM_SPEEDUP = 2.0


def _stream_effect(ceil, b: int, h: int, w: int) -> tuple[float, float, int, int]:
    """The cost model's amp-fp16 bound with and without the 16-bit stream, and the
    bytes saved for backward with and without it, at batch ``b`` and ``h`` x ``w``.
    Two traces at full size cost seconds each, so the four numbers are kept in
    ``ampbook.core.paths.cache_dir()`` under a key of everything they depend on (the
    ceilings, the size, torch's version and the sources of the model, the cost model and
    the saved-tensor meter)."""
    from ampbook.core.paths import cache_dir
    from ampbook.predict.costmodel import predict, trace_step
    from ampbook.segmentation import model
    from ampbook.segmentation.cityscapes import NUM_CLASSES

    key = _source_key(repr(ceil), b, h, w)
    path = cache_dir() / "ladder-prediction" / f"{key}.json"
    if path.exists():
        try:
            return tuple(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    stream = trace_step(model.ERFNet(NUM_CLASSES, fp16_stream=True), b, h, w, AMP)
    ref = trace_step(model.ERFNet(NUM_CLASSES), b, h, w, AMP)
    out = (
        predict(stream, ceil).min_step_s,
        predict(ref, ceil).min_step_s,
        int(stream.saved_tensors["new_bytes"]),
        int(ref.saved_tensors["new_bytes"]),
    )
    write_record(list(out), path)
    return out


# The fields of a ladder cell whose provenance a predicted ladder records per cell
# ("measured", "predicted" or "assumed"), and the text of each assumption.
PROVENANCE_FIELDS = (
    "step_s",
    "kernel_s",
    "idle_s",
    "memory_bytes",
    "images_per_s",
    "data_wait_share",
)
ASSUMPTIONS = {
    "data_wait_share": "the prediction sets the data wait to 0 from rung 1 on",
    "idle_s": "the prediction sets the GPU's idle time to 0 from rung 3 on",
}


def predict_ladder(
    results, device_name: str | None = None, ceilings=None
) -> dict | None:
    """A ladder record *predicted* from a GPU's committed layer profiles (fp32 with TF32
    and amp-fp16, one setting) and its training runs at that setting, or None where
    there are none. Modes fp32-tf32 and amp-fp16, rungs 0 to 4; nothing for rung 5
    (what compilation fuses is not in an eager profile). The record says
    ``"predicted": true`` and lists its assumptions in ``"prediction"``:

    * rung 0 is measured: the profile's step (``step_s``) and kernel time (its modules
      and the unattributed rest), the training run's images/s, data wait and peak
      allocated memory;
    * rung 1: the data wait gone, images/s = batch / step;
    * rung 2: batch norm's kernel time divided by ``NHWC_BATCH_NORM_SPEEDUP``;
    * rung 3: no idle time (the host runs ahead of the GPU), the step = its kernels;
    * rung 4 (amp-fp16 only changes): kernels scaled by the cost model's bound with the
      16-bit stream over the bound without, peak memory less the bytes saved for
      backward the stream removes (both traced on fake tensors). The bounds use the
      device table's ceilings (``ceilings`` for a GPU not in it; without them there is
      no rung 4).
    """
    from ampbook.core.devices import find_device
    from ampbook.predict.costmodel import Ceilings
    from ampbook.segmentation.model import ERFNet

    profiles = [
        lp
        for lp in results.layer_profiles
        if lp.device.startswith("cuda")
        and (device_name is None or lp.device_name == device_name)
        and not lp.record.get("channels_last")
    ]
    by_mode = {}
    for lp in profiles:
        tf32 = lp.precision == "fp32" and lp.record.get("tf32")
        mode = BASE if tf32 else lp.precision
        if mode in (BASE, AMP):
            by_mode.setdefault(mode, lp)
    if set(by_mode) != {BASE, AMP}:
        return None
    lp_amp = by_mode[AMP]
    setting = (lp_amp.batch_size, lp_amp.height, lp_amp.width)
    if (by_mode[BASE].batch_size, by_mode[BASE].height, by_mode[BASE].width) != setting:
        return None
    b, h, w = setting
    entry = find_device(lp_amp.device_name)
    runs = {}
    for run in results.gpu_runs():
        at = (run.setting.batch_size, run.setting.height, run.setting.width)
        same = run.device_name == lp_amp.device_name and at == setting
        if same and run.mode in (BASE, AMP):
            runs.setdefault(run.mode, run)
    stream = "fp16_stream" in inspect.signature(ERFNet).parameters
    # The profiles' own bounds (the device table's ceilings, TF32 on); with the stream,
    # the cost model's bound and saved bytes of the 16-bit stream against the reference.
    bounds = {mode: lp.predicted_step_s for mode, lp in by_mode.items()}
    saved = {}
    ceil = ceilings or (Ceilings.from_device(entry) if entry is not None else None)
    if ceil is not None and stream:
        bounds["stream"], bounds["ref"], saved["stream"], saved["ref"] = _stream_effect(
            ceil, b, h, w
        )
    cells = []
    for mode, lp in by_mode.items():
        run = runs.get(mode)
        kernel = lp.measured_total_s
        idle = max(lp.step_s - kernel, 0.0)
        bn = sum(t.measured_s for t in lp.layers if t.type == "BatchNorm2d")
        memory = run.memory_bytes if run else None
        for rung in range(EAGER_TOP + 1):
            if rung == 2:
                kernel -= bn * (1 - 1 / NHWC_BATCH_NORM_SPEEDUP)
            if rung == 3:
                idle = 0.0
            bound = bounds.get(mode)
            if rung == 4 and mode == AMP:
                if "stream" in bounds:
                    kernel *= bounds["stream"] / bounds["ref"]
                    bound = bounds["stream"]
                    if memory is not None:
                        memory -= saved["ref"] - saved["stream"]
                else:
                    continue
            step = kernel + idle
            measured = rung == 0
            if measured:
                kinds = dict.fromkeys(PROVENANCE_FIELDS, "measured")
            else:
                kinds = dict.fromkeys(PROVENANCE_FIELDS, "predicted")
                kinds["data_wait_share"] = "assumed"
                if rung >= 3:
                    kinds["idle_s"] = "assumed"
            cells.append(
                {
                    "rung": rung,
                    "mode": mode,
                    "status": "ok",
                    "error": None,
                    "step_s": step,
                    "kernel_s": kernel,
                    "idle_s": idle,
                    "memory_bytes": memory,
                    "images_per_s": (
                        run.images_per_s if measured and run else b / step
                    ),
                    "data_wait_share": (
                        run.data_wait_share if measured and run else 0.0
                    ),
                    "bound_s": bound,
                    "bound_share": bound / step if bound else None,
                    "measured": measured,
                    "provenance": kinds,
                }
            )
    cells.sort(key=lambda c: (c["rung"], MODES.index(c["mode"])))
    env = dict(lp_amp.record["environment"])
    spec = LadderSpec(height=h, width=w, batch_size=b)
    record = new_record(spec, env, "none")
    record.update(
        status="complete",
        created=lp_amp.record.get("created"),
        cells=cells,
        rungs=[x for x in record["rungs"] if x["index"] <= EAGER_TOP],
        predicted=True,
        prediction={
            "from": [lp.path for lp in by_mode.values()]
            + [r.path for r in runs.values() if r.path],
            "nhwc_batch_norm_speedup": NHWC_BATCH_NORM_SPEEDUP,
            "fp16_stream_bound_ratio": (
                bounds["stream"] / bounds["ref"] if "stream" in bounds else None
            ),
            "fp16_stream_saved_bytes": (
                saved["ref"] - saved["stream"] if saved else None
            ),
        },
    )
    return record


def draw_ladder(ax, ladder: Ladder, modes=None, title: str | None = None) -> None:
    """Step time per rung and mode as bars, kernel time (solid) and idle time (hatched)
    stacked; rungs along the x axis, one bar per mode in each group."""
    import numpy as np

    from ampbook.core.page import bar_style

    modes = [m for m in (modes or ladder.modes()) if m in ladder.modes()]
    rungs = [r for r in ladder.rungs if any(ladder.cell(r.index, m) for m in modes)]
    xs = np.arange(len(rungs))
    width = 0.8 / max(len(modes), 1)
    for j, mode in enumerate(modes):
        cells = [ladder.cell(r.index, mode) for r in rungs]
        kern = np.array([(c.kernel_s or 0) * 1e3 if c else 0 for c in cells])
        idle = np.array([(c.idle_s or 0) * 1e3 if c else 0 for c in cells])
        x = xs - 0.4 + width * (j + 0.5)
        style = bar_style(j)
        ax.bar(x, kern, width, label=f"{MODE_LABELS[mode]}", **style)
        ax.bar(
            x,
            idle,
            width,
            bottom=kern,
            color="white",
            edgecolor=style["color"] if j else "black",
            hatch="////",
            linewidth=0.5,
            label="idle" if j == len(modes) - 1 else None,
        )
    ax.set_xticks(xs, [f"{r.index}: {r.key}" for r in rungs])
    ax.set_ylabel("ms per step")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)


# --------------------------------------------------------------------------------------
# what the chapter says about a ladder
# --------------------------------------------------------------------------------------


_DISPLAY = {  # field -> (format, unit, scale) of its Value
    "step_s": (".1f", " ms", 1e3),
    "kernel_s": (".1f", " ms", 1e3),
    "idle_s": (".1f", " ms", 1e3),
    "memory_bytes": (".2f", " GiB", 1 / 2**30),
    "images_per_s": (".0f", "", 1.0),
    "data_wait_share": (".0%", "", 1.0),
    "busy_share": (".0%", "", 1.0),
}


def cell_value(ladder: Ladder, c: LadderCell | None, name: str):
    """Field ``name`` of cell ``c`` (one of ``_DISPLAY``'s) as an
    ``ampbook.core.provenance.Value`` that says how it was obtained: measured (this
    ladder's file, rung and mode), predicted (``predict_ladder``, from which files) or
    assumed (the prediction's parameter, ``ASSUMPTIONS``); None where the cell or the
    field is missing. ``busy_share`` is assumed where the idle time is."""
    from ampbook.core.provenance import ASSUMED, MEASURED, PREDICTED, Value

    if c is None:
        return None
    x = c.busy_share if name == "busy_share" else getattr(c, name)
    if x is None:
        return None
    fmt, unit, scale = _DISPLAY[name]
    p = ladder.record.get("prediction")
    kinds = c.record.get("provenance") or {}
    if name == "busy_share":
        kind = kinds.get("idle_s")
        if kind != ASSUMED:
            kind = PREDICTED if PREDICTED in kinds.values() else kind
    else:
        kind = kinds.get(name)
    if kind is None:
        predicted_ = ladder.record.get("predicted") and not c.record.get("measured")
        kind = PREDICTED if predicted_ else MEASURED
    if kind == ASSUMED:
        source = ASSUMPTIONS["idle_s" if name == "busy_share" else name]
    elif p is not None:
        files = ", ".join(Path(f).name for f in p["from"])
        source = (
            f"measured ({files})"
            if kind == MEASURED
            else f"bench_ladder.predict_ladder from {files}"
        )
    else:
        source = f"measured ({Path(ladder.path).name})"
    return Value(float(x), kind, source, fmt=fmt, unit=unit, scale=scale)


def gpu_ladder(results) -> tuple[Ladder | None, bool]:
    """The GPU ladder to show: the most complete committed one, else the prediction
    from committed layer profiles (``predict_ladder``); ``(ladder, predicted)``, or
    ``(None, False)`` where there is neither."""
    committed = results.gpu_ladders()
    if committed:
        return committed[0], False
    record = predict_ladder(results)
    if record is None:
        return None, False
    return read_ladder(
        record,
        "prediction from "
        + ", ".join(Path(p).name for p in record["prediction"]["from"]),
    ), True


def source_line(ladder: Ladder, predicted: bool) -> str:
    """Where a GPU ladder's numbers come from: its provenance, and for a prediction
    what it was predicted from (``predict_ladder``'s assumptions)."""
    from ampbook.results import provenance

    settings = {
        "": f"{ladder.width}x{ladder.height}, batch {ladder.batch_size}",
    }
    line = provenance(
        ladder.record["environment"], ladder.record.get("created"), settings
    )
    if not predicted:
        return f"Measured: {line}."
    p = ladder.record["prediction"]
    ratio = p.get("fp16_stream_bound_ratio")
    stream = (
        f"every AMP kernel scaled by the cost model's bound ratio {ratio:.3f} and the "
        "saved bytes it removes (rung 4)"
        if ratio
        else "no rung 4 (no bound for this GPU)"
    )
    return (
        f"Predicted from the layer profiles measured on {line}: rung 0 as measured "
        f"(with the training runs' images/s, data wait and memory); above it, by "
        f"assumption, no data wait (rung 1), batch norm "
        f"{p['nhwc_batch_norm_speedup']:g} times faster in NHWC, the factor one user "
        f"measured for cuDNN's own batch norm (rung 2), no idle time (rung 3), and "
        f"{stream}; no rung 5."
    )


def missing_ladder_line(results) -> str:
    """The sentence for a results folder with no GPU ladder ('' when there is one)."""
    if results.gpu_ladders():
        return ""
    return (
        "No GPU ladder is committed in the results folder yet (python -m "
        "ampbook.bench ladder on a GPU writes one): what follows for the GPU is a "
        "prediction, not a measurement."
    )


def step_change(a: LadderCell, b: LadderCell, ladder: Ladder | None = None) -> str:
    """How cell ``b``'s step compared with cell ``a``'s, in words, judged against the
    spread of their timed steps (``step_times_s``), as chapter 5 reads rounds: "faster"
    only where every timed step of ``b`` was shorter than every one of ``a``, "slower"
    the other way round, else no change resolved. Cells without step times (a
    prediction) "would be" faster or slower (beyond 5%)."""
    from ampbook.core.provenance import all_measured

    va = cell_value(ladder, a, "step_s") if ladder else None
    vb = cell_value(ladder, b, "step_s") if ladder else None
    if ladder is not None and not all_measured([va, vb]):
        ratio = a.step_s / b.step_s
        if ratio > 1.05:
            return "would be faster, predicted"
        if ratio < 1 / 1.05:
            return "would be slower, predicted"
        return "would change little, predicted"
    ta, tb = a.record.get("step_times_s"), b.record.get("step_times_s")
    if not ta or not tb:
        return "step times not recorded: no verdict"
    if max(tb) < min(ta):
        return "faster in every timed step"
    if min(tb) > max(ta):
        return "slower in every timed step"
    return (
        f"no change resolved, the timed steps overlap: {_ms(min(ta))}-{_ms(max(ta))} "
        f"ms against {_ms(min(tb))}-{_ms(max(tb))} ms"
    )


def rung_verdict(ladder: Ladder, index: int, modes=None) -> str:
    """One line: what rung ``index`` did to each mode's step against the rung before
    it (``step_change``: measured cells against the spread of their timed steps,
    predicted ones in the conditional)."""
    if index not in {r.index for r in ladder.rungs}:
        why = (
            "what compilation fuses is not in an eager profile"
            if ladder.record.get("predicted")
            else "not measured"
        )
        return (
            f"This ladder has no rung {index} ({RUNGS[index].title}): {why}; "
            "python -m ampbook.bench ladder measures it."
        )
    rung = ladder.rung(index)
    parts = []
    for mode in modes or ladder.modes():
        b = ladder.cell(index, mode)
        # the rung below it that was measured in this mode (the one before when it was)
        before = max(
            (
                r.index
                for r in ladder.rungs
                if r.index < index and ladder.cell(r.index, mode)
            ),
            default=None,
        )
        if b is None or before is None:
            continue
        a = ladder.cell(before, mode)
        ratio = a.step_s / b.step_s
        # a gap in the measured rungs: the change is every rung since, together
        since = (
            ""
            if before == index - 1
            else f" (rungs {before + 1}-{index} together, from rung {before})"
        )
        parts.append(
            f"{mode} {_ms(a.step_s)} -> {_ms(b.step_s)} ms{since} "
            f"({ratio:.2f}x, {step_change(a, b, ladder)})"
        )
    if not parts:
        return f"Rung {index} ({rung.title}) was not measured beside a rung below it."
    return f"Rung {index} ({rung.title}): " + "; ".join(parts) + "."


# --------------------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------------------


def _child_main(spec_file: str) -> int:
    job = json.loads(Path(spec_file).read_text())
    spec = LadderSpec(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in job["spec"].items()}
    )
    run_group(spec, job["mode"], tuple(job["rungs"]), Path(job["path"]))
    return 0


def build_spec(args) -> tuple[LadderSpec, str, list[str]]:
    """The spec, the isolation and notes from parsed arguments (``LadderError``)."""
    from ampbook.core.devices import pick_device

    try:
        dev = pick_device(args.device)
    except (RuntimeError, ValueError) as err:
        raise LadderError(str(err)) from None
    notes = []
    modes = parse_modes(args.precisions) if args.precisions else None
    if dev.type != "cuda" and modes and "fp32-tf32" in modes:
        modes = tuple(m for m in modes if m != "fp32-tf32")
        notes.append("fp32-tf32 left out: TF32 does nothing on a CPU (fp32 is it)")
        if not modes:
            raise LadderError("--precisions: nothing left to measure on a CPU")
    spec = LadderSpec.for_device(
        dev.type,
        device=str(dev),
        rungs=parse_rungs(args.rungs) if args.rungs else None,
        modes=modes,
        height=args.height,
        width=args.width,
        batch_size=args.batch_size,
        steps=args.steps,
        warmup=args.warmup,
        profile_steps=args.profile_steps,
        epochs=args.epochs,
        train_images=args.train_images,
        compile_mode=args.compile_mode,
    )
    spec.check()
    lacking = missing_fields()
    if lacking:
        notes.append(
            f"this runner lacks TrainConfig.{', TrainConfig.'.join(lacking)}: the "
            "rungs that need them are recorded as errors"
        )
    isolate = args.isolate or ("precision" if dev.type == "cuda" else "none")
    return spec, isolate, notes


# What each --isolate runs in, as the command's first line says it.
ISOLATION = {
    "none": "all in this process",
    "precision": "a process per precision",
    "cell": "a process per rung and precision",
}


def build_parser() -> cli.ArgumentParser:
    """The command's options (light: ``--help`` imports no torch)."""
    import argparse

    cpu, gpu = CPU_DEFAULTS, LadderSpec()

    def both(name: str) -> str:
        on_gpu, on_cpu = getattr(gpu, name), cpu[name]
        if on_gpu == on_cpu:
            return f"default: {on_gpu}"
        return f"default: {on_gpu} on a GPU, {on_cpu} on a CPU"

    parser = cli.ArgumentParser(
        prog="python -m ampbook.bench ladder",
        description="The ladder: the training step from the ERFNet authors' "
        "defaults to the optimised one, one change per rung, in every precision: "
        "step time, kernel and idle time, peak memory, an epoch and the roofline "
        "bound of each rung and precision.",
        epilog="rungs:\n"
        + "\n".join(f"  {r.index}  {r.title}" for r in RUNGS)
        + "\n\ndefaults: on a GPU the post's setting ("
        f"{gpu.width}x{gpu.height}, batch {gpu.batch_size}), rungs "
        f"{RUNG_INDICES[0]}-{RUNG_INDICES[-1]}, {', '.join(GPU_MODES)}; on a CPU "
        f"rungs {' and '.join(map(str, cpu['rungs']))} at {cpu['width']}x"
        f"{cpu['height']}, batch {cpu['batch_size']}, {' and '.join(CPU_MODES)}, "
        f"{cpu['steps']} timed steps, {plural(CPU_THREADS, 'torch thread')}: "
        f"{CPU_MINUTE}. On a terminal, progress and the time left are printed "
        "(stderr) after each rung and precision.",
        formatter_class=cli.HelpFormatter,
    )
    parser.add_argument(
        "--device",
        default="auto",
        help="auto (CUDA where there is one), cpu or cuda; it sets the defaults below",
    )
    parser.add_argument(
        "--rungs",
        default=None,
        metavar="LIST",
        help="e.g. 0-5 or 0,2,4 (default: "
        f"{RUNG_INDICES[0]}-{RUNG_INDICES[-1]} on a GPU, "
        f"{','.join(map(str, cpu['rungs']))} on a CPU)",
    )
    parser.add_argument(
        "--precisions",
        default=None,
        metavar="LIST",
        help=f"comma-separated modes from {', '.join(MODE_SETTINGS)} (default: "
        f"all four on a GPU, {','.join(CPU_MODES)} on a CPU)",
    )
    parser.add_argument(
        "--height",
        type=cli.positive_int,
        default=None,
        help=f"image height ({both('height')})",
    )
    parser.add_argument(
        "--width",
        type=cli.positive_int,
        default=None,
        help=f"image width ({both('width')})",
    )
    parser.add_argument(
        "--batch-size",
        type=cli.positive_int,
        default=None,
        help=f"images per step ({both('batch_size')})",
    )
    parser.add_argument(
        "--steps",
        type=cli.positive_int,
        default=None,
        help=f"timed steps per rung and precision ({both('steps')})",
    )
    parser.add_argument(
        "--warmup",
        type=cli.nonnegative_int,
        default=None,
        help=f"untimed steps before them ({both('warmup')})",
    )
    parser.add_argument(
        "--profile-steps",
        type=cli.positive_int,
        default=None,
        help=f"steps under torch.profiler for the kernel/idle split "
        f"({both('profile_steps')})",
    )
    parser.add_argument(
        "--epochs",
        type=cli.positive_int,
        default=None,
        help=f"epochs through the runner, at least 2: the first warms up "
        f"({both('epochs')})",
    )
    parser.add_argument(
        "--train-images",
        type=cli.positive_int,
        default=None,
        help=f"synthetic training images of an epoch ({both('train_images')})",
    )
    parser.add_argument(
        "--compile-mode",
        default=None,
        help=f"rung 5's torch.compile mode (default: {COMPILE_MODE!r})",
    )
    parser.add_argument(
        "--isolate",
        choices=("none", "precision", "cell"),
        default=None,
        help="what runs in a process of its own: each precision, each rung and "
        "precision (cell), or nothing (none: all in this one) (default: precision "
        "on a GPU, none on a CPU)",
    )
    parser.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help="write the record to PATH, or to ladder_<gpu>.json in the folder PATH",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="add the cells to the --json record of the same device and size",
    )
    parser.add_argument(
        "--threads",
        type=cli.positive_int,
        default=None,
        help=f"torch threads (default: torch's on a GPU, {CPU_THREADS} on a CPU)",
    )
    parser.add_argument(
        "--show",
        metavar="FILE",
        default=None,
        help="print a written ladder's table (and a GPU's, the targets one by "
        "one); measure nothing",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


@cli.command("python -m ampbook.bench ladder")
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args.child)
    if args.show:
        return show_main(Path(args.show))
    return run_main(args)


def progress_log(total: int, stream=None) -> Callable[[str], None]:
    """``print`` for a result line; on ``stream`` (stderr), only where it is a
    terminal (``cli.Progress``), a cell's progress line (``PARTIAL_END``) and after
    each cell measured whole (or failed) the count and an estimate of the time left
    from the cells' mean (``cli.time_left_text``)."""
    progress = cli.Progress("ladder", stream=stream)
    progress.start()
    done = 0

    def log(line: str) -> None:
        nonlocal done
        if line.endswith(PARTIAL_END):
            progress(line)
            return
        print(line, flush=True)
        if line.lstrip().startswith("rung "):
            done += 1
            progress.count("cells", done, total)

    return log


def show_main(path: Path) -> int:
    """``--show FILE``: the table of a ladder already written, and the targets where
    it was measured on a GPU."""
    from ampbook.results import ResultsError, read_ladder

    try:
        record = json.loads(cli.read_text(path, "--show"))
        ladder = read_ladder(record, str(path))
    except (ValueError, ResultsError) as err:
        print(
            f"error: --show {path}: not a readable ladder record ({err}); give a "
            "ladder_<gpu>.json written by python -m ampbook.bench ladder --json",
            file=sys.stderr,
        )
        return 2
    print(format_table(ladder))
    if ladder.is_cuda:  # the targets are a GPU's: on a CPU they would read as misses
        print()
        print(format_targets(ladder))
    return 0


def run_main(args) -> int:
    """The command's work after parsing: settings, the ladder, the table, targets."""
    try:
        spec, isolate, notes = build_spec(args)
    except LadderError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    threads = args.threads
    if threads is None and not spec.device.startswith("cuda"):
        threads = CPU_THREADS
    with torch_threads(threads):
        return _run(args, spec, isolate, notes)


@contextlib.contextmanager
def torch_threads(n: int | None):
    """torch's intra-op threads set to ``n`` (and ``OMP_NUM_THREADS``, for the
    processes it starts) for the duration, then put back: the command called as a
    function leaves its caller's threads as they were. ``None``: left alone."""
    if n is None:
        yield
        return
    import torch

    before, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(n)
    os.environ["OMP_NUM_THREADS"] = str(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        if env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env


def _run(args, spec: LadderSpec, isolate: str, notes: list[str]) -> int:
    from ampbook.bench.machine_load import load_verdict
    from ampbook.core.env import environment
    from ampbook.measure.timing import machine_load

    env = environment(spec.device)
    if args.json:
        path = cli.check_output_file(
            ladder_path(args.json, env["device_name"]), "--json", kind=LADDER_SCHEMA
        )
    else:
        path = Path(tempfile.mkdtemp(prefix="ampbook-ladder-")) / "ladder.json"
    load = machine_load()
    print(
        cli.terminal_text(
            f"ladder on {env['device_name']} ({spec.device}), {spec.width}x"
            f"{spec.height}, batch {spec.batch_size}; rungs "
            f"{','.join(map(str, spec.rungs))}; {', '.join(spec.modes)}; "
            f"{ISOLATION[isolate]}; "
            + load_verdict(load, "cuda" if spec.device.startswith("cuda") else "cpu")
        )
    )
    for note in notes:
        print(cli.terminal_text(f"note: {note}"))
    try:
        ladder = run_ladder(
            spec,
            path,
            isolate,
            args.merge,
            log=progress_log(len(spec.rungs) * len(spec.modes)),
        )
    except LadderError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print()
    print(format_table(ladder))
    if ladder.is_cuda:  # the targets are a GPU's: on a CPU they would read as misses
        print()
        print(format_targets(ladder))
    if args.json:
        print(f"\nwrote {path}")
    errors = [c for c in ladder.cells if not c.ok]
    return 1 if errors and len(errors) == len(ladder.cells) else 0


if __name__ == "__main__":
    sys.exit(main())
