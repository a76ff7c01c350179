"""What a run keeps: the checkpoint, to resume from (the states of the model,
optimizer, scheduler and scaler, and the RNG states of torch, CUDA, numpy and Python as
tensors and plain lists: it loads with ``torch.load(..., weights_only=True)``, no
pickled objects), and the results record ``NAME.json``, written after every epoch and
read back on resume. The record's schema (``ampbook.results.TRAIN_SCHEMA``, version
``TRAIN_SCHEMA_VERSION``), field by field, is in ``data/results/README.md``;
``ampbook.results.load_results`` reads one back. Both are written atomically."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import errno
import json
import math
import os
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from ampbook.core import cli
from ampbook.core.errors import first_line
from ampbook.results.schema import TRAIN_SCHEMA
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
    epoch: int,
    cfg: TrainConfig,
    started: str,
    tr: Training,
    rng: list[dict],
    records: list[dict],
) -> None:
    """Write the checkpoint after ``epoch``: the states of ``tr``, every rank's RNG
    states (``rng``) and the epoch records so far."""
    write_atomic(
        path,
        obj={
            "format": CHECKPOINT_FORMAT,
            "epoch": epoch,
            "config": json.dumps(dataclasses.asdict(cfg)),
            "started": started,
            "model": tr.net.state_dict(),
            "optimizer": tr.optimizer.state_dict(),
            "scheduler": tr.scheduler.state_dict(),
            "scaler": tr.scaler.state_dict() if tr.scaler is not None else {},
            "counters": dataclasses.asdict(tr.step.counters),
            "rng": rng,
            "records": json.dumps(clean(records)),
        },
    )


def load_checkpoint(path: Path, cfg: TrainConfig, res: Resolved) -> dict:
    """The checkpoint at ``path``, checked: this runner's, resumable with ``cfg``."""

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
            f"{first_line(err)[:200]}); start the run again with "
            "--overwrite, or choose another --name"
        ) from None


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def clean(value):
    """JSON-safe: NaN/inf -> None, tuples -> lists, paths -> str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return value


def write_results(record: dict, path: Path) -> None:
    write_atomic(path, json.dumps(clean(record), indent=1, allow_nan=False) + "\n")


def earlier_record(path: Path | None) -> dict | None:
    """The results record at ``path`` if it is one of this runner's, else None."""
    if path is None or cli.is_special(path):
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ours = isinstance(record, dict) and record.get("schema") == TRAIN_SCHEMA
    return record if ours else None


def summarize(epochs: list[dict]) -> dict:
    def mx(key):
        return max((e[key] for e in epochs if e.get(key) is not None), default=None)

    def mean(values):
        return sum(values) / len(values) if values else None

    walls = [e["wall_s"] for e in epochs]
    last = epochs[-1] if epochs else {}
    images = sum(e["images"] for e in epochs)
    return {
        "epochs_completed": len(epochs),
        "total_wall_s": sum(walls),
        "mean_epoch_wall_s": mean(walls),
        "mean_epoch_wall_s_after_first": mean(walls[1:]),
        "mean_images_per_s": images / sum(walls) if sum(walls) > 0 else None,
        "final_train_loss": last.get("train_loss"),
        "final_val_pixel_accuracy": last.get("val_pixel_accuracy"),
        "final_val_miou": last.get("val_miou"),
        "total_skipped_steps": sum(e["skipped_steps"] for e in epochs),
        "max_saved_tensor_bytes": mx("saved_tensor_bytes"),
        "max_peak_rss_bytes": mx("peak_rss_bytes"),
        "max_cuda_allocated_bytes": mx("cuda_max_allocated_bytes"),
        "max_cuda_reserved_bytes": mx("cuda_max_reserved_bytes"),
    }


def earlier_epochs(
    checkpoint: dict, json_path: Path | None, name: str
) -> tuple[list[dict], str, list[dict]]:
    """(epoch records, start time, earlier resumptions) of the run a checkpoint
    continues: the results file's records (they hold ``checkpoint_s`` and ``epoch_s``,
    which the checkpoint cannot hold for its own epoch) where they agree with the
    checkpoint's on every number ``summarize`` reads, else the checkpoint's."""
    epochs = list(checkpoint["records"])
    started = checkpoint.get("started")
    started = started if started and isinstance(started, str) else now()
    resumes: list[dict] = []
    earlier = earlier_record(json_path)
    if earlier is not None:
        check_earlier(earlier, json_path)
    if earlier is not None and earlier["name"] == name:
        written = {e["epoch"]: e for e in earlier.get("epochs") or []}
        same = "epoch steps train_loss val_loss wall_s images skipped_steps".split()
        epochs = [
            written[e["epoch"]]
            if all(written.get(e["epoch"], {}).get(k) == e.get(k) for k in same)
            else e
            for e in epochs
        ]
        started = earlier.get("started") or started
        resumes = list(earlier.get("resumed") or [])  # dicts (check_earlier)
    for e in epochs:
        e.setdefault("checkpoint_s", None)
        e.setdefault("epoch_s", None)
    return epochs, started, resumes


def check_earlier(record: dict, path: Path) -> None:
    """The fields of an earlier results file that a resumed run carries over, checked;
    ``ConfigError`` names the file and the field."""

    def bad(field: str, value, want: str) -> ConfigError:
        return ConfigError(
            f"resume: {path} field {field} is {value!r}, not {want}; the file was "
            "edited or damaged. Restore it, or delete it: the checkpoint holds the "
            "epochs"
        )

    if not isinstance(record.get("name"), str):
        raise bad("name", record.get("name"), "the run's name")
    started = record.get("started")
    if started is not None and not isinstance(started, str):
        raise bad("started", started, "an ISO time")
    resumed = record.get("resumed")
    if resumed is not None and not (
        isinstance(resumed, list) and all(isinstance(r, dict) for r in resumed)
    ):
        raise bad("resumed", resumed, "a list of resumptions")
    epochs = record.get("epochs")
    if epochs is not None and not isinstance(epochs, list):
        raise bad("epochs", epochs, "a list of epoch records")
    for i, e in enumerate(epochs or []):
        if not isinstance(e, dict):
            raise bad(f"epochs[{i}]", e, "an epoch record")
        n = e.get("epoch")
        if isinstance(n, bool) or not isinstance(n, int):
            raise bad(f"epochs[{i}].epoch", n, "an epoch number")


def epoch_line(cfg: TrainConfig, r: dict) -> str:
    parts = [
        f"epoch {r['epoch']}/{cfg.epochs} {cfg.precision}: loss {r['train_loss']:.4f}"
    ]
    if "val_pixel_accuracy" in r:
        parts.append(f"val acc {r['val_pixel_accuracy']:.3f} mIoU {r['val_miou']:.3f}")
    parts.append(
        f"{r['wall_s']:.1f} s ({r['images_per_s']:.1f} img/s, "
        f"data wait {r['data_wait_s']:.1f} s)"
    )
    if r["cuda_max_allocated_bytes"] is not None:
        parts.append(f"CUDA peak {r['cuda_max_allocated_bytes'] / 2**30:.2f} GiB")
    if r["saved_tensor_bytes"] is not None:
        parts.append(f"saved for backward {r['saved_tensor_bytes'] / 2**20:.1f} MiB")
    if r["skipped_steps"]:
        parts.append(f"{r['skipped_steps']} skipped steps")
    if r["loss_scale"] is not None:
        parts.append(f"scale {r['loss_scale']:g}")
    return ", ".join(parts)
