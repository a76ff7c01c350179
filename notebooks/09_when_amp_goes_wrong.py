# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # When AMP goes wrong
#
# The same mixed-precision questions come back in public trackers year after year. This
# chapter lists eighteen of them, one thread each, and points each to where the book
# answers it. Nine it answers here. Eight are reproduced on a CPU in seconds (what a
# CPU cannot produce is planted, and the text says what), the cause is shown by a
# computation, and the fix is checked by a run that fails when the fix is removed
# (`tests/test_ch9.py` runs each check once more without its fix). The ninth,
# fp8, needs a GPU this book did not have for it: it is predicted, not reproduced.
#
# **What you will learn**: how to find the first layer whose fp16 output overflows;
# when AMP's step needs more memory than fp32's; why a skipped step makes the
# learning-rate scheduler warn, and how to step it only when the optimizer stepped;
# how `torch.compile` can overflow a backward and recompile on the autocast state;
# what a checkpoint's recomputation needs from autocast; why DDP ranks with different
# scales part; how to read and set TF32 with PyTorch's `fp32_precision` switches;
# what decides whether fp8 pays.
#
# **What you need**: chapter 3's loop, chapter 4's loss scaling and saved-tensor count,
# chapter 8's tiny network; `ampbook` and PyTorch.
#
# ## The questions, and where the book answers them
#
# 1. The loss turns NaN after some epochs with autocast and GradScaler
#    {cite:p}`gh-pytorch-40497`: {ref}`tr-nan` (on the page "Troubleshooting
#    AMP") and {doc}`04_loss_scaling`.
# 2. NaN from the first batch when fine-tuning pretrained weights
#    {cite:p}`gh-transformers-5651`: {ref}`ch9-overflow`.
# 3. "Gradient overflow, skipping step", the scale falling toward 0
#    {cite:p}`gh-apex-318`: {doc}`04_loss_scaling` and {ref}`tr-fp16-only` (on
#    the page "Troubleshooting AMP").
# 4. AMP slower than fp32 for some layers, such as grouped convolutions
#    {cite:p}`gh-pytorch-43544`: {ref}`ch6-report`.
# 5. Mixed precision uses more memory {cite:p}`gh-transformers-9742`:
#    {ref}`ch9-memory`; {doc}`05_rtx3070` measures what AMP saves and what it keeps.
# 6. Outputs still fp32 under mixed precision {cite:p}`gh-accelerate-2413`:
#    {doc}`04_loss_scaling` (what autocast runs in which dtype).
# 7. One GradScaler with several optimizers {cite:p}`gh-accelerate-439`:
#    {doc}`08_amp_patterns`.
# 8. The "`lr_scheduler.step()` before `optimizer.step()`" warning after a skipped step
#    {cite:p}`gh-pytorch-44511,gh-pytorch-55585`: {ref}`ch9-scheduler`.
# 9. Is GradScaler needed with bf16? {cite:p}`gh-accelerate-2358`:
#    {ref}`ch8-fp16-or-bf16`.
# 10. `torch.compile` and autocast: a backward compiled under the forward's autocast
#     state overflows {cite:p}`gh-pytorch-153044`: {ref}`ch9-compile-backward`.
# 11. `torch.compile` recompiles on guards under AMP {cite:p}`gh-pytorch-128134`:
#     {ref}`ch9-recompile` (the autocast-state guard, not that thread's dtype
#     guard).
# 12. Activation checkpointing with autocast: the recomputation's dtypes differ
#     {cite:p}`gh-pytorch-71169,gh-megatron-lm-7538`: {ref}`ch9-checkpoint`;
#     {doc}`08_amp_patterns` measures checkpointing's memory.
# 13. A custom op or autograd Function: "expect scalar type Float but Half"
#     {cite:p}`gh-pytorch-46178`: {ref}`ch8-custom-function` and {ref}`tr-custom` (on
#     the page "Troubleshooting AMP").
# 14. DDP ranks drifting apart when their scales differ {cite:p}`gh-pytorch-136009`:
#     {ref}`ch9-ranks`; {doc}`08_amp_patterns` runs DDP.
# 15. Autocast or `.half()` for inference {cite:p}`gh-pytorch-86548`:
#     {doc}`08_amp_patterns`.
# 16. CPU autocast far slower than fp32 {cite:p}`gh-pytorch-118499`:
#     {doc}`02_tensor_cores`.
# 17. TF32's `fp32_precision` switches replacing `allow_tf32`
#     {cite:p}`gh-lightning-21256`: {ref}`ch9-tf32`.
# 18. fp8 slower than bf16 on small models {cite:p}`gh-ao-572`: {ref}`ch9-fp8`.

# %% tags=["parameters", "remove-cell"]
seed = 0
scheduler_steps = 4  # fp16 steps of the scheduler check (the first one overflows)
fp8_tokens = 8192  # rows of the activations in the fp8 prediction
fp8_gpu = "h100-sxm"  # a GPU with fp8 tensor cores (key, short name or alias)
memory_tokens = 8  # tokens per step where AMP costs memory (a short fine-tuning batch)

# %% tags=["remove-input"]
from ampbook.chapters.ch9.fp8 import fp8_gpu_key
from ampbook.core import params
from ampbook.core.env import print_environment

params.seed("seed", seed)
params.integer("scheduler_steps", scheduler_steps, minimum=2)
params.integer("fp8_tokens", fp8_tokens, minimum=1)
fp8_key = fp8_gpu_key("fp8_gpu", fp8_gpu)  # "h200", "H100 SXM": the table's key
params.integer("memory_tokens", memory_tokens, minimum=1)
print_environment("cpu")

# %% tags=["hide-cell"]
import inspect

from ampbook.chapters.ch9 import compile_autocast as compiled
from ampbook.chapters.ch9 import fp8, overflow, ranks, scheduler, tf32
from ampbook.chapters.ch9 import recompute as checkpointing
from ampbook.chapters.ch9 import weight_copies as ch9_memory
from ampbook.core import precision
from ampbook.core.devices import display_name, load_devices
from ampbook.core.page import MIB, glue_all, md, md_table
from ampbook.results import MODE_LABELS

# %% [markdown]
# (ch9-overflow)=
# ## NaN from the first batch of a fine-tuning run
#
# A user fine-tuning T5 in fp16 found the NaN's source in one feed-forward block: a
# value of 66246 in fp32, past fp16's largest, 65504 {cite:p}`gh-transformers-5651`.
# The book downloads no T5: the model here is two feed-forward blocks, each followed
# by a LayerNorm, with the second block's weights multiplied by 200 to stand in for
# large pretrained weights (planted). A forward hook on every module, run under fp16
# autocast, names the first module whose output is not finite:

# %%
print(inspect.getsource(overflow.first_nonfinite))

# %% [markdown]
# The fix keeps that block in fp32 inside the autocast region (autocast off, the input
# cast up); the rest of the model still runs in fp16. The check compares the fixed
# model's fp16-autocast output with fp32's:

# %%
print(inspect.getsource(overflow.Fp32Block))
check = overflow.check_fix(overflow.keep_in_fp32, seed=seed)
md(check.verdict())

# %% [markdown]
# bf16 would also hold the value (its range is fp32's, chapter 1), at 8 significant
# bits (7 stored); on a GPU without bf16 the block in fp32 is the fix. T5's own fix in
# the transformers library clamps the values instead, which changes the model's output
# where it clamps.

# %% [markdown]
# (ch9-memory)=
# ## Mixed precision that takes more memory
#
# A user of the transformers library found fine-tuning with `--fp16` took more GPU
# memory than without; the maintainer's answer lists what a step keeps: fp32
# weights, fp32 gradients and fp32 optimizer state whatever the precision, and only
# the activations saved for backward in 16 bits {cite:p}`gh-transformers-9742`.
# Chapters 3 and 4 count those saved bytes on any device (`ampbook.measure.memory`):
# autocast halves each activation it saves but adds a 16-bit copy of each weight the
# backward needs. The model here is two feed-forward blocks of width 256 and hidden
# width 1024 on
# {glue:text}`memory_tokens` tokens per step, a short fine-tuning batch; the bytes
# saved for backward are counted by chapter 4's saved-tensor hooks:

# %%
model = ch9_memory.wide_model(seed)
steps = {
    p: ch9_memory.step_bytes(model, memory_tokens, precision.autocast_dtype(p), seed)
    for p in ("fp32", "amp-fp16")
}
glue_all(memory_tokens=memory_tokens)
md_table(
    [
        (MODE_LABELS[p], s["saved"] / MIB, s["by_dtype"].get("float16", 0) / MIB)
        for p, s in steps.items()
    ],
    ["step", "saved for backward (MiB)", "of it fp16 (MiB)"],
    formats=[None, ".2f", ".2f"],
)

# %% [markdown]
# The weights, their gradients and Adam's state take the same bytes in both steps
# (16 per weight, all fp32), so the difference is in the saved bytes: at this size
# the fp16 ones (the weight copies, beside the activations of a few tokens) outweigh
# everything fp32 saves. No switch removes the copies (autocast runs the products on
# them); what decides whether AMP saves memory is how many tokens a step carries.
# Chapter 3's straight line, fitted to two small steps (8 and 64 tokens), predicts
# the crossover; the check measures a step at this size, then steps at half and at
# twice the predicted crossover, each with the weights, gradients and Adam state
# added (computed, not measured: neither total is the allocator's peak):

# %%
below = ch9_memory.check_memory(memory_tokens, seed=seed)
near = [
    ch9_memory.check_memory(
        round(f * below.crossover_tokens), seed=seed, crossover=below.crossover_tokens
    )
    for f in (0.5, 2)
]
md("\n\n".join(c.verdict() for c in (below, *near)))

# %% [markdown]
# A step with few tokens for its weights sits below its crossover: fp16 adds the
# copies and saves little. The fix for memory is a step above the crossover (a larger
# batch or longer sequences); below it, AMP is for speed, not memory.

# %% [markdown]
# (ch9-scheduler)=
# ## The scheduler's warning after a skipped step
#
# When GradScaler finds an inf in the first step's gradients, `scaler.step` skips
# `optimizer.step()`, and a scheduler stepped after it warns "Detected call of
# `lr_scheduler.step()` before `optimizer.step()`"
# {cite:p}`gh-pytorch-44511,gh-pytorch-55585`. The warning is only the visible part:
# every skipped step puts the schedule one step ahead of the optimizer. `scaler.step`
# says nothing of whether it stepped, but with one optimizer per scaler the scale
# does: `scaler.update()` lowers it exactly when that optimizer's step was skipped.
# The step below steps the scheduler only when the scale did not fall (on CUDA each
# `get_scale()` reads the scale back to the host, one synchronisation per step):

# %%
print(inspect.getsource(scheduler.step_when_stepped))

# %% [markdown]
# The check runs {glue:text}`scheduler_steps` fp16 steps of chapter 8's tiny network
# with a StepLR scheduler, the first with an overflow planted (the loss times 1e30),
# and counts the optimizer's steps with a hook; first with the scheduler
# stepped every time, then with the fix:

# %%
glue_all(scheduler_steps=scheduler_steps)
runs = [
    scheduler.check_scheduler(step, steps=scheduler_steps, seed=seed)
    for step in (scheduler.step_always, scheduler.step_when_stepped)
]
md("\n\n".join(r.verdict() for r in runs))

# %% [markdown]
# With several optimizers on one scaler the scale halves when any of them skipped
# ({doc}`08_amp_patterns` shows one optimizer skipping while the other steps), so the
# scale cannot say which one did. There, tell each optimizer by its own count: a
# `register_step_post_hook` that adds one per step, as the check above counts (or
# the `"step"` Adam keeps in each parameter's state), read before and after
# `scaler.step(optimizer)`; step each optimizer's scheduler only when its count
# moved:

# %%
print(inspect.getsource(scheduler.count_steps))

# %% [markdown]
# The check runs three fp16 iterations of two tiny networks, each with its own loss,
# optimizer and scheduler, on one scaler, with an overflow planted in the second
# loss of the first iteration; first with each scheduler stepped when the scale did
# not fall, then by its optimizer's count:

# %%
md(
    "\n\n".join(
        scheduler.check_shared_schedulers(rule, seed=seed).verdict()
        for rule in ("scale", "count")
    )
)

# %% [markdown]
#
# (ch9-compile-backward)=
# ## A compiled backward that overflows
#
# A user's model ran one Linear in an fp32 region (autocast disabled inside the
# forward); compiled, its weight gradient overflowed where eager's was 65536
# {cite:p}`gh-pytorch-153044`. Eager PyTorch runs the backward without autocast;
# AOTAutograd traces the backward of a compiled region under the forward's autocast
# state when `torch._functorch.config.backward_pass_autocast` is `"same_as_forward"`
# (a private setting whose name and default may change between versions; it is read
# when the region is compiled, at its first call, so it must be set before then), so
# the fp32 Linear's gradient product runs in fp16 and passes 65504. It needs no GPU:
# the thread's model runs here on a CPU under fp16 autocast, compiled with the
# `aot_eager` backend (the same tracing, no generated kernels). The fix traces the
# backward without autocast, as eager runs it:

# %%
print(inspect.getsource(compiled.backward_autocast))

# %% [markdown]
# The check compares the compiled gradients with eager's, first with the backward
# traced under the forward's state, then with the fix:

# %%
md(
    "\n\n".join(
        compiled.check_backward(s, seed=seed).verdict()
        for s in ("same_as_forward", "off")
    )
)

# %% [markdown]
# (ch9-recompile)=
# ## Recompiling on the autocast state
#
# A user of `torch.compile` under AMP saw many recompilations, with the reason
# "dtype mismatch. expected Half, actual Float" {cite:p}`gh-pytorch-128134`; there
# the recompilations came with Dynamo's inlining of built-in modules
# (`TORCHDYNAMO_INLINE_INBUILT_NN_MODULES=1`), a Dynamo issue this book does not
# reproduce. Dynamo guards each graph on the autocast state and on its inputs'
# dtypes; a call that differs in either compiles a new graph. The reproduction here
# shows the autocast-state guard, not the thread's dtype guard. It compiles one
# feed-forward block and calls it twice per training step: in the forward under fp16
# autocast, and again for a loss term computed after the region, in fp32. Dynamo
# names the first guard that failed (`torch._dynamo.utils.guard_failures`). A second
# state costs one more compilation, not one per step: both graphs stay cached (up to
# Dynamo's recompile limit). Accepting the two graphs is one answer; the fix below,
# one graph, keeps every call of the compiled block under the step's one autocast
# state, at a cost in precision: the auxiliary loss term, fp32 before, now runs in
# 16 bits:

# %%
print(inspect.getsource(compiled.second_call_inside))

# %% [markdown]
# The check counts the graphs Dynamo made over three steps and prints its reasons,
# first with the second call outside the region, then with the fix:

# %%
md(
    "\n\n".join(
        compiled.check_recompiles(call, seed=seed).verdict()
        for call in (compiled.second_call_outside, compiled.second_call_inside)
    )
)

# %% [markdown]
# (ch9-checkpoint)=
# ## Activation checkpointing and autocast
#
# A checkpointed block saves only its input and runs again in the backward, and the
# backward runs outside the autocast region, so the recomputation must run under the
# autocast state of the forward. `torch.utils.checkpoint` records that state and
# restores it: its reentrant version once carried only autocast's on/off, so a bf16
# region would recompute in fp16 {cite:p}`gh-pytorch-71169`, and in the PyTorch this
# book ran both versions record the whole state, dtype included, and restore it
# (`_get_autocast_kwargs` in `torch/utils/checkpoint.py`). What still breaks it is
# recompute code written by hand or by another library: Megatron-LM's checkpoint reran
# its block outside the forward's fp8 autocast until a 2026 pull request
# {cite:p}`gh-megatron-lm-7538`. Where the recomputation makes other dtypes,
# `torch.utils.checkpoint` compares each saved tensor's shape, dtype and device and
# raises "Recomputed values for the following tensors have different metadata than
# during the forward pass". (An open thread reports that error with
# `checkpoint(use_reentrant=False)` itself inside autocast, on a tensor of shape
# [64, 64] {cite:p}`gh-pytorch-141896`: another cause than the one here, not
# reproduced by this book.) The checkpoint called inside the region:

# %%
print(inspect.getsource(checkpointing.checkpointed_step))

# %% [markdown]
# The failure is planted here through `context_fn` as a recomputation with autocast
# off (what a hand-written checkpoint that reruns the block in the backward does).
# Forward hooks record each Linear's output dtype in the forward and again in the
# recomputation, and the gradients are compared with the same step unchecked; the
# planted run first, then the fix:

# %%
md(
    "\n\n".join(
        checkpointing.check_checkpoint(ctx, seed=seed).verdict()
        for ctx in (checkpointing.autocast_off, checkpointing.forward_state)
    )
)

# %% [markdown]
# (ch9-ranks)=
# ## DDP ranks whose scales differ
#
# A user found DDP replicas with different gradients when their GradScalers held
# different scales {cite:p}`gh-pytorch-136009`. Each rank multiplies its loss by its
# own scale; DDP averages the scaled gradients during the backward, before
# `scaler.step` unscales them, and each rank divides the average by its own scale.
# With equal scales that is the mean gradient; with different ones every rank gets
# another, wrong gradient. The skip decisions cannot differ: every rank unscales the
# same averaged gradients, finds the same inf and moves its scale the same way. So
# scales that start equal stay equal, an all-reduce of the scaler's inf flag adds
# nothing under DDP (under FSDP it does: each rank holds other shards, and
# `ShardedGradScaler` all-reduces the flag, {ref}`ch8-fsdp`), and scales differ only
# when they start apart (a scaler state restored on one rank and not on the other,
# planted here) or when the ranks take different numbers of steps. Two ranks are
# simulated in one process (two replicas of chapter 8's tiny network, two scalers, the
# mean of the gradients taken between backward and `scaler.step`, as DDP does), with an
# overflow planted in rank 1's first loss. The fix gives every rank rank 0's scaler
# state:

# %%
print(inspect.getsource(ranks.same_scaler_state))

# %% [markdown]
# The check measures each rank's unscaled gradient against the true mean and the
# replicas' weights after three steps, first with each rank's own scale, then with
# the fix:

# %%
md(
    "\n\n".join(
        ranks.check_ranks(fix, seed=seed).verdict()
        for fix in (ranks.keep_own_state, ranks.same_scaler_state)
    )
)

# %% [markdown]
# (ch9-tf32)=
# ## TF32's new switches
#
# PyTorch 2.9 replaced `torch.backends.cuda.matmul.allow_tf32` and
# `torch.backends.cudnn.allow_tf32` with per-backend `fp32_precision` switches
# ("tf32" or "ieee"), and warns on the old spelling: a library that reads the old
# setting, through `torch.get_float32_matmul_precision()`, got a UserWarning on the
# 2.9 release candidate {cite:p}`gh-lightning-21256`. On the PyTorch this book ran
# (the environment line at the top) it is worse than a warning: once the new switches
# hold a state the old single flag cannot say (cuDNN convolutions in TF32, cuDNN RNNs
# not), reading the old flag raises a RuntimeError (measured below), and so does
# `torch.get_float32_matmul_precision()` once only the matmul switch was set the new
# way (tried on this PyTorch while writing; the check does not rerun it). The book sets
# TF32 through the new switches where PyTorch has them, and through the old flags (the
# legacy spelling) only on an older PyTorch:

# %%
print(inspect.getsource(precision.set_tf32))

# %% [markdown]
# The check puts PyTorch in that mixed state, reads TF32 the legacy way and through
# `ampbook.core.env.tf32_state` (which reads the new switches), then sets TF32 on and
# off and reads it back, every switch restored after:

# %%
md(tf32.check_tf32().verdict())

# %% [markdown]
# (ch9-fp8)=
# ## fp8 slower than bf16 on a small model
#
# A PyTorch developer measured fp8 training slower than fp16 on a model of two 32-wide
# linear layers and asked what the smallest model is that gains {cite:p}`gh-ao-572`.
# fp8 needs an Ada, Hopper or later GPU, so this section measures nothing; it
# predicts. What decides it: fp8 doubles the tensor-core peak over bf16 (the device
# table), but dynamic scaling reads each operand of each matrix product twice more
# (its largest value, then the cast), so fp8 gains only where the products are
# compute-bound (chapter 2's roofline). The prediction assumes the largest-value and
# cast kernels run unfused, one launch each (torchao's float8 training, run under
# `torch.compile` as it normally is, fuses them, which moves the crossover down). The
# prediction for one linear layer's training
# step (three matrix products) on {glue:text}`fp8_gpu_name` at
# {glue:text}`fp8_tokens` rows, with a kernel launch of {glue:text}`launch_us` µs
# (assumed):

# %%
gpu = load_devices()[fp8_key]
rows = [fp8.predict_linear(gpu, w, fp8_tokens) for w in (256, 1024, 4096, 16384)]
glue_all(
    fp8_gpu_name=display_name(fp8_key),
    fp8_tokens=fp8_tokens,
    launch_us=fp8.LAUNCH_S * 1e6,
    crossover=fp8.crossover(gpu, fp8_tokens) or 0,
    crossover_below=(fp8.crossover(gpu, fp8_tokens) or 0) // 2,
)
md_table(
    [(r.width, r.bf16_s * 1e6, r.fp8_s * 1e6, r.speedup) for r in rows],
    ["width", "bf16 (µs, predicted)", "fp8 (µs, predicted)", "bf16 / fp8"],
    formats=[None, ".0f", ".0f", ".2f"],
)

# %% [markdown]
# Predicted, not measured: on the widths the prediction steps through (powers of
# two), fp8 first beats bf16 at {glue:text}`crossover`, so the crossover lies between
# {glue:text}`crossover_below` and {glue:text}`crossover` on this GPU at this many
# rows. Below it the casts and their launches cost more than the faster products
# save. The thread's model, at a width of 32, is far below it, though what it
# measured was overhead against fp16, not this prediction against bf16.
#
# ## Summary
#
# - An fp16 NaN from the first batch is a value past 65504: a forward hook names the
#   first module whose output is not finite, and that block kept in fp32 fixes it.
# - AMP adds a 16-bit copy of each weight the backward needs: below a crossover in
#   tokens per step (predicted from two small steps) its step takes more memory than
#   fp32's.
# - A skipped step puts the scheduler ahead of the optimizer; with one optimizer per
#   scaler, step it only when the scale did not fall; with several, only when that
#   optimizer's own step count moved.
# - A compiled region's backward traced under the forward's autocast state can
#   overflow where eager does not: trace it with `backward_pass_autocast="off"`.
# - Dynamo guards on the autocast state and the input dtypes: a second state costs
#   one more compilation (both graphs cached); one autocast state for every call
#   saves it, and the guard failures say why it recompiled.
# - A checkpointed block must recompute under its forward's autocast state:
#   `torch.utils.checkpoint` inside the autocast region restores it; hand-written
#   recompute code must too.
# - DDP ranks skip together (they unscale the same averaged gradients); their scales
#   differ only when they start apart, and then every rank's gradient is wrong: give
#   every rank one scaler state.
# - Set and read TF32 through `fp32_precision`; the legacy flags fail to read once the
#   new switches disagree.
# - fp8 pays only where the matrix products are compute-bound (predicted).
#
# ## Exercises
#
# 1. Plant the large weights in the first block (`overflow.pretrained(block="block1")`)
#    and find the module the hook names.
# 2. Run the scheduler check with two overflowing steps (`skip=2`): how far ahead does
#    the unfixed scheduler get?
# 3. Predict the fp8 crossover at 1024 rows: does it move up or down, and why?
# 4. Run the memory check with bf16 autocast (`ch9_memory.step_bytes(model, n,
#    torch.bfloat16)`): does the crossover move?
# 5. Call the compiled block's second time under bf16 autocast instead of fp16: what
#    reason does Dynamo give?
# 6. Run the ranks check without the planted overflow (`overflow_step=-1`) and with
#    equal scales: which of the three numbers changes?
