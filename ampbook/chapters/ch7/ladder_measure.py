"""Measuring one cell of the ladder (``measure_rung``) with the runner's own step:
step time, kernel and idle time, peak memory, epochs through ``run_training`` and the
cost model's roofline bound (of eager operators: at a compiled rung a yardstick)."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import statistics
import time
from typing import Callable

from ampbook.chapters.ch7.rungs import LadderSpec, rung_config
from ampbook.core.terminal import quiet_stderr_fd


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(step: Callable, args: tuple, n: int, device) -> list[float]:
    """Seconds per step of ``n`` calls ``step(*args)`` in a row, start to start (CUDA
    events on a GPU, no sync in between)."""
    import torch

    _sync(device)
    if device.type == "cuda":
        events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        for i in range(n):
            events[i].record()
            step(*args)
        events[n].record()
        torch.cuda.synchronize(device)
        return [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(n)]
    marks = [time.perf_counter()]
    for _ in range(n):
        step(*args)
        marks.append(time.perf_counter())
    return [b - a for a, b in zip(marks, marks[1:])]


def union_us(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``intervals``: time covered twice counts once.

    Shown on the page in chapter 7 (07_making_amp_pay)."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _annotation(e) -> bool:
    return bool(getattr(e, "is_user_annotation", False))


def _top_level(e) -> bool:
    """No operator encloses ``e`` (record_function annotations do not count)."""
    p = e.cpu_parent
    while p is not None and _annotation(p):
        p = p.cpu_parent
    return p is None


def profile_steps(step: Callable, args: tuple, n: int, device) -> dict:
    """``n`` calls ``step(*args)`` under ``torch.profiler``, per step: the device's
    busy time (``kernel_s``: the union of a GPU's kernels, copies and fills; on a CPU,
    of the operators, the optimizer's under its annotation included), the count of
    kernels (GPU) or top-level operators (CPU), and the profiled wall time.

    Shown on the page in chapter 7 (07_making_amp_pay)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    _sync(device)
    # quiet_stderr_fd keeps kineto's start and stop lines off the page
    with quiet_stderr_fd(), profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(n):
            step(*args)
        _sync(device)  # the wall time ends when the device is done
        wall = time.perf_counter() - start
    kind = DeviceType.CUDA if cuda else DeviceType.CPU
    # record_function annotations (Optimizer.step's) are not operators
    spans = [e for e in prof.events() if e.device_type == kind and not _annotation(e)]
    busy_us = union_us([(e.time_range.start, e.time_range.end) for e in spans])
    count = len(spans) if cuda else sum(1 for e in spans if _top_level(e))
    return {
        "kernel_s": busy_us / n / 1e6,
        "kernels_per_step": count / n,
        "profiled_step_s": wall / n,
    }


def traced_bound(
    ceil, precision: str, fp16_stream: bool, batch: int, height: int, width: int
) -> tuple[float, int]:
    """The cost model's bound on one ERFNet step and its saved bytes."""
    from ampbook.predict import roofline
    from ampbook.predict.steptrace import trace_step
    from ampbook.segmentation.cityscapes import NUM_CLASSES
    from ampbook.segmentation.model import ERFNet

    net = ERFNet(NUM_CLASSES, fp16_stream=fp16_stream)
    trace = trace_step(net, batch, height, width, precision)
    bound = roofline.predict(trace, ceil).min_step_s
    return bound, int(trace.saved_tensors["new_bytes"])


def _epoch_phase(cfg) -> dict:
    """Train ``cfg`` for its epochs through the runner; the epochs after the first."""
    import warnings

    from ampbook.train import run_training

    with warnings.catch_warnings():  # rung 0's 4 workers on a small machine are the
        # post's setting, on purpose
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        rec = run_training(dataclasses.replace(cfg, out=None, name=None))
    epochs = rec["epochs"]
    timed = epochs[1:] or epochs
    ips = statistics.median(e["images"] / e["wall_s"] for e in timed)
    wait = statistics.median(e["data_wait_s"] / e["wall_s"] for e in timed)
    compile_s = [e.get("compile_s") for e in epochs if e.get("compile_s") is not None]
    extra = {"epoch_compile_s": sum(compile_s)} if compile_s else {}
    saved = [e.get("saved_tensor_bytes") for e in epochs]
    return {
        "images_per_s": ips,
        "data_wait_share": wait,
        "saved_tensor_bytes": max((b for b in saved if b is not None), default=None),
        "epoch_wall_s": statistics.median(e["wall_s"] for e in timed),
        "epoch_images": int(timed[-1]["images"]),
        **extra,
    }


def measure_rung(
    spec: LadderSpec, index: int, mode: str, device=None, partial=None
) -> dict:
    """One cell: rung ``index`` in ``mode``; ``partial`` is given it marked
    ``"epoch": "pending"`` before the costlier epochs."""
    import torch

    from ampbook.core.devices import pick_device
    from ampbook.core.precision import backend_flags
    from ampbook.measure.memory import current_rss_bytes, peak_rss_bytes, reset_peak_rss
    from ampbook.measure.timing import machine_load
    from ampbook.predict.roofline import Ceilings
    from ampbook.train import build_training, validate
    from ampbook.train.step import step_batch

    dev = pick_device(device or spec.device)
    cfg = rung_config(spec, index, mode, str(dev))
    res = validate(cfg)
    cuda = dev.type == "cuda"
    cell: dict = {"rung": index, "mode": mode, "status": "ok", "error": None}
    gc.collect()
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        cell["reserved_at_start_bytes"] = torch.cuda.memory_reserved(dev)
    tf32, benchmark = cfg.tf32 == "on", bool(cfg.cudnn_benchmark)
    with backend_flags(tf32=tf32, cudnn_benchmark=benchmark):
        step = build_training(cfg, res).step
        x, y = step_batch(cfg, dev)  # the same batch every step
        start = time.perf_counter()
        step(x, y)
        _sync(dev)
        cell["first_step_s"] = time.perf_counter() - start
        for _ in range(spec.warmup - 1):
            step(x, y)
        # The peaks of the timed steps alone: cuDNN's algorithm search (warm-up) tries
        # workspaces a training step never needs again.
        _sync(dev)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        else:
            reset_peak_rss()
            rss0 = current_rss_bytes() or peak_rss_bytes()
        times = timed_steps(step, (x, y), spec.steps, dev)
        if cuda:
            cell["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(dev)
            cell["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
            cell["memory_bytes"] = cell["peak_allocated_bytes"]
        else:
            cell["peak_rss_growth_bytes"] = max(peak_rss_bytes() - rss0, 0)
        prof = profile_steps(step, (x, y), spec.profile_steps, dev)
    cell.update(step_s=statistics.median(times), step_times_s=times, **prof)
    cell["idle_s"] = max(cell["step_s"] - cell["kernel_s"], 0.0)
    del step, x, y
    if partial is not None:
        partial({**cell, "epoch": "pending"})
    _release(bool(cfg.compile))
    cell.update(_epoch_phase(cfg))
    if not cuda:  # the book's memory figure on a CPU: the bytes saved for backward
        cell["memory_bytes"] = cell["saved_tensor_bytes"]
    ceil = Ceilings.for_device(dev, cfg.tf32 == "on")
    size = (spec.batch_size, spec.height, spec.width)
    bound = traced_bound(ceil, cfg.precision, cfg.fp16_stream, *size)[0]
    cell.update(bound_s=bound, ceilings=ceil.name, bound_share=bound / cell["step_s"],
                load_average=machine_load()["load1"], epoch="measured")  # fmt: skip
    _release(bool(cfg.compile))
    return cell


def _release(compiled: bool) -> None:
    import torch

    if compiled:
        torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def measure_safely(
    spec: LadderSpec, index: int, mode: str, partial: Callable | None = None
) -> dict:
    """``measure_rung``, a failure recorded as the cell's error (one line); a failure
    in the epochs keeps the step measured before it."""
    early: dict = {}

    def keep(cell: dict) -> None:
        early.update(cell)
        if partial is not None:
            partial(cell)

    try:
        return measure_rung(spec, index, mode, partial=keep)
    except KeyboardInterrupt:
        raise
    except Exception as err:  # a rung that fails is reported; the ladder goes on
        text = str(err).strip().splitlines()
        msg = f"{type(err).__name__}: {text[0] if text else ''}"[:400]
        with contextlib.suppress(Exception):  # cleaning up after a failure
            _release(True)
        if early:  # the step was measured; the epochs failed
            return {**early, "epoch": "error", "epoch_error": msg}
        return {"rung": index, "mode": mode, "status": "error", "error": msg}
