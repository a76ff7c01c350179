"""Calibrated AMP speedups: kernel efficiencies per operator class and dtype family,
from measured GPU profiles and published training throughputs, and a launch floor.

The roofline (``ampbook.predict.costmodel.predict``) gives each precision's step a lower
bound; its ratio is the speedup *if both precisions reached the same share of their
bound*. They do not: on an A100, NVIDIA's ResNet-50 reaches about 43% of its bound with
TF32 and 58% with AMP, and trains 2.63x faster with AMP where the ratio of the bounds is
1.9x. So a prediction needs the share each precision's kernels reach, which this module
takes from measurements, never from one network applied to all:

* **Efficiencies.** An operator belongs to a class (``costmodel.OP_CLASSES``:
  convolution, matrix product (attention and recurrent layers too), normalisation,
  element-wise) and its step to a dtype family: ``"tf32"`` (an fp32 step with TF32 on
  for convolutions and matrix products), ``"fp32"`` (TF32 off, or a GPU without it),
  ``"16-bit"`` (an AMP step). A *reference* gives an efficiency, bound over measured
  time, per (family, class):

  - a pair of committed GPU **layer profiles** (``ampbook.bench.layers``: per-module
    kernel times of one network, fp32 and AMP, on one GPU) gives one per class,
    measured: the modules of each class summed, bound over kernel time;
  - a **published training throughput** (``data/reference/training_throughputs.yml``:
    a network, its batch, the GPU, images per second in both precisions, with the
    source) gives one per family for the whole step, its time (batch / images per
    second) against the bound of the same network, batch and GPU
    (``reference_bounds``, stored in ``training_throughputs_bounds.json``): every class
    of that step gets it.
* **A range.** For the model diagnosed, each reference's efficiencies turn the bound
  of each class into a time, fp32 and AMP, and give a speedup. The references are
  weighted by how close they are (``closeness``: the same network or how far its mix
  of classes lies, the memory format of each precision, the same GPU, architecture or
  another, the batch); the point estimate is the weighted geometric mean, its error
  the weighted spread (at least ``MIN_ERROR``), the range the point times and over
  that error, and ``basis`` names the references that carry most of the weight
  (``calibrated_range``). ``leave_one_out`` predicts each reference from the others.
* **Layout and classes.** A reference's efficiencies belong to the memory format each
  precision ran in (``costmodel.with_memory_format`` puts NCHW's transposes around
  16-bit convolutions into the bound), and every operator is classed by its module
  (``scope_class``), as a layer profile classes measured time: a profile applied to
  its own network, GPU, batch and layout gives back its own measured ratio.
* **A launch floor.** A step cannot be faster than its kernels can be issued: eager
  PyTorch spends some microseconds of host time per operator. The per-kernel time is
  the median of the smallest element-wise calls of the committed GPU sweeps
  (``ampbook.bench.matmul``, where the time no longer depends on the size), and each
  precision's step takes at least its kernel count times that (``launch_floor``). AMP
  adds kernels (its casts), so at small batches the floor can make it slower.

    python -m ampbook.calibration          # the references and their efficiencies
    python -m ampbook.calibration --write  # retrace the references' bounds
    python -m ampbook.calibration --predictions  # the leave-one-out table
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ampbook.core import cli

if TYPE_CHECKING:  # torch and the cost model are imported where they are used, so
    # that ``python -m ampbook.calibration --help`` answers without importing torch
    from torch import nn

    from ampbook.predict.costmodel import Ceilings, Prediction, StepTrace
from ampbook.core.paths import REFERENCE_DIR

PUBLISHED_FILE = REFERENCE_DIR / "training_throughputs.yml"
BOUNDS_FILE = REFERENCE_DIR / "training_throughputs_bounds.json"
FAMILIES = ("fp32", "tf32", "16-bit")
SIDES = ("baseline", "amp")
_PRECISION_FAMILY = {"fp32": "fp32", "fp32-tf32": "tf32", "amp-fp16": "16-bit"}
# Module types per class, for layer profiles (per-module times).
_NORM_TYPES = ("Norm",)
_MATMUL_TYPES = ("Linear", "MultiheadAttention", "LSTM", "GRU", "RNN", "Bilinear")


class CalibrationError(ValueError):
    """A reference file that cannot be read as one: the message says what and where."""


def resnext101_32x4d() -> nn.Module:
    """ResNeXt101-32x4d as NVIDIA's DeepLearningExamples build it (cardinality 32,
    bottleneck widths 128-1024, expansion 2): torchvision's ResNet with 32 groups of
    width 4, the stride on the 3x3 convolutions as in ResNet-50 v1.5."""
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=4)


# --------------------------------------------------------------------------------------
# published references
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One precision of a published pair."""

    precision: str  # "fp32-tf32", "fp32" or "amp-fp16"
    images_per_s: float
    batch: int
    memory_format: str

    @property
    def step_s(self) -> float:
        return self.batch / self.images_per_s

    @property
    def family(self) -> str:
        return _PRECISION_FAMILY[self.precision]


@dataclass(frozen=True)
class Published:
    """A published training throughput, AMP against 32-bit, on one GPU."""

    key: str
    network: str
    model: str
    input: tuple[int, ...]
    gpu: str
    baseline: Side
    amp: Side
    published_speedup: float
    optimizer: str
    software: str
    source: dict
    gpu_note: str = ""

    @property
    def speedup(self) -> float:
        """AMP's throughput over the baseline's (images per second)."""
        return self.amp.images_per_s / self.baseline.images_per_s

    def side(self, name: str) -> Side:
        return self.baseline if name == "baseline" else self.amp


def load_published(path: str | Path | None = None, devices=None) -> list[Published]:
    """The published references, checked: every field present, positive throughputs
    and batches, a known GPU and source, and the source's own speedup within 2% of the
    ratio of its throughputs (a mistyped figure fails here)."""
    import yaml

    from ampbook.core.devices import load_devices

    path = Path(path) if path else PUBLISHED_FILE
    with Path(path).open() as f:
        doc = yaml.safe_load(f)
    devices = load_devices() if devices is None else devices
    if not isinstance(doc, dict) or not {"references", "sources"} <= set(doc):
        raise CalibrationError(f"{path}: expected 'references' and 'sources' mappings")
    sources = doc["sources"]
    out = []
    need = ("network", "model", "input", "gpu", "baseline", "amp", "published_speedup")
    need += ("optimizer", "software", "source")
    for key, e in doc["references"].items():
        where = f"{path}: reference {key!r}"
        missing = [n for n in need if n not in e]
        if missing:
            raise CalibrationError(f"{where} lacks {missing}")
        if e["gpu"] not in devices:
            raise CalibrationError(f"{where}: unknown GPU {e['gpu']!r}")
        src = sources.get(e["source"])
        if not src or not {"title", "url", "bib"} <= set(src):
            raise CalibrationError(
                f"{where}: source {e['source']!r} needs title, url, bib"
            )
        sides = {}
        for name in SIDES:
            s = e[name]
            try:
                side = Side(
                    s["precision"], float(s["images_per_s"]), int(s["batch"]),
                    s["memory_format"],
                )  # fmt: skip
            except (KeyError, TypeError, ValueError) as err:
                raise CalibrationError(f"{where}: {name}: {err}") from None
            if side.precision not in _PRECISION_FAMILY:
                raise CalibrationError(f"{where}: {name}: unknown precision")
            if side.images_per_s <= 0 or side.batch < 1:
                raise CalibrationError(f"{where}: {name}: needs positive figures")
            sides[name] = side
        ref = Published(
            key, e["network"], e["model"], tuple(e["input"]), e["gpu"],
            sides["baseline"], sides["amp"], float(e["published_speedup"]),
            e["optimizer"], e["software"], {"key": e["source"], **src},
            str(e.get("gpu_note") or ""),
        )  # fmt: skip
        if abs(ref.speedup / ref.published_speedup - 1) > 0.02:
            raise CalibrationError(
                f"{where}: throughputs give {ref.speedup:.3f}x, the source says "
                f"{ref.published_speedup}x"
            )
        out.append(ref)
    return out


def ceilings_for(gpu: str, family: str, devices=None) -> Ceilings:
    """The device table's ceilings for a step of ``family`` on ``gpu``: TF32 for
    convolutions and matrix products for ``"tf32"``, none for ``"fp32"``."""
    from ampbook.core.devices import load_devices
    from ampbook.predict.costmodel import Ceilings

    devices = load_devices() if devices is None else devices
    on = family == "tf32"
    return Ceilings.from_device(devices[gpu], tf32=on, matmul_tf32=on)


def scope_class(scope_type: str, op: str) -> str:
    """The operator class of a traced operator, by the module it runs in, as a layer
    profile classes its measured time (``layer_class``): a convolution's autocast
    casts, its gradient casts and its layout transposes are the convolution's, as
    the time measured for that module includes them. An operator in a module of no
    class (the model's own ``forward``, a block, the loss) keeps its operator's class
    (``costmodel.op_class``)."""
    from ampbook.predict.costmodel import op_class

    c = layer_class(scope_type or "")
    return c if c != "elementwise" else op_class(op)


def class_bounds(p: Prediction) -> dict[str, float]:
    """Seconds of a predicted step per operator class (``costmodel.OP_CLASSES``),
    each operator classed by its module (``scope_class``: measured time and traced
    operators alike); the optimizer step (not traced) counts as element-wise, as a
    layer profile counts it (unattributed)."""
    from ampbook.predict.costmodel import OP_CLASSES

    out = dict.fromkeys(OP_CLASSES, 0.0)
    for t in p.times:
        out[scope_class(t.op.scope_type, t.op.op)] += t.time_s
    out["elementwise"] += p.optimizer_s
    return out


def _side_record(tr: StepTrace, ceilings: Ceilings, optimizer: str) -> dict[str, Any]:
    from ampbook.predict.costmodel import predict

    p = predict(tr, ceilings, optimizer=optimizer)
    return {
        "by_class_s": class_bounds(p),
        "bound_s": p.min_step_s,
        "kernels": int(tr.totals()["kernels"]),
    }


def reference_bounds(ref: Published, devices=None) -> dict[str, Any]:
    """The cost model's bound of a published reference's two steps: its network traced
    at each side's batch, on its GPU's ceilings; per class, with kernel counts."""
    from ampbook.predict import costmodel as cm
    from ampbook.predict.diagnosis import load_model

    model = load_model(ref.model)
    opt = "sgd" if ref.optimizer in ("sgd", "rmsprop") else "adam"
    out: dict[str, Any] = {"model": ref.model, "input": list(ref.input)}
    for name in SIDES:
        side = ref.side(name)
        prec = "amp-fp16" if side.family == "16-bit" else "fp32"
        tr = cm.trace_step(model, side.batch, 1, 1, prec, input_shape=ref.input)
        tr = cm.with_memory_format(tr, side.memory_format)
        ceil = ceilings_for(ref.gpu, side.family if prec == "fp32" else "tf32", devices)
        out[name] = {"batch": side.batch, **_side_record(tr, ceil, opt)}
    return out


def load_bounds(path: str | Path | None = None) -> dict[str, Any]:
    """The stored bounds of the published references (``write_bounds``)."""
    path = Path(path) if path else BOUNDS_FILE
    if not path.exists():
        return {}
    return json.loads(path.read_text())["references"]


def load_profile_bounds(path: str | Path | None = None) -> dict[str, Any]:
    """The stored bounds of the committed layer profiles' settings
    (``profile_bounds``), keyed by ``profile_key``."""
    path = Path(path) if path else BOUNDS_FILE
    if not path.exists():
        return {}
    return json.loads(path.read_text()).get("profiles", {})


def write_bounds(path: str | Path | None = None, devices=None) -> dict[str, Any]:
    """Trace every published reference and store its bounds (a minute or two)."""
    path = Path(path) if path else BOUNDS_FILE
    bounds = {r.key: reference_bounds(r, devices) for r in load_published()}
    profiles = {}
    for group in _profile_groups():
        key, g = group
        if key[0] in (devices or _devices()):
            profiles[profile_key(*key)] = profile_bounds(*key, devices=devices)
    doc = {
        "note": "generated by `python -m ampbook.calibration --write` from "
        "training_throughputs.yml, the committed layer profiles and the cost model; "
        "do not edit",
        "references": bounds,
        "profiles": profiles,
    }
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return bounds


# --------------------------------------------------------------------------------------
# references as efficiencies
# --------------------------------------------------------------------------------------


@dataclass
class Reference:
    """One calibration: efficiencies per (family, class) measured on one network and
    GPU, its class mix, and what it measured."""

    key: str
    kind: str  # "published" or "profile"
    network: str
    gpu: str  # device-table key, or the GPU's own name when the table lacks it
    efficiency: dict[tuple[str, str], float]
    mix: dict[str, float]  # share of the baseline's bound per class
    measured_speedup: float
    model: str | None = None  # the doctor's spec of the network, if it has one
    setting: str = ""
    source: dict = field(default_factory=dict)
    per_class: bool = False  # True: measured per class; False: one per family
    # the whole step's efficiency per family: its bound over its measured time
    step_efficiency: dict[str, float] = field(default_factory=dict)
    # the memory format each family ran in ("channels_first" or "channels_last")
    layout: dict[str, str] = field(default_factory=dict)
    batch: int = 0  # the baseline's batch (the AMP side's may differ)
    # per family: bound per class of one sample at the reference's own setting,
    # for its leave-one-out prediction (``reference_prediction``)
    per_image: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def families(self) -> set[str]:
        return {f for f, _ in self.efficiency}

    def label(self, devices=None) -> str:
        from ampbook.core.devices import display_name

        return f"{self.network} on {display_name(self.gpu, devices)}"

    @property
    def gpu_label(self) -> str:
        from ampbook.core.devices import display_name

        return display_name(self.gpu)

    @property
    def baseline_family(self) -> str:
        return "tf32" if "tf32" in self.families else "fp32"


def _mix(by_class: Mapping[str, float]) -> dict[str, float]:
    from ampbook.predict.costmodel import OP_CLASSES

    total = sum(by_class.values()) or 1.0
    return {c: by_class.get(c, 0.0) / total for c in OP_CLASSES}


def published_references(
    published: Sequence[Published] | None = None, bounds: Mapping | None = None
) -> list[Reference]:
    """Each published pair as efficiencies: per family, the whole step's bound over its
    published time, the same for every class of the step (a whole-step efficiency,
    not a kernel one: the published time includes the host's share of the step)."""
    from ampbook.predict.costmodel import OP_CLASSES

    published = load_published() if published is None else published
    bounds = load_bounds() if bounds is None else bounds
    out = []
    for ref in published:
        b = bounds.get(ref.key)
        if not b:
            continue  # not yet traced: python -m ampbook.calibration --write
        eff, whole, layout, per_image = {}, {}, {}, {}
        for name in SIDES:
            side = ref.side(name)
            e = whole[side.family] = b[name]["bound_s"] / side.step_s
            layout[side.family] = side.memory_format
            per_image[side.family] = {
                c: s / b[name]["batch"] for c, s in b[name]["by_class_s"].items()
            }
            for c in OP_CLASSES:
                eff[(side.family, c)] = e
        out.append(
            Reference(
                ref.key,
                "published",
                ref.network,
                ref.gpu,
                eff,
                _mix(b["baseline"]["by_class_s"]),
                ref.speedup,
                ref.model,
                f"batch {ref.baseline.batch}/{ref.amp.batch} x "
                f"{'x'.join(map(str, ref.input))}",
                ref.source,
                step_efficiency=whole,
                layout=layout,
                batch=ref.baseline.batch,
                per_image=per_image,
            )  # fmt: skip
        )
    return out


def layer_class(module_type: str) -> str:
    """The operator class of a layer profile's module type."""
    if "Conv" in module_type:
        return "conv"
    if any(t in module_type for t in _MATMUL_TYPES):
        return "matmul"
    if any(t in module_type for t in _NORM_TYPES):
        return "norm"
    return "elementwise"


def _devices():
    from ampbook.core.devices import load_devices

    return load_devices()


def profile_key(gpu: str, batch: int, h: int, w: int, layout: str) -> str:
    """The key of a layer-profile setting in the stored bounds."""
    return f"{gpu}-{batch}x{h}x{w}-{layout}"


def profile_bounds(
    gpu: str, batch: int, h: int, w: int, layout: str, devices=None
) -> dict[str, Any]:
    """The cost model's bound per class of ERFNet's step at a layer profile's setting
    on ``gpu``'s ceilings, fp32 (TF32 on) and amp-fp16, in ``layout``: the same
    classes (``class_bounds``) the doctor gives the model it diagnoses, so that the
    profile applied to its own network gives back its own measured ratio."""
    from ampbook.predict import costmodel as cm
    from ampbook.predict.diagnosis import load_model

    model = load_model("erfnet")
    out: dict[str, Any] = {}
    for prec in ("fp32", "amp-fp16"):
        tr = cm.trace_step(model, batch, h, w, prec)
        tr = cm.with_memory_format(tr, layout)
        ceil = ceilings_for(gpu, "tf32", devices)
        p = cm.predict(tr, ceil, optimizer="adam")
        out[prec] = {"by_class_s": class_bounds(p), "bound_s": p.min_step_s}
    return out


def _profile_groups(results_dir=None) -> list[tuple[tuple, dict[str, Any]]]:
    """The committed layer profiles in pairs: ((GPU key or name, batch, height,
    width, layout), {precision: profile})."""
    from ampbook.predict.diagnosis import table_key
    from ampbook.results import load_results_dir

    groups: dict[tuple, dict[str, Any]] = {}
    for lp in load_results_dir(results_dir).layer_profiles:
        layout = "channels_last" if lp.record.get("channels_last") else "channels_first"
        name = table_key(lp.device_name) or lp.device_name
        setting = (name, lp.batch_size, lp.height, lp.width, layout)
        groups.setdefault(setting, {})[lp.precision] = lp
    return [(k, g) for k, g in groups.items() if {"fp32", "amp-fp16"} <= set(g)]


def profile_references(results_dir=None) -> list[Reference]:
    """Each GPU's pair of committed layer profiles (fp32 and amp-fp16, same GPU, setting
    and layout) as efficiencies per class: the modules of a class summed (the
    unattributed time counts as element-wise), the cost model's bound of the same
    classes over their kernel time. For a GPU of the device table the bound is the
    current cost model's (``profile_bounds``, stored by ``--write``); for one it
    lacks, the bound the profile recorded."""
    from ampbook.predict.costmodel import OP_CLASSES

    devices = _devices()
    stored = load_profile_bounds()
    out = []
    for (key, batch, h, w, layout), g in _profile_groups(results_dir):
        traced = None
        if key in devices:
            traced = stored.get(profile_key(key, batch, h, w, layout))
            if traced is None:
                traced = profile_bounds(key, batch, h, w, layout, devices)
        eff, mixes, whole, per_image = {}, {}, {}, {}
        for prec, fam_on in (("fp32", None), ("amp-fp16", "16-bit")):
            lp = g[prec]
            fam = fam_on or ("tf32" if lp.record.get("tf32") else "fp32")
            measured = dict.fromkeys(OP_CLASSES, 0.0)
            for layer in lp.layers:
                measured[layer_class(layer.type)] += layer.measured_s
            measured["elementwise"] += lp.unattributed_s
            if traced is not None:
                bound = dict(traced[prec]["by_class_s"])
            else:
                bound = dict.fromkeys(OP_CLASSES, 0.0)
                for layer in lp.layers:
                    bound[layer_class(layer.type)] += layer.predicted_s
                bound["elementwise"] += max(
                    lp.predicted_step_s - sum(x.predicted_s for x in lp.layers), 0.0
                )  # the optimizer's bound, as its time is the unattributed one
            step = whole[fam] = sum(bound.values()) / sum(measured.values())
            for c in OP_CLASSES:
                has = bound[c] > 0 and measured[c] > 0
                eff[(fam, c)] = bound[c] / measured[c] if has else step
            mixes[prec] = _mix(bound)
            per_image[fam] = {c: s / batch for c, s in bound.items()}
        fp32, amp = g["fp32"], g["amp-fp16"]
        out.append(
            Reference(
                f"profile-{key}-{batch}x{h}x{w}",
                "profile",
                "ERFNet",
                key,
                eff,
                mixes["fp32"],
                fp32.measured_total_s / amp.measured_total_s,
                "erfnet",
                f"batch {batch} x 3x{h}x{w}",
                {
                    "title": f"layer profiles {Path(fp32.path).name}, "
                    f"{Path(amp.path).name}"
                },
                True,
                whole,
                layout={f: layout for f in whole},
                batch=batch,
                per_image=per_image,
            )  # fmt: skip
        )
    return out


def references(results_dir=None) -> list[Reference]:
    """Every reference: the committed layer profiles, then the published pairs."""
    return profile_references(results_dir) + published_references()


# --------------------------------------------------------------------------------------
# the launch floor
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchFloor:
    """Host time per eager operator, measured on a GPU."""

    per_kernel_s: float
    source: str  # what it was measured on

    def floor_s(self, kernels: int) -> float:
        return kernels * self.per_kernel_s


def launch_floor(results_dir=None) -> LaunchFloor | None:
    """The median time of the smallest element-wise calls of the committed GPU sweeps
    (``ampbook.bench.matmul``; an element-wise add of 65536 elements moves too few
    bytes to take more than its launch), or None without a sweep."""
    from ampbook.core.devices import display_name
    from ampbook.results import load_results_dir

    rows, where = [], []
    for sweep in load_results_dir(results_dir).matmul_sweeps:
        ew = [r for r in sweep.record.get("elementwise", []) if r.get("median_s")]
        if not ew:
            continue
        smallest = min(r["numel"] for r in ew)
        rows += [r["median_s"] for r in ew if r["numel"] == smallest]
        where.append(f"{display_name(sweep.device_name)} ({smallest} elements)")
    if not rows:
        return None
    return LaunchFloor(statistics.median(rows), ", ".join(where))


# --------------------------------------------------------------------------------------
# a calibrated range
# --------------------------------------------------------------------------------------


def baseline_family(gpu: str, devices=None) -> str:
    """The family of the fp32 baseline on ``gpu``: TF32 where it has TF32 cores."""
    from ampbook.core.devices import load_devices

    devices = load_devices() if devices is None else devices
    return "tf32" if devices[gpu].tf32_tflops else "fp32"


def mix_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """How far two class mixes lie apart: half the summed absolute difference of their
    shares (0: the same mix, 1: no class in common)."""
    from ampbook.predict.costmodel import OP_CLASSES

    return 0.5 * sum(abs(a.get(c, 0.0) - b.get(c, 0.0)) for c in OP_CLASSES)


def gpu_distance(ref_gpu: str, gpu: str, devices=None) -> str:
    """``"same GPU"``, ``"same architecture"`` or ``"other architecture"`` (also for a
    GPU the device table lacks: its architecture is unknown)."""
    from ampbook.core.devices import load_devices

    devices = load_devices() if devices is None else devices
    if ref_gpu == gpu:
        return "same GPU"
    if ref_gpu in devices and gpu in devices:
        if devices[ref_gpu].architecture == devices[gpu].architecture:
            return "same architecture"
    return "other architecture"


def step_time(by_class: Mapping[str, float], ref: Reference, family: str) -> float:
    """A step's kernel time at a reference's efficiencies: each class's bound over its
    efficiency."""
    return sum(s / ref.efficiency[(family, c)] for c, s in by_class.items() if s > 0)


# How much a reference counts for a prediction (``closeness``): a factor per way it
# differs from the case predicted. Chosen by hand, not fitted; the leave-one-out
# (``leave_one_out``) measures how well the ranges they give hold.
OTHER_NETWORK = 0.5  # times exp(-class-mix distance / MIX_SCALE)
MIX_SCALE = 0.15
OTHER_LAYOUT = 0.3  # per precision whose memory format differs
GPU_WEIGHT = {"same GPU": 1.0, "same architecture": 0.6, "other architecture": 0.25}
BATCH_OCTAVES = 3.0  # weight 1 / (1 + |log2(batch ratio)| / BATCH_OCTAVES)
# The least error a prediction is given (log scale): the spread of references that
# agree says nothing about how far their agreement carries to another network.
MIN_ERROR = 0.12


def closeness(
    ref: Reference,
    gpu: str,
    model: str | None,
    mix: Mapping[str, float],
    layouts: tuple[str, str],
    family: str,
    batch: int | None = None,
    devices=None,
) -> tuple[float, dict[str, Any]]:
    """A reference's weight for a prediction on ``gpu`` of ``model`` (class mix
    ``mix``) with the baseline in ``layouts[0]`` and AMP in ``layouts[1]``, at
    ``batch``, and the distances that set it."""
    same_net = bool(model and ref.model == model)
    md = mix_distance(mix, ref.mix)
    w_net = 1.0 if same_net else OTHER_NETWORK * math.exp(-md / MIX_SCALE)
    own = (ref.layout.get(family), ref.layout.get("16-bit"))
    differ = sum(a != b for a, b in zip(own, layouts))
    w_layout = OTHER_LAYOUT**differ
    gd = gpu_distance(ref.gpu, gpu, devices)
    w_batch = 1.0
    if batch and ref.batch:
        w_batch = 1 / (1 + abs(math.log2(batch / ref.batch)) / BATCH_OCTAVES)
    return w_net * w_layout * GPU_WEIGHT[gd] * w_batch, {
        "gpu_distance": gd,
        "same_network": same_net,
        "mix_distance": md,
        "layouts": list(own),
        "layout_match": differ == 0,
    }


def _weighted(rows: Sequence[dict[str, Any]], key: str) -> tuple[float, float]:
    """The weighted geometric mean of ``key`` over ``rows`` and the weighted spread
    of its logarithm."""
    total = sum(r["weight"] for r in rows)
    logs = [(r["weight"] / total, math.log(r[key])) for r in rows]
    mean = sum(w * x for w, x in logs)
    spread = math.sqrt(sum(w * (x - mean) ** 2 for w, x in logs))
    return math.exp(mean), spread


def calibrated_range(
    fp32_by_class: Mapping[str, float],
    amp_by_class: Mapping[str, float],
    gpu: str,
    refs: Sequence[Reference],
    kernels: Mapping[str, int] | None = None,
    floor: LaunchFloor | None = None,
    model: str | None = None,
    exclude: str | None = None,
    devices=None,
    memory_format: str | tuple[str, str] = "channels_first",
    batch: int | None = None,
) -> dict[str, Any]:
    """The AMP speedup over fp32 on ``gpu``: a point estimate, its expected error and
    the range it spans, from the speedups each applicable reference's efficiencies
    give, weighted by how close the reference is (``closeness``: network, memory
    format, GPU, batch).

    ``*_by_class``: the model's bound per class on ``gpu`` (``class_bounds``), fp32 with
    TF32 where the GPU has it, both in ``memory_format`` (one for both precisions, or
    ``(baseline, amp)``); ``kernels``: ``{"fp32": n, "amp": n}`` for the launch
    floor; ``model``: the doctor's spec (a reference of the same spec is "same
    network"); ``exclude``: a reference key to leave out (the leave-one-out).

    The point is the weighted geometric mean of the references' speedups; the error
    (log scale) the weighted spread of their logarithms, at least ``MIN_ERROR``;
    ``low``/``high`` the point divided and multiplied by ``exp(error)``. ``basis``
    names the references that set it (together at least 80% of the weight). Returns
    ``{"low", "high", "point", "error", "basis", "min", "max", "equal_share",
    "family", "layouts", "rows", "launch"}``; ``low``/``high``/``point`` None when
    no reference applies."""
    family = baseline_family(gpu, devices)
    layouts = (
        (memory_format, memory_format)
        if isinstance(memory_format, str)
        else tuple(memory_format)
    )
    equal = sum(fp32_by_class.values()) / sum(amp_by_class.values())
    rows = []
    mix = _mix(fp32_by_class)
    for ref in refs:
        if ref.key == exclude or not {family, "16-bit"} <= ref.families:
            continue
        k32 = step_time(fp32_by_class, ref, family)
        k16 = step_time(amp_by_class, ref, "16-bit")
        t32, t16 = k32, k16
        if floor is not None and kernels:
            t32 = max(t32, floor.floor_s(kernels["fp32"]))
            t16 = max(t16, floor.floor_s(kernels["amp"]))
        weight, dist = closeness(ref, gpu, model, mix, layouts, family, batch, devices)
        rows.append(
            {
                "key": ref.key,
                "label": ref.label(devices),
                "kind": ref.kind,
                "speedup": t32 / t16,
                "kernel_speedup": k32 / k16,
                "fp32_s": t32,
                "amp_s": t16,
                "fp32_kernel_s": k32,
                "amp_kernel_s": k16,
                "weight": weight,
                **dist,
                "measured_speedup": ref.measured_speedup,
            }
        )
    rows.sort(key=lambda r: -r["weight"])
    point = error = low = high = None
    basis: list[str] = []
    if rows:
        point, spread = _weighted(rows, "speedup")
        error = max(spread, MIN_ERROR)
        low, high = point / math.exp(error), point * math.exp(error)
        total, acc = sum(r["weight"] for r in rows), 0.0
        for r in rows:
            basis.append(r["key"])
            r["weight_share"] = r["weight"] / total
            acc += r["weight"]
            if acc >= 0.8 * total:
                break
        for r in rows:
            r.setdefault("weight_share", r["weight"] / total)
    launch = None
    if floor is not None and kernels:
        launch = {
            "per_kernel_s": floor.per_kernel_s,
            "source": floor.source,
            "fp32_floor_s": floor.floor_s(kernels["fp32"]),
            "amp_floor_s": floor.floor_s(kernels["amp"]),
            "fp32_kernels": kernels["fp32"],
            "amp_kernels": kernels["amp"],
        }
        if rows:  # against the median reference's kernel time
            mid = statistics.median(r["amp_kernel_s"] for r in rows)
            mid32 = statistics.median(r["fp32_kernel_s"] for r in rows)
            launch.update(
                amp_kernel_s=mid,
                fp32_kernel_s=mid32,
                amp_bound=launch["amp_floor_s"] >= mid,
                fp32_bound=launch["fp32_floor_s"] >= mid32,
            )
    return {
        "family": family,
        "layouts": list(layouts),
        "equal_share": equal,
        "point": point,
        "error": error,
        "low": low,
        "high": high,
        "basis": basis,
        "min": min((r["speedup"] for r in rows), default=None),
        "max": max((r["speedup"] for r in rows), default=None),
        "rows": rows,
        "launch": launch,
    }


def unreferenced_gpus(
    gpus: Sequence[str], refs: Sequence[Reference], devices=None
) -> list[str]:
    """The GPUs of ``gpus`` with no reference of their generation (the same
    architecture and segment: a GeForce Ampere card is not an A100): their ranges
    are carried over from other generations."""
    devices = _devices() if devices is None else devices

    def gen(key):
        d = devices.get(key)
        return (d.architecture, d.segment) if d else (key, None)

    have = {gen(r.gpu) for r in refs}
    return [g for g in gpus if gen(g) not in have]


def reference_prediction(
    ref: Reference,
    refs: Sequence[Reference],
    exclude_own: bool = True,
    devices=None,
) -> dict[str, Any]:
    """The calibrated range for a reference's own network, batch, layouts and GPU
    (per sample: its two runs may use different batches), without its own
    efficiencies (``exclude_own``): what the other references predict for it, to
    hold against the speedup it measured. With its own efficiencies alone, the
    speedup it gives back is its own (the self-reproduction)."""
    fam = ref.baseline_family
    return calibrated_range(
        ref.per_image[fam], ref.per_image["16-bit"], ref.gpu, refs, model=ref.model,
        exclude=ref.key if exclude_own else None, devices=devices,
        memory_format=(ref.layout.get(fam), ref.layout.get("16-bit")),
        batch=ref.batch,
    )  # fmt: skip


def published_prediction(
    ref: Published,
    refs: Sequence[Reference] | None = None,
    exclude_own: bool = True,
    bounds: Mapping | None = None,
    devices=None,
) -> dict[str, Any]:
    """``reference_prediction`` for a published reference kept as data."""
    refs = references() if refs is None else refs
    (own,) = published_references([ref], bounds)
    return reference_prediction(own, refs, exclude_own, devices)


def leave_one_out(
    refs: Sequence[Reference] | None = None, devices=None
) -> dict[str, Any]:
    """Every reference predicted from the others (on a GPU of the device table, where
    a range can be given): rows with the point, the range, its width (high / low),
    the measured speedup and whether the range holds it; ``inside`` (the share held),
    ``median_width`` and ``n``. References with no applicable other are counted
    apart (``no_range``)."""
    refs = references() if refs is None else refs
    devices = _devices() if devices is None else devices
    rows, none = [], []
    for ref in refs:
        if ref.gpu not in devices:
            continue
        r = reference_prediction(ref, refs, True, devices)
        if r["point"] is None:
            none.append(ref.key)
            continue
        rows.append(
            {
                "key": ref.key,
                "label": ref.label(devices),
                "layouts": r["layouts"],
                "point": r["point"],
                "low": r["low"],
                "high": r["high"],
                "width": r["high"] / r["low"],
                "basis": r["basis"],
                "measured": ref.measured_speedup,
                "inside": r["low"] <= ref.measured_speedup <= r["high"],
                "off": ref.measured_speedup / r["point"],
            }
        )
    n = len(rows)
    return {
        "rows": rows,
        "n": n,
        "inside": sum(r["inside"] for r in rows) / n if n else None,
        "median_width": statistics.median(r["width"] for r in rows) if n else None,
        "no_range": none,
    }


def _layout_text(layouts: Sequence[str | None]) -> str:
    short = {"channels_first": "NCHW", "channels_last": "NHWC", None: "?"}
    a, b = (short.get(x, str(x)) for x in layouts)
    return a if a == b else f"{a} / {b}"


def distance_text(row: Mapping[str, Any]) -> str:
    """A reference row's distance in words: "same GPU, same network" or "other
    architecture, other network (class mix 23% apart), other layout"."""
    net = (
        "same network"
        if row["same_network"]
        else f"other network (class mix {row['mix_distance']:.0%} apart)"
    )
    lay = (
        ""
        if row.get("layout_match", True)
        else (f", layout {_layout_text(row['layouts'])}")
    )
    return f"{row['gpu_distance']}, {net}{lay}"


def _range_text(r: Mapping[str, Any]) -> str:
    if r["low"] is None:
        return "no reference applies"
    return f"{r['point']:.2f}x ({r['low']:.2f}-{r['high']:.2f}x, {len(r['rows'])} refs)"


def predictions_table(refs: Sequence[Reference] | None = None, devices=None) -> str:
    """The leave-one-out as Markdown: one row per reference on a GPU of the device
    table, the point and range the other references predict for it (a prediction),
    the references that set it, the speedup it measured and whether the range holds
    it; then the share held and the median width."""
    devices = _devices() if devices is None else devices
    loo = leave_one_out(refs, devices)
    lines = [
        "| reference | layout (32-bit / AMP) | predicted by the others | set by | "
        "measured | inside |",
        "|---|---|---|---|---|---|",
    ]
    for r in loo["rows"]:
        lines.append(
            f"| {r['label']} | {_layout_text(r['layouts'])} | {r['point']:.2f}x "
            f"({r['low']:.2f}-{r['high']:.2f}x) | {', '.join(r['basis'][:3])} | "
            f"{r['measured']:.2f}x | {'yes' if r['inside'] else 'no'} |"
        )
    lines.append("")
    if loo["n"]:
        lines.append(
            f"Leave-one-out: {sum(r['inside'] for r in loo['rows'])} of {loo['n']} "
            f"references inside the range the others predict ({loo['inside']:.0%}); "
            f"median width {loo['median_width']:.2f}x (high / low); goal: at least "
            "90% inside at a median width of at most 1.4x."
        )
    if loo["no_range"]:
        lines.append(f"No other reference applies to: {', '.join(loo['no_range'])}.")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------


def build_parser() -> cli.ArgumentParser:
    """The options of ``python -m ampbook.calibration`` (no torch imported)."""
    p = cli.ArgumentParser(
        prog="python -m ampbook.calibration",
        formatter_class=cli.HelpFormatter,
        description="The references behind the doctor's calibrated AMP speedups.",
    )
    p.add_argument(
        "--write",
        action="store_true",
        help="retrace the published references' bounds (after a change to the cost "
        "model) and write them to data/reference/",
    )
    p.add_argument(
        "--results-dir",
        help="the committed GPU results whose layer profiles are references "
        "(default data/results)",
    )
    p.add_argument(
        "--predictions",
        action="store_true",
        help="the leave-one-out: each reference predicted by the others, the share "
        "inside their range and the median width",
    )
    return p


@cli.command("python -m ampbook.calibration")
def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    from ampbook.core.devices import display_name  # torch: after --help

    if a.write:
        write_bounds()
    if a.predictions:
        print(predictions_table(references(a.results_dir)))
        return 0
    refs = references(a.results_dir)
    print("| reference | GPU | kind | layout | fp32 eff. | AMP eff. | speedup |")
    print("|---|---|---|---|---|---|---|")
    for r in refs:
        fam = r.baseline_family
        e32, e16 = r.step_efficiency[fam], r.step_efficiency["16-bit"]
        lay = _layout_text((r.layout.get(fam), r.layout.get("16-bit")))
        print(
            f"| {r.network} | {display_name(r.gpu)} | {r.kind} | {lay} | {e32:.0%} | "
            f"{e16:.0%} | {r.measured_speedup:.2f} |"
        )
    print(
        "\nEfficiency: the cost model's bound over the measured time; a profile's is "
        "its kernel time, a published one's the whole step (host time included)."
    )
    return 0
