"""Ladders (``python -m ampbook.bench ladder``): the training step rung by rung from
the post's setup to the optimised one, per mode; the record's rungs and cells, checked
and read."""

from __future__ import annotations

from dataclasses import dataclass, field

from ampbook.core.modes import MODES
from ampbook.results.schema import (
    MODE_LABELS,
    PART_SLACK,
    ResultsError,
    _count,
    _optional,
    _share,
)

LADDER_STATUSES = ("running", "complete")
CELL_STATUSES = ("ok", "error")


@dataclass(frozen=True)
class LadderRung:
    """One rung: what it adds to the rung before (``TrainConfig`` fields), why, and
    whether its step is compiled (``ampbook.chapters.ch7.rungs.RUNGS`` defines the
    rungs, a ladder record holds them)."""

    index: int
    key: str
    title: str
    changes: dict = field(compare=False, hash=False)
    why: str = ""
    compiles: bool = False


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
    """A ladder record (``ampbook.chapters.ch7.rungs``; schema in
    data/results/README.md)."""

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


def _check_cell(c: dict, where: str, indices: list[int]) -> None:
    if c["rung"] not in indices:
        raise ResultsError(f"{where}: no such rung (rungs {indices})")
    if c["mode"] not in MODES:
        raise ResultsError(f"{where}: mode must be one of {', '.join(MODES)}")
    if c["status"] not in CELL_STATUSES:
        raise ResultsError(f"{where}: status must be one of {', '.join(CELL_STATUSES)}")
    if c["status"] != "ok":
        return
    if not (isinstance(c.get("step_s"), (int, float)) and c["step_s"] > 0):
        raise ResultsError(f"{where}: step_s must be a positive number")
    _share(c.get("data_wait_share"), "data_wait_share", where)
    # (kernel_s may exceed it: a CPU's operator times overlap)
    idle = c.get("idle_s")
    if isinstance(idle, (int, float)) and idle > c["step_s"] * PART_SLACK:
        raise ResultsError(
            f"{where}: idle_s {idle!r} exceeds the step_s {c['step_s']!r} it is part of"
        )


def _read_cell(c: dict, where: str) -> LadderCell:
    numbers = (
        "step_s",
        "kernel_s",
        "idle_s",
        "memory_bytes",
        "images_per_s",
        "data_wait_share",
        "bound_s",
    )
    return LadderCell(
        rung=int(c["rung"]),
        mode=str(c["mode"]),
        status=c["status"],
        error=c.get("error"),
        **{k: _optional(c.get(k), k, where) for k in numbers},
        record=c,
    )


def _read_cells(record: dict, path: str, indices: list[int]) -> tuple:
    cells, seen = [], set()
    for c in record["cells"]:
        where = f"{path}: cell rung {c.get('rung')!r} {c.get('mode')!r}"
        _check_cell(c, where, indices)
        if (c["rung"], c["mode"]) in seen:
            raise ResultsError(f"{where}: measured twice")
        seen.add((c["rung"], c["mode"]))
        cells.append(_read_cell(c, where))
    return tuple(cells)


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
        rungs = _read_rungs(record, path)
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
            cells=_read_cells(record, path, [r.index for r in rungs]),
            record=record,
        )
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        if isinstance(err, ResultsError):
            raise
        raise ResultsError(f"{path}: ladder lacks or mistypes {err}") from None
