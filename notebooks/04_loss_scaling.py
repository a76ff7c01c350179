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
# # Loss scaling, and what autocast does inside ERFNet
#
# The RTX 3070 blog post explains two ideas in prose: gradients too small for fp16 are rescued
# by multiplying the loss before the backward pass, and `autocast` picks a precision for each
# layer while the weights keep a full-precision master copy. This chapter measures both on the
# book's own network, ERFNet: the gradients of real training steps against fp16's range, short
# training runs with and without loss scaling, the dtype every layer actually runs in, what
# happens to the weights, and where the memory saving comes from.
#
# **What you will learn**
#
# - where ERFNet's activation and weight gradients fall on fp16's number line, and how many
#   are lost (flushed to zero) or overflow at loss scales 1, 8, 2¹⁰ and 2¹⁶;
# - how training behaves with fp16 gradients and no scaling, a fixed scale, and `GradScaler`'s
#   dynamic scale, and what `GradScaler`'s defaults mean;
# - which ops autocast runs in fp16/bf16 and which in fp32 on CPU and on CUDA, from three
#   sources: PyTorch's documentation, its dispatcher, and running the ops;
# - that the weights stay fp32 under autocast (the casts are per region and cached), unlike a
#   model converted with `.half()`;
# - how much memory autocast saves in the tensors kept for the backward pass, per layer type,
#   and what that predicts for a whole training step.
#
# **What you need**: the `ampbook` package and PyTorch. Without Cityscapes the chapter uses the
# synthetic Cityscapes of `ampbook.data`. A CPU runs every part. fp16 arithmetic is slow on
# many CPUs, so on a CPU the chapter times a real fp16 backward pass against an fp32 emulation
# of fp16 gradients and trains with the faster (it says which). A CUDA GPU runs real fp16
# autocast.

# %% tags=["parameters"]
device = "auto"  # "auto", "cpu" or "cuda"
data_root = None  # a Cityscapes root; None: $CITYSCAPES_DATASET, else the synthetic set
height = 64  # training images' height and width for the gradient statistics and the runs
width = 128
batch_size = 2
synthetic_train = 8  # images in the synthetic training set (used when there is no Cityscapes)
grad_batches = 2  # batches whose gradients are recorded
num_steps = 12  # optimizer steps per training run
lr = 5e-4  # Adam, as ERFNet's training uses
fixed_scales = [8.0, 65536.0]  # the fixed loss scales to train with
growth_interval = 4  # GradScaler's growth interval for the demo run (its default is far longer)
fp16_mode = "auto"  # "emulate", "autocast", or "auto": real autocast on CUDA, the faster one on a CPU
trace_height = 32  # the input of the dtype traces and the timing of the fp16 modes
trace_width = 64
memory_sizes = [[32, 64], [64, 128]]  # (height, width) of the saved-tensor measurements
memory_batch_size = 2
seed = 0

# %%
from ampbook.env import print_environment

print_environment(device);

# %%
import itertools
import math
import os

import matplotlib.pyplot as plt
import torch
from torch import nn

from ampbook import autocast_trace as at
from ampbook import gradstats as gs
from ampbook.data import Cityscapes, resolve_root, synthetic_root
from ampbook.env import pick_device
from ampbook.model import ERFNet
from ampbook.paths import load_reference
from ampbook.plots import bar_style, md, md_table, series_style, use_style

use_style()
device = pick_device(device)
post = load_reference("seed_post")
claims = post["claims"]


def fresh_model():
    """ERFNet with the chapter's seed: every experiment starts from the same weights."""
    torch.manual_seed(seed)
    return ERFNet().to(device)


def load_batches(h, w, n, bs=batch_size):
    """The first ``n`` batches of the training split at h x w (cycling when the set is small)."""
    if data_root or os.environ.get("CITYSCAPES_DATASET"):
        root = resolve_root(data_root)  # a clear error if the folder is not Cityscapes
    else:
        root = synthetic_root(synthetic_train, 2, 2 * h, 2 * w)
    loader = torch.utils.data.DataLoader(Cityscapes(root, "train", h, w), batch_size=bs, shuffle=False)
    distinct = list(itertools.islice(loader, min(n, 16)))  # at most 16 batches held in memory
    return list(itertools.islice(itertools.cycle(distinct), n)), root


def crop_batch(h, w, n):
    """``n`` images and labels cut from the top-left corner of the training batches."""
    if h > height or w > width:
        raise ValueError(f"a crop of {h}x{w} does not fit in the {height}x{width} training images")
    xs = torch.cat([b[0] for b in batches])[:n, :, :h, :w]
    ys = torch.cat([b[1] for b in batches])[:n, :h, :w]
    if len(xs) < n:
        raise ValueError(f"need {n} images for a batch, the loaded batches hold {len(xs)}")
    return xs.clone(), ys.clone()  # own storage: the memory meter counts whole storages


batches, root = load_batches(height, width, max(grad_batches, num_steps))
print(f"data: {root}; {len(batches)} batches of {tuple(batches[0][0].shape)}")

# %% [markdown]
# ## Gradients against fp16's range
#
# fp16 holds magnitudes from its smallest subnormal number up to its largest value; between
# the smallest subnormal and the smallest normal number it keeps them with fewer significant
# bits. Rounding to nearest decides the fate of anything outside: a magnitude at or below half
# the smallest subnormal becomes 0, one at or above the largest value plus half a step becomes
# infinity. The thresholds, computed from the format's bit layout in `ampbook.formats`:

# %%
rows = [("smallest subnormal", gs.FP16_MIN_SUBNORMAL, math.log2(gs.FP16_MIN_SUBNORMAL)),
        ("flushed to 0 at or below", gs.FLUSH_AT_OR_BELOW, math.log2(gs.FLUSH_AT_OR_BELOW)),
        ("smallest normal", gs.FP16_MIN_NORMAL, math.log2(gs.FP16_MIN_NORMAL)),
        ("largest value", gs.FP16_MAX, math.log2(gs.FP16_MAX)),
        ("overflows to inf at or above", gs.OVERFLOW_AT_OR_ABOVE, math.log2(gs.OVERFLOW_AT_OR_ABOVE))]
md_table(rows, ["fp16 limit", "value", "log2"], [None, ".6g", ".3f"])

# %% [markdown]
# We run ERFNet forward and backward in fp32 on a few training batches and record two kinds of
# gradients: the **activation gradients**, the gradient of the loss with respect to each
# layer's output (hooks on the outputs hand them over during the backward pass), and the
# **weight gradients**, each parameter's `.grad`. In an fp16 backward pass the activation
# gradients are the tensors that flow from layer to layer in fp16; the weight gradients of the
# convolutions are computed in fp16 too. `GradientRecorder` counts, for each loss scale, how
# many nonzero values would be flushed, fall below 2⁻²⁴, be stored as subnormals, or overflow.

# %%
model = fresh_model().train()
scales = gs.SCALES
rec = gs.capture_gradients(model, batches[:grad_batches], scales=scales)
for kind in ("activation", "weight"):
    c = rec.combined(kind)
    print(f"{kind} gradients: {c.tensors} tensors, {c.counts[scales[0]]['total']:,} values, "
          f"largest |g| = {c.max_abs:.3g}")

# %% mystnb={"figure": {"caption": "Histogram of log2|g| for ERFNet's activation and weight gradients (fp32, nonzero values), with fp16's limits: values left of the dotted line are flushed to zero, between the dotted and dashed lines they are subnormal, right of the solid line they overflow. A loss scale of 2^k moves the whole histogram k bins to the right.", "name": "fig-ch4-grad-hist"}}
fig, axes = plt.subplots(2, 1, figsize=(7.0, 5.2), sharex=True)
for ax, kind, i in zip(axes, ("activation", "weight"), (1, 2)):
    exps, counts = rec.histogram(kind)
    total = sum(counts)
    ax.bar(exps, [c / total for c in counts], width=1.0, align="edge", label=f"{kind} gradients", **bar_style(i))
    ax.axvline(math.log2(gs.FLUSH_AT_OR_BELOW), color="black", linestyle=":", label="flushed to 0 below (2⁻²⁵)")
    ax.axvline(math.log2(gs.FP16_MIN_NORMAL), color="black", linestyle="--", label="smallest normal (2⁻¹⁴)")
    ax.axvline(math.log2(gs.FP16_MAX), color="black", linestyle="-", label="largest value (65504)")
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

# %%
def fraction_rows(rec):
    rows = []
    for kind in ("activation", "weight"):
        fr = rec.fractions(kind)
        for s in scales:
            f = fr[s]
            rows.append((kind, f"2^{math.log2(s):g}", f["zero_fraction"], f["flushed"],
                         f["below_min_subnormal"], f["subnormal"], f["overflow"]))
    return rows


md_table(fraction_rows(rec), ["gradients", "loss scale", "exactly 0 (of all)", "flushed", "below 2⁻²⁴",
                              "subnormal", "overflow"],
         [None, None, ".2%", ".4%", ".4%", ".3%", ".4%"])

# %% [markdown]
# Which layers produce the small activation gradients? The fraction below 2⁻²⁴ at scale 1, per
# layer type:

# %%
by_type = rec.table("activation", outcome="below_min_subnormal")
md_table([(r[0], r[1], r[2], r[3], r[4]) for r in by_type],
         ["layer type", "tensors", "values", "exactly 0", "below 2⁻²⁴ at scale 1"],
         [None, None, None, ".2%", ".4%"])

# %% [markdown]
# ### Compared with the paper
#
# Micikevicius et al. ("Mixed Precision Training", ICLR 2018, arXiv:1710.03740) report the
# share of their example network's gradient values that fall below 2⁻²⁴ and are lost in plain
# fp16, and the loss scale that was enough to train their SSD detector; the post quotes both
# (the figures below come from `data/reference/seed_post.yml`). ERFNet at this chapter's image
# size:

# %%
act, wgt = rec.fractions("activation"), rec.fractions("weight")
frac = {"act_1": act[1.0]["below_min_subnormal"], "act_8": act[8.0]["below_min_subnormal"],
        "w_1": wgt[1.0]["below_min_subnormal"], "w_8": wgt[8.0]["below_min_subnormal"]}
ov = {s: max(act[s]["overflow"], wgt[s]["overflow"]) for s in scales}
first_overflow = next((s for s in scales if ov[s] > 0), None)
md(f"Below 2⁻²⁴ at scale 1: **{frac['act_1']:.3%}** of the nonzero activation-gradient values and "
   f"**{frac['w_1']:.3%}** of the weight-gradient values (the paper's example: "
   f"{claims['paper_lost_fraction']:.0%}). At {claims['paper_initial_loss_scale']}, the scale that was enough for "
   f"the paper's SSD detector (the post reads it as the scale to start from): {frac['act_8']:.3%} and "
   f"{frac['w_8']:.3%}. "
   + (f"The first scale of the table at which anything overflows is 2^{math.log2(first_overflow):g} "
      f"({ov[first_overflow]:.4%} of the values), because the largest weight gradient is "
      f"{rec.combined('weight').max_abs:.3g} and the largest activation gradient "
      f"{rec.combined('activation').max_abs:.3g}."
      if first_overflow else "No scale of the table makes anything overflow here."))

# %% [markdown]
# ### Why the image size matters
#
# The loss is the mean over all labelled pixels of the batch, so the gradient with respect to
# each logit is at most 1/(number of pixels) in magnitude, and the gradients of the layers below
# inherit that factor: the activation-gradient histogram should move one bin to the left each
# time the pixel count doubles. A weight gradient sums one such term per pixel, so it shrinks
# more slowly: not at all if the terms agree in sign, half a bin per doubling if their signs
# are random. We check with the same images cut to half the height and width (a quarter of the
# pixels):

# %%
small_batches = [crop_batch(max(8, height // 16 * 8), max(8, width // 16 * 8), batch_size)]
rec_small = gs.capture_gradients(fresh_model().train(), small_batches, scales=(1.0,))


def median_exponent(r, kind):
    exps, counts = r.histogram(kind)
    half, acc = sum(counts) / 2, 0
    for e, c in zip(exps, counts):
        acc += c
        if acc >= half:
            return e


pixels = batches[0][1].numel()
pixels_small = small_batches[0][1].numel()
shift = {k: median_exponent(rec, k) - median_exponent(rec_small, k) for k in ("activation", "weight")}
doublings = math.log2(pixels / pixels_small)
md(f"Going from {pixels_small:,} to {pixels:,} pixels per batch ({doublings:.1f} doublings), the median exponent "
   f"of the activation gradients moved by {shift['activation']:+d} (the argument above predicts {-doublings:+.0f}) "
   f"and that of the weight gradients by {shift['weight']:+d} (between 0 and {-doublings / 2:+.0f}). Below 2⁻²⁴ at "
   f"scale 1: "
   f"{rec_small.fractions('activation')[1.0]['below_min_subnormal']:.3%} of activation-gradient values at the "
   f"small size, {frac['act_1']:.3%} at the larger one.")

# %%
from ampbook.train import TrainConfig

cfg = TrainConfig()
full_pixels = cfg.batch_size * cfg.height * cfg.width
exps, counts = rec.histogram("activation")
move = round(math.log2(full_pixels / pixels))  # bins the histogram moves at the runner's size
lost_full = {s: sum(c for e, c in zip(exps, counts) if e - move + math.log2(s) < -24) / sum(counts) for s in scales}
md(f"The training runner's default step ({cfg.batch_size} images of {cfg.height}x{cfg.width}, {full_pixels:,} "
   f"pixels) bounds each logit's gradient by 1/{full_pixels:,} = 2^{math.log2(1 / full_pixels):.1f}, only "
   f"{math.log2(1 / full_pixels) + 24:.1f} binades above 2⁻²⁴. Moving this chapter's activation histogram "
   f"{move} bins to the left predicts that at that size "
   + ", ".join(f"{lost_full[s]:.2%} at scale 2^{math.log2(s):g}" for s in scales)
   + " of the nonzero activation-gradient values would fall below 2⁻²⁴: an estimate from a shift, to be "
     "checked by running this chapter with the gpu profile.")

# %% [markdown]
# ## Training with fp16 gradients: no scaling, a fixed scale, a dynamic scale
#
# `torch.amp.GradScaler` implements dynamic loss scaling: it multiplies the loss by its
# current scale, unscales the gradients before the optimizer step, skips the step and
# multiplies the scale by a backoff factor when any gradient is inf or NaN, and multiplies it
# by a growth factor after a run of clean steps. Its defaults, read from a fresh object:

# %%
defaults = gs.grad_scaler_defaults(device.type)
md_table([(k, v) for k, v in defaults.items()], ["GradScaler setting", "default"], [None, "g"])

# %%
md(f"It starts at 2^{math.log2(defaults['init_scale']):g}, far above the paper's {claims['paper_initial_loss_scale']}, "
   f"on purpose: starting too high costs a few skipped steps (each halves the scale by the backoff factor "
   f"{defaults['backoff_factor']:g}), starting too low loses gradients silently. After "
   f"{defaults['growth_interval']} steps without overflow it multiplies the scale by {defaults['growth_factor']:g}. "
   f"The runs below keep the initial scale, backoff and growth factor, and shorten the growth interval to "
   f"{growth_interval} steps so that growth shows up in {num_steps} steps.")

# %% [markdown]
# ### Emulated or real fp16?
#
# A real fp16 backward needs fast fp16 arithmetic. On a GPU that is the point of mixed
# precision; on many CPUs fp16 convolutions are far slower than fp32. The other way to get
# fp16's *range* is to emulate it: compute in fp32 and round every gradient that flows
# backward (each tensor's gradient in the forward graph, and the weight gradients of the
# convolutions) to fp16 with `ampbook.formats.round_to`, which flushes to zero and overflows to
# inf exactly as fp16 does. The emulation does not reproduce fp16's rounding *inside* each
# kernel, only at the tensors between them. We time one forward and backward pass of each
# kind, on one image of the training size:

# %%
tx, ty = crop_batch(trace_height, trace_width, 1)  # the small input of the later sections
probe_model = fresh_model().train()
x1, y1 = crop_batch(height, width, 1)
secs = {mode: gs.step_seconds(probe_model, x1, y1, fp16=mode) for mode in gs.FP16_MODES}
md_table([(m, secs[m], secs[m] / secs["off"]) for m in ("off", "emulate", "autocast")],
         ["backward kind", "seconds per step", "vs fp32"], [None, ".3f", ".1f"])

# %%
if fp16_mode == "auto":
    fp16_used = "autocast" if device.type == "cuda" or secs["autocast"] <= secs["emulate"] else "emulate"
else:
    fp16_used = fp16_mode
why = (f"real fp16 autocast took {secs['autocast'] / secs['off']:.1f}x the fp32 time and the emulation "
       f"{secs['emulate'] / secs['off']:.1f}x")
md(f"This run uses **{'emulated fp16 gradients' if fp16_used == 'emulate' else 'real fp16 autocast'}** "
   f"({'chosen by the parameter fp16_mode' if fp16_mode != 'auto' else ('the GPU runs fp16 natively' if device.type == 'cuda' else 'the faster of the two here')}; {why}).")

# %% [markdown]
# Every run starts from the same weights and sees the same batches; the fp32 run is the
# reference. "No scaling" is plain fp16 gradients; the fixed scales multiply the loss and
# divide the gradients without checking for overflow (the paper's constant scaling); "dynamic"
# is `GradScaler`.

# %%
runs = []
plan = [("fp32 reference", "none", 1.0, "off")] + [("no scaling", "none", 1.0, fp16_used)]
plan += [(f"fixed 2^{math.log2(s):g}", "fixed", s, fp16_used) for s in fixed_scales]
plan += [("dynamic (GradScaler)", "dynamic", 1.0, fp16_used)]
train_batches = batches[:num_steps]
for label, regime, scale, mode in plan:
    torch.manual_seed(seed)  # same dropout masks in every run
    run = gs.train_with_scaling(fresh_model().train(), train_batches, regime, scale=scale, fp16=mode,
                                lr=lr, growth_interval=growth_interval, device=device, label=label)
    runs.append(run)
    print(f"{label:22s} final loss {run.losses[-1]:.4f}  skipped {sum(run.skipped)}  {run.seconds:.1f} s")

# %% mystnb={"figure": {"caption": "Training loss per step with fp16 gradients under no loss scaling, fixed scales and GradScaler's dynamic scale, beside the fp32 reference (same weights, same batches). A run whose weights became NaN stops being drawn.", "name": "fig-ch4-loss-curves"}}
fig, ax = plt.subplots()
for i, run in enumerate(runs):
    steps = [k + 1 for k, v in enumerate(run.losses) if math.isfinite(v)]
    ax.plot(steps, [v for v in run.losses if math.isfinite(v)], label=run.label, markersize=4, **series_style(i))
ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
ax.set_xlabel("step")
ax.set_ylabel("training loss")
ax.legend()
plt.show()

# %% mystnb={"figure": {"caption": "GradScaler's loss scale at each step of the dynamic run (log scale); crosses mark the steps it skipped because a gradient overflowed fp16.", "name": "fig-ch4-scale"}}
dyn = runs[-1]
fig, ax = plt.subplots(figsize=(7.0, 3.2))
steps = list(range(1, len(dyn.scales) + 1))
ax.step(steps, dyn.scales, where="mid", **series_style(1))
skipped = [k for k, s in zip(steps, dyn.skipped) if s]
ax.scatter(skipped, [dyn.scales[k - 1] for k in skipped], marker="x", s=60, color="black", zorder=3,
           label="skipped step")
ax.set_yscale("log", base=2)
ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
ax.set_xlabel("step")
ax.set_ylabel("loss scale")
if skipped:
    ax.legend()
plt.show()

# %%
ref = runs[0]
rows = []
for run in runs:
    diff = max(abs(a - b) for a, b in zip(run.losses, ref.losses)) if run.weights_finite else float("nan")
    flushed = [f for f in run.flushed if not math.isnan(f)]
    rows.append((run.label, run.fp16, run.losses[-1], diff, sum(run.skipped), sum(run.overflowed),
                 sum(flushed) / len(flushed) if flushed else None, "yes" if run.weights_finite else "no"))
md_table(rows, ["run", "gradients", "final loss", "largest loss difference from fp32", "skipped steps", "overflow steps",
                "mean flushed (emulation)", "weights finite"],
         [None, None, ".4f", ".2e", None, None, ".4%", None])

# %%
broken = [r.label for r in runs if not r.weights_finite]
growths = sum(1 for a, b in zip(dyn.scales, dyn.scales[1:]) if b > a)
text = (f"The dynamic run started at 2^{math.log2(dyn.scales[0]):g}, skipped {sum(dyn.skipped)} of "
        f"{len(dyn.skipped)} steps, grew its scale {growths} times and ended at 2^{math.log2(dyn.scales[-1]):g}. ")
text += (f"Runs whose weights became NaN: {', '.join(broken)} (an overflowing gradient, unscaled and handed to "
         f"Adam without a check). " if broken else "No run lost its weights to NaN. ")
if rows[1][6] is not None:
    text += (f"Without scaling, {rows[1][6]:.3%} of the nonzero activation-gradient values were flushed per "
             f"step on average; the emulation computes the forward pass in fp32, so the losses differ from the "
             f"reference only through the rounded gradients.")
else:
    text += ("With real fp16 autocast the forward pass itself runs in fp16, so the losses differ from the fp32 "
             "reference from the first step on, whatever the scaling.")
md(text)

# %% [markdown]
# How far the unscaled run strays depends on how many gradients underflow, which the first
# section showed grows with the image size. What the runs show at any size is the mechanism: a
# fixed scale has to sit below the overflow point and above the underflow point, and without
# an overflow check one bad step ruins the weights, while `GradScaler` finds a workable scale
# by itself and only skips the steps that overflow.

# %% [markdown]
# ## What ran in which dtype
#
# Autocast does not convert a model. It intercepts individual ops: each op it knows runs in the
# low-precision dtype or in fp32, and every other op runs in whatever dtype its inputs have.
# Three sources say which ops it knows:
#
# - the **documentation**, "Autocast Op Reference" of the torch.amp docs
#   (<https://pytorch.org/docs/stable/amp.html#autocast-op-reference>), kept as data in
#   `data/reference/autocast_ops.yml`;
# - the **dispatcher**: the ops the installed torch registers a kernel for under the
#   `AutocastCPU` and `AutocastCUDA` dispatch keys;
# - **running the ops** under autocast, once with fp32 inputs and once with low-precision
#   inputs (and once with one of each, for ops with two inputs), and reading the output dtype.
#
# The CUDA column runs on the GPU when there is one. Without one it runs on *fake* CUDA tensors
# (PyTorch's `FakeTensorMode`: tensors with a device, dtype and shape but no data), so that the
# dispatcher's CUDA autocast kernels make their real decisions with no arithmetic done.

# %%
probes = {d: {r.op: r for r in at.probe_ops(d)} for d in at.DEVICE_TYPES}
rows = [(op, probes["cpu"][op].observed, probes["cpu"][op].documented or "unlisted",
         probes["cuda"][op].observed, probes["cuda"][op].documented or "unlisted") for op in at.PROBE_NAMES]
print(f"CPU probes: {next(iter(probes['cpu'].values())).low_dtype}; "
      f"CUDA probes: {next(iter(probes['cuda'].values())).low_dtype} on {next(iter(probes['cuda'].values())).device}")
md_table(rows, ["op", "CPU observed", "CPU documented", "CUDA observed", "CUDA documented"])

# %% [markdown]
# "lower_precision": the output is bf16 (CPU) or fp16 (CUDA) even from fp32 inputs; "float32":
# the output is fp32 even from low-precision inputs; "input dtype": autocast leaves the op
# alone; "promote": low-precision inputs stay low, but a mix of low and fp32 gives fp32 (for
# `add` and `mul` this is PyTorch's ordinary type promotion, not autocast).

# %%
differs = [op for op in at.PROBE_NAMES if probes["cpu"][op].observed != probes["cuda"][op].observed]
dis = {d: at.disagreements(list(probes[d].values())) for d in at.DEVICE_TYPES}
reg = {d: set(at.registered_ops(d)) for d in at.DEVICE_TYPES}
doc = {d: {op for ops in at.documented_ops(d).values() for op in ops} for d in at.DEVICE_TYPES}
pairs = {}
for op in differs:
    pairs.setdefault((probes["cpu"][op].observed, probes["cuda"][op].observed), []).append(op)
md(f"CPU and CUDA autocast treat {len(differs)} of the {len(at.PROBE_NAMES)} probed ops differently: "
   + "; ".join(f"{', '.join(ops)} ({a} on CPU, {b} on CUDA)" for (a, b), ops in pairs.items())
   + ". Observed behaviour that the documented lists do not predict: "
   + ("; ".join(f"{d.upper()}: " + (", ".join(f"{r.op} ({r.observed}, documented {r.documented or 'unlisted'})"
                                            for r in dis[d]) or "none") for d in at.DEVICE_TYPES))
   + f". torch {torch.__version__} registers autocast kernels for {len(reg['cpu'])} ops on CPU and "
     f"{len(reg['cuda'])} on CUDA (overloads merged); {len(reg['cuda'] - doc['cuda'])} of the CUDA ones and "
     f"{len(reg['cpu'] - doc['cpu'])} of the CPU ones are not named in the documentation (internal variants "
     f"such as CUDA's `_convolution`, and others such as CUDA's "
     f"{', '.join(sorted(o for o in reg['cuda'] - doc['cuda'] if o.startswith('upsample'))[:3]) or 'upsampling'}).")

# %% [markdown]
# ### ERFNet, layer by layer
#
# Forward hooks on every layer record the dtypes going in and out during one forward pass under
# autocast (bf16 on CPU, fp16 on CUDA), grouped by layer type:

# %%
trace_model = fresh_model().eval()
x_trace = torch.randn(1, 3, trace_height, trace_width)
layer_rows = []
for d in at.DEVICE_TYPES:
    if d == "cuda" and device.type != "cuda":  # fake CUDA tensors: the model's weights are not touched
        rows_d, label = at.trace_layers(trace_model, tuple(x_trace.shape), "cuda"), "cuda (fake)"
    else:
        dev = torch.device(d) if d == "cpu" else device
        rows_d, label = at.trace_layers(trace_model.to(dev), x_trace.to(dev), d), d
    layer_rows += [(label, *r) for r in at.summarize_by_type(rows_d)]
trace_model.cpu()
md_table(layer_rows, ["device", "layer type", "input dtypes", "output dtype", "calls"])

# %% [markdown]
# Convolutions turn fp32 inputs into low-precision outputs; batch norm, dropout and ReLU keep
# whatever comes in. But some layers see fp32 inputs deep inside the network. The hooks on
# layers miss the functional ops inside each block's `forward`, so we also record every torch
# function call:

# %%
ops_cpu = at.trace_ops(trace_model, x_trace, "cpu")
op_summary = at.summarize_by_type(ops_cpu, key="op")
md_table([r for r in op_summary if r[0] in ("cat", "add", "__add__", "relu")],
         ["op", "inside", "input dtypes", "output dtype", "calls"])

# %%
cats = [r for r in ops_cpu if r["op"] == "cat"]
adds = [r for r in ops_cpu if r["op"] in ("add", "__add__") and r["module"] == "NonBottleneck1D"]
fp32_adds = sum(r["output"] == ["float32"] for r in adds)
md(f"Every downsampler concatenates a convolution's low-precision output with a max-pool of its input; "
   f"{sum(r['output'] == ['float32'] for r in cats)} of its {len(cats)} concatenations get an fp32 input from "
   f"the pool and so produce fp32 (`cat` promotes to the widest input). The residual sums of "
   f"{fp32_adds} of the {len(adds)} non-bottleneck blocks add a low-precision branch to an fp32 input and give "
   f"fp32 again: ERFNet's encoder carries its residual stream in fp32 under autocast, and only the layers "
   f"inside each branch run in low precision. The memory section below pays for this.")

# %% [markdown]
# ## Weights stay fp32
#
# The post says that PyTorch's AMP keeps two copies of the weights, an fp32 master copy and an
# fp16 working copy. That describes NVIDIA apex's `O2` mode, which converted the model itself
# to fp16 and kept fp32 master weights for the optimizer (apex documentation,
# <https://nvidia.github.io/apex/amp.html>). Native autocast keeps only the model's fp32
# weights: inside an autocast region each op that runs in low precision casts its fp32
# weight, and a cache keeps that cast for the rest of the region. After one training step
# under autocast, the parameters and their gradients:

# %%
x_tiny, y_tiny = tx[:, :, :8, :16].clone(), ty[:, :8, :16].clone()  # dtypes do not depend on size


def dtypes_after_step(dtype, dev):
    m = fresh_model().to(dev).train()
    x, y = x_tiny.to(dev), y_tiny.to(dev)
    with torch.autocast(dev.type, dtype=dtype):
        loss = nn.functional.cross_entropy(m(x), y, ignore_index=255)
    loss.backward()
    return at.parameter_and_grad_dtypes(m)


settings = [("cpu", torch.bfloat16), ("cpu", torch.float16)] + ([("cuda", torch.float16)] if device.type == "cuda" else [])
rows = []
for d, dt in settings:
    r = dtypes_after_step(dt, torch.device(d))
    rows.append((f"autocast {at.dtype_name(dt)} on {d}", ", ".join(f"{k}: {v}" for k, v in r["params"].items()),
                 ", ".join(f"{k}: {v}" for k, v in r["grads"].items())))
half_model = fresh_model().half() if device.type == "cuda" else fresh_model().cpu().half()
half_model(x_tiny.to(next(half_model.parameters()).device).half()).float().sum().backward()
r = at.parameter_and_grad_dtypes(half_model)
rows.append(("model.half()", ", ".join(f"{k}: {v}" for k, v in r["params"].items()),
             ", ".join(f"{k}: {v}" for k, v in r["grads"].items())))
md_table(rows, ["setting", "parameter dtypes (count)", "gradient dtypes (count)"])

# %% [markdown]
# Under autocast, in bf16 or fp16, every parameter and every gradient is fp32; the optimizer
# updates fp32 weights. With `.half()` the weights themselves are fp16, and so are their
# gradients and updates. Where that matters: an update smaller than half the spacing of fp16
# numbers at the weight's value disappears. Adam's steps are about the learning rate in size;
# a weight of 1 updated by a few of them:

# %%
from ampbook.formats import spacing

w = torch.tensor(1.0)
gap = float(spacing(torch.tensor(0.99), "fp16"))  # fp16's spacing just below 1
rows = []
for update in (lr, lr / 4, lr / 16):
    in_fp32 = float(w - update)
    in_fp16 = float((w.half() - torch.tensor(update).half()).float())
    rows.append((update, in_fp32, in_fp16, (1 - in_fp16) / update))
md_table(rows, ["update", "1 - update in fp32", "1 - update in fp16", "share of the update kept in fp16"],
         [".3g", ".8f", ".8f", ".0%"])

# %%
md(f"fp16's spacing just below 1 is {gap:g}: in fp16 an update is rounded to a multiple of it, so updates "
   f"below {gap / 2:g} vanish and larger ones are distorted. The fp32 weights that autocast keeps take every "
   f"update as it is.")

# %% [markdown]
# ### The casts, counted
#
# A `TorchDispatchMode` sees every dtype conversion autocast makes. Counting them for ERFNet's
# forward pass shows when the low-precision copies of the weights are made, and the small
# module below, which uses the same layer twice, shows the cache at work.

# %%
count_model = fresh_model().cpu().train()
xc = x_tiny  # the casts do not depend on the input's size
n_params = len(list(count_model.parameters()))
one = at.count_casts(count_model, xc, "cpu")
two_in_one = at.count_casts(count_model, xc, "cpu", forwards=2)
two_regions = at.count_casts(count_model, xc, "cpu", forwards=2, one_region=False)


class TwiceLinear(nn.Module):  # the same weight used twice in one forward
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)

    def forward(self, x):
        return self.lin(self.lin(x))


twice, xt = TwiceLinear(), torch.randn(8, 64)
cached = at.count_casts(twice, xt, "cpu")
uncached = at.count_casts(twice, xt, "cpu", cache_enabled=False)
fp32_weight_bytes = sum(p.numel() * 4 for p in count_model.parameters())
rows = [("ERFNet, 1 forward", one.parameter_casts, one.parameter_cast_bytes / 2**20, one.other_casts),
        ("ERFNet, 2 forwards in one region", two_in_one.parameter_casts, two_in_one.parameter_cast_bytes / 2**20,
         two_in_one.other_casts),
        ("ERFNet, 2 forwards, a region each", two_regions.parameter_casts, two_regions.parameter_cast_bytes / 2**20,
         two_regions.other_casts),
        ("Linear used twice, cache on", cached.parameter_casts, cached.parameter_cast_bytes / 2**20, cached.other_casts),
        ("Linear used twice, cache off", uncached.parameter_casts, uncached.parameter_cast_bytes / 2**20,
         uncached.other_casts)]
md_table(rows, ["forward pass (bf16 autocast, CPU)", "weight casts", "MiB of weight copies", "other casts"],
         [None, None, ".2f", None])

# %%
conv_params = sum(1 for m in count_model.modules() if isinstance(m, gs.LOW_PRECISION_LAYERS)
                  for p in m.parameters(recurse=False))
md(f"ERFNet has {n_params} parameter tensors ({fp32_weight_bytes / 2**20:.2f} MiB in fp32), {conv_params} of them "
   f"the weights and biases of its convolutions. Autocast casts {one.parameter_casts} tensors "
   f"({'exactly those' if one.parameter_casts == conv_params else 'not just those'}; batch norm takes its fp32 "
   f"parameters as they are), making {one.parameter_cast_bytes / 2**20:.2f} MiB of bf16 copies per region. A second forward in the "
   f"same region reuses them ({two_in_one.parameter_casts} casts for two passes); a new region casts again "
   f"({two_regions.parameter_casts}). The copies live as long as the region, and as long as the backward pass "
   f"needs them: they are temporary working copies, remade every step, not a second set of weights that is "
   f"kept and updated. The \"other casts\" are activations entering a low-precision op in fp32.")

# %%
bw = at.backward_dtypes(count_model, x_tiny, y_tiny, "cpu", torch.bfloat16)
conv_low = sum(n for (op, dt), n in bw.items() if op == "convolution_backward" and dt != "float32")
to_fp32 = bw.get(("_to_copy", "float32"), 0)
rows = [("weights kept in", "fp32 master + fp16 copy", ", ".join(sorted(at.parameter_and_grad_dtypes(count_model)["params"]))),
        ("low-precision weight copies", "kept alongside the master",
         f"made per autocast region ({one.parameter_casts} casts per ERFNet step), cached within it"),
        ("gradients", "fp16, applied to the fp32 copy",
         f"low precision inside the backward ({conv_low} bf16 tensors out of convolution_backward), "
         f"then {to_fp32} casts to fp32: every .grad is fp32"),
        ("loss scaling starts at", f"{claims['paper_initial_loss_scale']} (\"the paper suggests\")",
         f"2^{math.log2(defaults['init_scale']):g} (GradScaler's default; {claims['paper_initial_loss_scale']} was the "
         f"scale that was enough for SSD in the paper)")]
md_table(rows, ["", "the post", "measured here"])

# %% [markdown]
# ## Where the memory goes
#
# Parameters, gradients and Adam's two moment buffers are fp32 with or without autocast. What
# autocast shrinks is the set of tensors autograd keeps from the forward pass for the backward
# pass: each layer's inputs (and for batch norm its statistics). `ampbook.memory.SavedTensorMeter`
# counts those bytes with saved-tensor hooks, attributing them to the layer type running when
# they were saved; under autocast the low-precision weight copies are among them.

# %%
amp_dtype = at.default_dtype(device.type)
mem = {}
for h, w_ in memory_sizes:
    xm, ym = (crop_batch(h, w_, memory_batch_size) if h <= height and w_ <= width
              else load_batches(h, w_, 1, bs=memory_batch_size)[0][0])
    m = fresh_model().train()
    xm, ym = xm.to(device), ym.to(device)
    loss_fn = nn.CrossEntropyLoss(ignore_index=255)
    mem[(h, w_)] = {"fp32": at.saved_bytes(m, xm, ym, device.type, None, loss_fn),
                    "amp": at.saved_bytes(m, xm, ym, device.type, amp_dtype, loss_fn),
                    "pixels": ym.numel()}
    print(f"{memory_batch_size} x {h}x{w_}: fp32 {mem[(h, w_)]['fp32']['total_bytes'] / 2**20:.2f} MiB, "
          f"autocast {at.dtype_name(amp_dtype)} {mem[(h, w_)]['amp']['total_bytes'] / 2**20:.2f} MiB saved for backward")

# %%
big = max(mem, key=lambda k: mem[k]["pixels"])
f32, amp = mem[big]["fp32"], mem[big]["amp"]
types = sorted(set(f32["by_module_type"]) | set(amp["by_module_type"]), key=lambda t: -f32["by_module_type"].get(t, 0))
rows = [(t, f32["by_module_type"].get(t, 0) / 2**20, amp["by_module_type"].get(t, 0) / 2**20,
         amp["by_module_type"].get(t, 0) / f32["by_module_type"][t] if f32["by_module_type"].get(t) else None)
        for t in types]
rows.append(("total", f32["total_bytes"] / 2**20, amp["total_bytes"] / 2**20, amp["total_bytes"] / f32["total_bytes"]))
md_table(rows, ["saved by", "fp32 MiB", f"autocast {at.dtype_name(amp_dtype)} MiB", "ratio"], [None, ".3f", ".3f", ".2f"])

# %% mystnb={"figure": {"caption": "Bytes saved for the backward pass per layer type in one ERFNet step, fp32 against autocast, at the larger measured size. Blocks' own entries (Downsampler, NonBottleneck1D) are the functional ops in their forward: concatenations, ReLUs and residual sums.", "name": "fig-ch4-saved-bytes"}}
fig, ax = plt.subplots()
ypos = list(range(len(types)))
ax.barh([y - 0.2 for y in ypos], [f32["by_module_type"].get(t, 0) / 2**20 for t in types], height=0.4,
        label="fp32", **bar_style(0))
ax.barh([y + 0.2 for y in ypos], [amp["by_module_type"].get(t, 0) / 2**20 for t in types], height=0.4,
        label=f"autocast {at.dtype_name(amp_dtype)}", **bar_style(2))
ax.set_yticks(ypos, types)
ax.invert_yaxis()
ax.set_xlabel(f"MiB saved for backward ({memory_batch_size} images of {big[0]}x{big[1]})")
ax.legend()
plt.show()

# %% [markdown]
# Two things blur this table. In fp32 the convolutions save their weights as they are, which
# costs no memory (the weights exist anyway); under autocast they save low-precision copies,
# which are new memory made every step. And parts of the network stay fp32 (the downsamplers'
# concatenations and the encoder's residual stream, as the trace showed), as do the loss's
# inputs. Counting only the new memory, the saved bytes minus the parameters saved as they are:

# %%
def new_bytes(summary):
    return summary["total_bytes"] - summary["parameter_bytes"]


rows = [(f"{memory_batch_size} x {k[0]}x{k[1]}", mem[k]["fp32"]["parameter_bytes"] / 2**20,
         new_bytes(mem[k]["fp32"]) / 2**20, mem[k]["amp"]["parameter_bytes"] / 2**20, new_bytes(mem[k]["amp"]) / 2**20,
         new_bytes(mem[k]["amp"]) / new_bytes(mem[k]["fp32"])) for k in sorted(mem, key=lambda k: mem[k]["pixels"])]
md_table(rows, ["step", "fp32: parameters as they are", "fp32: new MiB", "autocast: parameters as they are",
                "autocast: new MiB (incl. weight copies)", "new-memory ratio"], [None, ".2f", ".2f", ".2f", ".2f", ".2f"])

# %% [markdown]
# To turn this into a prediction for a whole step, add the memory autocast does not change:
# for each parameter 4 bytes of weight, 4 of gradient and 8 of Adam state. The new saved bytes
# grow in proportion to the pixels per batch; a straight line through the two measured sizes
# extrapolates them.

# %%
n_weights = sum(p.numel() for p in fresh_model().parameters())
static = 16 * n_weights  # fp32 weight + fp32 gradient + Adam's two fp32 moments
(k1, k2) = sorted(mem, key=lambda k: mem[k]["pixels"])


def line(key):
    p1, p2 = mem[k1]["pixels"], mem[k2]["pixels"]
    b1, b2 = new_bytes(mem[k1][key]), new_bytes(mem[k2][key])
    slope = (b2 - b1) / (p2 - p1)
    return lambda p: b1 + slope * (p - p1)


fp32_line, amp_line = line("fp32"), line("amp")


def predicted_saving(pixels):
    return 1 - (static + amp_line(pixels)) / (static + fp32_line(pixels))


# the pixels per batch above which autocast's saved tensors take less memory than fp32's
p1 = mem[k1]["pixels"]
slope_f, slope_a = fp32_line(p1 + 1) - fp32_line(p1), amp_line(p1 + 1) - amp_line(p1)
crossover = (amp_line(0) - fp32_line(0)) / (slope_f - slope_a) if slope_f > slope_a else math.inf


post_saving = 1 - post["experiment"]["runs"]["amp"]["memory_gb"] / post["experiment"]["runs"]["no_amp"]["memory_gb"]
rows = [(f"{memory_batch_size} x {k[0]}x{k[1]} (measured)", mem[k]["pixels"], predicted_saving(mem[k]["pixels"]))
        for k in (k1, k2)]
rows.append((f"{cfg.batch_size} x {cfg.height}x{cfg.width} (runner default, extrapolated)", full_pixels,
             predicted_saving(full_pixels)))
rows.append(("the post (RTX 3070, size unstated)", None, post_saving))
display(md_table(rows, ["step", "pixels per batch", "predicted memory saving"], [None, None, ".1%"]))
below = [f"{memory_batch_size} x {k[0]}x{k[1]}" for k in (k1, k2) if mem[k]["pixels"] < crossover]
md(f"Each pixel of the batch costs {slope_f:,.0f} saved bytes in fp32 and {slope_a:,.0f} under autocast "
   f"({slope_a / slope_f:.0%}). The weight copies are a fixed cost on top, so autocast saves memory only above "
   f"about {crossover:,.0f} pixels per batch; below that it costs memory"
   + (f", as in the measured step{'s' if len(below) > 1 else ''} {' and '.join(below)}." if below else "."))

# %% mystnb={"figure": {"caption": "Predicted saving of a training step's memory (saved tensors plus fp32 weights, gradients and Adam state) against pixels per batch, extrapolated linearly from two measured sizes; the horizontal line is the post's measured 25%.", "name": "fig-ch4-saving"}}
grid = [2 ** k for k in range(10, 25)]
fig, ax = plt.subplots(figsize=(7.0, 3.4))
ax.plot(grid, [predicted_saving(p) for p in grid], label="predicted (saved tensors + fp32 state)", markersize=3,
        **series_style(1))
ax.scatter([mem[k]["pixels"] for k in (k1, k2)], [predicted_saving(mem[k]["pixels"]) for k in (k1, k2)],
           color="black", zorder=3, label="measured sizes")
ax.axhline(post_saving, color="black", linestyle=":", label="the post (2.5 GB vs 3.3 GB)")
ax.set_xscale("log", base=2)
ax.set_xlabel("pixels per batch")
ax.set_ylabel("memory saved by autocast")
ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
ax.legend(fontsize=8)
plt.show()

# %%
limit = 1 - amp_line(2**30) / fp32_line(2**30)
md(f"At large batches the fp32 state stops mattering and the saving approaches that of the saved tensors alone, "
   f"{limit:.1%} here" + (": less than the 50% that halving every saved tensor would give, because of the fp32 "
                          "parts above. " if limit < 0.5 else ". ")
   + f"The post measured {post_saving:.1%} (from {post['experiment']['runs']['no_amp']['memory_gb']} GB to "
   f"{post['experiment']['runs']['amp']['memory_gb']} GB; it does not say how it measured memory, and tools such as "
   f"nvidia-smi also count the CUDA context and the allocator's cache); the prediction at the runner's default "
   f"size is {predicted_saving(full_pixels):.1%}. The prediction leaves out cuDNN's workspaces, the allocator's "
   f"rounding and whatever else a real step keeps alive at its peak.")

# %% [markdown]
# ### Measured on a GPU
#
# The training runner records the CUDA allocator's peak for each epoch
# (`cuda_max_allocated_bytes`, see `data/results/README.md`). When `data/results` holds an fp32
# run and an fp16 autocast run on CUDA with the same size and batch, their peaks give the
# measured saving:

# %%
import json

from ampbook.paths import RESULTS_DIR
from ampbook.train import load_results

gpu_runs = {}
for path in sorted(RESULTS_DIR.rglob("*.json")):
    try:
        rec_ = load_results(path)
    except (ValueError, json.JSONDecodeError, KeyError):
        continue
    peak = rec_.get("summary", {}).get("max_cuda_allocated_bytes")
    if peak and str(rec_["resolved"]["device"]).startswith("cuda"):
        c = rec_["config"]
        gpu_runs.setdefault((c["height"], c["width"], c["batch_size"]), {})[c["precision"]] = (peak, path.name)
rows = []
for (h, w_, b), by_prec in sorted(gpu_runs.items()):
    if "fp32" in by_prec and "amp-fp16" in by_prec:
        pf, pa = by_prec["fp32"][0], by_prec["amp-fp16"][0]
        rows.append((f"{b} x {h}x{w_}", pf / 2**30, pa / 2**30, 1 - pa / pf, predicted_saving(b * h * w_)))
if rows:
    display(md_table(rows, ["step", "fp32 peak GiB", "amp-fp16 peak GiB", "measured saving", "predicted saving"],
                     [None, ".2f", ".2f", ".1%", ".1%"]))
else:
    display(md("No pair of CUDA runs (fp32 and amp-fp16 at one size) is in `data/results` yet: run "
               "`python -m ampbook.train --precision fp32` and `--precision amp-fp16` on a GPU to fill this table."))

# %% [markdown]
# ## Summary
#
# - ERFNet's activation gradients sit many binades below its weight gradients, and they move
#   further down as the pixels per batch grow, because the loss averages over pixels. At this
#   chapter's sizes few of them fall below fp16's 2⁻²⁴; at full Cityscapes sizes many more do.
# - Loss scaling shifts the whole histogram by log2 of the scale. A fixed scale must sit below
#   the overflow point and above the underflow point and has no safety net; `GradScaler` starts
#   high (2¹⁶), halves on overflow and skips that step, and grows again after clean steps.
# - Autocast picks a dtype per op, not per layer or model: convolutions and matmuls in low
#   precision, a list of ops in fp32, everything else in its inputs' dtype. CPU and CUDA differ:
#   CUDA forces reductions, softmax and exponentials to fp32, CPU does not. ERFNet's
#   concatenations and residual sums keep part of the network in fp32.
# - Parameters and gradients stay fp32 under autocast; low-precision weight copies are made per
#   region and cached within it. Only `.half()` makes the weights themselves fp16.
# - The memory autocast saves is in the tensors saved for backward, and less than half of them
#   because of the fp32 parts; the fp32 weights, gradients and optimizer state dilute it further.
#
# ## Exercises
#
# 1. Rerun the chapter with `height=128, width=256` (or the gpu profile on a GPU). How far does
#    the activation histogram move, and does the fraction below 2⁻²⁴ at scale 1 follow the
#    estimate made from the shift?
# 2. Replace the loss's mean by a sum over pixels (`reduction="sum"`). What happens to the
#    histograms, and which loss scale would you need then?
# 3. Use `at.probe_ops("cuda", names=(...))` to check an op your own model uses. Is it in the
#    documented lists? Does it behave as they say?
# 4. Change ERFNet's downsampler so that the max-pool branch runs in low precision (cast its
#    output with `.to(conv_out.dtype)`). Trace again: how much of the network now runs in low
#    precision, and how much memory does the saved-tensor table show?
# 5. Train with `GradScaler(growth_interval=1)`. How often does it skip steps, and why is
#    PyTorch's default interval so long?
