"""Section 5 of the doctor's report: the expected AMP speedup per GPU in words, the
memory warnings, the committed measurements, what to try, and section 4's line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from ampbook.chapters.ch6.traced import added_kernels
from ampbook.core.devices import display_name
from ampbook.core.precision import AUTOCAST_DTYPES
from ampbook.core.words import plural
from ampbook.measure.memory import ADAM_STATE_BYTES_PER_PARAM
from ampbook.predict.calibrate import GPU_DISTANCES, calibrated_range, layout_text
from ampbook.predict.hostmodel import RUNNER_2026_11_30 as RUNNER
from ampbook.predict.hostmodel import profile_loop
from ampbook.predict.specs import shape_text, table_key
from ampbook.predict.steptrace import LAYOUT_TRANSPOSE, StepTrace
from ampbook.results import load_results_dir

# Measured steps within this fraction of each other are reported as the same speed.
SAME_SPEED = 0.05


def range_position(value: float, low: float, high: float) -> str:
    if value < low:
        return "below the range"
    return "inside the range" if value <= high else "above the range"


def end_text(x: float) -> str:
    """A range's end to two decimals, or up to four where fewer round it to 1: 1.004
    ("a gain") and 0.996 ("no clear gain") must not both print as 1.00."""
    texts = [f"{x:.{digits}f}" for digits in (2, 3, 4)]
    return next((t for t in texts if float(t) != 1), texts[-1])


def span_text(lo: float, hi: float) -> str:
    a, b = end_text(lo), end_text(hi)
    return f"{a}x" if a == b else f"{a}x to {b}x"


def gist(lo: float, hi: float, point: float | None = None) -> str:
    """A range in words: "a gain" or "a loss" only when it is all on one side of 1.0."""
    if lo > 1:
        return "a gain"
    if hi < 1:
        return "a loss"
    point = math.sqrt(lo * hi) if point is None else point
    return "no clear gain" if round(point, 2) >= 1 else "no clear loss"


def speedup_range_verdict(gpu_name: str, precision: str, rng: dict[str, Any]) -> str:
    """The expected AMP speedup on one GPU in one line (section 5)."""
    equal = rng["equal_share"]
    if equal <= 0:
        raise ValueError("speedups must be positive")
    family, on = ("TF32", "TF32 on") if rng["family"] == "tf32" else ("fp32", "no TF32")
    head = f"{gpu_name}: {precision} over fp32 ({on})"
    same = (
        f"ratio of bounds {equal:.2f}x, the speedup if both precisions reached the "
        "same share of their bound"
    )
    rows = rng["rows"]
    if not rows:
        return (
            f"{head}: no reference measured the {family} and 16-bit efficiencies this "
            f"GPU needs, so no calibrated range; {same} (not a bound)."
        )
    by = {r["key"]: r for r in rows}
    basis = ", ".join(
        f"{by[k]['label']} ({by[k]['weight_share']:.0%})" for k in rng["basis"][:3]
    )
    layout = layout_text(rng["layouts"])
    kernel = ""
    if rng.get("kernel_point") and rng.get("host"):
        k_span = span_text(rng["kernel_low"], rng["kernel_high"])
        kernel = (
            f"; predicted step without the modelled host idle "
            f"{rng['kernel_point']:.2f}x ({k_span})"
        )
    line = (
        f"{head}, {layout}: {step_label(rng)} {point_text(rng, error=True)}{kernel}; "
        f"set by {basis} of {plural(len(rows), 'reference')} weighted by closeness; "
        f"{same}."
    )
    if not any(r["layout_match"] for r in rows):
        ran = sorted({layout_text(r["layouts"]) for r in rows})
        line += (
            f" No reference ran both precisions in {layout} (they ran "
            f"{', '.join(ran)}; 32-bit / AMP): their efficiencies are carried over to "
            f"{layout}, its bytes and kernels modelled, its kernels' speed not."
        )
    for m in rng.get("committed") or []:
        line += " " + measured_text(m, rng)
    return line


def point_text(r: dict[str, Any], error: bool = False) -> str:
    """A range's point, its span and its gist: "1.11x (0.99x to 1.25x), no clear gain";
    with ``error`` the range's half-width after the point ("± 31%")."""
    err = f" ± {math.exp(r['error']) - 1:.0%}" if error else ""
    span = span_text(r["low"], r["high"])
    return f"{r['point']:.2f}x{err} ({span}), {gist(r['low'], r['high'], r['point'])}"


def step_label(rng: dict[str, Any]) -> str:
    """What the range's point is of: the step (with the host model) or the kernels."""
    host = rng.get("host")
    if not host:
        return "predicted kernel-time speedup (no host model: no step)"
    data = " and the loader's time per batch" if rng.get("data_s") else ""
    return (
        f"predicted step speedup (kernels plus the host's idle time, "
        f"{host['idle_per_sync_s'] * 1e3:.1f} ms per sync, "
        f"{host.get('fit') or 'assumed'}, for {host['loop']}: "
        f"{plural(host['fp32_syncs'], 'sync')} fp32, {host['amp_syncs']} AMP{data})"
    )


# What a committed measurement says, by its kind: (section 5, the first screen).
MEASURED_WORDS = {
    "step in the loop": (
        "Measured: {speedup:.2f}x median, {low:.2f}x to {high:.2f}x over {epochs} "
        "epochs ({what}, the step in the training loop; {source}{where})",
        "step in the loop {low:.2f}x to {high:.2f}x per epoch",
    ),
    "step alone": (
        "Measured: {speedup:.2f}x ({what}; {source}{where})",
        "step timed alone {speedup:.2f}x",
    ),
    None: (
        "Measured: {speedup:.2f}x ({what}; {source}{where})",
        "{short} {speedup:.2f}x",
    ),
}


def measured_text(m: dict[str, Any], rng: dict[str, Any], screen=False) -> str:
    """One committed measurement beside the prediction, labelled by what it timed."""
    other = m.get("same_setting") is False and rng.get("setting")
    where = f", not this prediction's {rng['setting']}" if other else ""
    short = m["what"].split(",")[0]
    text = MEASURED_WORDS[m.get("kind")][screen].format(**m, where=where, short=short)
    run = rng.get("runner")
    if m.get("kind") != "step alone" or not (m.get("loop") and run) or other:
        return text if screen else text + "."
    against = (
        f"against {run['point']:.2f}x ({span_text(run['low'], run['high'])}) "
        "predicted for that loop"
    )
    if screen:
        steps = f", {m['steps']} steps, no spread" if m.get("steps") else ""
        return f"{text} (the book's runner{steps}) {against}"
    return (
        f"{text}; recorded by {m['loop']} ({m['loop_detail']}; two of the AMP step's "
        f"syncs and one of fp32's are the runner's, not AMP's), {against}: "
        f"{range_position(m['speedup'], run['low'], run['high'])} (a cross-check, "
        "not a test: the idle time per sync was fitted on these profiles)."
    )


def measured_here(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The committed measurements of this setting, in the first screen's order."""
    order = {"step alone": 0, "step in the loop": 1}
    done = [m for m in r.get("committed") or [] if m.get("same_setting")]
    return sorted(done, key=lambda m: order.get(m.get("kind"), 2))


def nearness(row: dict[str, Any]) -> tuple:
    order = GPU_DISTANCES.index(row["gpu_distance"])
    return (not row["same_network"], order, row["mix_distance"])


def verdict_ranges(roof, traces: dict[str, StepTrace], refs, host, data_s, **kw):
    """Per GPU and AMP precision, the calibrated range (``kw``: ``calibrated_range``'s)
    and, with a host model, the step predicted for the runner that timed the committed
    steps (``runner``)."""
    out = []
    for r in roof:
        if not r.get("amp_s"):
            continue
        kw["kernels"] = {"fp32": r["fp32_kernels"], "amp": r["amp_kernels"]}
        bounds = (r["fp32_by_class_s"], r["amp_by_class_s"], r["gpu"], refs)
        rng = calibrated_range(*bounds, **kw, host=host, data_s=data_s)
        if host is not None and rng["rows"]:
            run = calibrated_range(*bounds, **kw, host=host.with_loop(RUNNER))
            rng["runner"] = {k: run[k] for k in ("point", "low", "high")}
        casts = added_kernels(traces, r["precision"], "_to_copy")
        moves = added_kernels(traces, r["precision"], LAYOUT_TRANSPOSE)
        keep = ("gpu", "gpu_name", "precision", "memory_bound_share")
        out.append({k: r.get(k) for k in keep} | rng | {
            "casts": casts, "transposes": moves})  # fmt: skip
    return out


def memory_warnings(
    traces: dict[str, StepTrace], gpus: Sequence[str], devices, copies: int = 0
) -> list[str]:
    """One line per precision and GPU whose step cannot fit, with the largest batch
    whose activations fit."""
    out = []
    for prec, tr in traces.items():
        if not tr.saved_tensors:
            continue
        saved = tr.saved_tensors["new_bytes"]
        own = copies if prec != "fp32" else 0  # AMP's weight copies, whatever the batch
        fixed = ADAM_STATE_BYTES_PER_PARAM * tr.parameters + own
        per_sample = max(saved - own, 0) / tr.batch_size
        for key in gpus:
            d = devices[key]
            have = d.memory_gb * 1e9
            if saved + fixed <= have:
                continue
            fits = int((have - fixed) // per_sample) if per_sample else 0
            most = "no batch fits"
            if fits >= 1:
                most = f"the largest batch whose activations fit is about {fits}"
            out.append(
                f"{prec} at batch {tr.batch_size} cannot fit the {d.short_name}: "
                f"{saved / 2**30:,.1f} GiB saved for backward and "
                f"{fixed / 2**30:,.2f} GiB of weights, gradients and optimizer state "
                f"against its {d.memory_gb:g} GB; {most} (before cuDNN's workspace "
                "and the allocator's reserve)."
            )
    return out


def setting_text(batch: int, shape: Sequence[int]) -> str:
    """A step's setting as the committed measurements name theirs."""
    return f"batch {batch} x {shape_text(shape)}"


def committed_measurements(
    model: str, gpus: Sequence[str], results_dir=None, refs=None
) -> dict[str, list[dict[str, Any]]]:
    """What the committed results measured of ``model`` per GPU: a layer profile's
    kernel-time ratio and, for ERFNet, the step timed alone and in the loop."""
    out: dict[str, list[dict[str, Any]]] = {g: [] for g in gpus}
    for ref in refs or []:
        if ref.kind == "profile" and ref.model == model and ref.gpu in out:
            out[ref.gpu].append({
                "precision": "amp-fp16",
                "what": "kernel time, amp-fp16 over fp32 (TF32 on)",
                "speedup": ref.measured_speedup, "setting": ref.setting,
                "source": f"{ref.source.get('title', ref.key)} ({ref.setting}, "
                f"{ref.layout.get('16-bit')})",
            })  # fmt: skip
    if model != "erfnet":
        return out
    try:
        rs = load_results_dir(results_dir)
        pairs, profiles = rs.pairs(), rs.profile_pairs()
    except Exception:  # an unreadable results folder is the results module's to say
        pairs, profiles = [], []
    for b, a in profiles:
        key = table_key(a.device_name)
        if key in out and a.mode in AUTOCAST_DTYPES and b.mode == "fp32-tf32":
            out[key].append(_step_alone(b, a))
    for q in pairs:
        key = table_key(q.setting.device_name)
        ok = q.amp.mode in AUTOCAST_DTYPES and q.baseline.mode == "fp32-tf32"
        if key in out and ok:
            out[key].append(_step_in_loop(q))
    return out


def _step_alone(b, a) -> dict[str, Any]:
    loop = profile_loop(a.record)
    return {
        "precision": a.mode, "kind": "step alone",
        "what": f"step timed alone, {a.mode} over fp32 (TF32 on), layer profiles",
        "speedup": b.step_s / a.step_s,
        "setting": setting_text(a.batch_size, (3, a.height, a.width)),
        "loop": loop.name if loop else None,
        "loop_detail": loop.detail if loop else None,
        "steps": a.record.get("steps"),
        "amp_kernel_s": a.measured_total_s,  # the profile's kernel time
        "source": f"{Path(a.path).name}, {Path(b.path).name}: "
        f"{a.step_s * 1e3:.1f} ms against {b.step_s * 1e3:.1f} ms",
    }  # fmt: skip


def _step_in_loop(q) -> dict[str, Any]:
    st = q.setting
    where = setting_text(st.batch_size, (3, st.height, st.width))
    per = q.step_speedups or [q.step_speedup]
    return {
        "precision": q.amp.mode, "kind": "step in the loop",
        "what": f"step time, {q.amp.mode} over fp32 (TF32 on), training runs",
        "speedup": q.step_speedup, "low": min(per), "high": max(per),
        "epochs": len(per), "setting": where,
        "source": f"committed training runs in data/results, {where}",
    }  # fmt: skip


def _amp_item(name: str, precision: str, rng: dict[str, Any]) -> dict[str, Any]:
    """The AMP row, ranked by the step predicted for PyTorch's example loop; "keep
    fp32" (unranked) where a measurement of this setting is slower or a loss is read."""
    said = None
    if rng["rows"]:
        lo, hi, gain = rng["low"], rng["high"], rng["point"]
        src = f"predicted {'step' if rng.get('host') else 'kernels'} (calibrated)"
        word, n = gist(lo, hi, gain), plural(len(rng["rows"]), "reference")
        detail = f"{span_text(lo, hi)} from {n}"
        detail += f", {word}" if word.startswith("no clear") else ""
        if word in ("a loss", "no clear loss"):
            said = f"predicted {gain:.2f}x, {word}"
    else:
        gain, src = rng["equal_share"], "equal shares of the bound"
        detail = "no reference for this GPU's families"
    done = [m for m in rng.get("committed") or [] if m.get("same_setting")]
    detail += "; measured at this setting: section 5" if done else ""
    if slow := [m for m in done if m["speedup"] < 1 - SAME_SPEED]:  # the last named
        kind = slow[-1].get("kind") or slow[-1]["what"].split(",")[0]
        kind = kind.replace("step alone", "step timed alone")  # the first screen's
        said = f"measured at {slow[-1]['speedup']:.2f}x fp32's speed ({kind})"
        src = "measured (committed)"
    if said is not None:
        return _item(name, f"keep fp32: AMP ({precision}) {said}", None, src, detail)
    return _item(name, f"train with AMP ({precision})", gain, src, detail)


def _item(gpu: str, item: str, gain, source: str, detail: str) -> dict[str, Any]:
    return dict(gpu=gpu, item=item, gain=gain, source=source, detail=detail)


def checklist(
    roof: list[dict[str, Any]],
    ranges: list[dict[str, Any]],
    loader_images_per_s: float | None,
    measured: dict[str, Any] | None,
) -> dict[str, list[dict[str, Any]]]:
    """What to try per GPU, ranked by gain; ``upper_bounds`` apart."""
    items, bounds = [], []
    by_gpu = {(r["gpu"], r["precision"]): r for r in ranges}
    seen, here = set(), {}  # here: an AMP item's measurements of this setting
    for r in roof:
        rng = by_gpu.get((r["gpu"], r["precision"]))
        if rng is not None:
            items.append(_amp_item(r["gpu_name"], r["precision"], rng))
            here[id(items[-1])] = len(measured_here(rng))
        if r["gpu"] not in seen:
            seen.add(r["gpu"])
            items += _bound_items(r, loader_images_per_s, bounds)
    if measured and measured["device"] == "cuda":
        items += _measured_items(measured)
    order = list(dict.fromkeys(i["gpu"] for i in items))
    items.sort(  # gains as printed (two decimals); a tie as the first screen's
        key=lambda i: (order.index(i["gpu"]), i["gain"] is None,
                       -round(i["gain"] or 0, 2), -here.get(id(i), 0))
    )  # fmt: skip
    return {"items": items, "upper_bounds": bounds}


def _bound_items(r: dict[str, Any], loader: float | None, bounds: list) -> list:
    name, items = r["gpu_name"], []
    mm = r["fp32_default_s"] / r["fp32_tf32_s"]
    if mm > 1.005:
        items.append(_item(
            name, "fp32: TF32 for matrix products (torch.backends.cuda."
            "matmul.fp32_precision = 'tf32'; off by default)", mm,
            "equal shares of the bound",
            "the fp32 step's matrix products on TF32 tensor cores",
        ))  # fmt: skip
    conv = r["fp32_strict_s"] / r["fp32_default_s"]
    if conv > 1.005:
        items.append(_item(
            name, "fp32: TF32 for convolutions (torch.backends.cudnn.conv."
            "fp32_precision = 'tf32') is on by default", None, "already on",
            f"turning it off grows the step's bound {conv:.2f}x",
        ))  # fmt: skip
    total, fusable = r.get("amp_s"), r.get("fusable_s")
    if total and 0 < fusable < total:
        bounds.append(_item(
            name, "fuse element-wise ops (torch.compile)",
            total / (total - fusable), "upper bound",
            "if the element-wise operators' "
            f"{fusable / total:.0%} of the AMP bound vanished (their "
            "share of the time taken as their share of the bound); "
            "normalisation stays",
        ))  # fmt: skip
    need = r.get("images_per_s_needed")
    if loader and need and loader < need:
        items.append(_item(
            name, "speed up the input pipeline (more workers, faster decoding)",
            need / loader, "bound",
            f"the loader's {loader:,.0f} images/s against the {need:,.0f} the AMP "
            "bound uses",
        ))  # fmt: skip
    return items


def _measured_items(measured: dict[str, Any]) -> list[dict[str, Any]]:
    name, items = display_name(measured["device_name"]), []
    rows = {r["variant"]: r for r in measured["rows"] if r.get("step_s")}
    for r in rows.values():
        for what in ("channels_last", "cudnn.benchmark"):
            if r["variant"].endswith(what) and r["precision"] in rows:
                gain = rows[r["precision"]]["step_s"] / r["step_s"]
                slower = gain < 1 - SAME_SPEED
                items.append(_item(
                    name,
                    f"{what} with {r['precision']}"
                    + (f": slower here, {gain:.2f}x" if slower else ""),
                    None if slower else gain, "measured", f"measured on this {name}",
                ))  # fmt: skip
    return items


def measured_verdict(measured: dict[str, Any]) -> str:
    """What the timed steps here say in one line."""
    rows = [r for r in measured["rows"] if r.get("step_s")]
    where = f"batch {measured['batch']} x {shape_text(measured['input'])}"
    if measured["device"] != "cuda":
        said = measured.get("rounds_verdict")
        if not said:
            return "On this CPU no amp-bf16 step was timed in rounds against fp32."
        return f"At {where} on this CPU: {said[:1].lower() + said[1:]}"
    name = measured["device_name"]
    if not rows or rows[0]["precision"] != "fp32":
        return f"On {name} no fp32 step was timed: nothing to compare."
    amp = [r for r in rows[1:] if r["precision"] != "fp32"]
    if not amp:
        return f"On {name} no AMP step was timed."
    best = max(amp, key=lambda r: r["speedup"])
    way = f"within {SAME_SPEED:.0%} of fp32, no difference resolved"
    if abs(best["speedup"] - 1) > SAME_SPEED:
        way = f"{'faster' if best['speedup'] > 1 else 'slower'} than fp32"
    return (
        f"On this GPU, the fastest AMP step ({best['variant']}) ran at "
        f"{best['speedup']:.2f}x fp32's speed at {where}: {way} here."
    )
