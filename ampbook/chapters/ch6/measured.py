"""Section 4 of the doctor's report: the runner's own step timed here per precision,
on a CPU at a small size by chapter 5's rounds method, on CUDA at the full size."""

from __future__ import annotations

import contextlib
import copy
import math
import statistics
import time
from typing import Any, Sequence

import torch
from torch import nn

from ampbook.chapters.ch6.outputs import probe, targets
from ampbook.core import cli
from ampbook.core.env import cpu_name
from ampbook.core.precision import AUTOCAST_DTYPES, backend_flags
from ampbook.core.terminal import duration_text
from ampbook.measure.memory import SavedTensorMeter
from ampbook.measure.timing import benchmark, time_rounds
from ampbook.predict.pace import speedup_verdict
from ampbook.predict.specs import DoctorError, first_line, shape_text
from ampbook.results import PEAK_CUDA
from ampbook.results import SAVED_FOR_BACKWARD as SAVED
from ampbook.train import TrainStep

# Largest batch x pixels at which a CPU step is timed in fp16 (many times fp32's).
CPU_FP16_MAX_PIXELS = 2 * 32 * 32
CPU_MEASURE_SIDE = 32  # a CPU step's input is scaled to about this many pixels a side
CPU_ROUNDS = 5  # rounds of the CPU timing (chapter 5's method)


def _scaled(shape: Sequence[int], side: int) -> tuple[int, ...]:
    """``shape``'s last two dimensions (one for a sequence) scaled to about ``side``."""
    shape = tuple(shape)
    n = min(2, len(shape) - 1)
    if n <= 0:
        return shape
    spatial = shape[-n:]
    f = max(1, math.ceil(max(spatial) / side))
    small = tuple(min(s, max(32, round(s / f / 32) * 32)) for s in spatial)
    return shape[:-n] + small


def _accepted(model, shape, batch, fallback) -> tuple[int, ...]:
    """``shape`` where the model accepts it at ``batch``, else ``fallback``."""
    try:
        probe(model, shape, batch, None)
    except DoctorError:
        return tuple(fallback)
    return shape


def measure_size(model, shape, batch) -> tuple[tuple[int, ...], int]:
    """Where a CPU times steps: a small input (the full one where the model accepts no
    other), batch <= 2."""
    small = _scaled(shape, CPU_MEASURE_SIDE)
    return _accepted(model, small, min(batch, 2), shape), min(batch, 2)


def _variants(precisions: Sequence[str]):
    """CUDA's (label, precision, tf32, channels_last, cudnn_benchmark, skip reason)."""
    out = [("fp32 (TF32 on)", "fp32", True, False, False, None),
           ("fp32 (TF32 off)", "fp32", False, False, False, None)]  # fmt: skip
    for p in precisions[1:]:
        ok = p != "amp-bf16" or torch.cuda.is_bf16_supported()
        why = None if ok else "this GPU has no bf16"
        out += [(p, p, True, False, False, why),
                (f"{p} + channels_last", p, True, True, False, why),
                (f"{p} + cudnn.benchmark", p, True, False, True, why)]  # fmt: skip
    return out


def _forward_step(model, criterion, device, autocast_dtype, channels_last):
    """The forward pass and loss alone, without autograd (``--forward-only``)."""

    def step(x, y, meter=None):
        if channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        cast = contextlib.nullcontext()
        if autocast_dtype is not None:
            cast = torch.autocast(device.type, dtype=autocast_dtype)
        with torch.no_grad(), cast, meter or contextlib.nullcontext():
            return criterion(model(x), y)

    return step


class _Variant:
    """One timed variant: its own model, optimizer and step, and its CUDA flags."""

    def __init__(self, model, device, prec, tf32, cl, bench, x, y, backward=True):
        net = copy.deepcopy(model).to(device)
        if cl:
            net = net.to(memory_format=torch.channels_last)
        crit = nn.MSELoss() if y.is_floating_point() else nn.CrossEntropyLoss()
        dtype = AUTOCAST_DTYPES[prec]
        self.net, self.device = net, device
        if backward:
            opt = torch.optim.Adam(net.parameters(), lr=1e-4)
            scaler = torch.amp.GradScaler(device.type) if prec == "amp-fp16" else None
            self.step = TrainStep(
                net, opt, crit, device, dtype, scaler, channels_last=cl
            )
        else:
            self.step = _forward_step(net, crit, device, dtype, cl)
        self.x, self.y = x.to(device), y.to(device)
        self.tf32, self.bench = tf32, bench

    def flags(self):
        if self.device.type != "cuda":
            return contextlib.nullcontext()
        return backend_flags(tf32=self.tf32, cudnn_benchmark=self.bench)

    def time(self, warmup: int, repeats: int) -> list[float]:
        with self.flags():
            r = benchmark(
                self.step, lambda: (self.x, self.y), device=self.device,
                warmup=warmup, repeats=repeats, number=1, min_time=0.0, buffers=1,
                check_inputs=False,
            )  # fmt: skip
        return list(r.times_s)

    def memory(self) -> tuple[int, str]:
        with self.flags():
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(self.device)
                self.step(self.x, self.y)
                return torch.cuda.max_memory_allocated(self.device), PEAK_CUDA
            meter = SavedTensorMeter(model=self.net)
            self.step(self.x, self.y, meter=meter)
            return meter.new_bytes, SAVED


def _timed(times: Sequence[float]) -> dict[str, Any]:
    return {"step_s": statistics.median(times), "min_step_s": min(times),
            "samples": len(times)}  # fmt: skip


def _batch_for(model, shape, batch, loss, seed=0):
    out = probe(model, shape, batch, None)[0]
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *shape, generator=g), targets(loss, out, g)


def as_progress(progress) -> cli.Progress:
    if isinstance(progress, cli.Progress):
        return progress
    return cli.Progress("doctor", progress)


class CpuGroup:
    """Precisions timed together on the CPU at one size by chapter 5's rounds method,
    after a first, untimed step each (oneDNN builds its kernels; memory counted)."""

    def __init__(self, model, shape, batch, loss, precisions, rounds, backward=True):
        self.model, self.shape, self.batch = model, tuple(shape), batch
        self.loss, self.precisions = loss, list(precisions)
        self.rounds, self.backward, self.done = rounds, backward, 0
        self.table: list[dict] = []  # one row per precision
        self.steps: dict[str, tuple] = {}  # precision: (step, inputs, device)
        self.first_s: dict[str, float] = {}  # the first, untimed step's seconds
        self.times: dict[str, list[float]] = {}

    def warm(self, progress: cli.Progress) -> None:
        x, y = _batch_for(self.model, self.shape, self.batch, self.loss)
        dev = torch.device("cpu")
        for p in self.precisions:
            row = {"variant": p, "precision": p, "skipped": None}
            self.table.append(row)
            try:
                progress(f"first {p} step on the cpu (it builds the kernels; untimed)")
                t0 = time.perf_counter()
                v = _Variant(self.model, dev, p, False, False, False, x, y,
                             self.backward)  # fmt: skip
                row["memory_bytes"], row["memory_measure"] = v.memory()
            except Exception as e:  # e.g. an op without a kernel for this dtype here
                row["skipped"] = f"failed: {type(e).__name__}: {first_line(e)}"
                continue
            self.first_s[p] = time.perf_counter() - t0
            self.steps[p] = (v.step, (v.x, v.y), dev)
            self.times[p] = []

    def seconds_left(self) -> float:
        each = [
            statistics.median(t) if t else self.first_s[p]
            for p, t in self.times.items()
        ]
        return (self.rounds - self.done) * sum(each)

    def time_round(self) -> None:
        for p, ts in time_rounds(self.steps, 1, warmup=False).items():
            self.times[p] += ts
        self.done += 1

    def rows(self) -> list[dict]:
        base = self.times.get("fp32")
        for row in self.table:
            if not (t := self.times.get(row["precision"])):
                continue
            row.update(_timed(t))
            if row["precision"] == "fp32":
                row["speedup"] = 1.0
            elif base:
                ratios = [a / b for a, b in zip(base, t)]
                row.update(speedup=statistics.median(ratios), ratios=ratios)
        return self.table


def time_groups(groups: Sequence[CpuGroup], progress=None) -> None:
    """Every group warmed, then timed round by round; progress counts steps left."""
    progress = as_progress(progress or False)
    for g in groups:
        g.warm(progress)
    for k, g in enumerate(groups):
        if not g.steps:
            continue
        where = f"batch {g.batch} x {shape_text(g.shape)}"
        progress(f"measuring {', '.join(g.steps)} on the cpu at {where}")
        for i in range(g.rounds):
            g.time_round()
            todo = [h for h in groups[k:] if h.steps and h.done < h.rounds]
            left = sum(h.seconds_left() for h in todo)
            tail = f", about {duration_text(left)} left" if todo else ""
            what = f"round {i + 1} of {g.rounds}" if g.rounds > 1 else "one step"
            progress(f"measuring on cpu: {what}{tail}")


def measure(
    model: nn.Module,
    shape: Sequence[int],
    batch: int,
    loss: str,
    precisions: Sequence[str],
    device: torch.device,
    repeats: int = 3,
    size: tuple[Sequence[int], int] | None = None,
    rounds: int = CPU_ROUNDS,
    progress: bool | cli.Progress | None = None,
    backward: bool = True,
) -> dict[str, Any]:
    """Section 4: the runner's step timed per precision (and layout/flag) here. On a
    CPU (at ``size``, else ``measure_size``'s) fp32 and amp-bf16 in ``rounds`` rounds,
    the verdict on their per-round ratios; amp-fp16 for one step beside one fp32 step
    at a tiny size. On CUDA every variant at the full size, ``repeats`` steps each."""
    tell = as_progress(progress)
    if device.type != "cuda":
        small = size or measure_size(model, shape, batch)
        return _measure_cpu(model, tuple(small[0]), int(small[1]), loss, precisions,
                            rounds, tell, backward)  # fmt: skip
    x, y = _batch_for(model, shape, batch, loss)
    rows = []
    todo = _variants(precisions)
    tell(f"measuring {len(todo)} variants on {device} at batch {batch}")
    tell.start()
    for i, (label, prec, tf32, cl, bench, why) in enumerate(todo):
        row = {"variant": label, "precision": prec, "skipped": why}
        rows.append(row)
        if why is not None:
            continue
        try:  # two warm-up steps (the first calls build cuDNN's kernels)
            v = _Variant(model, device, prec, tf32, cl, bench, x, y, backward)
            times = v.time(2, repeats)
            row["memory_bytes"], row["memory_measure"] = v.memory()
            row.update(_timed(times))
            del v
            torch.cuda.empty_cache()
        except Exception as e:  # e.g. an op without a kernel for this dtype here
            row["skipped"] = f"failed: {type(e).__name__}: {first_line(e)}"
        tell.count(f"measuring on {device.type}", i + 1, len(todo), "variant")
    base = rows[0].get("step_s")
    for r in rows:
        if r.get("step_s") and base:
            r["speedup"] = base / r["step_s"]
    return {"device": "cuda", "device_name": torch.cuda.get_device_name(device),
            "input": list(shape), "batch": batch, "rows": rows,
            "backward": backward}  # fmt: skip


def _measure_cpu(
    model, mshape, mbatch, loss, precisions, rounds, tell, backward
) -> dict[str, Any]:
    """``measure`` on a CPU: fp32 and amp-bf16 in rounds, amp-fp16 at a tiny size."""
    main = [p for p in precisions if p != "amp-fp16"]
    groups = [CpuGroup(model, mshape, mbatch, loss, main, rounds, backward)]
    if "amp-fp16" in precisions:
        tiny = _scaled(mshape, int(math.sqrt(CPU_FP16_MAX_PIXELS / 2)))
        tiny = _accepted(model, tiny, 2, mshape)
        groups.append(CpuGroup(model, tiny, 2, loss, ["fp32", "amp-fp16"], 1, backward))
    time_groups(groups, tell)
    rows = groups[0].rows()
    for fp32, fp16 in [g.rows() for g in groups[1:]]:  # fp16 beside its fp32 step
        fp16.update(input=list(tiny), batch=2)
        if fp16.get("speedup"):
            fp16["note"] = (
                f"one step at batch 2 x {shape_text(tiny)} against one fp32 step "
                f"there ({fp32['step_s'] * 1e3:,.1f} ms), a single timing: no spread "
                "to judge it by"
            )
        rows = sorted(rows + [fp16], key=lambda r: precisions.index(r["precision"]))
    ratios = next((r.get("ratios") for r in rows if r["precision"] == "amp-bf16"), 0)
    verdict = speedup_verdict(ratios, "amp-bf16") if ratios else None
    return {"device": "cpu", "device_name": cpu_name(), "input": list(mshape),
            "batch": mbatch, "rounds": rounds, "rows": rows,
            "rounds_verdict": verdict, "backward": backward}  # fmt: skip
