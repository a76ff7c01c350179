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
# At the ERFNet authors' defaults ({glue:text}`ch7_gpu_w`x{glue:text}`ch7_gpu_h`, batch
# {glue:text}`ch7_gpu_b`, {glue:text}`ch7_workers` loader workers), on the book's GPU
# ({glue:text}`ch7_gpu_name`), amp-fp16's training step took
# {glue:text}`ch7_r0_amp:s` against {glue:text}`ch7_r0_base:s` for fp32 with TF32, and
# the loop trained {glue:text}`ch7_r0_ips:s` images per second. This chapter climbs from
# that setup to an optimised step, one change per rung. On the GPU the rungs above
# rung 0 are {glue:text}`ch7_gpu_kind`; on this machine the chapter measures the rungs
# and precisions its parameters name. At the top eager rung, rung
# {glue:text}`ch7_eager_top`, AMP's step {glue:text}`ch7_takes`
# {glue:text}`ch7_top_amp:s`, {glue:text}`ch7_top_speedup:s` as fast as fp32 with TF32
# on the same rung, and the loop {glue:text}`ch7_trains`
# {glue:text}`ch7_top_ips:s` images per second.
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
rungs = "eager"  # rungs measured here: "0,2", names, all, eager (torch.compile's
# rungs compile for minutes), compiled or ends (rung 0 and the top eager rung)
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
from ampbook.chapters.ch7.rungs import MODE_SETTINGS, RUNG_SETS, parse_rungs, rung_range
from ampbook.core import params
from ampbook.core.env import print_environment

params.device("device", device)
params.rule("precisions", precisions, bool(precisions)
            and set(precisions) <= set(MODE_SETTINGS), "must name modes of "
            + ", ".join(MODE_SETTINGS))
params.rule("rungs", rungs, parse_rungs, f"must name rungs {rung_range()} or one "
            "of " + ", ".join(RUNG_SETS))
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

from ampbook.chapters import ch5, ch7
from ampbook.chapters.ch7 import ladder_predict, ladder_report, ladder_run
from ampbook.chapters.ch7 import rungs as bl
from ampbook.core.devices import display_name, pick_device
from ampbook.core.page import glue_all, md, md_table, use_style
from ampbook.core.provenance import assumed
from ampbook.results import MODE_LABELS, load_results_dir
from ampbook.segmentation.model import ERFNet

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
# `ladder_measure.measure_rung` is that whole measurement.
#
# (ch7-gpu)=
# ## The ladder on a GPU

# %% tags=["hide-input"]
gpu, predicted = ch7.gpu_ladder(results)
md(ch7.missing_ladder_line(results))

# %% [markdown]
# The GPU of the AMP training chapter's runs, {glue:text}`ch7_gpu_name`, at
# {glue:text}`ch7_gpu_w`x{glue:text}`ch7_gpu_h`, batch {glue:text}`ch7_gpu_b`. Each bar
# is one rung in one precision: the GPU's kernel time, solid, and its idle time,
# hatched, on top. Where the committed results hold no measured ladder, the bars above
# rung 0 are the prediction the line above announces, built from that GPU's measured
# layer profiles and training runs, and every number taken from them below says
# "predicted" (in a table, †) or, where the prediction sets it by assumption,
# "assumed" (‡).

# %% tags=["hide-input"]
md(ch7.source_line(gpu, predicted) if gpu else "No GPU data in the results folder.")

# %% tags=["hide-input"] mystnb={"figure": {"caption": "The GPU ladder: step time per rung and precision, the GPU's kernel time (solid) and idle time (hatched) stacked. Measured where the line above says measured, a prediction from the measured rung 0 otherwise.", "name": "fig-ch7-gpu-ladder"}}
fig, ax = plt.subplots(figsize=(7.0, 4.0))
if gpu:
    ch7.draw_ladder(ax, gpu, title="predicted above rung 0 (no GPU ladder measured)"
                   if predicted else "measured")
plt.show()

# %% tags=["hide-input"]
amp_mode = "amp-fp16"
base_mode = "fp32-tf32"
rows = []
for r in gpu.rungs if gpu else []:
    a, b = gpu.cell(r.index, amp_mode), gpu.cell(r.index, base_mode)
    va, vb = (ladder_report.cell_value(gpu, c, "step_s") for c in (a, b))
    rows.append((f"{r.index}: {ladder_report.rung_label(r)}", vb, va,
                 vb / va if a and b else None,
                 ladder_report.cell_value(gpu, a, "busy_share"),
                 ladder_report.cell_value(gpu, a, "images_per_s")))
md_table(rows, ["rung", f"{MODE_LABELS[base_mode]}: step (ms)",
                f"{MODE_LABELS[amp_mode]}: step (ms)", "speedup (x)", "AMP: GPU busy",
                "AMP: images/s"], [None, ".1f", ".1f", ".2f", ".0%", ".0f"])

# %% [markdown]
# Rung 0 on the GPU was first measured on 2026-11-30 by a runner that read more back
# from the GPU each step than a loop needs; a ladder measured with today's runner puts
# its rung 0 beside that one:

# %% tags=["hide-input"]
md(ch7.rung0_comparison(results, gpu, predicted))

# %% tags=["hide-cell"]
eager_top = max((r.index for r in gpu.rungs if not r.compiles
                 and gpu.cell(r.index, amp_mode)), default=0) if gpu else 0
v = {(i, m): ch7.cell_values(gpu, i, m) for i in range(len(bl.RUNGS))
     for m in (amp_mode, base_mode)}
for i in range(eager_top + 1):
    for key, mode in (("amp", amp_mode), ("base", base_mode)):
        for name, value in v[i, mode].items():
            r0 = v[0, mode][name]
            if (i and getattr(r0, "is_measured", False)
                    and not getattr(value, "is_measured", True)
                    and abs(value - r0) <= 1e-9 * abs(r0)):
                # a rung 0 measurement the prediction carries up unchanged
                value = f"{r0.number()} (rung 0, measured, carried)"
            glue_all(**{f"ch7_r{i}_{key}_{name}": value})
top = max((r.index for r in gpu.rungs if gpu.cell(r.index, amp_mode)),
          default=0) if gpu else 0
top_amp = v[eager_top, amp_mode]["step"]
measured_top = not gpu or ladder_report.cell_value(gpu, gpu.cell(eager_top, amp_mode),
                                        "step_s").is_measured
lp = {(p.mode, p.device_name): p for p in results.layer_profiles}
bn_ms = {m: sum(t.measured_s for t in lp[m, gpu.device_name].layers
                if t.type == "BatchNorm2d") * 1e3 if gpu and (m, gpu.device_name) in lp
         else float("nan") for m in (amp_mode, base_mode)}
prediction = (gpu.record.get("prediction") or {}) if gpu else {}
r0_profile = lp.get((amp_mode, gpu.device_name)) if gpu else None
runner_caveat = ch5.runner_caveat(r0_profile).strip() if r0_profile else ""
stream = prediction.get("fp16_stream_bound_ratio")
glue_all(
    ch7_gpu_name=display_name(gpu.device_name) if gpu else "no GPU",
    ch7_gpu_w=gpu.width if gpu else 0, ch7_gpu_h=gpu.height if gpu else 0,
    ch7_gpu_b=gpu.batch_size if gpu else 0, ch7_sync_every=bl.SYNC_EVERY,
    ch7_workers=bl.RUNGS[0].changes["workers"],
    ch7_bn=sum(isinstance(m, torch.nn.BatchNorm2d) for m in ERFNet(19).modules()),
    ch7_params=len(list(ERFNet(19).parameters())),
    ch7_bn_speedup=assumed(ladder_predict.NHWC_BATCH_NORM_SPEEDUP, "ladder_predict."
                           "NHWC_BATCH_NORM_SPEEDUP, from cudnn-frontend#134",
                           fmt=".0f", unit="x"),
    ch7_stream_ratio=(assumed(stream, "predict_ladder: every AMP kernel scaled by the "
                              "cost model's bound ratio", fmt=".3f")
                      if stream else "none"),
    ch7_bn_amp=bn_ms[amp_mode], ch7_bn_base=bn_ms[base_mode],
    ch7_gpu_kind="predicted from rung 0" if predicted else "measured",
    ch7_runner_caveat=(runner_caveat if predicted and runner_caveat else
                       "The line under the ladder says which runner measured it."),
    ch7_takes="takes" if measured_top else "would take",
    ch7_trains="trains" if measured_top else "would train",
    ch7_r0_amp=v[0, amp_mode]["step"], ch7_r0_base=v[0, base_mode]["step"],
    ch7_r0_ips=v[0, amp_mode]["ips"], ch7_top_amp=top_amp,
    ch7_top_speedup=ch7.speedup(v[eager_top, base_mode]["step"], top_amp),
    ch7_top_base=v[eager_top, base_mode]["step"],
    ch7_top_ips=v[eager_top, amp_mode]["ips"], ch7_eager_top=eager_top,
    ch7_r0_speedup=ch7.speedup(v[0, base_mode]["step"], v[0, amp_mode]["step"]),
)
# loader workers for rung 1's rate: rung 0's workers fed at least its images/s, so
# rung 1's rate needs at most this many of them (nan without both rungs)
need = (float(v[1, amp_mode]["ips"]) / float(v[0, amp_mode]["ips"])
        * bl.RUNGS[0].changes["workers"])
glue_all(ch7_r1_workers=f"about {need:.0f}" if need == need else "an unknown number")

# %% [markdown]
# ### Rung by rung
#
# The numbers are those of the GPU ladder above: rung 0 is measured, and the rungs above
# it are {glue:text}`ch7_gpu_kind`; each number says which.
#
# **Rung 0, the ERFNet authors' defaults.** AMP's kernels take
# {glue:text}`ch7_r0_amp_kernel:s` a step against TF32's
# {glue:text}`ch7_r0_base_kernel:s`, and the GPU sits idle
# {glue:text}`ch7_r0_amp_idle:s` of every AMP step ({glue:text}`ch7_r0_base_idle:s` of
# TF32's), waiting for the host: the host launches every kernel of the step one after
# another, autocast's casts among them, and waits for the loss and the GradScaler's
# check every step, and, where the runner of 2026-11-30 measured it, for that runner's
# own two `get_scale()` reads as well: four syncs an AMP step (rung 3 says which runner
# measured it). The loop as a whole spends {glue:text}`ch7_r0_amp_wait:s` of its time
# in data wait: {glue:text}`ch7_workers` workers decode and resize 2048x1024 PNGs.
#
# **Rung 1, the data.** The images and labels are decoded once, at the training size,
# into a uint8 cache on the device; each step only normalises (and flips) them there.
# The step takes {glue:text}`ch7_r1_amp_step:s`; the data wait goes to
# {glue:text}`ch7_r1_amp_wait:s` and the loop trains
# {glue:text}`ch7_r1_amp_ips:s` images per second. Feeding that rate from loader
# workers (the runner's `--workers auto`) instead would need
# {glue:text}`ch7_r1_workers:s` of them, and a core for each: an estimate, rung 1's
# images per second over rung 0's per worker, and at most that many, since rung 0's
# workers fed at least rung 0's rate.
#
# **Rung 2, the layout.** ERFNet's {glue:text}`ch7_bn` batch norms, and above all the
# ones with 16 channels at half resolution, run far below their bound in the NCHW
# layout, whatever the dtype: the H200 profiles give them
# {glue:text}`ch7_bn_amp:.1f` ms of AMP's step and {glue:text}`ch7_bn_base:.1f` ms of
# TF32's. NCHW's batch norm works channel by channel, and 16 channels are too few to
# spread over the GPU's processors. In the NHWC layout ({term}`channels_last`) cuDNN
# runs other kernels: one user measured cuDNN's graph-API batch norm in NHWC about twice
# as fast as in NCHW on an H100, for that user's shapes {cite:p}`cudnn-frontend-134`.
# The prediction *assumes* the same factor, {glue:text}`ch7_bn_speedup:s`, for
# PyTorch's `BatchNorm2d` here, and *assumes* every other kernel unchanged by the
# layout (the convolutions' NHWC kernels included: no profile in NHWC is committed). `cudnn.benchmark` lets cuDNN time its algorithms for
# each convolution shape and keep the fastest {cite:p}`pytorch-tuning-guide`. AMP's
# step: {glue:text}`ch7_r2_amp_step:s`.
#
# **Rung 3, the host.** Two reads happen every step, and each is a
# {term}`host sync <host sync>`: the host waits for the GPU, which then waits for the
# host to launch the next step's first kernels. One is the loss, read back with
# `.item()`. The other is the GradScaler's: for an optimizer without
# `_step_supports_amp_scaling`, `scaler.step()` reads the `found_inf` flag back to the
# host to decide whether to step (the runner's fp32 step, likewise, reads whether the
# gradients are finite). Fused Adam (`torch.optim.Adam(fused=True)`) takes the flag on
# the GPU and skips the step there, so that read goes
# {cite:p}`pytorch-amp-docs,pytorch-tuning-guide`. (Rung 0's idle time was measured
# with the runner of its day. {glue:text}`ch7_runner_caveat` Today's runner reads the
# scale only at an epoch's end.)
# Fewer kernels is not the gain: CUDA's default Adam is already the
# `foreach` implementation, a few dozen multi-tensor launches for ERFNet's
# {glue:text}`ch7_params` parameter tensors. With the loss read every
# {glue:text}`ch7_sync_every` steps and no flag read, the host can run ahead and keep
# the GPU's queue filled. The prediction *assumes* it fills it completely: AMP's idle
# time goes from {glue:text}`ch7_r2_amp_idle:s` to {glue:text}`ch7_r3_amp_idle:s` a step.
#
# **Rung 4, the residual stream.** ERFNet's first downsampler concatenates a 16-bit
# convolution with a max-pool of the fp32 image; `torch.cat` promotes the pair to fp32,
# and every residual block after it adds a 16-bit branch to an fp32 skip, so the whole
# encoder carries fp32 activations under {term}`autocast`. Casting the pool branch to
# the convolution's dtype, fp16 or bf16 (the runner's `--16-bit-stream`, whose older
# name `--fp16-stream` still works; without autocast the model has the same
# parameters and gives the same fp32 outputs) keeps the stream 16-bit: AMP's peak memory goes from
# {glue:text}`ch7_r3_amp_gib:s` to {glue:text}`ch7_r4_amp_gib:s`, its step to
# {glue:text}`ch7_r4_amp_step:s`. fp32 with TF32 has no autocast, and this rung changes
# nothing for it. Where the ladder is predicted, rung 4 scales *all* of AMP's kernel
# time by the cost model's bound with the 16-bit stream over the bound without it
# ({glue:text}`ch7_stream_ratio:s`, computed from the two bounds; applying it to every
# kernel is the assumption): that every kernel shrinks alike,
# although batch norm, which the profiles above show taking about the same time in
# both precisions, need not shrink with the bytes.
#
# The change is two lines of the downsampler's `forward` (`ampbook.segmentation.model`),
# the `if self.fp16_stream:` and the cast under it:

# %%
import inspect

from ampbook.segmentation.model import Downsampler

print(inspect.getsource(Downsampler.forward))

# %% [markdown]
# The next cell runs the first downsampler on this machine's device, on a batch of fp32
# images under autocast (fp16 on a GPU, bf16 on a CPU), once as the reference and once
# with the cast. A forward pre-hook on its batch norm records the dtype of what enters
# it, which is what leaves the concatenation. Without the cast, `torch.cat` promotes
# the 16-bit convolution and the fp32 pool to fp32; with it, both halves are 16-bit and
# so is the result.

# %%
amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
x = torch.randn(batch_size, 3, height, width, device=device)  # fp32, as a loader gives
for fp16_stream in (False, True):
    block = Downsampler(3, 16, fp16_stream).to(device)
    seen = []  # the dtype entering batch norm: the concatenation's output
    block.bn.register_forward_pre_hook(lambda module, args: seen.append(args[0].dtype))
    with torch.autocast(device.type, dtype=amp_dtype):
        out = block(x)
    print(f"fp16_stream={fp16_stream}: torch.cat gives {seen[0]}, the block "
          f"{out.dtype} (run here on {device.type}, autocast to {amp_dtype})")

# %% [markdown]
# **Rung 5, fusion.** `torch.compile` fuses the elementwise work around the
# convolutions (batch norm's normalisation, ReLU, the residual sums, autocast's casts)
# into fewer kernels that read and write each activation once. What that buys needs a
# measured ladder:

# %% tags=["hide-input"]
md(ch7.rung_verdict(gpu, bl.COMPILED[0], [base_mode, amp_mode]) if gpu else "")

# %% [markdown]
# ### What AMP buys at the top
#
# The highest rungs of the ladder ({glue:text}`ch7_gpu_kind:s`), each precision
# against fp32 with TF32 and against strict fp32 on the same rung, with the peak memory (allocated) and the loop's images per
# second. A dash is a cell the ladder does not have.

# %% tags=["hide-input"]
md_table([row for i in sorted({eager_top, top})
          for row in ch7.top_rows(gpu, i, base_mode)] if gpu else [],
         ["rung: precision", "step (ms)", "step ratio over TF32 (x)",
          "step ratio over strict fp32 (x)",
          "peak memory (GiB)", "images/s"],
         [None, ".1f", ".2f", ".2f", ".2f", ".0f"])

# %% [markdown]
# The book's chosen targets for the H200 at the ERFNet authors' defaults: an AMP step
# of 20 ms or less eager and 11 ms compiled, AMP at least 1.3 times TF32's speed eager
# and 1.6 times compiled, a GPU busy 90% of the step, at most 5% of the loop waiting for data,
# 300 images per second, and AMP's peak memory at most 0.57 of fp32's. Each, read from
# the ladder above (`ladder_report.check_targets`): met or missed where the ladder was
# measured, with what the profile shows for a missed one; *predicted* to meet or miss
# where it is a prediction; and no test at all where the prediction sets the value by
# assumption.

# %% tags=["hide-input"]
md("\n".join(f"- {t.line()}" for t in ladder_report.check_targets(gpu)) + "\n\n"
   + ch7.targets_caveat(gpu, predicted, runner_caveat if predicted else "")
   if gpu else "")

# %% [markdown]
# (ch7-here)=
# ## The ladder on this machine
#
# The same ladder, measured here at the size the parameters give, in the precisions
# they name (on a CPU, fp32 and bf16: a CPU has no TF32, and bf16 keeps fp32's range, so
# it needs no loss scaling; `torch.amp.GradScaler("cpu")` exists for fp16, and
# {doc}`03_amp_training` uses it). On a CPU the profiler sees no device: the operators
# and the Python and
# framework code between them run on the same cores, so "kernel" time here is the time
# inside operators and "idle" the time between them. Whether a change pays on a CPU
# depends on its kernels (AMX tiles, AVX-512 BF16, oneDNN's paths for each layout), and
# only a measurement says; the chip's flags do not.

# %%
spec = bl.LadderSpec.for_device(
    device.type, device=str(device), rungs=bl.parse_rungs(rungs),
    modes=tuple(precisions), height=height, width=width, batch_size=batch_size,
    steps=steps, profile_steps=profile_steps, epochs=epochs, train_images=train_images)
# a file of this run's own: two runs of the chapter at once must not share one
path = Path(tempfile.mkdtemp(prefix="ampbook-ch7-")) / f"ladder_{device.type}.json"
here = ladder_run.run_ladder(spec, path,
                             "none" if device.type == "cpu" else "precision",
                             log=lambda line: None)
print(ladder_report.format_table(here))

# %% tags=["hide-input"] mystnb={"figure": {"caption": "This machine's ladder: step time per rung and precision, kernel (or operator) time solid and idle time hatched.", "name": "fig-ch7-here"}}
fig, ax = plt.subplots(figsize=(7.0, 4.0))
ch7.draw_ladder(ax, here)
plt.show()

# %% [markdown]
# On a CPU the bound's ceilings are measured here, with one matmul per dtype and one
# addition, not taken from a data sheet; where the network's operators find faster
# paths than that matmul (oneDNN's convolutions often do), the step reaches more than
# 100% of such a bound. Each rung against the one below it, per precision
# (`ch7.rung_verdict`), judged against the spread of the timed steps as
# {doc}`05_rtx3070` reads its rounds: "faster" only where every timed step of the rung
# was shorter than every step of the rung below. Rung 1 changes where the batches come
# from, not the step, which is timed on one batch already in memory: where it is
# measured, its change in step time is this machine's noise. Where the profiled
# operators took longer than the timed step (the profiled step is a separate, slower
# one), the table above cannot split the step into operator and idle time: its idle
# and busy columns say `n/a`, and a line under the table says why.

# %% tags=["hide-input"]
md("\n".join(f"- {ch7.rung_verdict(here, r.index)}" for r in here.rungs[1:]
             if any(here.cell(r.index, m) for m in here.modes())))

# %% tags=["hide-cell"]
here_top = max(ch7.compared_rungs(here), default=0)
glue_all(ch7_here_r0=ch7.here_speedup(here, 0),
         ch7_here_top=ch7.here_speedup(here, here_top), ch7_here_top_rung=here_top)

# %% [markdown]
# On the GPU above, AMP's speedup over fp32 with TF32 goes from
# {glue:text}`ch7_r0_speedup:s` at the ERFNet authors' defaults to
# {glue:text}`ch7_top_speedup:s` at rung {glue:text}`ch7_eager_top`, the rungs in
# between adding what the table there shows ({glue:text}`ch7_gpu_kind`). On this
# machine, where the ladder was measured, bf16 against fp32 went from
# {glue:text}`ch7_here_r0:s` at rung 0 to {glue:text}`ch7_here_top:s` at rung
# {glue:text}`ch7_here_top_rung` (measured). On a CPU the same rungs may pay, cost, or
# change nothing, because what runs is oneDNN's CPU kernels, whose speed in each layout
# and dtype differs from chip to chip.
#
# (ch7-recipe)=
# ## The recipe
#
# Everything above, in a training step you can paste into your own loop. You give it
# the data decoded once and kept on the device (rung 1: uint8 images, class-index
# labels) and a model with the 16-bit stream where your network promotes one (rung 4:
# ERFNet's `fp16_stream=True`); it adds channels_last and `cudnn.benchmark` (rung 2;
# the latter set for the whole process), a fused optimizer and no host sync in the
# step (rung 3), and `torch.compile` when you pass `compile=True` (rung 5, on a GPU;
# the cell below does not compile). The optimizer and the scaler stay inside it: to
# add a schedule or a checkpoint, copy the function and return them too. It is
# `optimised_training` in `ampbook.chapters.ch7.recipe`; this is its source:

# %%
from ampbook.chapters.ch7 import recipe

print(inspect.getsource(recipe.optimised_training))

# %% [markdown]
# The next cell runs a few steps of it here, on random images and random labels
# already on this machine's device: with 19 classes and random labels the loss stays
# near ln 19 ≈ 2.94, so the numbers show the step runs, not that it learns.

# %%
amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
torch.manual_seed(0)
cache = torch.randint(0, 256, (4, 3, height, width), dtype=torch.uint8, device=device)
targets = torch.randint(0, 19, (4, height, width), device=device)
step = recipe.optimised_training(ERFNet(19, fp16_stream=True), cache, targets,
                                 amp_dtype)
losses = [step(torch.randperm(4, device=device)[:batch_size]) for _ in range(3)]
print(f"losses, read once at the end ({device.type}, autocast to {amp_dtype}, random "
      "labels):", [round(x.item(), 3) for x in losses])

# %% [markdown]
# (ch7-profiler)=
# ### Kernel time and idle time
#
# A step's wall time says how long the step took, not what the device did during it.
# `torch.profiler` records each operator the host runs and, on a GPU, each kernel, copy
# and fill the GPU executes, every one as an interval of time. Merge the device's
# intervals where they overlap and add up what remains: that is the time the device was
# busy. The rest of the wall time is idle time. On a GPU it is time the GPU waits for
# the host: to launch the next kernel or, after a sync, to read the result and resume
# launching. On a CPU the profiler has no separate device timeline: busy time is the
# time the main thread spends inside operators (the union of their intervals, so an
# operator's children, which run inside it, count once, and the optimizer's operators
# under their `Optimizer.step` annotation count too), not a measure of how busy the
# cores are; idle time is the Python and dispatch code between operators. The profiler
# adds work to every operator, so a profiled step usually runs slower than an
# unprofiled one (the two wall times below differ by that overhead and by this
# machine's noise). The ladder profiles every rung with this function,
# `profile_steps` in `ampbook.chapters.ch7.ladder_measure`, and `union_us` is the
# merge; the ladder's idle time is its median unprofiled step less this busy time:

# %%
from ampbook.chapters.ch7 import ladder_measure

print(inspect.getsource(ladder_measure.union_us))
print(inspect.getsource(ladder_measure.profile_steps))

# %% [markdown]
# The next cell times three steps of the recipe without the profiler
# (`ladder_measure.timed_steps`), then profiles three more with `profile_steps` and
# splits their wall time into busy and idle.

# %%
from ampbook.core.env import environment
from ampbook.core.words import plural

n = 3  # steps to time and to profile
index = torch.arange(batch_size, device=device)
step(index)  # one step first: the model and its kernels are warm before any timing
plain_s = sum(ladder_measure.timed_steps(step, (index,), n, device))
prof = ladder_measure.profile_steps(step, (index,), n, device)
wall_ms, busy_ms = prof["profiled_step_s"] * 1e3, prof["kernel_s"] * 1e3
print(f"measured here on {environment(device)['device_name']} ({device.type}, "
      f"{plural(torch.get_num_threads(), 'thread')}),\n{n} steps of the recipe, "
      f"autocast to {amp_dtype}, batch {batch_size} at {width}x{height}:")
print(f"  wall time, not profiled: {plain_s / n * 1e3:8.2f} ms per step")
print(f"  wall time, profiled:     {wall_ms:8.2f} ms per step")
busy = "GPU kernels, copies, fills" if device.type == "cuda" else "CPU in operators"
print(f"  busy ({busy}): "
      f"{busy_ms:8.2f} ms per step ({busy_ms / wall_ms:.0%} of the profiled wall time)")
print(f"  idle (profiled - busy):  {wall_ms - busy_ms:8.2f} ms per step")

# %% [markdown]
# The runner does the same with flags, and records every run:
#
# ```bash
# python -m ampbook.train --precision amp-fp16 --data-cache device \
#     --channels-last --cudnn-benchmark --fused-optimizer --sync-every 25 \
#     --16-bit-stream --compile default
# ```
#
# `--16-bit-stream` is ERFNet's fix; in your network, look for the operator where an
# fp32 input meets a 16-bit one and promotes everything after it (the doctor of the
# previous chapter lists the fp32 operators under autocast), and cast there.
#
# ## Summary
#
# - At the ERFNet authors' defaults the GPU is not the bottleneck: the loop waits for
#   data, and the GPU waits for the host inside each step. AMP's faster kernels cannot
#   show.
# - Fixing the data path, the layout of batch norm, the host syncs and launch overhead,
#   the promoted residual stream and, on a GPU, fusing kernels moves the step towards
#   the kernels' own time, and AMP's gain with it: on the GPU the ladder above is
#   {glue:text}`ch7_gpu_kind:s` ({ref}`ch7-gpu`); on this machine, where it was
#   measured, {ref}`ch7-here` says which rungs paid.
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
#    `channels_last` in a `TrainConfig` and time it with `ladder_measure.measure_rung`.)
# 2. Rung 3 reads the loss back only every few steps. Time `--sync-every 1`, `5` and
#    `25` at the top rung: from how many steps on is the host's wait no longer visible?
# 3. Find the first operator where autocast promotes to fp32 in a network of your own
#    (`python -m ampbook.doctor --model ...`), cast there, and measure the memory saved.
# 4. With the recipe's step at the ERFNet authors' defaults on your GPU, how many images
#    per second must a loader deliver to keep it busy, and how many of your cores'
#    workers is that?
