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
# # Making AMP pay
#
# At the post's setup, on the book's GPU ({glue:text}`ch7_gpu_name`), amp-fp16's
# training step took {glue:text}`ch7_r0_amp:.1f` ms against {glue:text}`ch7_r0_base:.1f`
# ms for fp32 with TF32, and the loop trained {glue:text}`ch7_r0_ips:.0f` images per
# second. This chapter climbs from that setup to an optimised step, one change per rung,
# and times every rung in every precision. At the top of the ladder
# ({glue:text}`ch7_gpu_kind`), AMP's step takes {glue:text}`ch7_top_amp:.1f` ms,
# {glue:text}`ch7_top_speedup:.2f` times as fast as fp32 with TF32 on the same rung, and
# the loop trains {glue:text}`ch7_top_ips:.0f` images per second.
#
# **What you will learn**: which changes to a training step let mixed precision's
# faster kernels show up in the step time, and why each one matters (the data path, the
# memory layout of batch norm, launch overhead and host syncs, autocast's fp32 residual
# stream, kernel fusion); how to tell kernel time from idle time with `torch.profiler`;
# a recipe to paste into your own loop.
#
# **What you need**: the runner and the GPU runs of the AMP training chapter, the cost
# model of the RTX 3070 chapter, and a minute or two of CPU.

# %% tags=["parameters", "remove-cell"]
device = "auto"  # where this machine's ladder runs: "auto", "cpu" or "cuda"
precisions = ["fp32", "amp-bf16"]  # modes of this machine's ladder (a CPU's AMP: bf16)
rungs = [0, 1, 2, 3, 4]  # rungs measured here (5, torch.compile, compiles for minutes)
height = 32  # this machine's ladder: image height (a multiple of 8)
width = 64  # and width (bf16 without AMX or AVX-512 BF16 is slow: small on a CPU)
batch_size = 1  # images per step
steps = 3  # timed steps per rung and mode
profile_steps = 1  # steps under torch.profiler
epochs = 2  # epochs through the runner (the first one warms up)
train_images = 2  # synthetic training images per epoch
threads = 0  # torch threads for this machine's ladder (0: torch's default)
results_dir = ""  # folder of committed GPU results (empty: data/results)

# %% tags=["remove-input"]
from ampbook import params
from ampbook.bench_ladder import MODE_SETTINGS, RUNG_INDICES
from ampbook.env import print_environment

params.device("device", device)
params.rule("precisions", precisions, bool(precisions)
            and set(precisions) <= set(MODE_SETTINGS), "must name modes of "
            + ", ".join(MODE_SETTINGS))
params.rule("rungs", rungs, bool(rungs) and set(rungs) <= set(RUNG_INDICES),
            f"must be rungs {RUNG_INDICES[0]} to {RUNG_INDICES[-1]}")
for name in ("height", "width"):
    v = params.integer(name, globals()[name], minimum=8)
    params.rule(name, v, v % 8 == 0, "must be a multiple of 8",
                why="ERFNet downsamples by 8")
for name in ("batch_size", "steps", "profile_steps"):
    params.integer(name, globals()[name], minimum=1)
params.integer("epochs", epochs, minimum=2, why="the first epoch warms up")
params.integer("train_images", train_images, minimum=batch_size,
               why="an epoch needs a batch")
params.integer("threads", threads, minimum=0)
print_environment(device)

# %% tags=["hide-cell"]
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from ampbook import bench_ladder as bl
from ampbook.devices import display_name
from ampbook.env import pick_device
from ampbook.model import ERFNet
from ampbook.plots import GIB, glue_all, md, md_table, use_style
from ampbook.results import MODE_LABELS, load_results_dir

use_style()
device = pick_device(device)
if threads:
    torch.set_num_threads(threads)
results = load_results_dir(results_dir or None)

# %% [markdown]
# (ch7-ladder)=
# ## The ladder
#
# Each rung keeps everything below it and adds one change. Every change is a field of
# the runner's `TrainConfig`, so every rung is a `python -m ampbook.train` command (the
# flags are the fields with dashes), and `python -m ampbook.bench ladder` measures the
# whole ladder on any machine.

# %% tags=["hide-input"]
# a cell made by md(...) stays Markdown (the code spans); other cells are text
md_table([(r.index, r.title,
           md(", ".join(f"`{k}={v!r}`" for k, v in r.changes.items()
                        if r.index or v not in (False, None, 1, "none"))),
           r.why) for r in bl.RUNGS],
         ["rung", "adds", "runner settings", "why it can matter"])

# %% [markdown]
# For every rung and precision the benchmark takes, with the runner's own step
# function: the median step time on one batch already on the device (timed from one
# step's start to the next, with CUDA events on a GPU, so every gap in which the GPU
# waited for the host counts); the GPU's busy time from `torch.profiler` (its kernels,
# copies and fills, merged where they overlap), so that the step splits into
# {term}`kernel time and idle time <GPU idle time>` as measured, not inferred; the
# peak memory; a short training run through the runner itself, loader or cache
# included, for images per second and the share of the loop spent in
# {term}`data wait`; and the cost model's {term}`roofline` bound for the step.
# `bench_ladder.measure_rung` is that whole measurement.
#
# (ch7-gpu)=
# ## The ladder on a GPU

# %% tags=["hide-input"]
gpu, predicted = bl.gpu_ladder(results)
md(bl.missing_ladder_line(results))

# %% [markdown]
# The GPU of the AMP training chapter's runs, {glue:text}`ch7_gpu_name`, at
# {glue:text}`ch7_gpu_w`x{glue:text}`ch7_gpu_h`, batch {glue:text}`ch7_gpu_b`. Each bar
# is one rung in one precision: the GPU's kernel time, solid, and its idle time,
# hatched, on top. Where the committed results hold no measured ladder, the bars are
# the prediction the line above announces, built from that GPU's measured layer
# profiles and training runs.

# %% tags=["hide-input"]
md(bl.source_line(gpu, predicted) if gpu else "No GPU data in the results folder.")

# %% tags=["hide-input"] mystnb={"figure": {"caption": "The GPU ladder: step time per rung and precision, the GPU's kernel time (solid) and idle time (hatched) stacked. Measured where the line above says measured, a prediction from the measured rung 0 otherwise.", "name": "fig-ch7-gpu-ladder"}}
fig, ax = plt.subplots(figsize=(7.0, 4.0))
if gpu:
    bl.draw_ladder(ax, gpu)
plt.show()

# %% tags=["hide-input"]
amp_mode = "amp-fp16"
base_mode = "fp32-tf32"
rows = []
for r in gpu.rungs if gpu else []:
    a, b = gpu.cell(r.index, amp_mode), gpu.cell(r.index, base_mode)
    rows.append((f"{r.index}: {r.key}", b.step_s * 1e3 if b else None,
                 a.step_s * 1e3 if a else None,
                 b.step_s / a.step_s if a and b else None,
                 a.busy_share if a else None, a.images_per_s if a else None))
md_table(rows, ["rung", f"{MODE_LABELS[base_mode]}: step (ms)",
                f"{MODE_LABELS[amp_mode]}: step (ms)", "speedup (x)", "AMP: GPU busy",
                "AMP: images/s"], [None, ".1f", ".1f", ".2f", ".0%", ".0f"])

# %% tags=["hide-cell"]
def cell_values(ladder, index, mode):
    """Step, kernel and idle time (ms), busy share, images/s, data wait and memory
    (GiB) of one cell (None where it was not measured)."""
    c = ladder.cell(index, mode) if ladder else None
    if c is None:
        return dict.fromkeys(("step", "kernel", "idle", "busy", "ips", "wait", "gib"),
                             float("nan"))
    return {"step": c.step_s * 1e3, "kernel": (c.kernel_s or 0) * 1e3,
            "idle": (c.idle_s or 0) * 1e3, "busy": c.busy_share,
            "ips": c.images_per_s, "wait": c.data_wait_share,
            "gib": c.memory_bytes / GIB if c.memory_bytes else float("nan")}


eager_top = max((r.index for r in gpu.rungs if r.index <= bl.EAGER_TOP
                 and gpu.cell(r.index, amp_mode)), default=0) if gpu else 0
top = max((r.index for r in gpu.rungs if gpu.cell(r.index, amp_mode)),
          default=0) if gpu else 0
v = {(i, m): cell_values(gpu, i, m) for i in range(len(bl.RUNGS))
     for m in (amp_mode, base_mode)}
for i in range(eager_top + 1):
    for key, mode in (("amp", amp_mode), ("base", base_mode)):
        for name, value in v[i, mode].items():
            glue_all(**{f"ch7_r{i}_{key}_{name}": value})
glue_all(
    ch7_gpu_name=display_name(gpu.device_name) if gpu else "no GPU",
    ch7_gpu_w=gpu.width if gpu else 0, ch7_gpu_h=gpu.height if gpu else 0,
    ch7_gpu_b=gpu.batch_size if gpu else 0, ch7_sync_every=bl.SYNC_EVERY,
    ch7_workers=bl.RUNGS[0].changes["workers"],
    ch7_bn=sum(isinstance(m, torch.nn.BatchNorm2d) for m in ERFNet(19).modules()),
    ch7_bn_speedup=bl.NHWC_BATCH_NORM_SPEEDUP,
    ch7_gpu_kind="predicted from the measured rung 0" if predicted else "measured",
    ch7_r0_amp=v[0, amp_mode]["step"], ch7_r0_base=v[0, base_mode]["step"],
    ch7_r0_ips=v[0, amp_mode]["ips"], ch7_top_amp=v[top, amp_mode]["step"],
    ch7_top_speedup=(v[top, base_mode]["step"] or 0) / (v[top, amp_mode]["step"] or 1),
    ch7_top_ips=v[top, amp_mode]["ips"], ch7_eager_top=eager_top, ch7_top=top,
    ch7_r0_speedup=(v[0, base_mode]["step"] or 0) / (v[0, amp_mode]["step"] or 1),
)

# %% [markdown]
# ### Rung by rung
#
# The numbers are those of the GPU ladder above: rung 0 is measured, and the rungs above
# it are {glue:text}`ch7_gpu_kind`.
#
# **Rung 0, the post's setup.** AMP's kernels take {glue:text}`ch7_r0_amp_kernel:.1f`
# ms a step against TF32's {glue:text}`ch7_r0_base_kernel:.1f` ms, and the GPU sits idle
# {glue:text}`ch7_r0_amp_idle:.1f` ms of every AMP step
# ({glue:text}`ch7_r0_base_idle:.1f` ms of TF32's), waiting for the host: the host
# launches every kernel of the step one after another, autocast's casts among them, and
# waits for the loss and the GradScaler's checks every step. The loop as a whole spends
# {glue:text}`ch7_r0_amp_wait:.0%` of its time in data wait:
# {glue:text}`ch7_workers` workers decode and resize 2048x1024 PNGs.
#
# **Rung 1, the data.** The images and labels are decoded once, at the training size,
# into a uint8 cache on the device; each step only normalises (and flips) them there.
# The step takes {glue:text}`ch7_r1_amp_step:.1f` ms; the data wait goes to
# {glue:text}`ch7_r1_amp_wait:.0%` and the loop trains
# {glue:text}`ch7_r1_amp_ips:.0f` images per second. Enough loader workers (the
# runner's `--workers auto`) does the same where there are cores for them.
#
# **Rung 2, the layout.** ERFNet's {glue:text}`ch7_bn` batch norms, and above all the
# ones with 16 channels at half resolution, run far below their bound in the NCHW
# layout: their kernels reduce each channel over a strided plane, whatever the dtype. In
# the NHWC layout ({term}`channels_last`) cuDNN runs other kernels, measured about
# {glue:text}`ch7_bn_speedup:.0f` times as fast on an H100 {cite:p}`cudnn-frontend-134`,
# and `cudnn.benchmark` lets cuDNN time its algorithms for each convolution shape and
# keep the fastest {cite:p}`pytorch-tuning-guide`. AMP's step:
# {glue:text}`ch7_r2_amp_step:.1f` ms.
#
# **Rung 3, the host.** Reading the loss back with `.item()` and the GradScaler's scale
# with `get_scale()` every step are {term}`host syncs <host sync>`: the host waits for
# the GPU, which then waits for the host to launch the next step's first kernels. With
# the loss read every {glue:text}`ch7_sync_every` steps and the optimizer's hundreds of
# small per-parameter kernels fused into a few (`torch.optim.Adam(fused=True)`)
# {cite:p}`pytorch-tuning-guide`, the host can run ahead and keep the GPU's queue
# filled: AMP's idle time goes from {glue:text}`ch7_r2_amp_idle:.1f` to
# {glue:text}`ch7_r3_amp_idle:.1f` ms a step.
#
# **Rung 4, the residual stream.** ERFNet's first downsampler concatenates an fp16
# convolution with a max-pool of the fp32 image; `torch.cat` promotes the pair to fp32,
# and every residual block after it adds a 16-bit branch to an fp32 skip, so the whole
# encoder carries fp32 activations under {term}`autocast`. Casting the pool branch to
# the convolution's dtype (the runner's `--fp16-stream`; the same parameters and fp32
# outputs) keeps the stream 16-bit: AMP's peak memory goes from
# {glue:text}`ch7_r3_amp_gib:.2f` to {glue:text}`ch7_r4_amp_gib:.2f` GiB, its step to
# {glue:text}`ch7_r4_amp_step:.1f` ms. fp32 with TF32 has no autocast, and this rung
# changes nothing for it.
#
# **Rung 5, fusion.** `torch.compile` fuses the elementwise work around the
# convolutions (batch norm's normalisation, ReLU, the residual sums, autocast's casts)
# into fewer kernels that read and write each activation once. What that buys needs a
# measured ladder:

# %% tags=["hide-input"]
md(bl.rung_verdict(gpu, 5, [base_mode, amp_mode]) if gpu else "")

# %% [markdown]
# ### What AMP buys at the top
#
# The highest rungs measured, each precision against fp32 with TF32 and against strict
# fp32 on the same rung, with the peak memory (allocated) and the loop's images per
# second. A dash is a cell the ladder does not have.

# %% tags=["hide-input"]
def top_rows(ladder, index):
    base, strict = ladder.cell(index, base_mode), ladder.cell(index, "fp32")
    out = []
    for mode in ladder.modes():
        c = ladder.cell(index, mode)
        if c is None:
            continue
        out.append((f"{index}: {MODE_LABELS[mode]}", c.step_s * 1e3,
                    base.step_s / c.step_s if base else None,
                    strict.step_s / c.step_s if strict else None,
                    c.memory_bytes / GIB if c.memory_bytes else None, c.images_per_s))
    return out


md_table([row for i in sorted({eager_top, top}) for row in top_rows(gpu, i)]
         if gpu else [], ["rung: precision", "step (ms)", "over TF32 (x)",
                          "over strict fp32 (x)", "peak memory (GiB)", "images/s"],
         [None, ".1f", ".2f", ".2f", ".2f", ".0f"])

# %% [markdown]
# Targets set for the H200 at the post's setting before its ladder was measured: an AMP
# step of 20 ms or less eager and 11 ms compiled, AMP at least 1.3 times TF32's speed
# eager and 1.6 times compiled, a GPU busy 90% of the step, at most 5% of the loop
# waiting for data, 300 images per second, and AMP's peak memory at most 0.57 of
# fp32's. Each, read from the ladder above, with what the profile shows for a missed
# one (`bench_ladder.check_targets`):

# %% tags=["hide-input"]
md("\n".join(f"- {t.line()}" for t in bl.check_targets(gpu)) if gpu else "")

# %% [markdown]
# (ch7-here)=
# ## The ladder on this machine
#
# The same ladder, measured here at the size the parameters give, in the precisions
# they name (on a CPU, fp32 and bf16: the CPU's mixed precision has no GradScaler and
# no TF32). On a CPU the profiler sees no device: the operators and the Python and
# framework code between them run on the same cores, so "kernel" time here is the time
# inside operators and "idle" the time between them. Whether a change pays on a CPU
# depends on its kernels (AMX tiles, AVX-512 BF16, oneDNN's paths for each layout), and
# only a measurement says; the chip's flags do not.

# %%
spec = bl.LadderSpec.for_device(
    device.type, device=str(device), rungs=tuple(rungs), modes=tuple(precisions),
    height=height, width=width, batch_size=batch_size, steps=steps,
    profile_steps=profile_steps, epochs=epochs, train_images=train_images)
# a file of this run's own: two runs of the chapter at once must not share one
path = Path(tempfile.mkdtemp(prefix="ampbook-ch7-")) / f"ladder_{device.type}.json"
here = bl.run_ladder(spec, path, "none" if device.type == "cpu" else "precision",
                     log=lambda line: None)
print(bl.format_table(here))

# %% tags=["hide-input"] mystnb={"figure": {"caption": "This machine's ladder: step time per rung and precision, kernel (or operator) time solid and idle time hatched.", "name": "fig-ch7-here"}}
fig, ax = plt.subplots(figsize=(7.0, 4.0))
bl.draw_ladder(ax, here)
plt.show()

# %% [markdown]
# On a CPU the bound's ceilings are measured here, with one matmul per dtype and one
# addition, not taken from a data sheet; where the network's operators find faster
# paths than that matmul (oneDNN's convolutions often do), the step reaches more than
# 100% of such a bound. Each rung against the one below it, per precision
# (`bench_ladder.rung_verdict`). Rung 1 changes where the batches come from, not the
# step, which is timed on one batch already in memory: where it is measured, its change
# in step time is this machine's noise, and a change of that size elsewhere says
# nothing.

# %% tags=["hide-input"]
md("\n".join(f"- {bl.rung_verdict(here, r.index)}" for r in here.rungs[1:]
             if any(here.cell(r.index, m) for m in here.modes())))

# %% [markdown]
# On the GPU above, AMP's speedup over fp32 with TF32 goes from
# {glue:text}`ch7_r0_speedup:.2f` times at the post's setup to
# {glue:text}`ch7_top_speedup:.2f` times at rung {glue:text}`ch7_top`, the rungs in
# between adding what the table there shows. On a CPU the same rungs may pay, cost, or
# change nothing, because what runs is oneDNN's CPU kernels, whose speed in each layout
# and dtype differs from chip to chip. The lines above are this machine's answer.
#
# (ch7-recipe)=
# ## The recipe
#
# Everything above, in a training step you can paste into your own loop: decode the
# data once and keep it on the device, channels_last and `cudnn.benchmark`, a fused
# optimizer, no host sync in the step, the 16-bit residual stream where your network
# promotes one, and `torch.compile` on a GPU. The cell runs a few steps of it here.

# %%
def optimised_training(model, images_u8, labels, dtype, lr=5e-4, compile=False):
    """An optimised AMP training step over data already on the device. ``images_u8``
    is N x 3 x H x W uint8, decoded once; ``labels`` N x H x W class indices."""
    dev = images_u8.device
    torch.backends.cudnn.benchmark = True  # fastest algorithm per shape (rung 2)
    model = model.to(dev, memory_format=torch.channels_last)  # NHWC (rung 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # rung 3
    scaler = torch.amp.GradScaler(dev.type, enabled=dtype is torch.float16)
    net = torch.compile(model) if compile else model  # fusion (rung 5)
    criterion = torch.nn.CrossEntropyLoss(ignore_index=255)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)

    def step(index):  # index: a batch's positions in the cache (rung 1)
        x = (images_u8[index].float() / 255 - mean) / std
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(dev.type, dtype=dtype):
            loss = criterion(net(x), labels[index])
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()  # no .item() here: the host does not wait (rung 3)

    return step


# %%
amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
torch.manual_seed(0)
cache = torch.randint(0, 256, (4, 3, height, width), dtype=torch.uint8, device=device)
targets = torch.randint(0, 19, (4, height, width), device=device)
step = optimised_training(ERFNet(19, fp16_stream=True), cache, targets, amp_dtype)
losses = [step(torch.randperm(4, device=device)[:batch_size]) for _ in range(3)]
print("losses, read once at the end:", [round(x.item(), 3) for x in losses])

# %% [markdown]
# The runner does the same with flags, and records every run:
#
# ```bash
# python -m ampbook.train --precision amp-fp16 --data-cache device \
#     --channels-last --cudnn-benchmark --fused-optimizer --sync-every 25 \
#     --fp16-stream --compile default
# ```
#
# `--fp16-stream` is ERFNet's fix; in your network, look for the operator where an
# fp32 input meets a 16-bit one and promotes everything after it (the doctor of the
# previous chapter lists the fp32 operators under autocast), and cast there.
#
# ## Summary
#
# - At the post's setup the GPU is not the bottleneck: the loop waits for data, and the
#   GPU waits for the host inside each step. AMP's faster kernels cannot show.
# - Fixing the data path, the layout of batch norm, the host syncs and launch overhead,
#   the promoted residual stream and, on a GPU, fusing kernels moves the step towards
#   the kernels' own time, and AMP's gain with it.
# - Step time, kernel time and idle time are three different numbers; `torch.profiler`
#   gives the second, and the third is the difference. Efficiency from wall time mixes
#   them.
# - On a CPU the same changes may or may not pay: measure them on your machine
#   (`python -m ampbook.bench ladder --device cpu`).
#
# ## Exercises
#
# 1. Run `python -m ampbook.bench ladder --rungs 0,2` on your GPU. How much of rung 2's
#    gain comes from `cudnn.benchmark` alone? (Set `cudnn_benchmark` without
#    `channels_last` in a `TrainConfig` and time it with `bench_ladder.measure_rung`.)
# 2. Rung 3 reads the loss back only every few steps. Time `--sync-every 1`, `5` and
#    `25` at the top rung: from how many steps on is the host's wait no longer visible?
# 3. Find the first operator where autocast promotes to fp32 in a network of your own
#    (`python -m ampbook.doctor --model ...`), cast there, and measure the memory saved.
# 4. With the recipe's step at the post's setting on your GPU, how many images per
#    second must a loader deliver to keep it busy, and how many of your cores' workers
#    is that?
