"""A training run's results record: the JSON file ``NAME.json`` the runner writes after
every epoch, and reads back on resume.

Results schema (``ampbook.results.TRAIN_SCHEMA_VERSION`` 1; also in
``data/results/README.md``; ``ampbook.results.load_results`` reads one back)
--------------------------------------------------------------------------------------
Top level: ``schema`` ("ampbook.train", ``ampbook.results.TRAIN_SCHEMA``),
``schema_version``, ``name``, ``status``
("running", "complete", "stopped: non-finite loss", "stopped: nothing learned",
"interrupted", "failed"),
``started`` (the first start; kept on resume)/``finished`` (ISO 8601 UTC), ``resumed``
(``at``, ``after_epoch``: one per resumption), ``config`` (every ``TrainConfig`` field),
``resolved`` (what the settings resolved to: ``device``, ``autocast_dtype`` (null for
fp32), ``grad_scaler``, ``data_root``, ``synthetic_data``, ``train_images``,
``val_images``, ``world_size``, ``workers``, ``cpu_cores``, ``optimizer``,
``data_cache``,
``global_batch_size``, ``memory_format``,
``class_weights`` (list or null), ``parameters``, ``warnings``, ``resumed_from_epoch``),
``environment`` (``ampbook.core.env.environment``: versions, device name, tensor cores,
TF32 and cudnn.benchmark flags, CPU flags), ``epochs`` (one record per epoch, below),
``summary``, and only in a run that stopped early ``stopped`` (``epoch``, ``message``;
for non-finite values also the run's ``optimizer_steps``, ``skipped_steps``,
``nonfinite_losses`` and ``loss_scale`` so far).

Epoch record: ``epoch`` (1-based), ``lr``, ``steps`` (batches), ``images``,
``optimizer_steps``, ``skipped_steps``, ``nonfinite_losses``, ``loss_scale`` (GradScaler
scale at the epoch's end; null without a scaler), ``train_loss`` (mean over the batches
with a finite loss), ``wall_s`` (training loop), ``step_s`` (inside the step function,
CUDA synchronised at each host read: see ``--sync-every``), ``compile_s`` (with
``--compile``: the steps that compiled, kept out of ``step_s``; else null),
``data_wait_s`` (waiting for the loader), ``images_per_s`` (images /
wall_s), ``val_s``, ``checkpoint_s``, ``epoch_s`` (all of it), ``saved_tensor_bytes``
(new bytes autograd saved for backward in the epoch's first forward pass, parameters
saved by reference not counted: ``SavedTensorMeter.new_bytes``, the book's one memory
definition), ``saved_tensor_by_dtype``, ``peak_rss_bytes`` (process peak RSS during the
epoch; lifetime peak where it cannot be reset: ``peak_rss_reset`` says which),
``load_average`` (the machine's 1-minute load average at the epoch's end: CPU times from
a busy machine are unreliable), ``cuda_max_allocated_bytes`` and
``cuda_max_reserved_bytes`` (peak of the epoch's training loop; null on CPU),
``val_loss``, ``val_pixel_accuracy``, ``val_miou``, ``val_iou`` (per class; null for a
class absent from targets and predictions).

Summary: ``epochs_completed``, ``total_wall_s``, ``mean_epoch_wall_s``,
``mean_epoch_wall_s_after_first`` (null with one epoch), ``mean_images_per_s``,
``final_train_loss``, ``final_val_pixel_accuracy``, ``final_val_miou``,
``total_skipped_steps``, ``max_saved_tensor_bytes``, ``max_peak_rss_bytes``,
``max_cuda_allocated_bytes``, ``max_cuda_reserved_bytes``.
"""

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
    return (
        record
        if isinstance(record, dict) and record.get("schema") == TRAIN_SCHEMA
        else None
    )


def summarize(epochs: list[dict]) -> dict:
    def mx(key):
        vals = [e[key] for e in epochs if e.get(key) is not None]
        return max(vals) if vals else None

    walls = [e["wall_s"] for e in epochs]
    last = epochs[-1] if epochs else {}
    return {
        "epochs_completed": len(epochs),
        "total_wall_s": sum(walls),
        "mean_epoch_wall_s": sum(walls) / len(walls) if walls else None,
        "mean_epoch_wall_s_after_first": sum(walls[1:]) / len(walls[1:])
        if len(walls) > 1
        else None,
        "mean_images_per_s": (sum(e["images"] for e in epochs) / sum(walls))
        if walls and sum(walls) > 0
        else None,
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
    continues.

    The records come from the results file as it was written (it has each epoch's
    ``checkpoint_s`` and ``epoch_s``, which the checkpoint cannot hold for its own
    epoch), where that file agrees with the checkpoint; else from the checkpoint."""
    epochs = list(checkpoint["records"])
    started = checkpoint.get("started") or now()
    if not isinstance(started, str):
        started = now()
    resumes: list[dict] = []
    earlier = earlier_record(json_path)
    if earlier is not None:
        check_earlier(earlier, json_path)
    if earlier is not None and earlier.get("name") == name:
        written = {
            e.get("epoch"): e
            for e in earlier.get("epochs") or []
            if isinstance(e, dict)
        }
        # The file's record is used only where it agrees with the checkpoint's on
        # every number summarize() reads: a hand-edited value never enters the run.
        same = (
            "epoch",
            "steps",
            "train_loss",
            "val_loss",
            "wall_s",
            "images",
            "skipped_steps",
        )
        epochs = [
            written[e["epoch"]]
            if all(written.get(e["epoch"], {}).get(k) == e.get(k) for k in same)
            else e
            for e in epochs
        ]
        started = earlier.get("started") or started
        resumes = [r for r in earlier.get("resumed") or [] if isinstance(r, dict)]
    for e in epochs:
        e.setdefault("checkpoint_s", None)
        e.setdefault("epoch_s", None)
    return epochs, started, resumes


def check_earlier(record: dict, path: Path) -> None:
    """The fields of an earlier results file that a resumed run carries over
    (``started``, ``resumed``, ``epochs``), checked; ``ConfigError`` names the file and
    the field."""

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
