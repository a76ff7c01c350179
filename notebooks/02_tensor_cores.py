# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Tensor cores and matmul speed, measured
#
# Mixed precision promises speed from two sources. Math-bound work (large matrix multiplies and
# convolutions) can run on tensor cores, units that multiply small fp16, bf16, TF32 or fp8
# matrices many times faster than the ordinary fp32 cores. Memory-bound work (elementwise ops,
# normalisation, most of what sits between the big layers) moves half the bytes in a 16-bit
# format. This chapter measures both on the machine you run it on, against the published peaks
# of the GPUs the book talks about, and says how much of each peak a measurement reaches.
#
# **What you will learn**
#
# - how to time a kernel so the number means something: warm-up, many samples, median and
#   spread, waiting for asynchronous GPU work, fresh inputs that do not sit in cache;
# - what a tensor core computes (a small matrix multiply-accumulate, $D = A B + C$, with
#   16-bit inputs and an fp32 accumulator) and why the accumulator's width matters;
# - how Volta, Ampere and Hopper, and GeForce and data-centre parts, differ, computed from a
#   table of published peaks with a source for each figure;
# - matmul speed against size for each dtype, the cost of a size one off a multiple of 8, and
#   where an op sits on the roofline between the memory ceiling and the compute ceiling.
#
# **What you need**: PyTorch. A CUDA GPU shows tensor cores at work (tf32, fp16, bf16, and fp8
# on compute capability 8.9+); on a CPU the chapter measures what the CPU does with the same
# dtypes, and shows GPU results committed under `data/results/` when there are any.

# %% tags=["parameters"]
device = "auto"  # "auto", "cpu" or "cuda"
demo_size = 512  # square matmul used to show how timing goes wrong
matmul_sizes = [64, 128, 256, 512, 1024, 2048]  # square matmul sizes of the speed sweep
max_call_s = 0.2  # skip a size whose single call is predicted to take longer (slow dtypes)
shape_sizes = [128, 512]  # multiples of 8 compared with the sizes one off
elementwise_numels = [4096, 65536, 1048576, 16777216]  # elements of the elementwise add
min_time = 0.1  # seconds measured per point (at least)
rounds = 1  # interleaved repetitions per point; the fastest median is kept
accumulate_terms = 4096  # length of the dot product in the accumulation demo
save_results = ""  # path for a JSON record of this run (empty: no file)

# %%
from ampbook.env import print_environment

print_environment(device);

# %%
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import display

from ampbook.bench_matmul import (elementwise_sweep, load_records, make_record, matmul_sweep,
                                  save_record, shape_cliff, shape_penalties, supported_dtypes)
from ampbook.devices import attainable_tflops, device_for, load_devices
from ampbook.env import cpu_flags, pick_device
from ampbook.paths import RESULTS_DIR
from ampbook.plots import bar_style, md, md_table, series_style, use_style
from ampbook.timing import benchmark, cache_bytes_of, machine_load, random_tensor, time_matmul

use_style()
device = pick_device(device)
devices = load_devices()
here = device_for(device)  # this GPU's entry in the peak table, or None (CPU, unlisted GPU)
dtypes = supported_dtypes(device)
timing = {"min_time": min_time}
on_gpu = device.type == "cuda"
flags = cpu_flags()
print(f"device {device}; table entry: {here.key if here else 'none'}; matmul dtypes here: {dtypes}")

# %%
load = machine_load()
busy = load["busy"] and not on_gpu
load_text = "unknown" if load["load1"] is None else f"{load['load1']:.1f}"
md(f"Load average when this run started: {load_text} on {load['cpus']} CPUs. "
   + ("**The machine was busy**: other processes held the CPUs, and a multi-threaded CPU kernel then waits "
      "milliseconds for its descheduled threads. Read the CPU timings below as this busy machine's, not the "
      "CPU's, and rerun on an idle machine before drawing conclusions." if busy else
      "Quiet enough for the CPU timings below to mean what they say."))

# %% [markdown]
# ## Timing a kernel
#
# A single call timed with a wall clock can be wrong in three ways. The first call pays for
# things later calls do not (allocations, library initialisation, picking a kernel). On a GPU
# the call returns as soon as the work is *queued*, so the clock must wait for the GPU; and
# one sample says nothing about the noise. `ampbook.timing.benchmark` runs untimed warm-up
# calls, then times blocks of calls (with CUDA events on a GPU, after a synchronise), keeps
# sampling until it has enough samples and seconds, and reports the median with the 10th and
# 90th percentiles. It also refuses all-zero inputs and rotates through several input sets when
# one set would stay in cache between calls. Here is one matmul, timed cold and then properly:

# %%
a, b = random_tensor((demo_size, demo_size), "fp32", device), random_tensor((demo_size, demo_size), "fp32", device)
cold = benchmark(torch.matmul, lambda: (a, b), warmup=0, repeats=1, min_time=0, number=1, buffers=1,
                 name="first call")
warm = time_matmul(demo_size, dtype="fp32", device=device, **timing)
print(cold)
print(warm)

# %%
cold_ratio = cold.median_s / warm.median_s
md(f"The first call took {cold.median_s * 1e3:.3g} ms against a warm median of {warm.median_s * 1e3:.3g} ms over "
   f"{warm.samples} samples (80% of them between {warm.p10_s * 1e3:.3g} and {warm.p90_s * 1e3:.3g} ms): "
   + (f"{cold_ratio:.2g} times slower. " if cold_ratio >= 1.5 else
      f"a ratio of {cold_ratio:.2g}, so at this size the cold start costs little, and a single sample is "
      "as likely to be disturbed by other processes. ")
   + f"The warm median corresponds to {warm.tflops * 1e3:.3g} GFLOP/s: a square $n \\times n$ matmul does "
   "$2n^3$ floating-point operations (a multiply and an add per term).")

# %% [markdown]
# The test suite checks this timer against `torch.utils.benchmark` (same median within 5%),
# checks that warm-up calls never enter the samples, and that the clock waits for work that
# runs asynchronously.
#
# ## What a tensor core does
#
# A tensor core takes small tiles of two matrices and adds their product to a third in one
# step. In Volta, the first generation, each tensor core computes $D = A B + C$ on $4 \times 4$
# fp16 matrices $A$ and $B$ with $C$ and $D$ in fp16 or fp32, one such operation per clock:
# $4 \times 4 \times 4 = 64$ fused multiply-adds (NVIDIA Tesla V100 GPU Architecture
# whitepaper, 2017). The products of two fp16 numbers are exact in fp32 (11 significant bits
# times 11 fit in 24), so with an fp32 accumulator the only rounding is in the sums.

# %% mystnb={"figure": {"caption": "One tensor-core step, D = A·B + C, on 4x4 tiles: A and B in fp16, the accumulator C and the result D in fp32. Each entry of D adds four products to an entry of C: 16 entries x 4 = 64 fused multiply-adds.", "name": "fig-ch2-mma"}}
fig, ax = plt.subplots(figsize=(8.5, 2.6))
tiles = [("A", "fp16", 0, 1), ("B", "fp16", 5.6, 1), ("C", "fp32", 11.2, 2), ("D", "fp32", 17.3, 2)]
for label, fmt, x0, style in tiles:
    for i in range(4):
        for j in range(4):
            hl = (label == "A" and i == 1) or (label == "B" and j == 2) or (label in "CD" and (i, j) == (1, 2))
            st = bar_style(style)
            ax.add_patch(plt.Rectangle((x0 + j, 3 - i), 1, 1, facecolor=st["color"], hatch=st["hatch"],
                                       edgecolor="black", linewidth=0.8, alpha=1.0 if hl else 0.35))
    ax.text(x0 + 2, 4.35, f"{label} ({fmt})", ha="center", fontsize=10)
for x, sym in ((4.8, "×"), (10.4, "+"), (16.5, "=")):
    ax.text(x, 2, sym, ha="center", va="center", fontsize=18)
ax.text(10.6, -0.6, "highlighted: D[1,2] = C[1,2] + Σₖ A[1,k]·B[k,2]  (4 products, summed in fp32)",
        ha="center", fontsize=9)
ax.set_xlim(-0.3, 21.6)
ax.set_ylim(-1.0, 4.9)
ax.set_aspect("equal")
ax.axis("off")
plt.show()

# %% [markdown]
# Why the accumulator's width matters: a matmul of inner dimension $k$ sums $k$ products into
# each output. Chapter 1 showed a long sum stall in fp16; here the same happens to one output of
# a matmul, a dot product of length `accumulate_terms`, with products of fp16 inputs added one
# by one into an fp32 accumulator and into an fp16 one (a sequential model of the hardware,
# which adds a few products at a time):

# %%
rng = np.random.default_rng(0)
x16 = rng.random(accumulate_terms).astype(np.float16)
y16 = rng.random(accumulate_terms).astype(np.float16)
products = x16.astype(np.float32) * y16.astype(np.float32)  # exact: 11 x 11 significant bits
exact = float(np.dot(x16.astype(np.float64), y16.astype(np.float64)))
acc32, acc16 = np.float32(0), np.float16(0)
for p in products:
    acc32 = np.float32(acc32 + p)
    acc16 = np.float16(acc16 + np.float16(p))
rows = [["fp32", float(acc32), abs(float(acc32) - exact) / exact],
        ["fp16", float(acc16), abs(float(acc16) - exact) / exact]]
md_table(rows, ["accumulator", f"sum of {accumulate_terms} products (exact {exact:.6g})", "relative error"],
         [None, ".6g", ".2e"])

# %%
err16, err32 = rows[1][2], rows[0][2]
md(f"The fp16 accumulator is off by {err16:.2%}, the fp32 one by {err32:.1e}: "
   + (f"{err16 / max(err32, 1e-12):.3g} times larger. " if err32 > 0 else "")
   + "This is why mixed precision means fp16 inputs with fp32 accumulation, and why the "
   "fp32-accumulate rate is the one that matters below: PyTorch's fp16 and bf16 matmuls "
   "accumulate in fp32.")

# %% [markdown]
# ## Volta, Ampere, Hopper; GeForce and data centre
#
# Later generations made tensor cores wider, added formats (bf16 and TF32 in Ampere, fp8 in
# Ada and Hopper), and put them in GeForce cards too. `data/reference/devices.yml` holds the
# published dense peaks (no structured sparsity) of the GPUs this book talks about, each
# figure with its source (listed at the end of this section). In TFLOP/s, and GB/s for memory:

# %%
order = ["v100-sxm2", "rtx3070-laptop", "rtx3070-desktop", "a100-sxm-80gb", "h100-sxm", "h200-sxm"]
table = [devices[k] for k in order if k in devices] + [d for k, d in devices.items() if k not in order]
rows = [[d.name, d.architecture, d.segment, d.tensor_cores, d.fp32_tflops, d.tf32_tflops,
         d.fp16_tflops_fp32acc, d.fp16_tflops_fp16acc, d.bf16_tflops, d.fp8_tflops, d.mem_bandwidth_gbs]
        for d in table]
md_table(rows, ["GPU", "architecture", "segment", "tensor cores", "fp32", "tf32", "fp16 (fp32 acc.)",
                "fp16 (fp16 acc.)", "bf16", "fp8", "memory GB/s"],
         [None, None, None, None, ".4g", ".4g", ".4g", ".4g", ".4g", ".4g", ".4g"])

# %% [markdown]
# Ratios computed from that table say more than the raw numbers. "Tensor / fp32" is how many
# times the fp32 CUDA-core peak a matmul can reach in fp16 (with fp32 accumulation, as PyTorch
# does it); "fp16 acc. / fp32 acc." shows the GeForce split; FMA per clock per tensor core is
# the fp16 peak divided by tensor cores, clock and 2 FLOPs; the ridge point is where the
# roofline bends (peak FLOP/s over bytes/s: work with fewer FLOPs per byte is memory-bound).

# %%
rows = [[d.name, d.fma_per_clock_per_tensor_core("fp16"), d.fma_per_clock_per_tensor_core("fp32"),
         d.tensor_over_fp32, d.fp16acc_over_fp32acc, d.ridge_point("fp16"), d.ridge_point("fp32")]
        for d in table]
md_table(rows, ["GPU", "FMA/clock/TC (fp16 acc.)", "FMA/clock/TC (fp32 acc.)", "tensor / fp32",
                "fp16 acc. / fp32 acc.", "ridge fp16 (FLOP/B)", "ridge fp32 (FLOP/B)"],
         [None, ".0f", ".0f", ".3g", ".2g", ".0f", ".1f"])

# %%
geforce = [d for d in table if d.segment == "GeForce"]
dc = [d for d in table if d.segment != "GeForce"]
volta = [d for d in table if d.architecture == "Volta"]
desk, lap = devices["rtx3070-desktop"], devices["rtx3070-laptop"]
a100, h100, h200 = devices["a100-sxm-80gb"], devices["h100-sxm"], devices["h200-sxm"]
md(f"- **64 FMA per clock** (the blog post's figure) is Volta's: "
   f"{', '.join(f'{d.name} {d.fma_per_clock_per_tensor_core():.0f}' for d in volta)}. An A100 tensor core does "
   f"{a100.fma_per_clock_per_tensor_core():.0f}, an H100 one {h100.fma_per_clock_per_tensor_core():.0f}, and a "
   f"GeForce RTX 3070 one {desk.fma_per_clock_per_tensor_core():.0f} with fp16 accumulation but "
   f"{desk.fma_per_clock_per_tensor_core('fp32'):.0f} with fp32 accumulation.\n"
   f"- **GeForce halves fp32 accumulation.** On {', '.join(d.name for d in geforce)} fp16 with fp32 accumulate "
   f"runs at {1 / geforce[0].fp16acc_over_fp32acc:.2g} of the fp16-accumulate rate; on "
   f"{', '.join(d.name for d in dc)} at {min(1 / d.fp16acc_over_fp32acc for d in dc):.2g} of it. So AMP on an RTX 3070 "
   f"can at most make a matmul {desk.tensor_over_fp32:.2g}x faster than the fp32 peak "
   f"({desk.fp16_tflops_fp32acc:g} vs {desk.fp32_tflops:g} TFLOP/s), against {a100.tensor_over_fp32:.3g}x on an "
   f"A100 and {h100.tensor_over_fp32:.3g}x on an H100. On the 3070 even TF32 ({desk.tf32_tflops:g}) only matches "
   f"the fp32 peak on paper.\n"
   f"- **184 tensor cores** (the post) is the desktop RTX 3070 ({desk.tensor_cores}: {desk.sms} SMs x 4); the "
   f"laptop part has {lap.tensor_cores} ({lap.sms} SMs), at a lower clock.\n"
   f"- **H200 vs H100**: the same compute peaks, {h200.mem_bandwidth_gbs / h100.mem_bandwidth_gbs:.2f}x the "
   f"bandwidth, so its fp16 ridge point drops from {h100.ridge_point('fp16'):.0f} to "
   f"{h200.ridge_point('fp16'):.0f} FLOP/byte: more work becomes compute-bound.")

# %% mystnb={"figure": {"caption": "Published dense peaks by mode (log scale) from data/reference/devices.yml. Missing bars are modes the GPU lacks (no bf16/TF32 before Ampere, no fp8 before Ada/Hopper).", "name": "fig-ch2-peaks"}}
modes = [("fp32", "fp32_tflops"), ("tf32", "tf32_tflops"), ("fp16, fp32 acc.", "fp16_tflops_fp32acc"),
         ("fp16, fp16 acc.", "fp16_tflops_fp16acc"), ("bf16", "bf16_tflops"), ("fp8", "fp8_tflops")]
fig, ax = plt.subplots(figsize=(9, 4))
width = 0.8 / len(modes)
for i, (label, field) in enumerate(modes):
    xs = [j + (i - (len(modes) - 1) / 2) * width for j in range(len(table))]
    ys = [getattr(d, field) or 0 for d in table]
    ax.bar(xs, [y if y else np.nan for y in ys], width, label=label, **bar_style(i))
ax.set_yscale("log")
ax.set_xticks(range(len(table)), [d.name.replace("NVIDIA ", "").replace(" GeForce", "") for d in table],
              rotation=15, ha="right", fontsize=8)
ax.set_ylabel("peak TFLOP/s (dense)")
ax.set_ylim(5, 8000)
ax.legend(ncols=3, fontsize=8, loc="upper left")
plt.show()

# %%
sources = {}
for d in table:
    for figure, src in d.sources.items():
        sources.setdefault(src["key"], (src, set()))[1].add(d.name)
rows = [[src["title"], src["url"], ", ".join(sorted(names))] for key, (src, names) in sources.items()]
md_table(rows, ["source", "address", "figures for"])

# %% [markdown]
# The RTX 3070 Laptop GPU's peaks are not printed by NVIDIA: the table derives them from the
# desktop GA104's per-SM rates at the laptop's SM count and top boost clock (the `derived`
# entries of the YAML file say how), so real laptops, which boost lower, reach less.
#
# ## Matmul speed against size
#
# Square matmuls in every dtype this device runs, sizes going up, the dtypes measured one after
# the other at each size. A dtype stops growing once its next call is predicted to take longer
# than `max_call_s`, so a slow dtype cannot stall the run.

# %%
mm_rows, mm_skipped = matmul_sweep(matmul_sizes, dtypes, device, max_call_s=max_call_s, rounds=rounds, **timing)
by = {}
for r in mm_rows:
    by.setdefault(r["dtype"], []).append(r)
for s in mm_skipped:
    print(f"skipped {s['dtype']} n={s['n']}: {s['reason']}")

# %% mystnb={"figure": {"caption": "Measured matmul throughput against size, one line per dtype, on the device this chapter ran on (median of the samples; the bars span the 10th to 90th percentile).", "name": "fig-ch2-matmul-size"}}
fig, ax = plt.subplots()
for i, (dtype, rs) in enumerate(by.items()):
    ns = [r["n"] for r in rs]
    med = np.array([r["tflops"] for r in rs])
    lo = np.array([r["flops"] / r["p90_s"] / 1e12 for r in rs])
    hi = np.array([r["flops"] / r["p10_s"] / 1e12 for r in rs])
    ax.errorbar(ns, med, yerr=[med - lo, hi - med], label=dtype, capsize=2, **series_style(i))
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("n (n x n x n matmul)")
ax.set_ylabel("TFLOP/s")
ax.legend()
plt.show()

# %%
best = {d: max(rs, key=lambda r: r["tflops"]) for d, rs in by.items()}
rows = [[d, r["n"], r["tflops"] * 1e3, r["tflops"] / best["fp32"]["tflops"],
         (here.peak_tflops(d.split("_")[0]) if here and here.peak_tflops(d.split("_")[0]) else None)]
        for d, r in best.items()]
for row in rows:
    row.append(row[2] / 1e3 / row[4] if row[4] else None)
md_table(rows, ["dtype", "best at n", "GFLOP/s", "vs best fp32", "published peak TFLOP/s", "fraction of peak"],
         [None, None, ".4g", ".3g", ".4g", ".1%"])

# %%
common = sorted(set.intersection(*[{r["n"] for r in rs} for rs in by.values()]))
n_cmp = common[-1]
speed = {d: next(r for r in rs if r["n"] == n_cmp)["tflops"] for d, rs in by.items()}
low = [d for d in ("fp16", "bf16") if d in speed]
others = [d for d in speed if d != "fp32"]
lines = [f"At n = {n_cmp}, the largest size every dtype reached, "
         + ", ".join(f"{d} runs at {speed[d] / speed['fp32']:.3g}x the fp32 speed" for d in others) + "."]
if not on_gpu:
    has_amx = any(f.startswith("amx") for f in flags)
    has_avx512bf16 = "avx512_bf16" in flags
    slow = [d for d in low if speed[d] < speed["fp32"]]
    fast = [d for d in low if speed[d] >= speed["fp32"]]
    feats = ", ".join(flags) or "none of the listed ones"
    if slow:
        lines.append(f"On this CPU (features: {feats}) {' and '.join(slow)} {'is' if len(slow) == 1 else 'are'} "
                     f"slower than fp32, by {speed['fp32'] / min(speed[d] for d in slow):.3g}x at worst"
                     + ("" if (has_amx or has_avx512bf16) else
                        ": it has neither AMX nor AVX-512 bf16/fp16 instructions, so 16-bit matmuls "
                        "convert to fp32 inside a much less optimised kernel than the fp32 one")
                     + ". Mixed precision on such a CPU costs time: it is a GPU technique.")
    if fast:
        lines.append(f"{' and '.join(fast)} beat fp32 here"
                     + (" thanks to the CPU's AMX tile units (or AVX-512 bf16)" if (has_amx or has_avx512bf16) else "")
                     + ".")
else:
    if here is None:
        lines.append("This GPU is not in the peak table, so the fractions of peak are left empty; the "
                     "roofline below uses the best measured rates as ceilings.")
    else:
        f16 = best.get("fp16")
        if f16:
            lines.append(f"The best fp16 matmul reached {f16['tflops'] / here.peak_tflops('fp16'):.0%} of the "
                         f"{here.name}'s published fp16 (fp32-accumulate) peak; small sizes fall short because they "
                         "cannot fill every SM or hide the launch and tile-edge overheads.")
md(" ".join(lines))

# %% [markdown]
# ## Shapes: multiples of 8
#
# Tensor cores work on tiles, and their fastest kernels want fp16 matrix dimensions that are
# multiples of 8 (16 bytes), so that every row starts aligned. Since cuBLAS 11 other sizes can
# use tensor cores too, but less efficiently (NVIDIA, *Matrix Multiplication Background User's
# Guide*, "Tensor Core Requirements",
# https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/).
# CPU kernels have their own vector widths and blocking. Below, each size in `shape_sizes`
# against the sizes one below and one above, measured side by side:

# %%
shape_rows, shape_skipped = shape_cliff(shape_sizes, [d for d in dtypes if not d.startswith("fp8")], device,
                                        max_call_s=max_call_s, known=mm_rows, rounds=rounds, **timing)
pens = shape_penalties(shape_rows)
for s in shape_skipped:
    print(f"skipped {s['dtype']} near n={s['n']}: {s['reason']}")
md_table([[p["dtype"], p["base"], p["n"], p["tflops_aligned"] * 1e3, p["tflops"] * 1e3, p["slowdown"]] for p in pens],
         ["dtype", "multiple of 8", "one off", "GFLOP/s at the multiple", "GFLOP/s one off", "slowdown"],
         [None, None, None, ".4g", ".4g", ".3f"])

# %% mystnb={"figure": {"caption": "Throughput at sizes one below, at, and one above a multiple of 8, relative to the multiple of 8 (1.0), per dtype and size. Bars below 1 are a penalty for the odd size.", "name": "fig-ch2-shapes"}}
fig, ax = plt.subplots()
groups = sorted({(r["dtype"], r["base"]) for r in shape_rows})
offs = sorted({r["n"] - r["base"] for r in shape_rows})
tf = {(r["dtype"], r["base"], r["n"] - r["base"]): r["tflops"] for r in shape_rows}
width = 0.8 / max(len(offs), 1)
for i, off in enumerate(offs):
    xs = [j + (i - (len(offs) - 1) / 2) * width for j in range(len(groups))]
    ys = [tf[(d, b, off)] / tf[(d, b, 0)] for d, b in groups]
    ax.bar(xs, ys, width, label=f"n = multiple of 8 {off:+d}" if off else "n = multiple of 8", **bar_style(i))
ax.axhline(1.0, color="black", linewidth=0.8)
ax.set_xticks(range(len(groups)), [f"{d}\n{b}" for d, b in groups])
ax.set_ylabel("throughput relative to the multiple of 8")
ax.legend(fontsize=8, ncols=3, loc="lower center", bbox_to_anchor=(0.5, 1.0))
plt.show()

# %%
worst = max(pens, key=lambda p: p["slowdown"]) if pens else None
if worst is None:
    md("No shape comparison ran (every point was predicted too slow).")
else:
    noise = max(r["p90_s"] / r["p10_s"] - 1 for r in shape_rows)
    verdict = ("a real cliff" if worst["slowdown"] > 1.0 + max(0.1, noise) else
               "within the run-to-run spread, so no clear cliff on this device")
    md(f"The largest penalty: {worst['dtype']} at n = {worst['n']} runs {worst['slowdown']:.2f}x slower per FLOP than "
       f"at n = {worst['base']}; the samples' p90/p10 spread reaches {noise:.0%}, so this is {verdict}. "
       + ("On GPUs the odd sizes typically lose the fastest tensor-core kernels; check the committed GPU results "
          "below." if not on_gpu else "Pad or choose layer widths that are multiples of 8 (16 for fp8) to stay on "
          "the fast kernels."))

# %% [markdown]
# ## Memory-bound and math-bound: the roofline
#
# An elementwise add, $z = x + y$, does one FLOP per element and moves three elements (two
# reads, one write): its arithmetic intensity is $1 / (3 \times \text{bytes per element})$
# FLOP/byte, far below any ridge point above, so its speed is set by memory bandwidth, and a
# 16-bit format halves its bytes. A square matmul does $2n^3$ FLOPs on $3n^2$ elements; its
# intensity grows with $n$ and crosses the ridge point. The add at several sizes (GB/s counts
# the three tensors; the largest sizes no longer fit in the last-level cache):

# %%
ew_dtypes = [d for d in ("fp32", "fp16", "bf16") if d in dtypes or d == "fp32"]
ew_rows = elementwise_sweep(elementwise_numels, ew_dtypes, device, rounds=rounds, **timing)
cache = cache_bytes_of(device)
ew = {(r["dtype"], r["numel"]): r for r in ew_rows}
numels = sorted({r["numel"] for r in ew_rows})
rows = [[n, 3 * n * 4 / 2**20] + [ew[(d, n)]["gbps"] for d in ew_dtypes]
        + [ew[("fp16", n)]["median_s"] / ew[("fp32", n)]["median_s"]] for n in numels]
md_table(rows, ["elements", "fp32 working set MiB"] + [f"{d} GB/s" for d in ew_dtypes] + ["fp16 time / fp32 time"],
         [None, ".3g"] + [".3g"] * len(ew_dtypes) + [".2f"])

# %%
big = numels[-1]
tr = ew[("fp16", big)]["median_s"] / ew[("fp32", big)]["median_s"]
beyond = 3 * big * 2 >= 2 * cache
g32, g16 = ew[("fp32", big)]["gbps"], ew[("fp16", big)]["gbps"]
md(f"At {big} elements ({3 * big * 4 / 2**20:.3g} MiB in fp32, {3 * big * 2 / 2**20:.3g} MiB in fp16, against a "
   f"{cache / 2**20:.3g} MiB last-level cache) fp16 takes {tr:.2f}x the fp32 time. "
   + ("Half the bytes, close to half the time: the add is bandwidth-bound, and 16-bit storage speeds it up "
      "whatever the compute units can do." if tr < 0.7 else
      f"Half the bytes did not halve the time here: the fp16 add moved {g16:.3g} GB/s against fp32's {g32:.3g}, so "
      + ("with the working set in cache, memory is not what limits it." if not beyond else
         "on this device the fp16 kernel, not the memory, sets the pace.")))

# %% [markdown]
# Both kinds of work on one roofline figure. The ceilings are the device's published peaks
# when the GPU is in the table; otherwise (a CPU, an unlisted GPU) they are the best rates
# measured in this run, and the figure's caption on your run is only as good as that: a
# measured ceiling is a floor on the true one.

# %%
if here is not None:
    ceil_compute = {d: here.peak_tflops(d.split("_")[0]) for d in best if here.peak_tflops(d.split("_")[0])}
    ceil_bw = here.mem_bandwidth_gbs
    ceiling_kind = f"published peaks of the {here.name} (devices.yml)"
else:
    ceil_compute = {d: r["tflops"] for d, r in best.items()}
    dram = [r for r in ew_rows if 3 * r["numel"] * (4 if r["dtype"] == "fp32" else 2) >= 2 * cache]
    ceil_bw = max(r["gbps"] for r in (dram or ew_rows))
    ceiling_kind = ("best rates measured in this run: the fastest matmul per dtype, and the fastest add "
                    + ("whose working set exceeds twice the cache" if dram else
                       "(all adds fit in cache, so this is a cache bandwidth)"))
# Elementwise ops run on the ordinary (fp32 / vector) units, not tensor cores: their compute roof is fp32's.
points = [(f"add {d}", ew[(d, big)], "fp32") for d in ew_dtypes] + \
    [(f"matmul {d} n={r['n']}", r, d) for d, r in best.items()]
md(f"Ceilings: {ceiling_kind}. Compute: "
   + ", ".join(f"{d} {v * 1e3:.4g} GFLOP/s" for d, v in ceil_compute.items()) + f"; bandwidth {ceil_bw:.4g} GB/s.")

# %% mystnb={"figure": {"caption": "Roofline of the device this chapter ran on: attainable FLOP/s against arithmetic intensity, one compute ceiling per dtype and one bandwidth ceiling (published peaks for a GPU in the table, else the best measured rates), with the measured elementwise adds and best matmuls as points.", "name": "fig-ch2-roofline"}}
fig, ax = plt.subplots(figsize=(7.5, 4.5))
xs = np.logspace(-2.5, 4, 200)
for i, (d, peak) in enumerate(ceil_compute.items()):
    ax.plot(xs, [attainable_tflops(x, peak, ceil_bw) for x in xs], label=f"ceiling {d}",
            **dict(series_style(i), marker=None))
for i, (label, r, _) in enumerate(points):
    ax.plot(r["flops"] / r["bytes_moved"], r["tflops"], linestyle="none", markersize=8,
            label=label, **{k: v for k, v in series_style(i + 2).items() if k != "linestyle"})
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("arithmetic intensity (FLOP/byte)")
ax.set_ylabel("TFLOP/s")
ax.legend(fontsize=7, ncols=2)
plt.show()

# %% [markdown]
# How far each point is from the roof right above it, and which ceiling that roof is (the adds
# are measured against the fp32 compute ceiling, since elementwise ops do not use tensor cores):

# %%
rows = []
for label, r, roof_dtype in points:
    peak = ceil_compute.get(roof_dtype, ceil_compute.get("fp32"))
    intensity = r["flops"] / r["bytes_moved"]
    roof = attainable_tflops(intensity, peak, ceil_bw)
    bound = "memory" if intensity * ceil_bw / 1e3 < peak else "compute"
    rows.append([label, intensity, r["tflops"] * 1e3, r["gbps"], roof * 1e3, r["tflops"] / roof, bound])
md_table(rows, ["measurement", "FLOP/byte", "GFLOP/s", "GB/s", "roof GFLOP/s", "fraction of roof", "bound by"],
         [None, ".3g", ".4g", ".4g", ".4g", ".1%", None])

# %%
adds = [r for r in rows if r[0].startswith("add")]
mms = [r for r in rows if r[0].startswith("matmul")]
ridge32 = ceil_compute["fp32"] * 1e3 / ceil_bw
md(f"The adds sit at {min(r[1] for r in adds):.3g}-{max(r[1] for r in adds):.3g} FLOP/byte, "
   + (f"left of the fp32 ridge point ({ridge32:.3g} FLOP/byte): they reach {min(r[5] for r in adds):.0%}-"
      f"{max(r[5] for r in adds):.0%} of the bandwidth roof and {max(r[2] for r in adds) / (ceil_compute['fp32'] * 1e3):.1%} "
      "at most of the fp32 compute ceiling, so a faster math unit would not help them; fewer bytes would. "
      if max(r[1] for r in adds) < ridge32 else
      f"not left of the measured fp32 ridge point ({ridge32:.3g} FLOP/byte): the measured ceilings of this run are too "
      "low to separate the two regimes. ")
   + f"The matmuls sit at "
   f"{min(r[1] for r in mms):.3g}-{max(r[1] for r in mms):.3g} FLOP/byte and are bound by "
   f"{', '.join(sorted({r[6] for r in mms}))}; "
   + ("their fractions are 100% by construction for the dtype whose best rate defines its own ceiling: on a CPU "
      "or an unlisted GPU the table shows where each dtype stands against the best this machine did, not "
      "against a datasheet." if here is None else
      f"they reach {min(r[5] for r in mms):.0%}-{max(r[5] for r in mms):.0%} of the published roof; the rest is "
      "lost to clocks below the boost figure under load, kernel overheads, and sizes too small to fill the GPU."))

# %% [markdown]
# ## GPU results committed with the book
#
# The same measurements made on GPUs are committed as JSON under `data/results/`
# (`tensor_cores_<gpu>.json`, written by `python -m ampbook.bench matmul --save ...` or by this
# notebook with `save_results`; the format is documented in `ampbook/bench_matmul.py`). This
# run shows every such file it finds:

# %%
records = load_records(RESULTS_DIR)
if not records:
    md(f"No GPU results are committed under `data/results/` yet (no file matches `tensor_cores_*.json`), so "
       f"this chapter shows only the {'GPU' if on_gpu else 'CPU'} it ran on. On a CUDA machine, "
       "`python -m ampbook.bench matmul --save data/results/tensor_cores_<gpu>.json` adds one.")
else:
    rows = []
    for rec in records:
        entry = devices.get(rec["device_key"]) if rec.get("device_key") else None
        bests = {}
        for r in rec["matmul"]:
            if r["dtype"] not in bests or r["tflops"] > bests[r["dtype"]]["tflops"]:
                bests[r["dtype"]] = r
        for d, r in bests.items():
            peak = entry.peak_tflops(d.split("_")[0]) if entry else None
            rows.append([rec["file"], rec["environment"]["device_name"], d, r["n"], r["tflops"], peak,
                         r["tflops"] / peak if peak else None])
    display(md_table(rows, ["file", "device", "dtype", "n", "TFLOP/s", "published peak", "fraction"],
                     [None, None, None, None, ".4g", ".4g", ".1%"]))
    prow = [[rec["file"], p["dtype"], p["base"], p["n"], p["slowdown"]] for rec in records
            for p in shape_penalties(rec["shapes"])]
    if prow:
        display(md_table(prow, ["file", "dtype", "multiple of 8", "one off", "slowdown"], [None, None, None, None, ".3f"]))

# %%
if save_results:
    path = save_record(make_record(device, mm_rows, shape_rows, ew_rows, mm_skipped + shape_skipped), save_results)
    print(f"saved {path}")

# %% [markdown]
# ## Summary

# %%
f16_cmp = speed.get("fp16")
md(("- **These CPU timings were taken on a busy machine** (see the start of the chapter); rerun before "
    "trusting them.\n" if busy else "")
   + f"- Timing needs warm-up, many samples and a clock that waits for the device; here the first call took "
   f"{cold.median_s / warm.median_s:.2g}x the warm median.\n"
   f"- A tensor core is a small matrix multiply-accumulate; its fp32 accumulator is what keeps a length-"
   f"{accumulate_terms} dot product accurate ({err32:.1e} vs {err16:.1e} relative error with fp16).\n"
   f"- From the peak table: fp16 tensor math is {desk.tensor_over_fp32:.2g}x the fp32 peak on an RTX 3070 "
   f"(GeForce halves fp32 accumulation) but {a100.tensor_over_fp32:.3g}x on an A100 and {h100.tensor_over_fp32:.3g}x "
   f"on an H100: how much AMP can speed up a matmul depends first on the card.\n"
   + (f"- On this {'GPU' if on_gpu else 'CPU'}, fp16 matmuls ran at {f16_cmp / speed['fp32']:.3g}x the fp32 speed "
      f"at n = {n_cmp}.\n" if f16_cmp else "")
   + f"- An elementwise add is memory-bound: fp16 took {tr:.2f}x the fp32 time at {big} elements. Speed from "
   f"mixed precision comes from tensor cores for the big matmuls and from halved bytes for everything else.")

# %% [markdown]
# ## Exercises
#
# 1. Time `torch.matmul` at `demo_size` with `benchmark(..., warmup=0, repeats=1, number=1)` ten
#    times in a loop and plot the ten values. Which of them would you publish, and why is the
#    median of many samples a better choice?
# 2. On a GPU, time an fp16 matmul with `time.perf_counter()` around the call and no
#    `torch.cuda.synchronize()`. How many TFLOP/s does it "reach"? Compare with the device's
#    peak from `ampbook.devices`.
# 3. From the peak table, compute the matmul size $n$ at which an fp16 matmul crosses the
#    ridge point of an RTX 3070 and of an H200 (intensity $2n^3 / (3 n^2 \cdot 2)$ FLOP/byte).
#    Which layers of a small segmentation network are below it?
# 4. Rerun the shape section with `shape_sizes = [1000, 1024]` on a GPU. Is the cliff at
#    "multiple of 8" or at "multiple of 64"? Explain with tile sizes.
# 5. With `device="cuda"`, compare `tf32` with `fp32` in the size sweep. How does the ratio
#    compare with the table's tf32/fp32 peak ratio for your GPU?
