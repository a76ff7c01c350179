"""The doctor's report as Markdown: its first screen (the answer, 24 lines x 80
columns), then its sections; ``python -m ampbook.doctor`` wraps it for a terminal."""

from __future__ import annotations

from typing import Any, Sequence

from ampbook.chapters.ch6.verdict import (
    measured_here,
    measured_text,
    measured_verdict,
    nearness,
    point_text,
    step_label,
)
from ampbook.core.page import md_table_text
from ampbook.core.words import plural
from ampbook.predict.calibrate import distance_text, layout_text
from ampbook.predict.specs import shape_text


def _mib_cell(b) -> str | None:
    """Bytes as MiB to one decimal; "< 0.1" for a nonzero count below."""
    if b is None:
        return None
    return "< 0.1" if 0 < b / 2**20 < 0.05 else f"{b / 2**20:,.1f}"


def _ms(s):
    return None if s is None else s * 1e3


def _coverage_section(report: dict[str, Any]) -> tuple[str, str, str] | None:
    cov = report["coverage"]
    if not cov:
        return None
    rows = [
        (k, v["flops_16bit"], v["mma_flops_16bit"], v["bytes_16bit"])
        for k, v in cov["phases"].items()
    ]
    lead = (
        f"{cov['precision']} on CUDA's autocast rules and kernels (traced on the "
        f"CPU), batch {report['batch']} x {shape_text(report['input'])}"
    )
    heads = ["phase", "FLOPs in 16 bits", "matrix FLOPs in 16 bits", "bytes in 16 bits"]
    table = md_table_text(rows, heads, [None, ".1%", ".1%", ".1%"])
    fp32 = [
        (g["phase"], f"{g['op']} in {g['layer_type']}", g["count"], g["bytes_share"],
         g["reason"])
        for g in cov["fp32_ops"][:8]
    ]  # fmt: skip
    table += "\n\nLeft in fp32 (largest share of the step's bytes first):\n\n"
    heads = ["phase", "op in layer type", "kernels", "bytes", "why fp32"]
    fmts = [None, None, None, ".1%", None]
    table += md_table_text(fp32 or [("-", "none", 0, 0.0, "-")], heads, fmts)
    return ("1. Coverage", lead, table)


def _memory_section(report: dict[str, Any]) -> tuple[str, str, str]:
    mem, at = report["memory"], report["memory"]["at_size"]
    size = f"batch {at['batch']} x {shape_text(at['input'])}"
    rows = [(f"fp32, {size}", _mib_cell(at["fp32_bytes"]), 1.0)]
    if at.get("amp_bytes") is not None:
        amp = at["amp_precision"]
        rows.append((f"{amp}, {size}", _mib_cell(at["amp_bytes"]), at["amp_over_fp32"]))
        rows.append(
            (f"of which left in fp32 ({amp})", _mib_cell(at["amp_fp32_part"]), None)
        )
    rows.append(("weights, gradients and Adam state (not saved)",
                 _mib_cell(at["state_bytes"]), None))  # fmt: skip
    measured = mem.get("measured", [])
    if measured:
        where = f"batch {mem['measured_batch']} x {shape_text(mem['measured_input'])}"
        base = measured[0]["bytes"]
        rows += [
            (f"measured here: {m['variant']}, {where} ({m['measure']})",
             _mib_cell(m["bytes"]), m["bytes"] / base if base else None)
            for m in measured
        ]  # fmt: skip
    note = weight_copy_note(mem)
    lead = f"{at['method']}. {note}" if note else at["method"]
    table = md_table_text(rows, ["", "MiB", "AMP / fp32"], [None, None, ".2f"])
    return ("2. Memory: bytes saved for backward", lead, table)


def weight_copy_note(mem: dict[str, Any]) -> str | None:
    """Why AMP can save more bytes than fp32 (the 16-bit weight copies), said only
    where an AMP count exceeds fp32's by no more than the copies."""
    copies = mem.get("weight_copies_bytes") or 0
    if not copies:
        return None
    places = []
    measured = mem.get("measured") or []
    if measured and measured[0]["bytes"]:
        base = measured[0]["bytes"]
        more = [
            m["variant"] for m in measured[1:] if base < m["bytes"] <= base + copies
        ]
        if more:
            places.append(f"at the small measured size ({' and '.join(more)})")
    at = mem["at_size"]
    amp = at.get("amp_bytes")
    if amp and at["fp32_bytes"] < amp <= at["fp32_bytes"] + copies:
        places.append(f"at the requested size ({at['amp_precision']})")
    if not places:
        return None
    return (
        "The saved bytes include autocast's 16-bit copies of the weights (up to "
        f"{copies / 2**20:,.4g} MiB: every convolution's, and a linear layer's when "
        "its input needs a gradient), a fixed cost whatever the batch: they are why "
        f"AMP keeps more bytes for backward than fp32 {' and '.join(places)}, where "
        "the activations are small."
    )


def _roofline_section(report: dict[str, Any]) -> tuple[str, str, str]:
    small = min(r["fp32_tf32_s"] for r in report["roofline"]) < 1e-5
    unit, scale = ("µs", 1e6) if small else ("ms", 1e3)
    rows = [
        (r["gpu_name"], r["precision"], r["fp32_tf32_s"] * scale,
         r["amp_s"] * scale if r["amp_s"] else None, r.get("speedup_tf32"),
         None if r.get("images_per_s_needed") is None
         else round(r["images_per_s_needed"]))
        for r in report["roofline"]
    ]  # fmt: skip
    lead = (
        f"lower bounds of one step at batch {report['batch']} (fp32 with TF32 for "
        "convolutions and matrix products); the ratio of bounds is the speedup if both "
        "precisions reached the same share of their bound, which real kernels do not "
        "(section 5); images/s: what the input pipeline must deliver at the AMP bound"
    )
    heads = ["GPU", "AMP", f"fp32 bound ({unit})", f"AMP bound ({unit})",
             "ratio of bounds (x)", "images/s"]  # fmt: skip
    table = md_table_text(rows, heads, [None, None, ".3g", ".3g", ".2f", ",d"])
    return ("3. Roofline per GPU", lead, table)


def _where_section(report: dict[str, Any]) -> tuple[str, str, str]:
    wh = report["where"]
    rows = [
        (t["layer_type"], t["modules"], t["time_share"], t["bytes_share"],
         t["flops_per_byte"], t["bound"])
        for t in wh["types"]
    ]  # fmt: skip
    heads = ["layer type", "modules", "share of bound", "share of bytes",
             "FLOPs/byte", "bound"]  # fmt: skip
    table = md_table_text(rows, heads, [None, None, ".0%", ".0%", ".3g", None])
    title = f"Where the time goes ({wh['gpu_name']}, {wh['precision']})"
    return (title, "share of the bound and of the bytes per layer type", table)


def _measured_section(report: dict[str, Any]) -> tuple[str, str, str] | None:
    me = report["measured"]
    if not me:  # a reason why no step was timed, where the command gives one
        why = report.get("measured_skipped")
        return ("4. Measured on this device", why, "") if why else None
    lead, text = measured_table(me)
    return ("4. Measured on this device", lead, text + "\n\n" + measured_verdict(me))


def measured_table(me: dict[str, Any]) -> tuple[str, str]:
    """Section 4's lead and table."""
    rows = []
    for r in me["rows"]:
        one, median, x = r.get("samples") == 1, _ms(r.get("step_s")), r.get("speedup")
        if one and x and r["precision"] != "fp32":
            x = f"{x:.2f} (one timing)"
        rows.append((r["variant"], f"{median:.1f} (one step)" if one else median,
                     None if one else _ms(r.get("min_step_s")), x,
                     r.get("note") or r["skipped"] or ""))  # fmt: skip
    how = "timed steps: the median and the fastest; speedup from the medians"
    if me["device"] == "cpu":
        n = plural(me.get("rounds"), "round")
        how = (
            f"{n} taking turns (chapter 5's method): the median step of the {n} and "
            "the fastest; speedup: the median of the per-round ratios to fp32"
        )
        if me.get("rounds") == 1:
            how = "one step each (chapter 5's method, one round); speedup: the "
            how += "ratio to fp32"
        if any(r.get("note") for r in me["rows"]):
            how += "; amp-fp16 apart (its note)"
    lead = (
        f"{me['device_name']}; the runner's step, batch {me['batch']} x "
        f"{shape_text(me['input'])}, {how}"
    )
    heads = ["variant", "median step (ms)", "fastest step (ms)", "speedup (x)", "note"]
    return lead, md_table_text(rows, heads, [None, ".1f", ".1f", ".2f", None])


def references_table(rng: dict[str, Any]) -> str:
    """The references behind one range, nearest first, like with like."""

    def here_there(r: dict[str, Any]) -> tuple[str, str]:
        kernel = r["kind"] == "profile"
        word = "kernel time" if kernel else "step"
        here = r["kernel_speedup"] if kernel else r["speedup"]
        return f"{here:.2f} ({word})", f"{r['measured_speedup']:.2f} ({word})"

    rows = [
        (r["label"], r.get("publisher") or r["kind"], distance_text(r), *here_there(r))
        for r in sorted(rng["rows"], key=nearness)
    ]
    heads = ["reference", "from", "distance", "predicted here (x)"]
    return md_table_text(rows, heads + ["measured there (x)"])


def amp_kernels_text(r: dict[str, Any]) -> str:
    """AMP's kernels and what they add to fp32's (fp32's plus these give AMP's)."""
    la, moved = r["launch"], [k for k in ("casts", "transposes") if r.get(k)]
    rest = la["amp_kernels"] - la["fp32_kernels"] - sum(r[k] for k in moved)
    said = [" and ".join(f"{r[k]} {k}" for k in moved) + " added"] if moved else []
    if rest:
        said.append(f"{abs(rest)} {'more' if rest > 0 else 'fewer'} other kernels")
    return f"{la['amp_kernels']}" + (f" ({', '.join(said)})" if said else "")


def launch_table(ranges: Sequence[dict[str, Any]]) -> str | None:
    """Per GPU and AMP precision, the launch floor against the kernel time; None
    without one."""

    def measured(r: dict[str, Any]) -> str:
        done = [m["amp_kernel_s"] for m in measured_here(r) if m.get("amp_kernel_s")]
        return f"{done[0] * 1e3:.3f}" if done else "–"

    rows = [
        (r["gpu_name"], r["precision"], amp_kernels_text(r),
         la["amp_floor_s"] * 1e3, la["amp_kernel_s"] * 1e3,
         la["amp_floor_s"] / la["amp_kernel_s"], measured(r), bound_text(r))
        for r in ranges
        if (la := r.get("launch") or {}).get("amp_kernel_s")
    ]  # fmt: skip
    if not rows:
        return None
    heads = ["GPU", "AMP", "AMP kernels", "AMP floor (ms)",
             "AMP kernel time, predicted (ms)", "AMP floor / kernel time",
             "AMP kernel time, measured (ms)", "predicted bound"]  # fmt: skip
    fmts = [None, None, None, ".3f", ".3f", ".2f", None, None]
    return md_table_text(rows, heads, fmts)


def _verdict_lines(ranges: list[dict[str, Any]]) -> str:
    """Section 5's list; the host model every range shares is said once above it."""
    lines = [r["line"] for r in ranges]
    labels = {step_label(r) for r in ranges}
    head = ""
    if len(ranges) > 1 and len(labels) == 1:
        label = labels.pop()
        short, _, basis = label.partition(" (")
        if basis:
            lines = [line.replace(label, short, 1) for line in lines]
            head = f"Every {short} below counts the {basis.removesuffix(')')}.\n\n"
    return head + "\n".join(f"- {line}" for line in lines)


def _verdict_section(report: dict[str, Any]) -> tuple[str, str, str]:
    ver = report["verdict"]
    text = _verdict_lines(ver["ranges"])
    first = next((r for r in ver["ranges"] if r["rows"]), None)
    if first is not None:
        text += (
            f"\n\nThe references behind the {first['gpu_name']} range "
            f"({first['precision']}; each one's efficiencies applied to this model, "
            "beside the speedup it measured, kernel time beside kernel time, step "
            "beside step):\n\n" + references_table(first)
        )
    fl, floors = ver.get("launch_floor"), launch_table(ver["ranges"])
    if fl and floors:
        text += (
            f"\n\nLaunch floor: a step's kernels times {fl['per_kernel_s'] * 1e6:.2g} "
            "µs of host time per kernel (the smallest element-wise calls measured on "
            f"{fl['source']}, assumed the same on every GPU and for every kernel); "
            "AMP's beside the calibrated AMP kernel time (the median reference's), "
            "both predicted, and the AMP kernel time a committed layer profile "
            "measured at this setting where one exists (– where none); the bound is "
            "the first screen's test, whose other half holds fp32's floor (its kernels "
            "times the same) against fp32's calibrated kernel time:\n\n" + floors
        )
    text += (
        "\n\nWhat to try, per GPU, ranked by gain; AMP's gain is the step predicted "
        "for PyTorch's example loop, for every precision alike (like with like); a "
        "committed measurement of the AMP step (printed on the first screen or in the "
        "precision's line above) never ranks the AMP item; channels_last and "
        "cudnn.benchmark, where listed, by the steps the doctor timed on this GPU:\n\n"
    ) + md_table_text(
        [(c["gpu"], c["item"], c["gain"], c["source"], c["detail"])
         for c in ver["items"]],
        ["GPU", "try", "gain (x)", "from", "detail"], [None, None, ".2f", None, None],
    )  # fmt: skip
    if ver["upper_bounds"]:
        text += "\n\nUpper bounds (if the work vanished entirely):\n\n" + md_table_text(
            [(c["gpu"], c["item"], c["gain"], c["detail"])
             for c in ver["upper_bounds"]],
            ["GPU", "at most", "gain (x)", "detail"], [None, None, ".2f", None],
        )  # fmt: skip
    return ("5. Verdict", "expected AMP speedup per GPU", text)


# The AMP step is "near the launch floor" when its floor is at least this share of its
# calibrated kernel time (``bound_text``).
NEAR_FLOOR = 0.8

BOUND_WORDS_TEXT = (
    "The bound is predicted, by one of two tests: launch-bound when a launch floor is "
    "longer than its calibrated kernel time (the median reference's), AMP's or "
    f"fp32's; near the launch floor when AMP's is at least {NEAR_FLOOR:.0%} of it "
    "(section 5 prints both for AMP); else memory- or compute-bound by the larger "
    "share of the roofline bound (section 3)."
)


def bound_text(r: dict[str, Any]) -> str:
    """What bounds one range's AMP step, in a word (``BOUND_WORDS_TEXT``)."""
    launch = r.get("launch") or {}
    if launch.get("amp_bound") or launch.get("fp32_bound"):
        return "launch-bound"
    kernel = launch.get("amp_kernel_s")
    if kernel and launch.get("amp_floor_s", 0) >= NEAR_FLOOR * kernel:
        return "near the launch floor"
    share = r.get("memory_bound_share")
    if share is None:
        return ""
    return "memory-bound" if share >= 0.5 else "compute-bound"


def screen_line(r: dict[str, Any]) -> str:
    """One range's line on the first screen."""
    if not r["rows"]:
        return (
            f"- {r['gpu_name']}: {r['precision']} no reference applies; "
            f"ratio of bounds {r['equal_share']:.2f}x (the speedup at equal shares "
            "of the bound, not a bound)"
        )
    what = "step" if r.get("host") else "kernels"
    line = f"- {r['gpu_name']}: {r['precision']} {what} {point_text(r)}"
    if r.get("host"):
        line += f"; step without host idle {r['kernel_point']:.2f}x"
    bound = bound_text(r)
    line += f"; predicted {bound}" if bound else ""
    said = [measured_text(m, r, screen=True) for m in measured_here(r)]
    if said:
        line += f"; measured ({r['precision']}): " + ", ".join(said)
    return line


def headline_key(r: dict[str, Any]) -> tuple:
    """Which AMP precision heads a GPU's line on the first screen: one with a range,
    the faster as printed, a tie to the one with more committed measurements."""
    if not r["rows"]:
        return (False, 0.0, 0)
    return (True, round(r["point"], 2), len(measured_here(r)))


TIE_RULE = "ties to two decimals go to the one measured more here"
SCREEN_ORDER_TEXT = "Best first"


def first_screen(report: dict[str, Any]) -> str:
    """The answer, for a screen of 24 lines x 80 columns."""
    fmt = report.get("memory_format", "channels_first")
    ranges = report["verdict"]["ranges"]
    best: dict[str, dict[str, Any]] = {}
    for r in ranges:  # the faster AMP precision per GPU; a tie keeps the first
        best[r["gpu"]] = max(best.get(r["gpu"], r), r, key=headline_key)
    shape = "x".join(map(str, report.get("input") or []))
    what = f"batch {report['batch']}" + (f" x {shape}" if shape else "")
    step = "forward pass" if report.get("backward") is False else "training step"
    tf32 = {r.get("family") == "tf32" for r in best.values()}
    base = "fp32 (no TF32 on these GPUs)"
    if True in tf32:
        base = "fp32 (with TF32, fp32-tf32, on the GPUs that have it)"
        base = "fp32 with TF32 (fp32-tf32)" if tf32 == {True} else base
    precs = list(dict.fromkeys(r["precision"] for r in ranges))
    which = f"{precs[0]} on each GPU (section 5 has its detail)."
    if len(precs) > 1:
        n = "both" if len(precs) == 2 else f"all {len(precs)}"
        which = f"Each GPU shows its faster AMP precision; {TIE_RULE} (section 5 has "
        which += f"{n})."
    what_of = "kernel time only (no host model)."
    if any(r.get("host") for r in best.values()):
        what_of = "the step is kernels plus modelled host idle, beside it the step "
        what_of += "without host idle."
    # best first as printed, a GPU with no range last (a stable sort: ties keep order)
    shown = sorted(best.values(), key=lambda r: headline_key(r)[:2], reverse=True)
    lines = [
        f"Expected AMP {step} speedup over {base}, per GPU, predicted for {what}. "
        f"Both precisions in {fmt} ({layout_text([fmt, fmt])}); {what_of} "
        "Calibrated on committed layer profiles and published training "
        f"throughputs. {which}" + (f" {SCREEN_ORDER_TEXT}:" if len(shown) > 1 else ""),
        "",
    ]
    lines += [screen_line(r) for r in shown]
    if any(bound_text(r) for r in best.values()):
        lines += ["", BOUND_WORDS_TEXT]
    lines += [f"- warning: {w}" for w in report.get("warnings", [])]
    return "\n".join(lines) + "\n"


def report_head(report: dict[str, Any], level: int = 1) -> str:
    """What the command prints as soon as the step is traced."""
    title = (
        f"AMP doctor: {report['model']} ({report['model_class']}, "
        f"{report['parameters'] / 1e6:.1f} M parameters)"
    )
    return (
        _title(title, level, level)
        + "\n\n"
        + first_screen(report)
        + f"\nOutput: shape {shape_text(report['output'])} "
        f"({report['output_rule']}); loss: {report['loss']}.\n"
    )


def report_body(report: dict[str, Any], level: int = 1) -> str:
    """The detailed sections, each under a heading one below ``level``."""
    parts = (_coverage_section, _memory_section, _roofline_section, _where_section,
             _measured_section, _verdict_section)  # fmt: skip
    return "\n".join(
        f"{_title(t, level + 1, level)}\n\n{lead}\n\n{tab}\n"
        for t, lead, tab in filter(None, (part(report) for part in parts))
    )


def _title(text: str, depth: int, level: int) -> str:
    return f"{'#' * depth} {text}" if level else f"**{text}**"


def to_markdown(report: dict[str, Any], level: int = 1) -> str:
    """The report as Markdown; ``level`` is the title's heading level (0: bold titles,
    for a page that has its own headings)."""
    return report_head(report, level) + "\n\n" + report_body(report, level)
