"""Training runs (``ampbook.train``'s records): one summarised as a ``TrainRun`` with
the book's one definition of each figure, and runs paired fp32 against AMP
(``pair_runs``). The definitions are in ``ampbook.results``' docstring."""

from __future__ import annotations

import statistics
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ampbook.results.schema import (
    MAX_COUNT,
    MIN_WALL_S,
    PART_SLACK,
    PEAK_CUDA,
    SAVED_FOR_BACKWARD,
    TRAIN_SCHEMA,
    ResultsError,
    _choice,
    _count,
    _Moded,
    _number,
    _reading,
    _Run,
    _share,
    baseline_amp_pairs,
    cudnn_benchmark,
    provenance,
)


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
class TrainRun(_Run, _Moded):
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
    def images_per_s(self) -> float:
        return self.images_per_epoch / self.epoch_s

    @property
    def data_wait_share(self) -> float:
        return self.data_wait_s / self.epoch_s

    @property
    def one_step_s(self) -> float:
        return self.step_s / self.steps_per_epoch

    def timed_epochs(self) -> list[dict]:
        """The epoch records the medians are taken over."""
        return _after_first(self.record["epochs"])

    @property
    def data_wait_range(self) -> tuple[float, float]:
        """Least and most data wait of one timed epoch (s): the loader's noise."""
        waits = [e["data_wait_s"] for e in self.timed_epochs()]
        return (min(waits), max(waits))

    @property
    def provenance(self) -> str:
        env, setting = self.record.get("environment", {}), self.setting
        layout = "channels_last" if setting.channels_last else "contiguous"
        out: dict[str, Any] = {"workers": setting.workers, "memory format": layout}
        if self.is_cuda:
            out["cudnn.benchmark"] = cudnn_benchmark(env)
        data = "synthetic" if setting.synthetic_data else "Cityscapes"
        out[""] = f"{setting.train_images} {data} images"
        return provenance(env, self.record.get("started"), out)


def _after_first(values: list) -> list:
    """All but the first (the warm-up epoch), unless there is only one."""
    return values[1:] if len(values) > 1 else values


def summarise_run(record: dict, path: str | Path | None = None) -> TrainRun:
    """A ``TrainRun`` from a record (a loaded file or ``run_training``'s return)."""
    where = str(path) if path is not None else record.get("name", "record")
    if record.get("schema") != TRAIN_SCHEMA:
        raise ResultsError(
            f"{where}: not a training-run record (schema {record.get('schema')!r})"
        )
    with _reading(where, "training-run record"):
        keys = ("config", "resolved", "summary", "environment")
        c, r, s, env = (record[key] for key in keys)
        epochs = record["epochs"]
        if not epochs:
            raise ResultsError(f"{where}: no epoch was recorded")
        _check_run_numbers(record, where)
        timed = _after_first(epochs)
        epoch_s, step_s, data_wait_s = (
            statistics.median(e[key] for e in timed)
            for key in ("wall_s", "step_s", "data_wait_s")
        )
        allocated = s.get("max_cuda_allocated_bytes")
        saved = s.get("max_saved_tensor_bytes")
        cuda = str(r["device"]).startswith("cuda")
        memory = allocated if cuda else saved
        measure = PEAK_CUDA if cuda else SAVED_FOR_BACKWARD
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
            step_s=step_s,
            data_wait_s=data_wait_s,
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


def _check_run_numbers(record: dict, where: str) -> None:
    """Times positive (they divide), counts positive integers, memory >= 0 or null."""
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
            total_steps += _count(e["steps"], f"{at}.steps", where, most=images)
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
    if isinstance(r.get("workers"), int):  # not "auto"
        _count(r["workers"], "resolved.workers", where, least=0, most=4096)
    _count(r.get("train_images"), "resolved.train_images", where)
    for key in ("cuda_allocated", "saved_tensor", "cuda_reserved"):
        if s.get(f"max_{key}_bytes") is not None:
            _number(s[f"max_{key}_bytes"], f"summary.max_{key}_bytes", where)
            _count(s[f"max_{key}_bytes"], f"summary.max_{key}_bytes", where, 0, 2**50)
    for key in ("final_val_pixel_accuracy", "final_val_miou"):
        _share(s.get(key), f"summary.{key}", where)
    if s.get("final_train_loss") is not None:
        _number(s["final_train_loss"], "summary.final_train_loss", where)
    if s.get("total_skipped_steps") is not None:
        most = total_steps or MAX_COUNT  # at most the steps recorded
        _count(s["total_skipped_steps"], "summary.total_skipped_steps", where, 0, most)
    for key in ("name", "status", "precision"):
        holder = c if key == "precision" else record
        if not isinstance(holder.get(key), str):
            raise ResultsError(f"{where}: {key} must be a string")
    _choice(c["precision"], "config.precision", where)


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
        """AMP memory over baseline memory (below 1: AMP saved memory), or None."""
        if not self.baseline.memory_bytes or self.amp.memory_bytes is None:
            return None
        return self.amp.memory_bytes / self.baseline.memory_bytes

    def _ratios(self, key: str) -> list[float]:
        pairs = zip(self.baseline.timed_epochs(), self.amp.timed_epochs())
        return [b[key] / a[key] for b, a in pairs]

    @property
    def epoch_speedups(self) -> list[float]:
        """Baseline over AMP wall time per timed epoch: the spread of ``speedup``."""
        return self._ratios("wall_s")

    @property
    def step_speedups(self) -> list[float]:
        """The same for the time inside the step: the spread of ``step_speedup``."""
        return self._ratios("step_s")

    @property
    def loader_bound(self) -> bool:
        """Either run spent at least half its loop waiting for data: its epoch time is
        the loader's, and the epoch ratio measures the loader's noise, not AMP."""
        return max(self.amp.data_wait_share, self.baseline.data_wait_share) >= 0.5

    @property
    def headline_speedup(self) -> float:
        """The speedup to show: the step's when ``loader_bound``, else the epoch's."""
        return self.step_speedup if self.loader_bound else self.speedup

    @property
    def provenance(self) -> str:
        """The AMP run's provenance line (both runs share device and setting)."""
        return self.amp.provenance


def pair_runs(runs: Iterable[TrainRun], complete_only: bool = True) -> list[RunPair]:
    """Every (fp32 baseline, AMP run) pair that shares device and setting, ordered by
    device, setting, then ``MODES``; two runs of one mode and setting are an error."""
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
    order = sorted(groups.items(), key=lambda kv: astuple(kv[0])[:7])
    return baseline_amp_pairs(dict(order), lambda b, a: RunPair(b.setting, b, a))
