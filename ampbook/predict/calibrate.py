"""Calibrated AMP speedups from the references' efficiencies, and a launch floor.

The roofline's ratio of bounds is the speedup *if both precisions reached the same
share of their bound*. They do not (on an A100, NVIDIA's ResNet-50 reaches about 43%
of its bound with TF32 and 58% with AMP), so each reference's efficiencies turn the
model's bound per class into fp32 and AMP times; the references' speedups are weighted
by how close they are (``closeness``), the error is what the leave-one-out missed by
(``ErrorModel``). ``python -m ampbook.calibration`` lists them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ampbook.predict.hostmodel import HostModel, host_model
from ampbook.predict.references import Reference, class_mix, device_table, references


@dataclass(frozen=True)
class LaunchFloor:
    """Host time per eager operator, measured on a GPU."""

    per_kernel_s: float
    source: str  # what it was measured on

    def floor_s(self, kernels: int) -> float:
        return kernels * self.per_kernel_s


def launch_floor(results_dir=None) -> LaunchFloor | None:
    """The median time of the committed GPU sweeps' smallest element-wise calls (too
    few bytes to take more than their launch), or None without a sweep."""
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


def baseline_family(gpu: str, devices=None) -> str:
    """The family of the fp32 baseline on ``gpu``: TF32 where it has TF32 cores."""
    devices = device_table(devices)
    return "tf32" if devices[gpu].tf32_tflops else "fp32"


def mix_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Half the summed absolute difference of two class mixes' shares (0 to 1)."""
    from ampbook.predict.opcost import OP_CLASSES

    return 0.5 * sum(abs(a.get(c, 0.0) - b.get(c, 0.0)) for c in OP_CLASSES)


GPU_DISTANCES = tuple(
    "same GPU|same chip|same architecture|same segment|other architecture".split("|")
)


def gpu_distance(ref_gpu: str, gpu: str, devices=None) -> str:
    """How far two GPUs of the device table lie apart (``GPU_DISTANCES``): a chip is
    shared by an H100 and an H200, an architecture by an A100 and an RTX 3070, a
    segment by GeForce, workstation or data-centre cards."""
    devices = device_table(devices)
    if ref_gpu == gpu:
        return "same GPU"
    if ref_gpu not in devices or gpu not in devices:
        return "other architecture"
    a, b = devices[ref_gpu], devices[gpu]
    if getattr(a, "chip", None) and a.chip == getattr(b, "chip", None):
        return "same chip"
    if a.architecture == b.architecture:
        return "same architecture"
    if getattr(a, "segment", None) and a.segment == getattr(b, "segment", None):
        return "same segment"
    return "other architecture"


def layout_factor(
    refs: Sequence[Reference], exclude: str | None = None
) -> float | None:
    """How much of its 16-bit efficiency a step keeps in NCHW against NHWC (cuDNN's
    penalty, which the bound leaves out): the geometric mean of the ratio over pairs
    of references whose AMP runs differ in memory format only; None without one."""
    logs = []
    usable = [r for r in refs if r.key != exclude and "16-bit" in r.step_efficiency]
    for a in usable:
        for b in usable:
            fam = a.baseline_family
            same = (a.model, a.gpu, fam, a.layout.get(fam)) == (
                b.model, b.gpu, b.baseline_family, b.layout.get(fam)
            )  # fmt: skip
            amp = (a.layout.get("16-bit"), b.layout.get("16-bit"))
            if same and amp == ("channels_first", "channels_last"):
                e_a, e_b = a.step_efficiency["16-bit"], b.step_efficiency["16-bit"]
                logs.append(math.log(e_a / e_b))
    return math.exp(sum(logs) / len(logs)) if logs else None


def step_time(by_class: Mapping[str, float], ref: Reference, family: str) -> float:
    """A step's kernel time at a reference's efficiencies: each class's bound over its
    efficiency."""
    return sum(s / ref.efficiency[(family, c)] for c, s in by_class.items() if s > 0)


# How much a reference counts for a prediction (``closeness``): a factor per way it
# differs from the case predicted, the values ``fit`` gives on the committed references
# (tests/test_calibration.py refits them).
@dataclass(frozen=True)
class Weights:
    other_network: float = 1.0  # times exp(-class-mix distance / mix_scale)
    mix_scale: float = 0.15
    other_layout: float = 0.02  # per precision whose memory format differs
    same_chip: float = 1.0  # another GPU of the same chip
    same_architecture: float = 0.1
    same_segment: float = 0.6
    other_architecture: float = 0.1
    batch_octaves: float = 3.0  # 1 / (1 + |log2(batch ratio)| / batch_octaves)

    def gpu(self, distance: str) -> float:
        """The factor of a ``GPU_DISTANCES`` entry (the same GPU: 1)."""
        return (
            1.0 if distance == "same GPU" else getattr(self, distance.replace(" ", "_"))
        )


WEIGHTS = Weights()
# The grid ``fit`` searches (each field's candidates).
WEIGHT_GRID = {
    "other_network": (0.5, 1.0),
    "other_layout": (0.02, 0.1, 0.3),
    "same_chip": (0.3, 0.6, 1.0),
    "same_architecture": (0.1, 0.3, 0.6),
    "same_segment": (0.1, 0.3, 0.6),
    "other_architecture": (0.1, 0.3, 0.6),
}


def closeness(
    ref: Reference,
    gpu: str,
    model: str | None,
    mix: Mapping[str, float],
    layouts: tuple[str, str],
    family: str,
    batch: int | None = None,
    devices=None,
    weights: Weights = WEIGHTS,
) -> tuple[float, dict[str, Any]]:
    """A reference's weight for a prediction (``layouts``: the baseline's and AMP's)
    and the distances that set it."""
    w = weights
    same_net = bool(model and ref.model == model)
    md = mix_distance(mix, ref.mix)
    w_net = 1.0 if same_net else w.other_network * math.exp(-md / w.mix_scale)
    own = (ref.layout.get(family), ref.layout.get("16-bit"))
    differ = sum(a != b for a, b in zip(own, layouts))
    w_layout = w.other_layout**differ
    gd = gpu_distance(ref.gpu, gpu, devices)
    w_batch = 1.0
    if batch and ref.batch:
        w_batch = 1 / (1 + abs(math.log2(batch / ref.batch)) / w.batch_octaves)
    return w_net * w_layout * w.gpu(gd) * w_batch, {
        "gpu_distance": gd, "same_network": same_net, "mix_distance": md,
        "layouts": list(own), "layout_match": differ == 0,
    }  # fmt: skip


@dataclass(frozen=True)
class ErrorModel:
    """A prediction's expected absolute log error, ``base + slope * distance`` from its
    references, times ``cover`` to hold ``COVER`` of the leave-one-out's errors (no
    floor: a prediction close to its references gets a narrow range)."""

    base: float
    slope: float
    cover: float

    def error(self, distance: float) -> float:
        return self.cover * (self.base + self.slope * max(distance, 0.0))


COVER = 0.9  # the share of the leave-one-out's errors the range must hold
GOAL_WIDTH = 1.4  # the leave-one-out's goal: COVER inside at most this median width
# ``fit``'s, refitted in tests/test_calibration.py
ERRORS = ErrorModel(base=0.0563, slope=0.0261, cover=2.078)


def fit_errors(rows: Sequence[Mapping[str, float]], cover: float = COVER) -> ErrorModel:
    """An ``ErrorModel`` from leave-one-out rows: a least-squares line of the absolute
    log error on the distance, then the smallest multiple holding ``cover`` of them."""
    xs = [r["distance"] for r in rows]
    ys = [abs(r["log_error"]) for r in rows]
    n = len(rows)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    slope = max(slope, 0.0)
    base = my - slope * mx
    if base <= 0:  # through the origin
        slope = sum(x * y for x, y in zip(xs, ys)) / (sum(x * x for x in xs) or 1.0)
        base = 1e-3
    k = max(math.ceil(cover * n) - 1, 0)
    base, slope = round(base, 4), round(slope, 4)  # the stored model's own digits
    ratios = sorted(y / (base + slope * x) for x, y in zip(xs, ys))
    return ErrorModel(base, slope, math.ceil(ratios[k] * 1000) / 1000)


def _weighted(rows: Sequence[dict[str, Any]], key: str) -> tuple[float, float]:
    """The weighted geometric mean of ``key`` and the weighted spread of its log."""
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
    weights: Weights | None = None,
    errors: ErrorModel | None = None,
    host: HostModel | None = None,
    data_s: float | None = None,
) -> dict[str, Any]:
    """The AMP speedup over fp32 on ``gpu`` from the model's bounds per class
    (``class_bounds``; ``memory_format``: one for both or ``(baseline, amp)``): the
    weighted geometric mean of the applicable references' speedups and its range.

    The *step* (``point``, ``low``, ``high``: kernels, plus ``host``'s idle for
    kernel-time references, at least the launch floor and ``data_s``) and the
    *kernels* (``kernel_point``...); None when no reference applies."""
    family = baseline_family(gpu, devices)
    one = isinstance(memory_format, str)
    layouts = (memory_format, memory_format) if one else tuple(memory_format)
    factor = layout_factor(refs, exclude)
    floors = (0.0, 0.0)
    if floor and kernels:
        floors = (floor.floor_s(kernels["fp32"]), floor.floor_s(kernels["amp"]))
    rows = []
    mix = class_mix(fp32_by_class)
    for ref in refs:
        if ref.key == exclude or not {family, "16-bit"} <= ref.families:
            continue
        times = _reference_times(
            ref, fp32_by_class, amp_by_class, family, layouts[1], factor, host,
            *floors, data_s or 0.0,
        )  # fmt: skip
        weight, dist = closeness(
            ref, gpu, model, mix, layouts, family, batch, devices, weights or WEIGHTS
        )
        rows.append(
            {"key": ref.key, "label": ref.label(devices), "kind": ref.kind,
             "publisher": _publisher(ref), **times, "weight": weight, **dist,
             "measured_speedup": ref.measured_speedup}
        )  # fmt: skip
    rows.sort(key=lambda r: -r["weight"])
    point, spread, kernel, distance, error, basis = _weigh(rows, errors or ERRORS)
    e = math.exp(error) if rows else None
    low, high = (point / e, point * e) if rows else (None, None)
    kernel_low, kernel_high = (kernel / e, kernel * e) if rows else (None, None)
    speedups = [r["speedup"] for r in rows]
    return {
        "family": family, "layouts": list(layouts),
        "equal_share": sum(fp32_by_class.values()) / sum(amp_by_class.values()),
        "point": point, "error": error, "distance": distance, "spread": spread,
        "layout_factor": factor, "low": low, "high": high, "kernel_point": kernel,
        "kernel_low": kernel_low, "kernel_high": kernel_high, "host": _host_dict(host),
        "data_s": data_s, "basis": basis, "min": min(speedups, default=None),
        "max": max(speedups, default=None), "rows": rows,
        "launch": _launch(floor, kernels, rows),
    }  # fmt: skip


def _publisher(ref: Reference) -> str:
    own = "committed layer profiles" if ref.kind == "profile" else ""
    return ref.source.get("publisher") or own


def _source_word(ref: Reference) -> str:
    """A reference's source in one word, to tell apart two of one network and GPU."""
    return "profile" if ref.kind == "profile" else _publisher(ref).split()[0]


def _weigh(rows: list[dict[str, Any]], errors: ErrorModel) -> tuple:
    """The step's point and spread, the kernels' point, the distance, its error and
    the ``basis`` (the references that carry 80% of the weight); Nones without rows."""
    if not rows:
        return None, None, None, None, None, []
    point, spread = _weighted(rows, "speedup")
    kernel, _ = _weighted(rows, "kernel_speedup")
    distance = max(0.0, -math.log(max(r["weight"] for r in rows)))
    total, acc, basis = sum(r["weight"] for r in rows), 0.0, []
    for r in rows:
        r["weight_share"] = r["weight"] / total
        if acc < 0.8 * total:
            basis.append(r["key"])
            acc += r["weight"]
    return point, spread, kernel, distance, errors.error(distance), basis


def _host_dict(host: HostModel | None) -> dict[str, Any] | None:
    if host is None:
        return None
    return {"idle_per_sync_s": host.idle_per_sync_s, "source": host.source,
            "fit": host.fit, "loop": host.loop.name, "loop_detail": host.loop.detail,
            "fp32_syncs": host.loop.fp32, "amp_syncs": host.loop.amp}  # fmt: skip


def _launch(floor: LaunchFloor | None, kernels, rows) -> dict[str, Any] | None:
    """Both precisions' launch floors against the median reference's kernel time."""
    if floor is None or not kernels:
        return None
    launch = {"per_kernel_s": floor.per_kernel_s, "source": floor.source}
    launch.update({f"{p}_floor_s": floor.floor_s(kernels[p]) for p in ("fp32", "amp")})
    launch.update({f"{p}_kernels": kernels[p] for p in ("fp32", "amp")})
    if rows:
        for k in ("amp_kernel_s", "fp32_kernel_s"):
            launch[k] = statistics.median(r[k] for r in rows)
        for p in ("amp", "fp32"):
            launch[f"{p}_bound"] = launch[f"{p}_floor_s"] >= launch[f"{p}_kernel_s"]
    return launch


def _reference_times(
    ref: Reference, fp32_by_class, amp_by_class, family: str, amp_layout: str,
    factor: float | None, host: HostModel | None, floor32: float, floor16: float,
    data_s: float,
) -> dict[str, float]:  # fmt: skip
    """One reference's kernel times for the model (its 16-bit efficiency scaled by
    ``factor`` where its AMP ran in the other layout) and step times (plus the host's
    idle for a layer profile, at least the launch floor and the data time)."""
    k32 = step_time(fp32_by_class, ref, family)
    k16 = step_time(amp_by_class, ref, "16-bit")
    if factor and ref.layout.get("16-bit") != amp_layout:
        k16 = k16 / factor if amp_layout == "channels_first" else k16 * factor
    t32, t16 = k32, k16
    if host is not None and ref.kind == "profile":
        t32, t16 = t32 + host.idle_s("fp32"), t16 + host.idle_s("amp")
    t32, t16 = max(t32, floor32, data_s), max(t16, floor16, data_s)
    return {"speedup": t32 / t16, "kernel_speedup": k32 / k16, "fp32_s": t32,
            "amp_s": t16, "fp32_kernel_s": k32, "amp_kernel_s": k16}  # fmt: skip


def reference_prediction(
    ref: Reference,
    refs: Sequence[Reference],
    exclude_own: bool = True,
    devices=None,
    weights: Weights | None = None,
    errors: ErrorModel | None = None,
    host: HostModel | None = None,
) -> dict[str, Any]:
    """The calibrated range for a reference's own network, batch, layouts and GPU
    (per sample) from the other references (``exclude_own``), to hold against the
    speedup it measured."""
    fam = ref.baseline_family
    return calibrated_range(
        ref.per_image[fam], ref.per_image["16-bit"], ref.gpu, refs, model=ref.model,
        exclude=ref.key if exclude_own else None, devices=devices,
        memory_format=(ref.layout.get(fam), ref.layout.get("16-bit")),
        batch=ref.batch, weights=weights, errors=errors, host=host,
    )  # fmt: skip


def leave_one_out(
    refs: Sequence[Reference] | None = None,
    devices=None,
    weights: Weights | None = None,
    errors: ErrorModel | None = None,
    targets: Sequence[Reference] | None = None,
    host: HostModel | None | bool = True,
) -> dict[str, Any]:
    """Every reference on a GPU of the device table predicted from the others (or
    ``targets`` from all of ``refs``): rows with the point, the range, its width, the
    measured speedup and whether the range holds it, a layer profile's kernel ratio
    against the kernels' range (``what``); ``inside``, ``median_width``, ``n`` and
    ``no_range``. ``host=True``: the committed host model."""
    refs = references() if refs is None else refs
    devices = device_table(devices)
    if host is True:
        host = host_model()
    rows, none, none_names = [], [], {}
    for ref in refs if targets is None else targets:
        if ref.gpu not in devices:
            continue
        r = reference_prediction(
            ref, refs, True, devices, weights, errors, host or None
        )
        if r["point"] is None:
            none.append(ref.key)
            none_names[ref.key] = f"{ref.label(devices)} ({_source_word(ref)})"
            continue
        if ref.kind == "profile":  # a kernel-time ratio: against the kernels' range
            r = dict(r, point=r["kernel_point"], low=r["kernel_low"],
                     high=r["kernel_high"])  # fmt: skip
        got = ref.measured_speedup
        rows.append(
            {"key": ref.key, "label": ref.label(devices), "layouts": r["layouts"],
             "point": r["point"], "low": r["low"], "high": r["high"],
             "width": r["high"] / r["low"], "basis": r["basis"], "measured": got,
             "inside": r["low"] <= got <= r["high"], "off": got / r["point"],
             "log_error": math.log(got / r["point"]), "distance": r["distance"],
             "what": "kernel time" if ref.kind == "profile" else "step time",
             "publisher": _publisher(ref),
             "name": f"{ref.label(devices)} ({_source_word(ref)})"}
        )  # fmt: skip
    n = len(rows)
    inside = sum(r["inside"] for r in rows) / n if n else None
    width = statistics.median(r["width"] for r in rows) if n else None
    return dict(rows=rows, n=n, inside=inside, median_width=width, no_range=none,
                no_range_names=none_names)  # fmt: skip


def fit(
    refs: Sequence[Reference] | None = None, devices=None
) -> tuple[Weights, ErrorModel]:
    """The weights on ``WEIGHT_GRID`` whose leave-one-out lies closest to what the
    references measured, and the ``ErrorModel`` fitted on it."""
    refs = references() if refs is None else refs
    devices = device_table(devices)
    host = host_model()
    best = None
    for values in itertools.product(*WEIGHT_GRID.values()):
        w = dataclasses.replace(WEIGHTS, **dict(zip(WEIGHT_GRID, values)))
        loo = leave_one_out(refs, devices, w, host=host)
        loss = sum(r["log_error"] ** 2 for r in loo["rows"])
        if best is None or loss < best[0] - 1e-12:
            best = (loss, w, loo)
    _, w, loo = best
    return w, fit_errors(loo["rows"])


def layout_text(layouts: Sequence[str | None]) -> str:
    short = {"channels_first": "NCHW", "channels_last": "NHWC", None: "?"}
    a, b = (short.get(x, str(x)) for x in layouts)
    return a if a == b else f"{a} / {b}"


def distance_text(row: Mapping[str, Any]) -> str:
    """A reference row's distance in words: "same GPU, same network"."""
    net = f"other network (class mix {row['mix_distance']:.0%} apart)"
    net = "same network" if row["same_network"] else net
    lay = f", layout {layout_text(row['layouts'])}"
    lay = "" if row.get("layout_match", True) else lay
    return f"{row['gpu_distance']}, {net}{lay}"


# What the calibration says of itself: ``python -m ampbook.calibration`` prints it and
# chapter 6's page reads it.

# A layer profile applied to its own setting gives back its kernel ratio within this.
SELF_CHECK = 0.05


def references_table(refs: Sequence[Reference]) -> str:
    """The references as Markdown: per reference its batches and layouts, the share of
    its bound each precision reached and the ratio it measured (a profile's of its
    kernels, a published one's of its step); then what a published ratio holds where
    the two sides' batches differ or the source worked its own out otherwise."""
    from ampbook.core.devices import display_name
    from ampbook.core.page import md_table_text
    from ampbook.core.words import and_list
    from ampbook.predict.references import load_published

    published = {p.key: p for p in load_published()}
    rows, mixed, notes = [], [], []
    for ref in refs:
        fam, pub = ref.baseline_family, published.get(ref.key)
        b32, b16 = (pub.baseline.batch, pub.amp.batch) if pub else (ref.batch,) * 2
        where = f"{ref.network} on the {display_name(ref.gpu)}"
        what = QUANTITY["kernel time" if ref.kind == "profile" else "step time"]
        base = f"{ref.step_efficiency[fam]:.0%} ({'TF32' if fam == 'tf32' else 'fp32'})"
        rows.append((ref.network, display_name(ref.gpu), ref.kind, f"{b32} / {b16}",
                     layout_text([ref.layout.get(fam), ref.layout.get("16-bit")]),
                     base, ref.step_efficiency["16-bit"],
                     f"{ref.measured_speedup:.2f} ({what})"))  # fmt: skip
        if b32 != b16:
            mixed.append(f"{where} ({b32} / {b16})")
        if pub and f"{pub.published_speedup:.2f}" != f"{ref.measured_speedup:.2f}":
            notes.append(
                f"{where}: {ref.measured_speedup:.2f}x here, "
                f"{pub.published_speedup:.2f}x in the source's own table"
            )
    heads = ["network", "GPU", "kind", "batch (32 / AMP)", "layout (32 / AMP)",
             "32-bit share", "AMP share", "speedup (x)"]  # fmt: skip
    said = [md_table_text(rows, heads, [None] * 6 + [".0%", None])]
    if mixed:
        said.append(
            "A published speedup is the ratio of the two published throughputs at "
            "each side's own batch and layout, so where the batches differ ("
            f"{and_list(mixed)}) it is AMP and the batch together, and the layout "
            "where that changes too."
        )
    if notes:
        said.append(
            "The speedup here is the ratio of the throughputs as published; the "
            "source's own speedup column differs from it in the last digit where it "
            f"was worked out otherwise: {'; '.join(notes)}."
        )
    return "\n\n".join(said)


def self_check_lines(refs: Sequence[Reference], devices=None) -> str:
    """Each committed layer profile applied to its own setting (it was fitted on it)."""
    devices = device_table(devices)
    checks = []
    for ref in [r for r in refs if r.kind == "profile" and r.gpu in devices]:
        alone = reference_prediction(ref, [ref], exclude_own=False)
        got = alone["rows"][0]["kernel_speedup"]
        off = got / ref.measured_speedup - 1
        off = 0.0 if abs(off) < 0.0005 else off  # no "-0.0%"
        ok = abs(off) <= SELF_CHECK
        checks.append(
            f"{ref.label()}, {ref.setting}: its efficiencies give a kernel ratio "
            f"of {got:.3f}x against the {ref.measured_speedup:.3f}x measured, "
            f"{f'{off:+.1%}' if off else '0.0%'}, {'within' if ok else 'beyond'} "
            f"{SELF_CHECK:.0%}: "
            f"{'consistent' if ok else 'inconsistent'}."
        )
    return "\n".join(f"- {c}" for c in checks) or "No committed layer profile to check."


def profile_bound_lines(results_dir=None) -> str:
    """Per committed layer-profile pair: its AMP bound now against the one recorded."""
    from ampbook.core.devices import display_name
    from ampbook.predict.references import (
        load_profile_bounds,
        profile_groups,
        profile_key,
    )

    pbounds = load_profile_bounds()
    pb_lines = []
    for (gname, pbatch, ph, pw, play), g in profile_groups(results_dir):
        stored = pbounds.get(profile_key(gname, pbatch, ph, pw, play))
        if not stored:
            continue
        lp, with_t = g["amp-fp16"], stored["amp-fp16"]["bound_s"]
        same32 = math.isclose(
            stored["fp32"]["bound_s"], g["fp32"].predicted_step_s, rel_tol=0.005
        )
        pb_lines.append(
            f"- {display_name(lp.device_name)}, batch {pbatch} x {ph}x{pw}, "
            f"{layout_text([play, play])}: AMP bound {with_t * 1e3:.3g} ms "
            f"here ({with_t / lp.kernel_s:.0%} of its {lp.kernel_s * 1e3:.3g} ms of "
            f"kernels) against {lp.predicted_step_s * 1e3:.3g} ms recorded "
            f"({lp.kernel_efficiency:.0%}); the difference, "
            f"{(with_t - lp.predicted_step_s) * 1e3:+.3g} ms, "
            + (
                "is cuDNN's NCHW transposes around the 16-bit convolutions: the "
                "recorded bound counted them, the book's bound leaves them out"
                if same32
                else "is the cost model's changes since the profile was recorded "
                "(fp32's two bounds differ too)"
            )
            + "."
        )
    return "\n".join(pb_lines) or "No committed layer profile has a stored bound."


def unreferenced_text(
    gpus: Sequence[str], refs: Sequence[Reference], devices=None
) -> str:
    """Which GPUs no reference of their generation (architecture and segment) covers."""
    from ampbook.core.devices import display_name
    from ampbook.core.words import and_list

    devices = device_table(devices)

    def gen(key):
        d = devices.get(key)
        return (d.architecture, d.segment) if d else (key, None)

    have = {gen(r.gpu) for r in refs}
    unref = [g for g in gpus if gen(g) not in have]
    if not unref:
        return "Every GPU here has a reference of its own generation."
    named = and_list(
        [f"the {display_name(g)} ({devices[g].architecture}, {devices[g].segment})"
         for g in unref]
    )  # fmt: skip
    return (
        "No reference was measured on a GPU of the generation (architecture and "
        f"segment) of {named}: {'its' if len(unref) == 1 else 'their'} ranges carry "
        "efficiencies over from other generations, as far as the leave-one-out "
        "(`python -m ampbook.calibration --predictions`) measures such carrying to "
        "hold."
    )


# What each leave-one-out row's measured ratio is a ratio of, as the page names it.
QUANTITY = {"step time": "step ratio", "kernel time": "kernel ratio"}


def loo_names(loo: dict[str, Any]) -> dict[str, str]:
    """Each reference the leave-one-out names, by key: its label and source word."""
    names = {r["key"]: r.get("name", r["label"]) for r in loo["rows"]}
    return names | loo.get("no_range_names", {})


def leave_one_out_table(loo: dict[str, Any]) -> str:
    """The leave-one-out as Markdown, step ratios first, then kernel ratios: per
    reference (with its source and the quantity it measured) the range the others
    predict, what it measured, whether the range holds it, and the references that
    set the range (the heaviest three)."""
    from ampbook.core.page import md_table_text

    named = loo_names(loo)
    rows = [
        (f"{r['label']}, {r['publisher']} ({QUANTITY[r['what']]})",
         layout_text(r["layouts"]),
         f"{r['point']:.2f} ({r['low']:.2f}-{r['high']:.2f})", f"{r['measured']:.2f}",
         "yes" if r["inside"] else "no",
         "; ".join(named.get(k, k) for k in r["basis"][:3])
         + ("; ..." if len(r["basis"]) > 3 else ""))
        for r in sorted(loo["rows"], key=lambda r: list(QUANTITY).index(r["what"]))
    ]  # fmt: skip
    heads = ["reference, source (quantity)", "layout (32 / AMP)",
             "predicted by the others (x)", "measured (x)", "inside",
             "set by"]  # fmt: skip
    return md_table_text(rows, heads)


def leave_one_out_text(loo: dict[str, Any]) -> str:
    """The leave-one-out against its goal (``COVER`` inside, ``GOAL_WIDTH`` wide), and
    the references no other one gives a range."""
    text = "No reference has a range the others predict."
    if loo["n"]:
        goal = f"the goal ({COVER:.0%} inside, at most {GOAL_WIDTH:g}x wide) is"
        met = f"{goal} met."
        if not (loo["inside"] >= COVER and loo["median_width"] <= GOAL_WIDTH):
            met = f'{goal} not met; the rows marked "no" say where the ranges do not '
            met += "carry."
        parts = []
        for what, name in QUANTITY.items():
            rows = [r for r in loo["rows"] if r["what"] == what]
            if rows:
                parts.append(
                    f"{sum(r['inside'] for r in rows)} of {len(rows)} "
                    f"{name}{'s' * (len(rows) != 1)} inside the {name.split()[0]} "
                    "range the others predict"
                )
        inside = sum(r["inside"] for r in loo["rows"])
        text = (
            f"{'; '.join(parts)} ({inside} of {loo['n']} in all, "
            f"{loo['inside']:.0%}), at a median width (high / low) of "
            f"{loo['median_width']:.2f}x: " + met
        )
    if loo["no_range"]:
        names = loo_names(loo)
        text += " No other reference applies to: "
        text += f"{'; '.join(names.get(k, k) for k in loo['no_range'])}."
    return text
