"""Training with fp16 gradients under three loss-scaling regimes: none, a fixed scale
(the paper's constant loss scaling: Micikevicius et al., "Mixed Precision Training",
ICLR 2018, arXiv:1710.03740), and ``torch.amp.GradScaler``'s dynamic scale.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from torch import nn

from ampbook.measure.timing import benchmark
from ampbook.numerics.gradstats import check_scale, emulate_fp16_grads

REGIMES = ("none", "fixed", "dynamic")
FP16_MODES = ("emulate", "autocast", "off")


@dataclass
class ScalingRun:
    """The record of one short training run, per step: the loss, the loss scale, the
    optimizer step skipped, the share of nonzero activation-gradient values flushed
    (emulation; NaN otherwise) and non-finite gradients."""

    regime: str
    fp16: str
    label: str
    losses: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    flushed: list[float] = field(default_factory=list)
    overflowed: list[bool] = field(default_factory=list)
    weights_finite: bool = True
    seconds: float = 0.0


def train_with_scaling(
    model: nn.Module,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    regime: str,
    *,
    scale: float = 8.0,
    fp16: str = "emulate",
    lr: float = 5e-4,
    init_scale: float | None = None,
    growth_interval: int | None = None,
    device: torch.device | str = "cpu",
    label: str | None = None,
    fp16_calls: list[tuple[str, bool]] | None = None,
) -> ScalingRun:
    """Train ``model`` (in place, Adam) one step per batch with fp16 gradients and the
    plain loss (``regime="none"``, no overflow check), the loss times ``scale``
    (``"fixed"``, no check) or ``torch.amp.GradScaler`` (``"dynamic"``: skips steps
    with inf/NaN gradients). ``fp16``: ``"emulate"`` (``emulate_fp16_grads``),
    ``"autocast"`` (a real fp16 forward) or ``"off"`` (the fp32 reference run)."""
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")
    if fp16 not in FP16_MODES:
        raise ValueError(f"fp16 must be one of {FP16_MODES}, got {fp16!r}")
    scale = check_scale(scale)
    device = torch.device(device)
    loss_fn = nn.CrossEntropyLoss(ignore_index=255)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    scaler = None
    if regime == "dynamic":
        kw = {}
        if init_scale is not None:
            kw["init_scale"] = check_scale(init_scale)
        if growth_interval is not None:
            if growth_interval < 1:
                raise ValueError(f"growth_interval must be >= 1, got {growth_interval}")
            kw["growth_interval"] = int(growth_interval)
        scaler = torch.amp.GradScaler(device.type, **kw)
    emu = emulate_fp16_grads(model, calls=fp16_calls) if fp16 == "emulate" else None
    run = ScalingRun(regime, fp16, label or regime)
    params = [p for p in model.parameters() if p.requires_grad]
    start = time.perf_counter()
    try:
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            opt.zero_grad(set_to_none=True)
            if emu is not None:
                emu.counter.reset()
            out = _forward(model, x, fp16, emu)
            loss = loss_fn(out.float(), y)
            if regime == "dynamic":
                s = scaler.get_scale()
                scaler.scale(loss).backward()
            else:
                s = scale if regime == "fixed" else 1.0
                (loss * s if s != 1.0 else loss).backward()
            grads = [p.grad for p in params if p.grad is not None]
            finite = not grads or bool(
                torch.stack([g.isfinite().all() for g in grads]).all()
            )
            run.losses.append(float(loss.detach()))
            run.scales.append(float(s))
            run.overflowed.append(not finite)
            run.flushed.append(emu.counter.flushed_fraction if emu else math.nan)
            if regime == "dynamic":
                scaler.step(opt)
                scaler.update()
                run.skipped.append(scaler.get_scale() < s)
            else:
                if s != 1.0:
                    for g in grads:
                        g.div_(s)
                opt.step()
                run.skipped.append(False)
    finally:
        if emu is not None:
            emu.remove()
    run.seconds = time.perf_counter() - start
    run.weights_finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    return run


def _forward(model: nn.Module, x: torch.Tensor, fp16: str, emu) -> torch.Tensor:
    """The forward pass in one of the fp16 modes (``emu``: the emulation, or None)."""
    if fp16 == "autocast":
        with torch.autocast(x.device.type, dtype=torch.float16):
            return model(x)
    with emu or nullcontext():
        return model(x)


def step_seconds(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    fp16: str = "off",
    repeats: int = 1,
    warmup: int = 1,
    fp16_calls: list[tuple[str, bool]] | None = None,
) -> float:
    """Median seconds of one forward + backward (no optimizer step) in an ``fp16``
    mode of ``train_with_scaling``."""
    if fp16 not in FP16_MODES:
        raise ValueError(f"fp16 must be one of {FP16_MODES}, got {fp16!r}")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    loss_fn = nn.CrossEntropyLoss(ignore_index=255)
    dev = next(model.parameters()).device
    x, y = x.to(dev), y.to(dev)
    emu = emulate_fp16_grads(model, calls=fp16_calls) if fp16 == "emulate" else None

    def one_step():
        model.zero_grad(set_to_none=True)
        loss_fn(_forward(model, x, fp16, emu).float(), y).backward()

    try:
        return benchmark(
            one_step, device=dev, warmup=warmup, repeats=repeats, number=1, min_time=0.0
        ).median_s
    finally:
        if emu is not None:
            emu.remove()
        model.zero_grad(set_to_none=True)
