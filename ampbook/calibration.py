"""Calibrated AMP speedups: kernel efficiencies per operator class and dtype family,
from measured GPU profiles and published training throughputs, and a launch floor.

The roofline (``ampbook.costmodel.predict``) gives each precision's step a lower bound;
its ratio is the speedup *if both precisions reached the same share of their bound*.
They do not: on an A100, NVIDIA's ResNet-50 reaches about 43% of its bound with TF32
and 58% with AMP, and trains 2.63x faster with AMP where the ratio of the bounds is
1.9x. So a prediction needs the share each precision's kernels reach, which this module
takes from measurements, never from one network applied to all:

* **Efficiencies.** An operator belongs to a class (``costmodel.OP_CLASSES``:
  convolution, matrix product (attention and recurrent layers too), normalisation,
  element-wise) and its step to a dtype family: ``"tf32"`` (an fp32 step with TF32 on
  for convolutions and matrix products), ``"fp32"`` (TF32 off, or a GPU without it),
  ``"16-bit"`` (an AMP step). A *reference* gives an efficiency, bound over measured
  time, per (family, class):

  - a pair of committed GPU **layer profiles** (``ampbook.layer_profile``: per-module
    kernel times of one network, fp32 and AMP, on one GPU) gives one per class,
    measured: the modules of each class summed, bound over kernel time;
  - a **published training throughput** (``data/reference/training_throughputs.yml``:
    a network, its batch, the GPU, images per second in both precisions, with the
    source) gives one per family for the whole step, its time (batch / images per
    second) against the bound of the same network, batch and GPU
    (``reference_bounds``, stored in ``training_throughputs_bounds.json``): every class
    of that step gets it.
* **A range.** For the model diagnosed, each reference's efficiencies turn the bound
  of each class into a time, fp32 and AMP, and give a speedup; the range is the
  spread of those speedups over the references that measured both families the GPU
  needs (``calibrated_range``). Each reference is named with its distance from the
  diagnosed case: the same GPU, the same architecture or another; the same network or
  another, and how far its mix of classes (share of the fp32 bound per class) lies
  from the model's.
* **A launch floor.** A step cannot be faster than its kernels can be issued: eager
  PyTorch spends some microseconds of host time per operator. The per-kernel time is
  the median of the smallest element-wise calls of the committed GPU sweeps
  (``ampbook.bench_matmul``, where the time no longer depends on the size), and each
  precision's step takes at least its kernel count times that (``launch_floor``). AMP
  adds kernels (its casts), so at small batches the floor can make it slower.

    python -m ampbook.calibration          # the references and their efficiencies
    python -m ampbook.calibration --write  # retrace the published references' bounds
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from torch import nn

from ampbook import cli
from ampbook.costmodel import OP_CLASSES, Ceilings, Prediction, StepTrace, predict
from ampbook.paths import REFERENCE_DIR

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

    from ampbook.devices import load_devices

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
    from ampbook.devices import load_devices

    devices = load_devices() if devices is None else devices
    on = family == "tf32"
    return Ceilings.from_device(devices[gpu], tf32=on, matmul_tf32=on)


def class_bounds(p: Prediction) -> dict[str, float]:
    """Seconds of a predicted step per operator class (``costmodel.OP_CLASSES``); the
    optimizer step (not traced) counts as element-wise."""
    out = dict.fromkeys(OP_CLASSES, 0.0)
    for t in p.times:
        out[t.op.op_class] += t.time_s
    out["elementwise"] += p.optimizer_s
    return out


def _side_record(tr: StepTrace, ceilings: Ceilings, optimizer: str) -> dict[str, Any]:
    p = predict(tr, ceilings, optimizer=optimizer)
    return {
        "by_class_s": class_bounds(p),
        "bound_s": p.min_step_s,
        "kernels": int(tr.totals()["kernels"]),
    }


def reference_bounds(ref: Published, devices=None) -> dict[str, Any]:
    """The cost model's bound of a published reference's two steps: its network traced
    at each side's batch, on its GPU's ceilings; per class, with kernel counts."""
    from ampbook import costmodel as cm
    from ampbook.doctor import load_model

    model = load_model(ref.model)
    opt = "sgd" if ref.optimizer in ("sgd", "rmsprop") else "adam"
    out: dict[str, Any] = {"model": ref.model, "input": list(ref.input)}
    for name in SIDES:
        side = ref.side(name)
        prec = "amp-fp16" if side.family == "16-bit" else "fp32"
        tr = cm.trace_step(model, side.batch, 1, 1, prec, input_shape=ref.input)
        ceil = ceilings_for(ref.gpu, side.family if prec == "fp32" else "tf32", devices)
        out[name] = {"batch": side.batch, **_side_record(tr, ceil, opt)}
    return out


def load_bounds(path: str | Path | None = None) -> dict[str, Any]:
    """The stored bounds of the published references (``write_bounds``)."""
    path = Path(path) if path else BOUNDS_FILE
    if not path.exists():
        return {}
    return json.loads(path.read_text())["references"]


def write_bounds(path: str | Path | None = None, devices=None) -> dict[str, Any]:
    """Trace every published reference and store its bounds (a minute or two)."""
    path = Path(path) if path else BOUNDS_FILE
    bounds = {r.key: reference_bounds(r, devices) for r in load_published()}
    doc = {
        "note": "generated by `python -m ampbook.calibration --write` from "
        "training_throughputs.yml and the cost model; do not edit",
        "references": bounds,
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

    @property
    def families(self) -> set[str]:
        return {f for f, _ in self.efficiency}

    def label(self, devices=None) -> str:
        from ampbook.devices import display_name

        return f"{self.network} on {display_name(self.gpu, devices)}"

    @property
    def gpu_label(self) -> str:
        from ampbook.devices import display_name

        return display_name(self.gpu)


def _mix(by_class: Mapping[str, float]) -> dict[str, float]:
    total = sum(by_class.values()) or 1.0
    return {c: by_class.get(c, 0.0) / total for c in OP_CLASSES}


def published_references(
    published: Sequence[Published] | None = None, bounds: Mapping | None = None
) -> list[Reference]:
    """Each published pair as efficiencies: per family, the whole step's bound over its
    published time, the same for every class of the step."""
    published = load_published() if published is None else published
    bounds = load_bounds() if bounds is None else bounds
    out = []
    for ref in published:
        b = bounds.get(ref.key)
        if not b:
            continue  # not yet traced: python -m ampbook.calibration --write
        eff, whole = {}, {}
        for name in SIDES:
            side = ref.side(name)
            e = whole[side.family] = b[name]["bound_s"] / side.step_s
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


def profile_references(results_dir=None) -> list[Reference]:
    """Each GPU's pair of committed layer profiles (fp32 and amp-fp16, same GPU and
    setting) as efficiencies per class: the modules of a class summed, bound over
    kernel time (the unattributed time counts as element-wise)."""
    from ampbook.doctor import table_key
    from ampbook.results import load_results_dir

    profiles = [lp for lp in load_results_dir(results_dir).layer_profiles]
    out = []
    groups: dict[tuple, dict[str, Any]] = {}
    for lp in profiles:
        setting = (lp.device_name, lp.batch_size, lp.height, lp.width)
        groups.setdefault(setting, {})[lp.precision] = lp
    for (name, batch, h, w), g in groups.items():
        if "fp32" not in g or "amp-fp16" not in g:
            continue
        key = table_key(name) or name  # a GPU the table lacks keeps its own name
        eff, mixes, whole = {}, {}, {}
        for prec, fam_on in (("fp32", None), ("amp-fp16", "16-bit")):
            lp = g[prec]
            fam = fam_on or ("tf32" if lp.record.get("tf32") else "fp32")
            bound = dict.fromkeys(OP_CLASSES, 0.0)
            measured = dict.fromkeys(OP_CLASSES, 0.0)
            for layer in lp.layers:
                c = layer_class(layer.type)
                bound[c] += layer.predicted_s
                measured[c] += layer.measured_s
            measured["elementwise"] += lp.unattributed_s
            step = whole[fam] = sum(bound.values()) / sum(measured.values())
            for c in OP_CLASSES:
                has = bound[c] > 0 and measured[c] > 0
                eff[(fam, c)] = bound[c] / measured[c] if has else step
            mixes[prec] = _mix(bound)
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
    (``ampbook.bench_matmul``; an element-wise add of 65536 elements moves too few
    bytes to take more than its launch), or None without a sweep."""
    from ampbook.devices import display_name
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
    from ampbook.devices import load_devices

    devices = load_devices() if devices is None else devices
    return "tf32" if devices[gpu].tf32_tflops else "fp32"


def mix_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """How far two class mixes lie apart: half the summed absolute difference of their
    shares (0: the same mix, 1: no class in common)."""
    return 0.5 * sum(abs(a.get(c, 0.0) - b.get(c, 0.0)) for c in OP_CLASSES)


def gpu_distance(ref_gpu: str, gpu: str, devices=None) -> str:
    """``"same GPU"``, ``"same architecture"`` or ``"other architecture"`` (also for a
    GPU the device table lacks: its architecture is unknown)."""
    from ampbook.devices import load_devices

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
) -> dict[str, Any]:
    """The AMP speedup over fp32 on ``gpu`` at each applicable reference's
    efficiencies, and its range.

    ``*_by_class``: the model's bound per class on ``gpu`` (``class_bounds``), fp32 with
    TF32 where the GPU has it; ``kernels``: ``{"fp32": n, "amp": n}`` for the launch
    floor; ``model``: the doctor's spec (a reference of the same spec is "same
    network"); ``exclude``: a reference key to leave out (the chapter's
    leave-one-out). Returns ``{"low", "high", "equal_share", "family", "rows",
    "launch"}``, ``low``/``high`` None when no reference applies; each row names the
    reference, its speedup, the fp32 and AMP step times, and its distance."""
    family = baseline_family(gpu, devices)
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
                "gpu_distance": gpu_distance(ref.gpu, gpu, devices),
                "same_network": bool(model and ref.model == model),
                "mix_distance": mix_distance(mix, ref.mix),
                "measured_speedup": ref.measured_speedup,
            }
        )
    rows.sort(key=lambda r: r["speedup"])
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
        "equal_share": equal,
        "low": rows[0]["speedup"] if rows else None,
        "high": rows[-1]["speedup"] if rows else None,
        "rows": rows,
        "launch": launch,
    }


def published_prediction(
    ref: Published,
    refs: Sequence[Reference] | None = None,
    exclude_own: bool = True,
    bounds: Mapping | None = None,
    devices=None,
) -> dict[str, Any]:
    """The calibrated range for a published reference's own network, batch and GPU
    (from its stored bounds, per image: its two runs may use different batches),
    without its own efficiencies (``exclude_own``): what the other references
    predict for it, to hold against its published speedup."""
    refs = references() if refs is None else refs
    b = (load_bounds() if bounds is None else bounds)[ref.key]
    per_image = {
        name: {c: s / b[name]["batch"] for c, s in b[name]["by_class_s"].items()}
        for name in SIDES
    }
    return calibrated_range(
        per_image["baseline"], per_image["amp"], ref.gpu, refs, model=ref.model,
        exclude=ref.key if exclude_own else None, devices=devices,
    )  # fmt: skip


def distance_text(row: Mapping[str, Any]) -> str:
    """A reference row's distance in words: "same GPU, same network" or "other
    architecture, other network (class mix 23% apart)"."""
    net = (
        "same network"
        if row["same_network"]
        else f"other network (class mix {row['mix_distance']:.0%} apart)"
    )
    return f"{row['gpu_distance']}, {net}"


def _range_text(r: Mapping[str, Any]) -> str:
    if r["low"] is None:
        return "no reference applies"
    return f"{r['low']:.2f}-{r['high']:.2f}x ({len(r['rows'])} refs)"


def predictions_table(refs: Sequence[Reference] | None = None, devices=None) -> str:
    """A Markdown table, one row per published reference kept as data: its network,
    GPU and batch, the range the other references predict for it (leave-one-out: a
    prediction), the range with its own efficiencies (a cross-check) and the speedup
    published."""
    from ampbook.devices import display_name

    refs = references() if refs is None else refs
    lines = [
        "| model | GPU | batch (32-bit / AMP) | predicted without it | with it "
        "(cross-check) | published |",
        "|---|---|---|---|---|---|",
    ]
    for ref in load_published(devices=devices):
        other = published_prediction(ref, refs, exclude_own=True, devices=devices)
        own = published_prediction(ref, refs, exclude_own=False, devices=devices)
        lines.append(
            f"| {ref.network} | {display_name(ref.gpu)} | {ref.baseline.batch} / "
            f"{ref.amp.batch} | {_range_text(other)} | {_range_text(own)} | "
            f"{ref.speedup:.2f}x |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------


@cli.command("python -m ampbook.calibration")
def main(argv: list[str] | None = None) -> int:
    from ampbook.devices import display_name

    p = cli.ArgumentParser(
        prog="python -m ampbook.calibration",
        description="The references behind the doctor's calibrated AMP speedups.",
    )
    p.add_argument("--write", action="store_true", help="retrace the published ones")
    p.add_argument("--results-dir", help="committed GPU results (default data/results)")
    p.add_argument(
        "--predictions",
        action="store_true",
        help="per published reference: the range the others predict for it, the range "
        "with its own efficiencies (a cross-check) and the published speedup",
    )
    a = p.parse_args(argv)
    if a.write:
        write_bounds()
    if a.predictions:
        print(predictions_table(references(a.results_dir)))
        return 0
    refs = references(a.results_dir)
    print("| reference | GPU | kind | fp32 eff. | AMP eff. | speedup |")
    print("|---|---|---|---|---|---|")
    for r in refs:
        fam = "tf32" if "tf32" in r.families else "fp32"
        e32, e16 = r.step_efficiency[fam], r.step_efficiency["16-bit"]
        print(
            f"| {r.network} | {display_name(r.gpu)} | {r.kind} | {e32:.0%} | "
            f"{e16:.0%} | {r.measured_speedup:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
