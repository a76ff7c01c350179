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
# # The RTX 3070 result, reproduced and explained
#
# The blog post this book grew from trained ERFNet on Cityscapes on a GeForce RTX 3070, with and
# without automatic mixed precision. AMP saved about a quarter of the GPU memory and no time at
# all, and the post left the reason open. This chapter closes it. It rebuilds the post's table
# beside every run this book has, computes what the GPU *could* do from the network itself (a
# per-layer cost model held against the 3070's published ceilings), measures the input pipeline
# that feeds the GPU, and checks the same model on an H200 and on the CPU you run this on.
#
# **What you will learn**
#
# - how to count the FLOPs and the bytes of every layer of a network, forward and backward,
#   without running it, and turn them into a lower bound on the step time (a roofline);
# - why ERFNet on a 3070 is mostly memory-bound, what that caps AMP's speedup at, and where
#   autocast leaves tensors in fp32 on its own;
# - how to tell whether the GPU or the DataLoader bounds an epoch, and why AMP cannot speed up an
#   epoch the DataLoader bounds;
# - a checklist for the reader whose AMP gives no speedup, with the measured effect of each item
#   where this book can measure it.
#
# **What you need**: the training runner of the AMP training chapter, the timing helpers of the
# tensor-core chapter, and a few minutes of CPU. Nothing here needs a GPU; GPU runs committed
# under `data/results/` appear beside this machine's when there are any.

# %% tags=["parameters"]
device = "auto"  # where this machine's runs and checks go: "auto", "cpu" or "cuda"
precision = "amp-fp16"  # the mixed precision the post used, modelled on the GPUs
run_precisions = ["fp32", "amp-bf16"]  # this machine's training runs (AMP on a CPU: bf16)
run_height = 32  # this machine's runs: image height (multiple of 8)
run_width = 64  # and width
batch_size = 2  # this machine's runs: images per step
num_epochs = 2  # this machine's runs: epochs
run_train_images = 6  # synthetic training images of this machine's runs
run_val_images = 2  # synthetic validation images
run_workers = 1  # DataLoader workers of this machine's runs
sensitivity = [[512, 1024, 6], [512, 1024, 2], [256, 512, 6]]  # (height, width, batch) the model is re-run at
loader_images = 8  # full-size (2048x1024) synthetic images the loader benchmark reads
loader_workers = [0, 1, 2]  # DataLoader workers measured (the model extends them to 8)
loader_passes = 3  # passes over the images per worker count (the first starts the workers)
host_cores = 8  # assumed cores of the post's PC (the post does not say)
check_height = 32  # CPU check of the model (low precision is slow here): height
check_width = 64  # and width
check_batch = 1  # and batch
check_repeats = 2  # timed steps per variant of the CPU checks
checklist_height = 32  # size of the checklist's step timings (on `device`)
checklist_width = 64  # and width
checklist_batches = [1, 4]  # batch sizes compared in the checklist
results_dir = ""  # folder of committed GPU results (empty: data/results)

# %%
from ampbook.env import print_environment

print_environment(device);

# %%
import contextlib
import math
import statistics
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import display

from ampbook.costmodel import (Ceilings, epoch_images_per_s, loader_images_per_s, predict,
                               trace_step)
from ampbook.data import NUM_CLASSES, synthetic_root
from ampbook.devices import attainable_tflops, find_device, load_devices
from ampbook.env import cpu_flags, pick_device
from ampbook.model import ERFNet
from ampbook.paths import RESULTS_DIR, load_reference
from ampbook.plots import bar_style, md, md_table, series_style, use_style
from ampbook.timing import machine_load

use_style()
device = pick_device(device)
post = load_reference("seed_post")
devices = load_devices()
setting = post["assumed_setting"]
cityscapes = post["cityscapes"]
results_dir = Path(results_dir) if results_dir else RESULTS_DIR
load = machine_load()
print(f"device {device}; load average {load['load1']} on {load['cpus']} CPUs"
      + (" (busy: CPU timings below are this busy machine's)" if load["busy"] else ""))

# %% [markdown]
# ## The post's numbers
#
# The post's table, as data with its provenance (`data/reference/seed_post.yml`). The post does
# not say what its "time" covers; it calls it the average training time, and the book reads it
# as seconds per epoch. Nor does it give the resolution, the batch size or the number of
# DataLoader workers: where the chapter needs them it takes the defaults of ERFNet's authors'
# training script, and says so each time.

# %%
runs = post["experiment"]["runs"]
amp_post, fp32_post = runs["amp"], runs["no_amp"]
post_speedup = fp32_post["time_s"] / amp_post["time_s"]
post_memory_ratio = amp_post["memory_gb"] / fp32_post["memory_gb"]
post_img_s = cityscapes["train_images"] / fp32_post["time_s"]
display(md_table(
    [("AMP", amp_post["time_s"], amp_post["memory_gb"]), ("fp32 (no AMP)", fp32_post["time_s"], fp32_post["memory_gb"]),
     ("fp32 / AMP", post_speedup, None), ("AMP / fp32", None, post_memory_ratio)],
    ["run", "time (s)", "memory (GB)"], [None, ".4g", ".3g"]))
env = post["environment"]
md(f"The post ran PyTorch {env['pytorch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']} on a {env['gpu']}, "
   f"{post['experiment']['epochs']} epochs of {post['experiment']['model']} on {post['experiment']['dataset']} "
   f"without shuffling. AMP's speedup was {post_speedup:.3f} (below 1: slower) and its memory "
   f"{post_memory_ratio:.2f} of fp32's, a saving of {1 - post_memory_ratio:.0%}. Read as seconds per epoch of the "
   f"{cityscapes['train_images']} Cityscapes training images, {fp32_post['time_s']} s is "
   f"{post_img_s:.1f} images per second, or {1e3 / post_img_s:.1f} ms per image.")

# %%
src = setting["source"]
md(f"Assumed where the post is silent: {setting['height']}x{setting['width']} (height x width) images, "
   f"{setting['batch_size']} per batch, {setting['workers']} DataLoader workers, {setting['optimizer']}: the defaults of "
   f"{src['author']}'s *{src['title']}* ({src['url']}). Cityscapes images are {cityscapes['image_width']}x"
   f"{cityscapes['image_height']} (W x H) PNGs, {cityscapes['train_images']} for training and {cityscapes['val_images']} "
   f"for validation ({cityscapes['source']['author']}, *{cityscapes['source']['title']}*).")

# %% [markdown]
# ## The post's table beside ours
#
# Times from different machines do not compare; ratios do. For every pair of runs the book has
# (same machine, same setting, fp32 against AMP), the speedup is fp32's epoch time over AMP's and
# the memory ratio is AMP's over fp32's. This machine's runs come first: a short training run per
# precision with the book's runner, at a size a CPU finishes in seconds, without shuffling and
# with TF32 allowed for fp32 (on a GPU), as in the post.

# %%
from ampbook.train import TrainConfig, build_training, load_results, run_training, validate

model = ERFNet(num_classes=NUM_CLASSES)  # the network of every cost-model cell below
local_runs = {}
# One untimed step per precision first, so that neither run pays alone for first-call costs.
for p in run_precisions:
    wcfg = TrainConfig(precision=p, device=str(device), height=run_height, width=run_width, batch_size=batch_size)
    build_training(wcfg, validate(wcfg)).step(torch.randn(batch_size, 3, run_height, run_width),
                                             torch.randint(0, NUM_CLASSES, (batch_size, run_height, run_width)))
for p in run_precisions:
    cfg = TrainConfig(precision=p, device=str(device), height=run_height, width=run_width, batch_size=batch_size,
                      epochs=num_epochs, workers=run_workers, synthetic_train=run_train_images,
                      synthetic_val=run_val_images, shuffle=False, tf32="on", checkpoint=False, quiet=True)
    local_runs[p] = run_training(cfg)
    s = local_runs[p]["summary"]
    print(f"{p:9s} {s['mean_epoch_wall_s']:.2f} s per epoch, {s['mean_images_per_s']:.2f} img/s, "
          f"saved for backward {s['max_saved_tensor_bytes'] / 2**20:.1f} MiB")


# %% [markdown]
# GPU runs of the same runner, when any were committed under `data/results/`, are read next.
# A run there is a results file of `python -m ampbook.train`; runs pair up when they share the
# device and the setting.

# %%
def epoch_time(record):
    s = record["summary"]
    return s.get("mean_epoch_wall_s_after_first") or s["mean_epoch_wall_s"]


def memory_of(record):
    """GPU: peak allocated bytes; CPU: bytes saved for backward (activations)."""
    s = record["summary"]
    if s.get("max_cuda_allocated_bytes"):
        return s["max_cuda_allocated_bytes"], "peak CUDA allocated"
    return s["max_saved_tensor_bytes"], "saved for backward"


def setting_of(record):
    c = record["config"]
    return (record["environment"]["device_name"], c["height"], c["width"], c["batch_size"], c.get("tf32"),
            c.get("channels_last"), c.get("workers"))


gpu_records = []
for path in sorted(results_dir.glob("*.json")):
    try:
        rec = load_results(path)
    except (ValueError, AttributeError):  # another kind of result (a matmul sweep...)
        continue
    if rec["status"] == "complete" and str(rec["resolved"]["device"]).startswith("cuda"):
        gpu_records.append(rec)
print(f"{len(gpu_records)} complete GPU training runs under {results_dir}")


# %%
def pairs(records, source):
    """(source, device, setting, fp32 record, AMP record) for every setting that has both."""
    groups = {}
    for r in records:
        groups.setdefault(setting_of(r), {})[r["config"]["precision"]] = r
    out = []
    for key, by_p in groups.items():
        for amp_p in ("amp-fp16", "amp-bf16"):
            if "fp32" in by_p and amp_p in by_p:
                name, h, w, b = key[:4]
                out.append((source, name, f"{w}x{h}, batch {b}, {amp_p}", by_p["fp32"], by_p[amp_p]))
    return out


rows = [("the RTX 3070 blog post", env["gpu"], "unstated (see above)", fp32_post["time_s"], amp_post["time_s"],
         post_speedup, post_memory_ratio, "as the post reports")]
for source, name, set_label, f, a in pairs(local_runs.values(), "this machine") + pairs(gpu_records, "committed run"):
    (mf, kind), (ma, _) = memory_of(f), memory_of(a)
    rows.append((source, name, set_label, epoch_time(f), epoch_time(a), epoch_time(f) / epoch_time(a), ma / mf, kind))
ratio_rows = rows
display(md_table(rows, ["source", "device", "setting", "fp32 s/epoch", "AMP s/epoch", "speedup (fp32/AMP)",
                        "memory AMP/fp32", "memory measure"], [None, None, None, ".3g", ".3g", ".3f", ".2f", None]))
md("No GPU runs are committed under `data/results/` yet: the GPU rows appear once someone runs the `gpu` profile "
   "or `python -m ampbook.train` on a GPU and commits the results file." if not gpu_records else
   f"{len(gpu_records)} committed GPU runs are in the table.")

# %% mystnb={"figure": {"caption": "AMP against fp32 as ratios: speedup (fp32 time over AMP time; above 1 means AMP was faster) and memory (AMP over fp32; below 1 means AMP saved memory), for the post and for every pair of runs this book has.", "name": "fig-ch5-ratios"}}
fig, ax = plt.subplots(figsize=(7.0, 1.2 + 0.6 * len(ratio_rows)))
ys = np.arange(len(ratio_rows))
labels = [r[0] if r[0].startswith("the RTX") else f"{r[0]}: {r[1]}\n{r[2]}" for r in ratio_rows]
ax.barh(ys - 0.2, [r[5] for r in ratio_rows], height=0.38, label="speedup (fp32 / AMP time)", **bar_style(0))
ax.barh(ys + 0.2, [r[6] for r in ratio_rows], height=0.38, label="memory (AMP / fp32)", **bar_style(1))
ax.axvline(1.0, color="black", linewidth=0.8)
ax.set_yticks(ys, labels, fontsize=8)
ax.invert_yaxis()
ax.set_xlabel("ratio")
ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2)
plt.show()

# %%
cpu_local = device.type == "cpu"
if len(local_runs) >= 2 and "fp32" in local_runs:
    other = [p for p in local_runs if p != "fp32"][0]
    sp = epoch_time(local_runs["fp32"]) / epoch_time(local_runs[other])
    mr = memory_of(local_runs[other])[0] / memory_of(local_runs["fp32"])[0]
    hw_low = bool({"amx_bf16", "avx512_bf16", "amx_fp16", "avx512_fp16"} & set(cpu_flags()))
    note = ""
    if cpu_local and not hw_low:
        note = ("This CPU has no AMX and no AVX-512 BF16/FP16: its low-precision arithmetic is emulated, and "
                + ("the slowdown shows. " if sp < 1 else
                   "yet this run was not slower: at this tiny size an epoch is mostly fixed costs (start-up, data, "
                   "the first calls), not arithmetic; the timed steps further down separate the two. "))
    display(md(f"On this machine ({local_runs['fp32']['environment']['device_name']}), {other} ran at {sp:.2f} times "
               f"fp32's speed over an epoch and saved {1 - mr:.0%} of the bytes kept for backward. " + note
               + ("The machine was busy while it ran, so read the times as rough." if load["busy"] else "")))
else:
    display(md("Only one precision was run on this machine; add another to `run_precisions` to compare."))

# %% [markdown]
# ## Why memory went down but time did not
#
# ### A cost model of ERFNet
#
# `ampbook.costmodel.trace_step` runs one training step of the model (forward, loss, backward)
# on *fake* tensors: PyTorch dispatches every operator with its real shapes and dtypes but
# allocates nothing and computes nothing, so the post's full 1024x512 setting costs seconds of
# CPU, not minutes (the time is printed below). For each operator it counts the FLOPs (convolutions exactly, two per multiply-add; a
# rough count per element for the rest) and the bytes moved (every input, weight and output
# at its dtype's size), and attributes it to the innermost layer that launched it, forward and
# backward. Mixed precision is traced under `torch.autocast`, so the dtypes are autocast's own.

# %%
_traces = {}


def traced(batch, height, width, p):
    """The cost-model trace of one training step (kept: the same step is asked for again below)."""
    key = (batch, height, width, p)
    if key not in _traces:
        _traces[key] = trace_step(model, batch, height, width, p)
    return _traces[key]


B, H, W = setting["batch_size"], setting["height"], setting["width"]
t0 = time.perf_counter()
traces = {p: traced(B, H, W, p) for p in ("fp32", precision)}
print(f"traced {', '.join(traces)} at batch {B}, {W}x{H} in {time.perf_counter() - t0:.1f} s")
rows = []
for p, tr in traces.items():
    t = tr.totals()
    rows.append((p, t["forward_flops"] / 1e9, t["backward_flops"] / 1e9, t["forward_bytes"] / 1e9,
                 t["backward_bytes"] / 1e9, int(t["kernels"]), t["flops"] / t["bytes"]))
md_table(rows, ["precision", "forward GFLOP", "backward GFLOP", "forward GB", "backward GB", "kernels",
                "FLOP per byte"], [None, ".0f", ".0f", ".1f", ".1f", None, ".1f"])

# %%
tf, ta = traces["fp32"].totals(), traces[precision].totals()
launch_s = 5e-6  # assumed cost of launching one GPU kernel (a few microseconds)
per_image_gflop = tf["forward_mma_flops"] / B / 1e9
md(f"A step of {B} images costs {tf['flops'] / 1e12:.2f} TFLOP whatever the precision; the backward pass "
   f"{tf['backward_flops'] / tf['forward_flops']:.2f} times the forward's (an input gradient and a weight gradient per "
   f"convolution, none for the image). One {W}x{H} image is {per_image_gflop:.1f} GFLOP of convolution forward. "
   f"{precision} moves {ta['bytes'] / tf['bytes']:.2f} times fp32's bytes (not 0.5) and launches "
   f"{ta['kernels'] / tf['kernels']:.2f} times as many kernels: autocast adds a cast kernel before each convolution "
   f"for the weight and bias, and casts the weight gradients back to fp32. At an assumed {launch_s * 1e6:.0f} µs to "
   f"launch a kernel, the {ta['kernels'] - tf['kernels']:.0f} extra kernels cost {(ta['kernels'] - tf['kernels']) * launch_s * 1e3:.1f} ms "
   "per step whatever the batch: small batches and small images feel them most.")

# %% [markdown]
# ### Where autocast leaves ERFNet in fp32
#
# Autocast runs convolutions in fp16 and lets most other operators follow their inputs. ERFNet's
# residual blocks end in `relu(branch + input)`: when the input is fp32, PyTorch's type
# promotion makes the sum fp32, and the next block starts from fp32 again. The table lists the
# forward operators that still compute in fp32 under autocast, by layer type and operator.

# %%
fp32_ops = {}
amp_fwd_bytes = 0.0
for o in traces[precision].select("forward"):
    amp_fwd_bytes += o.bytes
    if o.dtype == "float32":
        key = (o.scope_type, o.op)
        fp32_ops[key] = fp32_ops.get(key, 0.0) + o.bytes
rows = sorted(((k[0], k[1], v / 1e9, v / amp_fwd_bytes) for k, v in fp32_ops.items()), key=lambda r: -r[2])
display(md_table(rows[:10], ["layer type", "operator", "GB", "share of forward bytes"], [None, None, ".2f", ".0%"]))
fp32_share = sum(fp32_ops.values()) / amp_fwd_bytes
part_share = {}
for part in ("encoder", "decoder"):
    ops = [o for o in traces[precision].select("forward") if o.scope.startswith(part)]
    part_share[part] = sum(o.bytes for o in ops if o.dtype == "float32") / sum(o.bytes for o in ops)
md(f"Under {precision}, {fp32_share:.0%} of the forward pass's bytes still belong to operators computing in fp32: "
   f"{part_share['encoder']:.0%} of the encoder's and {part_share['decoder']:.0%} of the decoder's. The first downsampler "
   "concatenates its fp16 convolution with a max-pool of the fp32 image, so its output is fp32; the encoder's residual sums "
   "keep it so, and every encoder convolution casts its fp32 input to fp16 first. The decoder starts from fp16 "
   "transposed convolutions and stays in fp16.")

# %% [markdown]
# The trace runs on the CPU, so the autocast it sees is the CPU's. For ERFNet's operators
# CUDA's autocast decides the same dtypes: a forward trace on fake *CUDA* tensors (CUDA's autocast
# kernels, no GPU needed) gives every convolution the same dtype and bytes. The CPU trace has a
# few extra casts (before `torch.cat` and the loss) that CUDA folds into the operators:

# %%
cuda_fwd = trace_step(model, B, H, W, precision, backward=False, device_type="cuda").totals()["forward_bytes"]
cpu_fwd = traces[precision].totals()["forward_bytes"]
md(f"Forward bytes under {precision}: {cpu_fwd / 1e9:.2f} GB traced on the CPU, {cuda_fwd / 1e9:.2f} GB with CUDA's "
   f"autocast, {cpu_fwd / cuda_fwd - 1:.1%} more. The model below uses the CPU trace (it has the backward pass); that "
   "overstates AMP's bytes on a GPU by about this much, in the direction that makes AMP look slower.")

# %% [markdown]
# ### The 3070's ceilings and the predicted step
#
# Each operator takes the longer of its compute time (FLOPs over the peak for its dtype) and its
# memory time (bytes over the bandwidth); the step is their sum, plus the Adam update. The
# ceilings come from the device table: fp32 convolutions run on TF32 tensor cores, because
# `torch.backends.cudnn.allow_tf32` is on by default in PyTorch, as it has been since TF32 arrived
# in PyTorch 1.7, the post's version (PyTorch documentation, *CUDA semantics: TensorFloat-32
# (TF32) on Ampere (and later) devices*,
# https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-devices), and on a
# GeForce Ampere card TF32 runs at the fp32 rate; fp16 with fp32 accumulation (what autocast's
# convolutions use) at twice that.

# %%
gpu = devices["rtx3070-desktop"]
rtx = Ceilings.from_device(gpu)  # TF32 on for cuDNN convolutions: PyTorch's default
pred = {p: predict(t, rtx) for p, t in traces.items()}
md_table([(k, v) for k, v in [("fp32 convolutions (TF32 tensor cores)", f"{rtx.mma_tflops['float32']} TFLOP/s"),
                              ("fp16 convolutions, fp32 accumulate", f"{rtx.mma_tflops['float16']} TFLOP/s"),
                              ("everything else (fp32 CUDA cores)", f"{rtx.vector_tflops} TFLOP/s"),
                              ("memory bandwidth", f"{rtx.bandwidth_gbs} GB/s"),
                              ("ridge point, fp32 / fp16", f"{rtx.ridge_point['float32']:.0f} / {rtx.ridge_point['float16']:.0f} FLOP per byte")]],
         [gpu.name, "ceiling"])

# %%
rows = []
for p, pr in pred.items():
    s = pr.summary()
    rows.append((p, s["step_s"] * 1e3, s["compute_only_s"] * 1e3, s["memory_only_s"] * 1e3, s["memory_bound_share"],
                 s["images_per_s"], pr.epoch_s(cityscapes["train_images"])))
md_table(rows, ["precision", "predicted step (ms)", "FLOPs alone (ms)", "bytes alone (ms)", "time in memory-bound ops",
                "images/s", f"epoch of {cityscapes['train_images']} (s)"], [None, ".1f", ".1f", ".1f", ".0%", ".1f", ".1f"])

# %%
model_speedup = pred["fp32"].step_s / pred[precision].step_s
conv_f = sum(t.time_s for t in pred["fp32"].times if t.op.op.startswith("convolution"))
conv_a = sum(t.time_s for t in pred[precision].times if t.op.op.startswith("convolution"))
md(f"The model predicts a {model_speedup:.2f}x speedup from {precision} on the 3070 at the assumed setting: "
   f"a step of {pred['fp32'].step_s * 1e3:.0f} ms in fp32 and {pred[precision].step_s * 1e3:.0f} ms with AMP. "
   f"Convolutions go from {conv_f * 1e3:.0f} to {conv_a * 1e3:.0f} ms ({conv_f / conv_a:.2f}x: the fp16 tensor "
   f"peak is {rtx.mma_tflops['float16'] / rtx.mma_tflops['float32']:.0f}x the fp32 one, and halved bytes help those that are "
   f"memory-bound); everything else is memory-bound, gains only where its bytes shrink, and pays for autocast's casts. "
   f"These are lower bounds: real kernels reach a fraction of each ceiling. Even so, the fp32 bound is "
   f"{pred['fp32'].epoch_s(cityscapes['train_images']):.0f} s per epoch against the post's {fp32_post['time_s']} s, "
   f"and the AMP bound {pred[precision].epoch_s(cityscapes['train_images']):.0f} s against its {amp_post['time_s']} s.")

# %% [markdown]
# Which layers are memory-bound: per layer type, the predicted time in each precision and the
# share of it spent in operators below the ridge point.

# %%
by_type = {p: {r["type"]: r for r in pr.by_type()} for p, pr in pred.items()}
rows = []
for typ, r in by_type["fp32"].items():
    if r["time_s"] < 1e-5:  # the autograd engine's own few bytes: nothing to see
        continue
    a = by_type[precision].get(typ)
    rows.append((typ, r["modules"], r["time_s"] * 1e3, a["time_s"] * 1e3 if a else None,
                 r["time_s"] / a["time_s"] if a and a["time_s"] else None, r["memory_bound_s"] / r["time_s"] if r["time_s"] else 0.0,
                 a["memory_bound_s"] / a["time_s"] if a and a["time_s"] else None))
md_table(rows, ["layer (functional ops go to their block)", "count", "fp32 ms", f"{precision} ms", "speedup",
                "memory-bound (fp32)", f"memory-bound ({precision})"], [None, None, ".1f", ".1f", ".2f", ".0%", ".0%"])

# %% mystnb={"figure": {"caption": "ERFNet's layers on the RTX 3070 roofline at the assumed setting (batch 6, 1024x512): each point is one layer's forward and backward work (FLOPs over bytes on the x axis, FLOPs over predicted time on the y axis). Lines: the fp32 (TF32) and fp16 ceilings; left of a ridge a layer is memory-bound.", "name": "fig-ch5-roofline"}}
fig, ax = plt.subplots()
xs = np.logspace(-1, 3, 200)
for i, (label, peak) in enumerate([("fp32/TF32 ceiling", rtx.mma_tflops["float32"]), ("fp16 ceiling", rtx.mma_tflops["float16"])]):
    ax.plot(xs, [attainable_tflops(x, peak, rtx.bandwidth_gbs) for x in xs], color="black",
            linestyle=series_style(i)["linestyle"], linewidth=1, label=label)
for i, (p, pr) in enumerate(pred.items()):
    rows_p = [r for r in pr.by_scope() if r["flops"] > 0 and r["time_s"] > 0]
    st = series_style(i + 1)
    ax.scatter([r["intensity"] for r in rows_p], [r["flops"] / r["time_s"] / 1e12 for r in rows_p], s=14,
               marker=st["marker"], facecolors="none" if i else st["color"], edgecolors=st["color"], label=p)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("arithmetic intensity (FLOP per byte)")
ax.set_ylabel("TFLOP/s (predicted)")
ax.legend()
plt.show()

# %% [markdown]
# ### The setting the post did not state
#
# The assumed setting is a guess. The model costs a second per setting, so it can be re-run at
# others: the predicted epoch of 2975 images, fp32 and AMP, at each.

# %%
sens_rows = []
for h, w, b in sensitivity:
    pp = {p: predict(traced(b, h, w, p), rtx) for p in ("fp32", precision)}
    sens_rows.append((f"{w}x{h}", b, pp["fp32"].epoch_s(cityscapes["train_images"]),
                      pp[precision].epoch_s(cityscapes["train_images"]), pp["fp32"].step_s / pp[precision].step_s))
display(md_table(sens_rows, ["image (W x H)", "batch", "fp32 epoch (s)", f"{precision} epoch (s)", "predicted speedup"],
                 [None, None, ".1f", ".1f", ".2f"]))
lo, hi = min(r[4] for r in sens_rows), max(r[4] for r in sens_rows)
md(f"At every setting tried the GPU alone would finish an AMP epoch in at most {max(r[3] for r in sens_rows):.0f} s "
   f"(the roofline's bound) and gain {f'{lo:.2f}x' if round(lo, 2) == round(hi, 2) else f'{lo:.2f}-{hi:.2f}x'} from AMP. "
   f"The post's AMP epoch took {amp_post['time_s']} s: something other than the GPU's arithmetic set its pace.")

# %% [markdown]
# ### Memory
#
# What AMP shrinks is mostly what autograd keeps for the backward pass. `ampbook.memory.SavedTensorMeter`
# counts it on real tensors; it grows in proportion to the pixels of a batch, so two small
# measurements on this CPU extrapolate to the post's setting (a straight line through them:
# a part fixed per step, the low-precision weight copies, and a part per pixel).

# %%
from ampbook.memory import SavedTensorMeter

torch.manual_seed(0)
mem_model = ERFNet(num_classes=NUM_CLASSES)
saved = {}
for p, dt in (("fp32", None), (precision, torch.float16 if precision == "amp-fp16" else torch.bfloat16)):
    pts = []
    for h, w in ((check_height, check_width), (2 * check_height, 2 * check_width)):
        x = torch.randn(1, 3, h, w)
        with SavedTensorMeter(model=mem_model) as meter:
            with torch.autocast("cpu", dtype=dt or torch.bfloat16, enabled=dt is not None):
                mem_model(x)
        pts.append((h * w, meter.total_bytes - meter.parameter_bytes))
    slope = (pts[1][1] - pts[0][1]) / (pts[1][0] - pts[0][0])
    saved[p] = pts[0][1] - slope * pts[0][0] + slope * B * H * W
del mem_model
gb = {p: v / 1e9 for p, v in saved.items()}
md(f"Predicted bytes saved for backward at batch {B}, {W}x{H}: {gb['fp32']:.2f} GB in fp32, {gb[precision]:.2f} GB with "
   f"{precision} ({gb[precision] / gb['fp32']:.2f} of fp32), a saving of {gb['fp32'] - gb[precision]:.2f} GB. The post saved "
   f"{fp32_post['memory_gb'] - amp_post['memory_gb']:.1f} GB out of {fp32_post['memory_gb']} GB, a ratio of {post_memory_ratio:.2f}. "
   + ("The predicted fp32 activations alone exceed the post's whole fp32 figure, so the post trained at a smaller batch or "
      "resolution than assumed, or its memory figure is not a peak; the ratio is what compares, and a monitor's figure "
      "adds a fixed part (CUDA context, cuDNN workspace, the caching allocator's slack) that pulls it towards 1."
      if gb["fp32"] > fp32_post["memory_gb"] else
      "A monitor's figure adds a fixed part (CUDA context, cuDNN workspace, the allocator's slack) that pulls the ratio towards 1."))

# %% [markdown]
# ## The input pipeline
#
# Before the GPU can start a step, the DataLoader must read each image's PNG from disk, decode
# it, resize it from 2048x1024 to the training size and turn it into a tensor, and do the same
# for the label. That work runs on the CPU, one image per worker process at a time. The loader
# benchmark (`python -m ampbook.bench loader`) times it on full-size Cityscapes-like PNGs (the
# synthetic set, drawn at Cityscapes' size) for a few worker counts.

# %%
import os

from ampbook.bench_loader import measure_loader

# Real Cityscapes when $CITYSCAPES_DATASET names it, else the synthetic set at Cityscapes' size.
loader_root = os.environ.get("CITYSCAPES_DATASET") or synthetic_root(
    loader_images, 0, height=cityscapes["image_height"], width=cityscapes["image_width"])
lm = measure_loader(loader_root, split="train", height=H, width=W, workers=tuple(loader_workers), batch_size=B,
                    max_images=loader_images, passes=loader_passes)
lm_rate = {int(r["workers"]): float(r["images_per_s"]) for r in lm["results"]}  # workers -> images/s
# Seconds of one core per image, through the whole Dataset: from one worker (a worker process
# runs one thread on one core), else from the main process.
load_s = 1.0 / lm_rate[1] if 1 in lm_rate else 1.0 / lm_rate[0]
display(md_table([("decode + resize only, 1 process", lm["decode_resize_images_per_s"], 1e3 / lm["decode_resize_images_per_s"])]
                 + [(f"DataLoader, {w} worker{'s' if w != 1 else ''}", r, 1e3 / r) for w, r in sorted(lm_rate.items())],
                 ["pipeline", "images/s", "ms per image"], [None, ".1f", ".0f"]))
md(f"{lm['images']} {'synthetic ' if lm['synthetic'] else ''}images of {lm['source_width']}x{lm['source_height']}, "
   f"resized to {lm['width']}x{lm['height']}, batches of {lm['batch_size']}, on {lm['cpu_count']} CPUs: one image costs "
   f"{load_s * 1e3:.0f} ms of one core through the Dataset (label mapping and normalisation included); decoding and "
   f"resizing alone take {1e3 / lm['decode_resize_images_per_s']:.0f} ms in the main process.")

# %% [markdown]
# The model of the loader (`ampbook.costmodel.loader_images_per_s`): an image costs `load_s`
# seconds of one core (measured with one worker); workers run in parallel, one per free core,
# so throughput grows linearly with workers up to the number of free cores and stays flat
# beyond. With no workers the training process loads the images itself. On this machine the
# benchmark's own process sits idle while the workers decode, so all its cores are free:

# %%
here_cores = load["cpus"]
rows = [(w, lm_rate[w], loader_images_per_s(load_s, w, here_cores, reserved_cores=0)) for w in sorted(lm_rate)]
display(md_table([(w, m, p, m / p) for w, m, p in rows], ["workers", "measured images/s", "model", "measured / model"],
                 [None, ".2f", ".2f", ".2f"]))
w_max = max(lm_rate)
fit = lm_rate[w_max] / loader_images_per_s(load_s, w_max, here_cores, reserved_cores=0)
md(f"With {w_max} worker{'s' if w_max != 1 else ''} this machine delivers {fit:.0%} of what linear scaling predicts. "
   + ("The model holds here. " if 0.8 <= fit <= 1.2 else
      (f"Its {here_cores} cores were shared with other work (load average {load['load1']:.1f}), so the workers did not "
       "get a core each; " if load["busy"] else
       "Workers compete for memory bandwidth and caches, and the main process still collates batches; ")
      + "on the post's PC the linear model is a ceiling rather than a forecast. ")
   + "Workers also start slowly: the first pass over the images, which includes starting them, is left out of the rates.")

# %% [markdown]
# For the post's PC the model needs two things the post does not give: its number of cores
# (assumed `host_cores`, one of them kept by the training process to drive the GPU) and its
# speed per core (assumed equal to one core here). The figure puts the loader's throughput for
# 0 to 8 workers beside what the 3070 can consume according to the cost model, and the rate
# the post observed.

# %% mystnb={"figure": {"caption": "Images per second: what the DataLoader delivers with 0-8 workers (measured on this machine where marked, the linear model elsewhere, for a PC with the assumed core count) against what the RTX 3070 can train per the cost model in fp32 and with AMP, and the rate of the post's epochs.", "name": "fig-ch5-pipeline"}}
ws = np.arange(0, 9)
fig, ax = plt.subplots()
ax.plot(ws, [loader_images_per_s(load_s, int(w), host_cores) for w in ws], label=f"loader, model ({host_cores} cores)",
        **series_style(0))
ax.plot(sorted(lm_rate), [lm_rate[w] for w in sorted(lm_rate)], label="loader, measured here", linestyle="none",
        marker="s", color=series_style(1)["color"], markersize=8)
for i, (label, rate) in enumerate([("3070 fp32, model", pred["fp32"].images_per_s),
                                   (f"3070 {precision}, model", pred[precision].images_per_s),
                                   ("the post's epochs", post_img_s)]):
    ax.axhline(rate, color=series_style(i + 2)["color"], linestyle=series_style(i + 2)["linestyle"], label=label)
ax.set_xlabel("DataLoader workers")
ax.set_ylabel("images per second")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# How fast the post's PC decoded an image is the one number the post cannot give us. So turn the
# question round: for each per-image cost, what epoch does the model predict with the script's
# workers, in fp32 and with AMP?

# %% mystnb={"figure": {"caption": "Predicted epoch of 2975 images on the RTX 3070 against the CPU cost of loading one image, with the training script's DataLoader workers: the GPU bounds the epoch on the flat part, the loader on the rising part. The dotted lines mark the post's measured epochs.", "name": "fig-ch5-epoch-vs-decode"}}
nw = setting["workers"]
n_img = cityscapes["train_images"]
post_load_s = nw / post_img_s  # the per-image cost at which nw workers deliver the post's rate
costs = np.linspace(0.002, 1.5 * max(post_load_s, min(load_s, 3 * post_load_s)), 200)
fig, ax = plt.subplots()
for i, p in enumerate(("fp32", precision)):
    ax.plot(costs * 1e3, [n_img / epoch_images_per_s(c, pred[p].step_s / B, nw, host_cores)["images_per_s"] for c in costs],
            label=f"{p}, model", **{**series_style(i), "marker": None})
ax.axhline(fp32_post["time_s"], color="black", linestyle=":", linewidth=1, label="the post's epochs (fp32 and AMP)")
ax.axhline(amp_post["time_s"], color="black", linestyle=":", linewidth=1)
if load_s <= costs[-1]:
    ax.axvline(load_s * 1e3, color=series_style(3)["color"], linestyle="--", linewidth=1, label="measured here")
ax.set_xlabel(f"CPU ms to load one image ({nw} workers)")
ax.set_ylabel(f"epoch of {n_img} images (s)")
ax.set_ylim(0, None)
ax.legend(fontsize=8)
plt.show()

# %%
threshold = {p: nw / pred[p].images_per_s for p in ("fp32", precision)}
speedup_at_post = (epoch_images_per_s(post_load_s, pred[precision].step_s / B, nw, host_cores)["images_per_s"]
                   / epoch_images_per_s(post_load_s, pred["fp32"].step_s / B, nw, host_cores)["images_per_s"])
at = {p: epoch_images_per_s(load_s, pred[p].step_s / B, nw, host_cores) for p in ("fp32", precision)}
md(f"With {nw} workers the loader bounds an AMP epoch as soon as an image costs more than "
   f"{threshold[precision] * 1e3:.0f} ms of CPU, and an fp32 epoch above {threshold['fp32'] * 1e3:.0f} ms; beyond both, "
   f"fp32 and AMP epochs take the same time. The post's {post_img_s:.1f} images/s is what {nw} workers deliver at "
   f"{post_load_s * 1e3:.0f} ms per image, above both thresholds: at that cost the model predicts "
   f"{n_img / epoch_images_per_s(post_load_s, pred['fp32'].step_s / B, nw, host_cores)['images_per_s']:.1f} s in fp32 and "
   f"{n_img / epoch_images_per_s(post_load_s, pred[precision].step_s / B, nw, host_cores)['images_per_s']:.1f} s with AMP, "
   f"an AMP speedup of {speedup_at_post:.2f}, against the post's {fp32_post['time_s']} and {amp_post['time_s']} s. "
   f"This machine needs {load_s * 1e3:.0f} ms per image (synthetic images{', a busy machine' if load['busy'] else ''}), "
   f"{load_s / post_load_s:.1f} times that; at its cost the model predicts {n_img / at['fp32']['images_per_s']:.0f} s in fp32 "
   f"(bound: {at['fp32']['bound']}) and {n_img / at[precision]['images_per_s']:.0f} s with AMP (bound: {at[precision]['bound']}). "
   f"Keeping the 3070 busy with AMP would take {pred[precision].images_per_s * post_load_s:.1f} cores at the post-implied "
   f"cost, {pred[precision].images_per_s * load_s:.1f} at this machine's.")

# %% [markdown]
# ## Where this machine's epochs go
#
# The runner records, per epoch, the time spent waiting for the DataLoader, the time inside the
# training step (synchronised on a GPU), validation, and the rest of the loop. Here are this
# chapter's runs.

# %%
rows = []
for p, rec in local_runs.items():
    for e in rec["epochs"]:
        rest = max(e["epoch_s"] - e["data_wait_s"] - e["step_s"] - e["val_s"], 0.0)
        rows.append((p, e["epoch"], e["data_wait_s"], e["step_s"], e["val_s"], rest, e["epoch_s"],
                     e["data_wait_s"] / (e["data_wait_s"] + e["step_s"])))
breakdown = rows
md_table(rows, ["precision", "epoch", "data wait (s)", "step (s)", "validation (s)", "rest (s)", "epoch (s)",
                "data wait / (wait + step)"], [None, None, ".2f", ".2f", ".2f", ".2f", ".2f", ".0%"])

# %% mystnb={"figure": {"caption": "This machine's training epochs split into waiting for the DataLoader, the training step, validation and the rest of the loop (checkpoints, bookkeeping).", "name": "fig-ch5-epochs"}}
fig, ax = plt.subplots(figsize=(7.0, 1.2 + 0.45 * len(breakdown)))
labels = [f"{r[0]}, epoch {r[1]}" for r in breakdown]
left = np.zeros(len(breakdown))
for i, (name, col) in enumerate([("data wait", 2), ("step", 3), ("validation", 4), ("rest", 5)]):
    vals = np.array([r[col] for r in breakdown])
    ax.barh(labels, vals, left=left, label=name, **bar_style(i))
    left += vals
ax.invert_yaxis()
ax.set_xlabel("seconds")
ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=4)
plt.show()

# %%
waits = [r[7] for r in breakdown]
wait_text = f"{min(waits):.0%}" if round(min(waits), 2) == round(max(waits), 2) else f"{min(waits):.0%}-{max(waits):.0%}"
step_per_image = statistics.median(r[3] / max(1, local_runs[r[0]]["epochs"][r[1] - 1]["images"]) for r in breakdown)
md(f"On this machine the time spent waiting for the DataLoader is {wait_text} of waiting plus stepping, with "
   f"{run_workers} worker{'s' if run_workers != 1 else ''} and {run_width}x{run_height} images; a step costs "
   f"{step_per_image * 1e3:.0f} ms per image here. "
   + ("The step dominates: the loader keeps up with a step this slow. " if max(waits) < 0.5 else
      "The loader takes most of the loop. ")
   + f"On the 3070 the model's AMP step is {pred[precision].step_s / B * 1e3:.0f} ms per image, and an image costs the "
   f"host's CPU {post_load_s * 1e3:.0f} ms (post-implied) split over {nw} workers, {post_load_s / nw * 1e3:.0f} ms per image: "
   + ("there the loader sets the pace." if post_load_s / nw > pred[precision].step_s / B else "there the step still sets the pace."))

# %% [markdown]
# ## The same model on an H200
#
# Nothing in the trace depends on the GPU, so the same operators can be held against another
# card's ceilings. On an H200 (a data-centre Hopper GPU) TF32 is no longer the fp32 rate: it is
# several times faster, so whether the fp32 baseline may use it changes the answer.

# %%
hdev = devices["h200-sxm"]
h200 = {"fp32, TF32 on": predict(traces["fp32"], Ceilings.from_device(hdev)),
        "fp32, TF32 off": predict(traces["fp32"], Ceilings.from_device(hdev, tf32=False)),
        precision: predict(traces[precision], Ceilings.from_device(hdev))}
base = h200["fp32, TF32 on"].step_s
rows = [(k, v.step_s * 1e3, v.images_per_s, v.memory_bound_share, base / v.step_s) for k, v in h200.items()]
rows.append(("3070: fp32 (TF32 on)", pred["fp32"].step_s * 1e3, pred["fp32"].images_per_s, pred["fp32"].memory_bound_share, None))
rows.append((f"3070: {precision}", pred[precision].step_s * 1e3, pred[precision].images_per_s,
             pred[precision].memory_bound_share, model_speedup))
md_table(rows, ["case", "predicted step (ms)", "images/s", "time in memory-bound ops", "speedup over fp32 (TF32 on)"],
         [None, ".2f", ".0f", ".0%", ".2f"])

# %%
h_speed = base / h200[precision].step_s
h_tf32 = h200["fp32, TF32 off"].step_s / base
md(f"On the H200 the model predicts {h_speed:.2f}x from {precision} over a TF32 baseline, and {h_tf32:.2f}x from TF32 "
   f"alone over strict fp32. The step is {h200[precision].memory_bound_share:.0%} memory-bound with AMP: the H200's "
   f"{hdev.mem_bandwidth_gbs / gpu.mem_bandwidth_gbs:.1f}x bandwidth and {hdev.fp16_tflops_fp32acc / gpu.fp16_tflops_fp32acc:.0f}x "
   f"tensor peak over the 3070 move the balance further towards memory. An H200 would need {h200[precision].images_per_s:.0f} "
   f"images per second to stay busy: {h200[precision].images_per_s * post_load_s:.0f} CPU cores of decoding at the "
   f"post-implied {post_load_s * 1e3:.0f} ms per image, {h200[precision].images_per_s * load_s:.0f} at this machine's.")

# %%
rows = []
gpu_runs = gpu_records + ([r for r in local_runs.values()] if device.type == "cuda" else [])
for rec in gpu_runs:
    name, c = rec["environment"]["device_name"], rec["config"]
    entry = find_device(name)
    if entry is None:  # a GPU the device table does not list: no ceilings to hold it against
        continue
    p_model = predict(traced(c["batch_size"], c["height"], c["width"], c["precision"]),
                      Ceilings.from_device(entry, tf32=c.get("tf32") == "on"))
    e = rec["epochs"][-1]
    measured_step = e["step_s"] / max(e["steps"], 1)
    rows.append((name, f"{c['width']}x{c['height']}, batch {c['batch_size']}", c["precision"], measured_step * 1e3,
                 p_model.step_s * 1e3, p_model.step_s / measured_step))
if rows:
    display(md_table(rows, ["GPU", "setting", "precision", "measured step (ms)", "model's bound (ms)", "bound / measured"],
                     [None, None, None, ".2f", ".2f", ".0%"]))
    display(md("The last column is the fraction of the roofline's speed the real kernels reached."))
else:
    display(md("No GPU runs of a GPU in the device table to hold the model against yet: the `gpu` profile of this "
               "chapter makes them, and committed results under `data/results/` show here."))

# %% [markdown]
# ## And on this CPU
#
# The model assumes what GPUs have: low-precision arithmetic units at least as fast as fp32's,
# so that halving the bytes and the FLOP cost can only help. A CPU without AMX or AVX-512 BF16
# has no such units. Its ceilings can be measured (a matmul for the compute peak, a large
# addition for the bandwidth) and the model run with two bf16 peaks: the one a CPU with bf16
# hardware would have (assumed twice fp32's) and the one this CPU measures.

# %%
from ampbook.bench_step import measure_precisions
from ampbook.timing import time_elementwise, time_matmul

cpu_dev = torch.device("cpu")
mm = {dt: time_matmul(n, dtype=dt, device=cpu_dev, min_time=0.05, max_time=1.0)
      for dt, n in (("fp32", 512), ("bf16", 128), ("fp16", 128))}
ew = time_elementwise(2**22, "fp32", cpu_dev, min_time=0.05, max_time=1.0)
cpu_ceil = {
    "bf16 hardware assumed": Ceilings("this CPU, bf16 units assumed", {"float32": mm["fp32"].tflops,
                                      "bfloat16": 2 * mm["fp32"].tflops, "float16": 2 * mm["fp32"].tflops},
                                      mm["fp32"].tflops, ew.gbps),
    "measured bf16/fp16 matmul": Ceilings("this CPU, measured", {"float32": mm["fp32"].tflops, "bfloat16": mm["bf16"].tflops,
                                          "float16": mm["fp16"].tflops}, mm["fp32"].tflops, ew.gbps),
}
md_table([(dt, r.tflops * 1e3) for dt, r in mm.items()] + [("bandwidth (GB/s), fp32 add", ew.gbps)],
         ["this CPU", "GFLOP/s (matmul)"], [None, ".3g"])

# %%
cpu_precisions = ("fp32", "amp-bf16", "amp-fp16")
measured = measure_precisions(device="cpu", height=check_height, width=check_width, batch_size=check_batch,
                              precisions=cpu_precisions, repeats=check_repeats)
cpu_traces = {p: traced(check_batch, check_height, check_width, p) for p in cpu_precisions}
rows = []
for p in cpu_precisions:
    preds = {k: predict(cpu_traces[p], c, optimizer="adam") for k, c in cpu_ceil.items()}
    base_pred = {k: predict(cpu_traces["fp32"], c) for k, c in cpu_ceil.items()}
    rows.append((p, measured["step_s"][p] * 1e3, preds["bf16 hardware assumed"].step_s * 1e3,
                 base_pred["bf16 hardware assumed"].step_s / preds["bf16 hardware assumed"].step_s,
                 base_pred["measured bf16/fp16 matmul"].step_s / preds["measured bf16/fp16 matmul"].step_s,
                 1 / measured["ratio_to_fp32"][p]))
cpu_rows = rows
md_table(rows, ["precision", "measured step (ms)", "model's bound (ms)", "speedup: model, bf16 units assumed",
                "speedup: model, measured matmul rates", "speedup: measured"], [None, ".1f", ".2f", ".2f", ".3f", ".3f"])

# %%
hw = cpu_rows[1][3]
meas_bf16 = cpu_rows[1][5]
fp32_eff = cpu_rows[0][2] / cpu_rows[0][1]
md(f"With bf16 units assumed, the model predicts {hw:.2f}x from amp-bf16 on this CPU; the measurement gives "
   f"{meas_bf16:.3f}x ({'faster' if meas_bf16 > 1 else 'slower'} than fp32). "
   + ("The model is wrong here, and the reason is its assumption: this CPU has no bf16 arithmetic "
      f"(flags: {', '.join(cpu_flags()) or 'none listed'}), so every low-precision operation converts to fp32 and back "
      "inside slow generic kernels. Fed this CPU's measured bf16 matmul rate instead of the assumed one, the model "
      f"predicts {cpu_rows[1][4]:.3f}x: "
      + ("closer, though still off, since a matmul's rate is not a convolution's. " if abs(math.log(cpu_rows[1][4] / meas_bf16)) < abs(math.log(hw / meas_bf16))
         else "no closer, since a matmul's rate is not a convolution's. ")
      if meas_bf16 < 1 else
      "This CPU has hardware for bf16 and the model's assumption holds. ")
   + f"Even in fp32 the real step takes {1 / fp32_eff:.0f} times the roofline's bound at this tiny size: "
     "small convolutions reach a small fraction of a CPU's matmul peak.")

# %% [markdown]
# ## A checklist for when AMP gives no speedup
#
# If your mixed-precision run is no faster than fp32, go through these, measuring each. The
# second column is what this chapter measured on the machine it ran on (a CPU, unless you ran it
# on a GPU); the third what the cost model says for the post's 3070 setting. "GPU only" marks
# what a CPU cannot show.

# %%
from ampbook.timing import benchmark


def step_fn(batch, channels_last=False, precision="fp32"):
    """The runner's training step on this device, and a random batch for it."""
    cfg = TrainConfig(precision=precision, device=str(device), height=checklist_height, width=checklist_width,
                      batch_size=batch, workers=0, channels_last=channels_last)
    step = build_training(cfg, validate(cfg)).step
    data = (torch.randn(batch, 3, checklist_height, checklist_width, device=device),
            torch.randint(0, NUM_CLASSES, (batch, checklist_height, checklist_width), device=device))
    return step, data


@contextlib.contextmanager
def backend_flags(tf32=True, benchmark_algos=False):
    """cuDNN/cuBLAS flags for one timing (they only matter on a GPU)."""
    old = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = benchmark_algos
    try:
        yield
    finally:
        (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark) = old


# The variants take turns, round after round, and each keeps its fastest step: on a shared
# machine the fastest is the one least disturbed by other work. The baseline is fp32 with
# PyTorch's default flags (TF32 on for cuDNN convolutions, no cudnn.benchmark).
on_gpu = device.type == "cuda"
b_lo, b_hi = min(checklist_batches), max(checklist_batches)
variants = {"baseline": (step_fn(b_lo), {}), "channels_last": (step_fn(b_lo, channels_last=True), {}),
            f"batch {b_hi}": (step_fn(b_hi), {})}
if on_gpu:
    variants["TF32 off"] = (variants["baseline"][0], {"tf32": False})
    variants["cudnn.benchmark"] = (variants["baseline"][0], {"benchmark_algos": True})
best = {k: math.inf for k in variants}
for r in range(check_repeats + 1):  # round 0 warms up (and lets cudnn.benchmark pick its algorithms)
    for k, ((step, data), flags) in variants.items():
        with backend_flags(**flags):
            t = benchmark(step, lambda data=data: data, warmup=0, repeats=1, min_time=0, number=1, buffers=1,
                          device=device).median_s
        if r > 0:
            best[k] = min(best[k], t)
cl = {False: best["baseline"], True: best["channels_last"]}
per_image = {b_lo: best["baseline"] / b_lo, b_hi: best[f"batch {b_hi}"] / b_hi}
print(", ".join(f"{k}: {t * 1e3:.1f} ms per step" for k, t in best.items()))

# %%
h_on, h_off = h200["fp32, TF32 on"].step_s, h200["fp32, TF32 off"].step_s
rtx_off = predict(traces["fp32"], Ceilings.from_device(gpu, tf32=False)).step_s
host_epoch = {w: epoch_images_per_s(post_load_s, pred[precision].step_s / B, w, host_cores) for w in (0, nw, 8)}
sens_batch = {r[1]: r[3] for r in sens_rows if r[0] == f"{W}x{H}"}
checklist = [
    ("DataLoader workers (and faster decoding)",
     f"{lm_rate[max(loader_workers)] / lm_rate[0]:.2f}x images/s with {max(loader_workers)} "
     f"worker{'s' if max(loader_workers) != 1 else ''} over none (the loader alone)",
     f"at the post-implied {post_load_s * 1e3:.0f} ms per image, AMP epoch "
     f"{cityscapes['train_images'] / host_epoch[0]['images_per_s']:.0f} s with 0 workers, "
     f"{cityscapes['train_images'] / host_epoch[setting['workers']]['images_per_s']:.0f} s with {setting['workers']}, "
     f"{cityscapes['train_images'] / host_epoch[8]['images_per_s']:.0f} s with 8 (bound: {host_epoch[8]['bound']})"),
    ("pin_memory=True", "not measured here (it speeds host-to-GPU copies: GPU only)",
     "not modelled (copies are not in the trace)"),
    ("torch.backends.cudnn.benchmark = True",
     f"{best['baseline'] / best['cudnn.benchmark']:.2f}x step speed (fp32)" if on_gpu else
     "GPU only (cuDNN tries its convolution algorithms per shape and keeps the fastest)",
     "not modelled (the roofline assumes the best kernel)"),
    ("channels_last memory format", f"{cl[False] / cl[True]:.2f}x step speed on this device (fp32)",
     "not modelled (same bytes; on GPUs, fp16 tensor-core convolutions prefer it)"),
    ("a larger batch", f"{per_image[b_lo] / per_image[b_hi]:.2f}x images/s at batch {b_hi} over {b_lo} (fp32)",
     ", ".join(f"batch {b}: AMP epoch {t:.0f} s" for b, t in sorted(sens_batch.items())) or "-"),
    ("TF32 on the fp32 baseline", f"{best['TF32 off'] / best['baseline']:.2f}x step speed with TF32 over without"
     if on_gpu else "GPU only",
     f"3070: {rtx_off / pred['fp32'].step_s:.2f}x (TF32 runs at the fp32 rate on GeForce); H200: {h_off / h_on:.2f}x"),
    ("bf16 instead of fp16", f"amp-bf16 step {measured['step_s']['amp-bf16'] / measured['step_s']['amp-fp16']:.2f}x amp-fp16's "
     f"on this device", f"{pred[precision].step_s / predict(traced(B, H, W, 'amp-bf16'), rtx).step_s:.2f}x "
     "(same peak and bytes on the 3070; no loss scaler needed)"),
]
md_table(checklist, ["item", "measured here", "model, the post's 3070 setting"])

# %% [markdown]
# ## The post's claims, checked
#
# Each claim of the post (the digest in the seed folder lists them), with what this book
# computes or measures and what the cost model predicts where it has something to say.

# %%
import inspect

f16, f32 = torch.finfo(torch.float16), torch.finfo(torch.float32)
claims = post["claims"]
laptop = devices["rtx3070-laptop"]
v100 = devices["v100-sxm2"]
params_fp32 = all(p.dtype == torch.float32 for p in model.parameters())
with torch.autocast("cpu", dtype=torch.bfloat16):
    out_dtype = model(torch.randn(1, 3, check_height, check_width)).dtype
init_scale = inspect.signature(torch.amp.GradScaler).parameters["init_scale"].default
closing = [
    ("fp32 max is 1.7e38", f"{f32.max:.3g} (1.7e38 is 2^127 = {2.0 ** 127:.3g})", "-"),
    ("fp16 range 5.96e-8 .. 6.55e4", f"smallest subnormal {f16.smallest_normal * f16.eps:.3g} (2^-24), max {f16.max:.0f}: right", "-"),
    ("rounding error fp16 ~2^-10, fp32 ~2^-23",
     f"machine epsilons {f16.eps:.3g} and {f32.eps:.3g}; unit roundoff is half: {f16.eps / 2:.3g}, {f32.eps / 2:.3g}", "-"),
    ("native AMP keeps an fp16 copy of the weights",
     f"parameters after an autocast forward: {'all fp32' if params_fp32 else 'not all fp32'}; output {str(out_dtype).removeprefix('torch.')}",
     f"the AMP trace casts the weights every step: {ta['kernels'] - tf['kernels']:.0f} more kernels than fp32"),
    ("the paper suggests a loss scale of 8", f"torch.amp.GradScaler starts at {init_scale:.0f} = 2^{math.log2(init_scale):.0f} and adapts", "-"),
    ("64 FMA per clock per tensor core",
     f"V100: {v100.fma_per_clock_per_tensor_core('fp16'):.0f}; 3070: {gpu.fma_per_clock_per_tensor_core('fp16'):.0f} "
     f"(fp16 accumulate), {gpu.fma_per_clock_per_tensor_core('fp32'):.0f} (fp32 accumulate)", "-"),
    (f"{claims['rtx3070_tensor_cores']} tensor cores on the 3070", f"desktop {gpu.tensor_cores}, laptop {laptop.tensor_cores}", "-"),
    ("precision halved, time halved; papers say 2-8x",
     f"3070 peak fp16 (fp32 accumulate) / fp32: {gpu.tensor_over_fp32:.1f}x",
     f"ERFNet step: {model_speedup:.2f}x on the 3070, {h_speed:.2f}x on an H200 ({pred[precision].memory_bound_share:.0%} "
     "of the 3070 AMP step memory-bound)"),
    ("AMP saved about 25% memory", f"this machine's {other if len(local_runs) > 1 else precision}: "
     f"{1 - memory_of(local_runs[other])[0] / memory_of(local_runs['fp32'])[0]:.0%} of the bytes saved for backward"
     if len(local_runs) > 1 else "-", f"{1 - gb[precision] / gb['fp32']:.0%} of the saved activations at the assumed setting"),
    ("up to 50% memory saved (PyTorch 1.6)", "activations are half the bytes only where autocast makes them fp16",
     f"{1 - gb[precision] / gb['fp32']:.0%} for ERFNet (its encoder stays fp32)"),
    ("AMP gave no speedup on the 3070", f"post: {post_speedup:.3f}x; one image costs {load_s * 1e3:.0f} ms of CPU here",
     f"GPU alone: {model_speedup:.2f}x; with {nw} workers the loader bounds AMP above {threshold[precision] * 1e3:.0f} ms "
     f"per image and fp32 above {threshold['fp32'] * 1e3:.0f} ms; the post's rate implies {post_load_s * 1e3:.0f} ms, "
     f"where the predicted speedup is {speedup_at_post:.2f}x"),
]
md_table(closing, ["the post says", "computed or measured here", "the cost model predicts"])

# %% [markdown]
# ## Summary

# %%
md(f"""- The post's AMP run saved memory and no time. Memory went down because autograd keeps 16-bit activations for
  the backward pass; by less than half because autocast leaves part of the network in fp32 (for ERFNet,
  {part_share['encoder']:.0%} of the encoder's forward bytes). The model predicts {1 - gb[precision] / gb['fp32']:.0%} less
  saved memory at the assumed setting; the post measured {1 - post_memory_ratio:.0%}.
- A cost model built from the network's own operators bounds a step on the 3070 from below: {pred['fp32'].step_s * 1e3:.0f} ms
  in fp32 and {pred[precision].step_s * 1e3:.0f} ms with {precision}, a {model_speedup:.2f}x speedup, well short of the
  tensor cores' {gpu.tensor_over_fp32:.0f}x because {pred[precision].memory_bound_share:.0%} of the AMP step is memory-bound.
- An epoch goes as fast as the slower of the GPU step and the DataLoader. With the training script's {nw} workers the
  loader bounds an AMP epoch once an image costs more than {threshold[precision] * 1e3:.0f} ms of CPU, and the post's rate
  implies {post_load_s * 1e3:.0f} ms, where the model's epoch speedup from AMP is {speedup_at_post:.2f}x; the post
  measured {post_speedup:.2f}x.
- The model assumes low-precision hardware. On this CPU amp-bf16 measured {meas_bf16:.2f}x fp32's speed where the model,
  assuming bf16 units, said {hw:.2f}x. On an H200 the model predicts {h_speed:.2f}x from AMP over a TF32 baseline, and
  {h_tf32:.2f}x from TF32 alone over strict fp32.
- When AMP gives no speedup, measure the data wait first; then look at the fp32 baseline's TF32 setting, the batch size,
  channels_last and cudnn.benchmark.""")

# %% [markdown]
# ## Exercises
#
# 1. Re-run the cost model at the setting you train at (`trace_step(model, batch, height, width,
#    precision)`), and find the batch size at which autocast's weight casts stop mattering.
# 2. Change ERFNet's residual sum to `F.relu(y + x.to(y.dtype))` in a copy of the model and trace
#    it under autocast: how many fewer bytes does the forward pass move, and what does the model
#    predict for the 3070 now?
# 3. With your own GPU, run `python -m ampbook.train` in fp32 and amp-fp16 with 0, 2 and 8
#    workers and compare each epoch's `data_wait_s` with the model's prediction.
# 4. Pre-resize the training images to the training size once, on disk, and run the loader
#    benchmark on them: how many workers does the 3070 then need?
# 5. Hold the trace against the A100 of the device table. Is AMP's predicted gain there closer to
#    the 3070's or the H200's, and why?
