"""Will AMP help *this* model? ``diagnose`` traces one training step per precision on
fake tensors, reads it (``traced``), calibrates the speedup per GPU (``verdict``) and
times the step here (``measured``): one JSON-ready dict, printed by ``report_text``."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import nn

from ampbook.chapters.ch6.measured import CPU_ROUNDS, as_progress, measure
from ampbook.chapters.ch6.outputs import (
    SelectOutput,
    check_loss,
    loss_fn,
    probe,
    quiet_fake,
)  # fmt: skip
from ampbook.chapters.ch6.traced import (
    coverage,
    memory_at_size,
    roofline,
    unmodelled_line,
    weight_copy_bytes,
    where_time_goes,
)  # fmt: skip
from ampbook.chapters.ch6.verdict import (
    checklist,
    committed_measurements,
    memory_warnings,
    setting_text,
    speedup_range_verdict,
    verdict_ranges,
)  # fmt: skip
from ampbook.core import cli
from ampbook.core.devices import gpu_key, load_devices, pick_device
from ampbook.core.modes import TF32_MODE
from ampbook.core.precision import AUTOCAST_DTYPES, PRECISIONS, torch_name
from ampbook.predict.calibrate import launch_floor
from ampbook.predict.hostmodel import host_model
from ampbook.predict.references import references
from ampbook.predict.roofline import Ceilings, predict
from ampbook.predict.specs import (  # fmt: skip
    DoctorError,
    first_line,
    load_model,
    shape_text,
)
from ampbook.predict.steptrace import (
    MEMORY_FORMATS,
    StepTrace,
    relabel,
    trace_step,
    with_memory_format,
)  # fmt: skip
from ampbook.results import load_results_dir

REPORT_SCHEMA = "ampbook.doctor/2"  # the --json report's schema
AMP_PRECISIONS = tuple(p for p in PRECISIONS if p != "fp32")
LOSSES = ("cross-entropy", "mse")
ERFNET_INPUT = (3, 512, 1024)
DEFAULT_INPUT = (3, 224, 224)


@dataclass
class DoctorConfig:
    model: str
    input: tuple[int, ...] | None = None
    batch: int | None = None
    device: str = "auto"
    precisions: list[str] = field(default_factory=lambda: list(PRECISIONS))
    gpus: list[str] | None = None
    loader_images_per_s: float | None = None
    loss: str = "cross-entropy"
    measure: bool = True
    repeats: int = 3
    results_dir: str | None = None
    output: str | None = None  # --output KEY: which of several outputs the loss reads
    # where a CPU times its steps: (input shape, batch); None: ``measure_size``'s
    measure_size: tuple[tuple[int, ...], int] | None = None
    rounds: int = CPU_ROUNDS
    memory_format: str = "channels_first"  # the layout the user's loop runs
    # progress lines on stderr: a ``cli.Progress``, or True / False; None: on a terminal
    progress: bool | cli.Progress | None = None
    backward: bool = True  # False: the forward pass alone (``--forward-only``)
    # who asks: "python" or "cli" (advice names the keyword argument or the flag)
    caller: str = "python"


def forward_only(cfg: DoctorConfig) -> str:
    """How the caller asks for the forward pass alone."""
    return "--forward-only" if cfg.caller == "cli" else "DoctorConfig(backward=False)"


def parse_precisions(text: str | Sequence[str]) -> list[str]:
    """The precisions asked for, the baseline first as "fp32" (``fp32-tf32`` too)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    items = [p.strip() for p in items if p.strip()]
    bad = [p for p in items if p not in (TF32_MODE, *PRECISIONS)]
    if bad or not items:
        raise DoctorError(
            f"--precisions {','.join(items) or repr(text)}: unknown {bad or 'empty'}; "
            f"choose from {','.join((TF32_MODE, *AMP_PRECISIONS))} ({TF32_MODE}, the "
            "baseline, may also be written fp32)"
        )
    return ["fp32"] + [p for p in AMP_PRECISIONS if p in items]


def resolve_gpus(names: str | Sequence[str] | None, devices=None) -> list[str]:
    """Keys of the device table for ``names`` (``gpu_key``); None: every GPU."""
    devices = load_devices() if devices is None else devices
    if names is None:
        return list(devices)
    items = names.split(",") if isinstance(names, str) else list(names)
    if not any(str(n).strip() for n in items):
        known = ", ".join(f"{k} ({d.short_name})" for k, d in devices.items())
        given = names if isinstance(names, str) else ",".join(map(str, items))
        raise DoctorError(
            f"--gpus {given!r} names no GPU; give one or more, comma-separated, of "
            f"{known} (or leave --gpus out for all of them)"
        )
    try:
        keys = [gpu_key(n, devices) for n in items if n.strip()]
    except ValueError as err:
        raise DoctorError(f"--gpus: {err}") from None
    return list(dict.fromkeys(keys))


class _Laps:
    """The seconds each stage of the diagnosis took (the report's ``seconds``)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.clock = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name], self.clock = now - self.clock, now


def diagnose(
    cfg: DoctorConfig,
    model: nn.Module | None = None,
    on_prediction=None,
) -> dict[str, Any]:
    """The whole report as a JSON-ready dict. ``model`` overrides ``cfg.model``'s
    construction; ``on_prediction(report)`` is called before any step is timed."""
    tell = as_progress(cfg.progress)
    if cfg.loss not in LOSSES:  # the settings checked before any work, by their flag
        raise DoctorError(f"--loss {cfg.loss!r}: choose {' or '.join(LOSSES)}")
    if cfg.batch is not None and not cli.is_positive_int(cfg.batch):
        raise DoctorError(f"--batch {cfg.batch}: must be a positive integer")
    if cfg.loader_images_per_s is not None and not cfg.loader_images_per_s > 0:
        raise DoctorError(
            f"--loader-images-per-s {cfg.loader_images_per_s}: must be positive"
        )
    if cfg.memory_format not in MEMORY_FORMATS:
        raise DoctorError(
            f"--memory-format {cfg.memory_format!r}: choose "
            f"{' or '.join(MEMORY_FORMATS)}"
        )
    precisions = parse_precisions(cfg.precisions)
    devices = load_devices()
    gpus = resolve_gpus(cfg.gpus, devices)
    device = _pick_device(cfg)
    erfnet = cfg.model == "erfnet"
    shape = tuple(cfg.input or (ERFNET_INPUT if erfnet else DEFAULT_INPUT))
    batch = cfg.batch or (6 if erfnet else 32)
    elements = batch * math.prod(shape)  # a fp32 input larger than any GPU's memory
    big = max(devices.values(), key=lambda d: d.memory_gb)
    if elements * 4 > big.memory_gb * 1e9:
        raise DoctorError(
            f"batch {batch} x input {shape_text(shape)}: the input alone is "
            f"{elements * 4 / 2**30:,.0f} GiB in fp32, more than the largest GPU of "
            f"the table holds ({big.short_name}, {big.memory_gb:g} GB); give a "
            "smaller --batch or --input"
        )
    lap = _Laps()
    if model is None:
        tell(f"building {cfg.model}")
        model = load_model(cfg.model)
    if cfg.backward and not any(p.requires_grad for p in model.parameters()):
        raise DoctorError(
            f"{cfg.model} has no trainable parameter: a training step has nothing to "
            f"compute backward; pass {forward_only(cfg)} to diagnose the "
            "forward pass alone"
        )
    tell(f"tracing batch {batch} x {shape_text(shape)} (fake tensors: no data)")
    out, plain, _ = probe(model, shape, batch, cfg.output)
    check_loss(cfg.loss, out)
    traced = model if plain and cfg.output is None else SelectOutput(model, cfg.output)
    lap("model")
    traces = _trace(cfg, traced, precisions, batch, shape, tell)
    lap("trace")
    report = _predicted_report(cfg, model, traces, gpus, devices, lap, tell)
    if on_prediction is not None:
        on_prediction(report)
    if not cfg.measure:
        lap.seconds["measured"] = 0.0
        return report
    _add_measured(report, cfg, traced, shape, batch, precisions, device, tell)
    lap("measured")
    return report


def _pick_device(cfg: DoctorConfig) -> torch.device:
    name = str(cfg.device).strip().lower()
    try:
        return pick_device(name)
    except (RuntimeError, ValueError) as e:
        why = first_line(e).removeprefix(f"device {name!r} ")  # said once, as a flag
        hint = "; --no-measure predicts without timing" if cfg.measure else ""
        raise DoctorError(f"--device {cfg.device!r} {why}{hint}") from None


def _trace(cfg, traced, precisions, batch, shape, tell) -> dict[str, StepTrace]:
    """Each precision's step traced (bf16 relabelled from fp16)."""
    traces = {}
    for p in precisions:
        if p == "amp-bf16" and "amp-fp16" in traces:
            traces[p] = relabel(traces["amp-fp16"], p)
            continue
        tell(f"tracing the {p} {'step' if cfg.backward else 'forward pass'}")
        try:
            with quiet_fake(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="ComplexHalf support")
                traces[p] = trace_step(
                    traced, batch, 1, 1, p, input_shape=shape, loss=loss_fn(cfg.loss),
                    backward=cfg.backward,
                )  # fmt: skip
        except DoctorError:
            raise
        except Exception as e:
            why = first_line(e)
            if "nothing to trace backward" in why:
                raise DoctorError(
                    "the loss does not depend on any trainable parameter: nothing to "
                    f"trace backward; pass {forward_only(cfg)} to diagnose "
                    "the forward pass alone"
                ) from None
            raise DoctorError(
                f"tracing the {p} step failed: {type(e).__name__}: {why}"
            ) from None
    return {p: with_memory_format(tr, cfg.memory_format) for p, tr in traces.items()}


def _predicted_report(cfg, model, traces, gpus, devices, lap, tell) -> dict[str, Any]:
    amp = next((p for p in ("amp-fp16", "amp-bf16") if p in traces), None)
    batch, shape = traces["fp32"].batch_size, traces["fp32"].input_shape
    roof = roofline(traces, gpus, devices)
    first = devices[gpus[0]]
    ceil = Ceilings.from_device(first)  # the first GPU's: "where the time goes"
    on_tc = amp and torch_name(AUTOCAST_DTYPES[amp]) in ceil.mma_tflops
    pred = predict(traces[amp if on_tc else "fp32"], ceil)
    lap("roofline")
    copies = weight_copy_bytes(model)
    memory: dict[str, Any] = {"at_size": memory_at_size(traces, amp),
                              "weight_copies_bytes": copies if amp else 0}  # fmt: skip
    tell("calibrating the speedup ranges on the committed references")
    rs = load_results_dir(cfg.results_dir)  # read once, for every part below
    refs = references(rs)
    floor = launch_floor(rs)
    host = host_model(rs)
    data_s = batch / cfg.loader_images_per_s if cfg.loader_images_per_s else None
    ranges = verdict_ranges(
        roof, traces, refs, host, data_s, floor=floor, model=cfg.model,
        devices=devices, memory_format=cfg.memory_format, batch=batch,
    )  # fmt: skip
    committed = committed_measurements(cfg.model, gpus, rs, refs)
    here = setting_text(batch, shape)
    for r in ranges:  # each range's committed measurements of this network and GPU
        r["setting"], r["committed"] = here, [
            {**m, "same_setting": m.get("setting") == here}
            for m in committed.get(r["gpu"], []) if m["precision"] == r["precision"]
        ]  # fmt: skip
        r["line"] = speedup_range_verdict(r["gpu_name"], r["precision"], r)
    unknown = [dict(r) for r in pred.unmodelled]
    warnings_ = [w for w in [unmodelled_line(unknown)] if w]
    warnings_ += memory_warnings(traces, gpus, devices, copies)
    lap("verdict")
    return {
        "schema": REPORT_SCHEMA,
        "model": cfg.model,
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "input": list(shape),
        "batch": batch,
        "output": list(probe(model, shape, batch, cfg.output)[0]),
        "output_rule": probe(model, shape, batch, cfg.output)[2],
        "loss": cfg.loss,
        "backward": cfg.backward,
        "precisions": list(traces),
        "memory_format": cfg.memory_format,
        "gpus": gpus,
        "totals": {p: tr.totals() for p, tr in traces.items()},
        "coverage": coverage(traces[amp]) if amp else None,
        "memory": memory,
        "roofline": roof,
        "where": {
            "gpu": gpus[0],
            "gpu_name": roof[0]["gpu_name"] if roof else first.short_name,
            "precision": amp or "fp32",
            "types": where_time_goes(pred),
        },
        "measured": None,
        "verdict": {
            "ranges": ranges,
            "launch_floor": None
            if floor is None
            else {"per_kernel_s": floor.per_kernel_s, "source": floor.source},
            **checklist(roof, ranges, cfg.loader_images_per_s, None),
        },
        "unmodelled": unknown,
        "warnings": warnings_,
        "seconds": lap.seconds,
    }


def _add_measured(report, cfg, traced, shape, batch, precisions, device, tell) -> None:
    measured = measure(
        traced, shape, batch, cfg.loss, precisions, device, cfg.repeats,
        size=cfg.measure_size, rounds=cfg.rounds, progress=tell,
        backward=cfg.backward,
    )  # fmt: skip
    memory, ver = report["memory"], report["verdict"]
    memory["measured"] = [
        {"variant": r["variant"], "bytes": r["memory_bytes"],
         "measure": r["memory_measure"]}
        for r in measured["rows"]
        if r.get("memory_bytes") is not None and not r.get("input")
    ]  # fmt: skip
    memory.update(measured_input=measured["input"], measured_batch=measured["batch"])
    report["measured"] = measured
    loader = cfg.loader_images_per_s
    ver.update(checklist(report["roofline"], ver["ranges"], loader, measured))
