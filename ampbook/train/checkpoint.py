"""What a run keeps to be resumed: files written atomically (``write_atomic``), the RNG
states of torch, CUDA, numpy and Python as tensors and plain lists (``rng_state``), and
the checkpoint itself (``save_checkpoint``, ``load_checkpoint``, ``restore``): it loads
with ``torch.load(..., weights_only=True)``, no pickled objects."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import random
from pathlib import Path

import numpy as np
import torch

from ampbook.train.config import ConfigError, Resolved, TrainConfig, check_resumable
from ampbook.train.step import StepCounters, Training

CHECKPOINT_FORMAT = "ampbook.train.checkpoint/1"


CHECKPOINT_KEYS = (
    "format",
    "epoch",
    "config",
    "model",
    "optimizer",
    "scheduler",
    "scaler",
    "counters",
    "rng",
    "records",
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
    np.random.set_state(
        (
            n["name"],
            n["keys"].numpy().astype(np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
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
            torch.save(obj, tmp)
        else:
            tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


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

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise refuse(
            "it holds Python objects, not only tensors and plain data"
        ) from None
    except Exception as err:  # noqa: BLE001 -- what fails to parse is not a checkpoint
        raise refuse(
            f"it cannot be read as a torch.save file: {type(err).__name__}"
        ) from None
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
    if len(ckpt["rng"]) != res.world_size:
        raise ConfigError(
            f"resume: the checkpoint holds {len(ckpt['rng'])} process(es); "
            f"this run has {res.world_size}; resume with as many processes"
        )
    ckpt["epoch"], ckpt["records"] = epoch, records
    return ckpt


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
