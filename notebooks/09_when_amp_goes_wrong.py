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
# # When AMP goes wrong
#
# The same mixed-precision questions come back in public trackers year after year. This
# chapter lists eighteen of them, one thread each, and points each to where the book
# answers it. Four it answers here: each symptom is reproduced on a CPU in a second
# (what a CPU cannot produce is planted, and the text says what), the cause is shown by
# a computation, and the fix is checked by a run that fails when the fix is removed
# (`tests/test_chapter9.py` runs each check once more without its fix).
#
# **What you will learn**: how to find the first layer whose fp16 output overflows;
# why a skipped step makes the learning-rate scheduler warn, and how to step it only
# when the optimizer stepped; how to read and set TF32 with PyTorch's `fp32_precision`
# switches; what decides whether fp8 pays. **What you need**: chapter 3's loop and
# chapter 4's loss scaling; `ampbook` and PyTorch.
#
# ## The questions, and where the book answers them
#
# 1. The loss turns NaN after some epochs with autocast and GradScaler
#    {cite:p}`gh-pytorch-40497`: {ref}`tr-nan` and {doc}`04_loss_scaling`.
# 2. NaN from the first batch when fine-tuning pretrained weights
#    {cite:p}`gh-transformers-5651`: {ref}`ch9-overflow`.
# 3. "Gradient overflow, skipping step", the scale falling toward 0
#    {cite:p}`gh-apex-318`: {doc}`04_loss_scaling` and {ref}`tr-fp16-only`.
# 4. AMP slower than fp32 for some layers, such as grouped convolutions
#    {cite:p}`gh-pytorch-43544`: {ref}`ch6-report`.
# 5. Mixed precision uses more memory {cite:p}`gh-transformers-9742`: not yet
#    reproduced here; {doc}`05_rtx3070` measures what AMP saves and what it keeps.
# 6. Outputs still fp32 under mixed precision {cite:p}`gh-accelerate-2413`:
#    {doc}`04_loss_scaling` (what autocast runs in which dtype).
# 7. One GradScaler with several optimizers {cite:p}`gh-accelerate-439`:
#    {doc}`08_amp_patterns`.
# 8. The "`lr_scheduler.step()` before `optimizer.step()`" warning after a skipped step
#    {cite:p}`gh-pytorch-44511,gh-pytorch-55585`: {ref}`ch9-scheduler`.
# 9. Is GradScaler needed with bf16? {cite:p}`gh-accelerate-1036`:
#    {ref}`ch8-fp16-or-bf16`.
# 10. `torch.compile` and autocast: a backward compiled under the forward's autocast
#     state overflows {cite:p}`gh-pytorch-153044`: not yet reproduced here.
# 11. `torch.compile` recompiles on dtype guards under AMP {cite:p}`gh-pytorch-128134`:
#     not yet reproduced here.
# 12. Activation checkpointing with autocast: the recomputation's dtypes differ
#     {cite:p}`gh-pytorch-141896`: {doc}`08_amp_patterns` measures checkpointing's
#     memory; the recompute error is not yet reproduced here.
# 13. A custom op or autograd Function: "expected scalar type Float but found Half"
#     {cite:p}`gh-pytorch-46178`: {ref}`ch8-custom-function` and {ref}`tr-custom`.
# 14. DDP ranks drifting apart when their scales differ {cite:p}`gh-pytorch-136009`:
#     {doc}`08_amp_patterns` runs DDP; ranks with different scales are not yet
#     reproduced here.
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
fp8_gpu = "h100-sxm"  # a GPU of the device table with fp8 tensor cores

# %% tags=["remove-input"]
from ampbook.core import params
from ampbook.core.env import print_environment

params.seed("seed", seed)
params.integer("scheduler_steps", scheduler_steps, minimum=2)
params.integer("fp8_tokens", fp8_tokens, minimum=1)
print_environment("cpu")

# %% tags=["hide-cell"]
import inspect

from ampbook.chapters.ch9 import fp8, overflow, scheduler, tf32
from ampbook.core import precision
from ampbook.core.devices import display_name, load_devices
from ampbook.core.page import glue_all, md, md_table

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
# bf16 would also hold the value (its range is fp32's, chapter 1), at 8 bits of
# mantissa; on a GPU without bf16 the block in fp32 is the fix. T5's own fix in the
# transformers library clamps the values instead, which changes the model's output
# where it clamps.
#
# (ch9-scheduler)=
# ## The scheduler's warning after a skipped step
#
# When GradScaler finds an inf in the first step's gradients, `scaler.step` skips
# `optimizer.step()`, and a scheduler stepped after it warns "Detected call of
# `lr_scheduler.step()` before `optimizer.step()`"
# {cite:p}`gh-pytorch-44511,gh-pytorch-55585`. The warning is only the visible part:
# every skipped step puts the schedule one step ahead of the optimizer. `scaler.step`
# says nothing of whether it stepped, but the scale does: `scaler.update()` lowers it
# exactly when a step was skipped. The step below steps the scheduler only when the
# scale did not fall:

# %%
print(inspect.getsource(scheduler.step_when_stepped))

# %% [markdown]
# The check runs {glue:text}`scheduler_steps` fp16 steps of chapter 8's tiny network
# with a StepLR scheduler, the first with an overflow planted (the loss times
# 10{sup}`30`), and counts the optimizer's steps with a hook; first with the scheduler
# stepped every time, then with the fix:

# %%
glue_all(scheduler_steps=scheduler_steps)
runs = [
    scheduler.check_scheduler(step, steps=scheduler_steps, seed=seed)
    for step in (scheduler.step_always, scheduler.step_when_stepped)
]
md("\n\n".join(r.verdict() for r in runs))

# %% [markdown]
# (ch9-tf32)=
# ## TF32's new switches
#
# PyTorch 2.9 replaced `torch.backends.cuda.matmul.allow_tf32` and
# `torch.backends.cudnn.allow_tf32` with per-backend `fp32_precision` switches
# ("tf32" or "ieee"), and warns on the old spelling; a library that reads the old flags
# breaks {cite:p}`gh-lightning-21256`. Worse than the warning: once the new switches
# hold a state the old single flag cannot say (cuDNN convolutions in TF32, cuDNN RNNs
# not), reading the old flag raises a RuntimeError. The book sets TF32 through the new
# switches where PyTorch has them, and through the old flags (the legacy spelling) only
# on an older PyTorch:

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
# fp8 needs an Ada, Hopper or later GPU, so this section predicts and measures
# nothing. What decides it: fp8 doubles the tensor-core peak over bf16 (the device
# table), but dynamic scaling reads each operand of each matrix product twice more
# (its largest value, then the cast), so fp8 gains only where the products are
# compute-bound (chapter 2's roofline). The prediction for one linear layer's training
# step (three matrix products) on {glue:text}`fp8_gpu_name` at
# {glue:text}`fp8_tokens` rows, with a kernel launch of {glue:text}`launch_us` µs
# (assumed):

# %%
gpu = load_devices()[fp8_gpu]
rows = [fp8.predict_linear(gpu, w, fp8_tokens) for w in (256, 1024, 4096, 16384)]
glue_all(
    fp8_gpu_name=display_name(fp8_gpu),
    fp8_tokens=fp8_tokens,
    launch_us=fp8.LAUNCH_S * 1e6,
    crossover=fp8.crossover(gpu, fp8_tokens) or 0,
)
md_table(
    [(r.width, r.bf16_s * 1e6, r.fp8_s * 1e6, r.speedup) for r in rows],
    ["width", "bf16 (µs, predicted)", "fp8 (µs, predicted)", "bf16 / fp8"],
    formats=[None, ".0f", ".0f", ".2f"],
)

# %% [markdown]
# Predicted, not measured: fp8 first beats bf16 at a width of
# {glue:text}`crossover` on this GPU at this many rows. Below it the casts and their
# launches cost more than the faster products save, which is what the thread saw at a
# width of 32.
#
# ## Summary
#
# - An fp16 NaN from the first batch is a value past 65504: a forward hook names the
#   first module whose output is not finite, and that block kept in fp32 fixes it.
# - A skipped step puts the scheduler ahead of the optimizer; step it only when the
#   scale did not fall.
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
