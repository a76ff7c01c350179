"""The training runner: ERFNet on Cityscapes (or the synthetic set) in fp32 or with AMP.

    python -m ampbook.train --precision amp-fp16 --epochs 10 --no-shuffle --out build/runs
    torchrun --nproc_per_node 2 -m ampbook.train --precision amp-bf16 ...     (DDP)

From Python: ``run_training(TrainConfig(precision="amp-bf16", epochs=3, ...)) -> dict``. The
fields of ``TrainConfig`` are the command-line options (``data_root`` is ``--data-root``;
``shuffle=False`` is ``--no-shuffle``); ``python -m ampbook.train --help`` lists them.

Precisions (``PRECISIONS``)
---------------------------
* ``fp32``: no autocast. ``--tf32 on|off`` decides whether CUDA matmuls and cuDNN
  convolutions may use TF32 tensor cores; the choice is recorded and named in the run.
  PyTorch 1.7, the post's version, had both on by default on Ampere GPUs, so ``--tf32 on``
  is the post's condition: chapter 3 and the GPU check pass it for the comparison "as in
  the post". The runner's own default is off, so that a bare ``--precision fp32`` run is
  strict fp32, what its name says, on every GPU and PyTorch version.
* ``amp-fp16``: ``torch.autocast(dtype=float16)`` around the forward pass and the loss, and a
  ``torch.amp.GradScaler`` (dynamic loss scaling) for the backward pass and the update.
* ``amp-bf16``: ``torch.autocast(dtype=bfloat16)``, no scaler (bf16 has fp32's exponent range).

Weights, gradients and optimizer state stay fp32 in all three. Checks made before any work:
an unknown precision, non-positive epochs/batch size/lr, a height or width not divisible by 8,
``--device cuda`` without CUDA, ``amp-bf16`` on a GPU without bf16 (compute capability < 8.0)
and ``--resume`` without a checkpoint are errors (``ConfigError``). Low precision on a CPU
without hardware support for it (AMX or AVX-512 BF16/FP16, see
``ampbook.precision.native_cpu_flags``) works but is much slower than fp32; it runs with
a warning, recorded in the results.

The recipe (defaults)
---------------------
ERFNet's authors' PyTorch training code (E. Romera, github.com/Eromera/erfnet_pytorch,
``train/main.py``, its "scheduler 2"): Adam (betas 0.9/0.999, eps 1e-8), lr 5e-4, weight decay
1e-4, lr multiplied by ``(1 - epoch/epochs) ** 0.9`` each epoch (poly decay), cross-entropy
ignoring label 255. ``--class-weights enet`` weights class c by ``1 / ln(1.02 + p_c)`` with p_c
the class's share of the labelled training pixels (ENet's rule: A. Paszke et al., "ENet: A Deep
Neural Network Architecture for Real-Time Semantic Segmentation", arXiv:1606.02147), computed
from the training labels once and cached; ``none`` (default) weights all classes equally.

Data: ``--data-root`` (or ``$CITYSCAPES_DATASET``), else the synthetic Cityscapes of
``ampbook.data.synthetic_root`` with ``--synthetic-train``/``--synthetic-val`` images drawn at
twice the training resolution (as 2048x1024 Cityscapes is to the post's 1024x512); the output
says which. The data order is a function of (seed, epoch) only (a ``DistributedSampler`` with
``set_epoch``, also for one process), so a resumed run sees the same batches.

Non-finite values
-----------------
Every optimizer step checks the gradients: with the GradScaler (amp-fp16) a step whose scaled
gradients overflow is skipped by the scaler and the scale halves (detected as a drop of the
scale); without it (fp32, amp-bf16) a step with non-finite gradients is skipped by the runner
rather than written into the weights. Skipped steps and non-finite losses are counted per
epoch. After ``--max-nonfinite`` consecutive skipped steps (default 20) the run stops with
``NonFiniteLossError``; the results file is written first with ``status`` saying so.

Outputs
-------
``--out DIR`` (default ``build/runs`` on the command line; ``None`` in ``TrainConfig`` writes
nothing): ``DIR/NAME.json`` after every epoch (atomically: a temporary file, then
``os.replace``), and the checkpoint ``DIR/NAME.ckpt`` after every epoch: model, optimizer,
scaler, scheduler, the RNG states of torch (CPU and CUDA), numpy and Python of every rank, the
epoch, and the records so far; it loads with ``torch.load(..., weights_only=True)``.
``--resume`` continues from it and ends with the same weights and numbers as an
uninterrupted run (same settings; the interrupted epoch is run again from its start;
accumulation windows never cross an epoch, so no gradient is pending at a checkpoint).
NAME is ``--name``, else built from the settings (``run_name``). One process at a time
owns a run name: it holds ``OUT/NAME.lock`` (``flock``, freed when the process dies),
and a run whose ``NAME.json`` or ``NAME.ckpt`` exists is refused unless it is
``--resume``'d or ``--overwrite``'n. ``--accumulate N`` steps every N batches counted
from the epoch's start; the epoch's last window may be shorter (it steps at the epoch's
end); N above the batches of an epoch is an error. ``--save-predictions DIR`` writes the
last epoch's val predictions as Cityscapes labelId PNGs at the label files' size (logits
upsampled bilinearly, then the arg-max), named ``DIR/CITY/CITY_SEQ_FRAME_pred.png``, as
cityscapesscripts' evaluator and ``python -m ampbook.evaluate DIR`` read them.

Failures: bad settings, data that cannot be listed or whose PNG headers are wrong (size,
channels), an output path that cannot be written and a checkpoint that is not this
runner's are ``ConfigError`` before the first step; a file that fails to decode
mid-epoch is ``TrainError`` and Ctrl-C ``Interrupted``, both naming what the earlier
epochs saved and the ``--resume`` command. ``python -m ampbook.train`` prints each as
one ``error:`` line.

Results schema (``SCHEMA_VERSION`` 1; also in ``data/results/README.md``)
-------------------------------------------------------------------------
Top level: ``schema`` ("ampbook.train"), ``schema_version``, ``name``, ``status``
("running", "complete", "stopped: non-finite loss", "interrupted", "failed"),
``started`` (the first start; kept on resume)/``finished`` (ISO 8601 UTC), ``resumed``
(``at``, ``after_epoch``: one per resumption), ``config`` (every ``TrainConfig`` field),
``resolved`` (what the settings resolved to: ``device``, ``autocast_dtype`` (null for
fp32), ``grad_scaler``, ``data_root``, ``synthetic_data``, ``train_images``,
``val_images``, ``world_size``, ``global_batch_size``, ``memory_format``,
``class_weights`` (list or null), ``parameters``, ``warnings``, ``resumed_from_epoch``),
``environment`` (``ampbook.env.environment``: versions, device name, tensor cores, TF32
and cudnn.benchmark flags, CPU flags), ``epochs`` (one record per epoch, below),
``summary``, and only in a run that stopped early ``stopped`` (``epoch``, ``message``;
for non-finite values also the run's ``optimizer_steps``, ``skipped_steps``,
``nonfinite_losses`` and ``loss_scale`` so far).

Epoch record: ``epoch`` (1-based), ``lr``, ``steps`` (batches), ``images``, ``optimizer_steps``,
``skipped_steps``, ``nonfinite_losses``, ``loss_scale`` (GradScaler scale at the epoch's end;
null without a scaler), ``train_loss`` (mean over the batches with a finite loss),
``wall_s`` (training loop), ``step_s`` (inside the step function, CUDA synchronised),
``data_wait_s`` (waiting for the loader), ``images_per_s`` (images / wall_s), ``val_s``,
``checkpoint_s``, ``epoch_s`` (all of it), ``saved_tensor_bytes`` (new bytes autograd saved
for backward in the epoch's first forward pass, parameters saved by reference not counted:
``SavedTensorMeter.new_bytes``, the book's one memory definition),
``saved_tensor_by_dtype``, ``peak_rss_bytes`` (process peak RSS during the epoch; lifetime
peak where it cannot be reset: ``peak_rss_reset`` says which), ``load_average`` (the machine's
1-minute load average at the epoch's end: CPU times from a busy machine are unreliable),
``cuda_max_allocated_bytes``
and ``cuda_max_reserved_bytes`` (peak of the epoch's training loop; null on CPU), ``val_loss``,
``val_pixel_accuracy``, ``val_miou``, ``val_iou`` (per class; null for a class absent from
targets and predictions).

Summary: ``epochs_completed``, ``total_wall_s``, ``mean_epoch_wall_s``,
``mean_epoch_wall_s_after_first`` (null with one epoch), ``mean_images_per_s``,
``final_train_loss``, ``final_val_pixel_accuracy``, ``final_val_miou``,
``total_skipped_steps``, ``max_saved_tensor_bytes``, ``max_peak_rss_bytes``,
``max_cuda_allocated_bytes``, ``max_cuda_reserved_bytes``.

DDP: under ``torchrun`` (``WORLD_SIZE`` > 1) the model is wrapped in DistributedDataParallel
(NCCL on CUDA, gloo on CPU), each process takes ``--batch-size`` images per step from its
shard, autocast and the scaler are unchanged, and rank 0 validates on the whole val set and
writes the results and checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import fcntl
import hashlib
import json
import math
import os
import pickle
import random
import shlex
import socket
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ampbook import env as _env
from ampbook.memory import SavedTensorMeter, peak_rss_bytes, reset_peak_rss
from ampbook.precision import (
    AUTOCAST_DTYPES,
    NATIVE_CPU_FLAGS,
    PRECISIONS,
    backend_flags,
    check_precision,
    native_cpu_flags,
    short_name,
)
from ampbook.timing import default_sync, machine_load

SCHEMA = "ampbook.train"
SCHEMA_VERSION = 1
CHECKPOINT_FORMAT = "ampbook.train.checkpoint/1"
CLASS_WEIGHTS = ("none", "enet")
TF32_CHOICES = ("on", "off")
ENET_C = 1.02

# Fields that may differ between an interrupted run and its resumption (they do not change
# the numbers the run computes).
RUNTIME_FIELDS = frozenset(
    {
        "out",
        "name",
        "resume",
        "overwrite",
        "quiet",
        "progress",
        "workers",
        "save_predictions",
        "device",
        "checkpoint",
    }
)


class ConfigError(ValueError):
    """Settings that cannot work, found before any work starts."""


class NonFiniteLossError(RuntimeError):
    """The loss or gradients stayed non-finite for too many consecutive steps."""


class TrainError(RuntimeError):
    """A known failure during a run (a broken data file, an output that cannot be
    written); the message says what was kept and how to continue."""


class Interrupted(TrainError):
    """Ctrl-C (SIGINT) during a run; the message says what was saved and how to
    resume."""


def _opt(help: str, **kw):
    return {"help": help, **kw}


@dataclass
class TrainConfig:
    """Settings of one training run; each field is the command-line option of the same name."""

    precision: str = field(
        default="fp32", metadata=_opt("fp32 | amp-fp16 | amp-bf16", choices=PRECISIONS)
    )
    device: str = field(
        default="auto", metadata=_opt("auto (CUDA if available) | cpu | cuda | cuda:N")
    )
    data_root: str | None = field(
        default=None,
        metadata=_opt(
            "Cityscapes root (default: $CITYSCAPES_DATASET, else the synthetic set)"
        ),
    )
    synthetic_train: int = field(
        default=100, metadata=_opt("training images of the synthetic set")
    )
    synthetic_val: int = field(
        default=20, metadata=_opt("val images of the synthetic set")
    )
    epochs: int = field(default=10, metadata=_opt("epochs (the post: 10)"))
    batch_size: int = field(
        default=6, metadata=_opt("images per step (per process under DDP)")
    )
    height: int = field(
        default=512, metadata=_opt("training height in pixels (multiple of 8)")
    )
    width: int = field(
        default=1024, metadata=_opt("training width in pixels (multiple of 8)")
    )
    workers: int = field(default=4, metadata=_opt("DataLoader worker processes"))
    seed: int = field(
        default=0, metadata=_opt("seed of the weights, dropout and data order")
    )
    shuffle: bool = field(
        default=True,
        metadata=_opt(
            "do not shuffle the training data (the post's condition)",
            flag="--no-shuffle",
        ),
    )
    flip: bool = field(
        default=False, metadata=_opt("random horizontal flips of training images")
    )
    lr: float = field(default=5e-4, metadata=_opt("Adam learning rate (ERFNet: 5e-4)"))
    weight_decay: float = field(
        default=1e-4, metadata=_opt("Adam weight decay (ERFNet: 1e-4)")
    )
    poly_power: float = field(
        default=0.9, metadata=_opt("poly decay power per epoch (ERFNet: 0.9)")
    )
    class_weights: str = field(
        default="none",
        metadata=_opt(
            "none | enet (1/ln(1.02 + class share), from the training labels)",
            choices=CLASS_WEIGHTS,
        ),
    )
    tf32: str = field(
        default="off",
        metadata=_opt("TF32 for fp32 CUDA matmuls/convolutions", choices=TF32_CHOICES),
    )
    channels_last: bool = field(
        default=False, metadata=_opt("model and inputs in channels_last memory format")
    )
    cudnn_benchmark: bool = field(
        default=False, metadata=_opt("torch.backends.cudnn.benchmark = True")
    )
    deterministic: bool = field(
        default=False, metadata=_opt("torch.use_deterministic_algorithms(True)")
    )
    clip_grad: float | None = field(
        default=None,
        metadata=_opt("clip the gradient norm to this value (after scaler.unscale_)"),
    )
    accumulate: int = field(
        default=1,
        metadata=_opt("accumulate gradients over N batches per optimizer step"),
    )
    max_nonfinite: int = field(
        default=20,
        metadata=_opt(
            "stop after this many consecutive steps skipped for non-finite loss/gradients"
        ),
    )
    out: str | None = field(
        default=None,
        metadata=_opt("folder for NAME.json and NAME.ckpt", cli_default="build/runs"),
    )
    name: str | None = field(
        default=None, metadata=_opt("run name (default: from the settings)")
    )
    resume: bool = field(default=False, metadata=_opt("continue from OUT/NAME.ckpt"))
    overwrite: bool = field(
        default=False,
        metadata=_opt(
            "replace an earlier run's OUT/NAME.json and OUT/NAME.ckpt "
            "(refused without it)"
        ),
    )
    checkpoint: bool = field(
        default=True, metadata=_opt("do not write checkpoints", flag="--no-checkpoint")
    )
    save_predictions: str | None = field(
        default=None,
        metadata=_opt(
            "write the last epoch's val predictions (labelId PNGs) to this folder"
        ),
    )
    quiet: bool = field(default=False, metadata=_opt("print nothing but errors"))
    progress: bool | None = field(
        default=None,
        metadata=_opt(
            "progress bar: on | off (default: on when stderr is a terminal)",
            choices=("on", "off"),
        ),
    )


def run_name(cfg: TrainConfig) -> str:
    """The run's name: ``cfg.name`` or one built from the settings that change the numbers."""
    if cfg.name:
        return cfg.name
    parts = [
        cfg.precision,
        f"{cfg.width}x{cfg.height}",
        f"bs{cfg.batch_size}",
        f"e{cfg.epochs}",
        f"seed{cfg.seed}",
    ]
    if cfg.tf32 == "on":
        parts.append("tf32")
    if cfg.channels_last:
        parts.append("cl")
    if not cfg.shuffle:
        parts.append("noshuffle")
    if cfg.accumulate > 1:
        parts.append(f"acc{cfg.accumulate}")
    return "-".join(parts)


# --- validation --------------------------------------------------------------------------------


@dataclass
class Resolved:
    device: torch.device
    autocast_dtype: torch.dtype | None
    grad_scaler: bool
    warnings: list[str]
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0


def _world() -> tuple[int, int, int]:
    ws = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), ws, int(os.environ.get("LOCAL_RANK", "0"))


def validate(cfg: TrainConfig) -> Resolved:
    """Check the settings before any work; ``ConfigError`` names the first problem."""
    try:
        check_precision(cfg.precision)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    for name in (
        "epochs",
        "batch_size",
        "accumulate",
        "max_nonfinite",
        "synthetic_train",
        "synthetic_val",
    ):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if not isinstance(cfg.workers, int) or cfg.workers < 0:
        raise ConfigError(f"workers must be 0 or more, got {cfg.workers!r}")
    for name in ("height", "width"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or value < 8 or value % 8:
            raise ConfigError(
                f"{name} must be a positive multiple of 8 (ERFNet halves it three "
                f"times), got {value!r}"
            )
    if not (isinstance(cfg.lr, (int, float)) and cfg.lr > 0 and math.isfinite(cfg.lr)):
        raise ConfigError(f"lr must be a positive finite number, got {cfg.lr!r}")
    if not (cfg.weight_decay >= 0 and math.isfinite(cfg.weight_decay)):
        raise ConfigError(f"weight_decay must be 0 or more, got {cfg.weight_decay!r}")
    if not (cfg.poly_power >= 0 and math.isfinite(cfg.poly_power)):
        raise ConfigError(f"poly_power must be 0 or more, got {cfg.poly_power!r}")
    if cfg.clip_grad is not None and not (
        cfg.clip_grad > 0 and math.isfinite(cfg.clip_grad)
    ):
        raise ConfigError(
            f"clip_grad must be a positive number (or None), got {cfg.clip_grad!r}"
        )
    if cfg.class_weights not in CLASS_WEIGHTS:
        raise ConfigError(
            f"unknown class_weights {cfg.class_weights!r}; choose one of {', '.join(CLASS_WEIGHTS)}"
        )
    if cfg.tf32 not in TF32_CHOICES:
        raise ConfigError(f"tf32 must be 'on' or 'off', got {cfg.tf32!r}")
    if cfg.progress not in (None, True, False):
        raise ConfigError(f"progress must be None, True or False, got {cfg.progress!r}")
    for name in ("out", "save_predictions"):
        value = getattr(cfg, name)
        if value is not None and not str(value).strip():
            raise ConfigError(
                f"{name} is an empty path; give a folder (or leave it unset)"
            )
    if cfg.name is not None and (
        not cfg.name.strip()
        or "/" in cfg.name
        or os.sep in cfg.name
        or cfg.name.startswith(".")
    ):
        raise ConfigError(
            f"name {cfg.name!r} is not a file name: give a name without a path "
            "separator and not starting with '.', or leave it unset"
        )
    if (cfg.height // 8) * (cfg.width // 8) < 2:
        raise ConfigError(
            f"{cfg.width}x{cfg.height} (W x H) is too small: ERFNet works at 1/8 of "
            "that size, where batch norm needs more than one value per channel "
            "(a batch may hold one image); use at least 16x8 or 8x16"
        )
    if cfg.resume and cfg.overwrite:
        raise ConfigError(
            "resume and overwrite contradict each other: --resume continues "
            "OUT/NAME, --overwrite replaces it; give one"
        )
    if cfg.resume and not cfg.out:
        raise ConfigError("resume needs out (the folder holding NAME.ckpt)")
    if cfg.resume:
        ckpt = Path(cfg.out) / f"{run_name(cfg)}.ckpt"
        if not ckpt.exists():
            raise ConfigError(
                f"resume: no checkpoint {ckpt} (run name {run_name(cfg)!r}; the name "
                "comes from --name or the settings, which must match the first run)"
            )

    rank, world_size, local_rank = _world()
    try:
        device = _env.pick_device(cfg.device)
    except (RuntimeError, ValueError) as err:
        raise ConfigError(str(err)) from None
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(
            f"device {cfg.device!r}: the runner trains on 'cpu' or 'cuda'"
        )
    if device.type == "cuda" and world_size > 1:
        device = torch.device("cuda", local_rank)
    if (
        device.type == "cuda"
        and device.index is not None
        and device.index >= torch.cuda.device_count()
    ):
        raise ConfigError(
            f"device {device} does not exist: this machine has "
            f"{torch.cuda.device_count()} CUDA device(s)"
        )

    notes: list[str] = []
    dtype = AUTOCAST_DTYPES[cfg.precision]
    if device.type == "cuda":
        cap = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        if dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported(
            including_emulation=False
        ):
            raise ConfigError(
                f"amp-bf16 needs a GPU with bf16 arithmetic (compute capability 8.0+, "
                f"Ampere or newer); {name} has {cap[0]}.{cap[1]}. Use amp-fp16."
            )
        if dtype is torch.float16 and cap < (7, 0):
            notes.append(
                f"{name} (compute capability {cap[0]}.{cap[1]}) has no tensor cores: fp16 "
                "saves memory there but is unlikely to be faster than fp32"
            )
    else:
        if dtype is not None and not native_cpu_flags(dtype):
            absent = " / ".join(sorted(NATIVE_CPU_FLAGS[dtype]))
            flags = ", ".join(sorted(_env.cpu_flags())) or "none"
            notes.append(
                f"{cfg.precision} on a CPU without {short_name(dtype)} hardware "
                f"({absent} absent; flags: {flags}): it works, but expect it to be "
                "slower than fp32, often many times (measure: python -m ampbook.bench "
                "step)"
            )
        if cfg.tf32 == "on":
            notes.append("tf32 on has no effect on a CPU")
    return Resolved(
        device=device,
        autocast_dtype=dtype,
        grad_scaler=dtype is torch.float16,
        warnings=notes,
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
    )


# --- the pieces of a run -----------------------------------------------------------------------


class PolyDecay:
    """lr factor ``(1 - epoch/epochs) ** power`` (a class, so the scheduler state serialises)."""

    def __init__(self, epochs: int, power: float):
        self.epochs, self.power = epochs, power

    def __call__(self, epoch: int) -> float:
        return max(0.0, 1.0 - min(epoch, self.epochs) / self.epochs) ** self.power


def _total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all gradients together (non-finite when any element is)."""
    if not grads:
        return torch.zeros(())
    if hasattr(nn.utils, "get_total_norm"):  # torch >= 2.6
        return nn.utils.get_total_norm(grads)
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g) for g in grads])
    )


@dataclass
class StepCounters:
    optimizer_steps: int = 0
    skipped_steps: int = 0
    nonfinite_losses: int = 0
    consecutive_skipped: int = 0


class TrainStep:
    """The runner's training step, also timed by ``python -m ampbook.bench step``.

    ``step(images, labels, meter=None) -> float`` runs one batch: forward pass and loss
    under autocast (when the precision has one), backward (scaled with a GradScaler),
    and at the end of each accumulation window the optimizer step: unscale and clip when
    asked, skip on non-finite gradients, ``scaler.step``/``update``. Returns the batch's
    loss as a Python float. ``meter`` (a ``SavedTensorMeter``) wraps the forward pass
    when given.

    Accumulation windows: ``accumulate`` batches each, counted from the start of an
    epoch (``begin_epoch(batches)``); the epoch's last window may be shorter and steps
    at the epoch's end, with each loss divided by the window's own length. So no window
    crosses an epoch, and a checkpoint written between epochs holds no pending
    gradients. Without ``begin_epoch`` every window is ``accumulate`` batches long.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        criterion: nn.Module,
        device: torch.device,
        autocast_dtype: torch.dtype | None,
        scaler: torch.amp.GradScaler | None = None,
        accumulate: int = 1,
        clip_grad: float | None = None,
        channels_last: bool = False,
        max_nonfinite: int = 20,
    ):
        self.model, self.optimizer, self.criterion = model, optimizer, criterion
        self.device, self.autocast_dtype, self.scaler = device, autocast_dtype, scaler
        self.accumulate, self.clip_grad = accumulate, clip_grad
        self.channels_last, self.max_nonfinite = channels_last, max_nonfinite
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.counters = StepCounters()
        self._micro = 0  # batches done in the current window
        self._window = accumulate  # length of the current window
        self._remaining: int | None = None  # batches left in the epoch (None: unknown)
        self._ddp = isinstance(model, nn.parallel.DistributedDataParallel)

    def autocast(self):
        return torch.autocast(
            self.device.type,
            dtype=self.autocast_dtype or torch.float32,
            enabled=self.autocast_dtype is not None,
        )

    def __call__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        meter: SavedTensorMeter | None = None,
    ) -> float:
        images = images.to(self.device, non_blocking=True)
        labels = labels.to(self.device, non_blocking=True)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        if self._micro == 0:
            self.optimizer.zero_grad(set_to_none=True)
            self._window = self.accumulate
            if self._remaining is not None:
                self._window = max(1, min(self.accumulate, self._remaining))
        last = self._micro == self._window - 1
        sync = (
            self.model.no_sync()
            if (self._ddp and not last)
            else contextlib.nullcontext()
        )
        with sync:
            with (
                meter if meter is not None else contextlib.nullcontext(),
                self.autocast(),
            ):
                loss = self.criterion(self.model(images), labels)
            scaled = loss / self._window if self._window > 1 else loss
            (
                self.scaler.scale(scaled) if self.scaler is not None else scaled
            ).backward()
        value = loss.item()
        if not math.isfinite(value):
            self.counters.nonfinite_losses += 1
        self._micro += 1
        if self._remaining is not None:
            self._remaining -= 1
        if last:
            self._micro = 0
            self._optimizer_step()
        return value

    def begin_epoch(self, batches: int) -> None:
        """Start an epoch of ``batches`` batches: windows restart, the last one ends
        with it."""
        self._micro, self._remaining = 0, batches

    def _optimizer_step(self) -> None:
        c = self.counters
        if self.scaler is not None:
            if self.clip_grad is not None:
                self.scaler.unscale_(self.optimizer)
                nn.utils.clip_grad_norm_(self.params, self.clip_grad)
            before = self.scaler.get_scale()
            self.scaler.step(
                self.optimizer
            )  # skipped by the scaler on inf/NaN gradients
            self.scaler.update()
            skipped = self.scaler.get_scale() < before
        else:
            grads = [p.grad for p in self.params if p.grad is not None]
            if self.clip_grad is not None:
                norm = nn.utils.clip_grad_norm_(self.params, self.clip_grad)
            else:
                norm = _total_norm(grads)
            skipped = not bool(torch.isfinite(norm))
            if not skipped:
                self.optimizer.step()
        if skipped:
            c.skipped_steps += 1
            c.consecutive_skipped += 1
            self.optimizer.zero_grad(set_to_none=True)
            if c.consecutive_skipped >= self.max_nonfinite:
                raise NonFiniteLossError(
                    f"{c.consecutive_skipped} consecutive optimizer steps had non-finite gradients "
                    f"(batches with a non-finite loss so far: {c.nonfinite_losses}; loss scale: "
                    f"{self.scaler.get_scale() if self.scaler is not None else 'no scaler'}); stopping instead of training "
                    "on NaN. Lower the learning rate, check the data for NaN/inf, or try another "
                    "precision (fp16 overflows above 65504)."
                )
        else:
            c.optimizer_steps += 1
            c.consecutive_skipped = 0


@dataclass
class Training:
    """Everything a run trains with (built by ``build_training``)."""

    model: nn.Module  # the module to train (DDP-wrapped under torchrun)
    net: nn.Module  # the bare ERFNet
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler | None
    criterion: nn.Module
    step: TrainStep


def build_training(
    cfg: TrainConfig, res: Resolved, class_weights: list[float] | None = None
) -> Training:
    """Model, optimizer, poly scheduler, scaler, loss and step function for ``cfg`` on
    ``res.device`` (seeded with ``cfg.seed``)."""
    from ampbook.data import IGNORE_INDEX, NUM_CLASSES
    from ampbook.model import ERFNet

    torch.manual_seed(cfg.seed)
    net = ERFNet(NUM_CLASSES).to(res.device)
    if cfg.channels_last:
        net = net.to(memory_format=torch.channels_last)
    model: nn.Module = net
    if res.world_size > 1:
        model = nn.parallel.DistributedDataParallel(
            net, device_ids=[res.device.index] if res.device.type == "cuda" else None
        )
    optimizer = torch.optim.Adam(
        net.parameters(),
        lr=cfg.lr,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=cfg.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, PolyDecay(cfg.epochs, cfg.poly_power)
    )
    scaler = torch.amp.GradScaler(res.device.type) if res.grad_scaler else None
    weight = (
        torch.tensor(class_weights, dtype=torch.float32, device=res.device)
        if class_weights
        else None
    )
    criterion = nn.CrossEntropyLoss(weight=weight, ignore_index=IGNORE_INDEX)
    step = TrainStep(
        model,
        optimizer,
        criterion,
        res.device,
        res.autocast_dtype,
        scaler,
        accumulate=cfg.accumulate,
        clip_grad=cfg.clip_grad,
        channels_last=cfg.channels_last,
        max_nonfinite=cfg.max_nonfinite,
    )
    return Training(model, net, optimizer, scheduler, scaler, criterion, step)


# --- data ------------------------------------------------------------------------------------


def resolve_data(cfg: TrainConfig, res: Resolved) -> tuple[Path, bool]:
    """(root, synthetic?): ``cfg.data_root``, else $CITYSCAPES_DATASET, else the synthetic set."""
    from ampbook.data import resolve_root, synthetic_root

    if cfg.data_root or os.environ.get("CITYSCAPES_DATASET"):
        try:
            return resolve_root(cfg.data_root), False
        except FileNotFoundError as err:
            raise ConfigError(str(err)) from None
    args = (cfg.synthetic_train, cfg.synthetic_val, 2 * cfg.height, 2 * cfg.width)
    if res.world_size > 1 and dist.is_initialized():
        if res.rank == 0:
            root = synthetic_root(*args)
        dist.barrier()
        if res.rank != 0:
            root = synthetic_root(*args)
    else:
        root = synthetic_root(*args)
    return root, True


def enet_class_weights(dataset, workers: int = 0, batch_size: int = 8) -> list[float]:
    """ENet's class weights ``1 / ln(1.02 + p_c)`` from the labels of ``dataset`` (cached in
    ``ampbook.paths.cache_dir()`` by root, split, size and file count)."""
    from ampbook.data import NUM_CLASSES
    from ampbook.paths import cache_dir

    key = f"{Path(dataset.root).resolve()}|{dataset.split}|{dataset.height}x{dataset.width}|{len(dataset)}"
    path = (
        cache_dir()
        / "class-weights"
        / (hashlib.sha1(key.encode()).hexdigest()[:16] + ".json")
    )
    if path.exists():
        return json.loads(path.read_text())["weights"]
    counts = torch.zeros(NUM_CLASSES, dtype=torch.float64)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, num_workers=workers
    )
    for _, labels in loader:
        valid = labels[labels < NUM_CLASSES]
        counts += torch.bincount(valid.reshape(-1), minlength=NUM_CLASSES).double()
    share = counts / counts.sum().clamp(min=1)
    weights = [float(w) for w in 1.0 / torch.log(ENET_C + share)]
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(
        path, json.dumps({"key": key, "counts": counts.tolist(), "weights": weights})
    )
    return weights


# --- RNG state (checkpointed as tensors and plain lists, no pickled objects) ----------------


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


# --- files -------------------------------------------------------------------------------------


def _write_atomic(path: Path, text: str | None = None, obj=None) -> None:
    """Write ``text`` (or ``torch.save`` ``obj``) to a temporary file beside ``path``, then
    ``os.replace`` it: a reader never sees a half-written file."""
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


def _clean(value):
    """JSON-safe: NaN/inf -> None, tuples -> lists, paths -> str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return value


def write_results(record: dict, path: Path) -> None:
    _write_atomic(path, json.dumps(_clean(record), indent=1, allow_nan=False) + "\n")


def load_results(path: str | os.PathLike) -> dict:
    """Read a results JSON written by the runner, checking its schema."""
    record = json.loads(Path(path).read_text())
    if record.get("schema") != SCHEMA:
        raise ValueError(
            f"{path} is not a training-run record (schema {record.get('schema')!r})"
        )
    if record.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{path} has schema version {record.get('schema_version')}; this runner "
            f"reads version {SCHEMA_VERSION}"
        )
    return record


def prediction_path(folder: Path, image_path: Path) -> Path:
    """Where ``--save-predictions`` puts the prediction of an image:
    ``FOLDER/CITY/CITY_SEQ_FRAME_pred.png`` (as ``ampbook.evaluate.predict_folder`` names them)."""
    image_path = Path(image_path)
    stem = image_path.name.removesuffix("_leftImg8bit.png")
    return Path(folder) / image_path.parent.name / f"{stem}_pred.png"


def _save_predictions(
    logits: torch.Tensor, indices: list[int], dataset, folder: Path
) -> None:
    """Upsample each image's logits to its label file's size, take the arg-max and write it as
    a labelId PNG (``ampbook.evaluate.save_prediction``)."""
    from PIL import Image

    from ampbook.evaluate import save_prediction

    for one, i in zip(logits, indices):
        image_path, label_path = dataset.pairs[i]
        with Image.open(label_path) as gt:
            w, h = gt.size  # the header only: no decoding
        full = nn.functional.interpolate(
            one[None].float(), size=(h, w), mode="bilinear", align_corners=False
        )
        save_prediction(full[0].argmax(0), prediction_path(folder, image_path))


# --- one epoch ---------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(
    net: nn.Module, loader, step: TrainStep, save_to: Path | None = None
) -> dict:
    """Val loss, pixel accuracy, mIoU and per-class IoU of ``net`` over ``loader`` (under the
    run's autocast); with ``save_to``, also writes the predictions."""
    from ampbook.metrics import SegmentationMetrics

    net.eval()
    metrics = SegmentationMetrics(device=step.device)
    total, batches, index = 0.0, 0, 0
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
        batches += 1
        if save_to is not None:
            _save_predictions(
                logits, list(range(index, index + len(pred))), loader.dataset, save_to
            )
        index += len(pred)
    net.train()
    m = metrics.compute()
    return {
        "val_loss": total / max(batches, 1),
        "val_pixel_accuracy": m["pixel_accuracy"],
        "val_miou": m["miou"],
        "val_iou": m["iou"],
    }


def _show_progress(cfg: TrainConfig, res: Resolved) -> bool:
    if cfg.quiet or res.rank != 0:
        return False
    if cfg.progress is not None:
        return bool(cfg.progress)
    return sys.stderr.isatty()


def train_epoch(
    epoch: int, cfg: TrainConfig, res: Resolved, tr: Training, loader
) -> dict:
    """Train one epoch; returns its record (timings, memory, loss, step counters)."""
    from tqdm.auto import tqdm

    device, step = res.device, tr.step
    before = dataclasses.replace(step.counters)
    tr.model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rss_reset = reset_peak_rss()
    lr = tr.optimizer.param_groups[0]["lr"]
    losses: list[float] = []
    images = steps = 0
    data_wait = step_time = 0.0
    saved: SavedTensorMeter | None = None
    bar = tqdm(
        total=len(loader),
        desc=f"epoch {epoch}/{cfg.epochs} {cfg.precision}",
        unit="batch",
        leave=False,
        disable=not _show_progress(cfg, res),
        dynamic_ncols=True,
    )
    sync = default_sync(device)
    step.begin_epoch(len(loader))
    sync()
    start = time.perf_counter()
    batches = iter(loader)
    try:  # a stopped epoch (Ctrl-C, a bad file) clears its bar before the error line
        while True:
            t0 = time.perf_counter()
            try:
                x, y = next(batches)
            except StopIteration:
                break
            t1 = time.perf_counter()
            meter = SavedTensorMeter() if steps == 0 else None
            value = step(x, y, meter=meter)
            sync()
            t2 = time.perf_counter()
            if meter is not None:
                saved = meter
            data_wait += t1 - t0
            step_time += t2 - t1
            steps += 1
            images += len(x)
            if math.isfinite(value):
                losses.append(value)
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}", img_s=f"{images / (t2 - start):.1f}")
    finally:
        bar.close()
    wall = time.perf_counter() - start
    c = step.counters
    rec = {
        "epoch": epoch,
        "lr": lr,
        "steps": steps,
        "images": images * res.world_size,
        "optimizer_steps": c.optimizer_steps - before.optimizer_steps,
        "skipped_steps": c.skipped_steps - before.skipped_steps,
        "nonfinite_losses": c.nonfinite_losses - before.nonfinite_losses,
        "loss_scale": tr.scaler.get_scale() if tr.scaler is not None else None,
        "train_loss": sum(losses) / len(losses) if losses else float("nan"),
        "wall_s": wall,
        "step_s": step_time,
        "data_wait_s": data_wait,
        "images_per_s": images * res.world_size / wall if wall > 0 else None,
        "saved_tensor_bytes": saved.new_bytes if saved is not None else None,
        "saved_tensor_by_dtype": dict(saved.by_dtype) if saved is not None else None,
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_rss_reset": rss_reset,
        "load_average": machine_load()["load1"],
        "cuda_max_allocated_bytes": torch.cuda.max_memory_allocated(device)
        if device.type == "cuda"
        else None,
        "cuda_max_reserved_bytes": torch.cuda.max_memory_reserved(device)
        if device.type == "cuda"
        else None,
    }
    if res.world_size > 1:  # the loss averaged over all ranks' batches
        t = torch.tensor(
            [sum(losses), len(losses)],
            dtype=torch.float64,
            device=device if device.type == "cuda" else "cpu",
        )
        dist.all_reduce(t)
        rec["train_loss"] = float(t[0] / t[1]) if t[1] > 0 else float("nan")
    return rec


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


# --- the run -----------------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _config_dict(cfg: TrainConfig) -> dict:
    return dataclasses.asdict(cfg)


def _check_resumable(saved: dict, cfg: TrainConfig) -> None:
    now = _config_dict(cfg)
    diff = [k for k in now if k not in RUNTIME_FIELDS and saved.get(k) != now[k]]
    if diff:
        pairs = ", ".join(
            f"{k}: checkpoint {saved.get(k)!r} vs now {now[k]!r}" for k in diff
        )
        raise ConfigError(
            f"resume: the checkpoint was written with other settings ({pairs}); "
            "resume with the same settings or start a new run (another --name)"
        )


def _say(cfg: TrainConfig, res: Resolved, text: str) -> None:
    if not cfg.quiet and res.rank == 0:
        print(text, flush=True)


def run_training(cfg: TrainConfig) -> dict:
    """Train as ``cfg`` says; returns the results record (see the module docstring), also
    written to ``cfg.out/NAME.json`` when ``cfg.out`` is set (rank 0)."""
    res = validate(cfg)
    own_group = False
    if res.world_size > 1 and not dist.is_initialized():
        if res.device.type == "cuda":
            torch.cuda.set_device(res.device)
        dist.init_process_group("nccl" if res.device.type == "cuda" else "gloo")
        own_group = True
    flags = backend_flags(
        tf32=cfg.tf32 == "on",
        cudnn_benchmark=cfg.cudnn_benchmark,
        deterministic=True if cfg.deterministic else None,
    )
    try:
        with flags:
            return _run(cfg, res)
    finally:
        if own_group:
            dist.destroy_process_group()


# --- the output folder: one run per name, nothing overwritten by accident -------------


class RunLock:
    """An exclusive lock on ``OUT/NAME.lock`` for one run name. ``fcntl.flock`` is
    released by the kernel when the process dies, so a killed run never leaves a stale
    lock behind."""

    def __init__(self, path: Path, name: str):
        self.path = Path(path)
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise ConfigError(
                    f"cannot write in {self.path.parent}: {err.strerror}; choose "
                    "a writable folder for --out"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = (
                    os.read(fd, 300).decode(errors="replace").strip()
                    or "unknown process"
                )
                os.close(fd)
                raise ConfigError(
                    f"run {name!r} in {self.path.parent} is in use by another "
                    f"process ({holder}); wait for it to end, or choose another "
                    "--name"
                ) from None
            try:  # the previous holder may have removed the file between open and flock
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(
            fd, f"pid {os.getpid()} on {socket.gethostname()} since {_now()}\n".encode()
        )
        self.fd = fd

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)


@contextlib.contextmanager
def _output_folder(cfg: TrainConfig, out: Path, name: str):
    """Lock ``out`` for ``name`` and check it before any work: a folder that can be
    written, no earlier run of that name unless resuming or overwriting, no stale
    temporary files."""
    if out.exists() and not out.is_dir():
        raise ConfigError(
            f"out {out} is a file, not a folder; give a folder for {name}.json "
            f"and {name}.ckpt"
        )
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"cannot create the output folder {out}: {err.strerror}; choose "
            "another --out"
        ) from None
    lock = None
    try:
        lock = RunLock(out / f"{name}.lock", name)
        json_path, ckpt_path = out / f"{name}.json", out / f"{name}.ckpt"
        for path in (json_path, ckpt_path):
            if path.is_dir():
                raise ConfigError(
                    f"{path} is a folder, but the run writes a file there; move "
                    "it away or choose another --name"
                )
        existing = [p for p in (json_path, ckpt_path) if p.exists()]
        if existing and not cfg.resume and not cfg.overwrite:
            earlier = _earlier_record(json_path)
            status = f" (status: {earlier.get('status')})" if earlier else ""
            finished = earlier is not None and earlier.get("status") == "complete"
            how = (
                ["continue it with --resume"]
                if ckpt_path.exists() and not finished
                else []
            )
            how += ["choose another --name", "or pass --overwrite to replace it"]
            raise ConfigError(
                f"{existing[0]} already holds run {name!r}{status}; nothing was "
                f"changed: {', '.join(how)}"
            )
        if cfg.overwrite:
            for path in existing:
                path.unlink()
        # Temporary files of this name can only be left over from a killed run: we hold
        # its lock.
        for stale in out.iterdir():
            parts = stale.name.rsplit(
                ".", 2
            )  # .NAME.json.PID.tmp -> .NAME.json, PID, tmp
            if (
                len(parts) == 3
                and parts[0] in (f".{name}.json", f".{name}.ckpt")
                and parts[1].isdigit()
                and parts[2] == "tmp"
            ):
                stale.unlink()
        yield
    finally:
        if lock is not None:
            lock.release()
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty: a run that wrote nothing leaves nothing


def _check_predictions_folder(cfg: TrainConfig) -> None:
    if not cfg.save_predictions:
        return
    folder = Path(cfg.save_predictions)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"save_predictions {folder} cannot be written ({err.strerror or err}); "
            "choose a writable folder"
        ) from None


def _earlier_record(path: Path | None) -> dict | None:
    """The results record at ``path`` if it is one of this runner's, else None."""
    if path is None:
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return (
        record if isinstance(record, dict) and record.get("schema") == SCHEMA else None
    )


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


def _load_checkpoint(path: Path, cfg: TrainConfig, res: Resolved) -> dict:
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
    _check_resumable(saved, cfg)
    if len(ckpt["rng"]) != res.world_size:
        raise ConfigError(
            f"resume: the checkpoint holds {len(ckpt['rng'])} process(es); "
            f"this run has {res.world_size}; resume with as many processes"
        )
    ckpt["epoch"], ckpt["records"] = epoch, records
    return ckpt


def _run(cfg: TrainConfig, res: Resolved) -> dict:
    name = run_name(cfg)
    out = Path(cfg.out) if cfg.out else None
    with contextlib.ExitStack() as stack:
        if res.rank == 0:
            if out is not None:
                stack.enter_context(_output_folder(cfg, out, name))
            _check_predictions_folder(cfg)
        try:
            return _train(cfg, res, name, out)
        except KeyboardInterrupt:
            raise Interrupted(
                "interrupted before the first epoch finished; nothing was saved"
            ) from None


def _kept(
    cfg: TrainConfig, epochs: list[dict], json_path: Path | None, ckpt_path: Path | None
) -> str:
    """What a stopped run leaves on disk, and how to go on."""
    if json_path is None:
        return "nothing was saved (no --out)"
    if not epochs:
        return "nothing was saved (no epoch finished)"
    done = "epoch 1" if len(epochs) == 1 else f"epochs 1-{len(epochs)}"
    if ckpt_path is not None and ckpt_path.exists():
        return (
            f"{ckpt_path} and {json_path} hold {done}; continue with: "
            f"{resume_command(cfg)}"
        )
    return f"{json_path} holds {done} (no checkpoint to resume from)"


def resume_command(cfg: TrainConfig) -> str:
    """The command that continues the run of ``cfg`` from its checkpoint."""
    line = command_line(dataclasses.replace(cfg, resume=True, overwrite=False))
    world = _world()[1]
    if world > 1:
        line = line.replace("python -m", f"torchrun --nproc_per_node {world} -m", 1)
    return line


def _first_line(err: BaseException) -> str:
    """An exception's own message; for one re-raised from a DataLoader worker, the
    message of the original (its last line) rather than the worker's traceback."""
    text = str(err)
    if text.startswith("Caught ") and "Original Traceback" in text:
        last = text.strip().splitlines()[-1]
        return last.split(": ", 1)[1] if ": " in last else last
    return text


def _train(cfg: TrainConfig, res: Resolved, name: str, out: Path | None) -> dict:
    from ampbook.data import Cityscapes, DataError, check_headers

    json_path = out / f"{name}.json" if out else None
    ckpt_path = out / f"{name}.ckpt" if out else None
    writer = res.rank == 0
    for note in res.warnings:
        _say(cfg, res, f"note: {note}")

    checkpoint = _load_checkpoint(ckpt_path, cfg, res) if cfg.resume else None

    try:
        root, synthetic = resolve_data(cfg, res)
        train_ds = Cityscapes(root, "train", cfg.height, cfg.width, flip=cfg.flip)
        val_ds = Cityscapes(root, "val", cfg.height, cfg.width)
        check_headers(train_ds.pairs + val_ds.pairs)
    except (FileNotFoundError, ValueError) as err:  # DataError is a ValueError
        raise ConfigError(f"data: {err}") from None
    _say(
        cfg,
        res,
        f"data: {'SYNTHETIC Cityscapes (no Cityscapes root given)' if synthetic else 'Cityscapes'} "
        f"at {root}: {len(train_ds)} train / {len(val_ds)} val images, trained at "
        f"{cfg.width}x{cfg.height} (W x H)",
    )
    try:
        weights = (
            enet_class_weights(train_ds, cfg.workers)
            if cfg.class_weights == "enet"
            else None
        )
    except DataError as err:
        raise ConfigError(f"data: {_first_line(err)}") from None

    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    tr = build_training(cfg, res, weights)
    if (
        res.rank
    ):  # different dropout masks on each rank (the weights came from the same seed)
        torch.manual_seed(cfg.seed + 1_000_003 * res.rank)

    sampler = torch.utils.data.DistributedSampler(
        train_ds,
        num_replicas=res.world_size,
        rank=res.rank,
        shuffle=cfg.shuffle,
        seed=cfg.seed,
    )
    loader_gen = torch.Generator()
    pin = res.device.type == "cuda"
    train_loader = torch.utils.data.DataLoader(
        train_ds,
        batch_size=cfg.batch_size,
        sampler=sampler,
        num_workers=cfg.workers,
        pin_memory=pin,
        generator=loader_gen,
    )
    val_loader = torch.utils.data.DataLoader(
        val_ds,
        batch_size=cfg.batch_size,
        shuffle=False,
        num_workers=cfg.workers,
        pin_memory=pin,
    )
    if cfg.accumulate > len(train_loader):
        per = f" per process ({res.world_size} processes)" if res.world_size > 1 else ""
        raise ConfigError(
            f"accumulate {cfg.accumulate} is more than the {len(train_loader)} "
            f"batches of an epoch{per} ({len(train_ds)} images, batch size "
            f"{cfg.batch_size}): no window would ever be full; use --accumulate "
            f"{len(train_loader)} or less"
        )

    epochs: list[dict] = []
    start_epoch = 1
    started = _now()
    resumes: list[dict] = []
    if checkpoint is not None:
        try:
            tr.net.load_state_dict(checkpoint["model"])
            tr.optimizer.load_state_dict(checkpoint["optimizer"])
            tr.scheduler.load_state_dict(checkpoint["scheduler"])
            if tr.scaler is not None:
                tr.scaler.load_state_dict(checkpoint["scaler"])
            tr.step.counters = StepCounters(**checkpoint["counters"])
            set_rng_state(checkpoint["rng"][res.rank])
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as err:
            raise ConfigError(
                f"resume: {ckpt_path} does not fit this run ({type(err).__name__}: "
                f"{str(err).splitlines()[0][:200]}); start the run again with "
                "--overwrite, or choose another --name"
            ) from None
        epochs, started, resumes = _earlier_epochs(checkpoint, json_path, name)
        start_epoch = checkpoint["epoch"] + 1
        resumes.append({"at": _now(), "after_epoch": checkpoint["epoch"]})
        _say(
            cfg,
            res,
            f"resumed {name} from {ckpt_path} after epoch {checkpoint['epoch']}",
        )

    environment = _env.environment(res.device)
    environment["memory_format"] = (
        "channels_last" if cfg.channels_last else "contiguous"
    )
    record = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "status": "running",
        "started": started,
        "finished": None,
        "resumed": resumes,
        "config": _config_dict(cfg),
        "resolved": {
            "device": str(res.device),
            "autocast_dtype": res.autocast_dtype,
            "grad_scaler": res.grad_scaler,
            "data_root": str(root),
            "synthetic_data": synthetic,
            "train_images": len(train_ds),
            "val_images": len(val_ds),
            "world_size": res.world_size,
            "global_batch_size": cfg.batch_size * res.world_size * cfg.accumulate,
            "memory_format": environment["memory_format"],
            "class_weights": weights,
            "parameters": sum(p.numel() for p in tr.net.parameters()),
            "warnings": res.warnings,
            "resumed_from_epoch": start_epoch - 1 if checkpoint is not None else None,
        },
        "environment": environment,
        "epochs": epochs,
        "summary": summarize(epochs),
    }
    _say(
        cfg,
        res,
        f"run {name}: {cfg.precision} on {environment['device_name']} ({res.device}), "
        f"{cfg.epochs} epochs, batch {cfg.batch_size}"
        + (f" x {res.world_size} processes" if res.world_size > 1 else "")
        + (f", results -> {json_path}" if json_path else ""),
    )

    def stop(status: str, epoch: int, message: str, **extra) -> None:
        """Record why the run stopped (rank 0, when there is a results file to keep)."""
        record["status"] = status
        record["stopped"] = {"epoch": epoch, "message": message, **extra}
        record["finished"] = _now()
        if (
            writer
            and json_path is not None
            and (epochs or status.startswith("stopped"))
        ):
            with contextlib.suppress(OSError):
                write_results(record, json_path)

    save_dir = Path(cfg.save_predictions) if cfg.save_predictions else None
    epoch = start_epoch
    try:
        for epoch in range(start_epoch, cfg.epochs + 1):
            sampler.set_epoch(epoch)
            loader_gen.manual_seed(cfg.seed * 1_000_003 + epoch)
            rec = train_epoch(epoch, cfg, res, tr, train_loader)
            with (
                warnings.catch_warnings()
            ):  # an epoch whose steps were all skipped is legitimate
                warnings.filterwarnings(
                    "ignore", message="Detected call of `lr_scheduler.step"
                )
                tr.scheduler.step()
            t = time.perf_counter()
            if writer:
                last = epoch == cfg.epochs
                rec.update(
                    evaluate(tr.net, val_loader, tr.step, save_dir if last else None)
                )
            rec["val_s"] = time.perf_counter() - t
            if res.world_size > 1:
                dist.barrier()
            t = time.perf_counter()
            rng = [rng_state()]
            if res.world_size > 1:
                rng = [None] * res.world_size
                dist.all_gather_object(rng, rng_state())
            if writer and ckpt_path is not None and cfg.checkpoint:
                _write_atomic(
                    ckpt_path,
                    obj={
                        "format": CHECKPOINT_FORMAT,
                        "epoch": epoch,
                        "config": json.dumps(_config_dict(cfg)),
                        "started": started,
                        "model": tr.net.state_dict(),
                        "optimizer": tr.optimizer.state_dict(),
                        "scheduler": tr.scheduler.state_dict(),
                        "scaler": tr.scaler.state_dict()
                        if tr.scaler is not None
                        else {},
                        "counters": dataclasses.asdict(tr.step.counters),
                        "rng": rng,
                        "records": json.dumps(_clean(epochs + [rec])),
                    },
                )
            epochs.append(rec)
            rec["checkpoint_s"] = time.perf_counter() - t
            rec["epoch_s"] = rec["wall_s"] + rec["val_s"] + rec["checkpoint_s"]
            record["summary"] = summarize(epochs)
            if writer and json_path is not None:
                write_results(record, json_path)
            _say(cfg, res, _epoch_line(cfg, rec))
        if save_dir is not None and writer and start_epoch > cfg.epochs:
            evaluate(
                tr.net, val_loader, tr.step, save_dir
            )  # resumed after the last epoch
        record["status"] = "complete"
        record["finished"] = _now()
        record["summary"] = summarize(epochs)
        if writer and json_path is not None:
            write_results(record, json_path)
            record["json_path"] = str(json_path)
    except NonFiniteLossError as err:
        c = tr.step.counters
        stop(
            "stopped: non-finite loss",
            epoch,
            str(err),
            optimizer_steps=c.optimizer_steps,
            skipped_steps=c.skipped_steps,
            nonfinite_losses=c.nonfinite_losses,
            loss_scale=tr.scaler.get_scale() if tr.scaler is not None else None,
        )
        raise
    except KeyboardInterrupt:
        kept = _kept(cfg, epochs, json_path, ckpt_path)
        stop("interrupted", epoch, "interrupted (SIGINT)")
        raise Interrupted(f"interrupted in epoch {epoch}; {kept}") from None
    except DataError as err:
        kept = _kept(cfg, epochs, json_path, ckpt_path)
        stop("failed", epoch, _first_line(err))
        raise TrainError(
            f"{_first_line(err)}. Fix or remove that file. Epoch {epoch} stopped "
            f"unfinished; {kept}"
        ) from None
    except OSError as err:
        kept = _kept(cfg, epochs, json_path, ckpt_path)
        what = f"{err.filename}: " if err.filename else ""
        raise TrainError(
            f"could not write {what}{err.strerror or err} in epoch {epoch}; {kept}"
        ) from None
    return _clean(record)


def _earlier_epochs(
    checkpoint: dict, json_path: Path | None, name: str
) -> tuple[list[dict], str, list[dict]]:
    """(epoch records, start time, earlier resumptions) of the run a checkpoint
    continues.

    The records come from the results file as it was written (it has each epoch's
    ``checkpoint_s`` and ``epoch_s``, which the checkpoint cannot hold for its own
    epoch), where that file agrees with the checkpoint; else from the checkpoint."""
    epochs = list(checkpoint["records"])
    started = checkpoint.get("started") or _now()
    resumes: list[dict] = []
    earlier = _earlier_record(json_path)
    if earlier is not None and earlier.get("name") == name:
        written = {
            e.get("epoch"): e
            for e in earlier.get("epochs") or []
            if isinstance(e, dict)
        }
        same = ("epoch", "steps", "train_loss", "val_loss")
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


def _epoch_line(cfg: TrainConfig, r: dict) -> str:
    parts = [
        f"epoch {r['epoch']}/{cfg.epochs} {cfg.precision}: loss {r['train_loss']:.4f}"
    ]
    if "val_pixel_accuracy" in r:
        parts.append(f"val acc {r['val_pixel_accuracy']:.3f} mIoU {r['val_miou']:.3f}")
    parts.append(
        f"{r['wall_s']:.1f} s ({r['images_per_s']:.1f} img/s, data wait {r['data_wait_s']:.1f} s)"
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


# --- command line ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The CLI, one option per ``TrainConfig`` field."""
    parser = argparse.ArgumentParser(
        prog="python -m ampbook.train",
        description="Train ERFNet in fp32 or with AMP and record the run as JSON.",
    )
    for f in dataclasses.fields(TrainConfig):
        meta = dict(f.metadata)
        flag = meta.pop("flag", "--" + f.name.replace("_", "-"))
        default = meta.pop("cli_default", f.default)
        if f.type in ("bool", bool):
            action = "store_false" if f.default else "store_true"
            parser.add_argument(flag, dest=f.name, action=action, help=meta["help"])
        elif f.name == "progress":
            parser.add_argument(
                flag,
                dest=f.name,
                default=None,
                choices=meta["choices"],
                help=meta["help"],
            )
        else:
            kind = {"int": int, "float": float, "float | None": float}.get(
                str(f.type), str
            )
            parser.add_argument(flag, dest=f.name, type=kind, default=default, **meta)
    return parser


def command_line(cfg: TrainConfig) -> str:
    """The ``python -m ampbook.train ...`` command that runs ``cfg`` (options that differ
    from the command line's defaults)."""
    parts = ["python -m ampbook.train"]
    for f in dataclasses.fields(TrainConfig):
        meta = f.metadata
        flag = meta.get("flag", "--" + f.name.replace("_", "-"))
        default = meta.get("cli_default", f.default)
        value = getattr(cfg, f.name)
        if value == default:
            continue
        if f.type in ("bool", bool):
            parts.append(flag)
        elif f.name == "progress":
            parts.append(f"{flag} {'on' if value else 'off'}")
        elif value is None:
            continue
        else:
            parts.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


def config_from_args(argv: list[str] | None = None) -> TrainConfig:
    args = vars(build_parser().parse_args(argv))
    if args["progress"] is not None:
        args["progress"] = args["progress"] == "on"
    return TrainConfig(**args)


def main(argv: list[str] | None = None) -> int:
    """The command line: a known failure prints one ``error:`` line and exits nonzero
    (2: the settings, 1: the run stopped, 130: interrupted); what earlier epochs saved
    stays."""
    cfg = config_from_args(argv)
    rank, world, _ = _world()
    error = (
        f"error: rank {rank}: " if world > 1 else "error: "
    )  # each process speaks for itself
    try:
        record = run_training(cfg)
    except ConfigError as err:
        print(f"{error}{err}", file=sys.stderr)
        return 2
    except Interrupted as err:
        print(f"{error}{err}", file=sys.stderr)
        return 130
    except (NonFiniteLossError, TrainError) as err:
        print(f"{error}{err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"{error}interrupted before the run started; nothing was written",
            file=sys.stderr,
        )
        return 130
    if not cfg.quiet and record.get("json_path"):
        print(f"results: {record['json_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
