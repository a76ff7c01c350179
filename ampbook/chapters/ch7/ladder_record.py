"""The ladder's record (schema ``ampbook.ladder/1``): its file, a new record, cells
added to it as they are measured, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ampbook.chapters.ch7.rungs import COMPILE_MODE, RUNGS, LadderSpec, _now
from ampbook.core.modes import MODES
from ampbook.results import (
    LADDER_SCHEMA,
)


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
                    k: (
                        spec.compile_mode if k == "compile" and v == COMPILE_MODE else v
                    )
                    for k, v in r.changes.items()
                },
                "compiles": r.compiles,
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
