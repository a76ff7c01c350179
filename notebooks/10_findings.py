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
# # Findings
#
# What the book found, each finding linked to the chapter that shows how it knows, its
# numbers pasted from that chapter's cells: "On this machine" from the run that built
# this copy, the GPU findings from the runs committed under `data/results/`, the rest
# from the blog post, published peaks and the cost model (the same on every machine).
#
# **What you will learn**: the post's question answered in numbers, what holds on any
# machine, what the GPU runs and this machine measured.
#
# **What you need**: the other chapters' results (read in seconds).
#
# % How this page is built: cross-document glue, the glue text role on `NN_topic.ipynb::key:fmt`
# % (a path relative to chapters/; myst-nb requires the format spec for another page's
# % key). A chapter that renames a key must rename it here too (the book build fails on
# % a missing key). The GPU part is computed by `ampbook.chapters.ch10.gpu_findings`.

# %% tags=["parameters", "remove-cell"]
results_dir = None  # GPU run records; None: data/results

# %% tags=["remove-input"]
from ampbook.core.env import print_environment

print_environment("cpu")

# %% tags=["hide-cell"]
from ampbook.chapters.ch10 import gpu_findings, in_short
from ampbook.core.page import glue_all, md
from ampbook.results import load_results_dir

results = load_results_dir(results_dir)
glue_all(gpu_in_short=in_short(results))  # the intro's "In short"

# %% [markdown]
# (findings-post)=
# ## The post's question: memory saved, no time saved
#
# - **What the post measured.** AMP ran at
#   {glue:text}`05_rtx3070.ipynb::ch5_post_speedup:.2f` times fp32's speed and
#   took {glue:text}`05_rtx3070.ipynb::ch5_post_mem:.0%` of its memory on an RTX
#   3070, in {cite:t}`rtx3070post` ({doc}`05_rtx3070`).
# - **Its unstated setting.** If they track allocated memory, its two memory figures
#   fix the pixels per batch at {glue:text}`05_rtx3070.ipynb::ch5_mpx_lo:.1f` to
#   {glue:text}`05_rtx3070.ipynb::ch5_mpx_hi:.1f` million: most likely batch
#   {glue:text}`05_rtx3070.ipynb::ch5_B:d` at
#   {glue:text}`05_rtx3070.ipynb::ch5_W:d` x {glue:text}`05_rtx3070.ipynb::ch5_H:d`,
#   not the ERFNet authors' batch of
#   {glue:text}`05_rtx3070.ipynb::ch5_def_b:d` ({doc}`05_rtx3070`).
# - **The card had little to give.** With fp32 accumulation, as AMP uses them, the 3070's
#   fp16 tensor cores peak at {glue:text}`02_tensor_cores.ipynb::desk_ratio:.2g`
#   times its fp32 rate, and TF32 at
#   {glue:text}`02_tensor_cores.ipynb::desk_tf32_ratio:.2g` times; an A100's fp16
#   peak is {glue:text}`02_tensor_cores.ipynb::a100_ratio:.3g` times its fp32
#   rate, an H100's {glue:text}`02_tensor_cores.ipynb::h100_ratio:.3g` times
#   ({numref}`fig-ch2-peaks`).
# - **The network had less.** On the 3070 the roofline bound of ERFNet's epoch is
#   {glue:text}`05_rtx3070.ipynb::ch5_min_fp32:.3g` s in fp32 and
#   {glue:text}`05_rtx3070.ipynb::ch5_min_amp:.3g` s with AMP: a speedup of
#   {glue:text}`05_rtx3070.ipynb::ch5_model_speedup:.2f` if both reach the same share
#   of their bounds, small because {glue:text}`05_rtx3070.ipynb::ch5_mem_share:.0%` of
#   the AMP step's bound is memory time (the cost model's prediction). The ratio is no
#   ceiling: NVIDIA's ResNet-50 on an A100 gained
#   {glue:text}`05_rtx3070.ipynb::ch5_rn_meas:.2f` times (AMP with channels_last
#   against TF32 in NCHW, so not precision alone) where it says
#   {glue:text}`05_rtx3070.ipynb::ch5_rn_ratio:.2f` (a ratio of bounds: the stored
#   bounds chapter 6 calibrates on, not a prediction of the step). AMP
#   moves
#   {glue:text}`05_rtx3070.ipynb::ch5_bytes_ratio:.2f` times fp32's bytes, not half,
#   and dispatches
#   {glue:text}`05_rtx3070.ipynb::ch5_kernel_ratio:.2f` times as many operators
#   (traced; {numref}`fig-ch5-roofline` places each layer against the 3070's ceilings).
# - **The bound does not decide.** Kernels at
#   {glue:text}`05_rtx3070.ipynb::ch5_need_eff:.0%` of the roofline would take
#   the post's time on their own. Two causes remain, and a 2020 RTX 3070 user's epoch
#   times bear on both: the wait for data was *at most*
#   {glue:text}`05_rtx3070.ipynb::ch5_ev_wait:.0%` of an AMP epoch (the epoch less the
#   user's epoch without the loader: inferred by difference, not measured), and an AMP
#   step
#   {glue:text}`05_rtx3070.ipynb::ch5_ev_slow_lo:.1f` to
#   {glue:text}`05_rtx3070.ipynb::ch5_ev_slow_hi:.1f` times slower than fp32's
#   on that year's software {cite:p}`pytorch-issue-46377` ({doc}`05_rtx3070`).
#
# (findings-any-machine)=
# ## What holds on every machine
#
# - **Precision.** bf16's {term}`machine epsilon` is
#   {glue:text}`01_floating_point.ipynb::eps_ratio:g` times fp16's: it keeps
#   fp32's range and gives up precision. A long sum in fp16 stops growing once its terms
#   fall below half its spacing ({term}`swamping`); fp32 accumulation is the cure
#   ({doc}`01_floating_point`).
# - **Accumulation.** A long dot product with an fp32 accumulator had a relative error of
#   {glue:text}`02_tensor_cores.ipynb::err32:.1e`, with an fp16 one
#   {glue:text}`02_tensor_cores.ipynb::err16:.1e`
#   ({doc}`02_tensor_cores`).
# - **Loss scaling.** `GradScaler` starts at a scale of
#   {glue:text}`04_loss_scaling.ipynb::init_scale:.0f`, multiplies it by
#   {glue:text}`04_loss_scaling.ipynb::backoff_factor:g` when the gradients
#   overflow (and skips that step), and by
#   {glue:text}`04_loss_scaling.ipynb::growth_factor:g` after
#   {glue:text}`04_loss_scaling.ipynb::growth_interval:.0f` clean steps
#   ({doc}`04_loss_scaling`).
# - **Memory.** Per pixel of a batch, AMP saves at most
#   {glue:text}`04_loss_scaling.ipynb::limit:.0%` of ERFNet's {term}`new bytes
#   saved for backward` as ERFNet is written, because parts of the network stay fp32
#   ({doc}`07_making_amp_pay`'s 16-bit residual stream saves more); the post's memory
#   figure fell by {glue:text}`04_loss_scaling.ipynb::post_saving:.0%` (the post does
#   not say how it measured memory) ({doc}`04_loss_scaling`).
# - **Other networks.** For ResNet-50 at batch 256 on an A100, the doctor's calibrated
#   range from every reference but that ResNet-50 A100 one itself is
#   {glue:text}`06_will_amp_help.ipynb::ch6_rn50_low:.2f`x to
#   {glue:text}`06_will_amp_help.ipynb::ch6_rn50_high:.2f`x; NVIDIA published
#   {glue:text}`06_will_amp_help.ipynb::ch6_rn50_pub:.2f`x (AMP with channels_last
#   against TF32 in NCHW), which lies
#   {glue:text}`06_will_amp_help.ipynb::ch6_rn50_where:s`, where the ratio of the two
#   roofline bounds in chapter 6's reference file says
#   {glue:text}`06_will_amp_help.ipynb::ch6_rn50_equal:.2f`x
#   ({doc}`06_will_amp_help`).

# %% [markdown]
# (findings-gpu)=
# ## On the GPUs in the results folder
#
# Each GPU's committed ERFNet runs, measured by `python -m booktools.gpucheck`, with their
# provenance, at the ERFNet authors' defaults (the provenance line gives them);
# {doc}`03_amp_training` shows them beside this machine's runs and {doc}`05_rtx3070`
# sets them against the roofline bound. The step *in the loop* leaves out the wait for
# data and the epoch includes it; the step *timed alone* comes from the layer profiles
# (no loader at all). Each ratio is given epoch by epoch and called faster or slower
# only where every epoch agrees.

# %% tags=["remove-input"]
md(gpu_findings(results))

# %% [markdown]
# What the roofline bound says of an H200, for the same network:
#
#
# - **What the bound promises.** For ERFNet at the post's likely setting, the ratio of
#   bounds (the cost model's, not a step ratio) of AMP over fp32 with TF32 is
#   {glue:text}`05_rtx3070.ipynb::ch5_h_speed:.2f`x on an H200, and TF32's over
#   strict fp32 {glue:text}`05_rtx3070.ipynb::ch5_h_tf32:.2f`x: on a data-centre
#   GPU the fp32 baseline's TF32 matters as much as AMP does
#   ({doc}`05_rtx3070`).
# - **What it needs from the loader.** Kept busy with AMP at chapter 5's likely setting
#   of the post (batch {glue:text}`05_rtx3070.ipynb::ch5_B:d` at
#   {glue:text}`05_rtx3070.ipynb::ch5_W:d` x {glue:text}`05_rtx3070.ipynb::ch5_H:d`), an H200
#   could train up to
#   {glue:text}`05_rtx3070.ipynb::ch5_h_img_s:.0f` images per second: the
#   decoding work of {glue:text}`05_rtx3070.ipynb::ch5_h_cores:.0f` cores at this
#   machine's cost per image ({doc}`05_rtx3070`).

# %% [markdown]
# (findings-ladder)=
# ## Making AMP pay
#
# - **Where the gain went.** At the ERFNet authors' defaults on the book's GPU
#   ({glue:text}`07_making_amp_pay.ipynb::ch7_gpu_name:s`), the layer profiles measured
#   AMP's kernels at {glue:text}`07_making_amp_pay.ipynb::ch7_r0_amp_kernel:s` a step
#   against TF32's {glue:text}`07_making_amp_pay.ipynb::ch7_r0_base_kernel:s`, but the
#   GPU sat idle {glue:text}`07_making_amp_pay.ipynb::ch7_r0_amp_idle:s` of every AMP
#   step, so the step took {glue:text}`07_making_amp_pay.ipynb::ch7_r0_amp:s` against
#   {glue:text}`07_making_amp_pay.ipynb::ch7_r0_base:s` ({doc}`07_making_amp_pay`).
#   Part of that idle time was the runner's, not AMP's: the runner that measured it
#   synchronised the host four times per AMP step and twice per fp32 step, its own
#   `get_scale()` reads two of AMP's four and its gradient-norm check one of fp32's
#   two; a loop written as PyTorch's AMP examples write it makes two and one. How
#   much of the idle time those reads cost is the book's host model's estimate (one
#   fitted idle time per sync, the same for every sync), not a measurement
#   ({doc}`06_will_amp_help`).
# - **What the ladder gives.** With the data fixed, channels_last, no per-step syncs
#   and a 16-bit residual stream, one change per rung, AMP's step at rung
#   {glue:text}`07_making_amp_pay.ipynb::ch7_eager_top:d`
#   {glue:text}`07_making_amp_pay.ipynb::ch7_takes:s`
#   {glue:text}`07_making_amp_pay.ipynb::ch7_top_amp:s`,
#   {glue:text}`07_making_amp_pay.ipynb::ch7_top_speedup:s` as fast as TF32 at
#   {glue:text}`07_making_amp_pay.ipynb::ch7_top_base:s` on the same rung
#   ({glue:text}`07_making_amp_pay.ipynb::ch7_gpu_kind:s`), against
#   {glue:text}`07_making_amp_pay.ipynb::ch7_r0_speedup:s` at the authors' defaults
#   ({ref}`ch7-gpu`).

# %% [markdown]
# (findings-this-machine)=
# ## On this machine
#
# Measured by the run that built this copy; on another machine these numbers differ, and
# the chapters say how to read them either way.
#
# - **Matmuls and convolutions.** At n = {glue:text}`02_tensor_cores.ipynb::n_cmp:d`,
#   fp16 matmuls ran at {glue:text}`02_tensor_cores.ipynb::speed_fp16_matmul:.3g` and
#   bf16 at {glue:text}`02_tensor_cores.ipynb::speed_bf16_matmul:.3g` times the fp32
#   speed, and a convolution's forward and backward pass together at
#   {glue:text}`02_tensor_cores.ipynb::speed_fp16_conv_train:.3g` times in fp16 and
#   {glue:text}`02_tensor_cores.ipynb::speed_bf16_conv_train:.3g` times in bf16:
#   above 1, the kernels PyTorch runs here for the 16-bit format are faster than fp32's;
#   below 1 they are slower, whatever the CPU's instruction sets suggest ({doc}`02_tensor_cores`;
#   {ref}`ch6-measured` names the kernels of each pass).
# - **Memory-bound work.** An elementwise add in fp16 took
#   {glue:text}`02_tensor_cores.ipynb::ew_ratio:.2f` times the fp32 time; 0.5 is
#   what halved bytes alone would give ({doc}`02_tensor_cores`).
# - **Training.** fp32 and AMP reached final training losses of
#   {glue:text}`03_amp_training.ipynb::loss_f:.4f` and
#   {glue:text}`03_amp_training.ipynb::loss_a:.4f`, the largest gap in any epoch
#   {glue:text}`03_amp_training.ipynb::gap:.4f`,
#   {glue:text}`03_amp_training.ipynb::ch3_skips:s` ({doc}`03_amp_training`).
# - **The input pipeline.** One core decodes and resizes a Cityscapes-sized image in
#   {glue:text}`05_rtx3070.ipynb::ch5_load_ms:.0f` ms; had the loader set the
#   post's pace, one image would have cost
#   {glue:text}`05_rtx3070.ipynb::ch5_implied_ms:.0f` ms there
#   ({doc}`05_rtx3070`).

# %% [markdown]
# ## Summary
#
# AMP saves memory wherever the network keeps 16-bit activations for the backward pass; it
# saves time where the step's kernels get faster in 16 bits (on tensor cores, or, for
# memory-bound work, by moving fewer bytes: ERFNet's AMP step moves
# {glue:text}`05_rtx3070.ipynb::ch5_bytes_ratio:.2f` times fp32's by the cost model's
# count, not half) and the GPU is kept busy. The post's RTX
# 3070 had little tensor-core headroom (published peaks), ERFNet's roofline bound on it is
# mostly memory time, whose bytes AMP does not halve (the cost model's prediction), and a
# GPU that waits for its loader turns a step faster than strict fp32's into an epoch no
# faster than strict fp32's (measured by the committed GPU runs above; against TF32 the
# step itself gained little); {doc}`06_will_amp_help` makes the same diagnosis for
# another network, and {doc}`07_making_amp_pay` shows, rung by rung
# ({glue:text}`07_making_amp_pay.ipynb::ch7_gpu_kind:s`), what it takes for AMP's faster
# kernels to shorten the step.
#
# ## Exercises
#
# 1. Run `python -m booktools.gpucheck --plan A` and `--plan B` on your GPU, copy their
#    records into `data/results/` and rebuild this page: which of the findings above
#    change, and which hold?
# 2. On your GPU, which share of the AMP epoch is spent waiting for data? Compare it with the
#    committed runs' share and with {ref}`findings-post`'s evidence from 2020.
