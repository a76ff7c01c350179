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
# # The RTX 3070 result, reproduced and explained
#
# The blog post this book grew from trained ERFNet on Cityscapes on a GeForce RTX 3070,
# with and without automatic mixed precision. AMP saved about a quarter of the GPU
# memory and no time at all, and the post left the reason open. This chapter weighs two
# explanations against each other: the DataLoader set the pace of every epoch, or the
# 2020 software ran fp16 slowly on the 3070's chip. It says what each one predicts and
# which measurement tells them apart, computes what the GPU could do at best from the
# network itself (a per-layer cost model held against the 3070's published ceilings),
# measures the input pipeline on the machine you run it on, and reads GPU runs committed
# to the book as the test.
#
# **What you will learn**
#
# - how to count the FLOPs and bytes of every layer of a network, forward and backward,
#   without running it, and turn them into a lower bound on the step time (a roofline);
# - why a lower bound below a measured time decides nothing by itself, and what kernel
#   efficiency turns it into a range;
# - how to recover an unstated training setting from two memory figures;
# - how to tell whether the GPU or the DataLoader bounds an epoch, and why AMP cannot
#   speed up an epoch the DataLoader bounds;
# - a checklist for the reader whose AMP gives no speedup, with the measured effect of
#   each item where this book can measure it.
#
# **What you need**: the training runner of the AMP training chapter, the timing helpers
# of the tensor-core chapter, and about two minutes of CPU. Nothing here needs a GPU;
# GPU runs committed under `data/results/` appear beside this machine's when there are
# any.

# %% tags=["parameters"]
device = "auto"  # where this machine's runs and checks go: "auto", "cpu" or "cuda"
precision = "amp-fp16"  # the mixed precision the post used, modelled on the GPUs
run_precisions = ["fp32", "amp-bf16"]  # this machine's runs (AMP on a CPU: bf16)
run_height = 128  # this machine's training runs: image height (ERFNet downsamples by 8)
run_width = 256  # and width
batch_size = 1  # this machine's runs: images per step
num_epochs = 2  # this machine's runs: epochs
run_train_images = 2  # synthetic training images of this machine's runs
run_val_images = 1  # synthetic validation images
run_workers = 0  # DataLoader workers of this machine's runs
sensitivity = [[256, 512, 6]]  # more (height, width, batch) settings for the model
loader_images = 4  # full-size (2048x1024) synthetic images the loader benchmark reads
loader_workers = [0, 1]  # DataLoader workers measured (0 gives the per-image cost)
loader_passes = 2  # passes per worker count (the first starts the workers)
host_cores = 8  # assumed cores of the post's PC (the post does not say)
check_height = 64  # timed steps, memory lines (low precision is slow here): height
check_width = 128  # and width
check_batch = 1  # and batch
check_repeats = 7  # rounds of the timed steps (the variants take turns)
checklist_height = 64  # size of the checklist's step timings (on `device`)
checklist_width = 128  # and width
checklist_batches = [1, 2]  # batch sizes compared in the checklist
results_dir = ""  # folder of committed GPU results (empty: data/results)

# %%
from ampbook.env import print_environment

print_environment(device)

# %%
from ampbook import params
from ampbook.precision import PRECISIONS

params.device("device", device)
params.choice("precision", precision, PRECISIONS[1:])
for name in ("run_height", "run_width", "check_height", "check_width",
             "checklist_height", "checklist_width"):
    v = params.integer(name, globals()[name], minimum=8)
    params.rule(name, v, v % 8 == 0, "must be a multiple of 8",
                why="ERFNet downsamples by 8")
for name in ("check_height", "check_width"):
    params.rule(name, globals()[name], globals()[name] % 16 == 0,
                "must be a multiple of 16", why="the memory line runs at half size")
params.integers("loader_workers", loader_workers, minimum=0)
params.rule("loader_workers", loader_workers, 0 in loader_workers, "must include 0",
            why="the 0-worker rate is the per-image cost")
params.integers("checklist_batches", checklist_batches, minimum=1, count=2)
params.integer("check_repeats", check_repeats, minimum=1)
run_precisions = params.rule("run_precisions", run_precisions, lambda v: "fp32" in v
            and len(v) == 2, "must be fp32 and one AMP precision")
for name in ("batch_size", "num_epochs", "run_train_images", "run_val_images",
             "loader_images", "loader_passes", "host_cores", "check_batch"):
    params.integer(name, globals()[name], minimum=1)
params.integer("run_workers", run_workers, minimum=0)
params.rule("sensitivity", sensitivity, lambda v: all(
    params.shape("sensitivity", s) and s[0] % 8 == 0 and s[1] % 8 == 0 for s in v),
    "must be a list of [height, width, batch], sizes multiples of 8")
params.folder("results_dir", results_dir, empty="data/results")

# %%
import inspect

import matplotlib.pyplot as plt
import numpy as np
import torch
from myst_nb import glue

from ampbook import costmodel as cm
from ampbook.bench_loader import measure_loader
from ampbook.bench_matmul import load_verdict
from ampbook.bench_step import step_rounds
from ampbook.data import NUM_CLASSES
from ampbook.devices import attainable_tflops, load_devices
from ampbook.env import pick_device
from ampbook.layer_profile import ceilings_for
from ampbook.memory import fit_line, saved_for_backward
from ampbook.model import ERFNet
from ampbook.paths import load_reference
from ampbook.plots import bar_style, md_table, series_style, use_style
from ampbook.precision import autocast_dtype, native_cpu_flags
from ampbook.results import load_results_dir, summarise_run
from ampbook.synthetic import synthetic_root
from ampbook.timing import machine_load, time_elementwise, time_matmul
from ampbook.train import TrainConfig, run_training

# %%
use_style()
device = pick_device(device)
post, devices = load_reference("seed_post"), load_devices()
amp_post, fp32_post = (post["experiment"]["runs"][k] for k in ("amp", "no_amp"))
n_img, default = post["cityscapes"]["train_images"], post["assumed_setting"]
results = load_results_dir(results_dir or None)
load = machine_load()
print(f"device {device};", load_verdict(load, device.type))

# %% [markdown]
# ## The post's numbers
#
# The post's table, as data with its provenance (`data/reference/seed_post.yml`). The
# post calls its time the average training time; the book reads it as seconds per epoch
# of the {glue:text}`ch5_n_img` Cityscapes training images, and its memory as GPU memory
# as a monitor reports it. Both readings are the book's.

# %% tags=["hide-input"]
post_speedup = fp32_post["time_s"] / amp_post["time_s"]
post_mem = amp_post["memory_gb"] / fp32_post["memory_gb"]
for k, v in {"n_img": n_img, "post_speedup": post_speedup, "post_mem": post_mem,
             "post_img_s": n_img / fp32_post["time_s"]}.items():
    glue(f"ch5_{k}", v, display=False)
md_table([("AMP", amp_post["time_s"], amp_post["memory_gb"]),
          ("fp32 (no AMP)", fp32_post["time_s"], fp32_post["memory_gb"])],
         ["run", "time (s)", "memory (GB)"], [None, ".4g", ".3g"])

# %% [markdown]
# AMP ran at {glue:text}`ch5_post_speedup:.3f` times fp32's speed (below 1: slower) and
# took {glue:text}`ch5_post_mem:.2f` of its memory. The fp32 epoch is
# {glue:text}`ch5_post_img_s:.1f` images per second. The post ran PyTorch 1.7.1 with
# CUDA 11 and cuDNN 8 on the 3070, without shuffling, and gives neither the image size,
# nor the batch size, nor the number of DataLoader workers.
#
# ## The setting the post did not state
#
# The defaults of ERFNet's authors' training script are
# {glue:text}`ch5_def_w`x{glue:text}`ch5_def_h` images, {glue:text}`ch5_def_b` per batch
# and {glue:text}`ch5_def_workers` workers (E. Romera, *ERFNet PyTorch training code*,
# `train/main.py`, https://github.com/Eromera/erfnet_pytorch). They are an assumption,
# not the post's. The post's two memory figures can test it.
#
# What AMP shrinks is what autograd keeps for the backward pass. Counted as *new* bytes
# (parameters saved by reference cost nothing; autocast's fp16 weight copies do), it is
# close to a straight line in the pixels of a batch: a fixed part (the weight copies)
# plus bytes per pixel. `ampbook.memory.saved_for_backward` counts them in one training
# forward with real tensors, at two small sizes, and `fit_line` draws the line:

# %%
mem_model = ERFNet(num_classes=NUM_CLASSES)
two = [(check_height // 2, check_width // 2), (check_height, check_width)]
saved = {p: [(h * w, saved_for_backward(
    mem_model, torch.randn(1, 3, h, w), torch.zeros(1, h, w, dtype=torch.long),
    dtype=autocast_dtype(p))["new_bytes"]) for h, w in two]
    for p in ("fp32", precision)}
lines = {p: fit_line(points) for p, points in saved.items()}
md_table([(p, ln.intercept / 1e6, ln.slope) for p, ln in lines.items()],
         ["precision", "fixed (MB)", "bytes per pixel"], [None, ".2f", ".0f"])

# %% [markdown]
# At the authors' defaults the fp32 line gives {glue:text}`ch5_def_saved:.2f` GB of
# activations, more than the post's whole {glue:text}`ch5_fp32_gb` GB. The post trained
# at fewer pixels per batch.
#
# A monitor's figure is the activations (times the caching allocator's slack) plus a
# part that does not depend on the batch: the CUDA context, cuDNN's workspace, weights,
# gradients and Adam's state. The fixed part is the same in both runs, so the
# *difference* of the two figures fixes the pixels per batch, and then the fp32 figure
# fixes the fixed part (`ampbook.costmodel.solve_pixels`). The post's figures are
# rounded to 0.1 GB, so the difference lies between 0.7 and 0.9 GB; the allocator's
# slack between {glue:text}`ch5_slack_lo` and {glue:text}`ch5_slack_hi` (peak reserved
# over peak allocated in
# [pytorch/pytorch#40989](https://github.com/pytorch/pytorch/issues/40989)).

# %% tags=["hide-input"]
fixed_src = post["memory_fixed_part"]
default_px = default["batch_size"] * default["height"] * default["width"]
glue("ch5_def_saved", lines["fp32"](default_px) / 1e9, display=False)
gb32 = fp32_post["memory_gb"]
solves = [(d, s, cm.solve_pixels(lines["fp32"], lines[precision], gb32 * 1e9,
                                 (gb32 - d) * 1e9, s))
          for d in (0.7, 0.8, 0.9) for s in fixed_src["allocator_slack"]]
md_table([(d, s, r["pixels"] / 1e6, r["pixels"] / 1024 / 512, r["pixels"] / 512 / 256,
           r["fixed_bytes"] / 1e9) for d, s, r in solves],
         ["difference (GB)", "slack", "Mpixels per batch", "= batch at 1024x512",
          "= batch at 512x256", "fixed part (GB)"],
         [".1f", ".2f", ".2f", ".1f", ".1f", ".2f"])

# %%
mid = solves[2][2]  # difference 0.8 GB, no slack
batch_likely = max(1, round(mid["pixels"] / (default["height"] * default["width"])))
B, H, W = batch_likely, default["height"], default["width"]
fixed = [r["fixed_bytes"] / 1e9 for _, _, r in solves]
ctx = fixed_src["cuda_context_gb"]

# %% tags=["hide-input"]
for k, v in {"def_h": default["height"], "def_w": default["width"],
             "def_b": default["batch_size"], "def_workers": default["workers"],
             "fp32_gb": gb32, "slack_lo": fixed_src["allocator_slack"][0],
             "slack_hi": fixed_src["allocator_slack"][1], "B": B, "H": H, "W": W,
             "fixed_lo": min(fixed), "fixed_hi": max(fixed), "ctx_lo": ctx[0],
             "ctx_hi": ctx[1], "mpx_lo": min(r["pixels"] for *_, r in solves) / 1e6,
             "mpx_hi": max(r["pixels"] for *_, r in solves) / 1e6}.items():
    glue(f"ch5_{k}", v, display=False)

# %% [markdown]
# Every row asks for {glue:text}`ch5_mpx_lo:.1f` to {glue:text}`ch5_mpx_hi:.1f` million
# pixels per batch, and leaves a fixed part of {glue:text}`ch5_fixed_lo:.2f` to
# {glue:text}`ch5_fixed_hi:.2f` GB. That is what a CUDA context alone took before CUDA
# 11.7 loaded kernels lazily: {glue:text}`ch5_ctx_lo` to {glue:text}`ch5_ctx_hi` GB in
# [pytorch/pytorch#28113](https://github.com/pytorch/pytorch/issues/28113),
# [#28394](https://github.com/pytorch/pytorch/issues/28394) and
# [#107667](https://github.com/pytorch/pytorch/issues/107667) (cuDNN's workspace comes
# on top, weights and Adam's state are tens of MB). The figures fit, and the authors'
# batch of {glue:text}`ch5_def_b` at their resolution does not.
#
# The memory fixes the pixels of a batch, not how they split: batch {glue:text}`ch5_B`
# at {glue:text}`ch5_W`x{glue:text}`ch5_H`, or four times the batch at half the width
# and height. Keeping the script's resolution and lowering its batch flag is the smaller
# change, so the chapter takes batch {glue:text}`ch5_B` at
# {glue:text}`ch5_W`x{glue:text}`ch5_H` as the likely setting, and shows the headline
# numbers at the other candidates and at the authors' defaults further down.
#
# ## Two explanations, and what tells them apart
#
# **(a) The loader bounds the epoch.** Every image is a 2048x1024 PNG that a CPU core
# must decode and resize, and the DataLoader's workers may deliver fewer images per
# second than the GPU trains. Then the GPU waits, and an AMP step that is faster only
# waits longer. *Predicts*: equal fp32 and AMP epochs; a step timed alone (the data
# already on the GPU) is faster with AMP; the time spent waiting for data is most of the
# loop.
#
# **(b) The 2020 software ran fp16 slowly on the 3070.** The 3070's GA104 chip is
# compute capability 8.6. In late 2020, users reported convolutions on RTX 30 cards
# running slower than on the previous generation with PyTorch 1.7 and cuDNN 8.0
# ([pytorch/pytorch#47039](https://github.com/pytorch/pytorch/issues/47039),
# [#45578](https://github.com/pytorch/pytorch/issues/45578)), compared builds for sm_86
# against the sm_80 binaries
# ([#46158](https://github.com/pytorch/pytorch/issues/46158)), and found AMP training
# slower after upgrading from PyTorch 1.6 to 1.7
# ([#47056](https://github.com/pytorch/pytorch/issues/47056)). The hypothesis: the
# post's PyTorch 1.7.1 binaries and cuDNN 8.0 had no tuned fp16 kernels for this chip.
# *Predicts*: a step timed alone is no faster, or slower, with AMP; per-kernel profiling
# shows the fp16 convolutions slower than the fp32 ones.
#
# The two are not exclusive. Step-only timing tells them apart (a predicts AMP's step
# faster, b slower); per-kernel profiling shows where the time goes; the runner records
# the data wait. A user with an RTX 3070, PyTorch 1.7, CUDA 11.1 and cuDNN 8 measured
# all three in [pytorch/pytorch#46377](https://github.com/pytorch/pytorch/issues/46377)
# (comment of 2020-11-24):

# %% tags=["hide-input"]
ev = post["published_evidence"]["rtx3070_amp_issue"]
keys = {"epoch_s": "epoch (s)", "epoch_s_no_loader": "its steps alone (s)",
        "epoch_s_no_loader_benchmark": "its steps alone, cudnn.benchmark (s)",
        "step_s_no_loader": "one step alone (s)",
        "step_s_no_loader_benchmark": "one step alone, cudnn.benchmark (s)",
        "memory_gb_no_loader": "memory, steps alone (GB)"}
rows = [(label, ev[k]["fp32"], ev[k]["amp"], ev[k]["fp32"] / ev[k]["amp"])
        for k, label in keys.items()]
md_table(rows, ["#46377, RTX 3070", "fp32", "AMP", "fp32 / AMP"],
         [None, ".3g", ".3g", ".2f"])

# %%
ev_step = ev["step_s_no_loader"]["fp32"] / ev["step_s_no_loader"]["amp"]
ev_epoch = ev["epoch_s"]["fp32"] / ev["epoch_s"]["amp"]
ev_wait = 1 - ev["epoch_s_no_loader"]["amp"] / ev["epoch_s"]["amp"]
print(cm.hypotheses_verdict(ev_step, ev_epoch, ev_wait))
for k, v in {"ev_wait": ev_wait, "ev_steps_s": ev["epoch_s_no_loader"]["amp"],
             "ev_epoch_s": ev["epoch_s"]["amp"], "ev_slow_hi": 1 / ev_step,
             "ev_slow_lo": ev["step_s_no_loader_benchmark"]["amp"]
             / ev["step_s_no_loader_benchmark"]["fp32"]}.items():
    glue(f"ch5_{k}", v, display=False)

# %% [markdown]
# On that card both held: the steps of an AMP epoch took {glue:text}`ch5_ev_steps_s` s
# without the loader and the whole epoch {glue:text}`ch5_ev_epoch_s` s, so at least
# {glue:text}`ch5_ev_wait:.0%` of the AMP epoch was spent on data, while the AMP step
# itself was {glue:text}`ch5_ev_slow_lo:.1f` to {glue:text}`ch5_ev_slow_hi:.1f` times
# slower than fp32's (with and without `cudnn.benchmark`). The verdict above comes from
# `ampbook.costmodel.hypotheses_verdict`, which reads any GPU pair the same way (the
# book's own GPU runs further down). It is another user's model on the same card and
# software, not the post's: it shows both mechanisms were real in 2020, not which one
# set the post's epoch.
#
# ## A cost model of ERFNet
#
# How fast could the 3070 train ERFNet at best? `ampbook.costmodel.trace_step` runs one
# training step (forward, loss, backward) on *fake* tensors: PyTorch dispatches every
# operator with its real shapes and dtypes but allocates and computes nothing, so the
# post's setting costs seconds of CPU. For each operator it counts the FLOPs
# (convolutions exactly, two per multiply-add; a rough count per element for the rest)
# and the bytes moved (every input, weight and output at its dtype's size), and
# attributes it to the innermost layer that launched it. Mixed precision is traced under
# `torch.autocast`, so the dtypes are autocast's own.

# %%
model = ERFNet(num_classes=NUM_CLASSES)
traces = {p: cm.trace_step(model, B, H, W, p) for p in ("fp32", precision)}
tot = {p: t.totals() for p, t in traces.items()}
md_table([(p, t["forward_flops"] / 1e9, t["backward_flops"] / 1e9, t["bytes"] / 1e9,
           int(t["kernels"]), t["flops"] / t["bytes"]) for p, t in tot.items()],
         ["precision", "forward GFLOP", "backward GFLOP", "GB moved", "kernels",
          "FLOP per byte"], [None, ".0f", ".0f", ".1f", None, ".1f"])

# %% tags=["hide-input"]
tf, ta = tot["fp32"], tot[precision]
for k, v in {"bwd_fwd": tf["backward_flops"] / tf["forward_flops"],
             "bytes_ratio": ta["bytes"] / tf["bytes"],
             "kernel_ratio": ta["kernels"] / tf["kernels"],
             "extra_kernels": int(ta["kernels"] - tf["kernels"])}.items():
    glue(f"ch5_{k}", v, display=False)

# %% [markdown]
# A step costs the same FLOPs in every precision; the backward pass
# {glue:text}`ch5_bwd_fwd:.2f` times the forward's (an input and a weight gradient per
# convolution, none for the image). AMP moves {glue:text}`ch5_bytes_ratio:.2f` times
# fp32's bytes, not half, and launches {glue:text}`ch5_kernel_ratio:.2f` times as many
# kernels ({glue:text}`ch5_extra_kernels` more): autocast casts each convolution's
# weight to fp16 every step, and the weight gradients back.
#
# Each operator then meets the roofline. It cannot finish before its FLOPs are done at
# the peak for its dtype, nor before its bytes have moved at the memory bandwidth: its
# time is *at least* the larger of the two. This is the whole model:

# %%
print(inspect.getsource(cm.op_time))

# %% [markdown]
# Summed over the operators (they run one after another), plus Adam's update at the
# bandwidth, that is a **lower bound** on the step: `Prediction.min_step_s`. Real
# kernels reach a fraction of each ceiling, so a real step takes longer; how much longer
# is the kernels' *efficiency*, which only a measurement gives.
#
# ### Where autocast leaves ERFNet in fp32
#
# Autocast runs convolutions in fp16 and lets most other operators follow their inputs.
# ERFNet's residual blocks end in `relu(branch + input)`: when the input is fp32, type
# promotion makes the sum fp32, and the next block starts from fp32 again. The forward
# operators that still compute in fp32 under autocast, by layer type:

# %% tags=["hide-input"]
fwd = traces[precision].select("forward")
fp32_ops = {}
for o in (o for o in fwd if o.dtype == "float32"):
    fp32_ops[(o.scope_type, o.op)] = fp32_ops.get((o.scope_type, o.op), 0.0) + o.bytes
fwd_bytes = sum(o.bytes for o in fwd)
rows = sorted(((*k, v / 1e9, v / fwd_bytes) for k, v in fp32_ops.items()),
              key=lambda r: -r[2])
md_table(rows[:8], ["layer type", "operator", "GB", "share of forward bytes"],
         [None, None, ".2f", ".0%"])

# %%
part = {s: [o for o in fwd if o.scope.startswith(s)] for s in ("encoder", "decoder")}
share = {s: sum(o.bytes for o in ops if o.dtype == "float32")
         / sum(o.bytes for o in ops) for s, ops in part.items()}
cuda_fwd = cm.trace_step(model, B, H, W, precision, backward=False, device_type="cuda")
over = tot[precision]["forward_bytes"] / cuda_fwd.totals()["forward_bytes"] - 1
for k, v in {"enc_fp32": share["encoder"], "dec_fp32": share["decoder"],
             "cpu_over": over}.items():
    glue(f"ch5_{k}", v, display=False)

# %% [markdown]
# Under AMP, {glue:text}`ch5_enc_fp32:.0%` of the encoder's forward bytes and
# {glue:text}`ch5_dec_fp32:.0%` of the decoder's belong to fp32 operators. The first
# downsampler concatenates its fp16 convolution with a max-pool of the fp32 image, so
# its output is fp32; the encoder's residual sums keep it so, and every encoder
# convolution casts its fp32 input to fp16 first. The decoder starts from fp16
# transposed convolutions and stays in fp16.
#
# The trace runs on the CPU, so the autocast it sees is the CPU's. A forward trace on
# fake *CUDA* tensors (CUDA's autocast, no GPU needed) gives every convolution the same
# dtype; the CPU trace has a few extra casts, {glue:text}`ch5_cpu_over:.1%` more forward
# bytes, in the direction that makes AMP look slower.
#
# ### The 3070's ceilings and the bound
#
# fp32 convolutions may run on TF32 tensor cores: `torch.backends.cudnn.allow_tf32` has
# been on by default since TF32 arrived in PyTorch 1.7, the post's version, and
# `torch.backends.cuda.matmul.allow_tf32` was on by default from 1.7 to 1.11 (PyTorch
# documentation, *CUDA semantics: TensorFloat-32 (TF32) on Ampere (and later) devices*,
# <https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-devices>).
# So "fp32 as in the post" means TF32 on; strict fp32 is shown beside it. On a GeForce
# Ampere card TF32 runs at the fp32 rate (the device table of the tensor-core chapter),
# so the two bounds agree on the 3070; fp16 with fp32 accumulation (autocast's
# convolutions) has twice the peak.

# %% tags=["hide-input"]
gpu = devices["rtx3070-desktop"]
rtx = cm.Ceilings.from_device(gpu)  # TF32 on for cuDNN convolutions: PyTorch's default
strict = cm.Ceilings.from_device(gpu, tf32=False)
md_table([("fp32 convolutions, TF32 on / strict", f"{rtx.mma_tflops['float32']} / "
           f"{strict.mma_tflops['float32']} TFLOP/s"),
          ("fp16 convolutions, fp32 accum.", f"{rtx.mma_tflops['float16']} TFLOP/s"),
          ("everything else (fp32 CUDA cores)", f"{rtx.vector_tflops} TFLOP/s"),
          ("memory bandwidth", f"{rtx.bandwidth_gbs} GB/s")], [gpu.name, "ceiling"])

# %%
pred = {"fp32 (TF32 on, as in the post)": cm.predict(traces["fp32"], rtx),
        "fp32 (strict)": cm.predict(traces["fp32"], strict),
        precision: cm.predict(traces[precision], rtx)}
p32, pamp = pred["fp32 (TF32 on, as in the post)"], pred[precision]
md_table([(k, p.min_step_s * 1e3, p.compute_only_s * 1e3, p.memory_only_s * 1e3,
           p.memory_bound_share, p.min_epoch_s(n_img)) for k, p in pred.items()],
         ["precision", "step, at least (ms)", "FLOPs alone (ms)", "bytes alone (ms)",
          "time memory-bound", "epoch, at least (s)"],
         [None, ".1f", ".1f", ".1f", ".0%", ".1f"])

# %%
model_speedup = p32.min_step_s / pamp.min_step_s
print(cm.bound_verdict(pamp.min_epoch_s(n_img), amp_post["time_s"],
                       "the post's AMP epoch"))
for k, v in {"model_speedup": model_speedup, "min_fp32": p32.min_epoch_s(n_img),
             "min_amp": pamp.min_epoch_s(n_img), "mem_share": pamp.memory_bound_share,
             "need_eff": pamp.efficiency_of(amp_post["time_s"] * B / n_img),
             "tensor_ratio": gpu.tensor_over_fp32}.items():
    glue(f"ch5_{k}", v, display=False)

# %% [markdown]
# At batch {glue:text}`ch5_B`, the 3070 needs **at least** {glue:text}`ch5_min_fp32:.0f`
# s for an fp32 epoch and {glue:text}`ch5_min_amp:.0f` s for an AMP one: the bound's
# speedup is {glue:text}`ch5_model_speedup:.2f`x, far from the tensor cores'
# {glue:text}`ch5_tensor_ratio:.0f`x, because {glue:text}`ch5_mem_share:.0%` of the AMP
# step is in memory-bound operators, which gain only where their bytes shrink. A bound
# below the post's epochs does not show that something other than the GPU set the pace:
# kernels running at {glue:text}`ch5_need_eff:.0%` of the roofline would take the post's
# AMP epoch on their own. The measured efficiency of real kernels (below: this CPU's,
# and a GPU's profile when one is committed) turns the bound into a range.
#
# Which layers are memory-bound: per layer type, the bound in each precision and the
# share of it spent below the ridge point.

# %% tags=["hide-input"]
by_type = {k: {r["type"]: r for r in pred[k].by_type()}
           for k in ("fp32 (TF32 on, as in the post)", precision)}
rows = [(t, r["modules"], r["time_s"] * 1e3, a["time_s"] * 1e3,
         r["time_s"] / a["time_s"], r["memory_bound_s"] / r["time_s"],
         a["memory_bound_s"] / a["time_s"])
        for t, r in by_type["fp32 (TF32 on, as in the post)"].items()
        if (a := by_type[precision].get(t)) and r["time_s"] > 1e-5 and a["time_s"] > 0]
md_table(rows, ["layer (functional ops go to their block)", "count", "fp32 ms",
                f"{precision} ms", "speedup", "memory-bound (fp32)",
                f"memory-bound ({precision})"],
         [None, None, ".1f", ".1f", ".2f", ".0%", ".0%"])

# %% tags=["hide-input"] mystnb={"figure": {"caption": "ERFNet's layers on the RTX 3070 roofline at the likely setting: each point is one layer's forward and backward work (FLOPs over bytes on the x axis, FLOPs over the bound's time on the y axis). Lines: the fp32 (TF32) and fp16 ceilings; left of a ridge a layer is memory-bound.", "name": "fig-ch5-roofline"}}
fig, ax = plt.subplots()
xs = np.logspace(-1, 3, 200)
for i, dt in enumerate(("float32", "float16")):
    roof = [attainable_tflops(x, rtx.mma_tflops[dt], rtx.bandwidth_gbs) for x in xs]
    ax.plot(xs, roof, color="black", linestyle=series_style(i)["linestyle"],
            label=f"{dt} ceiling")
for i, (label, pr) in enumerate((("fp32", p32), (precision, pamp))):
    rs = [r for r in pr.by_scope() if r["flops"] > 0 and r["time_s"] > 0]
    st = series_style(i + 1)
    ax.scatter([r["intensity"] for r in rs],
               [r["flops"] / r["time_s"] / 1e12 for r in rs],
               s=14, marker=st["marker"], color=st["color"], label=label)
ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP per byte)",
       ylabel="TFLOP/s (at the bound)")
ax.legend()
plt.show()

# %% [markdown]
# ### The headline numbers at every candidate setting
#
# The model costs a second per setting, so it runs at each candidate: the likely
# setting, the same pixels at half the resolution, the authors' defaults, and the
# `sensitivity` parameter's. For each: the modelled memory (the fixed part from the
# solution above plus the activation lines), and the bounds.

# %%
cands = [(H, W, B), (H // 2, W // 2, 4 * B), (H, W, default["batch_size"])]
cands += [tuple(s) for s in sensitivity if tuple(s) not in cands]
fix_gb = mid["fixed_bytes"] / 1e9
headline = []
for h, w, b in cands:
    pp = {p: cm.predict(cm.trace_step(model, b, h, w, p), rtx)
          for p in ("fp32", precision)}
    gb = {p: fix_gb + lines[p](b * h * w) / 1e9 for p in pp}
    headline.append((f"{w}x{h}", b, gb["fp32"], gb[precision],
                     pp["fp32"].min_epoch_s(n_img), pp[precision].min_epoch_s(n_img),
                     pp["fp32"].min_step_s / pp[precision].min_step_s))

# %% tags=["hide-input"]
md_table(headline, ["image (W x H)", "batch", "fp32 GB (model)", "AMP GB (model)",
                    "fp32 epoch, at least (s)", "AMP epoch, at least (s)",
                    "bound's speedup"],
         [None, None, ".2f", ".2f", ".1f", ".1f", ".2f"])

# %% [markdown]
# The post measured {glue:text}`ch5_fp32_gb` GB and {glue:text}`ch5_post_mem:.2f` of it
# with AMP. At the authors' defaults the model's memory is far above both; the two
# candidates with the solved pixels match them by construction, and differ in their
# bounds: a quarter of the pixels per image makes the GPU's part of an epoch about four
# times shorter. In every row the bound is below the post's epochs, and in none does it
# reach the tensor cores' ratio.
#
# ## The input pipeline
#
# Before the GPU can start a step, the DataLoader must read each image's PNG, decode it,
# resize it from 2048x1024 to the training size, and do the same for its label. That
# work runs on the CPU, one image per worker process at a time. The loader benchmark
# (`python -m ampbook.bench loader`) times it on full-size Cityscapes-like PNGs (the
# synthetic set, drawn at Cityscapes' size; real Cityscapes when `$CITYSCAPES_DATASET`
# names it), with one torch thread, for each worker count.

# %%
import os

root = os.environ.get("CITYSCAPES_DATASET") or synthetic_root(
    loader_images, 0, height=post["cityscapes"]["image_height"],
    width=post["cityscapes"]["image_width"])
lm = measure_loader(root, height=H, width=W, workers=tuple(loader_workers),
                    batch_size=B, max_images=loader_images, passes=loader_passes,
                    threads=1)
lm_rate = {int(r["workers"]): float(r["images_per_s"]) for r in lm["results"]}
load_s = 1.0 / lm_rate[0]  # seconds of one core per image: the 0-worker figure

# %% tags=["hide-input"]
glue("ch5_load_ms", load_s * 1e3, display=False)
md_table([(f"DataLoader, {w} workers", r, 1e3 / r) for w, r in sorted(lm_rate.items())]
         + [("decode + resize alone", lm["decode_resize_images_per_s"],
             1e3 / lm["decode_resize_images_per_s"])],
         ["pipeline", "images/s", "ms per image"], [None, ".1f", ".0f"])

# %% [markdown]
# With no workers the training process loads each image itself, on one core with one
# thread: {glue:text}`ch5_load_ms:.0f` ms per image here, the whole Dataset included
# (label mapping and normalisation). That is the per-image cost the loader model takes
# (`ampbook.costmodel.loader_images_per_s`): workers run in parallel, one per free core,
# so `w` workers deliver `w` images per per-image cost, up to the cores the training
# process leaves free. The 1-worker figure adds inter-process transfer on top; it is the
# check of the model.

# %%
here = {w: cm.loader_images_per_s(load_s, w, load["cpus"], reserved_cores=0)
        for w in lm_rate}
md_table([(w, lm_rate[w], here[w], lm_rate[w] / here[w]) for w in sorted(lm_rate)],
         ["workers", "measured images/s", "model", "measured / model"],
         [None, ".2f", ".2f", ".2f"])

# %% [markdown]
# On the post's PC the per-image cost is unknown. Take this machine's (a core of a 2020
# desktop CPU may be faster or slower) and the authors' {glue:text}`ch5_def_workers`
# workers on {glue:text}`ch5_host_cores` cores: the line below sets the loader model
# against the GPU's bound (the most images per second it can train). Real kernels are
# slower than the bound, so a step that sets the pace at the bound sets it all the more;
# a loader that sets it at the bound may not.

# %%
nw = default["workers"]
post_loader = cm.loader_images_per_s(load_s, nw, host_cores)
print(cm.pace_verdict(post_loader, pamp.max_images_per_s, "for the post's AMP epoch"))
for k, v in {"host_cores": host_cores, "loader_epoch": n_img / post_loader,
             "fp32_s": fp32_post["time_s"], "amp_s": amp_post["time_s"],
             "implied_ms": nw / (n_img / fp32_post["time_s"]) * 1e3}.items():
    glue(f"ch5_{k}", v, display=False)

# %% [markdown]
# At that cost, {glue:text}`ch5_def_workers` workers need
# {glue:text}`ch5_loader_epoch:.0f` s for an epoch, against the post's measured
# {glue:text}`ch5_fp32_s` s in fp32 and {glue:text}`ch5_amp_s` s with AMP. The synthetic
# PNGs are simpler than real street scenes and a 2020 desktop core differs from this
# one, so the cost per image on the post's PC may differ either way.
#
# **A consistency check, not a prediction.** If the loader did set the post's pace, its
# {glue:text}`ch5_def_workers` workers delivered {glue:text}`ch5_post_img_s:.1f` images
# per second, so one image cost {glue:text}`ch5_implied_ms:.0f` ms of one core. That
# number is derived from the post's own epoch under hypothesis (a); feeding it back into
# the model returns the post's epoch by construction, so it proves nothing. What it
# offers is a comparison with an independent measurement: this machine's
# {glue:text}`ch5_load_ms:.0f` ms per image. The figure puts the loader's throughput for
# 0 to 8 workers at this machine's per-image cost beside the 3070's bounds.

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Images per second: what the DataLoader delivers with 0-8 workers at this machine's per-image cost (the linear model, for a PC with the assumed cores; measured points where marked) against the most the RTX 3070 can train per the cost model in fp32 and with AMP, and the rate of the post's epochs.", "name": "fig-ch5-pipeline"}}
ws = np.arange(0, 9)
fig, ax = plt.subplots()
ax.plot(ws, [cm.loader_images_per_s(load_s, int(w), host_cores) for w in ws],
        label=f"loader, model ({host_cores} cores)", **series_style(0))
ax.plot(sorted(lm_rate), [lm_rate[w] for w in sorted(lm_rate)], linestyle="none",
        marker="s", color=series_style(1)["color"], label="loader, measured here")
rates = [("3070 fp32, at most", p32.max_images_per_s),
         (f"3070 {precision}, at most", pamp.max_images_per_s),
         ("the post's epochs", n_img / fp32_post["time_s"])]
for i, (label, rate) in enumerate(rates):
    st = series_style(i + 2)
    ax.axhline(rate, color=st["color"], linestyle=st["linestyle"], label=label)
ax.set(xlabel="DataLoader workers", ylabel="images per second", ylim=(0, None))
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## This machine's runs
#
# The book's runner, per precision, at a size a CPU trains in seconds
# ({glue:text}`ch5_run_w`x{glue:text}`ch5_run_h`), without shuffling. It records per
# epoch the time spent waiting for the DataLoader, the time inside the training step,
# validation, and the rest.

# %%
local = {}
for p in run_precisions:
    cfg = TrainConfig(precision=p, device=str(device), height=run_height,
                      width=run_width, batch_size=batch_size, epochs=num_epochs,
                      workers=run_workers, synthetic_train=run_train_images,
                      synthetic_val=run_val_images, shuffle=False, tf32="on",
                      checkpoint=False, quiet=True)
    local[p] = run_training(cfg)

# %% tags=["hide-input"]
glue("ch5_run_w", run_width, display=False)
glue("ch5_run_h", run_height, display=False)
breakdown = [(p, e["epoch"], e["data_wait_s"], e["step_s"], e["val_s"],
              max(e["epoch_s"] - e["data_wait_s"] - e["step_s"] - e["val_s"], 0.0))
             for p, rec in local.items() for e in rec["epochs"]]
md_table(breakdown, ["precision", "epoch", "data wait (s)", "step (s)",
                     "validation (s)", "rest (s)"],
         [None, None, ".2f", ".2f", ".2f", ".2f"])

# %% tags=["hide-input"] mystnb={"figure": {"caption": "This machine's training epochs split into waiting for the DataLoader, the training step, validation and the rest of the loop.", "name": "fig-ch5-epochs"}}
fig, ax = plt.subplots(figsize=(7.0, 1.2 + 0.45 * len(breakdown)))
labels, left = [f"{r[0]}, epoch {r[1]}" for r in breakdown], np.zeros(len(breakdown))
for i, name in enumerate(("data wait", "step", "validation", "rest")):
    vals = np.array([r[2 + i] for r in breakdown])
    ax.barh(labels, vals, left=left, label=name, **bar_style(i))
    left += vals
ax.invert_yaxis()
ax.set_xlabel("seconds")
ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=4)
plt.show()

# %%
e = local[run_precisions[-1]]["epochs"][-1]
print(cm.pace_verdict(e["images"] / max(e["data_wait_s"], 1e-9),
                      e["images"] / e["step_s"],
                      f"in this machine's last {run_precisions[-1]} epoch"))

# %% [markdown]
# The first epoch pays for first calls (oneDNN builds its kernels for each new shape),
# and an epoch of two images says little about speed anyway. AMP against fp32 on this
# device is therefore timed on steps alone, the precisions taking turns for
# {glue:text}`ch5_rounds` rounds at {glue:text}`ch5_chk_w`x{glue:text}`ch5_chk_h`
# (`ampbook.bench_step.step_rounds`), and read as a speedup per round with its spread.

# %%
chk = {p: TrainConfig(precision=p, device=str(device), height=check_height,
                      width=check_width, batch_size=check_batch, workers=0)
       for p in run_precisions}
rounds = step_rounds(chk, rounds=check_repeats)
low = [p for p in run_precisions if p != "fp32"][0]
ratios = [f / a for f, a in zip(rounds["fp32"], rounds[low])]
print(cm.speedup_verdict(ratios, low))

# %% tags=["hide-input"]
for k, v in {"rounds": check_repeats, "chk_w": check_width, "chk_h": check_height,
             "here_med": float(np.median(ratios))}.items():
    glue(f"ch5_{k}", v, display=False)

# %% [markdown]
# The figure puts every AMP-against-fp32 ratio the chapter has side by side: the post's
# epochs, the 2020 RTX 3070 user's epochs and steps, this machine's timed steps (the bar
# is the median, the whisker the middle half of the rounds), the cost model, and the
# committed GPU pairs (epochs). Memory is each source's own figure: a monitor's for the
# post and the 2020 user, the new bytes saved for backward for this machine and the
# model, peak allocated for GPU runs.

# %% tags=["hide-input"] mystnb={"figure": {"caption": "AMP against fp32 as ratios: speedup (fp32 time over AMP time; above 1 means AMP was faster) and memory (AMP over fp32; below 1 means AMP saved memory), for the post, for the 2020 RTX 3070 user of pytorch/pytorch#46377, for this machine's timed steps, for the cost model at the likely setting, and for committed GPU pairs.", "name": "fig-ch5-ratios"}}
saved_at = {p: lines[p](B * H * W) for p in lines}
here_run = {p: summarise_run(r) for p, r in local.items()}
bars = [("the post: epochs", post_speedup, None, post_mem),
        ("#46377: epochs", ev_epoch, None, ev["memory_gb_no_loader"]["amp"]
         / ev["memory_gb_no_loader"]["fp32"]),
        ("#46377: steps alone", ev_step, None, None),
        (f"this machine, {low}: steps", float(np.median(ratios)),
         tuple(np.percentile(ratios, [25, 75])),
         here_run[low].memory_bytes / here_run["fp32"].memory_bytes),
        ("cost model: likely setting", model_speedup, None,
         saved_at[precision] / saved_at["fp32"])]
bars += [(f"{q.setting.device_name}: {q.label}", q.speedup, None, q.memory_ratio)
         for q in results.pairs()]
fig, ax = plt.subplots(figsize=(7.0, 1.2 + 0.6 * len(bars)))
ys = np.arange(len(bars))
series = ((1, "speedup (fp32 / AMP time)"), (3, "memory (AMP / fp32)"))
for j, (col, name) in enumerate(series):
    vals = [b[col] or 0 for b in bars]
    err = [[b[1] - b[2][0] if j == 0 and b[2] else 0 for b in bars],
           [b[2][1] - b[1] if j == 0 and b[2] else 0 for b in bars]]
    ax.barh(ys + (0.4 * j - 0.2), vals, height=0.38, xerr=err, label=name,
            **bar_style(j))
ax.axvline(1.0, color="black", linewidth=0.8)
ax.set_yticks(ys, [b[0] for b in bars], fontsize=8)
ax.invert_yaxis()
ax.set_xlabel("ratio")
ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2)
plt.show()

# %% [markdown]
# ## The model against this CPU
#
# The same bound holds on any device whose ceilings are known. This CPU's can be
# measured (the faster of two matmuls for the compute peak, the faster of two additions,
# one small enough for the cache, for the bandwidth; on a GPU the device table's), and
# the bound set against the timed steps above: the measured step must take at least the
# bound, and their ratio is the efficiency its kernels reached. The model also assumes
# what GPUs have, low-precision units at least as fast as fp32's; a bf16 matmul timed
# beside an fp32 one says whether this CPU's kernels have them.

# %%
cpu, kw = pick_device("cpu"), {"min_time": 0.05, "max_time": 1.0}
mm = {(dt, n): time_matmul(n, dtype=dt, device=cpu, **kw).tflops
      for dt in ("fp32", "bf16") for n in (512, 1024)}
peak, peak_bf16 = (max(mm[(dt, 512)], mm[(dt, 1024)]) for dt in ("fp32", "bf16"))
bw = max(time_elementwise(n, "fp32", cpu, **kw).gbps for n in (2**16, 2**22))
cpu_ceil = cm.Ceilings("this CPU, measured", {"float32": peak, "bfloat16": peak_bf16},
                       peak, bw)
here_ceil = cpu_ceil if device.type == "cpu" else ceilings_for(device)

# %%
cpu_rows = []
for p in run_precisions:
    tr = cm.trace_step(model, check_batch, check_height, check_width, p)
    bound = cm.predict(tr, here_ceil)
    cpu_rows.append((p, min(rounds[p]) * 1e3, bound.min_step_s * 1e3,
                     bound.efficiency_of(min(rounds[p]))))
md_table(cpu_rows, ["precision", "fastest measured step (ms)", "bound (ms)",
                    "efficiency (bound / measured)"], [None, ".1f", ".2f", ".0%"])

# %%
flags = sorted(native_cpu_flags())
print(cm.lowp_verdict(flags, peak_bf16 / peak))
print(cm.bound_verdict(cpu_rows[0][2] / 1e3, cpu_rows[0][1] / 1e3, "an fp32 step here"))
eff_here = cpu_rows[0][3]
glue("ch5_eff_here", eff_here, display=False)

# %% [markdown]
# A measured step should take at least its bound (a test checks the direction against
# theoretical peaks: `tests/test_costmodel.py`). The ceilings measured here are the
# fastest matmul and addition rates found, not the hardware's peaks, so the second line
# above may find the bound broken; the ratio here was {glue:text}`ch5_eff_here:.0%`.
# Where the bf16 matmul runs below fp32's rate, the model's assumption fails on this
# device and AMP costs time; where it runs at or above it, AMP can gain. The first line
# above says which case this CPU is, and the timed steps further up what AMP did.
#
# Applied to the 3070, efficiencies between the lowest measured and 100% put the GPU's
# part of the post's AMP epoch in a range. The next section holds the post's epoch
# against it, with this device's efficiency and every committed GPU profile's.
#
# ## GPU runs
#
# GPU runs of the same runner committed under `data/results/` are read next by
# `ampbook.results` (the `results_dir` parameter names another folder), which pairs runs
# only on the same GPU at the same setting and defines epoch time and memory once for
# the book.

# %%
gpu_pairs = results.pairs()
print(f"{len(results.gpu_runs())} GPU training runs, {len(gpu_pairs)} pairs, "
      f"{len(results.layer_profiles)} layer profiles; GPUs: "
      f"{', '.join(results.devices()) or 'none'}")

# %% tags=["hide-input"]
md_table([(q.setting.device_name, q.setting.label, q.label, q.speedup, q.step_speedup,
           q.amp.data_wait_share, q.memory_ratio) for q in gpu_pairs]
         or [("none committed", "-", "-", None, None, None, None)],
         ["GPU", "setting", "pair", "epoch speedup", "step speedup", "AMP data wait",
          "memory AMP / fp32"], [None, None, None, ".2f", ".2f", ".0%", ".2f"])

# %% [markdown]
# When pairs are listed, each is read with `hypotheses_verdict`, the same function that
# read the 2020 user's figures: a loop that waits for data at least half of its time is
# (a); an AMP step no faster than fp32's (at most 1.05x) is (b); both can hold. Against
# fp32 with TF32 on, (b) need not mean slow fp16 kernels: TF32 already runs fp32's
# convolutions on tensor cores, and the same AMP run read against strict fp32 shows
# what the 16-bit kernels gain over plain fp32. With no
# pairs, nothing is printed and the question stays open until someone commits GPU runs
# (`python -m ampbook.train` on a GPU, fp32 and amp-fp16 at one setting).

# %%
for q in gpu_pairs:
    print(f"{q.setting.device_name}, {q.label}: "
          + cm.hypotheses_verdict(q.step_speedup, q.speedup, q.amp.data_wait_share))

# %% [markdown]
# A layer profile (`ampbook.layer_profile`) times every ERFNet module on a GPU with the
# PyTorch profiler and puts the cost model's bound for that GPU beside it. Its ratio is
# the measured kernel efficiency, per layer type and for the whole step; each line below
# applies a profile's efficiency to the 3070's AMP bound at the likely setting, and the
# last holds the post's AMP epoch against the range from every measured efficiency
# (`efficiency_range_verdict`: the bound over the lowest efficiency at or below 1).

# %% tags=["hide-input"]
md_table([(lp.device_name, lp.precision, t.type, t.measured_s * 1e3,
           t.predicted_s * 1e3, t.predicted_s / t.measured_s)
          for lp in results.layer_profiles for t in lp.by_type()[:5]]
         or [("none committed", "-", "-", None, None, None)],
         ["GPU", "precision", "layer type", "measured (ms)", "bound (ms)",
          "efficiency"],
         [None, None, None, ".2f", ".2f", ".0%"])

# %%
for lp in results.layer_profiles:
    eff = min(1.0, lp.efficiency)
    epoch = pamp.step_at_efficiency(eff) * n_img / B
    print(f"{lp.device_name}, {lp.precision}: steps at {eff:.0%} of the roofline; at "
          f"that efficiency the 3070's AMP epoch takes {epoch:.0f} s")

# %%
effs = [eff_here] + [lp.efficiency for lp in results.layer_profiles]
print(cm.efficiency_range_verdict(pamp.min_epoch_s(n_img), effs, amp_post["time_s"],
                                  "The post's AMP epoch"))

# %% [markdown]
# ## The same model on an H200
#
# Nothing in the trace depends on the GPU, so the same operators can be held against
# another card's ceilings. On an H200 (a data-centre Hopper GPU) TF32 is no longer the
# fp32 rate: it is several times faster, so whether the fp32 baseline may use it changes
# the answer.

# %% tags=["hide-input"]
hdev = devices["h200-sxm"]
h200 = {"fp32, TF32 on": cm.predict(traces["fp32"], cm.Ceilings.from_device(hdev)),
        "fp32, strict": cm.predict(traces["fp32"],
                                   cm.Ceilings.from_device(hdev, tf32=False)),
        precision: cm.predict(traces[precision], cm.Ceilings.from_device(hdev))}
base = h200["fp32, TF32 on"].min_step_s
md_table([(k, v.min_step_s * 1e3, v.max_images_per_s, v.memory_bound_share,
           base / v.min_step_s) for k, v in h200.items()],
         ["H200", "step, at least (ms)", "images/s, at most", "time memory-bound",
          "speedup over fp32 (TF32 on)"], [None, ".2f", ".0f", ".0%", ".2f"])

# %%
h_speed = base / h200[precision].min_step_s
h_tf32 = h200["fp32, strict"].min_step_s / base
for k, v in {"h_speed": h_speed, "h_tf32": h_tf32,
             "h_img_s": h200[precision].max_images_per_s,
             "h_cores": h200[precision].max_images_per_s * load_s}.items():
    glue(f"ch5_{k}", v, display=False)

# %% [markdown]
# On the H200 the bound's speedup from AMP over a TF32 baseline is
# {glue:text}`ch5_h_speed:.2f`x, and TF32's over strict fp32
# {glue:text}`ch5_h_tf32:.2f`x. To stay busy with AMP an H200 could take up to
# {glue:text}`ch5_h_img_s:.0f` images per second: {glue:text}`ch5_h_cores:.0f` cores
# decoding at this machine's per-image cost.
#
# A bound is a promise about the best case. Where GPU runs of a card in the device table
# are committed, `ResultSet.bound_checks` traces ERFNet at each pair's own resolution
# and batch and holds the bound's speedup against the measured one, with the share of
# its bound each step reached. The roofline's argument assumes both precisions run
# equally close to their bounds; where AMP's share is the lower one, the speedup falls
# short of the promise, and the verdict says which side lost more.

# %% tags=["hide-input"]
checks = results.bound_checks(model, devices)
md_table([(c.pair.setting.device_name, c.pair.label, c.bound_speedup,
           c.pair.step_speedup, c.amp_efficiency, c.baseline_efficiency)
          for c in checks] or [("none committed", "-", None, None, None, None)],
         ["GPU", "pair", "bound's speedup", "measured step speedup",
          "AMP at its bound", "baseline at its bound"],
         [None, None, ".2f", ".2f", ".0%", ".0%"])

# %%
print("\n".join(c.verdict() for c in checks)
      or "No committed run is on a GPU of the device table.")

# %% [markdown]
# ## A checklist for when AMP gives no speedup
#
# If your mixed-precision run is no faster than fp32, go through these, measuring each.
# "Measured here" is this chapter's device (a CPU unless you ran it on a GPU), timed the
# way the steps above were; "published" and "model" say where the rest comes from.

# %%
b_lo, b_hi = sorted(checklist_batches)
variants = {"baseline": {}, "channels_last": {"channels_last": True},
            "larger batch": {"batch_size": b_hi}}
base_cfg = dict(device=str(device), height=checklist_height, width=checklist_width,
                workers=0, batch_size=b_lo)
cl = step_rounds({k: TrainConfig(**{**base_cfg, **v}) for k, v in variants.items()},
                 rounds=check_repeats)
best = {k: min(v) for k, v in cl.items()}

# %% tags=["hide-input"]
bf = cm.predict(cm.trace_step(model, B, H, W, "amp-bf16"), rtx).min_step_s
tf32_3070 = pred["fp32 (strict)"].min_step_s / p32.min_step_s
evb = ev["step_s_no_loader_benchmark"]
md_table([
    ("DataLoader workers", f"{lm_rate[max(lm_rate)] / lm_rate[0]:.2f}x images/s, "
     f"{max(lm_rate)} workers over 0", "loader model: linear up to the free cores"),
    ("pin_memory=True", "GPU only", "faster host-to-GPU copies (not modelled)"),
    ("torch.backends.cudnn.benchmark = True", "GPU only",
     f"#46377: AMP step {ev['step_s_no_loader']['amp']} -> {evb['amp']} s"),
    ("upgrade PyTorch and cuDNN", "GPU only",
     f"#46377 (PyTorch 1.7): AMP step {1 / ev_step:.1f}x fp32's; hypothesis (b)"),
    ("channels_last", f"{best['baseline'] / best['channels_last']:.2f}x step speed",
     "same bytes; fp16 tensor-core convolutions prefer it"),
    ("a larger batch", f"{best['baseline'] * b_hi / best['larger batch']:.2f}x "
     f"images/s, batch {b_hi} over {b_lo}", "fewer launches per image"),
    ("TF32 on the fp32 baseline", "GPU only",
     f"bound: 3070 {tf32_3070:.2f}x; H200 {h_tf32:.2f}x"),
    ("bf16 instead of fp16", "GPU only",
     f"3070 bound {pamp.min_step_s / bf:.2f}x; no scaler"),
], ["item", "measured here (fp32)", "published or model"])

# %% [markdown]
# ## The post's claims, checked
#
# Each claim of the post (the digest in the seed folder lists them), with what this book
# computes or measures.

# %% tags=["hide-input"]
f16, f32 = torch.finfo(torch.float16), torch.finfo(torch.float32)
v100, claims = devices["v100-sxm2"], post["claims"]
init_scale = inspect.signature(torch.amp.GradScaler).parameters["init_scale"].default
extra = tot[precision]["kernels"] - tot["fp32"]["kernels"]
fma = {"V100": v100.fma_per_clock_per_tensor_core("fp16"),
       "3070": gpu.fma_per_clock_per_tensor_core("fp32")}
md_table([
    ("fp32 max is 1.7e38", f"{f32.max:.3g}"),
    ("fp16 range 5.96e-8 .. 6.55e4",
     f"smallest subnormal {f16.smallest_normal * f16.eps:.3g}, max {f16.max:.0f}"),
    ("native AMP keeps an fp16 copy of the weights",
     f"no: parameters stay fp32, cast every step ({extra:.0f} more kernels)"),
    ("the paper suggests a loss scale of 8", f"GradScaler starts at {init_scale:.0f}"),
    ("64 FMA per clock per tensor core", f"V100 {fma['V100']:.0f}; "
     f"3070 {fma['3070']:.0f} (fp16 in, fp32 accumulate)"),
    (f"{claims['rtx3070_tensor_cores']} tensor cores on the 3070",
     f"{gpu.tensor_cores}"),
    ("papers say 2-8x", f"peak V100 {v100.tensor_over_fp32:.2f}x, "
     f"3070 {gpu.tensor_over_fp32:.1f}x; ERFNet bound {model_speedup:.2f}x"),
    ("AMP saved about 25% memory", f"model, likely setting: "
     f"{1 - saved_at[precision] / saved_at['fp32']:.0%} of the activations"),
    ("AMP gave no speedup on the 3070", f"#46377 epochs {ev_epoch:.3f}x; "
     f"bound {model_speedup:.2f}x: the loader (a) or slow kernels (b)"),
], ["the post says", "computed or measured here"])

# %% [markdown]
# ## Summary
#
# - The post's AMP run saved memory and no time. Its memory figures fix the pixels per
#   batch at {glue:text}`ch5_mpx_lo:.1f` to {glue:text}`ch5_mpx_hi:.1f` million with a
#   fixed part of {glue:text}`ch5_fixed_lo:.2f` to {glue:text}`ch5_fixed_hi:.2f` GB, the
#   size of a 2020 CUDA context: batch {glue:text}`ch5_B` at
#   {glue:text}`ch5_W`x{glue:text}`ch5_H` most likely, not the authors' batch
#   {glue:text}`ch5_def_b`, whose fp32 activations alone would be
#   {glue:text}`ch5_def_saved:.2f` GB.
# - A roofline is a lower bound: the 3070 needs at least {glue:text}`ch5_min_fp32:.0f` s
#   for an fp32 epoch and {glue:text}`ch5_min_amp:.0f` s for an AMP one there, a
#   {glue:text}`ch5_model_speedup:.2f`x speedup at best, because
#   {glue:text}`ch5_mem_share:.0%` of the AMP step is memory-bound. Kernels at
#   {glue:text}`ch5_need_eff:.0%` of the roofline would take the post's time: the bound
#   does not decide.
# - Two explanations remain: (a) the DataLoader bounds the epoch, (b) 2020 software ran
#   fp16 slowly on sm_86. A 2020 RTX 3070 user
#   ([pytorch/pytorch#46377](https://github.com/pytorch/pytorch/issues/46377)) measured
#   both: equal epochs, and an AMP step {glue:text}`ch5_ev_slow_lo:.1f` to
#   {glue:text}`ch5_ev_slow_hi:.1f` times slower than fp32's. Step-only timing and
#   per-kernel profiling on the post's software would tell the post's case apart.
# - This machine loads an image in {glue:text}`ch5_load_ms:.0f` ms of one core; the
#   post's rate implies {glue:text}`ch5_implied_ms:.0f` ms if the loader set it (a
#   consistency check, not a prediction).
# - When AMP gives no speedup: time the step without the DataLoader, then add workers,
#   upgrade PyTorch and cuDNN, and look at the fp32 baseline's TF32, the batch size,
#   channels_last and cudnn.benchmark.
#
# ## Exercises
#
# 1. Re-run the cost model at the setting you train at (`trace_step(model, batch,
#    height, width, precision)`), and find the batch size at which autocast's weight
#    casts stop mattering.
# 2. Change ERFNet's residual sum to `F.relu(y + x.to(y.dtype))` in a copy of the model
#    and trace it under autocast: how many fewer bytes does the forward pass move, and
#    what is the 3070's bound now?
# 3. With your own GPU, run `python -m ampbook.train` in fp32 and amp-fp16 with 0, 2 and
#    8 workers, and read each pair with `hypotheses_verdict`.
# 4. Pre-resize the training images to the training size once, on disk, and run the
#    loader benchmark on them: how many workers does the 3070 then need?
# 5. Solve the post's memory figures again assuming the monitor showed reserved memory
#    with a slack of 1.3: which batch sizes fit now?
