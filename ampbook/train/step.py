"""The training step chapter 3 teaches: ``TrainStep`` (autocast around the forward pass
and the loss, a GradScaler for fp16, accumulation, clipping, skipped non-finite steps)
and ``build_training``, which makes the model, optimizer, poly scheduler, scaler and
loss a run trains with."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
from torch import nn

from ampbook.measure.memory import SavedTensorMeter
from ampbook.train.config import NonFiniteLossError, Resolved, TrainConfig


class PolyDecay:
    """lr factor ``(1 - epoch/epochs) ** power`` (a class: the scheduler saves it)."""

    def __init__(self, epochs: int, power: float):
        self.epochs, self.power = epochs, power

    def __call__(self, epoch: int) -> float:
        return max(0.0, 1.0 - min(epoch, self.epochs) / self.epochs) ** self.power


def _total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all gradients together (non-finite when any element is)."""
    norms = [torch.linalg.vector_norm(g) for g in grads]
    return torch.linalg.vector_norm(torch.stack(norms)) if norms else torch.zeros(())


@dataclass
class StepCounters:
    optimizer_steps: int = 0
    skipped_steps: int = 0
    nonfinite_losses: int = 0
    consecutive_skipped: int = 0


class TrainStep:
    """The runner's training step, also timed by ``python -m booktools.bench_step``:
    ``step(images, labels, meter=None)`` runs one batch under autocast, backward
    (scaled with a GradScaler), and at the end of each accumulation window the optimizer
    step, skipped on non-finite gradients.

    The losses and skip flags stay on the device and are read in one transfer every
    ``sync_every`` batches (that call returns the batch's loss, the others None;
    ``synced`` says which); the counters stay exact, and ``max_nonfinite`` consecutive
    skips raise ``NonFiniteLossError`` at the read that sees them. Only the fused Adam
    skips on the device; others read the flag at each optimizer step. A window never
    crosses an epoch (``begin_epoch``): the last one may be shorter, its losses divided
    by its own length, so a checkpoint between epochs holds no pending gradients."""

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
        sync_every: int = 1,
    ):
        self.model, self.optimizer, self.criterion = model, optimizer, criterion
        self.device, self.autocast_dtype, self.scaler = device, autocast_dtype, scaler
        self.accumulate, self.clip_grad = accumulate, clip_grad
        self.channels_last, self.max_nonfinite = channels_last, max_nonfinite
        self.sync_every = sync_every
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.counters = StepCounters()
        self.synced = False  # whether the last call read its values to the host
        self._fused = bool(optimizer.defaults.get("fused"))
        self._losses: list[torch.Tensor] = []  # on the device, not read yet
        self._skips: list[torch.Tensor] = []  # one 0/1 flag per optimizer step
        self._read: list[float] = []  # losses read since begin_epoch
        self._batches_read = 0  # batches whose loss has been read
        self._micro = 0  # batches done in the current window
        self._window = accumulate  # length of the current window
        self._remaining: int | None = None  # batches left in the epoch (None: unknown)
        self._ddp = isinstance(  # (a compiled model wraps the DDP module)
            getattr(model, "_orig_mod", model), nn.parallel.DistributedDataParallel
        )

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
    ) -> float | None:
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
        nothing = contextlib.nullcontext()
        with self.model.no_sync() if self._ddp and not last else nothing:
            with meter if meter is not None else nothing, self.autocast():
                loss = self.criterion(self.model(images), labels)
            scaled = loss / self._window if self._window > 1 else loss
            (
                self.scaler.scale(scaled) if self.scaler is not None else scaled
            ).backward()
        self._losses.append(loss.detach().float())
        self._micro += 1
        if self._remaining is not None:
            self._remaining -= 1
        if last:
            self._micro = 0
            self._optimizer_step()
        self.synced = len(self._losses) >= self.sync_every
        return self.sync()[-1] if self.synced else None

    def begin_epoch(self, batches: int) -> None:
        """Start an epoch of ``batches`` batches: windows and losses read restart."""
        self._micro, self._remaining, self._read = 0, batches, []

    def _optimizer_step(self) -> None:
        """One optimizer step. With a GradScaler the gradients are scaled until
        ``scaler.unscale_``, so clipping comes after it (on scaled gradients
        ``clip_grad_norm_`` would measure the scale times the norm and hand the
        optimizer a gradient the scale times too small); ``scaler.step`` skips a step
        whose gradients are not finite. Shown on the page in chapter 3
        (03_amp_training)."""
        if self.scaler is not None:
            if self.clip_grad is not None:
                self.scaler.unscale_(self.optimizer)
                nn.utils.clip_grad_norm_(self.params, self.clip_grad)
            self.scaler.step(self.optimizer)  # skipped on inf/NaN gradients
            skipped = _scaler_found_inf(self.scaler, self.optimizer)
            self.scaler.update()  # halves the scale after a skip
        else:
            if self.clip_grad is not None:
                norm = nn.utils.clip_grad_norm_(self.params, self.clip_grad)
            else:
                norm = _total_norm([p.grad for p in self.params if p.grad is not None])
            skipped = (~torch.isfinite(norm)).float()
            if self._fused:  # the fused kernel skips on the flag, on the device
                self.optimizer.found_inf = skipped
                try:
                    self.optimizer.step()
                finally:
                    del self.optimizer.found_inf
            elif not skipped.item():  # any other Adam: the host decides
                self.optimizer.step()
        self._skips.append(skipped.to(self.device))

    def sync(self) -> list[float]:
        """Read the pending losses and skip flags to the host (one transfer), update
        the counters and return the losses read."""
        if not self._losses and not self._skips:
            return []
        values = torch.stack(self._losses + self._skips).tolist()
        losses, skips = values[: len(self._losses)], values[len(self._losses) :]
        self._losses, self._skips = [], []
        self._read += losses
        self._batches_read += len(losses)
        c = self.counters
        c.nonfinite_losses += sum(not math.isfinite(v) for v in losses)
        worst = 0
        for skipped in skips:
            if skipped:
                c.skipped_steps += 1
                c.consecutive_skipped += 1
                worst = max(worst, c.consecutive_skipped)
            else:
                c.optimizer_steps += 1
                c.consecutive_skipped = 0
        if worst >= self.max_nonfinite:
            scale = self.scaler.get_scale() if self.scaler is not None else "no scaler"
            seen = ""
            if self.sync_every > 1:
                seen = f" (read every {self.sync_every} batches; seen after batch "
                seen += f"{self._batches_read})"
            raise NonFiniteLossError(
                f"{worst} consecutive optimizer steps had non-finite gradients"
                f"{seen} (batches with a non-finite loss so far: "
                f"{c.nonfinite_losses}; loss scale: {scale}); stopping instead of "
                "training on NaN. Lower the learning rate, check the data for "
                "NaN/inf, or try another precision (fp16 overflows above 65504)."
            )
        return losses

    def take_losses(self) -> list[float]:
        """Every loss read since ``begin_epoch`` (call ``sync()`` first for all)."""
        return list(self._read)


def _scaler_found_inf(
    scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer
) -> torch.Tensor:
    """1.0 when the GradScaler's last ``step`` found inf/NaN gradients (so skipped),
    else 0.0, on the device (call between ``step`` and ``update``)."""
    found = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
    flags = [f.to(scaler._scale.device, non_blocking=True) for f in found.values()]
    return (torch.stack(flags).sum() > 0).float()


def compiled(model: nn.Module, mode: str) -> nn.Module:
    """``torch.compile(model, mode=mode)`` (``"aot_eager"``: that backend), with static
    shapes: an epoch's short last batch compiles its own graph, not a dynamic one."""
    how = {"backend": mode} if mode == "aot_eager" else {"mode": mode}
    return torch.compile(model, dynamic=False, **how)


def optimizer_impl(optimizer: torch.optim.Optimizer) -> str:
    """Which implementation ``optimizer.step`` runs: ``"fused"``, ``"foreach"`` or
    ``"for-loop"`` (torch's own choice: foreach when every parameter is on a GPU)."""
    d = optimizer.defaults
    if d.get("fused"):
        return "fused"
    if d.get("foreach") is False:
        return "for-loop"
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if d.get("foreach") or (params and all(p.is_cuda for p in params)):
        return "foreach"
    return "for-loop"


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
    """Model, optimizer, poly scheduler, scaler, loss and step for ``cfg`` (seeded)."""
    from ampbook.segmentation.cityscapes import IGNORE_INDEX, NUM_CLASSES
    from ampbook.segmentation.model import ERFNet

    torch.manual_seed(cfg.seed)
    net = ERFNet(NUM_CLASSES, fp16_stream=cfg.fp16_stream).to(res.device)
    if cfg.channels_last:
        net = net.to(memory_format=torch.channels_last)
    model: nn.Module = net
    if res.world_size > 1:
        model = nn.parallel.DistributedDataParallel(
            net, device_ids=[res.device.index] if res.device.type == "cuda" else None
        )
    if cfg.compile is not None:
        model = compiled(model, cfg.compile)
    optimizer = torch.optim.Adam(
        net.parameters(),
        lr=cfg.lr,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=cfg.weight_decay,
        fused=True if cfg.fused_optimizer else None,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, PolyDecay(cfg.epochs, cfg.poly_power)
    )
    scaler = torch.amp.GradScaler(res.device.type) if res.grad_scaler else None
    weight = None
    if class_weights:
        weight = torch.tensor(class_weights, dtype=torch.float32, device=res.device)
    criterion = nn.CrossEntropyLoss(weight=weight, ignore_index=IGNORE_INDEX)
    same = ("accumulate", "clip_grad", "channels_last", "max_nonfinite", "sync_every")
    kw = {k: getattr(cfg, k) for k in same}
    step = TrainStep(
        model, optimizer, criterion, res.device, res.autocast_dtype, scaler, **kw
    )
    return Training(model, net, optimizer, scheduler, scaler, criterion, step)


def step_batch(cfg: TrainConfig, device: torch.device, seed: int = 1) -> tuple:
    """One random batch (images, labels) of ``cfg``'s size on ``device``: every timed
    step (chapter 5's rounds, chapter 7's ladder, the step bench) takes the same one."""
    from ampbook.segmentation.cityscapes import NUM_CLASSES

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(cfg.batch_size, 3, cfg.height, cfg.width, generator=g)
    y = torch.randint(
        0, NUM_CLASSES, (cfg.batch_size, cfg.height, cfg.width), generator=g
    )
    return x.to(device), y.to(device)
