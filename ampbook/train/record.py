"""A training run's results record: the JSON file ``NAME.json`` the runner writes after
every epoch, and reads back on resume. Its schema (``ampbook.results.TRAIN_SCHEMA``,
version ``TRAIN_SCHEMA_VERSION``), field by field, is in ``data/results/README.md``;
``ampbook.results.load_results`` reads one back."""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path

import torch

from ampbook.core import cli
from ampbook.results.schema import TRAIN_SCHEMA
from ampbook.train.checkpoint import write_atomic
from ampbook.train.config import ConfigError, TrainConfig


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
        vals = [e[key] for e in epochs if e.get(key) is not None]
        return max(vals) if vals else None

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
