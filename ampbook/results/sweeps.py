"""The records besides training runs: tensor-core sweeps
(``ampbook.chapters.ch2.bench_matmul``), per-layer profiles (``booktools.layers``),
DataLoader sweeps (``ampbook.chapters.ch5.bench_loader``) and ladders (``python -m
ampbook.bench ladder``): their checks and readers, and the pairing of layer profiles
fp32 against AMP."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ampbook.core.modes import MODES
from ampbook.results.schema import (
    MATMUL_SCHEMA,
    MODE_LABELS,
    PART_SLACK,
    ResultsError,
    _count,
    _Fields,
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
class MatmulSweep:
    """A tensor-core sweep; ``record`` is the validated JSON."""

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


@dataclass(frozen=True)
class LayerProfile(_Moded):
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
    def setting(self) -> tuple:
        """What must match for two profiles to be compared: GPU, batch and size."""
        return (self.device_name, self.batch_size, self.height, self.width)

    @property
    def measured_total_s(self) -> float:
        """Time of a step's kernels (on CUDA the profiler's device time of every module
        and of what no module claims)."""
        return sum(layer.measured_s for layer in self.layers) + self.unattributed_s

    kernel_s = measured_total_s

    @property
    def idle_s(self) -> float:
        """The step's wall time with no kernel running (launches, host work, syncs)."""
        return max(self.step_s - self.kernel_s, 0.0)

    @property
    def provenance(self) -> str:
        env = self.record.get("environment", {})
        settings: dict[str, Any] = {
            "": f"batch {self.batch_size} at {self.width}x{self.height}",
            "steps profiled": self.steps,
        }
        if str(env.get("device", "")).startswith("cuda"):
            settings["cudnn.benchmark"] = cudnn_benchmark(env)
        settings["data"] = "one batch on the device, no DataLoader"
        return provenance(env, self.record.get("created"), settings)

    @property
    def kernel_efficiency(self) -> float:
        """The bound over the kernel time (GPU idle time left out)."""
        return self.predicted_step_s / self.kernel_s

    def by_type(self) -> list[LayerTime]:
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
    """DataLoader images per second by worker count."""

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


# The keys of every row of a tensor-core sweep, and of each section's rows besides.
_ROW_KEYS = "kind dtype median_s p10_s p90_s tflops gbps flops bytes_moved".split()
_MATMUL_SECTIONS = {
    "matmul": ["n", "m", "k"],
    "shapes": ["n", "m", "k", "base"],
    "elementwise": ["numel"],
}


def validate_matmul(record: dict, source: str = "record") -> dict:
    """Check a tensor-core sweep's schema and rows (a ValueError names the file)."""
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
    for section, keys in _MATMUL_SECTIONS.items():
        for i, row in enumerate(record[section]):
            missing = [k for k in _ROW_KEYS + keys if k not in row]
            if missing:
                raise ValueError(f"{source}: {section}[{i}] lacks {missing}")
            _number(row["median_s"], f"{section}[{i}].median_s", source, above=True)
    if "device_name" not in record["environment"]:
        raise ValueError(f"{source}: environment lacks 'device_name'")
    return record


def read_matmul(record: dict, path: str) -> MatmulSweep:
    with _reading(path, "tensor-core sweep"):
        validate_matmul(record, path)
    dtypes = tuple(dict.fromkeys(r["dtype"] for r in record["matmul"]))
    return MatmulSweep(path, str(record["environment"]["device_name"]), dtypes, record)


def read_layer_profile(record: dict, path: str) -> LayerProfile:
    f = _Fields(record, path)
    with _reading(path, "layer profile"):
        layers = tuple(
            LayerTime(
                str(x["scope"]),
                str(x["type"]),
                _Fields(x, path).number("measured_s"),
                _Fields(x, path).number("predicted_s"),
            )
            for x in record["layers"]
        )
        if not layers:
            raise ResultsError(f"{path}: no layers")
        return LayerProfile(
            path=path,
            device_name=str(f["environment.device_name"]),
            device=str(f["environment.device"]),
            precision=f.choice("precision"),
            batch_size=f.count("batch_size", most=2**20),
            height=f.count("height", most=2**16),
            width=f.count("width", most=2**16),
            time_source=f.choice("time_source", ("cuda", "cpu")),
            steps=f.count("steps"),
            step_s=f.number("step_s", above=True),
            predicted_step_s=f.number("predicted_step_s", above=True),
            unattributed_s=f.number("unattributed_s"),
            ceilings=str(record["ceilings"]),
            layers=layers,
            record=record,
            tf32=record.get("tf32"),
        )


def read_loader(record: dict, path: str) -> LoaderSweep:
    f = _Fields(record, path)
    with _reading(path, "loader sweep"):
        points = tuple(
            LoaderPoint(
                _count(r["workers"], "results[].workers", path, least=0, most=4096),
                _Fields(r, path).number("images_per_s", above=True),
            )
            for r in record["results"]
        )
        if not points:
            raise ResultsError(f"{path}: no worker counts measured")
        return LoaderSweep(
            path=path,
            device_name=str(f["environment.device_name"]),
            cpu_count=f.count("cpu_count", most=2**16),
            height=f.count("height", most=2**16),
            width=f.count("width", most=2**16),
            batch_size=f.count("batch_size", most=2**20),
            images=f.count("images"),
            synthetic=bool(record["synthetic"]),
            decode_resize_images_per_s=f.number(
                "decode_resize_images_per_s", above=True
            ),
            points=points,
            record=record,
        )


def profile_pairs(profiles: Iterable[LayerProfile]) -> list[tuple]:
    """``(baseline, amp)`` layer profiles of one ``setting``, in ``MODES`` order."""
    groups: dict[tuple, dict[str, LayerProfile]] = {}
    for lp in profiles:
        groups.setdefault(lp.setting, {})[lp.mode] = lp
    return baseline_amp_pairs(dict(sorted(groups.items())), lambda b, a: (b, a))


# --- ladders: the training step rung by rung, per mode --------------------------------


@dataclass(frozen=True)
class LadderRung:
    """One rung: what it adds to the rung before (``TrainConfig`` fields), why, and
    whether its step is compiled (``ampbook.chapters.ch7.rungs.RUNGS``)."""

    index: int
    key: str
    title: str
    changes: dict = field(compare=False, hash=False)
    why: str = ""
    compiles: bool = False


@dataclass(frozen=True)
class LadderCell:
    """One rung in one mode: the step timed alone, profiled, and trained for an epoch.
    ``kernel_s`` is the GPU's busy time per step (the union of its kernels) on CUDA,
    the CPU operators' time on a CPU (``Ladder.time_source``); ``idle_s`` the rest."""

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
class Ladder(_Run):
    """A ladder record (schema in data/results/README.md)."""

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

    def cell(self, rung: int, mode: str) -> LadderCell | None:
        return next(
            (c for c in self.cells if c.rung == rung and c.mode == mode and c.ok), None
        )

    def modes(self) -> list[str]:
        have = {c.mode for c in self.cells if c.ok}
        return [m for m in MODES if m in have]

    def rung(self, index: int) -> LadderRung:
        return next(r for r in self.rungs if r.index == index)


def _read_rungs(record: dict, path: str) -> tuple[LadderRung, ...]:
    """The record's rungs; a record without ``compiles`` (written before it was kept)
    has it from the changes: a rung compiles from the first that sets ``compile``."""
    rungs, compiles = [], False
    for r in record["rungs"]:  # in index order, as the ladder writes them
        compiles = compiles or bool(dict(r["changes"]).get("compile"))
        rungs.append(
            LadderRung(
                _count(r["index"], "rungs[].index", path, least=0, most=1000),
                str(r["key"]),
                str(r["title"]),
                dict(r["changes"]),
                str(r.get("why") or ""),
                bool(r.get("compiles", compiles)),
            )
        )
    if not rungs:
        raise ResultsError(f"{path}: no rungs")
    indices = [r.index for r in rungs]
    if len(set(indices)) != len(indices):
        raise ResultsError(f"{path}: rung indices repeat: {indices}")
    return tuple(rungs)


_CELL_NUMBERS = (
    "step_s kernel_s idle_s memory_bytes images_per_s data_wait_share bound_s".split()
)


def _read_cells(record: dict, path: str, indices: list[int]) -> tuple:
    cells, seen = [], set()
    for c in record["cells"]:
        where = f"{path}: cell rung {c.get('rung')!r} {c.get('mode')!r}"
        f = _Fields(c, where)
        if c["rung"] not in indices:
            raise ResultsError(f"{where}: no such rung (rungs {indices})")
        f.choice("mode", MODES)
        if f.choice("status", ("ok", "error")) == "ok":
            step = f.number("step_s", above=True)
            _share(c.get("data_wait_share"), "data_wait_share", where)
            # (kernel_s may exceed it: a CPU's operator times overlap)
            idle = c.get("idle_s")
            if isinstance(idle, (int, float)) and idle > step * PART_SLACK:
                raise ResultsError(
                    f"{where}: idle_s {idle!r} exceeds the step_s {step!r} it is part "
                    "of"
                )
        if (c["rung"], c["mode"]) in seen:
            raise ResultsError(f"{where}: measured twice")
        seen.add((c["rung"], c["mode"]))
        cells.append(
            LadderCell(
                rung=int(c["rung"]),
                mode=str(c["mode"]),
                status=c["status"],
                error=c.get("error"),
                **{k: f.optional(k) for k in _CELL_NUMBERS},
                record=c,
            )
        )
    return tuple(cells)


def read_ladder(record: dict, path: str) -> Ladder:
    f = _Fields(record, path)
    with _reading(path, "ladder"):
        status = f.choice("status", ("running", "complete"))
        time_source = f.choice("settings.time_source", ("cuda", "cpu"))
        rungs = _read_rungs(record, path)
        return Ladder(
            path=path,
            device_name=str(f["environment.device_name"]),
            device=str(f["environment.device"]),
            status=status,
            height=f.count("settings.height", most=2**16),
            width=f.count("settings.width", most=2**16),
            batch_size=f.count("settings.batch_size", most=2**20),
            time_source=time_source,
            memory_measure=str(f["settings.memory_measure"]),
            rungs=rungs,
            cells=_read_cells(record, path, [r.index for r in rungs]),
            record=record,
        )
