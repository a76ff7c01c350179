"""Calibrated AMP speedups: kernel efficiencies per operator class and dtype family,
from measured GPU profiles and published training throughputs, and a launch floor.

The roofline (``ampbook.predict.roofline.predict``) gives each precision's step a lower
bound; its ratio is the speedup *if both precisions reached the same share of their
bound*. They do not: on an A100, NVIDIA's ResNet-50 reaches about 43% of its bound with
TF32 and 58% with AMP, and trains 2.63x faster with AMP where the ratio of the bounds is
1.9x. So a prediction needs the share each precision's kernels reach, which this module
takes from measurements, never from one network applied to all:

* **Efficiencies** come from the references (``ampbook.predict.references``:
  committed layer profiles and published training throughputs), per operator
  class and dtype family.
* **A range.** For the model diagnosed, each reference's efficiencies turn the bound
  of each class into a time, fp32 and AMP, and give a speedup. The references are
  weighted by how close they are (``closeness``: the same network or how far its mix
  of classes lies, the memory format of each precision, the same GPU, architecture or
  another, the batch); the point estimate is the weighted geometric mean, its error
  the weighted spread (at least ``MIN_ERROR``), the range the point times and over
  that error, and ``basis`` names the references that carry most of the weight
  (``calibrated_range``). ``leave_one_out`` predicts each reference from the others.
* **Layout and classes.** A reference's efficiencies belong to the memory format each
  precision ran in (``steptrace.with_memory_format`` puts NCHW's transposes around
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

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ampbook.core import cli

if TYPE_CHECKING:  # torch and the cost model are imported where they are used, so
    # that ``python -m ampbook.calibration --help`` answers without importing torch

    pass
from ampbook.predict.references import (
    Reference,
    class_mix,
    references,
    write_bounds,
)

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
    from ampbook.predict.opcost import OP_CLASSES

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
    mix = class_mix(fp32_by_class)
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


def leave_one_out(
    refs: Sequence[Reference] | None = None, devices=None
) -> dict[str, Any]:
    """Every reference predicted from the others (on a GPU of the device table, where
    a range can be given): rows with the point, the range, its width (high / low),
    the measured speedup and whether the range holds it; ``inside`` (the share held),
    ``median_width`` and ``n``. References with no applicable other are counted
    apart (``no_range``)."""
    refs = references() if refs is None else refs
    from ampbook.core.devices import load_devices

    devices = load_devices() if devices is None else devices
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


def layout_text(layouts: Sequence[str | None]) -> str:
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
        else (f", layout {layout_text(row['layouts'])}")
    )
    return f"{row['gpu_distance']}, {net}{lay}"


def predictions_table(refs: Sequence[Reference] | None = None, devices=None) -> str:
    """The leave-one-out as Markdown: one row per reference on a GPU of the device
    table, the point and range the other references predict for it (a prediction),
    the references that set it, the speedup it measured and whether the range holds
    it; then the share held and the median width."""
    from ampbook.core.devices import load_devices

    devices = load_devices() if devices is None else devices
    loo = leave_one_out(refs, devices)
    lines = [
        "| reference | layout (32-bit / AMP) | predicted by the others | set by | "
        "measured | inside |",
        "|---|---|---|---|---|---|",
    ]
    for r in loo["rows"]:
        lines.append(
            f"| {r['label']} | {layout_text(r['layouts'])} | {r['point']:.2f}x "
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
        lay = layout_text((r.layout.get(fam), r.layout.get("16-bit")))
        print(
            f"| {r.network} | {display_name(r.gpu)} | {r.kind} | {lay} | {e32:.0%} | "
            f"{e16:.0%} | {r.measured_speedup:.2f} |"
        )
    print(
        "\nEfficiency: the cost model's bound over the measured time; a profile's is "
        "its kernel time, a published one's the whole step (host time included)."
    )
    return 0
