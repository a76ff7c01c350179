"""The references of the calibrated AMP speedups (``ampbook.predict.calibrate``), each
as efficiencies (bound over measured time) per operator class (``opcost.OP_CLASSES``)
and dtype family (``"tf32"``, ``"fp32"``, ``"16-bit"``):

- a pair of committed GPU **layer profiles** (fp32 and AMP, per-module kernel times
  of one network on one GPU) gives one per class, measured;
- a **published training throughput** (``data/reference/training_throughputs.yml``)
  gives one per family for the whole step (its time against the bound of the same
  network, batch and GPU, stored by ``python -m ampbook.calibration --write``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # torch is imported where used: ``--help`` answers without it
    from ampbook.predict.roofline import Ceilings, Prediction
    from ampbook.predict.steptrace import StepTrace
from ampbook.core.paths import REFERENCE_DIR

PUBLISHED_FILE = REFERENCE_DIR / "training_throughputs.yml"
BOUNDS_FILE = REFERENCE_DIR / "training_throughputs_bounds.json"
# Published throughputs held out of the calibration (the suite checks ranges on them)
HELDOUT_FILE = REFERENCE_DIR / "training_throughputs_heldout.yml"
HELDOUT_BOUNDS_FILE = REFERENCE_DIR / "training_throughputs_heldout_bounds.json"
SIDES = ("baseline", "amp")
_PRECISION_FAMILY = {"fp32": "fp32", "fp32-tf32": "tf32", "amp-fp16": "16-bit"}
# Module types per class, for layer profiles (per-module times).
_NORM_TYPES = ("Norm",)
_MATMUL_TYPES = ("Linear", "MultiheadAttention", "LSTM", "GRU", "RNN", "Bilinear")


class CalibrationError(ValueError):
    """A reference file that cannot be read as one: the message says what and where."""


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


def scope_class(scope_type: str, op: str) -> str:
    """The operator class of a traced operator, by the module it runs in, as a layer
    profile classes its measured time (``layer_class``): a convolution's autocast
    casts, its gradient casts and its layout transposes are the convolution's, as
    the time measured for that module includes them. An operator in a module of no
    class (the model's own ``forward``, a block, the loss) keeps its operator's class
    (``opcost.op_class``)."""
    from ampbook.predict.opcost import op_class

    c = layer_class(scope_type or "")
    return c if c != "elementwise" else op_class(op)


def class_bounds(p: Prediction) -> dict[str, float]:
    """Seconds of a predicted step per operator class (``opcost.OP_CLASSES``),
    each operator classed by its module (``scope_class``: measured time and traced
    operators alike); the optimizer step (not traced) counts as element-wise, as a
    layer profile counts it (unattributed)."""
    from ampbook.predict.opcost import OP_CLASSES

    out = dict.fromkeys(OP_CLASSES, 0.0)
    for t in p.times:
        out[scope_class(t.op.scope_type, t.op.op)] += t.time_s
    out["elementwise"] += p.optimizer_s
    return out


def _side_record(tr: StepTrace, ceilings: Ceilings, optimizer: str) -> dict[str, Any]:
    from ampbook.predict.roofline import predict

    p = predict(tr, ceilings, optimizer=optimizer)
    return {
        "by_class_s": class_bounds(p),
        "bound_s": p.min_step_s,
        "kernels": int(tr.totals()["kernels"]),
    }


def reference_bounds(ref: Published, devices=None) -> dict[str, Any]:
    """The cost model's bound of a published reference's two steps: its network traced
    at each side's batch, on its GPU's ceilings; per class, with kernel counts."""
    from ampbook.predict.roofline import Ceilings
    from ampbook.predict.specs import load_model
    from ampbook.predict.steptrace import trace_step, with_memory_format

    devices = _devices() if devices is None else devices
    model = load_model(ref.model)
    opt = "sgd" if ref.optimizer in ("sgd", "rmsprop") else "adam"
    out: dict[str, Any] = {"model": ref.model, "input": list(ref.input)}
    for name in SIDES:
        side = ref.side(name)
        prec = "amp-fp16" if side.family == "16-bit" else "fp32"
        tr = trace_step(model, side.batch, 1, 1, prec, input_shape=ref.input)
        tr = with_memory_format(tr, side.memory_format)
        # TF32 for convolutions and matrix products but for an fp32 baseline (an AMP
        # step's fp32 leftovers run as a TF32 baseline's do)
        on = side.family != "fp32"
        ceil = Ceilings.from_device(devices[ref.gpu], tf32=on, matmul_tf32=on)
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
    if path == BOUNDS_FILE:  # the held-out published results, in their own file
        held = {
            r.key: reference_bounds(r, devices) for r in load_published(HELDOUT_FILE)
        }
        HELDOUT_BOUNDS_FILE.write_text(
            json.dumps({"note": "generated by `python -m ampbook.calibration --write` "
                        "from training_throughputs_heldout.yml; do not edit",
                        "references": held}, indent=1, sort_keys=True) + "\n"
        )  # fmt: skip
    profiles = {}
    for group in profile_groups():
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
    def baseline_family(self) -> str:
        return "tf32" if "tf32" in self.families else "fp32"


def class_mix(by_class: Mapping[str, float]) -> dict[str, float]:
    from ampbook.predict.opcost import OP_CLASSES

    total = sum(by_class.values()) or 1.0
    return {c: by_class.get(c, 0.0) / total for c in OP_CLASSES}


def published_references(
    published: Sequence[Published] | None = None, bounds: Mapping | None = None
) -> list[Reference]:
    """Each published pair as efficiencies: per family, the whole step's bound over its
    published time, the same for every class of the step (a whole-step efficiency,
    not a kernel one: the published time includes the host's share of the step)."""
    from ampbook.predict.opcost import OP_CLASSES

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
                class_mix(b["baseline"]["by_class_s"]),
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
    from ampbook.predict.roofline import Ceilings, predict
    from ampbook.predict.specs import load_model
    from ampbook.predict.steptrace import trace_step, with_memory_format

    devices = _devices() if devices is None else devices
    ceil = Ceilings.from_device(devices[gpu], tf32=True, matmul_tf32=True)
    model = load_model("erfnet")
    out: dict[str, Any] = {}
    for prec in ("fp32", "amp-fp16"):
        tr = trace_step(model, batch, h, w, prec)
        tr = with_memory_format(tr, layout)
        p = predict(tr, ceil, optimizer="adam")
        out[prec] = {"by_class_s": class_bounds(p), "bound_s": p.min_step_s}
    return out


def profile_groups(results_dir=None) -> list[tuple[tuple, dict[str, Any]]]:
    """The committed layer profiles in pairs: ((GPU key or name, batch, height,
    width, layout), {precision: profile})."""
    from ampbook.predict.specs import table_key
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
    from ampbook.predict.opcost import OP_CLASSES

    devices = _devices()
    stored = load_profile_bounds()
    out = []
    for (key, batch, h, w, layout), g in profile_groups(results_dir):
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
            mixes[prec] = class_mix(bound)
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


def heldout_references() -> list[Reference]:
    """The published results held out of the calibration (``HELDOUT_FILE``, bounds in
    ``HELDOUT_BOUNDS_FILE``), as references: what the doctor's ranges are scored
    against, never calibrated on."""
    return published_references(
        load_published(HELDOUT_FILE), load_bounds(HELDOUT_BOUNDS_FILE)
    )


def references(results_dir=None) -> list[Reference]:
    """Every reference: the committed layer profiles, then the published pairs."""
    return profile_references(results_dir) + published_references()
