# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Tensor cores and matmul speed, measured
#
# Mixed precision promises speed from two sources. Math-bound work (large matrix
# multiplies and convolutions) can run on {term}`tensor cores <tensor core>`, units that
# multiply small fp16, bf16, TF32 or fp8 matrices faster than the ordinary fp32 cores, by
# a factor that depends on the card and the mode: the peak table below gives
# {glue:text}`a100_ratio:.3g`x on an A100 but only {glue:text}`desk_ratio:.2g`x on a
# GeForce RTX 3070 for fp16 with fp32 accumulation (AMP's mode), and
# {glue:text}`desk_tf32_ratio:.2g`x for TF32 there. Memory-bound work (elementwise ops,
# normalisation, most of what sits between the big layers) moves half the bytes in a
# 16-bit format. This chapter measures both, on this machine and on an H200 whose results
# come with the book, against the GPUs' published peaks, and says where mixed precision
# pays.
#
# **What you will learn**
#
# - how to time a kernel so the number means something: warm-up, many samples, median and
#   spread, waiting for the GPU, inputs that do not sit in cache;
# - what a tensor core computes ($D = A B + C$, 16-bit inputs, an fp32 accumulator) and why
#   the accumulator's width matters;
# - how GPU generations, and GeForce and data-centre parts, differ, from published peaks;
# - matmul and convolution speed per dtype here and on an H200, the cost of a size one off
#   a multiple of 8, and the roofline between the memory and the compute ceilings.
#
# **What you need**: PyTorch. A CUDA GPU shows tensor cores at work (tf32, fp16, bf16, and
# fp8 on compute capability 8.9+); on a CPU the chapter measures what the CPU does with the
# same dtypes, and shows GPU results committed under `data/results/` beside them.

# %% tags=["parameters", "remove-cell"]
device = "auto"  # "auto", "cpu" or "cuda"
demo_size = 512  # square matmul used to show how timing goes wrong
matmul_sizes = [64, 128, 256, 512, 1024, 2048]  # square matmul sizes of the speed sweep
max_call_s = 0.2  # skip a size whose single call is predicted to take longer
shape_sizes = [128, 512]  # multiples of 8 compared with the sizes one off
elementwise_numels = [4096, 65536, 1048576, 16777216]  # elements of the elementwise add
min_time = 0.1  # seconds measured per point (at least)
rounds = 1  # interleaved repetitions per point; the fastest median is kept
accumulate_terms = 4096  # length of the dot product in the accumulation demo
conv_shape = [1, 16, 32, 32]  # batch, channels, height, width of the timed 3x3 conv
save_results = ""  # path for a JSON record of this run (empty: no file)
results_dir = ""  # folder of committed GPU sweeps (empty: data/results)

# %% tags=["remove-input"]
from ampbook.core import params
from ampbook.core.env import print_environment

# a bad parameter stops the run here, with one line naming it and its rule
params.device("device", device)
params.integer("demo_size", demo_size, minimum=8)
params.integers("matmul_sizes", matmul_sizes, minimum=8, count=1)
params.integers("shape_sizes", shape_sizes, minimum=16, multiple_of=8)
params.integers("elementwise_numels", elementwise_numels, minimum=16, count=1)
params.number("max_call_s", max_call_s, above=0)
params.number("min_time", min_time, minimum=0)
params.integer("rounds", rounds, minimum=1)
params.integer("accumulate_terms", accumulate_terms, minimum=16)
params.shape("conv_shape", conv_shape, length=4, why="[batch, channels, height, width]")
params.output("save_results", save_results)
params.folder("results_dir", results_dir, empty="data/results")
print_environment(device)

# %% tags=["hide-cell"]
import inspect

import matplotlib.pyplot as plt
import numpy as np
import torch

from ampbook import results
from ampbook.chapters import ch2
from ampbook.chapters.ch2.bench_matmul import (
    make_record,
    roofline_ceilings,
    save_record,
)
from ampbook.chapters.ch2.bench_sweeps import (
    conv_sweep,
    elementwise_sweep,
    matmul_sweep,
    outside_spread,
    read_from,
    shape_cliff,
    shape_penalties,
    supported_dtypes,
)
from ampbook.core.devices import (
    attainable_tflops,
    device_for,
    load_devices,
    pick_device,
)
from ampbook.core.page import (
    MIB,
    bar_style,
    glue_all,
    md,
    md_table,
    series_style,
    use_style,
)
from ampbook.core.paths import RESULTS_DIR, load_reference
from ampbook.measure.timing import (
    benchmark,
    last_level_cache,
    load_verdict,
    machine_load,
    random_tensor,
    time_matmul,
)
from ampbook.numerics.formats import running_sum

use_style()
device = pick_device(device)
devices = load_devices()
here = device_for(device)  # this GPU's entry in the peak table, or None
dtypes = supported_dtypes(device)  # the matmul dtypes this device runs
load = machine_load()

# %% [markdown]
# ## Timing a kernel
#
# First, how busy this machine was when the run started:

# %%
md(load_verdict(load, device.type))

# %% [markdown]
# On a busy or shared machine other processes hold the CPUs, and a multi-threaded CPU kernel
# then waits milliseconds for its descheduled threads: read the CPU timings below as that
# machine's, not the CPU's, expect wide spreads, and rerun on an idle machine before drawing
# conclusions. On a quiet machine (or a GPU) the timings mean what they say.
#
# A single call timed with a wall clock can be wrong in three ways. The first call pays for
# things later calls do not (allocations, library initialisation, picking a kernel). On a GPU
# the call returns as soon as the work is *queued*, so the clock must wait for the GPU; and
# one sample says nothing about the noise. `ampbook.measure.timing.benchmark` runs untimed warm-up
# calls, then times blocks of calls (with CUDA events on a GPU, after a synchronise), keeps
# sampling until it has enough samples and seconds, and reports the median with the 10th and
# 90th percentiles. It also refuses all-zero inputs and rotates through several input sets
# when one set would stay in cache between calls. Here is one matmul, timed cold and then
# properly:

# %%
a = random_tensor((demo_size, demo_size), "fp32", device)
b = random_tensor((demo_size, demo_size), "fp32", device)
cold = benchmark(torch.matmul, lambda: (a, b), warmup=0, repeats=1, min_time=0,
                 number=1, buffers=1, name="first call")
warm = time_matmul(demo_size, dtype="fp32", device=device, min_time=min_time)
rows = [[r.name, r.median_s * 1e3, r.p10_s * 1e3, r.p90_s * 1e3,
         f"{r.samples} x {r.number}", r.buffers] for r in (cold, warm)]
md_table(rows, ["timing", "median ms", "p10 ms", "p90 ms", "samples x calls",
                "input sets"], [None, ".3g", ".3g", ".3g", None, None])

# %% tags=["hide-input"]
glue_all(cold_ms=cold.median_s * 1e3, warm_ms=warm.median_s * 1e3,
         warm_samples=warm.samples, warm_p10_ms=warm.p10_s * 1e3,
         warm_p90_ms=warm.p90_s * 1e3, cold_ratio=cold.median_s / warm.median_s,
         warm_gflops=warm.tflops * 1e3)

# %% [markdown]
# The first call took {glue:text}`cold_ms:.3g` ms against a warm median of
# {glue:text}`warm_ms:.3g` ms over {glue:text}`warm_samples:d` samples (80% of them between
# {glue:text}`warm_p10_ms:.3g` and {glue:text}`warm_p90_ms:.3g` ms), a ratio of
# {glue:text}`cold_ratio:.2g`. Where the ratio is well above 1, the cold start is what a
# single timed call would have reported; where it is near (or below) 1, the cold start costs
# little at this size and a single sample is as likely to be disturbed by other processes
# as by the start-up. Either way only the spread of many samples says how far to trust a
# number. The warm median corresponds to {glue:text}`warm_gflops:.3g` GFLOP/s: a square
# $n \times n$ matmul does $2n^3$ floating-point operations (a multiply and an add per term).
#
# The test suite checks this timer against `torch.utils.benchmark` (same median within 5%),
# checks that warm-up calls never enter the samples, and that the clock waits for work that
# runs asynchronously.
#
# ## What a tensor core does
#
# A tensor core takes small tiles of two matrices and adds their product to a third in one
# step. In Volta, the first generation, each tensor core computes $D = A B + C$ on
# $4 \times 4$ fp16 matrices $A$ and $B$ with $C$ and $D$ in fp16 or fp32, one such operation
# per clock: $4 \times 4 \times 4 = 64$ fused multiply-adds {cite:p}`volta-whitepaper`
# ({numref}`fig-ch2-mma`). The products of two fp16 numbers are exact in fp32 (11
# significant bits times 11 fit in 24), so with an fp32 accumulator the only rounding is in
# the sums.

# %% mystnb={"figure": {"caption": "One tensor-core step, D = A\u00b7B + C, on 4x4 tiles: A and B in fp16, the accumulator C and the result D in fp32. Each entry of D adds four products to an entry of C: 16 entries x 4 = 64 fused multiply-adds.", "name": "fig-ch2-mma"}} tags=["hide-input"]
fig, ax = plt.subplots(figsize=(8.5, 2.6))
tiles = [("A", "fp16", 0, 1), ("B", "fp16", 5.6, 1), ("C", "fp32", 11.2, 2),
         ("D", "fp32", 17.3, 2)]
for label, fmt, x0, k in tiles:
    st = bar_style(k)
    for i in range(4):
        for j in range(4):
            hl = ((label == "A" and i == 1) or (label == "B" and j == 2)
                  or (label in "CD" and (i, j) == (1, 2)))
            ax.add_patch(plt.Rectangle((x0 + j, 3 - i), 1, 1, facecolor=st["color"],
                                       hatch=st["hatch"], edgecolor="black",
                                       linewidth=0.8, alpha=1.0 if hl else 0.35))
    ax.text(x0 + 2, 4.35, f"{label} ({fmt})", ha="center", fontsize=10)
for x, sym in ((4.8, "×"), (10.4, "+"), (16.5, "=")):
    ax.text(x, 2, sym, ha="center", va="center", fontsize=18)
ax.text(10.6, -0.6, "highlighted: D[1,2] = C[1,2] + Σₖ A[1,k]·B[k,2]  "
        "(4 products, summed in fp32)", ha="center", fontsize=9)
ax.set(xlim=(-0.3, 21.6), ylim=(-1.0, 4.9), aspect="equal")
ax.axis("off")
plt.show()

# %% [markdown]
# Why the accumulator's width matters: a matmul of inner dimension $k$ sums $k$ products
# into each output. Chapter 1 showed a long sum stall in fp16; here the same happens to one
# output of a matmul, a dot product of length `accumulate_terms`, with the exact products of
# fp16 inputs added one by one (chapter 1's `running_sum`) into an fp32 accumulator and into
# an fp16 one (a sequential model of the hardware, which adds a few products at a time):

# %%
gen = torch.Generator().manual_seed(0)
x16, y16 = torch.rand(2, accumulate_terms, generator=gen).half()
products = x16.float() * y16.float()  # exact: 11 x 11 significant bits fit in 24
exact = torch.dot(x16.double(), y16.double()).item()
sums = {d: running_sum(products, d)[-1].item() for d in (torch.float32, torch.float16)}
rows = [[str(d)[6:], s, abs(s - exact) / exact] for d, s in sums.items()]
md_table(rows, ["accumulator", "sum of the products", "relative error"],
         [None, ".6g", ".2e"])

# %%
torch_dot = torch.matmul(x16[None].to(device), y16[:, None].to(device)).item()
glue_all(dot_exact=exact, err32=rows[0][2], err16=rows[1][2],
         err_ratio=rows[1][2] / max(rows[0][2], 1e-12),
         err_torch=abs(torch_dot - exact) / exact, fp16_u=2.0**-11)
flags = [(f"`allow_{k}`", getattr(torch.backends.cuda.matmul, f"allow_{k}", None))
         for k in ("fp16_reduced_precision_reduction",
                   "bf16_reduced_precision_reduction", "fp16_accumulation")]
md_table(flags, [f"torch.backends.cuda.matmul (torch {torch.__version__})", "value"])

# %% [markdown]
# The exact dot product is {glue:text}`dot_exact:.6g`. The fp16 accumulator is off by
# {glue:text}`err16:.2%`, the fp32 one by {glue:text}`err32:.1e`:
# {glue:text}`err_ratio:.3g` times larger. This is why mixed precision means fp16 inputs
# with fp32 accumulation, and why the fp32-accumulate rate is the one that matters below.
#
# Does PyTorch accumulate its fp16 and bf16 matmuls in fp32? On CUDA, cuBLAS multiplies the
# 16-bit tiles and accumulates each dot product in fp32, with two qualifications that
# PyTorch exposes as flags (shown above for this torch; see "Reduced Precision Reduction in
# FP16 and BF16 GEMMs" in PyTorch's CUDA semantics notes {cite:p}`pytorch-cuda-notes`).
# `torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction` and
# `allow_bf16_reduced_precision_reduction` are `True` by default: cuBLAS may then split a
# long inner dimension into pieces and add the partial sums in the 16-bit format (split-K),
# trading a little accuracy for speed at some shapes; set them to `False` to keep every
# reduction in fp32. `allow_fp16_accumulation` (in recent versions, `False` by default) goes
# the other way and lets fp16 matmuls accumulate in fp16 outright, on GPUs whose fp16
# accumulate rate is higher. On a CPU the flags have no effect (they configure cuBLAS).
# What this device's kernel did with the same fp16 vectors as a $1 \times k$ by $k \times 1$
# `torch.matmul`: its result errs by {glue:text}`err_torch:.1e`. An error up to fp16's unit
# roundoff ({glue:text}`fp16_u:.1e`, the rounding of the result itself) means the kernel
# accumulated in fp32 or better; an error near the fp16 accumulator's above means it did
# not.
#
# ## Volta, Ampere, Hopper; GeForce and data centre
#
# Later generations made tensor cores wider, added formats (bf16 and TF32 in Ampere, fp8 in
# Ada and Hopper), and put them in GeForce cards too. `data/reference/devices.yml` holds the
# published dense peaks (no structured sparsity) of the GPUs this book talks about, each
# figure with its source (cited at the end of this section). The GPUs:

# %% tags=["hide-input"]
order = ["v100-sxm2", "rtx3070-laptop", "rtx3070-desktop", "a100-sxm-80gb", "h100-sxm",
         "h200-sxm"]
table = [devices[k] for k in order] + [d for k, d in devices.items() if k not in order]
rows = [[d.short_name, d.architecture, d.segment, d.tensor_cores, d.mem_bandwidth_gbs]
        for d in table]
md_table(rows, ["GPU", "architecture", "segment", "tensor cores", "memory GB/s"],
         [None] * 4 + [".4g"])

# %% [markdown]
# Their peaks in TFLOP/s ("acc." is the accumulator's format; a dash is a mode the GPU
# lacks), drawn in {numref}`fig-ch2-peaks` below:

# %% tags=["hide-input"]
fields = ["fp32_tflops", "tf32_tflops", "fp16_tflops_fp32acc", "fp16_tflops_fp16acc",
          "bf16_tflops", "fp8_tflops"]
rows = [[d.short_name] + [getattr(d, f) for f in fields] for d in table]
md_table(rows, ["GPU", "fp32", "tf32", "fp16, fp32 acc.", "fp16, fp16 acc.", "bf16",
                "fp8"], [None] + [".4g"] * 6)

# %% [markdown]
# Ratios computed from those peaks say more than the raw numbers. "Tensor / fp32" is how
# many times the fp32 CUDA-core peak a matmul can reach in fp16 (with fp32 accumulation, as
# PyTorch does it); "fp16 acc. / fp32 acc." shows the GeForce split; the
# {term}`ridge point` is where the roofline bends (peak FLOP/s over bytes/s: work with fewer
# FLOPs per byte is {term}`memory-bound`):

# %% tags=["hide-input"]
rows = [[d.short_name, d.tensor_over_fp32, d.fp16acc_over_fp32acc,
         d.ridge_point("fp16"), d.ridge_point("fp32")] for d in table]
md_table(rows, ["GPU", "tensor / fp32", "fp16 acc. / fp32 acc.", "ridge fp16 (FLOP/B)",
                "ridge fp32 (FLOP/B)"], [None, ".3g", ".2g", ".0f", ".1f"])

# %% [markdown]
# Fused multiply-adds per clock per tensor core, the fp16 peak divided by the tensor cores,
# the clock and 2 FLOPs, with each accumulator:

# %% tags=["hide-input"]
rows = [[d.short_name, d.fma_per_clock_per_tensor_core("fp16"),
         d.fma_per_clock_per_tensor_core("fp32")] for d in table]
md_table(rows, ["GPU", "FMA/clock/TC, fp16 acc.", "FMA/clock/TC, fp32 acc."],
         [None, ".0f", ".0f"])

# %%
v100, a100, h100, h200 = (devices[k] for k in order[:1] + order[3:])
desk, lap = devices["rtx3070-desktop"], devices["rtx3070-laptop"]
fma = {f"fma_{k}": devices[k].fma_per_clock_per_tensor_core("fp32")
       for k in ("v100-sxm2", "a100-sxm-80gb", "h100-sxm")}
glue_all(**{k.replace("-", "_"): v for k, v in fma.items()},
         fma_desk32=desk.fma_per_clock_per_tensor_core("fp32"),
         fma_desk16=desk.fma_per_clock_per_tensor_core("fp16"),
         desk_ratio=desk.tensor_over_fp32,
         desk_tf32_ratio=desk.tf32_tflops / desk.fp32_tflops,
         a100_ratio=a100.tensor_over_fp32, h100_ratio=h100.tensor_over_fp32,
         v100_ratio=v100.tensor_over_fp32, desk_tc=desk.tensor_cores, desk_sms=desk.sms,
         lap_tc=lap.tensor_cores, lap_sms=lap.sms, desk_split=desk.fp16acc_over_fp32acc,
         bw_ratio=h200.mem_bandwidth_gbs / h100.mem_bandwidth_gbs,
         ridge_h100=h100.ridge_point("fp16"), ridge_h200=h200.ridge_point("fp16"))

# %% [markdown]
# - **64 FMA per clock** (the blog post's figure) holds for Volta, where a V100 tensor core
#   does {glue:text}`fma_v100_sxm2:.0f` with fp16 or fp32 accumulation, and for the post's
#   own card in AMP's mode: a GeForce RTX 3070 tensor core does {glue:text}`fma_desk32:.0f`
#   with fp32 accumulation (fp16 multiply, fp32 accumulate, what autocast's matmuls ask
#   for) and {glue:text}`fma_desk16:.0f` with fp16 accumulation. An A100 tensor core does
#   {glue:text}`fma_a100_sxm_80gb:.0f`, an H100 one {glue:text}`fma_h100_sxm:.0f`.
# - **GeForce halves fp32 accumulation.** On the RTX 3070, fp16 with fp16 accumulation runs
#   at {glue:text}`desk_split:.2g` times the fp32-accumulate rate; the data-centre parts run
#   both at the same rate. So AMP on an RTX 3070 can at most make a matmul
#   {glue:text}`desk_ratio:.2g`x faster than the fp32 peak, against
#   {glue:text}`v100_ratio:.3g`x on a V100, {glue:text}`a100_ratio:.3g`x on an A100 and
#   {glue:text}`h100_ratio:.3g`x on an H100. TF32 on the 3070 runs at
#   {glue:text}`desk_tf32_ratio:.2g`x the fp32 peak: on paper it gains nothing there.
# - **184 tensor cores** (the post) is the desktop RTX 3070 ({glue:text}`desk_tc:d`:
#   {glue:text}`desk_sms:d` SMs x 4); the laptop part has {glue:text}`lap_tc:d`
#   ({glue:text}`lap_sms:d` SMs), at a lower clock.
# - **H200 vs H100**: the same compute peaks, {glue:text}`bw_ratio:.2f`x the bandwidth, so
#   its fp16 ridge point drops from {glue:text}`ridge_h100:.0f` to
#   {glue:text}`ridge_h200:.0f` FLOP/byte: more work becomes compute-bound.

# %% mystnb={"figure": {"caption": "Published dense peaks by mode (log scale) from data/reference/devices.yml. Missing bars are modes the GPU lacks (no bf16/TF32 before Ampere, no fp8 before Ada/Hopper).", "name": "fig-ch2-peaks"}} tags=["hide-input"]
labels = ["fp32", "tf32", "fp16, fp32 acc.", "fp16, fp16 acc.", "bf16", "fp8"]
fig, ax = plt.subplots(figsize=(9, 4))
width = 0.8 / len(labels)
for i, (label, field) in enumerate(zip(labels, fields)):
    xs = [j + (i - (len(labels) - 1) / 2) * width for j in range(len(table))]
    ys = [getattr(d, field) or np.nan for d in table]
    ax.bar(xs, ys, width, label=label, **bar_style(i))
ax.set_xticks(range(len(table)), [d.short_name for d in table], fontsize=8)
ax.set(yscale="log", ylabel="peak TFLOP/s (dense)", ylim=(5, 8000))
ax.legend(ncols=3, fontsize=8, loc="upper left")
plt.show()

# %% [markdown]
# Sources of the peaks: V100 {cite:p}`volta-whitepaper,v100-datasheet`; RTX 3070
# {cite:p}`ga102-whitepaper`; RTX 3070 Laptop
# {cite:p}`ga102-whitepaper,wccftech-rtx30-mobile,tpu-db-rtx3070-mobile`; A100
# {cite:p}`a100-datasheet,a100-whitepaper`; H100 {cite:p}`hopper-whitepaper,h100-datasheet`;
# H200 {cite:p}`h200-page,hopper-whitepaper`; RTX 3090 {cite:p}`ga102-whitepaper`; RTX 4090
# {cite:p}`ada-whitepaper`; A10 {cite:p}`a10-datasheet`; L4 {cite:p}`l4-datasheet`; L40S
# {cite:p}`l40s-datasheet`; RTX 6000 Ada {cite:p}`rtx6000-ada-datasheet`; A100 40GB
# {cite:p}`a100-40gb-datasheet,a100-whitepaper`; H100 PCIe
# {cite:p}`h100-datasheet,hopper-whitepaper`. The RTX 3070 Laptop GPU's peaks are not printed
# by NVIDIA: the table derives them from the desktop GA104's per-SM rates at the laptop's SM
# count and top boost clock (the `derived` entries of the YAML file say how), so real
# laptops, which boost lower, reach less.
#
# The post's other tensor-core claims, checked against the same table and the facts kept
# with their sources in `data/reference/seed_post.yml` (the P100 {cite:p}`pascal-whitepaper`
# and Turing {cite:p}`turing-whitepaper` whitepapers; the rest from the peak table). The
# post's "2-8x" is the figure of {cite:t}`micikevicius2018` for the GPUs of its day, half
# precision's math throughput over single precision's: its ends match the P100, which has no
# tensor cores and runs fp16 on its CUDA cores at twice the fp32 rate, and the V100's tensor
# cores ({glue:text}`v100_ratio:.3g`x). The post's own card reaches
# {glue:text}`desk_ratio:.2g`x in AMP's mode, the low end, for a different reason: GeForce
# halves the fp32-accumulate rate.

# %% tags=["hide-input"]
claims = ch2.tensor_core_claims(load_reference("seed_post"), devices)
md_table([r[:2] for r in claims], ["the post says", "what is true"])

# %% [markdown]
# ## Matmul speed against size
#
# Square matmuls in every dtype this device runs, sizes going up, the dtypes measured one
# after the other at each size. A dtype stops growing once its next call is predicted to take
# longer than `max_call_s`, so a slow dtype cannot stall the run.

# %%
mm_rows, mm_skipped = matmul_sweep(matmul_sizes, dtypes, device,
                                   max_call_s=max_call_s, rounds=rounds,
                                   min_time=min_time)
for s in mm_skipped:
    print(f"skipped {s['dtype']} n={s['n']}: {s['reason']}")

# %% [markdown]
# The same sweep was run on an H200 and committed with the book under `data/results/`
# (read here through `ampbook.results`, like every committed result). Each GPU sweep found
# there gets a panel of {numref}`fig-ch2-matmul-size` beside this machine's, and a line
# saying where and how it was measured:

# %%
sweeps = results.load_results_dir(results_dir or None).matmul_sweeps
records = [sw.record for sw in sweeps]
md("\n\n".join(ch2.sweep_provenance(r) for r in records)
   or ch2.records_verdict(records, results_dir or RESULTS_DIR))

# %% mystnb={"figure": {"caption": "Matmul throughput against size, one line per dtype (median of the samples; the bars span the 10th to 90th percentile): on the device this chapter ran on (first panel) and on each GPU whose sweep is committed under data/results (a panel each, named in its title). Mind the different y scales.", "name": "fig-ch2-matmul-size"}} tags=["hide-input"]
panels = [(f"this machine ({device.type})", mm_rows)]
panels += [(ch2.record_device(r), r["matmul"]) for r in records]
fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.8),
                         squeeze=False)
dtype_order = ["fp32", "tf32", "fp16", "bf16", "fp8_e4m3"]  # one look per dtype
for ax, (title, rows) in zip(axes[0], panels):
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        rs = [r for r in rows if r["dtype"] == dtype]
        med = np.array([r["tflops"] for r in rs])
        lo = np.array([r["flops"] / r["p90_s"] / 1e12 for r in rs])
        hi = np.array([r["flops"] / r["p10_s"] / 1e12 for r in rs])
        k = dtype_order.index(dtype) if dtype in dtype_order else len(dtype_order)
        ax.errorbar([r["n"] for r in rs], med, yerr=[med - lo, hi - med], label=dtype,
                    capsize=2, markersize=4, **series_style(k))
    ax.set_xscale("log", base=2)
    ax.set(yscale="log", xlabel="n (n x n x n matmul)", title=title)
    ax.legend(fontsize=8)
axes[0][0].set_ylabel("TFLOP/s")
plt.show()

# %%
md("\n\n".join(ch2.sweep_summary(r, devices) for r in records)
   or "No GPU sweep to compare with.")

# %% [markdown]
# Read the GPU panel with the line above it: where the TF32, 16-bit and fp8 lines sit far
# above fp32 at the large sizes, tensor cores do the work, and the ratio to fp32 there is
# what autocast gains on a large matmul of that GPU; how far below its published peak each
# dtype stays (clocks under load, kernel overheads) is the share printed. At small sizes
# every dtype falls short, because a small matmul cannot fill every SM or hide the launch
# and tile-edge overheads. This machine's own best rates:

# %% tags=["hide-input"]
best = ch2.best_per_dtype(mm_rows)
rows = [[d, r["n"], r["tflops"] * 1e3, r["tflops"] / best["fp32"]["tflops"]]
        for d, r in best.items()]
headers = ["dtype", "best at n", "GFLOP/s", "speed vs best fp32 (x)"]
if here is not None:  # a GPU of the peak table: against its published peaks
    for row, (d, r) in zip(rows, best.items()):
        peak = here.peak_tflops(d.split("_")[0])
        row += [peak, r["tflops"] / peak if peak else None]
    headers += ["published peak TFLOP/s", "fraction of peak"]
md_table(rows, headers, [None, None, ".4g", ".3g", ".4g", ".1%"][: len(headers)])

# %%
n_cmp, speed = ch2.speeds_at_common_size(mm_rows)
md(ch2.speed_verdict(speed, n_cmp, device.type))

# %% [markdown]
# The line above compares every dtype with fp32 at the largest size all of them reached. On
# a GPU in the peak table, fp16 and bf16 should beat fp32 by up to the tensor/fp32 ratio of
# its row. On a CPU it depends on the CPU and on its kernels, which is why the next section
# measures it rather than reading it off the CPU's instruction flags.
#
# ### Where mixed precision pays on this machine
#
# Autocast speeds up a training step only through the ops it runs in 16 bits, above all the
# matmuls and the convolutions. One 3x3 convolution of `conv_shape` (batch, channels,
# height, width), timed per dtype beside the matmuls above: its forward, and a training
# pass, the forward and the backward for the input's and the weight's gradients, which is
# what a training step runs for each such layer. Where some dtype would take longer than
# `max_call_s` a call at that shape (a CPU's fallback kernels can be hundreds of times
# slower than fp32's), every dtype is timed at a smaller one, and the line under the
# cell says which and why.

# %%
conv_dtypes = [d for d in ("fp32", "fp16", "bf16") if d in dtypes]
conv_rows, conv_skipped, conv_fitted = conv_sweep(
    conv_shape, conv_dtypes, device, max_call_s=max_call_s, rounds=rounds,
    min_time=min_time)
if conv_fitted:
    print(f"The convolution was {conv_fitted}.")
for s in conv_skipped:
    print(f"skipped the {s['dtype']} training pass: {s['reason']}")
n_cmp, op_ratios = ch2.op_speeds(mm_rows, conv_rows)

# %% tags=["hide-input"]
f32 = {r["kind"]: r["median_s"] for r in conv_rows if r["dtype"] == "fp32"}
f32["matmul"] = next(r["median_s"] for r in mm_rows
                     if r["dtype"] == "fp32" and r["n"] == n_cmp)
ops = [("matmul", f"matmul, n = {n_cmp}"), ("conv", "conv forward"),
       ("conv_train", "conv forward + backward")]
low = [d for d in ("fp16", "bf16") if d in op_ratios]
rows = [[label, f32[k] * 1e3] + [op_ratios[d].get(k) for d in low] for k, label in ops]
md_table(rows, ["op", "fp32 ms"] + [f"{d} speedup (x)" for d in low],
         [None, ".3g"] + [".3g"] * len(low))

# %%
md(ch2.amp_op_verdict(op_ratios, device.type, load))

# %% [markdown]
# A speedup above 1 means the 16-bit dtype ran faster than fp32. Where it does, as tensor
# cores make it on a GPU and as CPUs with bf16 matrix units can, autocast can pay on that
# machine, in layers made of these ops; where it does not, because the 16-bit kernels
# convert their inputs to fp32 inside slower code, autocast costs time there (CPU autocast
# uses bf16 unless told otherwise). Which case this machine is, the line above says,
# measured. A faster op is not yet a faster step: a step also runs the casts autocast
# inserts and the ops it keeps in fp32, and every layer's backward. {doc}`03_amp_training`
# times whole training steps in each precision.

# %%
glue_all(n_cmp=n_cmp, **{f"speed_{d}_{k}": op_ratios.get(d, {}).get(k, np.nan)
                         for d in ("fp16", "bf16") for k in ("matmul", "conv_train")})

# %% [markdown]
# ## Shapes: multiples of 8
#
# Tensor cores work on tiles, and their fastest kernels want fp16 matrix dimensions that are
# multiples of 8 (16 bytes), so that every row starts aligned. Since cuBLAS 11 other sizes
# can use tensor cores too, but less efficiently ("Tensor Core Requirements" in
# {cite:t}`nvidia-matmul-guide`).
# CPU kernels have their own vector widths and blocking. Below, each size in `shape_sizes`
# against the sizes one below and one above, measured side by side. A difference counts only
# when it is larger than the run-to-run spread: when the per-FLOP times' 10th-90th
# percentile ranges of the two sizes do not overlap (`outside_spread`, shown from its single
# source):

# %%
print(inspect.getsource(outside_spread))

# %%
shape_dtypes = [d for d in dtypes if not d.startswith("fp8")]
shape_rows, shape_skipped = shape_cliff(shape_sizes, shape_dtypes, device,
                                        max_call_s=max_call_s, known=mm_rows,
                                        rounds=rounds, min_time=min_time)
pens = shape_penalties(shape_rows)
for s in shape_skipped:
    print(f"skipped {s['dtype']} near n={s['n']}: {s['reason']}")

# %% tags=["hide-input"]
rows = [[p["dtype"], p["base"], p["n"], p["tflops"] * 1e3, p["slowdown"],
         "yes" if p["outside_spread"] else "no"] for p in pens]
md_table(rows, ["dtype", "multiple of 8", "one off", "GFLOP/s one off",
                "slowdown (x)", "beyond the spread"],
         [None, None, None, ".4g", ".3f", None])

# %% mystnb={"figure": {"caption": "Throughput at sizes one below, at, and one above a multiple of 8, relative to the multiple of 8 (1.0), per dtype and size. Bars below 1 are a penalty for the odd size.", "name": "fig-ch2-shapes"}} tags=["hide-input"]
fig, ax = plt.subplots()
groups = sorted({(r["dtype"], r["base"]) for r in shape_rows})
offs = sorted({r["n"] - r["base"] for r in shape_rows})
tf = {(r["dtype"], r["base"], r["n"] - r["base"]): r["tflops"] for r in shape_rows}
width = 0.8 / max(len(offs), 1)
for i, off in enumerate(offs):
    xs = [j + (i - (len(offs) - 1) / 2) * width for j in range(len(groups))]
    ys = [tf[(d, b, off)] / tf[(d, b, 0)] for d, b in groups]
    label = f"n = multiple of 8 {off:+d}" if off else "n = multiple of 8"
    ax.bar(xs, ys, width, label=label, **bar_style(i))
ax.axhline(1.0, color="black", linewidth=0.8)
ax.set_xticks(range(len(groups)), [f"{d}\n{b}" for d, b in groups])
ax.set_ylabel("throughput relative to the multiple of 8")
ax.legend(fontsize=8, ncols=3, loc="lower center", bbox_to_anchor=(0.5, 1.0))
plt.show()

# %%
md(ch2.shape_verdict(pens))

# %% [markdown]
# The verdict above ({numref}`fig-ch2-shapes` draws the same ratios) names the largest
# difference and whether it stands out of the noise. A difference *within* the spread, in
# either direction, says nothing: an odd size that "wins" by less than the spread (as 513
# against 512 sometimes does for bf16 on a CPU) is noise, and a second run may well
# reverse it. A difference *beyond* the spread is real for this run: on a GPU an odd size
# typically loses the fastest tensor-core kernels (pad layer widths to multiples of 8, 16
# for fp8); on a CPU a difference can come from the kernel's blocking (how the matrix
# splits into the vector and cache tiles of the kernel), which need not favour multiples
# of 8, and it is worth re-running with `rounds = 3` before believing it. The committed
# GPU sweeps' penalties are shown at the end of the chapter.
#
# ## Memory-bound and math-bound: the roofline
#
# An elementwise add, $z = x + y$, does one FLOP per element and moves three elements (two
# reads, one write): its arithmetic intensity is $1 / (3 \times \text{bytes per element})$
# FLOP/byte, far below any ridge point above, so its speed is set by memory bandwidth, and a
# 16-bit format halves its bytes. A square matmul does $2n^3$ FLOPs on $3n^2$ elements; its
# {term}`arithmetic intensity` grows with $n$ and crosses the ridge point.
#
# The add at several sizes; GB/s counts the three tensors. Whether a call reads its inputs
# from memory or from the {term}`last-level cache` is not a matter of size alone: the timer
# rotates through several input sets so that each set is evicted before it is used again,
# where it can (64 sets and 1 GiB at most). The column "inputs from" says, per size, whether
# the sets it rotated through covered at least twice this machine's last-level cache
# ("memory") or not ("cache"):

# %%
ew_dtypes = [d for d in ("fp32", "fp16", "bf16") if d in dtypes]
ew_rows = elementwise_sweep(elementwise_numels, ew_dtypes, device, rounds=rounds,
                            min_time=min_time)
cache, cache_where = last_level_cache(device)
ew = {(r["dtype"], r["numel"]): r for r in ew_rows}
big = max(elementwise_numels)
glue_all(cache_mib=cache / MIB, cache_where=cache_where)

# %% tags=["hide-input"]
rows = []
for n in sorted(set(elementwise_numels)):
    where = {d: read_from(ew[(d, n)], cache) for d in ew_dtypes}
    odd = [f"{d}: {w}" for d, w in where.items() if w != where["fp32"]]
    read = where["fp32"] + (f" ({', '.join(odd)})" if odd else "")
    rows.append([n, 3 * n * 4 / MIB, read, ew[("fp32", n)]["gbps"]]
                + [ew[(d, n)]["median_s"] / ew[("fp32", n)]["median_s"]
                   for d in ew_dtypes[1:]])
md_table(rows, ["elements", "fp32 MiB per call", "inputs from", "fp32 GB/s"]
         + [f"{d} / fp32 time" for d in ew_dtypes[1:]],
         [None, ".3g", None, ".3g"] + [".2f"] * len(ew_dtypes[1:]))

# %%
glue_all(ew_ratio=ew[("fp16", big)]["median_s"] / ew[("fp32", big)]["median_s"],
         ew_big=big, ew_gbps16=ew[("fp16", big)]["gbps"],
         ew_gbps32=ew[("fp32", big)]["gbps"])
md(ch2.elementwise_verdict(ew_rows, cache))

# %% [markdown]
# The last-level cache here is {glue:text}`cache_mib:.3g` MiB
# ({glue:text}`cache_where`). At {glue:text}`ew_big:d` elements fp16 took
# {glue:text}`ew_ratio:.2f`x the fp32 time, moving {glue:text}`ew_gbps16:.3g` GB/s against
# fp32's {glue:text}`ew_gbps32:.3g`. If an add were purely bandwidth-bound, half the bytes
# would take half the time, a ratio near 0.5, and the two dtypes would move the same GB/s.
# The verdict line says where its inputs came from and how close this run came. A ratio well
# above 0.5 means something other than memory bandwidth sets the pace: with the
# working set in cache, the cache is fast enough that the kernel's own instruction rate
# matters; out of cache, a 16-bit kernel that converts every element to fp32 and back (as
# CPU kernels without native 16-bit arithmetic do) can be limited by that conversion instead
# of by memory.
#
# Both kinds of work on one roofline figure. The ceilings are the device's published peaks
# when the GPU is in the table; otherwise (a CPU, an unlisted GPU) they are the best rates
# measured in this run, and a measured ceiling is only a floor on the true one.

# %%
ceilings = roofline_ceilings(here, best, ew_rows, cache)
# the adds do not use tensor cores: their compute roof is fp32's
points = [(f"add {d}", ew[(d, big)], "fp32") for d in ew_dtypes]
points += [(f"matmul {d} n={r['n']}", r, d) for d, r in best.items()]
md(ch2.ceilings_text(ceilings))

# %% mystnb={"figure": {"caption": "Roofline of the device this chapter ran on: attainable FLOP/s against arithmetic intensity, one compute ceiling per dtype and one bandwidth ceiling (published peaks for a GPU in the table, else the best measured rates), with the measured elementwise adds and best matmuls as points.", "name": "fig-ch2-roofline"}} tags=["hide-input"]
fig, ax = plt.subplots(figsize=(7.5, 4.5))
xs = np.logspace(-2.5, 4, 200)
for i, (d, roof) in enumerate(ceilings["compute"].items()):
    ys = [attainable_tflops(x, roof, ceilings["bandwidth"]) for x in xs]
    ax.plot(xs, ys, label=f"ceiling {d}", **dict(series_style(i), marker=None))
for i, (label, r, _) in enumerate(points):
    st = {k: v for k, v in series_style(i + 2).items() if k != "linestyle"}
    ax.plot(r["flops"] / r["bytes_moved"], r["tflops"], linestyle="none", markersize=8,
            label=label, **st)
ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
       ylabel="TFLOP/s")
ax.legend(fontsize=7, ncols=2)
plt.show()

# %% [markdown]
# {numref}`fig-ch2-roofline` after {cite:t}`williams2009roofline`. How far each point is from
# the roof right above it, and which ceiling that roof is (the
# adds are measured against the fp32 compute ceiling, since elementwise ops do not use
# tensor cores):

# %% tags=["hide-input"]
roof = ch2.roofline_rows(points, ceilings)
keys = ["label", "intensity", "gflops", "roof_gflops", "fraction", "bound"]
md_table([[r[k] for k in keys] for r in roof],
         ["measurement", "FLOP/byte", "GFLOP/s", "roof GFLOP/s", "fraction of roof",
          "bound by"], [None, ".3g", ".4g", ".4g", ".1%", None])

# %%
md(ch2.roofline_verdict(roof, ceilings))

# %% [markdown]
# Left of the fp32 ridge point a faster math unit would not help the adds; fewer bytes
# would. Right of it the matmuls are bound by compute. With measured ceilings (a CPU or an
# unlisted GPU) the best matmul of each dtype defines its own ceiling, so its fraction is
# 100% by construction: the table then shows where each dtype stands against the best this
# machine did, not against a datasheet. With published ceilings the fractions show how much
# of the datasheet a real kernel reaches; the rest is lost to clocks below the boost figure
# under load, kernel overheads, and sizes too small to fill the GPU.
#
# ## GPU results committed with the book
#
# The GPU sweeps shown in {numref}`fig-ch2-matmul-size` are committed as JSON under
# `data/results/` (`tensor_cores_<gpu>.json`, written by `python -m ampbook.bench matmul
# --save ...` or by this notebook with `save_results`; the format is documented in
# `ampbook/chapters/ch2/bench_matmul.py`). Each one's best matmul per dtype against its GPU's published
# peak:

# %%
md(ch2.records_verdict(records, results_dir or RESULTS_DIR))

# %% tags=["hide-input"]
rows = ch2.records_table(records, devices)
one = int(len({r[0] for r in rows}) <= 1)  # one GPU: named above, not in every row
md_table([r[one:] for r in rows],
         ["GPU", "dtype", "best at n", "TFLOP/s", "published peak",
          "fraction of peak"][one:], [None, None, None, ".4g", ".4g", ".1%"][one:])

# %% [markdown]
# And the sizes one off a multiple of 8 on each GPU, summed up in one line each (the full
# table is behind the toggle below it):

# %%
md("\n\n".join(ch2.record_device(r) + ": "
                + ch2.shape_verdict(shape_penalties(r["shapes"])) for r in records)
   or "No GPU sweep to show.")

# %% tags=["hide-input", "hide-output"]
rows = [[ch2.record_device(r), p["dtype"], p["base"], p["n"], p["slowdown"],
         "yes" if p["outside_spread"] else "no"]
        for r in records for p in shape_penalties(r["shapes"])]
one = int(len({r[0] for r in rows}) <= 1)
md_table([r[one:] for r in rows], ["GPU", "dtype", "multiple of 8", "one off",
                                   "slowdown (x)", "beyond the spread"][one:],
         ([None] * 4 + [".3f", None])[one:])

# %%
if save_results:
    record = make_record(device, mm_rows, shape_rows, ew_rows,
                         mm_skipped + shape_skipped)
    print(f"saved {save_record(record, save_results)}")

# %% [markdown]
# ## Summary
#
# - Timing needs warm-up, many samples and a clock that waits for the device; here the
#   first call took {glue:text}`cold_ratio:.2g`x the warm median, and only the spread of many
#   samples says how far to trust a median.
# - A tensor core is a small matrix multiply-accumulate; its fp32 accumulator is what keeps
#   a long dot product accurate ({glue:text}`err32:.1e` against {glue:text}`err16:.1e`
#   relative error with fp16). PyTorch's CUDA matmuls accumulate in fp32 but by default may
#   reduce split-K partial sums in 16 bits (`allow_fp16_reduced_precision_reduction`).
# - From the peak table: fp16 tensor math with fp32 accumulation is
#   {glue:text}`desk_ratio:.2g`x the fp32 peak on an RTX 3070 (GeForce halves fp32
#   accumulation) but {glue:text}`a100_ratio:.3g`x on an A100 and
#   {glue:text}`h100_ratio:.3g`x on an H100: how much AMP can speed up a matmul depends
#   first on the card. The post's "64 FMA per clock" is right for the V100 and for the
#   3070 in AMP's mode; its "2-8x" is {cite:t}`micikevicius2018`'s span from the P100 to
#   the V100, and the post's own card sits at its low end.
# - The committed H200 sweep ({numref}`fig-ch2-matmul-size`) shows what tensor cores give
#   when the matmul is large; its summary line above gives each dtype's share of the
#   published peak.
# - On this machine, at n = {glue:text}`n_cmp:d`, fp16 matmuls ran at
#   {glue:text}`speed_fp16_matmul:.3g`x and bf16 at {glue:text}`speed_bf16_matmul:.3g`x the
#   fp32 speed, and the convolution's training pass at {glue:text}`speed_fp16_conv_train:.3g`x
#   and {glue:text}`speed_bf16_conv_train:.3g`x. These are single operators: where they
#   are below 1, mixed precision loses on them; where they are above 1, it can gain, but
#   a whole step also pays for the casts autocast inserts and the operators it keeps in
#   fp32, so a step can lose where these gain. The verdict of "Where mixed precision
#   pays on this machine" says which case the operators are; {doc}`03_amp_training` and
#   {doc}`07_making_amp_pay` time whole steps.
# - An elementwise add moves half the bytes in fp16; here it took {glue:text}`ew_ratio:.2f`x
#   the fp32 time at the largest size. Speed from mixed precision comes from tensor cores
#   (or a CPU's 16-bit matrix units) for the big matmuls and from halved bytes for
#   memory-bound work, where the hardware handles 16-bit data natively.
#
# ## Exercises
#
# 1. Time `torch.matmul` at `demo_size` with `benchmark(..., warmup=0, repeats=1,
#    number=1)` ten times in a loop and plot the ten values. Which of them would you
#    publish, and why is the median of many samples a better choice?
#
#    ```{dropdown} Hint
#    The first value carries the start-up costs; the rest scatter with whatever else the
#    machine does. A median of many samples ignores the outliers on both sides, and its
#    percentiles say how wide the scatter is.
#    ```
# 2. On a GPU, time an fp16 matmul with `time.perf_counter()` around the call and no
#    `torch.cuda.synchronize()`. How many TFLOP/s does it "reach"? Compare with the
#    device's peak from `ampbook.core.devices`.
#
#    ```{dropdown} Hint
#    The call returns once the kernel is queued, so the clock measures the launch, a few
#    microseconds, and the "rate" can exceed the peak many times over.
#    ```
# 3. From the peak table, compute the matmul size $n$ at which an fp16 matmul crosses the
#    ridge point of an RTX 3070 and of an H200 (intensity $2n^3 / (3 n^2 \cdot 2)$
#    FLOP/byte). Which layers of a small segmentation network are below it?
#
#    ```{dropdown} Hint
#    The intensity simplifies to $n/3$ FLOP/byte; set it equal to the ridge points of the
#    ratio table and solve for $n$.
#    ```
# 4. Rerun the shape section with `shape_sizes = [1000, 1024]` and `rounds = 3` on a GPU. Is
#    the cliff at "multiple of 8" or at "multiple of 64"? Explain with tile sizes.
#
#    ```{dropdown} Hint
#    1000 is a multiple of 8 but not of 64. Compare its penalty with the H200's at 4095 and
#    4097 (not multiples of 8) in the table at the end of the chapter.
#    ```
# 5. With `device="cuda"`, compare `tf32` with `fp32` in the size sweep, then set
#    `allow_fp16_reduced_precision_reduction = False` and time fp16 at a long inner
#    dimension ($k \gg n$). What changes, and is the table's tf32/fp32 ratio for your GPU
#    what you measured?
#
#    ```{dropdown} Hint
#    `time_matmul(n, m, k, ...)` takes the three sizes apart; a long $k$ with small $n$ and
#    $m$ leaves few output tiles, which is where cuBLAS splits $k$.
#    ```
