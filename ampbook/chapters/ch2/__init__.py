"""What chapter 2 (tensor cores) says: where mixed precision pays on this machine,
from the op speeds measured; one-line verdicts on a sweep's speed, off-by-one shapes,
elementwise adds and roofline; the reading of the GPU sweeps committed under
``data/results/``. The sweeps are ``bench_sweeps``, the records ``bench_matmul``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from ampbook.chapters.ch2.bench_matmul import RESULTS_PATTERN
from ampbook.chapters.ch2.bench_sweeps import CONV_KINDS, read_from, shape_penalties
from ampbook.core.page import md_escape
from ampbook.core.paths import REPO_ROOT, RESULTS_DIR
from ampbook.core.words import plural
from ampbook.results import provenance

# --- Where mixed precision pays here: matmuls and a convolution, measured ---


def op_speeds(
    mm_rows: Sequence[dict], conv_rows: Sequence[dict]
) -> tuple[int, dict[str, dict[str, float]]]:
    """Each 16-bit dtype's speed over fp32's per op, matmuls at the largest common n."""
    n, speed = speeds_at_common_size(mm_rows)
    conv = {(r["kind"], r["dtype"]): r["median_s"] for r in conv_rows}
    out: dict[str, dict[str, float]] = {}
    for d in speed:
        if d == "fp32":
            continue
        ratios = {"matmul": speed[d] / speed["fp32"]}
        for kind in CONV_KINDS:
            if (kind, d) in conv and (kind, "fp32") in conv:
                ratios[kind] = conv[(kind, "fp32")] / conv[(kind, d)]
        out[d] = ratios
    return n, out


_OP_WORDS = {
    "matmul": "matmuls",
    "conv": "the convolution's forward",
    "conv_train": "its forward and backward",
}


def amp_op_verdict(
    ratios: dict[str, dict[str, float]],
    device_type: str,
    load: dict | None = None,
    margin: float = 0.1,
) -> str:
    """Where mixed precision pays here, from measured ``op_speeds`` (never the CPU's
    flags); ``load`` warns of CPU timings taken on a busy machine."""
    if not ratios:
        return "no 16-bit dtype was measured beside fp32."
    parts, verdicts = [], {}
    for d, r in ratios.items():
        speeds = ", ".join(f"{_OP_WORDS.get(k, k)} {v:.3g}x" for k, v in r.items())
        if all(v > 1 + margin for v in r.values()):
            verdicts[d] = "faster"
        elif all(v < 1 - margin for v in r.values()):
            verdicts[d] = "slower"
        else:
            verdicts[d] = "mixed"
        parts.append(f"{d} ran {speeds} the fp32 speed ({verdicts[d]})")
    text = f"On this {device_type}, " + "; ".join(parts) + ". "
    low = "bf16" if device_type == "cpu" else "fp16"
    says = {
        "faster": f"Autocast's {low} can pay here in layers made of these ops; a whole "
        "step can still gain less or lose, since it also runs the casts autocast "
        "inserts and the ops it keeps in fp32.",
        "slower": f"Autocast's {low} costs time here in layers made of these ops: "
        f"mixed precision does not pay on this {device_type}.",
        "mixed": f"Autocast's {low} pays here for some ops and costs for others: only "
        "a whole step says which wins.",
    }
    text += says.get(verdicts.get(low), f"Autocast's {low} was not measured.")
    if device_type == "cpu" and load and load.get("busy"):
        text += (
            f" These CPU timings were taken on a busy machine (load average "
            f"{load['load1']:.1f} on {load['cpus']} CPUs): rerun on an idle one "
            "before trusting the ratios."
        )
    return text


# --- What a run shows: summaries and one-line verdicts ---


def best_per_dtype(rows: Sequence[dict]) -> dict[str, dict]:
    """The fastest (highest TFLOP/s) row of each dtype, in first-seen dtype order."""
    best: dict[str, dict] = {}
    for r in rows:
        if r["dtype"] not in best or r["tflops"] > best[r["dtype"]]["tflops"]:
            best[r["dtype"]] = r
    return best


def speeds_at_common_size(rows: Sequence[dict]) -> tuple[int, dict[str, float]]:
    """The largest size every dtype reached, and each dtype's TFLOP/s there."""
    sizes: dict[str, set] = {}
    for r in rows:
        sizes.setdefault(r["dtype"], set()).add(r["n"])
    common = set.intersection(*sizes.values()) if sizes else set()
    if not common:
        raise ValueError("no matmul size was measured in every dtype")
    n = max(common)
    return n, {r["dtype"]: r["tflops"] for r in rows if r["n"] == n}


def speed_verdict(speed: dict[str, float], n: int, device_type: str) -> str:
    """Each dtype's speed against fp32 at size n, and which way it went here."""
    ratios = {d: v / speed["fp32"] for d, v in speed.items() if d != "fp32"}
    text = f"n = {n}: " + ", ".join(f"{d} {r:.3g}x fp32" for d, r in ratios.items())
    low = {d: r for d, r in ratios.items() if d in ("fp16", "bf16")}
    if not low:
        return text + "."
    if all(r < 1 for r in low.values()):
        return text + f"; 16-bit matmuls are SLOWER than fp32 on this {device_type}."
    if all(r >= 1 for r in low.values()):
        return text + f"; 16-bit matmuls are faster than fp32 on this {device_type}."
    return (
        text + f"; mixed: one 16-bit dtype is faster than fp32 on this {device_type}."
    )


def shape_verdict(penalties: Sequence[dict]) -> str:
    """The largest off-by-one difference, and whether it is outside the spread."""
    if not penalties:
        return "no shape comparison ran."
    worst = max(penalties, key=lambda p: abs(math.log(p["slowdown"])))
    real = [p for p in penalties if p["outside_spread"]]
    faster = "slower" if worst["slowdown"] > 1 else "faster"
    factor = max(worst["slowdown"], 1 / worst["slowdown"])
    text = (
        f"largest difference: {worst['dtype']} n={worst['n']} runs {factor:.2f}x "
        f"{faster} per FLOP than n={worst['base']}, "
    )
    text += (
        "outside the run-to-run spread"
        if worst["outside_spread"]
        else "within the run-to-run spread (noise)"
    )
    return text + f"; {len(real)} of {len(penalties)} pairs differ beyond their spread."


def elementwise_verdict(rows: Sequence[dict], cache_bytes: int) -> str:
    """At the largest size: fp16's add time over fp32's, where it read from."""
    ew = {(r["dtype"], r["numel"]): r for r in rows}
    n = max(r["numel"] for r in rows)
    ratio = ew[("fp16", n)]["median_s"] / ew[("fp32", n)]["median_s"]
    where = read_from(ew[("fp16", n)], cache_bytes)
    place = "from memory" if where == "memory" else "from the cache"
    text = (
        f"{n} elements (inputs read {place}; last-level cache "
        f"{cache_bytes / 2**20:.3g} MiB): fp16 takes {ratio:.2f}x the fp32 time; "
    )
    if ratio < 0.6:
        return text + "half the bytes, close to half the time."
    if ratio < 0.9:
        return text + "faster, but well short of half: not purely bandwidth-bound here."
    return text + "little or no gain: the fp16 kernel, not memory, sets the pace here."


# --- The roofline and the committed GPU sweeps ---


def ceilings_text(ceilings: dict) -> str:
    """One line: what the roofline's ceilings are and their values."""
    compute = ", ".join(
        f"{d} {v * 1e3:.4g} GFLOP/s" for d, v in ceilings["compute"].items()
    )
    return (
        f"Ceilings: {ceilings['kind']}; bandwidth {ceilings['bandwidth']:.4g} GB/s; "
        f"compute {compute}."
    )


def roofline_rows(
    points: Sequence[tuple[str, dict, str]], ceilings: dict
) -> list[dict]:
    """Per point: intensity, rate, its roof, the share reached, which ceiling binds."""
    from ampbook.core.devices import attainable_tflops

    out = []
    for label, r, roof_dtype in points:
        peak = ceilings["compute"].get(roof_dtype, ceilings["compute"].get("fp32"))
        intensity = r["flops"] / r["bytes_moved"]
        roof = attainable_tflops(intensity, peak, ceilings["bandwidth"])
        bound = (
            "memory" if intensity * ceilings["bandwidth"] / 1e3 < peak else "compute"
        )
        out.append(
            {
                "label": label,
                "intensity": intensity,
                "gflops": r["tflops"] * 1e3,
                "gbps": r["gbps"],
                "roof_gflops": roof * 1e3,
                "fraction": r["tflops"] / roof,
                "bound": bound,
            }
        )
    return out


def roofline_verdict(rows: Sequence[dict], ceilings: dict) -> str:
    """One line: which side of the fp32 ridge the adds and the matmuls fall on."""
    ridge = ceilings["compute"]["fp32"] * 1e3 / ceilings["bandwidth"]
    adds = [r for r in rows if r["label"].startswith("add")]
    mms = [r for r in rows if r["label"].startswith("matmul")]
    text = f"fp32 ridge point {ridge:.3g} FLOP/byte; "
    if adds:
        side = (
            "left of it (memory-bound)"
            if max(r["intensity"] for r in adds) < ridge
            else "NOT left of it: the measured ceilings cannot separate the regimes"
        )
        text += f"adds {side}; "
    if mms:
        text += "matmuls bound by " + ", ".join(sorted({r["bound"] for r in mms})) + "."
    return text


def record_device(record: dict) -> str:
    """A record's device: a GPU by ``display_name``, a CPU by the name it reported."""
    from ampbook.core.devices import display_name

    env = record["environment"]
    if str(env.get("device", "")).startswith("cuda"):
        return display_name(env["device_name"])
    return md_escape(env["device_name"])


def records_table(records: Sequence[dict], devices: dict) -> list[list]:
    """Per committed record and dtype, its best matmul against the published peak:
    ``[device, dtype, n, TFLOP/s, peak, fraction]`` (None where the GPU is unlisted)."""
    rows = []
    for rec in records:
        entry = devices.get(rec.get("device_key") or "")
        for d, r in best_per_dtype(rec["matmul"]).items():
            peak = entry.peak_tflops(d.split("_")[0]) if entry else None
            share = r["tflops"] / peak if peak else None
            rows.append([record_device(rec), d, r["n"], r["tflops"], peak, share])
    return rows


def records_verdict(records: Sequence[dict], directory: Path = RESULTS_DIR) -> str:
    """One line: how many GPU results are committed, and from which devices."""
    if not records:
        where = Path(directory)
        if where.is_relative_to(REPO_ROOT):
            where = where.relative_to(REPO_ROOT)
        return f"no GPU results committed under {where}/ (no file {RESULTS_PATTERN})."
    names = sorted({record_device(r) for r in records})
    return (
        f"{plural(len(records), 'committed result file')}, from the {', '.join(names)}."
    )


def sweep_provenance(record: dict) -> str:
    """A committed sweep's provenance line: device, date, software, its sizes."""
    sizes = sorted({r["n"] for r in record["matmul"]})
    span = f"{sizes[0]}-{sizes[-1]}" if len(sizes) > 1 else str(sizes[0])
    return provenance(
        record["environment"],
        record.get("created"),
        {"matmul sizes n =": span, "": "fp32 timed with TF32 off"},
    )


def sweep_summary(record: dict, devices: dict) -> str:
    """A committed sweep in two sentences: best matmuls, worst off-by-one penalty."""
    name = record_device(record)
    entry = devices.get(record.get("device_key") or "")
    best = best_per_dtype(record["matmul"])
    if not best:
        return f"The {name} sweep holds no matmul."
    f32 = best.get("fp32")
    parts = []
    for d, r in best.items():
        text = f"{d} {r['tflops']:.4g} TFLOP/s at n = {r['n']}"
        peak = entry.peak_tflops(d.split("_")[0]) if entry else None
        notes = [f"{r['tflops'] / peak:.0%} of its peak"] if peak else []
        if f32 and d != "fp32":
            notes.append(f"{r['tflops'] / f32['tflops']:.3g}x fp32")
        parts.append(text + (f" ({', '.join(notes)})" if notes else ""))
    where = "" if entry else " (not in the peak table: no published peak to compare)"
    out = f"On the {name}{where}, the best matmuls: " + "; ".join(parts) + "."
    pens = shape_penalties(record.get("shapes", []))
    if pens:
        worst = max(pens, key=lambda q: q["slowdown"])
        real = sum(1 for q in pens if q["outside_spread"])
        out += (
            f" A size one off a multiple of 8 ran up to {worst['slowdown']:.2f}x "
            f"slower per FLOP ({worst['dtype']}, n = {worst['n']} against "
            f"{worst['base']}); {real} of {len(pens)} such pairs differ beyond their "
            "run-to-run spread."
        )
    return out


def tensor_core_claims(post: dict, devices: dict | None = None) -> list[list]:
    """The RTX 3070 post's tensor-core claims: rows ``[claim, what is true, source]``
    from the peak table and ``seed_post.yml``."""
    from ampbook.core.devices import load_devices

    devices = load_devices() if devices is None else devices
    claims, facts = post["claims"], post["tensor_core_facts"]
    rows = []
    for gpu in claims["tensor_core_gpus"]:
        fact = facts[gpu]
        if "device" in fact:
            d = devices[fact["device"]]
            said = (
                f"yes: the {d.name} has {d.tensor_cores}",
                d.source_of("tensor_cores"),
            )
        else:
            said = fact["fact"], f"{fact['source']['title']} ({fact['source']['url']})"
        rows.append([f"{gpu} has tensor cores", *said])
    v100, desk = devices["v100-sxm2"], devices["rtx3070-desktop"]
    lap = devices["rtx3070-laptop"]
    rows.append(
        [
            f"{claims['tensor_core_fma_per_clock']} FMA per clock per tensor core",
            f"V100 {v100.fma_per_clock_per_tensor_core('fp16'):.0f} (fp16 or fp32 "
            f"accumulate); RTX 3070 {desk.fma_per_clock_per_tensor_core('fp32'):.0f} "
            f"with fp32 accumulate (AMP's mode), "
            f"{desk.fma_per_clock_per_tensor_core('fp16'):.0f} with fp16 accumulate",
            "computed from the peak table: peak / (tensor cores x clock x 2)",
        ]
    )
    rows.append(
        [
            f"{claims['rtx3070_tensor_cores']} tensor cores on the RTX 3070",
            f"desktop {desk.tensor_cores}, laptop {lap.tensor_cores}",
            desk.source_of("tensor_cores"),
        ]
    )
    lo, hi = claims["fp16_speedup_claimed"]
    p100 = facts["Tesla P100"]["fp16_over_fp32"]
    rows.append(
        [
            f"fp16 throughput {lo}-{hi}x fp32",
            "the 2018 mixed-precision paper's figure for the GPUs of its day: "
            f"P100 {p100:g}x (fp16 on its CUDA cores), V100 "
            f"{v100.tensor_over_fp32:.3g}x (tensor cores); the post's RTX 3070 "
            f"{desk.tensor_over_fp32:.3g}x in AMP's mode",
            "Micikevicius et al. 2018; P100 whitepaper; the peak table",
        ]
    )
    return rows
