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
# # Will AMP help your model?
#
# The book so far explained why AMP gave ERFNet on an RTX 3070 no speedup. This chapter
# turns to your network on your GPU with one command, `python -m ampbook.doctor`: it
# traces a training step of any `nn.Module` and predicts AMP's speedup per GPU as a
# point estimate with its range, calibrated on measured efficiencies and weighted by how
# close each reference is. For ResNet-50 at batch 256 on an A100 (AMP in channels_last,
# TF32 in NCHW, as NVIDIA ran it) the other references predict a step ratio of
# {glue:text}`ch6_rn50_point:.2f`x ({glue:text}`ch6_rn50_low:.2f`x to
# {glue:text}`ch6_rn50_high:.2f`x), and NVIDIA published {glue:text}`ch6_rn50_pub:.2f`x
# {cite:p}`nvidia-dle-resnet50`, which lies {glue:text}`ch6_rn50_where`; the ratio of
# the two roofline bounds (a ratio of bounds, as in chapter 5) gives
# {glue:text}`ch6_rn50_equal:.2f`x. Left out one at a
# time, {glue:text}`ch6_loo_inside:.0%` of the references lie inside the range the
# others predict ({ref}`ch6-references`). PyTorch's AMP recipe
# {cite:p}`pytorch-amp-recipe` and NVIDIA's guide {cite:p}`nvidia-mp-guide` answer
# with advice; the doctor answers with numbers, from the network and from what was
# measured.
#
# **What you will learn**: what the doctor reports and how to run it on your model;
# what autocast leaves in fp32 in ERFNet, ResNet-50 and ViT-B/16; why the ratio of two
# roofline bounds limits nothing, and how efficiencies measured per operator class make
# a range of it; when a step is too small to gain (the launch floor); and how well the
# ranges predict published results they were not given.
#
# **What you need**: the cost model of the RTX 3070 chapter, autocast's dtypes from
# the loss-scaling chapter, and a minute or two of CPU. No GPU: the GPUs come from the
# device table, and committed GPU runs appear beside the predictions.

# %% tags=["parameters", "remove-cell"]
device = "auto"  # where the steps are timed: "auto", "cpu" or "cuda"
shown_model = "torchvision:resnet50"  # the model whose whole report is shown
shown_input = [3, 224, 224]  # its input, C, H, W
shown_batch = 32  # and batch
shown_gpus = ["a100", "h200"]  # the GPUs of its report
erfnet_input = [3, 512, 1024]  # ERFNet's input, C, H, W (the book's setting)
erfnet_batch = 6  # and batch
resnet_batch = 32  # ResNet-50's batch in the comparison (input 3 x 224 x 224)
vit_batch = 32  # ViT-B/16's batch (its input is fixed at 3 x 224 x 224)
small_batch = 2  # the batch of the launch-floor example
measure_input = [3, 128, 256]  # where ERFNet's CPU steps are timed (rounds)
measure_batch = 2  # and their batch
rounds = 5  # rounds of the CPU timing (the precisions take turns)
reader_model = ""  # your model: "package.module:callable" or "torchvision:NAME"
reader_input = [3, 224, 224]  # its input, one sample's shape
reader_batch = 32  # and batch
gpus = ["rtx3070-desktop", "a100-sxm-80gb", "h100-sxm", "h200-sxm"]  # table keys
results_dir = ""  # folder of committed GPU results (empty: data/results)

# %% tags=["remove-input"]
from ampbook.core import params
from ampbook.core.devices import load_devices
from ampbook.core.env import print_environment

params.device("device", device)
for name in ("shown_input", "erfnet_input", "measure_input", "reader_input"):
    v = globals()[name]
    params.rule(name, v, lambda v: bool(v) and all(isinstance(i, int)
                and not isinstance(i, bool) and i > 0 for i in v),
                "must be one sample's shape: positive integers")
for name in ("shown_batch", "erfnet_batch", "resnet_batch", "vit_batch", "small_batch",
             "measure_batch", "rounds", "reader_batch"):
    params.integer(name, globals()[name], minimum=1)
params.rule("gpus", gpus, lambda v: bool(v) and set(v) <= set(load_devices()),
            "must be keys of data/reference/devices.yml")
params.rule("reader_model", reader_model, isinstance(reader_model, str),
            "must be a string ('' for none)")
params.rule("shown_gpus", shown_gpus, lambda v: isinstance(v, list) and bool(v)
            and all(isinstance(g, str) for g in v), "must be a list of GPU names")
params.folder("results_dir", results_dir, empty="data/results")
print_environment(device)

# %% tags=["hide-cell"]
import matplotlib.pyplot as plt
import numpy as np

from ampbook.chapters import ch3, ch5, ch6
from ampbook.chapters.ch6.diagnosis import DoctorConfig, diagnose
from ampbook.chapters.ch6.report_text import (
    NEAR_FLOOR,
    measured_table,
    screen_line,
    to_markdown,
)
from ampbook.chapters.ch6.verdict import measured_verdict
from ampbook.core.devices import display_name
from ampbook.core.page import GIB, MIB, bar_style, glue_all, md, md_table, use_style
from ampbook.core.words import plural
from ampbook.measure.cpu_kernels import probe_conv
from ampbook.predict.calibrate import (
    ERRORS,
    WEIGHTS,
    calibrated_range,
    layout_factor,
    leave_one_out,
    leave_one_out_table,
    leave_one_out_text,
    profile_bound_lines,
    references_table,
    self_check_lines,
    unreferenced_text,
)
from ampbook.predict.hostmodel import RUNNER_2026_11_30, host_model
from ampbook.predict.references import (
    heldout_references,
    load_bounds,
    load_published,
    references,
)
from ampbook.predict.specs import table_key
from ampbook.results import load_results_dir

use_style()
devices = load_devices()
rdir = results_dir or None

# %% [markdown]
# (ch6-report)=
# ## What the doctor prints
#
# `python -m ampbook.doctor --model SPEC` takes `erfnet`, `torchvision:NAME` (built with
# every weights argument off: nothing is downloaded) or `package.module:callable` (a
# function returning your `nn.Module`), with `--input` (one sample's shape, `C,H,W` or
# `C,T,H,W` for video), `--batch`, `--gpus` (keys of the device table or short names
# such as `a100` or `4090`), `--memory-format` (the layout your loop runs:
# `channels_first`, PyTorch's default and the doctor's, or `channels_last`) and
# `--loader-images-per-s` (what your input pipeline delivers). It traces one
# training step on fake tensors, so the full size costs seconds and no memory. Here is
# its report for the README's example at this profile's size, {glue:text}`ch6_shown_size`
# (the README runs ResNet-50 at batch 32 x 3x224x224 on the A100 and the H200), run
# through the function the command calls, its steps timed here as `--measure` times
# them (on a CPU the command times none unless asked), and printed as Markdown:

# %%
shown = diagnose(DoctorConfig(
    shown_model, tuple(shown_input), shown_batch, device, gpus=shown_gpus,
    results_dir=rdir, rounds=rounds))
glue_all(ch6_shown_size=f"batch {shown_batch} x {'x'.join(map(str, shown_input))}",
         ch6_near_floor=f"{NEAR_FLOOR:.0%}")
md(to_markdown(shown, level=0))

# %% [markdown]
# Five sections. Coverage says how much of the step CUDA's autocast runs in 16 bits
# and names what stays in fp32 with the reason. Memory counts the bytes autograd saves
# for the backward pass at the size asked for, on the traced step. The roofline gives
# each GPU's lower bound per precision. The measured section times the runner's own
# step on this machine. The verdict turns bounds into the speedup one can expect, a
# range calibrated on what kernels were measured to reach, and lists what to try per
# GPU. The rest of the chapter takes these apart on three networks built differently:
# ERFNet, ResNet-50 and ViT-B/16.
#
# Before the sections comes the answer: one line per GPU, for the faster of the two AMP
# precisions, with a predicted speedup over fp32 with TF32 (fp32-tf32), its range and
# two words. The first word judges the range. "A gain" or "a loss" means the whole
# predicted range lies above or below 1.0. When the range spans 1.0 the doctor cannot
# tell, and says "no clear gain" or "no clear loss" depending on which side of 1.0 the
# middle estimate falls. The second word says what limits the AMP step, and it comes
# from one of two tests. The launch test is tried first. Eager PyTorch spends some host
# time on every kernel it starts, so a step can never be shorter than its kernel count
# times that time: the launch floor. The doctor sets each precision's floor beside its
# calibrated kernel time, the time the references predict for the kernels themselves. A
# floor longer than that time, AMP's or fp32's, makes the step "launch-bound"; AMP's
# floor at least {glue:text}`ch6_near_floor` of AMP's kernel time (a threshold the
# doctor chooses, not a measurement) makes it "near the launch floor", where faster
# kernels would barely show. Only when neither holds does the word come from the roofline:
# "memory-bound" or "compute-bound", whichever has the larger share of the predicted
# bound. Section 5 prints AMP's floor beside AMP's kernel time for every GPU, so AMP's
# half of the test can be checked; fp32's half can decide alone only where AMP runs
# fewer kernels than fp32 or its kernel time is predicted longer.

# %%
cmp_specs = {"ERFNet": ("erfnet", erfnet_input, erfnet_batch),
             "ResNet-50": ("torchvision:resnet50", [3, 224, 224], resnet_batch),
             "ViT-B/16": ("torchvision:vit_b_16", [3, 224, 224], vit_batch)}
if reader_model:
    cmp_specs["your model"] = (reader_model, reader_input, reader_batch)
reports = {
    name: diagnose(DoctorConfig(
        spec, tuple(shape), batch, device,
        ["amp-fp16", "amp-bf16"] if name == "ERFNet" else ["amp-fp16"], gpus,
        measure=name == "ERFNet", results_dir=rdir,
        measure_size=(tuple(measure_input), measure_batch), rounds=rounds))
    for name, (spec, shape, batch) in cmp_specs.items()}

# %% [markdown]
# ## What the steps are made of
#
# Per sample of one training step (forward, loss and backward): the FLOPs, the bytes
# the operators read and write and their ratio (the arithmetic intensity), the share of
# the FLOPs in convolutions and matrix products (the work tensor cores do), and how
# much CUDA's fp16 autocast shrinks the step's traffic.

# %% tags=["hide-input"]
rows = []
for name, r in reports.items():
    t, n = r["totals"]["fp32"], r["batch"]
    rows.append((f"{name}, {n} x {'x'.join(map(str, r['input']))}",
                 t["flops"] / n / 1e9, t["bytes"] / n / MIB, t["flops"] / t["bytes"],
                 t["mma_flops"] / t["flops"], ch6.bytes_ratio(r)))
md_table(rows, ["network, batch x input", "GFLOPs / sample", "MiB moved / sample",
                "FLOPs / byte", "matrix share", "fp32 / AMP bytes"],
         [None, ".1f", ",.0f", ".1f", ".1%", ".2f"])

# %% [markdown]
# Almost every FLOP is a matrix FLOP in all three, so compute alone would promise each
# the tensor cores' gain. A GPU's ridge point (its matrix peak over its bandwidth) is
# the intensity an operator needs to be limited by arithmetic rather than memory; the
# step's intensity above averages operators of very different kinds, and the doctor's
# "where the time goes" table splits it: convolutions and linear layers carry the
# FLOPs, the normalisation and element-wise layers do a few FLOPs per byte and can only
# be memory-bound.
#
# ## What stays in fp32
#
# Autocast runs convolutions and matrix products in fp16, keeps its fp32 list (losses,
# softmax, layer norm, upsampling) in fp32, and leaves the rest in the dtype of their
# inputs; an fp16 tensor added to an fp32 one gives fp32, so a residual sum whose skip
# path is fp32 stays fp32. The trace runs CUDA's rules and CUDA's kernels on the CPU
# (fused attention, cuDNN's recurrent layers), none of the CPU's own. The largest fp32
# operators of each step:

# %% tags=["hide-input"]
md_table([(name, f"{g['op']} in {g['layer_type']}", g["bytes_share"], g["reason"])
          for name, r in reports.items() for g in r["coverage"]["fp32_ops"][:3]],
         ["network", "op in layer type", "share of bytes", "why fp32"],
         [None, None, ".1%", None])

# %% [markdown]
# In the three networks every matrix FLOP runs in fp16; the bytes are another matter,
# and for a memory-bound step the share left in fp32 decides how far the bytes shrink.
#
# (ch6-ratio)=
# ## The ratio of the bounds is not a bound
#
# The roofline gives each precision's step a lower bound. Their ratio is the speedup
# *if both precisions reached the same share of their bound*: a compute-bound operator
# then gains the tensor cores' peak ratio, a memory-bound one what its bytes shrink.
# A ratio of two lower bounds limits nothing: if fp32's kernels reach a smaller share
# of their bound than fp16's, the real speedup exceeds it. The doctor's lines say which
# of the two ratios each network's bound ratio follows on the last GPU of the list:

# %%
md("\n".join(f"- {ch6.gain_verdict(r, gpus[-1])}" for r in reports.values()))

# %% [markdown]
# NVIDIA's ResNet-50 on one A100 is the case in point. Its two runs differ in more than
# the precision: the AMP run kept its tensors in channels_last, the TF32 run in NCHW
# (the benchmark's configuration file; `data/reference/training_throughputs.yml` records
# both), so its 2.63x is AMP and a layout change together. The cost model's bounds of
# that step (batch 256, each side in its own layout, traced with the rest of the
# references by `python -m ampbook.calibration --write`) against the published
# throughputs.
# These bounds count the AMP side's conversion of each batch to channels_last and the
# optimizer's update; chapter 5's trace of the same step leaves both out, so its ratio
# of the bounds can differ from this one in the last printed digit:

# %% tags=["hide-input"]
published = {r.key: r for r in load_published()}
bounds = load_bounds()
refs = references(rdir)
rn50 = published["dle-resnet50-a100"]
b = bounds[rn50.key]
rows = []
for side in ("baseline", "amp"):
    s = rn50.side(side)
    rows.append((s.precision, s.batch, s.images_per_s, b[side]["bound_s"] / s.batch
                 * 1e3, s.step_s / s.batch * 1e3, b[side]["bound_s"] / s.step_s))
md_table(rows, ["precision", "batch", "images/s", "bound (ms / image)",
                "measured (ms / image)", "share of bound"],
         [None, None, ",.0f", ".3f", ".3f", ".0%"])

# %%
rn50_equal = ((b["baseline"]["bound_s"] / rn50.baseline.batch)
              / (b["amp"]["bound_s"] / rn50.amp.batch))
glue_all(ch6_rn50_equal=rn50_equal, ch6_rn50_pub=rn50.speedup)

# %% [markdown]
# TF32's kernels reached a smaller share of their bound than fp16's, so the published
# {glue:text}`ch6_rn50_pub:.2f`x lies above the ratio of the bounds,
# {glue:text}`ch6_rn50_equal:.2f`x. To predict a speedup, the doctor needs the share
# each precision's kernels reach.
#
# (ch6-calibrated)=
# ## Calibrated ranges
#
# An efficiency is a bound over a measured time. The doctor keeps one per operator
# class (convolution, matrix product with attention and recurrent layers, normalisation,
# element-wise), dtype family (fp32 on CUDA cores, TF32, 16-bit tensor cores) and memory
# layout, from two kinds of reference ({doc}`the RTX 3070 chapter <05_rtx3070>` made the
# layer profiles):
#
# - committed GPU **layer profiles**, which time every module of a network's step in
#   both precisions: their modules' kernel times, summed per class, give a kernel
#   efficiency per class. The bound is classed the same way, by module, so that a
#   convolution's autocast casts count with the convolution on both sides, and a
#   profile applied to its own network gives back its own measured ratio;
# - **published training throughputs**
#   {cite:p}`nvidia-dle-resnet50,nvidia-dle-efficientnet,nvidia-dle-resnext101`, kept
#   with their sources, batches and layouts in
#   `data/reference/training_throughputs.yml`: each one's step time against the bound of the same network, batch, GPU and layout
#   gives one efficiency per family for the whole step. These are whole-step
#   efficiencies, not kernel ones: the published time includes whatever the host added.
#
# The references and the shares they measured (for a layer profile, its whole kernel
# time against its whole bound; for a published one, its step). The speedup column
# says what each measured: a kernel-time ratio for a profile, a throughput ratio for a
# published pair. `python -m ampbook.calibration` prints the same table, with the two
# checks of the layer profiles below and the device table's GPUs that no reference of
# their generation (architecture and segment) covers:

# %% tags=["hide-input"]
md(references_table(refs))

# %% [markdown]
# A layer profile's AMP share here is chapter 5's kernel efficiency of the same
# profile: the references' bounds are the book's one step model
# (`ampbook.predict.stepmodel`), which leaves out the NCHW transposes cuDNN may put
# around a 16-bit convolution ({ref}`ch5-layout` shows the bound with them, an
# assumption). Each profile's bound now against the one it recorded:

# %%
md(profile_bound_lines(rdir))

# %% [markdown]
# No one share holds everywhere: the table shows the shares splitting by GPU more than
# by network, and which precision reached the larger share changes from one GPU to
# another and, on the V100, from one network to another. So the doctor applies each
# reference's efficiencies to the model diagnosed, class by class, and weights the
# speedups they give by how close each reference is: the same network or how far its
# mix of classes lies, the same layout per precision, the same GPU, chip,
# architecture, segment or another, and how far its batch lies. Those weights are
# fitted, not chosen: on a grid, the ones whose leave-one-out predictions land closest
# to what the references measured (`calibrate.fit`; a reference whose AMP ran
# NHWC counts {glue:text}`ch6_w_layout:.2f` of one in the layout predicted). Where a
# reference's AMP ran in the other layout its 16-bit efficiency is scaled by what one
# network on one GPU measured in both: NCHW kept {glue:text}`ch6_layout_factor:.0%`
# of NHWC's 16-bit efficiency. The point estimate is the weighted geometric mean, and
# the range's half-width (log scale) is what the leave-one-out missed by at this
# prediction's distance from its closest reference (minus the log of its weight, 0 for
# the same network, GPU, layout and batch):
# {glue:text}`ch6_err_cover:.2f` x ({glue:text}`ch6_err_base:.3f` +
# {glue:text}`ch6_err_slope:.3f` x distance), the multiple that holds 90% of the
# leave-one-out's misses, with no floor; a range far from every reference is wider. The
# references that carry most of the weight are named.
#
# The range is of the *step*, and says so. A layer profile's efficiencies give kernel
# time, so the doctor adds what the GPU waits for the host: the H200 profiles' idle time
# over their runner's host syncs is {glue:text}`ch6_idle_ms:.1f` ms per sync (fitted on
# one GPU's two profiles, assumed on every GPU; `ampbook.predict.hostmodel`), times the
# syncs of a loop as PyTorch's AMP examples write it, the loss read each step (one per
# fp32 step, two per AMP step with GradScaler's check). A published throughput's step
# time holds its own host time. With `--loader-images-per-s` the step in the loop is at
# least the loader's time per batch. Beside the step's ratio the first screen prints the
# "step without host idle" (the calibrated point before the idle time is added: for a
# layer profile the kernels, for a published throughput its whole step). A GPU whose
# fp32 family no reference measured gets no range, only the ratio of its bounds.
# {numref}`fig-ch6-ranges` shows the ranges of the three networks per GPU, each
# predicted in NCHW, PyTorch's default layout.

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Predicted AMP (fp16) speedup over fp32 with TF32, per GPU and network: the bar spans the calibrated range, the dash is the ratio of the roofline bounds (the speedup at equal shares of the bound). The star marks NVIDIA's published ResNet-50 speedup on an A100, at batch 256 with AMP in channels_last, where the bars are at the chapter's batch in NCHW.", "name": "fig-ch6-ranges"}}
fig, ax = plt.subplots(figsize=(7.0, 3.6))
x, width = np.arange(len(gpus)), 0.8 / len(reports)
for j, (name, r) in enumerate(reports.items()):
    rng = {v["gpu"]: v for v in r["verdict"]["ranges"] if v["precision"] == "amp-fp16"}
    off = x + (j - (len(reports) - 1) / 2) * width
    lows = [rng[g]["low"] or rng[g]["equal_share"] for g in gpus]
    highs = [rng[g]["high"] or rng[g]["equal_share"] for g in gpus]
    ax.bar(off, np.subtract(highs, lows), width * 0.9, bottom=lows, label=name,
           **bar_style(j))
    ax.scatter(off, [rng[g]["equal_share"] for g in gpus], marker="_", s=250,
               color="black", zorder=3)
if "a100-sxm-80gb" in gpus:
    ax.scatter([gpus.index("a100-sxm-80gb")], [rn50.speedup], marker="*", s=160,
               color="black", zorder=4, label="published ResNet-50 (batch 256)")
ax.axhline(1.0, color="black", linewidth=0.8)
ax.set_xticks(x, [display_name(g) for g in gpus])
ax.set_ylabel("speedup (fp32 time / AMP time)")
ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, fontsize=8)
plt.show()

# %%
host_here = host_model(rdir)
glue_all(ch6_idle_ms=host_here.idle_per_sync_s * 1e3 if host_here else float("nan"))
glue_all(ch6_err_base=ERRORS.base, ch6_err_slope=ERRORS.slope,
         ch6_err_cover=ERRORS.cover, ch6_w_layout=WEIGHTS.other_layout,
         ch6_layout_factor=layout_factor(refs) or 1.0)
md(unreferenced_text(gpus, refs, devices))

# %% [markdown]
# The verdict lines name the references that set each point; on the last GPU:

# %%
md("\n".join(f"- {name}, batch {r['batch']} x {'x'.join(map(str, r['input']))}: "
             + next(v["line"] for v in r["verdict"]["ranges"] if v["gpu"] == gpus[-1])
             for name, r in reports.items()))

# %% [markdown]
# (ch6-launch)=
# ## The launch floor
#
# A step cannot be faster than its kernels can be issued. Eager PyTorch spends some
# microseconds of host time per operator; the committed GPU sweep measured it as the
# time of its smallest element-wise calls, where the size no longer matters. Each
# precision's step takes at least its kernel count times that, and AMP adds kernels:
# its casts of weights and activations, and their gradients' casts back (its other
# kernels can differ in number from fp32's too; the table gives both counts). The table
# below holds the floor against the kernel time the median reference predicts, at the
# chapter's batch sizes and for ResNet-50 at batch {glue:text}`ch6_small_batch`; both
# are predictions (ERFNet's committed layer profile on the
# {glue:text}`ch6_erf_profile_gpu` measured {glue:text}`ch6_erf_amp_kernels_ms:.1f` ms
# of kernels per AMP step). The first screen's line for the small ResNet-50:

# %%
small = diagnose(DoctorConfig(
    "torchvision:resnet50", (3, 224, 224), small_batch, device, ["amp-fp16"], gpus,
    measure=False, results_dir=rdir))
md(screen_line(next(v for v in small["verdict"]["ranges"] if v["gpu"] == gpus[-1])))

# %% tags=["hide-input"]
launch_rows = ch6.launch_rows(
    [*reports.items(), (f"ResNet-50, batch {small_batch}", small)], gpus[-1])
md_table(launch_rows, ["network", "fp32 kernels", "AMP kernels (against fp32's)",
                       "AMP floor (ms)", "AMP kernel time, predicted (ms)"],
         [None, None, None, ".3f", ".3f"])

# %% tags=["hide-input"]
md(ch6.launch_text(launch_rows, gpus[-1]))

# %%
erf_profile = next((lp for lp in load_results_dir(rdir).layer_profiles
                    if lp.precision == "amp-fp16"), None)
glue_all(ch6_small_batch=small_batch,
         ch6_erf_amp_kernels_ms=erf_profile.measured_total_s * 1e3 if erf_profile
         else float("nan"),
         ch6_erf_profile_gpu=display_name(erf_profile.device_name) if erf_profile
         else "none")

# %% [markdown]
# Where the floor exceeds the kernel time, the model predicts the step launch-bound:
# the GPU would wait for the host, and AMP's extra kernels would make it slower,
# whatever its tensor cores could do.
# CUDA graphs or `torch.compile` cut the host's share; a larger batch does too.
#
# ## Memory at the requested size
#
# The doctor counts the bytes autograd saves for the backward pass (the book's memory
# figure) on the traced step itself, at the size asked for: fake tensors carry the real
# shapes through the real autograd graph without data, so no size is too large and no
# line is extrapolated from small ones. Autocast halves what it saves in fp16 and adds
# an fp16 copy of every weight it casts.

# %% tags=["hide-input"]
md_table([(name, m["fp32_bytes"] / GIB, m["amp_bytes"] / GIB, m["amp_over_fp32"],
           m["state_bytes"] / GIB) for name, r in reports.items()
          if (m := r["memory"]["at_size"])],
         ["network", "fp32 (GiB)", "AMP (GiB)", "AMP / fp32",
          "weights, grads, Adam (GiB)"], [None, ".2f", ".2f", ".2f", ".2f"])

# %% [markdown]
# ## Feeding the GPU
#
# A step at its bound needs the input pipeline to deliver the batch as fast. The
# images per second each network needs on each GPU with AMP at the bound (a ceiling
# on what it can use); a loader slower than that sets the pace of the epoch, as the
# RTX 3070 chapter showed. `--loader-images-per-s` makes the doctor say which side
# bounds.

# %% tags=["hide-input"]
need = {(name, x["gpu"]): x["images_per_s_needed"] for name, r in reports.items()
        for x in r["roofline"] if x["precision"] == "amp-fp16"}
md_table([(display_name(g), *[round(need[(name, g)]) for name in reports])
          for g in gpus], ["GPU", *[f"{name} (images/s)" for name in reports]],
         [None] + [",d"] * len(reports))

# %% [markdown]
# (ch6-measured)=
# ## Measured on this machine
#
# The doctor also times the runner's own step here. On a GPU it runs every variant at
# the full size. On a CPU it times ERFNet at {glue:text}`ch6_measured_size` by chapter
# 5's method: fp32 and bf16 take turns for {glue:text}`ch6_rounds`; bf16's speedup is
# the median of the per-round ratios (not the ratio of the medians), and the verdict
# reads those ratios (the rounds disagree on a busy machine, and then no difference is
# resolved). fp16 is timed for one step at a tiny size beside one fp32 step of its own,
# whose time its note gives; its ratio is that single timing, with no spread to judge it
# by.

# %% tags=["hide-input"]
me = reports["ERFNet"]["measured"]
md(measured_table(me)[1])

# %%
glue_all(ch6_measured_size=f"batch {me['batch']} x {'x'.join(map(str, me['input']))}",
         ch6_rounds=plural(me.get("rounds") or 1, "round"))
md(measured_verdict(me))

# %% [markdown]
# On a CPU, why a 16-bit step is slow or fast is a question of which kernels PyTorch
# runs for it, not of the instruction sets the CPU lists: chapter 3's probe times one
# of ERFNet's 3x1 convolutions forward and in both backward passes per dtype and names
# the oneDNN kernel of each pass (on a GPU this section has nothing to add). One probe's
# ratio moves from run to run on a shared machine (chapters 3 and 5 run the same probe
# and print other ratios): read which dtype is faster, not by how much.

# %% tags=["hide-input"]
kernels_here = "Measured on a GPU: the CPU's kernels do not enter this chapter's step."
if me["device"] == "cpu":
    probe = probe_conv(("fp32", "fp16", "bf16"))
    load = "" if probe.load1 is None else f" at load {probe.load1:.1f}"
    kernels_here = ("\n\n".join(probe.verdict(d) for d in probe.dtypes if d != "fp32")
                    + f"\n\n(One thread, {probe.cpus} CPUs{load}.)")
md(kernels_here)

# %% [markdown]
# (ch6-gpu-runs)=
# ## GPU runs beside the prediction
#
# Two checks of the method against committed GPU measurements. First a consistency
# check, not a test of the prediction: a layer profile applied to its own network, GPU,
# batch and layout must give back the kernel-time ratio it measured (within 5%), since
# its efficiencies were fitted on it; a miss would mean the classing of measured and
# predicted time disagrees. As it comes out:

# %%
erf = reports["ERFNet"]
md(self_check_lines(refs, devices))

# Then the step. The committed GPU results time ERFNet's step two ways (AMP fp16 against
# fp32 with TF32): alone, in the layer profiles (no loader), and inside the training
# loop, epoch by epoch, in the training runs; chapters 3 and 5 quote the same two
# (`ch5.step_alone`, `ch3.step_in_loop`). Where the GPU is in the device table and the
# setting is ERFNet's here, two of the doctor's *step* ranges stand beside them. The
# first uses every reference (the same GPU's profile dominates it): the calibrated
# kernel time plus the host's idle time per synchronisation
# (`ampbook.predict.hostmodel`) for the loop that measured them, the book's runner of
# 2026-11-30 (4 host syncs per AMP step, 2 per fp32 step; two of AMP's and one of fp32's
# were the runner's own reads, not AMP's). The second leaves out ERFNet's own profiles:
# a prediction from the other networks and GPUs. On the H200 the references left are
# then published whole steps, whose times hold their own loops' host time, so the idle
# model adds nothing to it and it is a range for those loops, not for the runner's. The
# idle time per sync is not measured but fitted on the same profiles: all their idle
# time, AMP's and fp32's, over all their syncs, one number for every sync. The model
# *assumes* it the same whatever the kernel count, the batch and the GPU, and the split
# it gives (the runner's reads against AMP's own) is its estimate. The first range is
# therefore a cross-check, not a test: the step timed alone is scored against it only to
# show that the fit reproduces the profiles it came from. The fit, from the profiles:

# %%
host = host_model(rdir)
md(f"Idle time per sync, fitted: {host.idle_per_sync_s * 1e3:.1f} ms, from "
   f"{host.source}." if host else "No layer-profile pair with a known loop is "
   "committed: no idle time per sync is fitted.")

# %%
erf_rs = load_results_dir(rdir)
pairs = [q for q in erf_rs.pairs()
         if q.amp.mode == "amp-fp16" and q.baseline.mode == "fp32-tf32"]
runner = host.with_loop(RUNNER_2026_11_30) if host else None
gpu_rows = []
for q in pairs:
    s, key = q.setting, table_key(q.setting.device_name)
    same = [s.batch_size, s.height, s.width] == [erf["batch"], *erf["input"][1:]]
    roof = next((x for x in erf["roofline"] if x["gpu"] == key
                 and x["precision"] == "amp-fp16"), None) if same else None
    full = alone = None
    if roof is not None:
        full = calibrated_range(
            roof["fp32_by_class_s"], roof["amp_by_class_s"], key, refs, model="erfnet",
            batch=erf["batch"], host=runner)
        alone = calibrated_range(
            roof["fp32_by_class_s"], roof["amp_by_class_s"], key,
            [r for r in refs if r.model != "erfnet"], model="erfnet",
            batch=erf["batch"], host=runner)
    gpu_rows.append((display_name(s.device_name), ch5.step_alone(erf_rs, pair=q),
                     ch3.step_in_loop(erf_rs, pair=q), full, alone))
print(f"{plural(len(pairs), 'committed GPU pair')} (amp-fp16 against fp32 with TF32 "
      "on)")

# %% tags=["hide-input"]
md_table([(g, m.number() if m else "–",
           ch3.spread_text(loop, epochs=False) if loop else "–",
           ch6.range_cell(full), ch6.range_cell(alone))
          for g, m, loop, full, alone in gpu_rows]
         or [("none committed", None, None, None, None)],
         ["GPU", "step timed alone (x)", "step in the loop, per epoch (x)",
          "predicted step, own profile (x)", "predicted without ERFNet (x)"])

# %%
md(ch6.step_range_verdicts(gpu_rows))

# %% [markdown]
# Where a committed GPU pair has ERFNet's setting, each GPU gets two lines: the step
# timed alone held against the range with ERFNet's own profile, then against the range
# from the other networks and GPUs. Where none has, the line above says so and nothing
# is scored: the ranges stay predictions. The step in the loop ran with the loader
# beside it and moved from epoch to epoch; its range is printed, not scored. A loop
# without the runner's extra reads (PyTorch's AMP examples
# read no `get_scale()` per step) has fewer syncs: the doctor's first screen predicts
# for that loop.
#
# ## What to try
#
# The doctor's checklist per GPU, one GPU per row and ranked within it; upper bounds
# apart. The AMP item is ranked like with like, by the step predicted for a loop as
# PyTorch's AMP examples write it, for every precision and network; its detail gives the
# range, and a range that spans 1 is a gain the doctor cannot promise. A committed
# measurement at this setting (the step alone, the step in the loop or the kernel time),
# printed on the first screen beside the prediction or in section 5's line for that
# precision, never ranks the item (the doctor's detail points to section 5); one
# clearly slower than fp32 turns it into "keep fp32". On a GPU, the channels_last and
# cudnn.benchmark items are ranked by the steps the doctor timed there. Gains tied to
# two decimals are
# ordered as on the first screen. Each TF32 item appears where TF32 moves the bound by
# more than half a percent: PyTorch runs cuDNN's convolutions in TF32 by default and
# keeps matrix products in full fp32 unless asked. The list for the last GPU of the
# table, each row naming it; then, apart, the gains that are only upper bounds (each at
# equal shares of the bound: the element-wise operators' share of the time taken as
# their share of the bound):

# %% tags=["hide-input"]
md_table([(c["gpu"], name, c["item"], c["gain"],
           ch6.checklist_source(c["source"], cmp_specs[name][0], refs))
          for name, r in reports.items() for c in r["verdict"]["items"]
          if c["gpu"] == display_name(gpus[-1])],
         ["GPU", "network", "try", "gain (x)", "from"], [None, None, None, ".2f", None])

# %% tags=["hide-input"]
md_table([(c["gpu"], name, c["item"], c["gain"], c["detail"])
          for name, r in reports.items() for c in r["verdict"]["upper_bounds"]
          if c["gpu"] == display_name(gpus[-1])],
         ["GPU", "network", "at most", "gain (x)", "why"],
         [None, None, None, ".2f", None])

# %% [markdown]
# (ch6-references)=
# ## How well the ranges predict
#
# Each reference was measured on one network, batch, layout and GPU. Left out of the
# references, what do the others predict for it? The leave-one-out (`python -m
# ampbook.calibration --predictions` prints the same table) gives each one's point and
# range from the others, the references that set it, and whether the range holds what
# was measured; {numref}`fig-ch6-loo` plots the prediction against the measurement.
# Like is scored with like: a published reference timed the whole step, so its *step
# ratio* is held against the step range the others predict; the H200's layer profiles
# timed the kernels, so their *kernel ratio* is held against the predicted kernel range,
# in rows of their own (each row names its quantity; the prediction is of the same
# quantity). The goal is at least 90% of the references inside a range at most 1.4x
# wide (high over low) at the median.

# %% tags=["hide-input"]
loo = leave_one_out(refs, devices)
md(leave_one_out_table(loo))

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Measured AMP speedup of each reference (horizontal) against the point (marker) and range (bar) the other references predict for it; on the diagonal the prediction equals the measurement. Circles: Ampere (A100, A10, RTX 3090), squares: Volta (V100, against fp32), triangles: Hopper (H100, and the H200's layer profile, a kernel-time ratio), diamonds: Ada (RTX 4090); the others against TF32 and of the whole step.", "name": "fig-ch6-loo"}}
fig, ax = plt.subplots(figsize=(5.0, 4.0))
marks = {"Ampere": "o", "Volta": "s", "Hopper": "^", "Ada": "D"}
by_key = {r.key: r for r in refs}
for r in loo["rows"]:
    arch = devices[by_key[r["key"]].gpu].architecture
    ax.plot([r["measured"]] * 2, [r["low"], r["high"]], color="black", lw=1.5)
    ax.scatter([r["measured"]], [r["point"]], marker=marks.get(arch, "D"),
               facecolor="white", edgecolor="black", zorder=3)
lim = [1.0, 4.5]
ax.plot(lim, lim, color="black", lw=0.8, ls="--")
ax.set_xlim(lim)
ax.set_ylim(lim)
ax.set_xlabel("measured speedup (x)")
ax.set_ylabel("predicted by the others (x)")
plt.show()

# %%
loo_rn50 = next(r for r in loo["rows"] if r["key"] == "dle-resnet50-a100")
glue_all(ch6_rn50_low=loo_rn50["low"], ch6_rn50_high=loo_rn50["high"],
         ch6_rn50_point=loo_rn50["point"], ch6_refs=len(refs),
         ch6_loo_inside=loo["inside"], ch6_loo_width=loo["median_width"],
         ch6_rn50_where=ch6.range_position(
             rn50.speedup, loo_rn50["low"], loo_rn50["high"]))
md(leave_one_out_text(loo))

# %% [markdown]
# The leave-one-out fits the weights and the error model it then scores, so it
# flatters them. Published results the calibration never sees score them honestly:
# Lambda's ResNet-50 rows for four GPUs are held out
# (`data/reference/training_throughputs_heldout.yml`), each predicted from every
# reference above.

# %% tags=["hide-input"]
held = leave_one_out(refs, devices, targets=heldout_references())
md_table([(r["label"], f"{r['point']:.2f} ({r['low']:.2f} to {r['high']:.2f})",
           r["width"], f"{r['measured']:.2f} ({r['what']})",
           "yes" if r["inside"] else "no") for r in held["rows"]],
         ["held out (Lambda, NCHW)", "predicted (x)", "width (x)", "measured (x)",
          "inside"], [None, None, ".2f", None, None])

# %%
held_kinds = {(h.source.get("key"), h.network, frozenset(h.layout.values()))
              for h in heldout_references()}
held_like = sum((r.source.get("key"), r.network, frozenset(r.layout.values()))
                in held_kinds for r in refs)
assert len(held_kinds) == 1, "error: held-out rows mix sources, networks or layouts"
glue_all(ch6_held_inside=held["inside"], ch6_held_width=held["median_width"],
         ch6_held_n=held["n"], ch6_held_like=held_like, ch6_refs_n=len(refs))

# %% [markdown]
# {glue:text}`ch6_held_inside:.0%` of the {glue:text}`ch6_held_n` held-out results fall
# inside their range, at a median width of {glue:text}`ch6_held_width:.2f`x. All of
# them are Lambda's ResNet-50 v1.5 runs in NCHW: the same source, network and layout as
# {glue:text}`ch6_held_like` of the {glue:text}`ch6_refs_n` references that calibrate
# the ranges. They test how the ranges carry to GPUs the calibration never saw, not to
# another network, source or layout: a weak test of independence.
#
# The references cover data-centre GPUs (V100, A10, A100, H100 and the H200's
# profiles) and two GeForce cards, Lambda's RTX 3090 and RTX 4090, in NCHW only (the
# held-out set adds a workstation card): a GeForce card in NHWC, or one of another
# chip (the RTX 3070 of chapter 5 is Ampere, but another chip), is carried over from
# them, not measured.
#
# A range from references of other networks is as good as those networks are like
# yours; the doctor's distance column says how alike they are. The references here are
# convolutional image classifiers and one segmentation network: for a transformer or a
# recurrent model the nearest reference is still a CNN, and its range should be read
# as that.
#
# ## Summary
#
# - The ratio of two roofline bounds is the speedup if both precisions reach the same
#   share of their bound, not a limit: NVIDIA's ResNet-50 on an A100 gained
#   {glue:text}`ch6_rn50_pub:.2f`x where that ratio is
#   {glue:text}`ch6_rn50_equal:.2f`x.
# - The doctor predicts a point and a range from the efficiencies of
#   {glue:text}`ch6_refs` references (kernel time for layer profiles, the whole step
#   for published throughputs), per operator class, dtype family and layout, weighted
#   by how close each is to the model; for ResNet-50 on an A100 the others predict a
#   step ratio of {glue:text}`ch6_rn50_point:.2f`x ({glue:text}`ch6_rn50_low:.2f`x to
#   {glue:text}`ch6_rn50_high:.2f`x), and the published {glue:text}`ch6_rn50_pub:.2f`x
#   lies {glue:text}`ch6_rn50_where`. Left out one at a time,
#   {glue:text}`ch6_loo_inside:.0%` of the references lie inside the range the others
#   predict, at a median width of {glue:text}`ch6_loo_width:.2f`x
#   ({ref}`ch6-references`).
# - At small batches the doctor predicts a step launch-bound, and AMP's casts add kernels
#   ({ref}`ch6-launch`).
# - Autocast leaves in fp32 what its lists name and what takes an fp32 input, such as a
#   residual sum whose skip path is fp32; the doctor names both with their share of the
#   bytes.
# - The same diagnosis runs on any module: `python -m ampbook.doctor --model
#   package.module:callable --input C,H,W --batch N`; a model with several inputs gets a
#   wrapper (the README shows one).
#
# ## Exercises
#
# 1. Run the doctor on `torchvision:mobilenet_v3_large` and `torchvision:convnext_tiny`
#    at batch 64. Which reference is nearest to each, and how wide is the range?
#
#    ```{dropdown} Hint
#    The verdict line names the nearest reference; `python -m ampbook.calibration`
#    lists them all. MobileNetV3's depthwise convolutions make its mix unlike
#    ResNet-50's.
#    ```
# 2. Set `reader_model` to a network of yours (or `torchvision:swin_t`) and find the
#    fp32 operator with the largest share of the bytes. Can you make its input fp16?
#
#    ```{dropdown} Hint
#    The "why fp32" column says whether an autocast list or an fp32 input keeps it
#    there; an fp32 input can be cast where it is made.
#    ```
# 3. Find the batch at which ResNet-50's AMP step stops being launch-bound on an H200.
#
#    ```{dropdown} Hint
#    Rerun the launch-floor cells with `small_batch` doubled until the first screen's
#    line above the table no longer says launch-bound: AMP's floor in the table below
#    its predicted kernel time, and fp32's floor (its kernels times the same per-kernel
#    time) below fp32's.
#    ```
# 4. Give `--loader-images-per-s` the rate your own DataLoader reaches (the RTX 3070
#    chapter's loader benchmark measures it) and find the slowest GPU in the table it
#    can keep busy with each network.
#
#    ```{dropdown} Hint
#    Compare it with the "Feeding the GPU" table: a GPU whose images/s exceeds your
#    loader's rate waits for data.
#    ```
