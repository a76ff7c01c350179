"""The results layer's names and checks: the schema of every kind of record the book
reads (the writers, ``ampbook.train`` and ``ampbook.bench``, write with these), the
labels of the modes, ``ResultsError``, the checks a field of an untrusted file passes,
and a measurement's one-line ``provenance``."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any

from ampbook.core import cli
from ampbook.core.modes import PRECISIONS

TRAIN_SCHEMA = "ampbook.train"
TRAIN_SCHEMA_VERSION = 1  # the version the runner writes and this layer reads
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


def provenance(
    environment: dict, date: str | None = None, settings: dict[str, Any] | None = None
) -> str:
    """The one-line provenance of a measurement: device, day, torch/CUDA/cuDNN, CPU
    threads, then ``settings`` as ``key value`` pairs. Every part is escaped page text:
    a results file's strings cannot add markup to the book."""
    from ampbook.core.env import machine_text
    from ampbook.core.page import md_escape

    # (a CPU record names the CUDA its torch was built with, as it always has)
    name, soft = machine_text(environment, "unknown device", cuda_off_gpu=True)
    parts = [name]
    if date:
        parts.append(str(date)[:10])
    parts.append(", ".join(soft))
    if environment.get("cpu_threads"):
        parts.append(f"{environment['cpu_threads']} CPU threads")
    for key, value in (settings or {}).items():
        parts.append(f"{key} {value}" if key else str(value))
    return " · ".join(md_escape(part) for part in parts)


def _number(value: Any, field: str, where: str, least: float = 0.0, above=False):
    if not (_finite(value) and (value > least if above else value >= least)):
        rule = f"{'above' if above else 'at least'} {least:g}"
        raise ResultsError(f"{where}: {field} must be a number {rule}, got {value!r}")
    return value


def _finite(value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value)


# The largest count a results file may hold (images, steps, bytes, pixels): far above
# anything measured, far below what would overflow a float or a format.
MAX_COUNT = 2**53


def _count(
    value: Any, field: str, where: str, least: int = 1, most: int = MAX_COUNT
) -> int:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)  # 3.0 is the count 3; 3.5 is no count
    integer = isinstance(value, int) and not isinstance(value, bool)
    if not (integer and least <= value <= most):
        raise ResultsError(
            f"{where}: {field} must be an integer from {least} to {most:,}, got "
            f"{_short(value)}"
        )
    return value


def _short(value: Any) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def _share(value: Any, field: str, where: str):
    """A fraction in [0, 1] (accuracy, mIoU, a share of a whole), or None."""
    if value is not None and _number(value, field, where) > 1:
        raise ResultsError(
            f"{where}: {field} must be a share from 0 to 1, got {value!r}"
        )
    return value


# An epoch of even one image takes longer than this: a shorter wall time is no
# measurement (it would divide into an absurd speedup).
MIN_WALL_S = 1e-4
# Parts of a whole measured by separate clocks may overshoot it by this much.
PART_SLACK = 1.02


def _choice(value: Any, field: str, where: str, choices=PRECISIONS):
    if value not in choices:
        raise ResultsError(
            f"{where}: {field} must be one of {', '.join(map(str, choices))}, got "
            f"{_short(value)}"
        )
    return value


class _Fields:
    """The checked fields of one record; a key may be dotted (``settings.height``)."""

    def __init__(self, record: dict, where: str):
        self.record, self.where = record, where

    def __getitem__(self, key: str) -> Any:
        value = self.record
        for part in key.split("."):
            value = value[part]
        return value

    def count(self, key: str, least: int = 1, most: int = MAX_COUNT) -> int:
        return _count(self[key], key, self.where, least, most)

    def number(self, key: str, above: bool = False) -> float:
        value = self[key]
        if not _finite(value) or value < 0 or (above and value == 0):
            rule = "a positive" if above else "a non-negative"
            raise ResultsError(
                f"{self.where}: {key} must be {rule} number, got {value!r}"
            )
        return float(value)

    def optional(self, key: str) -> float | None:
        return None if self.record.get(key) is None else self.number(key)

    def choice(self, key: str, choices=PRECISIONS):
        return _choice(self[key], key, self.where, choices)


@contextmanager
def _reading(where: str, what: str):
    """A record's missing or mistyped field as ``ResultsError`` naming the file."""
    try:
        yield
    except ResultsError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise ResultsError(f"{where}: {what} lacks or mistypes {err}") from None


def baseline_amp_pairs(groups: dict, pair) -> list:
    """``pair(baseline, amp)`` for each fp32 mode (TF32 on, strict) and each AMP mode
    of each group (``{mode: record}``), groups in the order given."""
    return [
        pair(by_mode[base], by_mode[amp])
        for by_mode in groups.values()
        for base in ("fp32-tf32", "fp32")
        for amp in ("amp-fp16", "amp-bf16")
        if base in by_mode and amp in by_mode
    ]


def cudnn_benchmark(environment: dict) -> str:
    bench = environment.get("cudnn_benchmark")
    return "?" if bench is None else ("on" if bench else "off")


class _Run:
    """A record of runs on one device: training runs, ladders."""

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def complete(self) -> bool:
        return self.status == "complete"


class _Moded:
    """A record of one precision: its mode (TF32 on or not for fp32) and label."""

    @property
    def mode(self) -> str:
        return "fp32-tf32" if self.precision == "fp32" and self.tf32 else self.precision

    @property
    def mode_label(self) -> str:
        return MODE_LABELS.get(self.mode, self.mode)
