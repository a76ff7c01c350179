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
# Chapter 3's loop has three AMP lines. A real training loop has more around them:
# gradients accumulated over micro-batches, several models or losses, a gradient
# penalty, a custom autograd Function, inference, several processes, a choice between
# fp16 and bf16, `torch.compile`, activation checkpointing. PyTorch's "Automatic Mixed
# Precision examples" {cite:p}`pytorch-amp-examples` gives the pattern for most of
# them; this chapter writes each as a short loop you can paste, runs it here at a tiny
# size, and checks by a computation that it does what the text says. Every check is
# also a test of the book (`tests/test_patterns.py`), which runs it once more with the
# pattern written wrong (a forgotten division, unscale, `eval()`...) to see it fail.
#
# **What you will learn**: where `scaler.scale`, `scaler.step` and `scaler.update` go
# when a loop is not the minimal one; which patterns hold exactly and which only
# within rounding (and what breaks them: batch norm, a forgotten division, a forgotten
# unscale); how to choose fp16 or bf16 from measurements; what `torch.compile` and
# activation checkpointing change beside autocast. **What you need**: chapter 3's loop;
# `ampbook` and PyTorch; a C++ compiler for `torch.compile`'s inductor (else the
# chapter says it compiled without it).

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
from ampbook.bench.patterns import (
    accumulation,
    checkpointing,
    compiled,
    custom_function,
    ddp,
    fp16_or_bf16,
    inference,
    penalty,
    shared_scaler,
)
from ampbook.chapters import ch8
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
# checks compare (two updates, two sets of weights, two dtypes) does not depend on the
# device. The scaler patterns use {glue:text}`amp_dtype`; fp16 on a CPU runs slow
# fallback kernels, so the sizes are tiny. The small network of most sections,
# `TinyNet` (`ampbook.bench.patterns.tiny`), is three convolutions to per-pixel class
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
# `ampbook.bench.patterns.tiny`):

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
# ## Several models, losses and optimizers with one GradScaler
#
# One scaler serves any number of them: one `scaler.scale` per loss, one
# `scaler.step` per optimizer, and one `scaler.update` at the end of the iteration.
# PyTorch's example couples the losses: each depends on both models' outputs.

# %%
print(inspect.getsource(shared_scaler.coupled_losses))
print(inspect.getsource(shared_scaler.two_models_step))

# %% [markdown]
# The check plants an overflow in the second loss (multiplied by
# {glue:text}`plant:.0e`, finite in fp32, whose gradient overflows fp16), takes one
# iteration, and reads which optimizer changed its model's weights and what the scale
# did. With the coupled losses, and with losses that each reach only one model
# (`shared_scaler.separate_losses`):

# %%
shared = [
    shared_scaler.check_shared_scaler(losses=f, dtype=dtype, size=image_size, seed=seed)
    for f in (shared_scaler.coupled_losses, shared_scaler.separate_losses)
]
glue_all(plant=shared_scaler.PLANT)
md("\n\n".join(s.verdict() for s in shared))

# %% [markdown]
# Each `scaler.step` checks the gradients of its own optimizer's parameters and skips
# when they hold an inf or NaN. Where every loss reaches every model, an overflow in
# any loss reaches every gradient and the optimizers skip together; where a loss
# reaches one model only, only that model's optimizer skips and the other steps. The
# one `update` sees the overflow either way and halves the scale once. An `update`
# after each `step` would halve it once per optimizer, and would also change the scale
# between two `step`s: the second optimizer's gradients, multiplied by the old scale
# in the backward pass, would be divided by the new one.
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
# 1024) with the same step in fp32 without a scaler, and then the same step written
# without the division (`penalty.penalty_step_without_unscaling`):

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
# scale itself: the step trains on a penalty that changes whenever the scaler changes
# its scale.
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
# The check runs `predict` on a tiny network with batch norm (running statistics of
# its own) against its fp32 forward, and compares the class probabilities (tolerance:
# 4 roundoffs of the 16-bit type). It also counts the memory of each forward: on a CPU
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
# The activations are 16-bit, so the forward's peak is about half fp32's
# ({glue:text}`inf_ratio:.2f` of it in bf16, measured). Forgetting `model.eval()` would
# normalise by the batch's statistics and give other probabilities (the tests check
# that the comparison above catches it).
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
# The two processes took {glue:text}`ddp_s:.1f` s, most of it starting them. The same
# holds for the runner, `torchrun --nproc_per_node 2 -m ampbook.train`, except where
# its network breaks it: ERFNet's batch norm normalises each process's share by its
# own statistics (as in accumulation above) unless converted with
# `nn.SyncBatchNorm`, and its dropout draws other numbers in each process.
#
# (ch8-fp16-or-bf16)=
# ## fp16 or bf16
#
# The book has measured both. The table puts side by side what chapter 1 computed of
# the two formats, what chapter 4's functions measure of ERFNet's gradients here (the
# share that rounds to zero in each format without scaling, and the steps GradScaler
# skips while it finds its scale), the committed GPU runs of chapter 3 in both, and
# one training step here in each. GradScaler starts at a scale of 2¹⁶ and halves it at
# each skipped step while it searches for one that fits (chapter 4), so the first
# steps of a run are the ones it skips:

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
    )
md(ch8.choice_verdict(gpu, here))

# %% [markdown]
# A decision rule, with the evidence beside each line:
#
# 1. **A GPU with bf16 tensor cores (Ampere and later): bf16 first.** Its range is
#    fp32's (the table's first two lines); without scaling no gradient rounds to zero
#    where fp16 loses {glue:text}`fp16_flushed:.2%` of them (fourth line); there is no
#    scaler to place and no step to skip (fifth line).
# 2. **fp16 with a GradScaler where it is faster in every epoch.** A ratio inside
#    its epoch-to-epoch spread is not a speed-up (`ampbook.chapters.ch3.pace` judges it,
#    as the line above does). On the committed {glue:text}`gpu_name` runs bf16's step
#    took {glue:text}`gpu_ratio:.2f` times fp16's (per epoch
#    {glue:text}`gpu_ratio_lo:.3f`-{glue:text}`gpu_ratio_hi:.3f`), their final val
#    pixel accuracies {glue:text}`acc_gap:.3f` apart, and the scaler skipped
#    {glue:text}`gpu_skipped` steps in the whole fp16 run (the GPU lines): there fp16
#    would cost nothing in accuracy, and the line above says whether it was faster.
#    Measure your own step in both, epoch by epoch.
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
# compiled step's loss, and asks `torch._dynamo.explain` what the whole step with a
# GradScaler compiles to:

# %%
comp = compiled.check_compile(
    compile_backend, dtype=torch.bfloat16, size=image_size, seed=seed
)
rows = [
    ("backend that ran", comp.backend),
    ("casts, eager forward", comp.eager_casts),
    ("casts in the compiled forward graph", comp.graph_casts["forward"]),
    ("casts in the compiled backward graph", comp.graph_casts["backward"]),
    ("kernels inductor generated", comp.kernels if comp.kernels is not None else "-"),
    ("loss, eager / compiled", f"{comp.eager_loss:.5f} / {comp.compiled_loss:.5f}"),
    ("compilation (s)", f"{comp.compile_s:.1f}"),
    ("graphs / graph breaks in the step", f"{comp.graphs} / {comp.graph_breaks}"),
]
glue_all(graph_breaks=comp.graph_breaks, graphs=comp.graphs)
md_table(rows, ["", "measured here"])

# %%
md(
    "Where the step breaks, as `torch._dynamo.explain` reports it: "
    + "; ".join(comp.break_reasons)
    + ".\n\n"
    + ch8.compile_reading(comp)
)

# %% [markdown]
# The whole step with a
# GradScaler is not one graph: TorchDynamo traced it into {glue:text}`graphs` graphs
# with {glue:text}`graph_breaks` breaks, for the reasons printed above. Compile the
# model, as
# the runner does (`--compile`), not the step: the forward and backward are the
# graphs worth fusing, and the scaler's few operators run eagerly between them.
#
# On a GPU the measurement is chapter 7's ladder, whose rung 5 adds `torch.compile`
# to rung 4:

# %%
ladder_rows = ch8.ladder_compile_rows(found.gpu_ladders())
(
    md_table(
        ladder_rows,
        ["GPU", "precision", "rung 4 step (s)", "rung 5 step (s)", "speedup (x)"],
        [None, None, ".4f", ".4f", ".2f"],
    )
    if ladder_rows
    else md(
        "No GPU ladder (`data/results/ladder_*.json`) is committed yet: the GPU "
        "check (`python -m ampbook.gpucheck`) measures rung 5, and this table will "
        "show it."
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
#   except through batch norm.
# - Several models, losses, optimizers: one `scale` per loss, one `step` per
#   optimizer, one `update`; each optimizer skips on its own gradients' overflow.
# - A gradient penalty: divide the gradients of the scaled loss by the scale before
#   the penalty uses them, and compute the penalty under autocast.
# - A custom Function that needs fp32: `custom_fwd(device_type=...,
#   cast_inputs=torch.float32)` and `custom_bwd`.
# - Inference: `model.eval()`, `torch.inference_mode()` and autocast, no scaler.
# - DDP needs nothing new from the scaler; batch norm and dropout are what make
#   several processes differ from one.
# - fp16 or bf16: bf16 where the hardware has it, fp16 with a scaler where it does not,
#   and a measurement on a CPU (the table above).
# - `torch.compile` keeps autocast's casts in its graphs (inductor compiles them into
#   its kernels); compile the model, not the step (the scaler breaks the graph).
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
#    Which of the check's two conditions fails?
# 4. Give `ddp.ddp_worker`'s model a batch norm (`tiny_model(seed,
#    batch_norm=True)`) and rerun the DDP check; then convert it with
#    `nn.SyncBatchNorm.convert_sync_batchnorm` and run it again.
#
#    :::{dropdown} Hint
#    SyncBatchNorm computes the statistics over every process's share, so two processes
#    normalise as one does with the whole batch.
#    :::
# 5. With a GPU, run `python -m ampbook.bench ladder --rungs 4,5` and compare rung 5's
#    step with rung 4's in each precision.
