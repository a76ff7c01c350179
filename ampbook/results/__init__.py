"""Measured results read from a folder: the one place the chapters read them from.

    from ampbook.results import load_results_dir
    rs = load_results_dir(results_dir)          # default: data/results
    for pair in rs.pairs(): print(pair.label, pair.speedup, pair.memory_ratio)

Five kinds of file, each named by its ``schema`` field, are read (recursively, sorted by
path):

* training runs (``"ampbook.train"``, ``ampbook.train.load_results``) -> ``TrainRun``;
* tensor-core sweeps (``"ampbook.tensor_cores/1"``, ``ampbook.bench.matmul``) ->
  ``MatmulSweep``;
* per-layer profiles (``"ampbook.layer_profile/1"``, ``ampbook.bench.layers``):
  measured time per ERFNet module beside the cost model's prediction ->
  ``LayerProfile``;
* loader sweeps (``"ampbook.loader_sweep/1"``, ``ampbook.bench.layers.loader_record``):
  DataLoader images/s by worker count -> ``LoaderSweep``;
* ladders (``"ampbook.ladder/1"``, ``python -m ampbook.bench ladder``): the training
  step rung by rung from the post's setup to the optimised one, per precision ->
  ``Ladder``.

Any other JSON (or a file that fails its schema's checks) is listed in
``ResultSet.ignored`` with the reason, never silently mixed in.

One definition of each number, used by every chapter:

* **Epoch time** (``TrainRun.epoch_s``): the median ``wall_s`` (training loop) of the
  epochs after the first; of all epochs when there is only one. The first epoch pays for
  warm-up (cuDNN's algorithm search, the allocator growing, workers starting); the
  median keeps one disturbed epoch from moving the figure. Validation and checkpoints
  are not in it. ``step_s`` and ``data_wait_s`` are the same median over the same epochs
  of the time inside the step function and the time waiting for the loader, per epoch.
* **Memory** (``TrainRun.memory_bytes``): on CUDA the peak of
  ``torch.cuda.max_memory_allocated`` over the run's training loops (``memory_measure``
  says ``"peak CUDA allocated"``); on a CPU, which has no allocator peak to read, the
  bytes autograd saved for backward in one step (``"saved for backward"``). Reserved
  CUDA memory (what ``nvidia-smi`` sees, roughly) is ``cuda_reserved_bytes`` beside it.

Runs pair (``pair_runs``) only when they ran on the same device (same ``device_name``)
with the same setting (``Setting``: resolution, batch, memory format, workers, training
images, synthetic or real data): an fp32 baseline (TF32 on and strict apart) against an
AMP run.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ampbook.core import cli
from ampbook.core.modes import MODES, PRECISIONS
from ampbook.core.paths import RESULTS_DIR

TRAIN_SCHEMA = "ampbook.train"
MATMUL_SCHEMA = "ampbook.tensor_cores/1"
LAYER_SCHEMA = "ampbook.layer_profile/1"
LOADER_SCHEMA = "ampbook.loader_sweep/1"
LADDER_SCHEMA = "ampbook.ladder/1"
SCHEMAS = (TRAIN_SCHEMA, MATMUL_SCHEMA, LAYER_SCHEMA, LOADER_SCHEMA, LADDER_SCHEMA)

PEAK_CUDA = "peak CUDA allocated"
SAVED_FOR_BACKWARD = "saved for backward"
# Order of the modes in tables: the baselines first (fp32 with TF32 on, then the
# runner's precisions).
MODE_LABELS = {
    "fp32-tf32": "fp32 (TF32 on)",
    "fp32": "fp32 (strict)",
    "amp-fp16": "amp-fp16 + GradScaler",
    "amp-bf16": "amp-bf16",
}


class ResultsError(ValueError, cli.UserError):
    """A results file that claims a known schema but does not hold to it."""


# --------------------------------------------------------------------------------------
# training runs
# --------------------------------------------------------------------------------------


def provenance(
    environment: dict,
    date: str | None = None,
    settings: dict[str, Any] | None = None,
) -> str:
    """The one-line provenance of a measurement shown in the book: the device (GPU
    by ``devices.display_name``), the date, torch/CUDA/cuDNN, the host's CPU threads,
    then ``settings`` as ``key value`` pairs in the given order (workers, memory
    format, cudnn.benchmark, data...). ``date`` is an ISO time or date; its day is
    shown. Every part is page text (``plots.md_escape``): a results file's strings
    cannot add markup to the book."""
    from ampbook.core.devices import display_name
    from ampbook.core.page import md_escape

    name = environment.get("device_name") or "unknown device"
    if str(environment.get("device", "")).startswith("cuda"):
        name = display_name(name)
    parts = [name]
    if date:
        parts.append(str(date)[:10])
    soft = [f"torch {environment.get('torch', '?')}"]
    if environment.get("cuda"):
        soft.append(f"CUDA {environment['cuda']}")
    from ampbook.core.env import cudnn_version_text

    cudnn = cudnn_version_text(environment.get("cudnn"))
    if cudnn and str(environment.get("device", "")).startswith("cuda"):
        soft.append(f"cuDNN {cudnn}")
    parts.append(", ".join(soft))
    if environment.get("cpu_threads"):
        parts.append(f"{environment['cpu_threads']} CPU threads")
    for key, value in (settings or {}).items():
        parts.append(f"{key} {value}" if key else str(value))
    return " · ".join(md_escape(part) for part in parts)


@dataclass(frozen=True)
class Setting:
    """What must match for two training runs to be compared."""

    device_name: str
    height: int
    width: int
    batch_size: int
    channels_last: bool
    workers: int
    train_images: int
    synthetic_data: bool

    @property
    def label(self) -> str:
        data = "synthetic" if self.synthetic_data else "Cityscapes"
        cl = ", channels_last" if self.channels_last else ""
        return (
            f"{self.width}x{self.height}, batch {self.batch_size}, "
            f"{self.train_images} {data} images, {self.workers} workers{cl}"
        )


@dataclass(frozen=True)
class TrainRun:
    """One training-run record, summarised with the module's definitions."""

    path: str | None
    name: str
    status: str
    device: str
    device_name: str
    precision: str
    tf32: bool
    setting: Setting
    epochs_completed: int
    epochs_timed: int
    epoch_s: float
    step_s: float
    data_wait_s: float
    images_per_epoch: int
    memory_bytes: int | None
    memory_measure: str
    cuda_allocated_bytes: int | None
    cuda_reserved_bytes: int | None
    saved_tensor_bytes: int | None
    final_train_loss: float | None
    final_val_pixel_accuracy: float | None
    final_val_miou: float | None
    skipped_steps: int
    record: dict = field(repr=False, compare=False, hash=False)
    steps_per_epoch: int = 1  # steps of the last epoch (per process)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def mode(self) -> str:
        """``fp32-tf32`` (fp32 with TF32 on), ``fp32`` (strict), ``amp-fp16`` or
        ``amp-bf16``."""
        return "fp32-tf32" if self.precision == "fp32" and self.tf32 else self.precision

    @property
    def mode_label(self) -> str:
        return MODE_LABELS[self.mode]

    @property
    def images_per_s(self) -> float:
        return self.images_per_epoch / self.epoch_s

    @property
    def data_wait_share(self) -> float:
        """Fraction of the epoch time spent waiting for the loader."""
        return self.data_wait_s / self.epoch_s

    @property
    def one_step_s(self) -> float:
        """Time of one step: ``step_s`` over the epoch's steps."""
        return self.step_s / self.steps_per_epoch

    @property
    def step_images_per_s(self) -> float:
        """Images per second of the step alone (what the GPU could do with data
        waiting)."""
        return self.images_per_epoch / self.step_s

    def timed_epochs(self) -> list[dict]:
        """The epoch records the medians are taken over (after the first, when there
        is more than one)."""
        epochs = self.record["epochs"]
        return epochs[1:] if len(epochs) > 1 else epochs

    @property
    def data_wait_range(self) -> tuple[float, float]:
        """Least and most data wait of one timed epoch (s): the loader's noise."""
        waits = [e["data_wait_s"] for e in self.timed_epochs()]
        return (min(waits), max(waits))

    @property
    def settings(self) -> dict[str, Any]:
        """What the run's provenance line shows after the software: workers, memory
        format, cudnn.benchmark (GPU runs) and the data."""
        env = self.record.get("environment", {})
        out: dict[str, Any] = {"workers": self.setting.workers}
        out["memory format"] = (
            "channels_last" if self.setting.channels_last else "contiguous"
        )
        if self.is_cuda:
            bench = env.get("cudnn_benchmark")
            out["cudnn.benchmark"] = (
                "?" if bench is None else ("on" if bench else "off")
            )
        data = "synthetic" if self.setting.synthetic_data else "Cityscapes"
        out[""] = f"{self.setting.train_images} {data} images"
        return out

    @property
    def provenance(self) -> str:
        """``provenance`` of this run: device, date, torch/CUDA/cuDNN, CPU threads,
        workers, memory format, cudnn.benchmark and data, in one line."""
        return provenance(
            self.record.get("environment", {}),
            self.record.get("started"),
            self.settings,
        )


def _median_after_first(values: list[float]) -> float:
    return statistics.median(values[1:] if len(values) > 1 else values)


def summarise_run(record: dict, path: str | Path | None = None) -> TrainRun:
    """A ``TrainRun`` from a training-run record (a loaded file or ``run_training``'s
    return)."""
    where = str(path) if path is not None else record.get("name", "record")
    if record.get("schema") != TRAIN_SCHEMA:
        raise ResultsError(
            f"{where}: not a training-run record (schema {record.get('schema')!r})"
        )
    try:
        c, r, s, env = (
            record["config"],
            record["resolved"],
            record["summary"],
            record["environment"],
        )
        epochs = record["epochs"]
        if not epochs:
            raise ResultsError(f"{where}: no epoch was recorded")
        _check_run_numbers(record, where)
        timed = epochs[1:] if len(epochs) > 1 else epochs
        epoch_s = _median_after_first([e["wall_s"] for e in epochs])
        if not epoch_s > 0:
            raise ResultsError(f"{where}: epoch time {epoch_s!r} is not positive")
        cuda = str(r["device"]).startswith("cuda")
        allocated = s.get("max_cuda_allocated_bytes")
        saved = s.get("max_saved_tensor_bytes")
        if cuda:
            memory, measure = allocated, PEAK_CUDA
        else:
            memory, measure = saved, SAVED_FOR_BACKWARD
        setting = Setting(
            device_name=str(env["device_name"]),
            height=int(c["height"]),
            width=int(c["width"]),
            batch_size=int(c["batch_size"]),
            channels_last=bool(c.get("channels_last", False)),
            # resolved: what "--workers auto" became (runs before it: the config's)
            workers=int(r.get("workers", c.get("workers", 0))),
            train_images=int(r["train_images"]),
            synthetic_data=bool(r["synthetic_data"]),
        )
        return TrainRun(
            path=str(path) if path is not None else None,
            name=record["name"],
            status=record["status"],
            device=str(r["device"]),
            device_name=setting.device_name,
            precision=c["precision"],
            tf32=c.get("tf32") == "on",
            setting=setting,
            epochs_completed=len(epochs),
            epochs_timed=len(timed),
            epoch_s=epoch_s,
            step_s=_median_after_first([e["step_s"] for e in epochs]),
            data_wait_s=_median_after_first([e["data_wait_s"] for e in epochs]),
            images_per_epoch=int(epochs[-1]["images"]),
            memory_bytes=memory,
            memory_measure=measure,
            cuda_allocated_bytes=allocated,
            cuda_reserved_bytes=s.get("max_cuda_reserved_bytes"),
            saved_tensor_bytes=saved,
            final_train_loss=s.get("final_train_loss"),
            final_val_pixel_accuracy=s.get("final_val_pixel_accuracy"),
            final_val_miou=s.get("final_val_miou"),
            skipped_steps=int(s.get("total_skipped_steps") or 0),
            record=record,
            steps_per_epoch=max(1, int(epochs[-1].get("steps") or 1)),
        )
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, ResultsError):
            raise
        raise ResultsError(
            f"{where}: training-run record lacks or mistypes {err}"
        ) from None


def _number(value: Any, field: str, where: str, least: float = 0.0, above=False):
    """``value`` as a finite number >= ``least`` (> with ``above``), else
    ``ResultsError`` naming the file and the field."""
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > least if above else value >= least)
    )
    if not ok:
        rule = f"{'above' if above else 'at least'} {least:g}"
        raise ResultsError(f"{where}: {field} must be a number {rule}, got {value!r}")
    return value


# The largest count a results file may hold (images, steps, bytes, pixels): far above
# anything measured, far below what would overflow a float or a format.
MAX_COUNT = 2**53


def _count(
    value: Any, field: str, where: str, least: int = 1, most: int = MAX_COUNT
) -> int:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)  # 3.0 is the count 3; 3.5 is no count
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < least
        or value > most
    ):
        raise ResultsError(
            f"{where}: {field} must be an integer from {least} to {most:,}, got "
            f"{_short(value)}"
        )
    return value


def _short(value: Any) -> str:
    """``repr(value)`` cut to one short line (a value in an error message)."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def _share(value: Any, field: str, where: str, optional: bool = True):
    """A fraction in [0, 1] (accuracy, mIoU, a share of a whole), or None."""
    if value is None and optional:
        return None
    _number(value, field, where)
    if value > 1:
        raise ResultsError(
            f"{where}: {field} must be a share from 0 to 1, got {value!r}"
        )
    return value


# An epoch of even one image takes longer than this: a shorter wall time is no
# measurement (it would divide into an absurd speedup).
MIN_WALL_S = 1e-4
# Parts of a whole measured by separate clocks may overshoot it by this much.
PART_SLACK = 1.02


def _check_run_numbers(record: dict, where: str) -> None:
    """The numbers a ``TrainRun`` is made of: times positive (they divide), counts
    positive integers, memory non-negative or null."""
    if not isinstance(record["epochs"], list):
        raise ResultsError(f"{where}: epochs must be a list of epoch records")
    total_steps = 0
    for i, e in enumerate(record["epochs"]):
        if not isinstance(e, dict):
            raise ResultsError(f"{where}: epochs[{i}] is not an epoch record")
        at = f"epochs[{i}]"
        wall = _number(e.get("wall_s"), f"{at}.wall_s", where, above=True)
        if wall < MIN_WALL_S:
            raise ResultsError(
                f"{where}: {at}.wall_s {wall!r} is below {MIN_WALL_S:g} s: no epoch "
                "is that short"
            )
        step = _number(e.get("step_s"), f"{at}.step_s", where, above=True)
        wait = _number(e.get("data_wait_s"), f"{at}.data_wait_s", where)
        if step + wait > wall * PART_SLACK:
            raise ResultsError(
                f"{where}: {at}: step_s {step:.4g} + data_wait_s {wait:.4g} exceed "
                f"the epoch's wall_s {wall:.4g} they are parts of"
            )
        images = _count(e.get("images"), f"{at}.images", where)
        if e.get("steps") is not None:
            steps = _count(e["steps"], f"{at}.steps", where, most=images)
            total_steps += steps
        for key in ("skipped_steps", "optimizer_steps", "nonfinite_losses"):
            if e.get(key) is not None:
                _count(e[key], f"{at}.{key}", where, least=0)
        for key in ("val_pixel_accuracy", "val_miou"):
            _share(e.get(key), f"{at}.{key}", where)
        for key in ("train_loss", "val_loss"):
            if e.get(key) is not None:
                _number(e[key], f"{at}.{key}", where)
    c, r, s = record["config"], record["resolved"], record["summary"]
    for key in ("height", "width"):
        _count(c.get(key), f"config.{key}", where, most=2**16)
    _count(c.get("batch_size"), "config.batch_size", where, most=2**20)
    if c.get("workers") is not None:
        _count(c["workers"], "config.workers", where, least=0, most=4096)
    if isinstance(r.get("workers"), int):
        _count(r["workers"], "resolved.workers", where, least=0, most=4096)
    _count(r.get("train_images"), "resolved.train_images", where)
    for key in (
        "max_cuda_allocated_bytes",
        "max_saved_tensor_bytes",
        "max_cuda_reserved_bytes",
    ):
        if s.get(key) is not None:
            _number(s[key], f"summary.{key}", where)
            _count(s[key], f"summary.{key}", where, least=0, most=2**50)
    for key in ("final_val_pixel_accuracy", "final_val_miou"):
        _share(s.get(key), f"summary.{key}", where)
    if s.get("final_train_loss") is not None:
        _number(s["final_train_loss"], "summary.final_train_loss", where)
    if s.get("total_skipped_steps") is not None:
        _count(
            s["total_skipped_steps"],
            "summary.total_skipped_steps",
            where,
            least=0,
            most=max(total_steps, 0) if total_steps else MAX_COUNT,
        )
    for key in ("name", "status", "precision"):
        holder = c if key == "precision" else record
        if not isinstance(holder.get(key), str):
            raise ResultsError(f"{where}: {key} must be a string")
    _precision(c["precision"], "config.precision", where)


def _precision(value: Any, field: str, where: str) -> str:
    if value not in PRECISIONS:
        raise ResultsError(
            f"{where}: {field} must be one of {', '.join(PRECISIONS)}, got "
            f"{_short(value)}"
        )
    return value


@dataclass(frozen=True)
class RunPair:
    """An fp32 baseline and an AMP run of one setting on one device."""

    setting: Setting
    baseline: TrainRun
    amp: TrainRun

    @property
    def label(self) -> str:
        return f"{self.amp.mode_label} vs {self.baseline.mode_label}"

    @property
    def speedup(self) -> float:
        """Baseline epoch time over AMP epoch time (above 1: AMP faster)."""
        return self.baseline.epoch_s / self.amp.epoch_s

    @property
    def step_speedup(self) -> float:
        """The same for the time inside the step alone (data waiting left out)."""
        return self.baseline.step_s / self.amp.step_s

    @property
    def memory_ratio(self) -> float | None:
        """AMP memory over baseline memory (below 1: AMP saved memory); None without
        both."""
        if not self.baseline.memory_bytes or self.amp.memory_bytes is None:
            return None
        return self.amp.memory_bytes / self.baseline.memory_bytes

    @property
    def memory_measure(self) -> str:
        return self.baseline.memory_measure

    @property
    def epoch_speedups(self) -> list[float]:
        """Baseline over AMP wall time, epoch by epoch (the timed epochs the two runs
        share): the spread of ``speedup``."""
        pairs = zip(self.baseline.timed_epochs(), self.amp.timed_epochs())
        return [b["wall_s"] / a["wall_s"] for b, a in pairs]

    @property
    def step_speedups(self) -> list[float]:
        """The same for the time inside the step: the spread of ``step_speedup``."""
        pairs = zip(self.baseline.timed_epochs(), self.amp.timed_epochs())
        return [b["step_s"] / a["step_s"] for b, a in pairs]

    @property
    def loader_bound(self) -> bool:
        """Either run spent at least half its loop waiting for data: its epoch time is
        the loader's, and the epoch ratio measures the loader's noise, not AMP."""
        return max(self.amp.data_wait_share, self.baseline.data_wait_share) >= 0.5

    @property
    def headline_speedup(self) -> float:
        """The speedup to show for this pair: the step's when the pair is loader-bound
        (``loader_bound``), else the epoch's."""
        return self.step_speedup if self.loader_bound else self.speedup

    @property
    def provenance(self) -> str:
        """The AMP run's provenance line (both runs share device and setting)."""
        return self.amp.provenance


def pair_runs(runs: Iterable[TrainRun], complete_only: bool = True) -> list[RunPair]:
    """Every (fp32 baseline, AMP run) pair that shares device and setting.

    Baselines are fp32 with TF32 on and strict fp32, each paired with every AMP run of
    the group; two runs of one mode in a group are an error naming both
    (``load_results_dir`` sets such runs aside). Ordered by device, setting, then
    ``MODES``.
    """
    groups: dict[Setting, dict[str, TrainRun]] = {}
    for run in runs:
        if complete_only and not run.complete:
            continue
        group = groups.setdefault(run.setting, {})
        if run.mode in group:
            raise ResultsError(
                f"{group[run.mode].path or group[run.mode].name} and "
                f"{run.path or run.name} are two records of one setting "
                f"({run.setting.label}, {run.mode}): keep one of them"
            )
        group[run.mode] = run
    out = []
    for setting in sorted(
        groups,
        key=lambda k: (
            k.device_name,
            k.height,
            k.width,
            k.batch_size,
            k.channels_last,
            k.workers,
            k.train_images,
        ),
    ):
        by_mode = groups[setting]
        for base in ("fp32-tf32", "fp32"):
            for amp in ("amp-fp16", "amp-bf16"):
                if base in by_mode and amp in by_mode:
                    out.append(RunPair(setting, by_mode[base], by_mode[amp]))
    return out


@dataclass(frozen=True)
class BoundCheck:
    """A GPU pair's measured steps beside the cost model's bound for that GPU, traced at
    the pair's own setting (``bound_checks``), with the layer profiles of the same GPU
    and setting where there are any (they split each step into kernel time and GPU
    idle time)."""

    pair: RunPair
    device_key: str  # the device table's entry
    baseline_bound_s: float
    amp_bound_s: float
    amp_profile: LayerProfile | None = None
    baseline_profile: LayerProfile | None = None

    @property
    def bound_speedup(self) -> float:
        """Baseline bound over AMP bound: the speedup if both precisions reach the same
        share of their bound. A ratio of two lower bounds, not an upper bound: a
        precision whose kernels get closer to their bound beats it."""
        return self.baseline_bound_s / self.amp_bound_s

    @property
    def baseline_efficiency(self) -> float:
        """The baseline's bound over its measured step (wall time: kernels and GPU idle
        time together)."""
        return self.baseline_bound_s / self.pair.baseline.one_step_s

    @property
    def amp_efficiency(self) -> float:
        return self.amp_bound_s / self.pair.amp.one_step_s

    @property
    def share_ratio(self) -> float:
        """AMP's share of its bound over the baseline's: measured step speedup over the
        bound's speedup (above 1: AMP beat the roofline ratio)."""
        return self.amp_efficiency / self.baseline_efficiency

    def verdict(self) -> str:
        """One line: the roofline ratio, the measured step, which precision got closer
        to its bound, and, with layer profiles, where the AMP step's time went."""
        from ampbook.core.devices import display_name

        p = self.pair
        head = (
            f"{display_name(p.setting.device_name)}, {p.label}: at equal shares of "
            f"their bounds AMP would gain {self.bound_speedup:.2f}x; its step in the "
            f"loop ran at {p.step_speedup:.2f}x"
        )
        effs = (
            f"AMP's steps reached {self.amp_efficiency:.0%} of their bound, the "
            f"baseline's {self.baseline_efficiency:.0%} (wall time)"
        )
        r = self.share_ratio
        if r > 1.1:
            why = (
                f"{effs}: AMP got closer to its bound, so the measured speedup exceeds "
                "the roofline ratio, which is no upper bound"
            )
        elif r < 1 / 1.1:
            why = f"{effs}: AMP got less close to its bound than the baseline"
        else:
            why = f"{effs}: both about as close to their bounds"
        text = f"{head}. {why}."
        if self.amp_profile is not None and self.baseline_profile is not None:
            text += " " + kernel_time_verdict(self.amp_profile, self.baseline_profile)
        return text


def kernel_time_verdict(amp, baseline) -> str:
    """Where an AMP step's time went, from two layer profiles of one GPU and setting
    (``ampbook.results.LayerProfile``): the kernels' time and the GPU's idle time
    (wall time minus kernel time) apart. AMP's kernels can be faster while its step is
    not: the gain is then lost to idle time (kernel launches, autocast's casts, host
    synchronisations), not to slower kernels."""
    ks = baseline.kernel_s / amp.kernel_s
    ws = baseline.step_s / amp.step_s
    ms = 1e3
    facts = (
        f"In the layer profiles AMP's kernels took {amp.kernel_s * ms:.1f} ms against "
        f"{baseline.kernel_s * ms:.1f} ms for {baseline.mode_label} ({ks:.2f}x), its "
        f"step {amp.step_s * ms:.1f} ms against {baseline.step_s * ms:.1f} ms "
        f"({ws:.2f}x); the GPU sat idle {amp.idle_s * ms:.1f} ms against "
        f"{baseline.idle_s * ms:.1f} ms"
    )
    if ks > 1.05 and ws < ks / 1.05:
        return (
            f"{facts}: the kernels' gain went to idle time (the gaps between kernels: "
            "launches and host work), not to slower kernels."
        )
    if ks <= 1.0 / 1.05:
        return f"{facts}: AMP's kernels themselves were slower."
    if ks <= 1.05:
        return f"{facts}: AMP's kernels themselves were no faster."
    return f"{facts}: the step kept the kernels' gain."


def bound_checks(
    pairs: Iterable[RunPair],
    model,
    devices=None,
    profiles: Iterable[LayerProfile] = (),
) -> list[BoundCheck]:
    """A ``BoundCheck`` for every pair that ran on a GPU of the device table (others are
    left out: there are no ceilings to hold them against). ``model`` is the network the
    runs trained (ERFNet for the runner's records); it is traced on fake tensors at each
    pair's resolution and batch, fp32 against the bound with TF32 as the baseline ran
    it. ``profiles`` (layer profiles) of the same GPU, batch, resolution and mode as
    the pair's runs are attached to the check."""
    from ampbook.core.devices import find_device, load_devices
    from ampbook.predict import costmodel as cm

    devices = load_devices() if devices is None else devices
    profiles = list(profiles)
    traces: dict[tuple, Any] = {}

    def bound(setting: Setting, precision: str, ceilings) -> float:
        key = (setting.batch_size, setting.height, setting.width, precision)
        if key not in traces:
            traces[key] = cm.trace_step(
                model, setting.batch_size, setting.height, setting.width, precision
            )
        return cm.predict(traces[key], ceilings).min_step_s

    out = []
    for p in pairs:
        dev = find_device(p.setting.device_name, devices)
        if dev is None:
            continue
        base_ceil = cm.Ceilings.from_device(dev, tf32=p.baseline.tf32)
        out.append(
            BoundCheck(
                p,
                dev.key,
                bound(p.setting, "fp32", base_ceil),
                bound(p.setting, p.amp.precision, cm.Ceilings.from_device(dev)),
                _profile_for(profiles, p.setting, p.amp.mode),
                _profile_for(profiles, p.setting, p.baseline.mode),
            )
        )
    return out


def _profile_for(profiles, setting: Setting, mode: str) -> LayerProfile | None:
    """The last layer profile of ``mode`` on the setting's GPU, batch and size."""
    found = None
    for lp in profiles:
        if (
            lp.device_name == setting.device_name
            and (lp.batch_size, lp.height, lp.width)
            == (setting.batch_size, setting.height, setting.width)
            and lp.mode == mode
        ):
            found = lp
    return found


def profile_pairs(profiles: Iterable[LayerProfile]) -> list[tuple]:
    """``(baseline, amp)`` layer profiles of one GPU, batch and size: each fp32
    profile (TF32 on or strict) with each AMP profile, in ``MODES`` order."""
    groups: dict[tuple, dict[str, LayerProfile]] = {}
    for lp in profiles:
        key = (lp.device_name, lp.batch_size, lp.height, lp.width)
        groups.setdefault(key, {})[lp.mode] = lp
    out = []
    for key in sorted(groups):
        by_mode = groups[key]
        for base in ("fp32-tf32", "fp32"):
            for amp in ("amp-fp16", "amp-bf16"):
                if base in by_mode and amp in by_mode:
                    out.append((by_mode[base], by_mode[amp]))
    return out


# --------------------------------------------------------------------------------------
# tensor-core sweeps, layer profiles, loader sweeps
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatmulSweep:
    """A tensor-core sweep (``ampbook.bench.matmul``); ``record`` is the validated
    JSON."""

    path: str
    device_name: str
    dtypes: tuple[str, ...]
    record: dict = field(repr=False, compare=False, hash=False)


@dataclass(frozen=True)
class LayerTime:
    """One module of the network: measured time per step beside the cost model's."""

    scope: str
    type: str
    measured_s: float
    predicted_s: float

    @property
    def ratio(self) -> float | None:
        """Measured over predicted (how far above its roofline bound the module ran)."""
        return self.measured_s / self.predicted_s if self.predicted_s > 0 else None


@dataclass(frozen=True)
class LayerProfile:
    """Per-module times of one training step (``ampbook.bench.layers``)."""

    path: str
    device_name: str
    device: str
    precision: str
    batch_size: int
    height: int
    width: int
    time_source: str
    steps: int
    step_s: float
    predicted_step_s: float
    unattributed_s: float
    ceilings: str
    layers: tuple[LayerTime, ...]
    record: dict = field(repr=False, compare=False, hash=False)
    tf32: bool | None = None  # fp32 profiles: whether TF32 was on (None: not recorded)

    @property
    def mode(self) -> str:
        """As ``TrainRun.mode``: ``fp32-tf32`` for an fp32 profile with TF32 on."""
        return "fp32-tf32" if self.precision == "fp32" and self.tf32 else self.precision

    @property
    def mode_label(self) -> str:
        return MODE_LABELS.get(self.mode, self.mode)

    @property
    def efficiency(self) -> float:
        """The bound over the measured *wall* time of a step: the step's share of the
        roofline, kernel time and GPU idle time mixed. For the kernels' own share use
        ``kernel_efficiency``."""
        return self.predicted_step_s / self.step_s

    @property
    def measured_total_s(self) -> float:
        return sum(layer.measured_s for layer in self.layers) + self.unattributed_s

    @property
    def kernel_s(self) -> float:
        """Time of a step's kernels (on CUDA the profiler's device time of every module
        and of what no module claims): ``measured_total_s``."""
        return self.measured_total_s

    @property
    def idle_s(self) -> float:
        """The step's wall time in which no kernel ran: ``step_s - kernel_s`` (GPU idle
        time: launches, host work, synchronisations); 0 where kernels add up to more."""
        return max(self.step_s - self.kernel_s, 0.0)

    @property
    def provenance(self) -> str:
        """``provenance`` of this profile: device, date, software, then its settings
        (batch and size, profiled steps, no DataLoader: one batch already on the
        device, cudnn.benchmark)."""
        env = self.record.get("environment", {})
        settings: dict[str, Any] = {
            "": f"batch {self.batch_size} at {self.width}x{self.height}",
            "steps profiled": self.steps,
        }
        if str(env.get("device", "")).startswith("cuda"):
            bench = env.get("cudnn_benchmark")
            settings["cudnn.benchmark"] = (
                "?" if bench is None else ("on" if bench else "off")
            )
        settings["data"] = "one batch on the device, no DataLoader"
        return provenance(env, self.record.get("created"), settings)

    @property
    def kernel_efficiency(self) -> float:
        """The bound over the kernel time: how close the kernels came to the roofline,
        GPU idle time left out."""
        return self.predicted_step_s / self.kernel_s

    @property
    def predicted_total_s(self) -> float:
        return sum(layer.predicted_s for layer in self.layers)

    def by_type(self) -> list[LayerTime]:
        """Measured and predicted time summed per module type, largest measured
        first."""
        agg: dict[str, list[float]] = {}
        for layer in self.layers:
            a = agg.setdefault(layer.type, [0.0, 0.0])
            a[0] += layer.measured_s
            a[1] += layer.predicted_s
        rows = [LayerTime(t, t, m, p) for t, (m, p) in agg.items()]
        return sorted(rows, key=lambda r: -r.measured_s)


@dataclass(frozen=True)
class LoaderPoint:
    workers: int
    images_per_s: float


@dataclass(frozen=True)
class LoaderSweep:
    """DataLoader images per second by worker count
    (``ampbook.bench.loader.measure_loader``)."""

    path: str
    device_name: str
    cpu_count: int
    height: int
    width: int
    batch_size: int
    images: int
    synthetic: bool
    decode_resize_images_per_s: float
    points: tuple[LoaderPoint, ...]
    record: dict = field(repr=False, compare=False, hash=False)

    def rate(self, workers: int) -> float | None:
        return next((p.images_per_s for p in self.points if p.workers == workers), None)


def _positive(value: Any, what: str, where: str, above: bool = False) -> float:
    """A finite number >= 0 (> 0 with ``above``: a time or rate that divides)."""
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
        or (above and value == 0)
    ):
        rule = "a positive" if above else "a non-negative"
        raise ResultsError(f"{where}: {what} must be {rule} number, got {value!r}")
    return float(value)


def read_matmul(record: dict, path: str) -> MatmulSweep:
    from ampbook.bench.matmul import validate_record

    try:
        validate_record(record, path)
        for section in ("matmul", "shapes", "elementwise"):
            for i, row in enumerate(record[section]):
                _number(row["median_s"], f"{section}[{i}].median_s", path, above=True)
    except ResultsError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise ResultsError(
            f"{path}: tensor-core sweep lacks or mistypes {err}"
        ) from None
    dtypes = tuple(dict.fromkeys(r["dtype"] for r in record["matmul"]))
    return MatmulSweep(path, str(record["environment"]["device_name"]), dtypes, record)


def read_layer_profile(record: dict, path: str) -> LayerProfile:
    try:
        env = record["environment"]
        layers = tuple(
            LayerTime(
                str(x["scope"]),
                str(x["type"]),
                _positive(x["measured_s"], "measured_s", path),
                _positive(x["predicted_s"], "predicted_s", path),
            )
            for x in record["layers"]
        )
        if not layers:
            raise ResultsError(f"{path}: no layers")
        if record["time_source"] not in ("cuda", "cpu"):
            raise ResultsError(
                f"{path}: time_source must be 'cuda' or 'cpu', got "
                f"{record['time_source']!r}"
            )
        return LayerProfile(
            path=path,
            device_name=str(env["device_name"]),
            device=str(env["device"]),
            precision=_precision(record["precision"], "precision", path),
            batch_size=_count(record["batch_size"], "batch_size", path, most=2**20),
            height=_count(record["height"], "height", path, most=2**16),
            width=_count(record["width"], "width", path, most=2**16),
            time_source=record["time_source"],
            steps=_count(record["steps"], "steps", path),
            step_s=_positive(record["step_s"], "step_s", path, above=True),
            predicted_step_s=_positive(
                record["predicted_step_s"], "predicted_step_s", path, above=True
            ),
            unattributed_s=_positive(record["unattributed_s"], "unattributed_s", path),
            ceilings=str(record["ceilings"]),
            layers=layers,
            record=record,
            tf32=record.get("tf32"),
        )
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, ResultsError):
            raise
        raise ResultsError(f"{path}: layer profile lacks or mistypes {err}") from None


def read_loader(record: dict, path: str) -> LoaderSweep:
    try:
        points = tuple(
            LoaderPoint(
                _count(r["workers"], "results[].workers", path, least=0, most=4096),
                _positive(r["images_per_s"], "images_per_s", path, above=True),
            )
            for r in record["results"]
        )
        if not points:
            raise ResultsError(f"{path}: no worker counts measured")
        return LoaderSweep(
            path=path,
            device_name=str(record["environment"]["device_name"]),
            cpu_count=_count(record["cpu_count"], "cpu_count", path, most=2**16),
            height=_count(record["height"], "height", path, most=2**16),
            width=_count(record["width"], "width", path, most=2**16),
            batch_size=_count(record["batch_size"], "batch_size", path, most=2**20),
            images=_count(record["images"], "images", path),
            synthetic=bool(record["synthetic"]),
            decode_resize_images_per_s=_positive(
                record["decode_resize_images_per_s"],
                "decode_resize_images_per_s",
                path,
                above=True,
            ),
            points=points,
            record=record,
        )
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, ResultsError):
            raise
        raise ResultsError(f"{path}: loader sweep lacks or mistypes {err}") from None


# --------------------------------------------------------------------------------------
# ladders (python -m ampbook.bench ladder)
# --------------------------------------------------------------------------------------

LADDER_STATUSES = ("running", "complete")
CELL_STATUSES = ("ok", "error")


@dataclass(frozen=True)
class LadderRung:
    """One rung: what it adds to the rung before (``TrainConfig`` fields)."""

    index: int
    key: str
    title: str
    changes: dict = field(compare=False, hash=False)


@dataclass(frozen=True)
class LadderCell:
    """One rung in one mode (``MODES``): the step timed alone, profiled, and trained
    for an epoch. ``kernel_s`` is the GPU's busy time per step (the union of its
    kernels, from torch.profiler) on CUDA, the CPU operators' time on a CPU
    (``Ladder.time_source``); ``idle_s`` the rest of the step."""

    rung: int
    mode: str
    status: str
    error: str | None
    step_s: float | None
    kernel_s: float | None
    idle_s: float | None
    memory_bytes: float | None
    images_per_s: float | None
    data_wait_share: float | None
    bound_s: float | None
    record: dict = field(repr=False, compare=False, hash=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def mode_label(self) -> str:
        return MODE_LABELS[self.mode]

    @property
    def busy_share(self) -> float | None:
        """The share of the step the device was busy (kernel time over step time)."""
        if self.kernel_s is None or not self.step_s:
            return None
        return min(self.kernel_s / self.step_s, 1.0)

    @property
    def bound_share(self) -> float | None:
        """The share of the cost model's roofline bound the step reached."""
        if self.bound_s is None or not self.step_s:
            return None
        return self.bound_s / self.step_s


@dataclass(frozen=True)
class Ladder:
    """A ladder record (``ampbook.bench.ladder``; schema in data/results/README.md)."""

    path: str
    device_name: str
    device: str
    status: str
    height: int
    width: int
    batch_size: int
    time_source: str
    memory_measure: str
    rungs: tuple[LadderRung, ...]
    cells: tuple[LadderCell, ...]
    record: dict = field(repr=False, compare=False, hash=False)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def cell(self, rung: int, mode: str) -> LadderCell | None:
        """The measured (ok) cell of ``rung`` in ``mode``, or None."""
        return next(
            (c for c in self.cells if c.rung == rung and c.mode == mode and c.ok), None
        )

    def modes(self) -> list[str]:
        """The modes with at least one measured cell, in ``MODES`` order."""
        have = {c.mode for c in self.cells if c.ok}
        return [m for m in MODES if m in have]

    def rung(self, index: int) -> LadderRung:
        return next(r for r in self.rungs if r.index == index)


def _optional(value: Any, what: str, where: str) -> float | None:
    return None if value is None else _positive(value, what, where)


def read_ladder(record: dict, path: str) -> Ladder:
    """A ``Ladder`` from a ladder record; ``ResultsError`` names what is wrong."""
    try:
        env, settings = record["environment"], record["settings"]
        if record["status"] not in LADDER_STATUSES:
            raise ResultsError(
                f"{path}: status must be one of {', '.join(LADDER_STATUSES)}, got "
                f"{record['status']!r}"
            )
        if settings["time_source"] not in ("cuda", "cpu"):
            raise ResultsError(
                f"{path}: time_source must be 'cuda' or 'cpu', got "
                f"{settings['time_source']!r}"
            )
        rungs = tuple(
            LadderRung(
                _count(r["index"], "rungs[].index", path, least=0, most=1000),
                str(r["key"]),
                str(r["title"]),
                dict(r["changes"]),
            )
            for r in record["rungs"]
        )
        if not rungs:
            raise ResultsError(f"{path}: no rungs")
        indices = [r.index for r in rungs]
        if len(set(indices)) != len(indices):
            raise ResultsError(f"{path}: rung indices repeat: {indices}")
        cells, seen = [], set()
        for c in record["cells"]:
            where = f"{path}: cell rung {c.get('rung')!r} {c.get('mode')!r}"
            if c["rung"] not in indices:
                raise ResultsError(f"{where}: no such rung (rungs {indices})")
            if c["mode"] not in MODES:
                raise ResultsError(f"{where}: mode must be one of {', '.join(MODES)}")
            if c["status"] not in CELL_STATUSES:
                raise ResultsError(
                    f"{where}: status must be one of {', '.join(CELL_STATUSES)}"
                )
            if (c["rung"], c["mode"]) in seen:
                raise ResultsError(f"{where}: measured twice")
            seen.add((c["rung"], c["mode"]))
            ok = c["status"] == "ok"
            if ok and not (
                isinstance(c.get("step_s"), (int, float)) and c["step_s"] > 0
            ):
                raise ResultsError(f"{where}: step_s must be a positive number")
            if ok:
                _share(c.get("data_wait_share"), "data_wait_share", where)
                # (kernel_s may exceed it: a CPU's operator times overlap)
                for part in ("idle_s",):
                    if (
                        isinstance(c.get(part), (int, float))
                        and c[part] > c["step_s"] * PART_SLACK
                    ):
                        raise ResultsError(
                            f"{where}: {part} {c[part]!r} exceeds the step_s "
                            f"{c['step_s']!r} it is part of"
                        )
            cells.append(
                LadderCell(
                    rung=int(c["rung"]),
                    mode=str(c["mode"]),
                    status=c["status"],
                    error=c.get("error"),
                    step_s=_optional(c.get("step_s"), "step_s", where),
                    kernel_s=_optional(c.get("kernel_s"), "kernel_s", where),
                    idle_s=_optional(c.get("idle_s"), "idle_s", where),
                    memory_bytes=_optional(
                        c.get("memory_bytes"), "memory_bytes", where
                    ),
                    images_per_s=_optional(
                        c.get("images_per_s"), "images_per_s", where
                    ),
                    data_wait_share=_optional(
                        c.get("data_wait_share"), "data_wait_share", where
                    ),
                    bound_s=_optional(c.get("bound_s"), "bound_s", where),
                    record=c,
                )
            )
        return Ladder(
            path=path,
            device_name=str(env["device_name"]),
            device=str(env["device"]),
            status=record["status"],
            height=_count(settings["height"], "settings.height", path, most=2**16),
            width=_count(settings["width"], "settings.width", path, most=2**16),
            batch_size=_count(
                settings["batch_size"], "settings.batch_size", path, most=2**20
            ),
            time_source=settings["time_source"],
            memory_measure=str(settings["memory_measure"]),
            rungs=rungs,
            cells=tuple(cells),
            record=record,
        )
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        if isinstance(err, ResultsError):
            raise
        raise ResultsError(f"{path}: ladder lacks or mistypes {err}") from None


# --------------------------------------------------------------------------------------
# a folder
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ignored:
    path: str
    reason: str


@dataclass
class ResultSet:
    """Everything read from one results folder."""

    directory: str
    train_runs: list[TrainRun] = field(default_factory=list)
    matmul_sweeps: list[MatmulSweep] = field(default_factory=list)
    layer_profiles: list[LayerProfile] = field(default_factory=list)
    loader_sweeps: list[LoaderSweep] = field(default_factory=list)
    ladders: list[Ladder] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)

    def gpu_runs(self, complete_only: bool = True) -> list[TrainRun]:
        """Training runs made on CUDA (complete ones unless asked otherwise)."""
        return [
            r
            for r in self.train_runs
            if r.is_cuda and (r.complete or not complete_only)
        ]

    def pairs(self, complete_only: bool = True) -> list[RunPair]:
        """``pair_runs`` over the CUDA runs."""
        return pair_runs(self.gpu_runs(complete_only), complete_only)

    def bound_checks(self, model, devices=None) -> list[BoundCheck]:
        """``bound_checks`` of this folder's complete GPU pairs, with its layer
        profiles."""
        return bound_checks(self.pairs(), model, devices, self.layer_profiles)

    def profile_pairs(self) -> list[tuple]:
        """``profile_pairs`` of this folder's layer profiles."""
        return profile_pairs(self.layer_profiles)

    def devices(self) -> list[str]:
        """Device names that appear in any result, sorted."""
        names = {r.device_name for r in self.train_runs}
        for group in (
            self.matmul_sweeps,
            self.layer_profiles,
            self.loader_sweeps,
            self.ladders,
        ):
            names.update(x.device_name for x in group)
        return sorted(names)

    @property
    def empty(self) -> bool:
        return not (
            self.train_runs
            or self.matmul_sweeps
            or self.layer_profiles
            or self.loader_sweeps
            or self.ladders
        )

    def gpu_ladders(self) -> list[Ladder]:
        """Ladders measured on CUDA, the most complete (most measured cells) first."""
        return sorted(
            (x for x in self.ladders if x.is_cuda),
            key=lambda x: -sum(c.ok for c in x.cells),
        )


# What a results file may be: the largest committed one is a few hundred KiB, and
# none nests deeper than a handful of levels.
MAX_FILE_BYTES = 32 * 2**20
MAX_DEPTH = 32
MAX_INT_DIGITS = 24
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def parse_json(text: str, where: str) -> Any:
    """``text`` as JSON, with its nesting depth (``MAX_DEPTH``) and the digits of its
    integers (``MAX_INT_DIGITS``) checked before Python's parser sees them (which
    would raise ``RecursionError`` or ``ValueError``); ``ResultsError`` names
    ``where`` and the problem."""
    depth = deepest = 0
    for ch in re.sub(r"[^\[\]{}]", "", _JSON_STRING.sub("", text)):
        depth += 1 if ch in "[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > MAX_DEPTH:
                raise ResultsError(
                    f"{where}: nested more than {MAX_DEPTH} levels deep: no results "
                    "file is"
                )

    def parse_int(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise ResultsError(
                f"{where}: an integer of {len(digits.lstrip('-')):,} digits: no "
                "measured count is that large"
            )
        return int(digits)

    try:
        return json.loads(text, parse_int=parse_int)
    except (json.JSONDecodeError, RecursionError, ValueError) as err:
        if isinstance(err, ResultsError):
            raise
        raise ResultsError(f"{where}: not readable JSON ({err})") from None


def read_file(
    path: str | Path,
) -> TrainRun | MatmulSweep | LayerProfile | LoaderSweep | Ladder:
    """One results file, by its schema; ``ResultsError`` names the file and the
    problem."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as err:
        raise ResultsError(f"{path}: cannot be read ({err.strerror})") from None
    if size > MAX_FILE_BYTES:
        raise ResultsError(
            f"{path}: {size:,} bytes, more than a results file holds "
            f"({MAX_FILE_BYTES:,})"
        )
    try:
        record = parse_json(cli.read_text(path, "results file"), str(path))
    except cli.UserError as err:  # a FIFO, a device, unreadable, not text
        raise ResultsError(str(err)) from None
    if not isinstance(record, dict):
        raise ResultsError(f"{path}: a results file holds a JSON object")
    schema = record.get("schema")
    if schema == TRAIN_SCHEMA:
        from ampbook.train import load_results

        try:
            load_results(path)  # the runner's own schema and version check
        except ValueError as err:
            raise ResultsError(str(err)) from None
        return summarise_run(record, path)
    if schema == MATMUL_SCHEMA:
        return read_matmul(record, str(path))
    if schema == LAYER_SCHEMA:
        return read_layer_profile(record, str(path))
    if schema == LOADER_SCHEMA:
        return read_loader(record, str(path))
    if schema == LADDER_SCHEMA:
        return read_ladder(record, str(path))
    raise ResultsError(
        f"{path}: unknown schema {schema!r} (known: {', '.join(SCHEMAS)})"
    )


def load_results_dir(
    directory: str | Path | None = None, report: bool = True
) -> ResultSet:
    """Read every ``*.json`` under ``directory`` (default ``data/results``; subfolders
    too).

    A file that is not a known result, or fails its schema's checks (numbers that
    cannot be, nesting or size no results file has), goes to ``ignored`` with the
    reason, and the rest of the folder is read; so do two records of one setting
    (``_drop_repeats``). With ``report`` each skipped file is one line on stderr
    (``results: skipped PATH: why``). A folder that does not exist is an error
    (``FileNotFoundError``).
    """
    directory = Path(directory) if directory else RESULTS_DIR
    if not directory.is_dir():
        raise FileNotFoundError(
            f"results folder {directory} does not exist: give an existing "
            "folder (default data/results)"
        )
    rs = ResultSet(str(directory))
    for path in sorted(directory.rglob("*.json")):
        try:
            item = read_file(path)
        except ResultsError as err:
            rs.ignored.append(Ignored(str(path), _one_line(str(err))))
            continue
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as err:
            # a check a reader missed: still this file's fault, not the folder's
            why = f"{path}: not a readable results file ({type(err).__name__}: {err})"
            rs.ignored.append(Ignored(str(path), _one_line(why)))
            continue
        if isinstance(item, TrainRun):
            rs.train_runs.append(item)
        elif isinstance(item, MatmulSweep):
            rs.matmul_sweeps.append(item)
        elif isinstance(item, LayerProfile):
            rs.layer_profiles.append(item)
        elif isinstance(item, Ladder):
            rs.ladders.append(item)
        else:
            rs.loader_sweeps.append(item)
    _drop_repeats(rs)
    if report:
        for skipped in rs.ignored:
            why = skipped.reason
            if not why.startswith(skipped.path):
                why = f"{skipped.path}: {why}"
            print(f"results: skipped {why}", file=sys.stderr)
    return rs


def _one_line(text: str, most: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 3] + "..."


def _drop_repeats(rs: ResultSet) -> None:
    """Two complete training runs of one setting and mode, or two layer profiles of
    one GPU, size, mode and memory format, cannot both be the measurement: both go to
    ``ignored``, each naming the other (which one the book shows is not left to file
    order)."""

    def drop(items: list, key) -> list:
        groups: dict = {}
        for item in items:
            k = key(item)
            if k is not None:
                groups.setdefault(k, []).append(item)
        repeated = {id(x): g for g in groups.values() if len(g) > 1 for x in g}
        for item in items:
            if id(item) in repeated:
                others = ", ".join(x.path for x in repeated[id(item)] if x is not item)
                rs.ignored.append(
                    Ignored(
                        item.path,
                        _one_line(
                            f"{item.path} and {others} are two records of one "
                            f"setting ({item.mode}): keep one of them"
                        ),
                    )
                )
        return [x for x in items if id(x) not in repeated]

    rs.train_runs = drop(
        rs.train_runs, lambda r: (r.setting, r.mode) if r.complete else None
    )
    rs.layer_profiles = drop(
        rs.layer_profiles,
        lambda lp: (
            lp.device_name,
            lp.batch_size,
            lp.height,
            lp.width,
            lp.mode,
            bool(lp.record.get("channels_last")),
        ),
    )
