"""Measured results read from a folder: the one place the chapters read them from.
Every ``*.json`` under the folder is read by its ``schema`` field (``read_file``):
training runs -> ``TrainRun``, tensor-core sweeps -> ``MatmulSweep``, per-layer profiles
-> ``LayerProfile``, loader sweeps -> ``LoaderSweep``, ladders -> ``Ladder``. Any other
JSON, or a file that fails its schema's checks, is listed in ``ResultSet.ignored`` with
the reason, never silently mixed in.

One definition of each number, used by every chapter:

* **Epoch time** (``TrainRun.epoch_s``): the median ``wall_s`` (training loop) of the
  epochs after the first (of all when there is one): the first pays for warm-up (cuDNN's
  algorithm search, the allocator growing, workers starting), and the median keeps one
  disturbed epoch from moving the figure. ``step_s`` and ``data_wait_s`` are the same
  median of the time inside the step and of the time waiting for the loader.
* **Memory** (``TrainRun.memory_bytes``): on CUDA the peak of
  ``torch.cuda.max_memory_allocated`` (``"peak CUDA allocated"``); on a CPU, which has
  no allocator peak, the bytes autograd saved for backward in one step (``"saved for
  backward"``).

Runs pair (``pair_runs``) only on the same device and ``Setting`` (resolution, batch,
memory format, workers, training images, synthetic or real data): an fp32 baseline
(TF32 on and strict apart) against an AMP run. (Names imported ``as`` themselves
below are re-exported: the chapters import them from here.)
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ampbook.core import cli
from ampbook.core.modes import MODES as MODES
from ampbook.core.paths import RESULTS_DIR
from ampbook.results.schema import (
    LADDER_SCHEMA,
    LAYER_SCHEMA,
    LOADER_SCHEMA,
    MATMUL_SCHEMA,
    SCHEMAS,
    TRAIN_SCHEMA,
    TRAIN_SCHEMA_VERSION,
    ResultsError,
)
from ampbook.results.schema import MODE_LABELS as MODE_LABELS
from ampbook.results.schema import PEAK_CUDA as PEAK_CUDA
from ampbook.results.schema import SAVED_FOR_BACKWARD as SAVED_FOR_BACKWARD
from ampbook.results.schema import provenance as provenance
from ampbook.results.sweeps import (
    Ladder,
    LayerProfile,
    LoaderSweep,
    MatmulSweep,
    profile_pairs,
    read_ladder,
    read_layer_profile,
    read_loader,
    read_matmul,
)
from ampbook.results.sweeps import LadderCell as LadderCell
from ampbook.results.train_runs import (
    RunPair,
    TrainRun,
    pair_runs,
    summarise_run,
)
from ampbook.results.train_runs import Setting as Setting


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

    def gpu_runs(self) -> list[TrainRun]:
        """The complete training runs made on CUDA."""
        return [r for r in self.train_runs if r.is_cuda and r.complete]

    def pairs(self) -> list[RunPair]:
        return pair_runs(self.gpu_runs())

    def profile_pairs(self) -> list[tuple]:
        return profile_pairs(self.layer_profiles)

    def devices(self) -> list[str]:
        groups = _GROUPS.values()
        return sorted({x.device_name for kind in groups for x in getattr(self, kind)})

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
    """``text`` as JSON, its nesting depth and integers' digits checked first (Python's
    parser would raise ``RecursionError`` or ``ValueError``)."""
    depth = 0
    for ch in re.sub(r"[^\[\]{}]", "", _JSON_STRING.sub("", text)):
        depth += 1 if ch in "[{" else -1
        if depth > MAX_DEPTH:
            raise ResultsError(
                f"{where}: nested more than {MAX_DEPTH} levels deep: no results file is"
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
    """One results file, by its schema; ``ResultsError`` names file and problem."""
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
        if record.get("schema_version") != TRAIN_SCHEMA_VERSION:
            raise ResultsError(
                f"{path} has schema version {record.get('schema_version')}; this "
                f"runner reads version {TRAIN_SCHEMA_VERSION}"
            )
        return summarise_run(record, path)
    if not isinstance(schema, str) or schema not in _READERS:
        raise ResultsError(
            f"{path}: unknown schema {schema!r} (known: {', '.join(SCHEMAS)})"
        )
    return _READERS[schema](record, str(path))


_READERS = {
    MATMUL_SCHEMA: read_matmul,
    LAYER_SCHEMA: read_layer_profile,
    LOADER_SCHEMA: read_loader,
    LADDER_SCHEMA: read_ladder,
}
# Where each kind of record goes in a ResultSet.
_GROUPS = {
    TrainRun: "train_runs",
    MatmulSweep: "matmul_sweeps",
    LayerProfile: "layer_profiles",
    LoaderSweep: "loader_sweeps",
    Ladder: "ladders",
}


def load_results(path: str | Path) -> dict:
    """A training-run record (``ampbook.train``'s ``NAME.json``) read and checked."""
    run = read_file(path)
    if not isinstance(run, TrainRun):
        raise ResultsError(
            f"{path} is not a training-run record ({type(run).__name__})"
        )
    return run.record


def load_results_dir(
    directory: str | Path | ResultSet | None = None, report: bool = True
) -> ResultSet:
    """Read every ``*.json`` under ``directory`` (default ``data/results``). A file
    that is not a known result or fails its schema's checks goes to ``ignored`` with
    the reason (with ``report``, one line on stderr), and the rest is read. A
    ``ResultSet`` is returned as it is: a command reads its folder once and passes
    the set to each part that reads results."""
    if isinstance(directory, ResultSet):
        return directory
    directory = Path(directory) if directory else RESULTS_DIR
    if not directory.is_dir():
        what = "is a file, not a folder" if directory.exists() else "does not exist"
        raise FileNotFoundError(
            f"results folder {directory} {what}: give a folder of results (default "
            "data/results)"
        )
    rs = ResultSet(str(directory))
    for path in sorted(directory.rglob("*.json")):
        try:
            item = read_file(path)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as err:
            # not a ResultsError: a check a reader missed, still this file's fault
            bad = f"{path}: not a readable results file ({type(err).__name__}: {err})"
            why = str(err) if isinstance(err, ResultsError) else bad
            rs.ignored.append(Ignored(str(path), _one_line(why)))
            continue
        getattr(rs, _GROUPS[type(item)]).append(item)
    _drop_repeats(rs)
    if report:
        for x in rs.ignored:
            why = x.reason if x.reason.startswith(x.path) else f"{x.path}: {x.reason}"
            print(f"results: skipped {why}", file=sys.stderr)
    return rs


def _one_line(text: str, most: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 3] + "..."


def _drop_repeats(rs: ResultSet) -> None:
    """Two complete training runs, or layer profiles, of one setting, mode (and memory
    format) cannot both be the measurement: both go to ``ignored``, each naming the
    other (which one the book shows is not left to file order)."""

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
                why = f"{item.path} and {others} are two records of one setting"
                why += f" ({item.mode}): keep one of them"
                rs.ignored.append(Ignored(item.path, _one_line(why)))
        return [x for x in items if id(x) not in repeated]

    rs.train_runs = drop(
        rs.train_runs, lambda r: (r.setting, r.mode) if r.complete else None
    )
    rs.layer_profiles = drop(
        rs.layer_profiles,
        lambda lp: (lp.setting, lp.mode, bool(lp.record.get("channels_last"))),
    )
