"""The run (``run_training``): data, epochs, validation, checkpoints, the record."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import random
import sys
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ampbook.core import cli
from ampbook.core import env as _env
from ampbook.core.precision import backend_flags
from ampbook.measure.memory import SavedTensorMeter, peak_rss_bytes, reset_peak_rss
from ampbook.measure.timing import default_sync, machine_load
from ampbook.results.schema import TRAIN_SCHEMA, TRAIN_SCHEMA_VERSION
from ampbook.train.checkpoint import (
    clean,
    earlier_epochs,
    epoch_line,
    load_checkpoint,
    now,
    restore,
    rng_state,
    save_checkpoint,
    summarize,
    write_atomic,
    write_results,
)
from ampbook.train.config import (
    ConfigError,
    Interrupted,
    NonFiniteLossError,
    Resolved,
    TrainConfig,
    TrainError,
    local_processes,
    resume_command,
    run_name,
    validate,
)
from ampbook.train.outdir import (
    check_predictions_folder,
    discard_replaced,
    output_folder,
)
from ampbook.train.step import (
    Training,
    TrainStep,
    build_training,
    optimizer_impl,
)

COUNTS = ("optimizer_steps", "skipped_steps", "nonfinite_losses")  # a record's steps


def resolve_data(cfg: TrainConfig, res: Resolved) -> tuple[Path, bool]:
    """(root, synthetic?): ``cfg.data_root``, else $CITYSCAPES_DATASET, else the
    synthetic set, drawn at twice the training size."""
    from ampbook.segmentation.cityscapes import resolve_root
    from ampbook.segmentation.synthetic import synthetic_root

    if cfg.data_root or os.environ.get("CITYSCAPES_DATASET"):
        try:
            return resolve_root(cfg.data_root), False
        except FileNotFoundError as err:
            raise ConfigError(str(err)) from None
    args = (cfg.synthetic_train, cfg.synthetic_val, 2 * cfg.height, 2 * cfg.width)
    ddp = res.world_size > 1 and dist.is_initialized()
    if ddp and res.rank:  # rank 0 draws the set, the others wait and find it
        dist.barrier()
    root = synthetic_root(*args)
    if ddp and not res.rank:
        dist.barrier()
    return root, True


def enet_class_weights(dataset, workers: int = 0, batch_size: int = 8) -> list[float]:
    """ENet's class weights ``1 / ln(1.02 + p_c)`` from the labels of ``dataset``,
    cached by root, split, size and file count."""
    from ampbook.core.paths import cache_dir
    from ampbook.segmentation.cityscapes import NUM_CLASSES

    size = f"{dataset.height}x{dataset.width}"
    key = f"{Path(dataset.root).resolve()}|{dataset.split}|{size}|{len(dataset)}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    path = cache_dir() / "class-weights" / f"{digest}.json"
    cached = _cached_weights(path, key, NUM_CLASSES)
    if cached is not None:
        return cached
    counts = torch.zeros(NUM_CLASSES, dtype=torch.float64)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, num_workers=workers
    )
    for _, labels in loader:
        valid = labels[labels < NUM_CLASSES]
        counts += torch.bincount(valid.reshape(-1), minlength=NUM_CLASSES).double()
    share = counts / counts.sum().clamp(min=1)
    weights = [float(w) for w in 1.0 / torch.log(1.02 + share)]
    write_atomic(
        path, json.dumps({"key": key, "counts": counts.tolist(), "weights": weights})
    )
    return weights


def _cached_weights(path: Path, key: str, classes: int) -> list[float] | None:
    """The class weights cached at ``path`` for ``key``, else None (compute them)."""
    if not path.exists() or cli.is_special(path):
        return None
    try:
        cached = json.loads(path.read_text())
        weights = [float(w) for w in cached["weights"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    fit = len(weights) == classes and all(math.isfinite(w) and w > 0 for w in weights)
    return weights if fit and cached.get("key") == key else None


@torch.no_grad()
def evaluate(
    net: nn.Module, loader, step: TrainStep, save_to: Path | None = None
) -> dict:
    """Val loss, pixel accuracy, mIoU and per-class IoU of ``net`` under the run's
    autocast; with ``save_to``, also writes the predictions."""
    from ampbook.segmentation.metrics import SegmentationMetrics, save_predictions

    net.eval()
    metrics = SegmentationMetrics(device=step.device)
    total, index = 0.0, 0
    for images, labels in loader:
        images = images.to(step.device, non_blocking=True)
        labels = labels.to(step.device, non_blocking=True)
        if step.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with step.autocast():
            logits = net(images)
            loss = step.criterion(logits, labels)
        pred = logits.argmax(dim=1)
        metrics.update(pred, labels)
        total += float(loss)
        if save_to is not None:
            pairs = loader.dataset.pairs[index : index + len(pred)]
            save_predictions(logits, pairs, save_to)
        index += len(pred)
    net.train()
    m = metrics.compute()
    return {
        "val_loss": total / max(len(loader), 1),
        "val_pixel_accuracy": m["pixel_accuracy"],
        "val_miou": m["miou"],
        "val_iou": m["iou"],
    }


class _Tally:
    """What an epoch's steps add up to."""

    images = steps = 0
    data_wait = step_time = compile_time = 0.0
    saved: SavedTensorMeter | None = None


def _steps(cfg: TrainConfig, step: TrainStep, loader, bar, sync, start) -> _Tally:
    """Run the epoch's steps, timing the wait for each batch, the steps and the steps
    that compiled apart."""
    n = _Tally()
    if cfg.compile:  # frames compiled so far (a step's backward compiles in the step)
        from torch._dynamo.utils import counters
    t0 = time.perf_counter()
    for x, y in loader:
        t1 = time.perf_counter()
        meter = SavedTensorMeter() if n.steps == 0 else None
        frames = counters["frames"]["total"] if cfg.compile else 0
        value = step(x, y, meter=meter)
        if step.synced:  # the clock stops after the device's work
            sync()
        t2 = time.perf_counter()
        if meter is not None:
            n.saved = meter
        n.data_wait += t1 - t0
        if cfg.compile and counters["frames"]["total"] > frames:
            n.compile_time += t2 - t1  # a step that compiled: timed apart
        else:
            n.step_time += t2 - t1
        n.steps += 1
        n.images += len(x)
        bar.update(1)
        if value is not None:
            bar.set_postfix(loss=f"{value:.4f}", img_s=f"{n.images / (t2 - start):.1f}")
        t0 = time.perf_counter()
    t1 = time.perf_counter()
    step.sync()  # what the last host sync left on the device
    sync()
    n.step_time += time.perf_counter() - t1
    return n


def train_epoch(
    epoch: int, cfg: TrainConfig, res: Resolved, tr: Training, loader
) -> dict:
    """Train one epoch; returns its record (timings, memory, loss, step counters)."""
    from tqdm.auto import tqdm

    device, step = res.device, tr.step
    before = dataclasses.replace(step.counters)
    tr.model.train()
    cuda = device.type == "cuda"  # a GPU's peak memory
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    rss_reset = reset_peak_rss()
    lr = tr.optimizer.param_groups[0]["lr"]
    shown = cfg.progress if cfg.progress is not None else sys.stderr.isatty()
    bar = tqdm(
        total=len(loader),
        desc=f"epoch {epoch}/{cfg.epochs} {cfg.precision}",
        unit="batch",
        leave=False,
        disable=not shown or cfg.quiet or res.rank != 0,
        dynamic_ncols=True,
    )
    sync = default_sync(device)
    step.begin_epoch(len(loader))
    sync()
    start = time.perf_counter()
    try:  # a stopped epoch (Ctrl-C, a bad file) clears its bar before the error line
        n = _steps(cfg, step, loader, bar, sync, start)
    finally:
        bar.close()
    losses = [v for v in step.take_losses() if math.isfinite(v)]
    wall = time.perf_counter() - start
    c, saved, images = step.counters, n.saved, n.images * res.world_size
    return {
        "epoch": epoch,
        "lr": lr,
        "steps": n.steps,
        "images": images,
        **{k: getattr(c, k) - getattr(before, k) for k in COUNTS},
        "loss_scale": tr.scaler.get_scale() if tr.scaler is not None else None,
        "train_loss": _mean_loss(losses, res),
        "wall_s": wall,
        "step_s": n.step_time,
        "compile_s": n.compile_time if cfg.compile else None,
        "data_wait_s": n.data_wait,
        "images_per_s": images / wall if wall > 0 else None,
        "saved_tensor_bytes": saved.new_bytes if saved is not None else None,
        "saved_tensor_by_dtype": dict(saved.by_dtype) if saved is not None else None,
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_rss_reset": rss_reset,
        "load_average": machine_load()["load1"],
        "cuda_max_allocated_bytes": (
            torch.cuda.max_memory_allocated(device) if cuda else None
        ),
        "cuda_max_reserved_bytes": (
            torch.cuda.max_memory_reserved(device) if cuda else None
        ),
    }


def _mean_loss(losses: list[float], res: Resolved) -> float:
    """The epoch's mean loss, over all ranks' batches."""
    if res.world_size == 1:
        return sum(losses) / len(losses) if losses else float("nan")
    device = res.device if res.device.type == "cuda" else "cpu"
    t = torch.tensor([sum(losses), len(losses)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t[0] / t[1]) if t[1] > 0 else float("nan")


def _say(cfg: TrainConfig, res: Resolved, text: str) -> None:
    if not cfg.quiet and res.rank == 0:
        print(text, flush=True)


def run_training(cfg: TrainConfig) -> dict:
    """Train as ``cfg`` says; returns the results record (``data/results/README.md``),
    also written to ``cfg.out/NAME.json`` when ``cfg.out`` is set (rank 0)."""
    res = validate(cfg)
    own_group = res.world_size > 1 and not dist.is_initialized()
    if own_group:
        if res.device.type == "cuda":
            torch.cuda.set_device(res.device)
        dist.init_process_group("nccl" if res.device.type == "cuda" else "gloo")
    flags = dict(tf32=cfg.tf32 == "on", cudnn_benchmark=cfg.cudnn_benchmark)
    name, out = run_name(cfg), Path(cfg.out) if cfg.out else None
    try:
        with (
            backend_flags(**flags, deterministic=cfg.deterministic or None),
            contextlib.ExitStack() as stack,
        ):
            if res.rank == 0:
                if out is not None:
                    stack.enter_context(output_folder(cfg, out, name))
                check_predictions_folder(cfg, name)
            try:
                return _train(cfg, res, name, out)
            except KeyboardInterrupt:
                raise Interrupted(
                    "interrupted before the first epoch finished; nothing was saved"
                ) from None
    finally:
        if own_group:
            dist.destroy_process_group()


def _first_line(err: BaseException) -> str:
    """An exception's message; for one re-raised from a DataLoader worker, the
    original's (its last line), not the worker's traceback."""
    text = str(err)
    if text.startswith("Caught ") and "Original Traceback" in text:
        last = text.strip().splitlines()[-1]
        return last.split(": ", 1)[1] if ": " in last else last
    return text


def _data_cache(cfg: TrainConfig, res: Resolved, train_ds, val_ds):
    """(train cache, val cache, what to record) for ``--data-cache host|device``
    (checked to fit before decoding), None for ``none``."""
    from ampbook.segmentation.cityscapes import (
        DecodedCache,
        check_cache_fits,
        decoded_bytes,
    )

    if cfg.data_cache == "none":
        return None
    memory = res.device if cfg.data_cache == "device" else torch.device("cpu")
    images = len(train_ds) + len(val_ds)
    try:
        need = check_cache_fits(
            decoded_bytes(images, cfg.height, cfg.width),
            memory,
            copies=local_processes() if memory.type == "cpu" else 1,
        )
    except ValueError as err:
        raise ConfigError(f"data_cache {cfg.data_cache}: {err}") from None
    what = f"data cache: decoding {images} images once"
    size = f"({need / 2**20:.1f} MiB, {res.workers} workers)"
    _say(cfg, res, f"{what} into {memory} memory {size}")
    start = time.perf_counter()
    train = DecodedCache.build(train_ds, memory, res.workers)
    val = DecodedCache.build(val_ds, memory, res.workers)
    info = {
        "memory": str(memory),
        "bytes": train.nbytes + val.nbytes,
        "images": images,
        "workers": res.workers,
        "build_s": time.perf_counter() - start,
    }
    return train, val, info


@dataclasses.dataclass
class _Run:
    """One run's state, shared by the steps of ``_train``."""

    cfg: TrainConfig
    res: Resolved
    name: str
    out: Path | None
    tr: Training | None = None
    record: dict = dataclasses.field(default_factory=dict)
    epochs: list[dict] = dataclasses.field(default_factory=list)
    start_epoch: int = 1
    epoch: int = 1
    started: str = ""

    @property
    def json_path(self) -> Path | None:
        return self.out / f"{self.name}.json" if self.out else None

    @property
    def ckpt_path(self) -> Path | None:
        return self.out / f"{self.name}.ckpt" if self.out else None

    @property
    def writer(self) -> bool:
        return self.res.rank == 0

    def kept(self, checkpoint: bool = True) -> str:
        """What a stopped run leaves on disk, and how to go on."""
        if self.json_path is None:
            return "nothing was saved (no --out)"
        if not self.epochs:
            return "nothing was saved (no epoch finished)"
        n = len(self.epochs)
        done = "epoch 1" if n == 1 else f"epochs 1-{n}"
        if checkpoint and self.ckpt_path.exists():
            return (
                f"{self.ckpt_path} and {self.json_path} hold {done}; continue with: "
                f"{resume_command(self.cfg)}"
            )
        return f"{self.json_path} holds {done} (nothing to resume from)"

    def stop(self, status: str, message: str, **extra) -> None:
        """Record why the run stopped (rank 0, when there is a results file to keep)."""
        stopped = {"epoch": self.epoch, "message": message, **extra}
        self.record.update(status=status, stopped=stopped, finished=now())
        keep = self.epochs or status.startswith("stopped")
        if self.writer and self.json_path is not None and keep:
            with contextlib.suppress(OSError):
                write_results(self.record, self.json_path)


class _Data(NamedTuple):
    root: Path
    synthetic: bool
    train: object  # the datasets
    val: object
    caches: tuple | None  # _data_cache's
    weights: list[float] | None


def _open_data(cfg: TrainConfig, res: Resolved) -> _Data:
    """The datasets (checked), their decoded caches and the class weights."""
    from ampbook.segmentation.cityscapes import Cityscapes, DataError, check_headers

    try:
        root, synthetic = resolve_data(cfg, res)
        train_ds = Cityscapes(root, "train", cfg.height, cfg.width, flip=cfg.flip)
        val_ds = Cityscapes(root, "val", cfg.height, cfg.width)
        check_headers(train_ds.pairs + val_ds.pairs)
    except (FileNotFoundError, ValueError) as err:  # DataError is a ValueError
        raise ConfigError(f"data: {err}") from None
    per = -(-len(train_ds) // res.world_size)  # DistributedSampler: a shard, rounded up
    if cfg.batch_size > per:
        shard = (
            f" per process ({res.world_size} processes)" if res.world_size > 1 else ""
        )
        raise ConfigError(
            f"batch_size {cfg.batch_size} is more than the {per} training images"
            f"{shard}: use --batch-size {per} or less, or more training images"
        )
    kind = "SYNTHETIC Cityscapes (no Cityscapes root given)"
    sizes = f"{len(train_ds)} train / {len(val_ds)} val images"
    where = f"data: {kind if synthetic else 'Cityscapes'} at {root}: {sizes}"
    _say(cfg, res, f"{where}, trained at {cfg.width}x{cfg.height} (W x H)")
    try:
        caches = _data_cache(cfg, res, train_ds, val_ds)
        enet = cfg.class_weights == "enet"
        weights = enet_class_weights(train_ds, res.workers) if enet else None
    except DataError as err:
        raise ConfigError(f"data: {_first_line(err)}") from None
    return _Data(root, synthetic, train_ds, val_ds, caches, weights)


def _loaders(cfg: TrainConfig, res: Resolved, data: _Data) -> tuple:
    """(sampler, its generator, the training and validation loaders): from the decoded
    caches, or DataLoaders."""
    from ampbook.segmentation.cityscapes import CachedLoader

    sampler = torch.utils.data.DistributedSampler(
        data.train, res.world_size, res.rank, shuffle=cfg.shuffle, seed=cfg.seed
    )
    gen = torch.Generator()
    if data.caches is not None:  # batches from memory: no workers
        train_cache, val_cache, _ = data.caches
        train = CachedLoader(
            train_cache, cfg.batch_size, res.device, sampler=sampler, flip=cfg.flip
        )
        val = CachedLoader(val_cache, cfg.batch_size, res.device)
    else:
        pin = res.device.type == "cuda"
        load = dict(batch_size=cfg.batch_size, num_workers=res.workers, pin_memory=pin)
        train = torch.utils.data.DataLoader(
            data.train, sampler=sampler, generator=gen, **load
        )
        val = torch.utils.data.DataLoader(  # leaves torch's global generator alone
            data.val, shuffle=False, generator=torch.Generator(), **load
        )
    if cfg.accumulate > len(train):
        per = f" per process ({res.world_size} processes)" if res.world_size > 1 else ""
        raise ConfigError(
            f"accumulate {cfg.accumulate} is more than the {len(train)} "
            f"batches of an epoch{per} ({len(data.train)} images, batch size "
            f"{cfg.batch_size}): no window would ever be full; use --accumulate "
            f"{len(train)} or less"
        )
    return sampler, gen, train, val


def _begin(run: _Run, checkpoint, data: _Data) -> None:
    """Restore a checkpoint's epochs, then make the run's record and say what runs."""
    cfg, res, tr = run.cfg, run.res, run.tr
    run.started = now()
    resumes: list[dict] = []
    if checkpoint is not None:
        restore(checkpoint, run.ckpt_path, tr, res.rank)
        run.epochs, run.started, resumes = earlier_epochs(
            checkpoint, run.json_path, run.name
        )
        run.start_epoch = checkpoint["epoch"] + 1
        resumes.append({"at": now(), "after_epoch": checkpoint["epoch"]})
        after = f"after epoch {checkpoint['epoch']}"
        _say(cfg, res, f"resumed {run.name} from {run.ckpt_path} {after}")
    run.epoch = run.start_epoch
    fmt = "channels_last" if cfg.channels_last else "contiguous"
    environment = {**_env.environment(res.device), "memory_format": fmt}
    run.record = {
        "schema": TRAIN_SCHEMA,
        "schema_version": TRAIN_SCHEMA_VERSION,
        "name": run.name,
        "status": "running",
        "started": run.started,
        "finished": None,
        "resumed": resumes,
        "config": dataclasses.asdict(cfg),
        "resolved": {
            "device": str(res.device),
            "autocast_dtype": res.autocast_dtype,
            "grad_scaler": res.grad_scaler,
            "data_root": str(data.root),
            "synthetic_data": data.synthetic,
            "train_images": len(data.train),
            "val_images": len(data.val),
            "world_size": res.world_size,
            "workers": 0 if data.caches else res.workers,  # a cache: no workers
            "cpu_cores": res.cpu_cores,
            "optimizer": optimizer_impl(tr.optimizer),
            "data_cache": data.caches[2] if data.caches else None,
            "global_batch_size": cfg.batch_size * res.world_size * cfg.accumulate,
            "memory_format": fmt,
            "class_weights": data.weights,
            "parameters": sum(p.numel() for p in tr.net.parameters()),
            "warnings": res.warnings,
            "resumed_from_epoch": (
                run.start_epoch - 1 if checkpoint is not None else None
            ),
        },
        "environment": environment,
        "epochs": run.epochs,
        "summary": summarize(run.epochs),
    }
    on = f"{cfg.precision} on {environment['device_name']} ({res.device})"
    ddp = f" x {res.world_size} processes" if res.world_size > 1 else ""
    to = f", results -> {run.json_path}" if run.json_path else ""
    size = f"{cfg.epochs} epochs, batch {cfg.batch_size}{ddp}"
    _say(cfg, res, f"run {run.name}: {on}, {size}{to}")


def _train(cfg: TrainConfig, res: Resolved, name: str, out: Path | None) -> dict:
    from ampbook.segmentation.cityscapes import DataError

    run = _Run(cfg, res, name, out)
    for note in res.warnings:
        _say(cfg, res, f"note: {note}")
    checkpoint = load_checkpoint(run.ckpt_path, cfg, res) if cfg.resume else None
    data = _open_data(cfg, res)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    run.tr = build_training(cfg, res, data.weights)
    if res.rank:  # different dropout masks on each rank (the weights: the same seed)
        torch.manual_seed(cfg.seed + 1_000_003 * res.rank)
    loaders = _loaders(cfg, res, data)
    _begin(run, checkpoint, data)
    try:
        _epochs(run, loaders)
    except (KeyboardInterrupt, RuntimeError, OSError, DataError, NothingLearned) as err:
        _stopped(run, err)
    return clean(run.record)


def _epochs(run: _Run, loaders: tuple) -> None:
    """Each epoch left: train, validate, checkpoint, record; then the run is done."""
    cfg, res, tr = run.cfg, run.res, run.tr
    save_dir = Path(cfg.save_predictions) if cfg.save_predictions else None
    sampler, generator, train, val = loaders
    for epoch in range(run.start_epoch, cfg.epochs + 1):
        run.epoch = epoch
        sampler.set_epoch(epoch)
        generator.manual_seed(cfg.seed * 1_000_003 + epoch)
        rec = train_epoch(epoch, cfg, res, tr, train)
        with warnings.catch_warnings():  # an epoch whose steps all skipped is fine
            warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step")
            tr.scheduler.step()
        t = time.perf_counter()
        if run.writer:
            last = epoch == cfg.epochs
            rec.update(evaluate(tr.net, val, tr.step, save_dir if last else None))
        rec["val_s"] = time.perf_counter() - t
        _end_epoch(run, rec)
    if save_dir is not None and run.writer and run.start_epoch > cfg.epochs:
        evaluate(tr.net, val, tr.step, save_dir)  # resumed after the last epoch
    run.record.update(status="complete", finished=now(), summary=summarize(run.epochs))
    if run.writer and run.json_path is not None:
        write_results(run.record, run.json_path)
        run.record["json_path"] = str(run.json_path)


def _end_epoch(run: _Run, rec: dict) -> None:
    """Checkpoint and record a validated epoch, print its line; ``NothingLearned``
    when it learned nothing (on any process)."""
    cfg, res, tr = run.cfg, run.res, run.tr
    if res.world_size > 1:
        dist.barrier()
    t = time.perf_counter()
    rng = [rng_state()]
    if res.world_size > 1:
        rng = [None] * res.world_size
        dist.all_gather_object(rng, rng_state())
    if run.writer and run.ckpt_path is not None and cfg.checkpoint:
        records = run.epochs + [rec]
        save_checkpoint(run.ckpt_path, run.epoch, cfg, run.started, tr, rng, records)
    run.epochs.append(rec)
    rec["checkpoint_s"] = time.perf_counter() - t
    rec["epoch_s"] = rec["wall_s"] + rec["val_s"] + rec["checkpoint_s"]
    run.record["summary"] = summarize(run.epochs)
    if run.writer and run.json_path is not None:
        write_results(run.record, run.json_path)
        if cfg.overwrite:  # the first record is written: the old files go
            discard_replaced(run.out, run.name)
    _say(cfg, res, epoch_line(cfg, rec))
    why = learned_nothing(rec)
    if res.world_size > 1:  # every process stops, or none
        flag = torch.tensor([1.0 if why else 0.0], device=res.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() and not why:
            why = "another process's epoch learned nothing"
    if why:
        raise NothingLearned(why)


def _stopped(run: _Run, err: BaseException) -> None:
    """Record why the epochs stopped and raise the error the command reports (``err``
    itself where it is not the run's to explain)."""
    from ampbook.segmentation.cityscapes import DataError

    epoch = run.epoch
    if isinstance(err, NothingLearned):
        why = str(err)
        finite = all(bool(torch.isfinite(p).all()) for p in run.tr.net.parameters())
        if not finite:  # NaN weights (a resume from a run that broke)
            why = (
                f"epoch {epoch} learned nothing: the model's weights are not finite "
                "(NaN or inf), so every loss is NaN and no later epoch can learn; "
                "start the run again with --overwrite rather than resuming it"
            )
        run.stop("stopped: nothing learned", why)
        raise TrainError(
            f"{why}. The run stopped after epoch {epoch}; {run.kept(checkpoint=finite)}"
        ) from None
    if isinstance(err, NonFiniteLossError):
        c, scaler = run.tr.step.counters, run.tr.scaler
        counts = {k: getattr(c, k) for k in COUNTS}
        scale = scaler.get_scale() if scaler is not None else None
        run.stop("stopped: non-finite loss", str(err), **counts, loss_scale=scale)
        raise
    if isinstance(err, KeyboardInterrupt):
        how = "SIGTERM" if cli.terminated() else "SIGINT"
        run.stop("interrupted", f"interrupted ({how})")
        raise Interrupted(f"interrupted in epoch {epoch}; {run.kept()}") from None
    advice, compiling = "", run.cfg.compile
    if compiling:
        from torch._dynamo.exc import TorchDynamoException
    if compiling and isinstance(err, TorchDynamoException):  # a failure to compile
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        why = f"torch.compile ({compiling}) failed: {type(err).__name__}: {first}"
        advice = "Run without --compile (or with --compile aot_eager, which generates "
        advice += "no code). "
    elif isinstance(err, DataError):
        why, advice = _first_line(err), "Fix or remove that file. "
    else:
        why = loader_failure(err)  # a RuntimeError or an OSError (see _train)
        if why is None and isinstance(err, OSError):
            what = f"{err.filename}: " if err.filename else ""
            raise TrainError(
                f"could not write {what}{err.strerror or err} in epoch {epoch}; "
                f"{run.kept()}"
            ) from None
        if why is None:
            raise
        _drop_loaders(err)  # the workers and their descriptors go before the record
    run.stop("failed", why)
    raise TrainError(
        f"{why}. {advice}Epoch {epoch} stopped unfinished; {run.kept()}"
    ) from None


def loader_failure(err: BaseException) -> str | None:
    """What stopped the run when the data loading's machinery failed (out of file
    descriptors, a DataLoader worker killed or gone), or None."""
    if cli.too_many_open_files(err):
        return f"the run ran out of open files ({cli.open_files_advice()})"
    text = str(err)
    if isinstance(err, RuntimeError) and text.startswith("DataLoader worker"):
        first = text.strip().splitlines()[0].rstrip(". ")
        return (
            f"{first}: a loader process died (a signal such as Killed is often the "
            "out-of-memory killer: use fewer --workers or a smaller --batch-size)"
        )
    return None


def _drop_loaders(err: BaseException) -> None:
    """Let go of the frames a failure holds (a DataLoader iterator among them), so its
    workers end and their descriptors close before anything is written."""
    import gc

    previous = sys.unraisablehook

    def quiet(hook):  # an iterator that failed half-made cannot shut down: say nothing
        if not getattr(hook.object, "__qualname__", "").endswith("Iter.__del__"):
            previous(hook)

    sys.unraisablehook = quiet
    try:
        while err is not None:
            err.__traceback__ = None
            err = err.__context__
        gc.collect()
    finally:
        sys.unraisablehook = previous


class NothingLearned(Exception):
    """An epoch in which the model learned nothing (``learned_nothing``)."""


def learned_nothing(rec: dict) -> str | None:
    """Why an epoch's record shows the run learned nothing, or None: no step had a
    finite loss, or every optimizer step was skipped beyond a GradScaler's search."""
    steps = rec.get("steps") or 0
    loss = rec.get("train_loss")
    no_loss = loss is None or not math.isfinite(loss)
    if steps and no_loss:
        return (
            f"epoch {rec['epoch']} learned nothing: no step of its {steps} had a "
            "finite loss (does the data have labelled pixels? a label set that is "
            "all ignore (255) gives a NaN loss on every batch)"
        )
    scale = rec.get("loss_scale")
    # a GradScaler halves its scale from 2**16 at each overflow: while it is still at
    # least 1, skipped steps are its search for a scale, not a broken run
    searching = scale is not None and math.isfinite(scale) and scale >= 1.0
    if steps and rec.get("optimizer_steps") == 0 and not searching:
        return (
            f"epoch {rec['epoch']} learned nothing: all {steps} optimizer steps were "
            "skipped on non-finite gradients (the weights may be NaN: start the "
            "run again rather than resuming it)"
        )
    return None
