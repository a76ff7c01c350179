"""What a run keeps to be resumed: files written atomically, the RNG states of torch,
CUDA, numpy and Python as tensors and plain lists, and the checkpoint, which loads with
``torch.load(..., weights_only=True)`` (no pickled objects)."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from ampbook.core import cli
from ampbook.train.config import ConfigError, Resolved, TrainConfig, check_resumable
from ampbook.train.step import StepCounters, Training

CHECKPOINT_FORMAT = "ampbook.train.checkpoint/1"
CHECKPOINT_KEYS = tuple(
    "format epoch config model optimizer scheduler scaler counters rng records".split()
)


def rng_state() -> dict:
    np_state = np.random.get_state()
    py_state = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {
            "name": np_state[0],
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {
            "version": py_state[0],
            "state": torch.tensor(py_state[1], dtype=torch.int64),
            "gauss_next": py_state[2],
        },
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state(
        (n["name"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    p = state["python"]
    random.setstate(
        (p["version"], tuple(int(v) for v in p["state"].tolist()), p["gauss_next"])
    )


def write_atomic(path: Path, text: str | None = None, obj=None) -> None:
    """Write ``text`` (or ``torch.save`` ``obj``) to a temporary file beside ``path``,
    then ``os.replace`` it: a reader never sees a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if obj is not None:
            try:
                torch.save(obj, tmp)
            except RuntimeError as err:  # torch's writer: no errno, often a full disk
                raise _write_failed(err, tmp, path) from None
        else:
            tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _write_failed(err: RuntimeError, tmp: Path, path: Path) -> OSError:
    """torch.save's ``RuntimeError`` as the ``OSError`` it stands for: ENOSPC when the
    disk is (nearly) full, else EIO."""
    try:
        written = tmp.stat().st_size if tmp.exists() else 0
        free = shutil.disk_usage(tmp.parent).free
    except OSError:
        written, free = 0, 0
    full = free <= max(written, 1 << 20)
    code = errno.ENOSPC if full else errno.EIO
    why = os.strerror(code) if full else f"write failed ({str(err).splitlines()[0]})"
    return OSError(code, why, str(path))


def save_checkpoint(
    path: Path,
    *,
    epoch: int,
    config: dict,
    started: str,
    tr: Training,
    rng: list[dict],
    records: str,
) -> None:
    """Write the checkpoint after ``epoch``: the states of ``tr``, every rank's RNG
    states (``rng``) and the epoch records so far (``records``, as JSON text)."""
    write_atomic(
        path,
        obj={
            "format": CHECKPOINT_FORMAT,
            "epoch": epoch,
            "config": json.dumps(config),
            "started": started,
            "model": tr.net.state_dict(),
            "optimizer": tr.optimizer.state_dict(),
            "scheduler": tr.scheduler.state_dict(),
            "scaler": tr.scaler.state_dict() if tr.scaler is not None else {},
            "counters": dataclasses.asdict(tr.step.counters),
            "rng": rng,
            "records": records,
        },
    )


def load_checkpoint(path: Path, cfg: TrainConfig, res: Resolved) -> dict:
    """The checkpoint at ``path``, checked to be this runner's and resumable with
    ``cfg``."""

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"resume: {path} is not a checkpoint of this runner ({why}); --resume "
            "needs the NAME.ckpt that python -m ampbook.train wrote. Start the run "
            "again with --overwrite, or choose another --name"
        )

    if cli.is_special(path):
        raise refuse("it is not a regular file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise refuse(
            "it holds Python objects, not only tensors and plain data"
        ) from None
    except Exception as err:  # noqa: BLE001 -- what fails to parse is not a checkpoint
        why = f"it cannot be read as a torch.save file: {type(err).__name__}"
        raise refuse(why) from None
    if not isinstance(ckpt, dict):
        raise refuse(f"it holds a {type(ckpt).__name__}")
    if ckpt.get("format") != CHECKPOINT_FORMAT:
        raise refuse(f"format {ckpt.get('format')!r}")
    missing = [k for k in CHECKPOINT_KEYS if k not in ckpt]
    if missing:
        raise refuse(f"no {', '.join(missing)}")
    try:
        saved = json.loads(ckpt["config"])
        records = json.loads(ckpt["records"])
        epoch = int(ckpt["epoch"])
        assert isinstance(saved, dict) and isinstance(records, list)
        assert isinstance(ckpt["rng"], list)
    except (TypeError, ValueError, AssertionError):
        raise refuse("its config, records, epoch or RNG states are malformed") from None
    check_resumable(saved, cfg)
    _check_epochs(path, ckpt["epoch"], epoch, records, cfg)
    if len(ckpt["rng"]) != res.world_size:
        raise ConfigError(
            f"resume: the checkpoint holds {len(ckpt['rng'])} process(es); "
            f"this run has {res.world_size}; resume with as many processes"
        )
    ckpt["epoch"], ckpt["records"] = epoch, records
    return ckpt


def _check_epochs(path: Path, raw, epoch: int, records: list, cfg: TrainConfig) -> None:
    """The checkpoint's epoch N (1 <= N <= the run's epochs) comes after records of
    epochs 1..N, each with the fields a resumed record needs."""

    def bad(field: str, why: str) -> ConfigError:
        return ConfigError(
            f"resume: {path} field {field} {why}; the file was changed or damaged. "
            "Start the run again with --overwrite, or choose another --name"
        )

    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= epoch:
        raise bad("epoch", f"is {raw!r}, not an epoch number (1 or more)")
    if epoch > cfg.epochs:
        raise bad("epoch", f"is {epoch}, beyond the run's {cfg.epochs} epochs")
    numbers = [r.get("epoch") if isinstance(r, dict) else None for r in records]
    if numbers != list(range(1, epoch + 1)):
        raise bad(
            "records",
            f"lists epochs {numbers}, but a checkpoint after epoch {epoch} holds "
            f"epochs 1 to {epoch}",
        )
    for i, r in enumerate(records):
        for key in ("wall_s", "steps", "images", "skipped_steps"):
            value = r.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise bad(f"records[{i}].{key}", f"is {value!r}, not a number")


def restore(ckpt: dict, path: Path, tr: Training, rank: int) -> None:
    """Load a checkpoint's states into ``tr`` and this rank's RNGs; ``ConfigError`` when
    they do not fit the run."""
    try:
        tr.net.load_state_dict(ckpt["model"])
        tr.optimizer.load_state_dict(ckpt["optimizer"])
        tr.scheduler.load_state_dict(ckpt["scheduler"])
        if tr.scaler is not None:
            tr.scaler.load_state_dict(ckpt["scaler"])
        tr.step.counters = StepCounters(**ckpt["counters"])
        set_rng_state(ckpt["rng"][rank])
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as err:
        raise ConfigError(
            f"resume: {path} does not fit this run ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200]}); start the run again with "
            "--overwrite, or choose another --name"
        ) from None
