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
# # AMP in your own loop
#
# Chapter 3's loop has three AMP lines; a real loop has more around them. PyTorch's
# "Automatic Mixed Precision examples" {cite:p}`pytorch-amp-examples` give a pattern for
# most cases. This chapter writes each as a short loop you can paste, runs it at a tiny
# size, and checks by a computation that it does what the text says; the book's tests
# run each check once more with the pattern written wrong, to see it fail.
#
# **What you will learn**: where `scaler.scale`, `step` and `update` go in accumulation,
# several models or losses, a gradient penalty, a custom Function, inference, DDP and
# FSDP2; which patterns hold exactly and which within rounding; fp16 or bf16, from
# measurements; what `torch.compile` and checkpointing change.
#
# **What you need**: chapter 3's loop; a C++ compiler for inductor (else the chapter
# says so).

# %% tags=["parameters", "remove-cell"]
amp_dtype = "float16"  # the 16-bit type of the GradScaler patterns (fp16 needs one)
micro_batches = 4  # gradient accumulation: micro-batches per optimizer step
micro_batch_size = 2
image_size = 16  # the tiny network's square images
ddp_steps = 3  # optimizer steps of the two-process run
erfnet_height = 32  # ERFNet's images for memory and step time (multiples of 8)
erfnet_width = 64
repeats = 3  # timed ERFNet steps per setting (the median is shown)
scaler_steps = 3  # GradScaler steps of ERFNet for the fp16/bf16 table
compile_backend = "inductor"  # "inductor" (needs a C++ compiler) or "aot_eager"
results_dir = None  # committed GPU results; None: data/results
seed = 0

# %% tags=["remove-input"]
from ampbook.core import params
from ampbook.core.env import print_environment

params.choice("amp_dtype", amp_dtype, ["float16", "bfloat16"])
for name in (
    "micro_batches",
    "micro_batch_size",
    "ddp_steps",
    "repeats",
    "scaler_steps",
):
    params.integer(name, globals()[name], minimum=1)
params.integer("image_size", image_size, minimum=4)
for name in ("erfnet_height", "erfnet_width"):
    value = params.integer(name, globals()[name], minimum=8)
    params.rule(
        name,
        value,
        value % 8 == 0,
        "must be a multiple of 8",
        why="ERFNet downsamples by 8",
    )
params.choice("compile_backend", compile_backend, ["inductor", "aot_eager"])
params.folder("results_dir", results_dir, empty="data/results")
params.seed("seed", seed)
print_environment("cpu")

# %% tags=["hide-cell"]
import inspect
import os

import torch

from ampbook import results
from ampbook.chapters import ch8
from ampbook.chapters.ch7.rungs import RUNG_SETS
from ampbook.chapters.ch8 import (
    accumulation,
    checkpointing,
    compiled,
    custom_function,
    ddp,
    fp16_or_bf16,
    fsdp,
    inference,
    penalty,
    shared_scaler,
)
from ampbook.core.devices import display_name, load_devices
from ampbook.core.page import MIB, glue_all, md, md_table
from ampbook.numerics.gradstats import training_batches
from ampbook.numerics.loss_scaling import train_with_scaling
from ampbook.segmentation.cityscapes import NUM_CLASSES
from ampbook.segmentation.model import ERFNet

dtype = getattr(torch, amp_dtype)
found = results.load_results_dir(results_dir)
load = os.getloadavg()[0]

# %% [markdown]
# The checks run on the CPU (load average {glue:text}`load:.1f` when this page was
# built): a pattern is the same code on a GPU with `device_type="cuda"`, and what the
# checks compare (two updates, two sets of weights, two dtypes) is the same there. The
# operators autocast casts are not quite: CUDA's autocast runs `softmax` and `exp` in
# fp32 (they are on its fp32 list), where the CPU's runs these two in the dtype they
# are given {cite:p}`pytorch-amp-docs`, so a difference these checks measure on
# a CPU through such an operator (the inference check's softmax below) is not the
# difference a GPU would show. The scaler patterns use {glue:text}`amp_dtype`; fp16
# on a CPU runs slow fallback kernels, so the sizes are tiny. The small network of most sections,
# `TinyNet` (`ampbook.chapters.ch8.tiny`), is three convolutions to per-pixel class
# scores, trained with cross-entropy per pixel as ERFNet is, with an optional batch
# norm.
#
# (ch8-accumulate)=
# ## Gradient accumulation
#
# A batch too large for memory can be split into micro-batches whose gradients add up
# before one optimizer step. The loss of each is divided by their number, so that the
# sum is the mean over the whole batch; the scaler scales each, and steps and updates
# once:

# %%
glue_all(load=load, amp_dtype=amp_dtype)
print(inspect.getsource(accumulation.accumulate_step))

# %% [markdown]
# The check (`accumulation.check_accumulation`) runs this step over
# {glue:text}`micro_batches` micro-batches of {glue:text}`micro_batch_size` images and
# over one batch of all of them, from the same weights, with SGD (whose update is the
# gradient times the learning rate; Adam divides a constant factor back out, so it
# would hide a forgotten division), and compares the two updates: the largest
# difference over the largest update. Two sums of the same terms in another order
# differ by rounding only; the tolerance is 64 unit roundoffs of fp32 for fp32 and 4
# of the 16-bit type under autocast (`rounding_tolerance`, in
# `ampbook.chapters.ch8.tiny`):

# %%
acc = [
    accumulation.check_accumulation(
        dtype=d,
        micro=micro_batches,
        micro_batch=micro_batch_size,
        size=image_size,
        seed=seed,
    )
    for d in (None, dtype)
]
bn = accumulation.check_accumulation(
    micro=micro_batches,
    micro_batch=micro_batch_size,
    size=image_size,
    batch_norm=True,
    seed=seed,
)
glue_all(
    micro_batches=micro_batches,
    micro_batch_size=micro_batch_size,
    bn_diff=bn.difference,
)
md("\n\n".join(c.verdict() for c in (*acc, bn)))

# %% [markdown]
# The identity holds for a network without batch norm. With one (the last line), each
# micro-batch is normalised by its own mean and variance, not the whole batch's, and
# the updates differ by {glue:text}`bn_diff:.1%`, far beyond rounding: accumulation
# with batch norm trains a model with a smaller batch for its statistics. ERFNet has
# batch norm in every block, so the runner's `--accumulate` is not the same as a
# larger `--batch-size` there.
#
# ### Clipping the gradients of accumulated micro-batches
#
# `clip_grad_norm_` must see the gradients unscaled, and whole: `scaler.unscale_`
# once, after the last micro-batch, and `scaler.step` then knows not to divide
# again:

# %%
print(inspect.getsource(accumulation.accumulate_clip_step))

# %% [markdown]
# The check (`accumulation.check_clipped_accumulation`) clips to a norm of
# {glue:text}`clip` (below the tiny network's gradient norm, so the clipping acts)
# and compares the update with the same step over one batch of all the micro-batches
# (one backward, so `unscale_` has only one place to go), under autocast to
# {glue:text}`amp_dtype` with a GradScaler at its default scale; then the same with
# `unscale_` called after the first micro-batch
# (`accumulation.unscale_after_first_micro_batch`):

# %%
clipped = [
    accumulation.check_clipped_accumulation(
        step,
        dtype=dtype,
        micro=micro_batches,
        micro_batch=micro_batch_size,
        size=image_size,
        seed=seed,
    )
    for step in (
        accumulation.accumulate_clip_step,
        accumulation.unscale_after_first_micro_batch,
    )
]
glue_all(clip=accumulation.CLIP, clip_wrong=clipped[1].difference)
md(
    "After the last micro-batch: "
    + clipped[0].verdict()
    + "\n\nAfter the first: "
    + clipped[1].verdict()
)

# %% [markdown]
# Called after the first micro-batch, `unscale_` divides that micro-batch's gradients
# by the scale; the later micro-batches then add gradients still multiplied by it (65536
# here, GradScaler's default), `clip_grad_norm_` clips their sum, and `step`, told the
# gradients are unscaled, does not divide again. The update points along the later
# micro-batches' gradients alone, {glue:text}`clip_wrong:.0%` of its size away from the
# right one (measured). The inf check, made by `unscale_`, also covers only the first
# micro-batch: an overflow in a later one goes unchecked and `step` applies it. No
# error is raised: only a second `unscale_` before `update` raises one.
#
# ## Several models, losses and optimizers with one GradScaler
#
# One scaler serves any number of them: one `scaler.scale` per loss, one
# `scaler.step` per optimizer, and one `scaler.update` at the end of the iteration.
# PyTorch's example couples the losses: each depends on both models' outputs.

# %%
print(inspect.getsource(shared_scaler.coupled_losses))
print(inspect.getsource(shared_scaler.two_models_step))

# %% [markdown]
# The check takes one iteration and reads which optimizer changed its model's weights
# and what the scale did, first with nothing planted, then with an overflow planted
# in the second loss (multiplied by {glue:text}`plant:.0e`, finite in fp32, whose
# gradient overflows fp16). The scaler starts at {glue:text}`init_scale:g`, not at
# GradScaler's default of 65536: there the coupled losses overflow with nothing
# planted (the first line below), and a halving after the plant would not be the
# plant's doing. With the coupled losses, and with losses that each reach only one
# model (`shared_scaler.separate_losses`):

# %%
default_scale = shared_scaler.check_shared_scaler(
    dtype=dtype, size=image_size, seed=seed, plant=False, init_scale=2.0**16
)
shared = [
    shared_scaler.check_shared_scaler(
        losses=f, dtype=dtype, size=image_size, seed=seed, plant=p
    )
    for f in (shared_scaler.coupled_losses, shared_scaler.separate_losses)
    for p in (False, True)
]
glue_all(plant=shared_scaler.PLANT, init_scale=shared_scaler.INIT_SCALE)
md(
    "\n\n".join(
        ["At GradScaler's default scale: " + default_scale.verdict()]
        + [s.verdict() for s in shared]
    )
)

# %% [markdown]
# Each `scaler.step` checks the gradients of its own optimizer's parameters and skips
# when they hold an inf or NaN. Where every loss reaches every model, an inf in a
# loss's value reaches every gradient and the optimizers skip together (the planted
# line); an overflow inside the backward reaches only the gradients it passes
# through, so one optimizer can skip alone even with coupled losses: at the default
# scale (the first line) `3 * out0 - 5 * out1` weights model 1's gradients by 5 and
# only the second optimizer skipped. Where a loss reaches one model only, only that
# model's optimizer skips and the other steps. The one `update` sees the overflow
# either way and halves the scale once. An `update`
# after each `step` would halve it once per optimizer that found an inf (twice with
# the coupled losses, once with the separate ones: the tests run both), and would
# also change the scale between two `step`s: the second optimizer's gradients,
# multiplied by the old scale in the backward pass, would be divided by the new one.
#
# ## A gradient penalty
#
# A penalty on the gradients' norm needs the gradients inside the graph
# (`torch.autograd.grad(..., create_graph=True)`). Taken of the scaled loss, they are
# scaled too, and must be divided by the scale before the penalty uses them; the
# penalty itself is part of the forward pass and runs under autocast:

# %%
print(inspect.getsource(penalty.penalty_step))

# %% [markdown]
# The check compares the penalty of this step under AMP (a GradScaler at a scale of
# 1024) and the update it makes (the weights after the step minus before) with
# `penalty_step` in fp32 without a scaler, and then the same for the step written
# without the division (`penalty.penalty_step_without_unscaling`). The update is
# compared too because a penalty can have the right value and still not train: taken
# of gradients computed without `create_graph=True`, it reaches no weight (the tests
# plant that, and only the update catches it). The update's tolerance is wider, 64
# roundoffs (`penalty.UPDATE_UNITS`): it goes through the penalty's second
# derivative, and over 12 seeds and two sizes it strayed up to 32 roundoffs of fp16
# from fp32's (measured when the check was written), where the penalty written wrong
# moves it by about its own size:

# %%
pen = [
    penalty.check_penalty(step, dtype=dtype, size=image_size, seed=seed)
    for step in (penalty.penalty_step, penalty.penalty_step_without_unscaling)
]
glue_all(pen_ratio=pen[1].difference + 1)
md(
    "\n\n".join(
        ["Unscaled: " + pen[0].verdict(), "Without unscaling: " + pen[1].verdict()]
    )
)

# %% [markdown]
# Without the division the penalty is {glue:text}`pen_ratio:.0f` times too large, the
# scale itself, and the update is off with it: the step trains on a penalty that
# changes whenever the scaler changes its scale.
#
# (ch8-custom-function)=
# ## A custom autograd Function
#
# Autocast casts the inputs of the operators on its lists; the operators inside a
# custom `torch.autograd.Function` are cast one by one, or not at all when the
# Function's own arithmetic needs fp32. `torch.amp.custom_fwd(device_type=...,
# cast_inputs=torch.float32)` casts the Function's floating-point inputs to fp32 and
# runs its forward with autocast off; `custom_bwd` runs the backward with the
# forward's autocast state {cite:p}`pytorch-amp-examples`. A naive log-sum-exp, whose
# `exp` overflows fp16 above 11.1:

# %%
print(inspect.getsource(custom_function.exp_sum_log))

# %% [markdown]
# The check feeds it a 16-bit activation of 12 (a Linear layer's output under
# autocast), once as written and once with `cast_inputs=None` (the decorator without
# casting: the forward gets what it is given). The forward computes `exp` with
# autocast off, on the tensor as received: CUDA's autocast would run `exp` in fp32 of
# its own accord (it is on its fp32 list), the CPU's does not, and the check should
# not depend on which:

# %%
fn = [
    custom_function.check_custom_function(cast_inputs=c, dtype=dtype, seed=seed)
    for c in (torch.float32, None)
]
md(
    "\n\n".join(f.verdict() for f in fn)
    + "\n\nWith the cast the forward computed in fp32 and its output was "
    + ("finite" if fn[0].output_finite else "not finite")
    + f"; without it the forward computed in {fn[1].received} and its output was "
    + (
        "finite: exp(12) fits this type, so here the cast changes only the precision"
        if fn[1].output_finite
        else "infinite: exp(12) is above the type's largest finite value"
    )
    + "."
)

# %% [markdown]
# The gradient leaves the Function in the dtype of its input, so the layers before it
# see what they would see without it.
#
# ## Inference under autocast
#
# Inference needs no scaler (there is no backward pass), and `torch.inference_mode`
# keeps autograd from recording anything. Batch norm must be in eval mode, so that it
# uses its running statistics rather than the batch's; softmax is on autocast's fp32
# list on CUDA, and on the CPU it runs in the dtype it is given
# {cite:p}`pytorch-amp-docs`.

# %%
print(inspect.getsource(inference.predict))

# %% [markdown]
# The check hands `predict` a tiny network with batch norm (running statistics of
# its own) as a training loop leaves it, in train mode, and compares its class
# probabilities with the fp32 forward of the same network in eval mode (tolerance: 4
# roundoffs of the 16-bit type). It also counts the memory of each forward: on a CPU
# there is no `torch.cuda.max_memory_allocated`, so `ampbook.measure.memory.AllocatedBytesMeter`
# adds up the bytes of every tensor an operator makes and takes them off when the
# tensor is freed; its peak is the most the forward's tensors held at once (weights
# and inputs, made before, are not counted).

# %%
inf = [
    inference.check_inference(dtype=d, seed=seed)
    for d in (torch.bfloat16, torch.float16)
]
glue_all(inf_ratio=inf[0].amp_bytes / inf[0].fp32_bytes)
md("\n\n".join(i.verdict() for i in inf))

# %% [markdown]
# The activations are 16-bit, so on the CPU the forward's peak is about half fp32's
# ({glue:text}`inf_ratio:.2f` of it in bf16, measured); on CUDA softmax returns fp32,
# which adds back part of it. A `predict` without
# `model.eval()` would leave the network in train mode, normalise by the batch's
# statistics and give other probabilities: the check then fails (the tests run it
# with that line left out).
#
# ## DistributedDataParallel
#
# Under DDP each process runs the same loop on its share of the batch, and DDP
# averages the gradients across processes during the backward pass, so the scaler
# needs nothing new: each process scales its own loss, and since every process then
# holds the same averaged gradients, each unscales and checks the same values. The
# loop is chapter 3's:

# %%
print(inspect.getsource(ddp.train_steps))

# %% [markdown]
# The check (`ddp.check_ddp`) starts two processes that join a gloo process group
# (CPU collectives, as the runner's `torchrun` test uses), trains the tiny network in
# each on half of every batch, and compares the weights with one process trained on
# the whole batches:

# %%
ddp_run = ddp.check_ddp(
    dtypes=(None, dtype), steps=ddp_steps, size=image_size, seed=seed
)
glue_all(ddp_s=ddp_run.seconds)
md("\n\n".join(r.verdict() for r in ddp_run.results))

# %% [markdown]
# The two processes took {glue:text}`ddp_s:.1f` s, start included. The same
# holds for the runner, `torchrun --nproc_per_node 2 -m ampbook.train`, except where
# its network breaks it: ERFNet's batch norm normalises each process's share by its
# own statistics (as in accumulation above) unless converted with
# `nn.SyncBatchNorm` (which needs GPUs: on gloo with CPU modules it refuses), and its
# dropout draws other numbers in each process.
#
# (ch8-fsdp)=
# ### FSDP2: mixed precision per module
#
# Models too large for one GPU's memory are sharded instead: `fully_shard`
# (`torch.distributed.fsdp`, "FSDP2") splits each wrapped module's weights across the
# processes and gathers them for its forward and backward {cite:p}`pytorch-fsdp2`.
# Its `MixedPrecisionPolicy` is a precision per module, not per operator as
# autocast's: the gathered weights are cast to `param_dtype` at the module's
# boundary and every operator inside runs in it, the gradients are reduced across
# processes in `reduce_dtype`, and the sharded weights the optimizer updates stay
# fp32. No GradScaler here: bf16 has fp32's range. Sharding the tiny network layer by
# layer:

# %%
print(inspect.getsource(fsdp.shard))

# %% [markdown]
# The check (`fsdp.check_fsdp`) trains it so in two gloo processes, each on half of
# every batch, with `param_dtype` bf16 and `reduce_dtype` fp32, bf16 and unset, and
# compares each step's loss (averaged over the two processes) and the update after
# {glue:text}`ddp_steps` steps with one process training the whole batches in fp32
# (tolerance: 4 roundoffs of bf16, the dtype the forward ran in). An all-reduce hook
# (`set_all_reduce_hook`, which FSDP2 calls on the reduce-scatter's output) records
# the dtype the gradients were reduced in:

# %%
fsdp_run = fsdp.check_fsdp(steps=ddp_steps, size=image_size, seed=seed)
glue_all(fsdp_s=fsdp_run.seconds, ddp_steps=ddp_steps)
md("\n\n".join(r.verdict() for r in fsdp_run.runs))

# %% [markdown]
# Left unset, `reduce_dtype` follows `param_dtype`: the gradients were reduced in
# bf16, as with `reduce_dtype=torch.bfloat16`. With two processes the two reduce
# dtypes land within bf16's rounding of fp32 alike (the lines above). With many
# processes a bf16 reduction rounds at each of its additions, which two processes
# cannot show: `reduce_dtype=torch.float32` avoids that for twice the bytes on the
# wire (reasoned from the formats, not measured here). What one forward
# saved for the backward pass, counted by dtype (`fsdp.saved_dtypes`, measured here):

# %%
saved_rows = [
    ("one process, fp32", fsdp_run.fp32_saved),
    ("one process, autocast to bf16", fsdp_run.autocast_saved),
    ("FSDP2, param_dtype bf16", fsdp_run.runs[0].saved),
]
md_table(
    [
        (what, *(counts.get(d, 0) for d in ("float32", "bfloat16", "int64")))
        for what, counts in saved_rows
    ],
    ["forward", "float32", "bfloat16", "int64"],
)

# %% [markdown]
# Under CPU autocast the loss saves fp32 tensors beside the convolutions' bf16 inputs
# and bf16 weight copies: `cross_entropy`'s `log_softmax` ran in bf16 here, and the
# `nll_loss` after it, on the CPU's fp32 list, cast its input up (the output dtypes
# tried on this PyTorch while writing; the table counts only what was saved); on
# CUDA `cross_entropy`, `log_softmax` and `nll_loss` are all on the fp32
# list {cite:p}`pytorch-amp-docs`. Under FSDP2's policy every operator of the sharded
# modules ran in bf16, and so did the loss, which received bf16 scores. The policy
# casts once per module and leaves each operator to run in what it is given; autocast
# casts per operator, by its lists {cite:p}`pytorch-fsdp2`. A loss computed in bf16
# rounds to 8 significant bits: `MixedPrecisionPolicy(output_dtype=torch.float32)` or
# `.float()` on the scores keeps it in fp32. With `param_dtype` fp16 the gradients
# need a scaler, and FSDP's `ShardedGradScaler` all-reduces the inf flag across
# processes, because each holds different shards and could otherwise skip alone: the
# exception to {ref}`ch9-ranks` (chapter 9), where DDP's ranks hold the same
# averaged gradients. The two processes took {glue:text}`fsdp_s:.1f` s.
#
# (ch8-fp16-or-bf16)=
# ## fp16 or bf16
#
# The book has measured both. The table puts side by side what chapter 1 computed of
# the two formats, what chapter 4's functions measure of ERFNet's gradients here (the
# share that rounds to zero in each format without scaling, and the steps GradScaler
# skips while it finds its scale), the committed GPU runs of chapter 3 in both, and
# one training step here in each. GradScaler starts at a scale of 2¹⁶ and halves it at
# each step it skips, until the scaled gradients fit (chapter 4). Whether it skips at
# all depends on the network and the size: the committed GPU fp16 run (the GPU lines)
# kept 2¹⁶ and skipped no step, while the steps skipped here are those of ERFNet on
# {glue:text}`erfnet_width`x{glue:text}`erfnet_height` images on this CPU, a size
# chosen for time, not for what a training run meets:

# %%
batches, _ = training_batches(
    None, erfnet_height, erfnet_width, scaler_steps, 1, synthetic_train=2, seed=seed
)
torch.manual_seed(seed)
net = ERFNet(NUM_CLASSES)
images, labels = batches[0]
torch.nn.functional.cross_entropy(net(images), labels, ignore_index=255).backward()
flushed = fp16_or_bf16.flushed_fractions([p.grad for p in net.parameters()])
net.zero_grad(set_to_none=True)
here = {
    f"amp-{short}": fp16_or_bf16.step_times(net, images, labels, d, repeats)
    for short, d in (("fp16", torch.float16), ("bf16", torch.bfloat16))
}
torch.manual_seed(seed)
run = train_with_scaling(ERFNet(NUM_CLASSES), batches, "dynamic", fp16="autocast")
gpu = ch8.gpu_16bit_runs(found)
rows = ch8.choice_rows(flushed, sum(run.skipped), len(run.skipped), gpu, here)

# %% tags=["hide-input"]
md_table(rows, ["", "fp16", "bf16", "measured, computed or published: where"])

# %%
no_bf16 = [display_name(k) for k, d in load_devices().items() if not d.bf16_tflops]
glue_all(no_bf16=", ".join(no_bf16), fp16_flushed=flushed["fp16"])
if gpu:
    glue_all(
        gpu_name=display_name(gpu["amp-fp16"].device_name),
        gpu_ratio=gpu["amp-bf16"].step_s / gpu["amp-fp16"].step_s,
        gpu_ratio_lo=min(ch8.gpu_step_ratios(gpu)),
        gpu_ratio_hi=max(ch8.gpu_step_ratios(gpu)),
        gpu_skipped=gpu["amp-fp16"].skipped_steps,
        acc_gap=abs(
            gpu["amp-bf16"].final_val_pixel_accuracy
            - gpu["amp-fp16"].final_val_pixel_accuracy
        ),
        fp16_last_change=ch8.last_epoch_changes(gpu)["amp-fp16"],
        bf16_last_change=ch8.last_epoch_changes(gpu)["amp-bf16"],
    )
else:
    nan = float("nan")
    glue_all(
        gpu_name="no GPU",
        gpu_ratio=nan,
        gpu_ratio_lo=nan,
        gpu_ratio_hi=nan,
        gpu_skipped=0,
        acc_gap=nan,
        fp16_last_change=nan,
        bf16_last_change=nan,
    )
md(ch8.choice_verdict(gpu, here))

# %% [markdown]
# A decision rule, with the evidence beside each line:
#
# 1. **A GPU with bf16 tensor cores (Ampere and later): bf16 first.** Its range is
#    fp32's (the table's first two lines); without scaling, in this one backward of
#    ERFNet at init (measured here), no gradient rounds to zero in bf16 where fp16
#    loses {glue:text}`fp16_flushed:.2%` of them (fourth line); there is no
#    scaler to place and no step to skip (fifth line).
# 2. **fp16 with a GradScaler where it is faster in every epoch.** A ratio inside
#    its epoch-to-epoch spread is not a speed-up (`ampbook.chapters.ch3.pace` judges it,
#    as the line above does). On the committed {glue:text}`gpu_name` runs bf16's step
#    took {glue:text}`gpu_ratio:.2f` times fp16's (per epoch
#    {glue:text}`gpu_ratio_lo:.3f`-{glue:text}`gpu_ratio_hi:.3f`), their final val
#    pixel accuracies {glue:text}`acc_gap:.3f` apart, and the scaler skipped
#    {glue:text}`gpu_skipped` steps in the whole fp16 run (the GPU lines). That is one
#    synthetic run of each, and in its last epoch alone the val pixel accuracy moved
#    by {glue:text}`fp16_last_change:.3f` (fp16) and {glue:text}`bf16_last_change:.3f`
#    (bf16), more than the gap between them: the runs do not tell the two formats'
#    accuracies apart, and so show no cost of fp16 either; the line above says
#    whether it was faster. Measure your own step in both, epoch by epoch.
# 3. **A GPU without bf16 tensor cores: fp16 with a GradScaler.** The table of GPUs
#    (`data/reference/devices.yml`, published) lists no bf16 tensor rate for
#    {glue:text}`no_bf16`: there bf16 has no tensor-core rate of its own.
# 4. **fp16 where precision matters more than range.** Its unit roundoff is 8 times
#    smaller (third line): values that are all well inside fp16's range (normalised
#    activations, attention scores after scaling) keep three more bits.
# 5. **On a CPU, measure.** The last line is this machine's step in each: a CPU's
#    16-bit speed depends on its kernels (chapter 3's probe), not on the format.
#
# ## torch.compile with autocast
#
# `torch.compile` traces the model's forward (and AOTAutograd its backward) into
# graphs, with autocast's casts in them as ordinary operators, and inductor then fuses
# the casts into the kernels around them. The step to compile is chapter 3's:

# %%
print(inspect.getsource(compiled.train_step))

# %% [markdown]
# The check (`compiled.check_compile`, the tiny network) counts the casts autocast
# makes in one eager forward (chapter 4's `CastCounter`) and the cast operators in
# the forward and backward graphs compilation made, compares the eager and the
# compiled step's loss (these rows under bf16 autocast), and asks
# `torch._dynamo.explain` what the whole step with a GradScaler compiles to (under
# fp16 autocast, the dtype a GradScaler is for):

# %%
comp = compiled.check_compile(
    compile_backend, dtype=torch.bfloat16, size=image_size, seed=seed
)
rows = [
    ("backend that ran", comp.backend),
    ("casts, eager forward (bf16)", comp.eager_casts),
    ("casts in the compiled forward graph", comp.graph_casts["forward"]),
    ("casts in the compiled backward graph", comp.graph_casts["backward"]),
    ("kernels inductor generated", comp.kernels if comp.kernels is not None else "-"),
    (
        "loss, eager / compiled (bf16)",
        f"{comp.eager_loss:.5f} / {comp.compiled_loss:.5f}",
    ),
    ("compilation (s)", f"{comp.compile_s:.1f}"),
    (
        "graphs / graph breaks in the step (fp16)",
        f"{comp.graphs} / {comp.graph_breaks}",
    ),
]
glue_all(graph_breaks=comp.graph_breaks, graphs=comp.graphs, op_graphs=comp.op_graphs)
md_table(rows, ["", "measured here"])

# %%
glue_all(plain_graphs=comp.plain_graphs, plain_breaks=comp.plain_graph_breaks)
md(
    "Every graph break TorchDynamo counted in the step with a GradScaler (in the "
    "step's own code and in the functions it traced into): "
    + "; ".join(comp.break_reasons)
    + ".\n\nThe same step without a GradScaler (`compiled.train_step_without_scaler`:"
    f" {comp.plain_graphs} graphs, {comp.plain_graph_breaks} breaks): "
    + "; ".join(comp.plain_break_reasons)
    + ".\n\nOnly with the scaler: "
    + ("; ".join(comp.scaler_breaks()) or "nothing")
    + ".\n\n"
    + ch8.compile_reading(comp)
)

# %% [markdown]
# The whole step is not one graph, with or without a GradScaler: TorchDynamo traced it
# into {glue:text}`graphs` graphs with {glue:text}`graph_breaks` breaks with the
# scaler and {glue:text}`plain_graphs` with {glue:text}`plain_breaks` without it
# (`torch._dynamo.explain`'s counts, for the frames it compiled), and
# {glue:text}`op_graphs` of the graphs holds an operator (the forward and the loss;
# the others are empty). `loss.backward()` breaks it either way. The lists above
# are another count: `torch._dynamo.utils.counters["graph_break"]` records a reason
# each time dynamo stops tracing anywhere, in the functions the step calls too, so it
# names more reasons than `explain` counts breaks. The `graph_break()` in them is
# the optimizer's own: `optimizer.step`'s wrapper in `torch/optim/optimizer.py`
# calls `torch._dynamo.graph_break()` before and after the update. The scaler's
# `scale`, `step` and `update`, functions dynamo skips (they run eagerly), add
# reasons to that list but neither graphs nor breaks to `explain`'s count. Compile
# the model, as the runner does (`--compile`), not the step: the
# forward and backward are the graphs worth fusing, and the scaler's few operators
# run eagerly between them.
#
# On a GPU the measurement is chapter 7's ladder, whose compiled rung adds
# `torch.compile` to the eager rung below it:

# %%
ladder_rows = ch8.ladder_compile_rows(found.gpu_ladders())
compiled_rung = RUNG_SETS["compiled"][0]
(
    md_table(
        ladder_rows,
        ["GPU", "precision", f"rung {compiled_rung - 1} step (s)",
         f"rung {compiled_rung} step (s)", "speedup (x)"],
        [None, None, ".4f", ".4f", ".2f"],
    )
    if ladder_rows
    else md(
        "No GPU ladder (`data/results/ladder_*.json`) is committed yet: the GPU "
        f"check (`python -m booktools.gpucheck`) measures rung {compiled_rung}, and "
        "this table will show it."
    )
)

# %% [markdown]
# ## AMP against activation checkpointing
#
# Both save activation memory. Autocast stores 16-bit activations (and adds 16-bit
# copies of the weights it casts); `torch.utils.checkpoint` stores only a block's
# input and recomputes the rest of the block in the backward pass, trading time for
# memory. Wrapping ERFNet's blocks:

# %%
print(inspect.getsource(checkpointing.Checkpointed))
print(inspect.getsource(checkpointing.checkpoint_blocks))

# %% [markdown]
# ERFNet at {glue:text}`erfnet_width`x{glue:text}`erfnet_height`, one image, in fp32,
# under autocast, checkpointed, and both: the peak bytes of the tensors one training
# step makes beyond the weights and the gradients (`AllocatedBytesMeter` over forward
# and backward, the gradients already allocated by a step before), and the median
# step time of {glue:text}`repeats` timed steps.

# %%
mem = checkpointing.memory_rows(
    erfnet_height, erfnet_width, dtype=torch.bfloat16, repeats=repeats, seed=seed
)
glue_all(erfnet_height=erfnet_height, erfnet_width=erfnet_width, repeats=repeats)
md_table(
    [
        (
            r.setting,
            r.peak_bytes / MIB,
            r.peak_bytes / mem[0].peak_bytes,
            r.step_s * 1e3,
            r.step_s / mem[0].step_s,
        )
        for r in mem
    ],
    ["setting", "peak MiB", "x fp32", "step (ms)", "time x fp32"],
    [None, ".2f", ".2f", ".1f", ".2f"],
)

# %%
glue_all(
    ckpt_mem=mem[2].peak_bytes / mem[0].peak_bytes,
    ckpt_time=mem[2].step_s / mem[0].step_s,
    erfnet_weights=sum(p.numel() for p in ERFNet(NUM_CLASSES).parameters()),
)
stored = [
    checkpointing.block_input_dtypes(
        erfnet_height, erfnet_width, torch.bfloat16, fp16_stream=s, seed=seed
    )
    for s in (False, True)
]
glue_all(
    both_mem=mem[3].peak_bytes / mem[0].peak_bytes,
    amp_mem=mem[1].peak_bytes / mem[0].peak_bytes,
)
md(
    ch8.memory_verdict(mem)
    + "\n\n"
    + ch8.stored_inputs_verdict(stored[0], stored[1], "bf16")
)

# %% [markdown]
# Checkpointing cut what the step holds to {glue:text}`ckpt_mem:.2f` of fp32's here,
# for {glue:text}`ckpt_time:.2f` times the time: a second forward pass through every
# block. Autocast stores 16-bit activations, but it also makes a 16-bit copy of every
# weight it casts (ERFNet has {glue:text}`erfnet_weights:,` weights), with or without
# checkpointing; at a size this small the copies can outweigh the halved activations
# (chapter 4 finds the crossover), and on this CPU its 16-bit kernels may be slower
# than fp32's (the time column). Checkpointing under autocast stores each block's
# input in the dtype it arrives in, and the encoder's residual stream stays fp32 under
# autocast unless ERFNet's `fp16_stream` option is on (chapter 7's rung 4; the counts
# above): in the reference ERFNet, autocast leaves the encoder's stored inputs
# fp32. Here "both" used {glue:text}`both_mem:.2f` times fp32's memory, against
# {glue:text}`ckpt_mem:.2f` for checkpointing alone and {glue:text}`amp_mem:.2f` for
# autocast alone (measured, this size); at a training size the activations outweigh
# the weight copies (chapter 4), and the combination is then worth measuring, with
# `fp16_stream` on.
#
# ## Summary
#
# - Accumulation: divide each micro-batch's loss by their number, `scale` each,
#   `step` and `update` once; the update equals one large batch's within rounding,
#   except through batch norm. To clip, `unscale_` after the last micro-batch.
# - Several models, losses, optimizers: one `scale` per loss, one `step` per
#   optimizer, one `update`; each optimizer skips on its own gradients' overflow.
# - A gradient penalty: divide the gradients of the scaled loss by the scale before
#   the penalty uses them, and compute the penalty under autocast.
# - A custom Function that needs fp32: `custom_fwd(device_type=...,
#   cast_inputs=torch.float32)` and `custom_bwd`.
# - Inference: `model.eval()`, `torch.inference_mode()` and autocast, no scaler.
# - DDP needs nothing new from the scaler; batch norm and dropout are what make
#   several processes differ from one.
# - FSDP2's `MixedPrecisionPolicy` casts per module: `param_dtype` for the compute,
#   `reduce_dtype` for the gradients' reduction (unset: `param_dtype`), fp32 for the
#   sharded weights the optimizer updates.
# - fp16 or bf16: bf16 where the hardware has it, fp16 with a scaler where it does not,
#   and a measurement on a CPU (the table above).
# - `torch.compile` keeps autocast's casts in its graphs (inductor compiles them into
#   its kernels); compile the model, not the step (`loss.backward()` breaks the
#   step's graph with or without a scaler, and the scaler adds breaks of its own).
# - Checkpointing and AMP save memory in different ways; checkpointing stores each
#   block's input in the dtype it arrives in, fp32 in ERFNet's encoder unless its
#   `fp16_stream` option is on.
#
# ## Exercises
#
# 1. Change `accumulation.accumulate_step` to not divide the loss and rerun
#    `accumulation.check_accumulation(my_step)`. By how much do the updates differ, and
#    why would Adam hide most of it?
# 2. Write the two-model step with one GradScaler per optimizer. What do the scales do
#    after the planted overflow?
# 3. Call `inference.check_inference` with a `predict` that leaves out `model.eval()`.
#    Which of the check's two conditions fails, and why does the other hold?
#
#    :::{dropdown} Answer
#    The probabilities: the check hands `predict` the network in train mode, and
#    without `eval()` batch norm normalises by the batch's statistics. The memory
#    condition still holds: the activations are 16-bit either way.
#    :::
# 4. Rerun the DDP check with a batch norm in the tiny network
#    (`ddp.check_ddp(batch_norm=True)`), then with a group norm in its place
#    (`ddp.check_ddp(group_norm=True)`). Which matches one process, and why?
#
#    :::{dropdown} Hint
#    Group norm's statistics are per image, so each process normalises its share as
#    one process normalises the whole batch. With GPUs, `nn.SyncBatchNorm` (it
#    refuses CPU modules) computes batch norm's statistics over every process's
#    share to the same effect.
#    :::
# 5. With a GPU, run `python -m ampbook.bench ladder --rungs 4,5` and compare rung 5's
#    step with rung 4's in each precision.
