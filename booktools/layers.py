"""Measured time per ERFNet module beside the cost model's prediction, and the loader
sweep as a results record.

``profile_layers(precision, batch_size, height, width, device)`` runs the training
runner's own step (``ampbook.train.build_training``) a few times under
``torch.profiler`` and attributes the time to the innermost module running, as
``ampbook.predict.steptrace`` attributes its FLOPs and bytes:

* forward: every module's forward is wrapped in a profiler range (global module hooks);
  a module's time is its range minus the ranges of the modules inside it; the loss (the
  runner's criterion) is the scope ``(loss)``;
* backward: each autograd node carries the sequence number of the forward operator that
  made it; the node's time goes to the module whose range held that operator.

On CUDA the time is GPU kernel time (the profiler's device time of the operators and
their children); on a CPU it is the operators' CPU time. What no module claims (the
optimizer, the GradScaler, gradient accumulation) is ``unattributed_s``. Times are per
step: the sum over the profiled steps divided by their number. ``step_s`` is the median
wall time of the same step timed without the profiler (synchronised), the figure to hold
the profile's sum against.

The record (schema ``ampbook.layer_profile/1``, read by ``ampbook.results``)::

    {"schema", "created", "environment", "device_key", "precision", "tf32",
     "channels_last", "cudnn_benchmark", "batch_size", "height", "width", "steps",
     "warmup",
     "time_source": "cuda" | "cpu", "step_s", "predicted_step_s", "ceilings",
     "unattributed_s", "layers": [{"scope", "type", "measured_s", "forward_s",
                                   "backward_s", "predicted_s"}]}

``loader_record(...)`` is ``ampbook.chapters.ch5.bench_loader.measure_loader``'s
result with ``schema`` ``ampbook.loader_sweep/1``, ``created`` and ``environment``
added.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
import time
from pathlib import Path

import torch

from ampbook.core.args import is_positive_int
from ampbook.predict.roofline import Ceilings, predict
from ampbook.predict.steptrace import LOSS, trace_step
from ampbook.results import LAYER_SCHEMA, LOADER_SCHEMA, read_layer_profile, read_loader

RANGE_PREFIX = "ampbook.layer::"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class _Ranges:
    """Global module hooks that open a profiler range per module forward."""

    def __init__(self, names: dict[int, str]):
        self.names = names
        self.stack: list = []

    def pre(self, module, args):
        name = self.names.get(id(module))
        if name is not None:
            rf = torch.autograd.profiler.record_function(RANGE_PREFIX + name)
            rf.__enter__()
            self.stack.append((id(module), rf))

    def post(self, module, args, output):
        if self.stack and self.stack[-1][0] == id(module):
            self.stack.pop()[1].__exit__(None, None, None)


def _attribute(events, cuda: bool) -> tuple[dict[str, list[float]], float]:
    """{scope: [forward us, backward us]} and the total measured time (us) of the trace.

    Only host-side events count: with CUDA activity the profiler also lists each range
    as a GPU-side annotation spanning its kernels, which would count the same time
    twice. A host
    event's device time is the time of the kernels it and its children launched."""
    from torch.autograd import DeviceType

    events = [e for e in events if e.device_type == DeviceType.CPU]
    t = (lambda e: e.device_time_total) if cuda else (lambda e: e.cpu_time_total)
    times: dict[str, list[float]] = {}
    seq_scope: dict[int, str] = {}

    def walk(event, scope):
        for child in event.cpu_children:
            if child.name.startswith(RANGE_PREFIX):
                continue
            if child.sequence_nr >= 0 and child.sequence_nr not in seq_scope:
                seq_scope[child.sequence_nr] = scope
            walk(child, scope)

    def nested_ranges(event):
        """The ranges directly inside ``event`` (through any operators between)."""
        out = []
        for child in event.cpu_children:
            if child.name.startswith(RANGE_PREFIX):
                out.append(child)
            else:
                out.extend(nested_ranges(child))
        return out

    for e in events:
        if e.name.startswith(RANGE_PREFIX):
            scope = e.name[len(RANGE_PREFIX) :]
            own = t(e) - sum(t(c) for c in nested_ranges(e))
            times.setdefault(scope, [0.0, 0.0])[0] += max(own, 0.0)
            walk(e, scope)
    for e in events:
        if (
            e.name.startswith("autograd::engine::evaluate_function:")
            and e.sequence_nr in seq_scope
        ):
            times.setdefault(seq_scope[e.sequence_nr], [0.0, 0.0])[1] += t(e)
    if cuda:
        total = sum(e.self_device_time_total for e in events)
    else:
        total = sum(t(e) for e in events if e.name == "ampbook.step")
    return times, total


_TRACES: dict = {}  # profile_layers' traces in this process


def profile_layers(
    precision: str,
    batch_size: int,
    height: int,
    width: int,
    device: str | torch.device = "auto",
    *,
    steps: int = 3,
    warmup: int = 2,
    tf32: bool = True,
    timed_steps: int = 5,
    ceilings: Ceilings | None = None,
    seed: int = 0,
    channels_last: bool = False,
    cudnn_benchmark: bool = False,
) -> dict:
    """Profile the runner's training step per module; return the record (module
    docstring)."""
    from ampbook.core.devices import find_device, pick_device
    from ampbook.core.env import environment
    from ampbook.core.precision import backend_flags
    from ampbook.train import TrainConfig, build_training, validate

    for label, v in (
        ("batch_size", batch_size),
        ("height", height),
        ("width", width),
        ("steps", steps),
        ("timed_steps", timed_steps),
    ):
        if not is_positive_int(v):
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    dev = pick_device(device)
    cfg = TrainConfig(
        precision=precision,
        device=str(dev),
        height=height,
        width=width,
        batch_size=batch_size,
        tf32="on" if tf32 else "off",
        seed=seed,
        checkpoint=False,
        quiet=True,
        channels_last=channels_last,
        cudnn_benchmark=cudnn_benchmark,
    )
    res = validate(cfg)
    with backend_flags(tf32=tf32, cudnn_benchmark=cudnn_benchmark):
        training = build_training(cfg, res)
        walls, times, total_us = _measure(
            training, cfg, dev, warmup, timed_steps, steps
        )
    ceilings = ceilings or Ceilings.for_device(dev, tf32)
    trace = _trace(training.net, batch_size, height, width, precision)
    prediction = predict(trace, ceilings)
    layers = _layers(training, times, prediction, steps)
    attributed = sum(x["measured_s"] for x in layers)
    env = environment(dev)
    entry = find_device(env["device_name"]) if dev.type == "cuda" else None
    record = {
        "schema": LAYER_SCHEMA,
        "created": _now(),
        "environment": env,
        "device_key": entry.key if entry else None,
        "precision": precision,
        "tf32": tf32,
        "channels_last": channels_last,
        "cudnn_benchmark": cudnn_benchmark,
        "batch_size": batch_size,
        "height": height,
        "width": width,
        "steps": steps,
        "warmup": warmup,
        "time_source": "cuda" if dev.type == "cuda" else "cpu",
        "step_s": statistics.median(walls),
        "predicted_step_s": prediction.min_step_s,
        "ceilings": ceilings.name,
        "unattributed_s": max(total_us / steps / 1e6 - attributed, 0.0),
        "layers": layers,
    }
    read_layer_profile(record, "profile_layers")  # the reader's checks, before a save
    return record


def _measure(training, cfg, dev, warmup: int, timed_steps: int, steps: int):
    """(wall times of the timed steps, the profiled per-module times, the profiled
    total in us) of the training step on one random batch."""
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )
    from torch.profiler import ProfilerActivity, profile, record_function

    from ampbook.measure.timing import default_sync
    from ampbook.segmentation.cityscapes import NUM_CLASSES

    gen = torch.Generator().manual_seed(cfg.seed)
    shape = (cfg.batch_size, cfg.height, cfg.width)
    images = torch.randn(cfg.batch_size, 3, *shape[1:], generator=gen).to(dev)
    labels = torch.randint(0, NUM_CLASSES, shape, generator=gen).to(dev)
    step = training.step
    sync = default_sync(dev)
    for _ in range(warmup):
        step(images, labels)
    sync()
    walls = []
    for _ in range(timed_steps):
        start = time.perf_counter()
        step(images, labels)
        sync()
        walls.append(time.perf_counter() - start)
    names = {
        id(m): (name or type(m).__name__) for name, m in training.net.named_modules()
    }
    names[id(training.criterion)] = LOSS
    ranges = _Ranges(names)
    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if dev.type == "cuda" else []
    )
    hooks = [
        register_module_forward_pre_hook(ranges.pre),
        register_module_forward_hook(ranges.post, always_call=True),
    ]
    try:
        with profile(activities=activities) as prof:
            for _ in range(steps):
                with record_function("ampbook.step"):
                    step(images, labels)
                sync()
    finally:
        for h in hooks:
            h.remove()
    return (walls, *_attribute(prof.events(), dev.type == "cuda"))


def _trace(net, batch_size: int, height: int, width: int, precision: str):
    """The traced step, traced once per model and setting: the trace runs on fake
    NCHW tensors, the same for both layouts."""
    stream = any(getattr(m, "fp16_stream", False) for m in net.modules())
    key = (repr(net), stream, batch_size, height, width, precision)
    if key not in _TRACES:
        _TRACES[key] = trace_step(net, batch_size, height, width, precision)
    return _TRACES[key]


def _layers(training, times: dict, prediction, steps: int) -> list[dict]:
    """Each module's measured (forward, backward) and predicted time per step."""
    types = {
        (name or type(m).__name__): type(m).__name__
        for name, m in training.net.named_modules()
    }
    types[LOSS] = "loss"
    predicted = {r["scope"]: r for r in prediction.by_scope()}
    layers = []
    for scope in list(predicted) + [s for s in times if s not in predicted]:
        fwd, bwd = times.get(scope, [0.0, 0.0])
        layers.append(
            {
                "scope": scope,
                "type": types.get(scope, predicted.get(scope, {}).get("type", "?")),
                "measured_s": (fwd + bwd) / steps / 1e6,
                "forward_s": fwd / steps / 1e6,
                "backward_s": bwd / steps / 1e6,
                "predicted_s": (
                    predicted[scope]["time_s"] if scope in predicted else 0.0
                ),
            }
        )
    return layers


def loader_record(**kwargs) -> dict:
    """``ampbook.chapters.ch5.bench_loader.measure_loader(**kwargs)`` as a results
    record."""
    from ampbook.chapters.ch5.bench_loader import measure_loader
    from ampbook.core.env import environment

    result = measure_loader(**kwargs)
    record = {
        "schema": LOADER_SCHEMA,
        "created": _now(),
        "environment": environment("auto"),
        **result,
    }
    read_loader(record, "loader_record")
    return record


def save_json(record: dict, path: str | Path) -> Path:
    """Write a record as indented JSON (creating the folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path
