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
# # Loss scaling, and what autocast does inside ERFNet
#
# The RTX 3070 blog post explains two ideas in prose: gradients too small for fp16 are rescued
# by multiplying the loss before the backward pass, and {term}`autocast` picks a precision for
# each layer while the weights keep a full-precision master copy. This chapter measures both on the
# book's own network, ERFNet: the gradients of real training steps against fp16's range, short
# training runs with and without loss scaling, the dtype every layer actually runs in, what
# happens to the weights, and where the memory goes.
#
# **What you will learn**
#
# - which of ERFNet's gradients an AMP step really holds in fp16, where they fall on fp16's
#   number line, and how many are lost (flushed to zero) or overflow at loss scales 1, 8,
#   2¹⁰ and 2¹⁶;
# - how training behaves with fp16 gradients and no scaling, a fixed scale, and `GradScaler`'s
#   dynamic scale, and what `GradScaler`'s defaults mean;
# - which ops autocast runs in fp16/bf16 and which in fp32 on CPU and on CUDA, from three
#   sources: PyTorch's documentation, its dispatcher, and running the ops;
# - that the weights stay fp32 under autocast (the casts are per region and cached), unlike a
#   model converted with `.half()`;
# - when autocast saves memory in the tensors kept for the backward pass and when it costs
#   memory, and what that predicts for a whole training step.
#
# **What you need**: the `ampbook` package and PyTorch. Without Cityscapes the chapter uses the
# synthetic Cityscapes of `ampbook.segmentation.synthetic`. A CPU runs every part. fp16 arithmetic is slow on
# many CPUs, so on a CPU the chapter times a real fp16 backward pass against an fp32 emulation
# of fp16 gradients and trains with the faster (it says which). A CUDA GPU runs real fp16
# autocast.

# %% tags=["parameters", "remove-cell"]
device = "auto"  # "auto", "cpu" or "cuda"
data_root = None  # a Cityscapes root; None: $CITYSCAPES_DATASET, else the synthetic set
height = 64  # training images' height and width (gradient statistics and runs)
width = 128
batch_size = 2
synthetic_train = 8  # images in the synthetic training set (used without Cityscapes)
grad_batches = 2  # batches whose gradients are recorded
num_steps = 8  # optimizer steps per training run
lr = 5e-4  # Adam, as ERFNet's training uses
fixed_scales = [8.0, 65536.0]  # the fixed loss scales to train with
growth_interval = 3  # GradScaler's growth interval in the runs (its default: 2000)
fp16_mode = "auto"  # "emulate", "autocast", "auto": real on CUDA, the faster on a CPU
trace_height = 32  # the input of the dtype traces and the timing of the fp16 modes
trace_width = 64
memory_sizes = [[32, 64], [64, 128], [128, 256]]  # (height, width), memory measurements
memory_batch_size = 2
results_dir = None  # GPU run records; None: data/results
seed = 0

# %% tags=["remove-input"]
from ampbook.core import params
from ampbook.core.env import print_environment

params.device("device", device)
for name in ("height", "width", "trace_height", "trace_width"):
    params.rule(name, globals()[name], lambda v: v % 8 == 0 and v > 0,
                "must be a positive multiple of 8", why="ERFNet downsamples by 8")
params.rule("trace_height", trace_height, trace_height <= height, "must be <= height")
params.rule("trace_width", trace_width, trace_width <= width, f"must be <= {width}")
for name in ("batch_size", "grad_batches", "num_steps", "growth_interval",
             "memory_batch_size"):
    params.integer(name, globals()[name], minimum=1)
params.integer("synthetic_train", synthetic_train, minimum=batch_size)
params.number("lr", lr, above=0)
params.choice("fp16_mode", fp16_mode, ["auto", "emulate", "autocast"])
params.floats("fixed_scales", fixed_scales, above=0)
params.seed("seed", seed)
params.folder("data_root", data_root, empty="$CITYSCAPES_DATASET or the synthetic set")
params.folder("results_dir", results_dir, empty="data/results")
params.rule("memory_sizes", memory_sizes, lambda v: len({h * w for h, w in v}) >= 2,
            "needs 2 sizes of different pixel counts", why="a line needs two")
odd = [hw for hw in memory_sizes if hw[0] % 8 or hw[1] % 8]
params.rule("memory_sizes", memory_sizes, not odd, "sizes must be multiples of 8",
            why="ERFNet downsamples by 8")
print_environment(device)

# %% tags=["hide-cell"]
import math

import matplotlib.pyplot as plt
import torch

from ampbook import results
from ampbook.chapters import ch3, ch4
from ampbook.chapters.ch4 import gradients as g4
from ampbook.chapters.ch4 import op_probes
from ampbook.core.devices import display_name, pick_device
from ampbook.core.page import (
    GIB,
    MIB,
    bar_style,
    glue_all,
    md,
    md_table,
    md_table_text,
    series_style,
    use_style,
)
from ampbook.core.paths import load_reference
from ampbook.measure import autocast_rules, memory, model_dtypes
from ampbook.numerics import gradstats as gs
from ampbook.numerics import loss_scaling as ls
from ampbook.segmentation.model import ERFNet

use_style()
device = pick_device(device)
claims = load_reference("seed_post")["claims"]

# %% [markdown]
# ## Gradients against fp16's range
#
# Every experiment of this chapter starts from the same weights (`torch.manual_seed(seed)`
# before building ERFNet) and sees the same batches, read once:

# %%
n_batches = max(grad_batches, num_steps)
batches, root = gs.training_batches(data_root, height, width, n_batches, batch_size,
                                    synthetic_train, seed)
print(f"data: {root.name}; {len(batches)} batches of {tuple(batches[0][0].shape)}")

# %% [markdown]
# fp16 holds magnitudes from its smallest {term}`subnormal` number up to its largest value;
# between the smallest subnormal and the smallest normal number it keeps them with fewer
# significant bits ({doc}`01_floating_point`). Rounding to nearest decides the fate of
# anything outside: a magnitude at or below half the smallest subnormal becomes 0, one at or
# above the largest value plus half a step becomes infinity. The thresholds, computed from
# the format's bit layout in `ampbook.numerics.formats`:

# %% tags=["hide-input"]
limits = [("smallest subnormal", gs.FP16_MIN_SUBNORMAL),
          ("flushed to 0 at or below", gs.FLUSH_AT_OR_BELOW),
          ("smallest normal", gs.FP16_MIN_NORMAL), ("largest value", gs.FP16_MAX),
          ("overflows to inf at or above", gs.OVERFLOW_AT_OR_ABOVE)]
rows = [(name, v, math.log2(v)) for name, v in limits]
md_table(rows, ["fp16 limit", "value", "log2"], [None, ".6g", ".3f"])

# %% [markdown]
# ### Which gradients are fp16 in an AMP step?
#
# Autograd gives each gradient the dtype of the tensor it belongs to. Under fp16 autocast a
# convolution's output is fp16, so the gradient flowing back into it is fp16 too; a tensor
# autocast leaves in fp32 gets an fp32 gradient. Which tensors are which, the trace of one
# forward under CUDA's fp16 autocast tells (on fake CUDA tensors when there is no GPU, see
# "What ran in which dtype" below):

# %%
torch.manual_seed(seed)
model = ERFNet().to(device).train()
x_trace = batches[0][0][:1, :, :trace_height, :trace_width].to(device)
low_layers = model_dtypes.low_precision_layers(model, x_trace)
low_calls = model_dtypes.low_precision_calls(model, x_trace)
n_leaves = len([m for m in model.modules() if not list(m.children())])
glue_all(low_layers=len(low_layers), leaves=n_leaves, calls=len(low_calls),
         low_calls=sum(low for _, low in low_calls))

# %% [markdown]
# {glue:text}`low_layers` of ERFNet's {glue:text}`leaves` layers give an fp16 output, and
# {glue:text}`low_calls` of the {glue:text}`calls` tensor-producing calls of its forward. The
# rest are fp32: in each downsampler the max-pool, the concatenation, the batch norm and the
# ReLU, and in the encoder the residual sums and the ReLUs after them (the encoder's
# residual stream, shown below). So
# this chapter counts as fp16 only the gradients of the fp16 tensors. The gradients of the
# fp32 ones are kept apart ("activation-fp32" below) and never rounded to fp16 in the
# emulation.
#
# We run ERFNet forward and backward in fp32 on a few training batches and record two kinds of
# gradients: the **activation gradients**, the gradient of the loss with respect to each
# layer's output (hooks on the outputs hand them over during the backward pass), and the
# **weight gradients**, each parameter's `.grad`. The weight gradients of the convolutions are
# computed in fp16 in an AMP step and then cast to fp32 (shown below). `GradientRecorder`
# counts, for each loss scale, how many nonzero values would be flushed, fall below 2⁻²⁴, be
# stored as subnormals, or overflow; {numref}`fig-ch4-grad-hist` draws where they fall.

# %%
scales = g4.SCALES
rec = g4.capture_gradients(model, batches[:grad_batches], scales=scales,
                           low_precision=low_layers)
for kind in rec.kinds():
    c = rec.combined(kind)
    n = c.counts[scales[0]]["total"]
    print(f"{kind} gradients: {c.tensors} tensors, {n:,} values, "
          f"largest |g| = {c.max_abs:.3g}")

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Histogram of log2|g| for the activation gradients an AMP step holds in fp16 and for the weight gradients (fp32 values, nonzero), with fp16's limits: values left of the dotted line are flushed to zero, between the dotted and dashed lines they are subnormal, right of the solid line they overflow. A loss scale of 2^k moves the whole histogram k bins to the right.", "name": "fig-ch4-grad-hist"}}
fig, axes = plt.subplots(2, 1, figsize=(7.0, 5.2), sharex=True)
marks = [(gs.FLUSH_AT_OR_BELOW, ":", "flushed to 0 below (2⁻²⁵)"),
         (gs.FP16_MIN_NORMAL, "--", "smallest normal (2⁻¹⁴)"),
         (gs.FP16_MAX, "-", "largest value (65504)")]
for ax, kind, i in zip(axes, ("activation", "weight"), (1, 2)):
    exps, counts = rec.histogram(kind)
    shares = [c / sum(counts) for c in counts]
    label = "fp16 activation gradients" if kind == "activation" else "weight gradients"
    ax.bar(exps, shares, width=1.0, align="edge", label=label, **bar_style(i))
    for v, style, text in marks:
        ax.axvline(math.log2(v), color="black", linestyle=style, label=text)
    ax.set_ylabel("fraction of values")
    ax.legend(loc="upper left", fontsize=8)
used = [e for k in ("activation", "weight") for e, c in zip(*rec.histogram(k)) if c]
axes[-1].set_xlim(min(used[0], -26) - 2, max(used[-1], 16) + 2)
axes[-1].set_xlabel("log2 |g| (bin k holds 2^k <= |g| < 2^(k+1))")
plt.show()

# %% [markdown]
# The table gives the fractions of the nonzero gradient values at each loss scale. "Below 2⁻²⁴"
# is the criterion of the mixed-precision paper; "flushed" counts only the values that really
# round to zero (those between 2⁻²⁵ and 2⁻²⁴ round up to 2⁻²⁴).

# %% tags=["hide-input"]
md_table(g4.fraction_rows(rec), g4.FRACTION_HEADERS, g4.FRACTION_FORMATS)

# %% [markdown]
# Which layers produce the small fp16 activation gradients? The fraction below 2⁻²⁴ at
# scale 1, per layer type:

# %% tags=["hide-input"]
by_type = rec.table("activation", outcome="below_min_subnormal")
md_table([r[:5] for r in by_type],
         ["layer type", "tensors", "values", "exactly 0", "below 2⁻²⁴ at scale 1"],
         [None, None, None, ".2%", ".4%"])

# %% [markdown]
# ### Compared with the paper
#
# The post quotes two figures from {cite:t}`micikevicius2018`;
# `data/reference/seed_post.yml` keeps them. Each belongs to its own argument in the paper:
#
# - **About 5%** is a share of *weight* gradients, in the paper's Mandarin speech-recognition
#   model (its Section 3.1 and Figure 2b): about 5% of their values had exponents below -24
#   and would be zero in fp16. The paper uses it to argue for an **fp32 master copy of the
#   weights**, not for loss scaling. Its like in ERFNet is the weight-gradient share, and the
#   fp32 weights it argues for are what native autocast keeps (section "Weights stay fp32").
# - **8** is the loss scale that was enough for the paper's SSD detector, many of whose
#   *activation* gradients were below fp16's range (Section 3.2 and Figure 3); the post reads
#   it as the scale to start from.

# %% tags=["hide-input"]
act, wgt = rec.fractions("activation"), rec.fractions("weight")
first, ps = g4.first_overflow_scale(rec), claims["paper_initial_loss_scale"]
below = "below_min_subnormal"
rows = [("weight gradients below 2⁻²⁴, scale 1", wgt[1.0][below],
         f"{claims['paper_lost_fraction']:.0%} (Mandarin speech model)"),
        ("fp16 activation gradients below 2⁻²⁴, scale 1", act[1.0][below], ""),
        (f"the same at scale {ps}", act[float(ps)][below], "enough for SSD"),
        ("first scale of the table that overflows",
         f"2^{math.log2(first):g}" if first else "none", "")]
glue_all(act_1=act[1.0][below], paper_scale=ps)
md_table(rows, ["", "ERFNet here", "the paper"], [None, ".3%", None])

# %% [markdown]
# ### Why the image size matters
#
# The loss is the mean of the per-pixel cross-entropies over the *labelled* pixels of the
# batch (pixels with the ignore label 255 do not count). The gradient of one pixel's
# cross-entropy with respect to its logits is the softmax minus the one-hot label, each entry
# at most 1 in magnitude; the mean divides it by the number N of labelled pixels. So every
# logit's gradient is at most 1/N, and the gradients of the layers below inherit that factor:
# the activation-gradient histogram should move one bin to the left each time N doubles. A
# weight gradient sums one such term per pixel, so it shrinks more slowly: not at all if the
# terms agree in sign, half a bin per doubling if their signs are random. We check with the
# same images cut to half the height and width:

# %%
small = [g4.crop_batch(batches, height // 16 * 8, width // 16 * 8, batch_size)]
torch.manual_seed(seed)
small_model = ERFNet().to(device).train()
rec_small = g4.capture_gradients(small_model, small, scales=(1.0,),
                                 low_precision=low_layers)
n_big, n_small = g4.labelled_pixels(batches[0][1]), g4.labelled_pixels(small[0][1])

# %%
doublings = math.log2(n_big / n_small)
shift = {k: g4.median_log2(rec, k) - g4.median_log2(rec_small, k)
         for k in ("activation", "weight")}
rate = -shift["activation"] / doublings  # bins to the left per doubling, measured
glue_all(n_small=n_small, n_big=n_big, doublings=doublings, shift_a=shift["activation"],
         shift_w=shift["weight"], half_doublings=doublings / 2, rate=rate,
         bound_log2=-math.log2(n_big),
         act_small=rec_small.fractions("activation")[1.0]["below_min_subnormal"])

# %% [markdown]
# From {glue:text}`n_small:,` to {glue:text}`n_big:,` labelled pixels per batch
# ({glue:text}`doublings:.1f` doublings) the median of log2|g| of the fp16 activation
# gradients moved by {glue:text}`shift_a:+.2f` bins, {glue:text}`rate:.2f` bins per
# doubling, where the bound's factor alone would move it one bin per doubling
# (-{glue:text}`doublings:.1f` in all); that of the weight gradients moved by
# {glue:text}`shift_w:+.2f` (between 0 and -{glue:text}`half_doublings:.1f`). The medians are
# read from the histograms, a fraction of a bin apart. Below 2⁻²⁴ at scale 1:
# {glue:text}`act_small:.3%` of the fp16 activation-gradient values at the small size,
# {glue:text}`act_1:.3%` at the larger. At this chapter's size the bound on a logit's
# gradient is 2^{glue:text}`bound_log2:.1f`.
#
# The training runner's default step is far larger. Moving this chapter's histogram to the
# left predicts what falls below 2⁻²⁴ there: an estimate from a shift alone, which assumes
# the same share of labelled pixels and a histogram that keeps its shape. It is made twice,
# at the bound's one bin per doubling and at the rate measured just now, and the two
# bracket what the shift predicts; no run of this chapter measures that size.

# %%
from ampbook.train import TrainConfig

cfg = TrainConfig()
n_full = cfg.batch_size * cfg.height * cfg.width * n_big / batches[0][1].numel()
more = math.log2(n_full / n_big)  # doublings from this chapter's size to the runner's
lost = {r: g4.shifted_below(rec, "activation", r * more, scales) for r in (1.0, rate)}
rows = [(f"2^{math.log2(s):g}", lost[1.0][s], lost[rate][s]) for s in scales]
glue_all(full_b=cfg.batch_size, full_h=cfg.height, full_w=cfg.width, n_full=n_full,
         more=more, move_rate=rate * more)
md_table(rows, ["loss scale", "below 2⁻²⁴, 1 bin per doubling",
                f"below 2⁻²⁴, {rate:.2f} bins per doubling (measured)"],
         [None, ".2%", ".2%"])

# %% [markdown]
# That is for the runner's step of {glue:text}`full_b` images of
# {glue:text}`full_w`x{glue:text}`full_h` (W x H), about {glue:text}`n_full:,.0f` labelled
# pixels, {glue:text}`more:.1f` doublings above this chapter's batch: the histogram moves
# {glue:text}`more:.1f` bins to the left at the bound's rate and {glue:text}`move_rate:.1f`
# at the measured one. Where the measured rate is below one bin per doubling the first
# column overstates the shift, where it is above it understates it; the second is the
# better guess either way, though a rate read from two sizes is itself an estimate; a run
# at the full size would settle it.
#
# ## Training with fp16 gradients: no scaling, a fixed scale, a dynamic scale
#
# `torch.amp.GradScaler` implements dynamic loss scaling: it multiplies the loss by its
# current scale, unscales the gradients before the optimizer step, skips the step and
# multiplies the scale by a backoff factor when any gradient is inf or NaN, and multiplies it
# by a growth factor after a run of clean steps. Its defaults, read from a fresh object:

# %%
defaults = ch4.grad_scaler_defaults(device.type)
glue_all(init_log2=math.log2(defaults["init_scale"]), **defaults)
md_table(list(defaults.items()), ["GradScaler setting", "default"], [None, "g"])

# %% [markdown]
# It starts at 2^{glue:text}`init_log2:g`, far above the paper's {glue:text}`paper_scale`, on
# purpose: starting too high costs a few skipped steps (each multiplies the scale by the
# backoff factor {glue:text}`backoff_factor:g`), starting too low loses gradients silently.
# After {glue:text}`growth_interval:g` steps without overflow it multiplies the scale by
# {glue:text}`growth_factor:g`. The runs below keep the initial scale, backoff and growth
# factor, and shorten the growth interval (the parameter `growth_interval`) so that growth
# can show within a short run.
#
# ### Emulated or real fp16?
#
# A real fp16 backward needs fast fp16 arithmetic. On a GPU that is the point of mixed
# precision; on many CPUs fp16 convolutions are far slower than fp32. The other way to get
# fp16's *range* is to emulate it: compute in fp32 and round to fp16, with
# `ampbook.numerics.formats.round_to`, exactly the gradients a real AMP step holds in fp16 (those of
# the fp16 tensors traced above, and the weight gradients of the convolutions). The rounding
# flushes to zero and overflows to inf as fp16 does; it does not reproduce fp16's rounding
# *inside* each kernel, only at the tensors between them. One forward and backward pass of
# each kind, on one image of the training size:

# %%
x1, y1 = g4.crop_batch(batches, height, width, 1)
secs = {mode: ls.step_seconds(model, x1, y1, fp16=mode, fp16_calls=low_calls)
        for mode in ls.FP16_MODES}
rows = [(m, secs[m], secs[m] / secs["off"]) for m in ("off", "emulate", "autocast")]
md_table(rows, ["backward kind", "seconds per step", "time vs fp32 (x)"],
         [None, ".3f", ".1f"])

# %% [markdown]
# With `fp16_mode = "auto"` the chapter trains with real fp16 autocast on a GPU and with the
# faster of the two on a CPU. Which one this run uses, and why:

# %%
fp16_used, why = ch4.choose_fp16_mode(fp16_mode, device.type, secs)
md("fp16 gradients: " + fp16_used + " (" + why + ").")

# %% [markdown]
# Every run starts from the same weights and sees the same batches; the fp32 run is the
# reference. "No scaling" is plain fp16 gradients; the fixed scales multiply the loss and
# divide the gradients without checking for overflow (the paper's constant scaling); "dynamic"
# is `GradScaler`. The loop is the whole experiment:

# %%
runs = []
for label, regime, scale, mode in ch4.scaling_plan(fixed_scales, fp16_used):
    torch.manual_seed(seed)  # the same weights and dropout masks in every run
    model_r = ERFNet().to(device).train()
    run = ls.train_with_scaling(model_r, batches[:num_steps], regime, scale=scale,
                                fp16=mode, lr=lr, device=device, label=label,
                                growth_interval=growth_interval, fp16_calls=low_calls)
    runs.append(run)
    print(f"{label:22s} final loss {run.losses[-1]:.4f}  skipped {sum(run.skipped)}  "
          f"{run.seconds:.1f} s")

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Training loss per step with fp16 gradients under no loss scaling, fixed scales and GradScaler's dynamic scale, beside the fp32 reference (same weights, same batches). A run whose weights became NaN stops being drawn.", "name": "fig-ch4-loss-curves"}}
fig, ax = plt.subplots()
for i, run in enumerate(runs):
    steps = [k + 1 for k, v in enumerate(run.losses) if math.isfinite(v)]
    finite = [v for v in run.losses if math.isfinite(v)]
    ax.plot(steps, finite, label=run.label, markersize=4, **series_style(i))
ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
ax.set(xlabel="step", ylabel="training loss")
ax.legend()
plt.show()

# %% tags=["hide-input"] mystnb={"figure": {"caption": "GradScaler's loss scale at each step of the dynamic run (log scale); crosses mark the steps it skipped because a gradient overflowed fp16.", "name": "fig-ch4-scale"}}
dyn = runs[-1]
fig, ax = plt.subplots(figsize=(7.0, 3.2))
steps = list(range(1, len(dyn.scales) + 1))
ax.step(steps, dyn.scales, where="mid", **series_style(1))
skipped = [k for k, s in zip(steps, dyn.skipped) if s]
ax.scatter(skipped, [dyn.scales[k - 1] for k in skipped], marker="x", s=60,
           color="black", zorder=3, label="skipped step")
ax.set_yscale("log", base=2)
ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
ax.set(xlabel="step", ylabel="loss scale")
ax.legend()
plt.show()

# %% [markdown]
# The runs side by side ({numref}`fig-ch4-loss-curves` and {numref}`fig-ch4-scale` draw
# them), each against the fp32 reference: its final loss and that loss minus the
# reference's, the largest difference over the steps, and the steps whose gradients
# overflowed (in brackets, those the run skipped). When the chapter emulates fp16
# gradients a last column gives the share of the nonzero fp16 gradient values the
# emulation flushed to zero per step (real fp16 autocast does not count them). With real
# fp16 autocast the forward pass itself runs in fp16, so every fp16 run's loss differs
# from the fp32 reference from the first step on, whatever the scaling; with the emulation
# the forward pass is fp32 and the losses differ only through the rounded gradients.

# %% tags=["hide-input"]
headers, rows, formats = ch4.run_table(runs)
md_table(rows, headers, formats)

# %%
md(ch4.scaling_verdict(runs))

# %% [markdown]
# A skipped step is one the weights did not take. After skipping some of a short run's steps
# GradScaler's run has trained for fewer steps than the others, so its final loss can sit
# further from the reference than theirs for that reason alone; over a long run the few steps
# skipped while the scale comes down from 2¹⁶ stop mattering. The verdict above says which
# run ended furthest from the reference here, and how many steps GradScaler skipped.
#
# How far the unscaled run strays depends on how many gradients underflow, which the first
# section showed grows with the image size. What the runs show at any size is the mechanism: a
# fixed scale has to sit below the overflow point and above the underflow point, and without
# an overflow check one bad step ruins the weights, while `GradScaler` finds a workable scale
# by itself and only skips the steps that overflow.
#
# ## What ran in which dtype
#
# Autocast does not convert a model. It intercepts individual ops: each op it knows runs in the
# low-precision dtype or in fp32, and every other op runs in whatever dtype its inputs have.
# Three sources say which ops it knows:
#
# - the **documentation**, "Autocast Op Reference" of the torch.amp docs
#   {cite:p}`pytorch-amp-docs`, kept as data in `data/reference/autocast_ops.yml`;
# - the **dispatcher**: the ops the installed torch registers a kernel for under the
#   `AutocastCPU` and `AutocastCUDA` dispatch keys;
# - **running the ops** under autocast, once with fp32 inputs and once with low-precision
#   inputs (and once with one of each, for ops with two inputs), and reading the output dtype.
#
# The CUDA column runs on the GPU when there is one. Without one it runs on *fake* CUDA tensors
# (PyTorch's `FakeTensorMode`: tensors with a device, dtype and shape but no data), so that the
# dispatcher's CUDA autocast kernels make their real decisions with no arithmetic done.
# What each probed op did, counted by behaviour (the ops one by one are behind the toggle
# under the table):

# %% tags=["hide-input"]
devices = autocast_rules.DEVICE_TYPES
probes = {d: {r.op: r for r in op_probes.probe_ops(d)} for d in devices}
where = {d: next(iter(probes[d].values())) for d in devices}
print(f"CPU probes: {where['cpu'].low_dtype}; "
      f"CUDA probes: {where['cuda'].low_dtype} on {where['cuda'].device}")
seen = sorted({r.observed for d in devices for r in probes[d].values()})
rows = [(b, *(sum(r.observed == b for r in probes[d].values())
              for d in devices)) for b in seen]
rows.append(("ops probed", *(len(probes[d]) for d in devices)))
md_table(rows, ["observed behaviour"] + [f"{d.upper()} ops" for d in devices])

# %% tags=["hide-input", "hide-output"]
short = {"lower_precision": "low", "float32": "fp32", "input dtype": "input",
         "unlisted": "–"}
rows = [[r[0]] + [short.get(v, v) for v in r[1:]] for r in ch4.probe_rows(probes)]
md("ran: the dtype observed; docs: PyTorch's documented lists. low: lower_precision; "
   "fp32: float32; input: input dtype; –: not in the documented lists.\n\n"
   + md_table_text(rows, ch4.PROBE_HEADERS))

# %% [markdown]
# "lower_precision": the output is bf16 (CPU) or fp16 (CUDA) even from fp32 inputs; "float32":
# the output is fp32 even from low-precision inputs; "input dtype": autocast leaves the op
# alone; "promote": low-precision inputs stay low, but a mix of low and fp32 gives fp32 (for
# `add` and `mul` this is PyTorch's ordinary type promotion, not autocast). Where the two
# devices and the documentation part ways, for the installed torch:

# %%
md(ch4.probe_verdict(probes))

# %%
reg = {d: set(autocast_rules.registered_ops(d)) for d in devices}
doc = {d: {op for ops in autocast_rules.documented_ops(d).values() for op in ops}
       for d in devices}
glue_all(reg_cpu=len(reg["cpu"]), reg_cuda=len(reg["cuda"]),
         undoc_cpu=len(reg["cpu"] - doc["cpu"]),
         undoc_cuda=len(reg["cuda"] - doc["cuda"]))

# %% [markdown]
# The installed torch registers autocast kernels for {glue:text}`reg_cpu` ops on CPU and
# {glue:text}`reg_cuda` on CUDA (overloads merged); {glue:text}`undoc_cpu` of the CPU ones and
# {glue:text}`undoc_cuda` of the CUDA ones are not named in the documentation (internal
# variants such as CUDA's `_convolution`, and others such as the upsampling ops).
#
# ### ERFNet, layer by layer
#
# Forward hooks on every layer record the dtypes going in and out during one forward pass under
# autocast, grouped by layer type. "low" is autocast's low-precision dtype, bf16 on the CPU
# and fp16 on CUDA; the calls are counted on each device (a layer type whose dtypes differ
# between the two gets a row for each):

# %% tags=["hide-input"]
layer_rows = ch4.layer_rows(model.eval(), x_trace, device)
low = {"bfloat16": "low", "float16": "low"}
calls = {}
for dev, kind, ins, out, n in layer_rows:
    key = (kind, ", ".join(low.get(d, d) for d in ins.split(", ")), low.get(out, out))
    calls.setdefault(key, {})[dev.split()[0]] = n
md_table([(*key, c.get("cpu"), c.get("cuda")) for key, c in calls.items()],
         ["layer type", "input dtypes", "output dtype", "CPU calls", "CUDA calls"])

# %% [markdown]
# Convolutions turn fp32 inputs into low-precision outputs; batch norm, dropout and ReLU keep
# whatever comes in. But some layers see fp32 inputs deep inside the network. The hooks on
# layers miss the functional ops inside each block's `forward`, so we also record every torch
# function call (on the CPU, in bf16):

# %% tags=["hide-input"]
ops_cpu = model_dtypes.trace_ops(model.cpu(), x_trace.cpu(), "cpu")
kept = ("cat", "add", "__add__", "relu")
rows = [r for r in ch4.summarize_by_type(ops_cpu, key="op") if r[0] in kept]
md_table(rows, ["op", "inside", "input dtypes", "output dtype", "calls"])

# %%
cats = [r for r in ops_cpu if r["op"] == "cat"]
adds = [r for r in ops_cpu
        if r["op"] in ("add", "__add__") and r["module"] == "NonBottleneck1D"]
glue_all(cats=len(cats), fp32_cats=sum(r["output"] == ["float32"] for r in cats),
         adds=len(adds), fp32_adds=sum(r["output"] == ["float32"] for r in adds))

# %% [markdown]
# Every downsampler concatenates a convolution's low-precision output with a max-pool of its
# input; {glue:text}`fp32_cats` of its {glue:text}`cats` concatenations get an fp32 input from
# the pool and so produce fp32 (`cat` promotes to the widest input). The residual sums of
# {glue:text}`fp32_adds` of the {glue:text}`adds` non-bottleneck blocks add a low-precision
# branch to an fp32 input and give fp32 again: ERFNet's encoder carries its residual stream in
# fp32 under autocast, and only the layers inside each branch run in low precision. This is
# why the gradient sections above count the encoder's residual stream as fp32, and the memory
# section below pays for it.
#
# ## Weights stay fp32
#
# The post says that PyTorch's AMP keeps two copies of the weights, an fp32 master copy and an
# fp16 working copy. That describes NVIDIA apex's `O2` mode, which converted the model itself
# to fp16 and kept fp32 master weights for the optimizer {cite:p}`apex-amp`. Native
# autocast keeps only the model's fp32
# weights: inside an autocast region each op that runs in low precision casts its fp32
# weight, and a cache keeps that cast for the rest of the region. After one training step
# under autocast (and after one with a model converted by `.half()`), the parameters and
# their gradients:

# %% tags=["hide-input"]
x_tiny, y_tiny = g4.crop_batch(batches, 8, 16, 1)  # dtypes do not depend on size
settings = [("cpu", torch.bfloat16), ("cpu", torch.float16)]
settings += [("cuda", torch.float16)] if device.type == "cuda" else []
rows = []
for d, dt in settings:
    torch.manual_seed(seed)
    r = ch4.dtypes_after_step(ERFNet().to(d), x_tiny.to(d), y_tiny.to(d), d, dt)
    rows.append((f"autocast {autocast_rules.dtype_name(dt)} on {d}",
                 ch4.dtype_counts(r["params"]), ch4.dtype_counts(r["grads"])))
half = ch4.dtypes_after_step(ERFNet().to(device).half(), x_tiny.to(device).half(),
                            y_tiny.to(device), device.type, None)
rows.append(("model.half()", ch4.dtype_counts(half["params"]),
             ch4.dtype_counts(half["grads"])))
md_table(rows, ["setting", "parameter dtypes (count)", "gradient dtypes (count)"])

# %% [markdown]
# Under autocast, in bf16 or fp16, every parameter and every gradient is fp32; the optimizer
# updates fp32 weights. With `.half()` the weights themselves are fp16, and so are their
# gradients and updates. Where that matters: an update smaller than half the spacing of fp16
# numbers at the weight's value disappears. This is the paper's reason for fp32 master weights
# (the "about 5%" above). Adam's steps are about the learning rate in size; a weight of 1
# updated by a few of them:

# %%
rows = []
for update in (lr, lr / 4, lr / 16):
    in_fp16 = float(torch.tensor(1.0).half() - torch.tensor(update).half())
    rows.append((update, 1.0 - update, in_fp16, (1 - in_fp16) / update))
md_table(rows, ["update", "1 - update in fp32", "1 - update in fp16",
                "share of the update kept in fp16"], [".3g", ".8f", ".8f", ".0%"])

# %%
from ampbook.numerics.formats import spacing

glue_all(gap=float(spacing(torch.tensor(0.99), "fp16")))

# %% [markdown]
# fp16's spacing just below 1 is {glue:text}`gap:g`: in fp16 an update is rounded to a multiple
# of it, so updates below half of it vanish and larger ones are distorted. The fp32 weights
# that autocast keeps take every update as it is.
#
# ### The casts, counted
#
# A `TorchDispatchMode` sees every dtype conversion autocast makes. Counting them for ERFNet's
# forward pass shows when the low-precision copies of the weights are made, and a small module
# that uses one `Linear` layer twice (`ch4.SameLayerTwice`) shows the cache at work.

# %%
torch.manual_seed(seed)
cm = ERFNet().train()
twice, xt = ch4.SameLayerTwice(), torch.randn(8, 64)
counts = {
    "ERFNet, 1 forward": ch4.count_casts(cm, x_tiny, "cpu"),
    "ERFNet, 2 forwards in one region":
        ch4.count_casts(cm, x_tiny, "cpu", forwards=2),
    "ERFNet, 2 forwards, a region each":
        ch4.count_casts(cm, x_tiny, "cpu", forwards=2, one_region=False),
    "Linear used twice, cache on": ch4.count_casts(twice, xt, "cpu"),
    "Linear used twice, cache off":
        ch4.count_casts(twice, xt, "cpu", cache_enabled=False),
}

# %% tags=["hide-input"]
rows = [(k, c.parameter_casts, c.parameter_cast_bytes / MIB, c.other_casts)
        for k, c in counts.items()]
md_table(rows, ["forward pass (bf16 autocast, CPU)", "weight casts",
                "MiB of weight copies", "other casts"], [None, None, ".2f", None])

# %%
one = counts["ERFNet, 1 forward"]
conv_params = sum(1 for m in cm.modules() if isinstance(m, gs.CAST_WEIGHT_TYPES)
                  for p in m.parameters(recurse=False))
glue_all(n_params=len(list(cm.parameters())), conv_params=conv_params,
         fp32_mib=sum(p.numel() * 4 for p in cm.parameters()) / MIB,
         casts=one.parameter_casts, copies_mib=one.parameter_cast_bytes / MIB)

# %% [markdown]
# ERFNet has {glue:text}`n_params` parameter tensors ({glue:text}`fp32_mib:.2f` MiB in fp32),
# {glue:text}`conv_params` of them the weights and biases of its convolutions. Autocast casts
# {glue:text}`casts` tensors per region (batch norm takes its fp32 parameters as they are),
# making {glue:text}`copies_mib:.2f` MiB of bf16 copies. A second forward in the same region
# reuses them; a new region casts again. The copies live as long as the region, and as long
# as the backward pass needs them: temporary working copies, remade every step, not a second
# set of weights that is kept and updated. The "other casts" are activations entering a
# low-precision op in fp32. The post's account against what we measured:

# %% tags=["hide-input"]
bw = ch4.backward_dtypes(cm, x_tiny, y_tiny, "cpu", torch.bfloat16)
conv_low = sum(n for (op, dt), n in bw.items()
               if op == "convolution_backward" and dt != "float32")
kept_in = ", ".join(sorted(ch4.parameter_and_grad_dtypes(cm)["params"]))
init = f"2^{math.log2(defaults['init_scale']):g}"
rows = [("weights kept in", "fp32 master + fp16 copy", kept_in),
        ("low-precision weight copies", "kept alongside the master",
         f"made per autocast region ({one.parameter_casts} casts), cached within it"),
        ("gradients", "fp16, applied to the fp32 copy",
         f"{conv_low} low-precision tensors out of convolution_backward, then "
         f"{bw.get(('_to_copy', 'float32'), 0)} casts to fp32: every .grad is fp32"),
        ("loss scaling starts at", f"{claims['paper_initial_loss_scale']} (the paper)",
         f"{init} (GradScaler's default)")]
md_table(rows, ["", "the post", "measured here"])

# %% [markdown]
# ## Where the memory goes
#
# Parameters, gradients and Adam's two moment buffers are fp32 with or without autocast. What
# autocast changes is the set of tensors autograd keeps from the forward pass for the backward
# pass: each layer's inputs (and for batch norm its statistics). The book measures it one way
# in every chapter, with `ampbook.measure.memory.saved_for_backward`: the **new bytes saved for
# backward**, attributed to the layer type running when they were saved. Parameters saved as
# they are cost nothing (they exist anyway) and are not counted; the low-precision copies of
# the weights that autocast saves are new memory made every step and are counted. The rule
# is a few lines of `SavedTensorMeter`'s saved-tensor hook, which autograd calls for every
# tensor it keeps:

# %%
import inspect

print(inspect.getsource(memory.SavedTensorMeter._pack))

# %% [markdown]
# One step of ERFNet in fp32 and under autocast at each of the chapter's sizes:

# %%
amp_dtype = autocast_rules.default_dtype(device.type)
mem = {}
for h, w in memory_sizes:
    xm, ym = gs.training_batches(data_root, h, w, 1, memory_batch_size,
                                 synthetic_train, seed)[0][0]
    xm, ym = xm.to(device), ym.to(device)
    torch.manual_seed(seed)
    m = ERFNet().to(device).train()
    mem[h * w * memory_batch_size] = {
        "fp32": memory.saved_for_backward(m, xm, ym, device.type),
        "amp": memory.saved_for_backward(m, xm, ym, device.type, amp_dtype)}

# %% tags=["hide-input"]
big = max(mem)
f32, amp = mem[big]["fp32"]["by_module_type"], mem[big]["amp"]["by_module_type"]
types = sorted(set(f32) | set(amp), key=lambda t: -f32.get(t, 0))
rows = [(t, f32.get(t, 0) / MIB, amp.get(t, 0) / MIB) for t in types]
rows.append(("total", mem[big]["fp32"]["new_bytes"] / MIB,
             mem[big]["amp"]["new_bytes"] / MIB))
amp_name = autocast_rules.dtype_name(amp_dtype)
md_table(rows, ["new bytes saved by", "fp32 MiB", f"autocast {amp_name} MiB"],
         [None, ".3f", ".3f"])

# %% tags=["hide-input"] mystnb={"figure": {"caption": "New bytes saved for the backward pass per layer type in one ERFNet step, fp32 against autocast, at the larger measured size. Blocks' own entries (Downsampler, NonBottleneck1D) are the functional ops in their forward: concatenations, ReLUs and residual sums. In fp32 the convolutions save their weights as they are (not counted) and inputs a ReLU saved already.", "name": "fig-ch4-saved-bytes"}}
fig, ax = plt.subplots()
ypos = list(range(len(types)))
ax.barh([y - 0.2 for y in ypos], [f32.get(t, 0) / MIB for t in types], height=0.4,
        label="fp32", **bar_style(0))
ax.barh([y + 0.2 for y in ypos], [amp.get(t, 0) / MIB for t in types], height=0.4,
        label=f"autocast {autocast_rules.dtype_name(amp_dtype)}", **bar_style(2))
ax.set_yticks(ypos, types)
ax.invert_yaxis()
ax.set_xlabel(f"MiB saved for backward ({big:,} pixels per batch)")
ax.legend()
plt.show()

# %% [markdown]
# {numref}`fig-ch4-saved-bytes` draws the table. Per measured step, the same figure in fp32
# and under autocast, and what autocast saved or
# cost (the verdict is `ampbook.chapters.ch3.saving_verdict`, the same line chapters 3 and 5 print):

# %% tags=["hide-input"]
new = {p: (m["fp32"]["new_bytes"], m["amp"]["new_bytes"]) for p, m in mem.items()}
rows = [(f"{p:,}", f / MIB, a / MIB, memory.saving(f, a))
        for p, (f, a) in sorted(new.items())]
md_table(rows, ["pixels per batch", "fp32 new MiB", "autocast new MiB", "saved"],
         [None, ".2f", ".2f", ".1%"])

# %%
md(ch3.saving_verdict(*new[big]))

# %% [markdown]
# Two effects pull against each other. Every activation a low-precision op saves takes half
# the bytes of its fp32 twin, and this part grows with the pixels of the batch; but parts of
# the network stay fp32 (the downsamplers' concatenations and the encoder's residual stream),
# as do the loss's inputs, so the per-pixel cost falls by less than half. Against that,
# autocast adds the low-precision copies of the weights, a fixed cost that fp32 does not pay.
# So autocast costs memory below some batch size in pixels and saves it above. A straight
# line through the measured sizes for each finds the crossover (`memory.fit_line`,
# `memory.crossover_pixels`):

# %%
fp32_line = memory.fit_line([(p, m["fp32"]["new_bytes"]) for p, m in mem.items()])
amp_line = memory.fit_line([(p, m["amp"]["new_bytes"]) for p, m in mem.items()])
crossover = memory.crossover_pixels(fp32_line, amp_line)
n_weights = sum(p.numel() for p in model.parameters())
glue_all(slope_f=fp32_line.slope, slope_a=amp_line.slope, crossover=crossover,
         slope_ratio=amp_line.slope / fp32_line.slope,
         fixed_mib=(amp_line.intercept - fp32_line.intercept) / MIB)

# %% [markdown]
# Each pixel of the batch costs {glue:text}`slope_f:,.0f` new saved bytes in fp32 and
# {glue:text}`slope_a:,.0f` under autocast ({glue:text}`slope_ratio:.0%`); the lines'
# intercepts differ by {glue:text}`fixed_mib:.2f` MiB, mostly the weight copies. Autocast
# saves activation memory above about {glue:text}`crossover:,.0f` pixels per batch and costs
# memory below ("inf": never, "0": always).
#
# To turn this into a prediction for a whole step, add the memory autocast does not change:
# for each parameter 4 bytes of weight, 4 of gradient and 8 of Adam state
# (`memory.step_saving`):

# %% tags=["hide-input"]
post_runs = load_reference("seed_post")["experiment"]["runs"]
post_gb = (post_runs["no_amp"]["memory_gb"], post_runs["amp"]["memory_gb"])
post_saving = memory.saving(*post_gb)
n_default = cfg.batch_size * cfg.height * cfg.width
rows = [(f"{p:,} (measured)", memory.step_saving(p, fp32_line, amp_line, n_weights))
        for p in sorted(mem)]
rows.append((f"{n_default:,} (runner default, extrapolated)",
             memory.step_saving(n_default, fp32_line, amp_line, n_weights)))
rows.append(("the post (RTX 3070, size unstated)", post_saving))
md_table(rows, ["pixels per batch", "predicted memory saving"], [None, ".1%"])

# %% [markdown]
# {numref}`fig-ch4-saving` draws the prediction against pixels per batch, with the savings
# measured on a GPU and committed under `results_dir` (by default `data/results`; the next
# section lists them).

# %% tags=["hide-cell"]
found = results.load_results_dir(results_dir)
gpu_pairs = [p for p in found.pairs() if p.amp.mode == "amp-fp16"]
gpu_points = {(display_name(p.setting.device_name),
               p.setting.batch_size * p.setting.height * p.setting.width,
               1 - p.memory_ratio) for p in gpu_pairs}

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Predicted saving of a training step's memory (new saved bytes plus fp32 weights, gradients and Adam state) against pixels per batch, extrapolated linearly from the sizes measured on this machine (dots); the horizontal line is the post's measured saving; diamonds are savings of the CUDA allocator's peak measured on a GPU and committed with the book, where there are any. Below zero autocast costs memory.", "name": "fig-ch4-saving"}}
grid = [2**k for k in range(10, 25)]
fig, ax = plt.subplots(figsize=(7.0, 3.4))
ax.plot(grid, [memory.step_saving(p, fp32_line, amp_line, n_weights) for p in grid],
        label="predicted (saved tensors + fp32 state)", markersize=3, **series_style(1))
measured = [memory.step_saving(p, fp32_line, amp_line, n_weights) for p in sorted(mem)]
ax.scatter(sorted(mem), measured, color="black", zorder=3, label="measured here")
for i, gpu in enumerate(sorted({g for g, _, _ in gpu_points})):
    pts = sorted((px, sv) for g, px, sv in gpu_points if g == gpu)
    ax.scatter(*zip(*pts), marker="D", s=40, zorder=3, label=f"{gpu}, measured",
               color=series_style(i + 2)["color"], edgecolor="black")
post_label = f"the post ({post_gb[1]} GB vs {post_gb[0]} GB)"
ax.axhline(post_saving, color="black", linestyle=":", label=post_label)
ax.axhline(0, color="gray", linewidth=0.8)
ax.set_xscale("log", base=2)
ax.set(xlabel="pixels per batch", ylabel="memory saved by autocast")
ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
ax.legend(fontsize=8)
plt.show()

# %%
glue_all(limit=1 - amp_line.slope / fp32_line.slope, post_saving=post_saving,
         default_saving=memory.step_saving(n_default, fp32_line, amp_line, n_weights))

# %% [markdown]
# At large batches the fixed parts stop mattering and the saving approaches that of the
# per-pixel cost alone, {glue:text}`limit:.1%` here: less than the 50% that halving every
# saved tensor would give, because of the fp32 parts. The post measured
# {glue:text}`post_saving:.1%` (it does not say how it measured memory, and tools such as
# nvidia-smi also count the CUDA context and the allocator's cache); the prediction at the
# runner's default size is {glue:text}`default_saving:.1%`. The prediction leaves out cuDNN's
# workspaces, the allocator's rounding and whatever else a real step keeps alive at its peak.
#
# ### Measured on a GPU
#
# The training runner records the CUDA allocator's peak for each epoch. Runs committed under
# `results_dir` are paired by `ampbook.results`: an fp32 run and an fp16 autocast run pair
# only when they ran on the same GPU with the same setting (size, batch, memory format,
# data). Where and how the paired runs were made:

# %%
settings = {(p.setting.device_name, p.setting.label): p for p in gpu_pairs}
md("\n\n".join(results.provenance(p.amp.record["environment"],
                                   p.amp.record.get("finished"), {"": label})
                for (_, label), p in settings.items())
   or "No pair of fp32 and amp-fp16 CUDA runs in " + str(found.directory) + ".")

# %% [markdown]
# Each pair's measured saving, beside this chapter's prediction for its size:

# %% tags=["hide-input"]
rows = [(display_name(p.setting.device_name), p.label,
         p.baseline.memory_bytes / GIB, p.amp.memory_bytes / GIB, 1 - p.memory_ratio,
         memory.step_saving(p.setting.batch_size * p.setting.height * p.setting.width,
                            fp32_line, amp_line, n_weights)) for p in gpu_pairs]
one = int(len({r[0] for r in rows}) <= 1)  # one GPU: named in the line above
md_table([r[one:] for r in rows],
         ["GPU", "pair", "fp32 peak GiB", "amp-fp16 peak GiB", "measured saving",
          "predicted saving"][one:], [None, None, ".2f", ".2f", ".1%", ".1%"][one:])

# %% [markdown]
# The measured saving is of the allocator's peak, which also holds the weights, gradients,
# Adam state and cuDNN's workspaces; the prediction holds the first three and extrapolates
# this machine's saved tensors, measured at far smaller sizes, to the GPU run's. Where the
# two agree, the saved tensors explain the saving; where the measured one is larger or
# smaller, what the prediction leaves out (workspaces, the allocator's rounding) or the
# straight line's extrapolation is the gap.

# %% [markdown]
# ## Summary
#
# - Under autocast, only the gradients of fp16 tensors are fp16: in ERFNet the layers inside
#   each block's branch and the decoder, not the encoder's residual stream or the
#   downsamplers' concatenations. Those fp16 activation gradients sit many binades below the
#   weight gradients, and move further down as the labelled pixels per batch grow, because
#   the loss averages over them: here by {glue:text}`rate:.2f` bins per doubling of the
#   pixels, against the one bin of the bound. The table above gives the share below fp16's
#   2⁻²⁴ at this chapter's size, and the shift, at either rate, estimates how many more fall
#   below it at full size.
# - The paper's "about 5%" is of a speech model's weight gradients and argues for fp32 master
#   weights; native autocast keeps the parameters and their gradients in fp32.
# - Loss scaling shifts the whole histogram by log2 of the scale. A fixed scale must sit below
#   the overflow point and above the underflow point and has no safety net; `GradScaler` starts
#   high (2¹⁶), multiplies the scale by its backoff factor on overflow and skips that step, and
#   grows the scale again after clean steps. Each skipped step is a step the weights do not
#   take, which in a short run can leave {term}`GradScaler`'s run the furthest from fp32.
# - Autocast picks a dtype per op, not per layer or model: convolutions and matmuls in low
#   precision, a list of ops in fp32, everything else in its inputs' dtype. CPU and CUDA differ
#   on some ops (the counts above, for the installed torch).
# - Memory: the {term}`new bytes saved for backward`. Autocast halves what its low-precision
#   ops save per pixel, but adds copies of the weights: it costs memory on small batches and
#   saves it on large ones, by less than half because of the fp32 parts.
#
# ## Exercises
#
# 1. Rerun the chapter with `height=128, width=256` (or the gpu profile on a GPU). How far does
#    the activation histogram move, and does the fraction below 2⁻²⁴ at scale 1 follow the
#    estimate made from the shift?
#
#    ```{dropdown} Hint
#    Doubling height and width is two doublings of the labelled pixels. Compare the new
#    fraction with both columns of the estimate: which rate, the bound's or the measured,
#    came closer?
#    ```
# 2. Replace the loss's mean by a sum over pixels (`reduction="sum"`). What happens to the
#    histograms, and which loss scale would you need then?
#
#    ```{dropdown} Hint
#    A sum is the mean times N: every gradient grows by log2 N bins, as if the loss were
#    scaled by N. Check the largest gradient against fp16's 65504 before picking a scale.
#    ```
# 3. Use `op_probes.probe_ops("cuda", names=(...))` to check an op your own model uses. Is
#    it in the documented lists? Does it behave as they say?
#
#    ```{dropdown} Hint
#    Each result has `observed` and `documented`; `op_probes.disagreements` lists the ops
#    where the two part ways.
#    ```
# 4. Change ERFNet's downsampler so that the max-pool branch runs in low precision (cast its
#    output with `.to(conv_out.dtype)`). Trace again: how much of the network now runs in low
#    precision, and how many new bytes does the memory table show?
#
#    ```{dropdown} Hint
#    `torch.cat` promotes to its widest input; with both branches in low precision the
#    concatenation, and the encoder's residual stream after it, stay low.
#    ```
# 5. Train with `GradScaler(growth_interval=1)`. How often does it skip steps, and why is
#    PyTorch's default interval so long?
#
#    ```{dropdown} Hint
#    Each growth doubles the scale until a gradient overflows, and each overflow costs a
#    skipped step: with an interval of 1 the scale oscillates about its limit and skips
#    every other step or so.
#    ```
