"""Tensor-core sweeps (``ampbook.chapters.ch2.bench_matmul``), per-layer profiles
(``booktools.layers``) and DataLoader sweeps (``ampbook.chapters.ch5.bench_loader``):
their
records' checks and readers, and the pairing of layer profiles fp32 against AMP."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ampbook.results.schema import (
    MATMUL_ROW_KEYS,
    MATMUL_SCHEMA,
    MODE_LABELS,
    ResultsError,
    _count,
    _number,
    _positive,
    _precision,
    provenance,
)


@dataclass(frozen=True)
class MatmulSweep:
    """A tensor-core sweep (``ampbook.chapters.ch2.bench_matmul``); ``record`` is the
    validated
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
    """Per-module times of one training step (``booktools.layers``)."""

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
    (``ampbook.chapters.ch5.bench_loader.measure_loader``)."""

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


def validate_matmul(record: dict, source: str = "record") -> dict:
    """Check a tensor-core sweep's schema and rows; a ValueError names the file and
    what is wrong."""
    if not isinstance(record, dict):
        raise ValueError(
            f"{source}: a results record is a JSON object, got {type(record).__name__}"
        )
    if record.get("schema") != MATMUL_SCHEMA:
        raise ValueError(
            f"{source}: schema is {record.get('schema')!r}, expected {MATMUL_SCHEMA!r}"
        )
    for key in ("environment", "matmul", "shapes", "elementwise", "skipped"):
        if key not in record:
            raise ValueError(f"{source}: missing {key!r}")
    for section in ("matmul", "shapes", "elementwise"):
        for i, row in enumerate(record[section]):
            missing = [k for k in MATMUL_ROW_KEYS if k not in row]
            if section == "elementwise":
                missing += [] if "numel" in row else ["numel"]
            else:
                missing += [k for k in ("n", "m", "k") if k not in row]
            if section == "shapes" and "base" not in row:
                missing.append("base")
            if missing:
                raise ValueError(f"{source}: {section}[{i}] lacks {missing}")
            if not row["median_s"] > 0:
                raise ValueError(
                    f"{source}: {section}[{i}] has a non-positive median_s"
                )
    if "device_name" not in record["environment"]:
        raise ValueError(f"{source}: environment lacks 'device_name'")
    return record


def read_matmul(record: dict, path: str) -> MatmulSweep:
    try:
        validate_matmul(record, path)
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
