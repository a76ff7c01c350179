"""The references of the calibrated AMP speedups (``ampbook.predict.calibrate``) as
efficiencies (bound over measured time) per operator class and dtype family (``"tf32"``,
``"fp32"``, ``"16-bit"``): a pair of committed GPU **layer profiles** (per-module
kernel times) gives one per class; a **published training throughput**
(``data/reference/training_throughputs.yml``) one per family for the whole step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # torch is imported where used: ``--help`` answers without it
    from ampbook.predict.roofline import Ceilings, Prediction
from ampbook.core.paths import REFERENCE_DIR

PUBLISHED_FILE = REFERENCE_DIR / "training_throughputs.yml"
BOUNDS_FILE = REFERENCE_DIR / "training_throughputs_bounds.json"
# Published throughputs held out of the calibration (the suite checks ranges on them)
HELDOUT_FILE = REFERENCE_DIR / "training_throughputs_heldout.yml"
HELDOUT_BOUNDS_FILE = REFERENCE_DIR / "training_throughputs_heldout_bounds.json"
SIDES = ("baseline", "amp")
_PRECISION_FAMILY = {"fp32": "fp32", "fp32-tf32": "tf32", "amp-fp16": "16-bit"}
# Module types per class, for layer profiles (per-module times).
_CLASS_TYPES = {
    "conv": ("Conv",),
    "matmul": ("Linear", "MultiheadAttention", "LSTM", "GRU", "RNN", "Bilinear"),
    "norm": ("Norm",),
}


class CalibrationError(ValueError):
    """A reference file that cannot be read as one."""


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
    source: dict

    @property
    def speedup(self) -> float:
        """AMP's throughput over the baseline's (images per second)."""
        return self.amp.images_per_s / self.baseline.images_per_s

    def side(self, name: str) -> Side:
        return self.baseline if name == "baseline" else self.amp


def load_published(path: str | Path | None = None, devices=None) -> list[Published]:
    """The published references, checked (a mistyped figure fails: the source's own
    speedup must lie within 2% of the ratio of its throughputs)."""
    import yaml

    path = Path(path) if path else PUBLISHED_FILE
    doc = yaml.safe_load(path.read_text())
    devices = device_table(devices)
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
            e["optimizer"], {"key": e["source"], **src},
        )  # fmt: skip
        if abs(ref.speedup / ref.published_speedup - 1) > 0.02:
            raise CalibrationError(
                f"{where}: throughputs give {ref.speedup:.3f}x, the source says "
                f"{ref.published_speedup}x"
            )
        out.append(ref)
    return out


def class_bounds(p: Prediction) -> dict[str, float]:
    """Seconds of a predicted step per operator class, an operator's class the module's
    it runs in, as a layer profile classes its measured time (a convolution's casts and
    transposes are the convolution's), in a module of no class its own; the optimizer
    step counts as element-wise, as a layer profile counts it (unattributed)."""
    from ampbook.predict.opcost import OP_CLASSES, op_class

    out = dict.fromkeys(OP_CLASSES, 0.0)
    for t in p.times:
        c = layer_class(t.op.scope_type or "")
        out[c if c != "elementwise" else op_class(t.op.op)] += t.time_s
    out["elementwise"] += p.optimizer_s
    return out


def _side_record(
    model, batch: int, h: int, w: int, precision: str, layout: str, ceilings: Ceilings,
    optimizer: str, input_shape=None,
) -> dict[str, Any]:  # fmt: skip
    """One step's bound per class on ``ceilings``, its total and its kernel count."""
    from ampbook.predict.roofline import predict
    from ampbook.predict.steptrace import trace_step, with_memory_format

    tr = trace_step(model, batch, h, w, precision, input_shape=input_shape)
    tr = with_memory_format(tr, layout)
    p = predict(tr, ceilings, optimizer=optimizer)
    kernels = int(tr.totals()["kernels"])
    return {"by_class_s": class_bounds(p), "bound_s": p.min_step_s, "kernels": kernels}


def reference_bounds(ref: Published, devices=None) -> dict[str, Any]:
    """The cost model's bound of a published reference's two steps: its network traced
    at each side's batch, on its GPU's ceilings; per class, with kernel counts."""
    from ampbook.predict.roofline import Ceilings
    from ampbook.predict.specs import load_model

    devices = device_table(devices)
    model = load_model(ref.model)
    opt = "sgd" if ref.optimizer in ("sgd", "rmsprop") else "adam"
    out: dict[str, Any] = {"model": ref.model, "input": list(ref.input)}
    for name in SIDES:
        side = ref.side(name)
        prec = "amp-fp16" if side.family == "16-bit" else "fp32"
        # TF32 for convolutions and matrix products but for an fp32 baseline (an AMP
        # step's fp32 leftovers run as a TF32 baseline's do)
        on = side.family != "fp32"
        ceil = Ceilings.from_device(devices[ref.gpu], tf32=on, matmul_tf32=on)
        rec = _side_record(
            model, side.batch, 1, 1, prec, side.memory_format, ceil, opt, ref.input
        )
        out[name] = {"batch": side.batch, **rec}
    return out


def load_bounds(path: str | Path | None = None, what: str = "references") -> dict:
    """The stored bounds (``write_bounds``) of the published references, or of the
    committed layer profiles' settings (``"profiles"``, keyed by ``profile_key``)."""
    path = Path(path) if path else BOUNDS_FILE
    return json.loads(path.read_text()).get(what, {}) if path.exists() else {}


def load_profile_bounds(path: str | Path | None = None) -> dict[str, Any]:
    return load_bounds(path, "profiles")


def write_bounds() -> dict[str, Any]:
    """Trace every published reference (the held-out ones to their own file) and the
    committed layer profiles' settings, and store their bounds (a minute or two)."""
    bounds = {r.key: reference_bounds(r) for r in load_published()}
    held = {r.key: reference_bounds(r) for r in load_published(HELDOUT_FILE)}
    _write(HELDOUT_BOUNDS_FILE, "training_throughputs_heldout.yml", references=held)
    devices = device_table()
    profiles = {
        profile_key(*key): profile_bounds(*key, devices=devices)
        for key, _ in profile_groups()
        if key[0] in devices
    }
    source = "training_throughputs.yml, the committed layer profiles and the cost model"
    _write(BOUNDS_FILE, source, references=bounds, profiles=profiles)
    return bounds


def _write(path: Path, source: str, **parts) -> None:
    note = f"generated by `python -m ampbook.calibration --write` from {source}"
    doc = {"note": f"{note}; do not edit", **parts}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


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
    # per family: the whole step's bound over its measured time; its memory format;
    # its bound per class of one sample (for ``reference_prediction``)
    step_efficiency: dict[str, float] = field(default_factory=dict)
    layout: dict[str, str] = field(default_factory=dict)
    batch: int = 0  # the baseline's batch (the AMP side's may differ)
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
    published time (which includes the host's share), the same for every class."""
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
            eff.update({(side.family, c): e for c in OP_CLASSES})
        shape = "x".join(map(str, ref.input))
        setting = f"batch {ref.baseline.batch}/{ref.amp.batch} x {shape}"
        out.append(
            Reference(ref.key, "published", ref.network, ref.gpu, eff,
                      class_mix(b["baseline"]["by_class_s"]), ref.speedup, ref.model,
                      setting, ref.source, step_efficiency=whole, layout=layout,
                      batch=ref.baseline.batch, per_image=per_image)
        )  # fmt: skip
    return out


def layer_class(module_type: str) -> str:
    """The operator class of a layer profile's module type."""
    for c, types in _CLASS_TYPES.items():
        if any(t in module_type for t in types):
            return c
    return "elementwise"


def device_table(devices=None):
    """``devices``, or the device table when None."""
    from ampbook.core.devices import load_devices

    return load_devices() if devices is None else devices


def profile_key(gpu: str, batch: int, h: int, w: int, layout: str) -> str:
    """The key of a layer-profile setting in the stored bounds."""
    return f"{gpu}-{batch}x{h}x{w}-{layout}"


def profile_bounds(
    gpu: str, batch: int, h: int, w: int, layout: str, devices=None
) -> dict[str, Any]:
    """The cost model's bound per class of ERFNet's step at a layer profile's setting,
    fp32 (TF32 on) and amp-fp16, classed as the doctor classes the model it diagnoses
    (so the profile applied to its own network gives back its measured ratio)."""
    from ampbook.predict.roofline import Ceilings
    from ampbook.predict.specs import load_model

    devices = device_table(devices)
    ceil = Ceilings.from_device(devices[gpu], tf32=True, matmul_tf32=True)
    model = load_model("erfnet")
    out: dict[str, Any] = {}
    for prec in ("fp32", "amp-fp16"):
        out[prec] = _side_record(model, batch, h, w, prec, layout, ceil, "adam")
        del out[prec]["kernels"]  # the stored profile bounds carry none
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
    """Each pair of committed layer profiles as efficiencies per class: the bound of a
    class (the current model's on a GPU of the device table, else the profile's) over
    its measured kernel time (unattributed time counts as element-wise)."""
    from ampbook.predict.opcost import OP_CLASSES

    devices = device_table()
    stored = load_profile_bounds()
    out = []
    for (key, batch, h, w, layout), g in profile_groups(results_dir):
        listed = key in devices
        traced = stored.get(profile_key(key, batch, h, w, layout)) if listed else None
        if traced is None and listed:
            traced = profile_bounds(key, batch, h, w, layout, devices)
        eff, mixes, whole, per_image = {}, {}, {}, {}
        for prec, fam_on in (("fp32", None), ("amp-fp16", "16-bit")):
            lp = g[prec]
            fam = fam_on or ("tf32" if lp.record.get("tf32") else "fp32")
            measured = dict.fromkeys(OP_CLASSES, 0.0)
            bound = dict(measured)
            for layer in lp.layers:
                measured[layer_class(layer.type)] += layer.measured_s
                bound[layer_class(layer.type)] += layer.predicted_s
            measured["elementwise"] += lp.unattributed_s
            # the optimizer's bound, as its time is the unattributed one
            bound["elementwise"] += max(
                lp.predicted_step_s - sum(x.predicted_s for x in lp.layers), 0.0
            )
            if traced is not None:
                bound = dict(traced[prec]["by_class_s"])
            step = whole[fam] = sum(bound.values()) / sum(measured.values())
            for c in OP_CLASSES:
                has = bound[c] > 0 and measured[c] > 0
                eff[(fam, c)] = bound[c] / measured[c] if has else step
            mixes[prec] = class_mix(bound)
            per_image[fam] = {c: s / batch for c, s in bound.items()}
        fp32, amp = g["fp32"], g["amp-fp16"]
        title = f"layer profiles {Path(fp32.path).name}, {Path(amp.path).name}"
        out.append(
            Reference(f"profile-{key}-{batch}x{h}x{w}", "profile", "ERFNet", key, eff,
                      mixes["fp32"], fp32.measured_total_s / amp.measured_total_s,
                      "erfnet", f"batch {batch} x 3x{h}x{w}", {"title": title},
                      whole, layout={f: layout for f in whole}, batch=batch,
                      per_image=per_image)
        )  # fmt: skip
    return out


def heldout_references() -> list[Reference]:
    """The published results held out of the calibration, as references: what the
    doctor's ranges are scored against, never calibrated on."""
    return published_references(
        load_published(HELDOUT_FILE), load_bounds(HELDOUT_BOUNDS_FILE)
    )


def references(results_dir=None) -> list[Reference]:
    """Every reference: the committed layer profiles, then the published pairs."""
    return profile_references(results_dir) + published_references()
