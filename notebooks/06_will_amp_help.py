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
# # Will AMP help your model?
#
# The book so far explained why AMP gave ERFNet on an RTX 3070 no speedup. The next
# question is about your own network on your own GPU. PyTorch's AMP recipe
# ([Automatic Mixed Precision](https://pytorch.org/tutorials/recipes/recipes/amp_recipe.html))
# and NVIDIA's guide ([Train With Mixed Precision](https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/index.html))
# answer it with advice and checklists; this chapter answers it with numbers, from the
# network itself. One command, `python -m ampbook.doctor`, puts the book's parts
# behind any `nn.Module`: the autocast trace (which operator runs in which dtype, on
# CUDA's rules even on a CPU), the saved-tensor meter, the per-operator cost model held
# against the device table, and the runner's own timed step. The chapter runs it on three
# networks that are built differently, ERFNet, ResNet-50 and ViT-B/16, and on a model of
# your choice.
#
# **What you will learn**
#
# - how to read a step as FLOPs and bytes, and which of the two ratios bounds AMP's gain:
#   the tensor cores' peak over fp32's, or the bytes autocast halves;
# - which operators autocast leaves in fp32 in each network, and why (an op list, or an
#   fp32 input such as a residual sum);
# - how much memory AMP saves for the backward pass, predicted and measured;
# - how many images per second an input pipeline must deliver to keep each GPU busy;
# - how to run the same diagnosis on your model:
#   `python -m ampbook.doctor --model package.module:callable`.
#
# **What you need**: the cost model and the input-pipeline reasoning of the RTX 3070
# chapter, what autocast runs in which dtype from the loss-scaling chapter, and a minute
# or two of CPU. No GPU: the GPUs come from the device table, and GPU runs committed to
# the book appear beside the predictions.

# %% tags=["parameters"]
device = "auto"  # where the steps are timed: "auto", "cpu" or "cuda"
erfnet_input = [3, 512, 1024]  # ERFNet's input, C, H, W (the book's setting)
erfnet_batch = 6  # and batch
resnet_input = [3, 224, 224]  # ResNet-50's input (an ImageNet image)
resnet_batch = 32  # and batch
vit_batch = 32  # ViT-B/16's batch (its input is fixed at 3 x 224 x 224)
reader_model = ""  # your model: "package.module:callable" or "torchvision:NAME"
reader_input = [3, 224, 224]  # its input, C, H, W
reader_batch = 32  # and batch
gpus = ["rtx3070-desktop", "a100-sxm-80gb", "h100-sxm", "h200-sxm"]  # table keys
timed = ["ERFNet", "ResNet-50", "ViT-B/16", "your model"]  # networks timed here
repeats = 3  # timed steps per precision on this device
results_dir = ""  # folder of committed GPU results (empty: data/results)

# %%
from ampbook import params
from ampbook.devices import load_devices
from ampbook.env import print_environment

params.device("device", device)
for name in ("erfnet_input", "resnet_input", "reader_input"):
    params.shape(name, globals()[name], why="[C, H, W]")
for name in ("erfnet_batch", "resnet_batch", "vit_batch", "reader_batch", "repeats"):
    params.integer(name, globals()[name], minimum=1)
params.rule("gpus", gpus, lambda v: bool(v) and set(v) <= set(load_devices()),
            "must be keys of data/reference/devices.yml")
params.rule("reader_model", reader_model, isinstance(reader_model, str),
            "must be a string ('' for none)")
params.rule("timed", timed, lambda v: set(v) <= {"ERFNet", "ResNet-50", "ViT-B/16",
            "your model"}, "names networks of this chapter")
params.folder("results_dir", results_dir, empty="data/results")
print_environment(device)

# %%
import matplotlib.pyplot as plt
import numpy as np

from ampbook import doctor
from ampbook.plots import bar_style, glue_all, md_table, use_style
from ampbook.results import load_results_dir

use_style()
devices = load_devices()

# %% [markdown]
# ## One command
#
# `python -m ampbook.doctor --model SPEC` takes `erfnet`, `torchvision:NAME` (any
# torchvision model, built without weights: nothing is downloaded) or
# `package.module:callable` (a function returning your `nn.Module`), with `--input
# C,H,W`, `--batch`, `--gpus` (keys of the device table or short names such as `h200`)
# and `--loader-images-per-s` (what your input pipeline delivers). It traces one training
# step on fake tensors, so the full size costs seconds; cross-entropy against random
# targets shaped like the output is the loss unless `--loss mse`. It prints five
# sections, writes them as JSON with `--json` and as Markdown with `--markdown`. Here the
# chapter calls the same function the command calls, once per network:

# %%
specs = {"ERFNet": ("erfnet", erfnet_input, erfnet_batch),
         "ResNet-50": ("torchvision:resnet50", resnet_input, resnet_batch),
         "ViT-B/16": ("torchvision:vit_b_16", [3, 224, 224], vit_batch)}
if reader_model:
    specs["your model"] = (reader_model, reader_input, reader_batch)
reports = {name: doctor.diagnose(doctor.DoctorConfig(
    spec, tuple(shape), batch, device, gpus=gpus, repeats=repeats,
    measure=name in timed, results_dir=results_dir or None))
    for name, (spec, shape, batch) in specs.items()}

# %% [markdown]
# ## What the steps are made of
#
# Per image of one training step (forward, loss and backward), each network's FLOPs, the
# bytes its operators read and write, and their ratio, the arithmetic intensity; then
# the share of the FLOPs that are convolutions and matrix products (the work tensor
# cores do), and under CUDA's fp16 autocast the share of the bytes that are 16-bit and
# how much the step's traffic shrinks (fp32 bytes over AMP bytes).

# %% tags=["hide-input"]
rows = []
for name, r in reports.items():
    t, n = r["totals"]["fp32"], r["batch"]
    rows.append((name, r["parameters"] / 1e6, f"{n} x {'x'.join(map(str, r['input']))}",
                 t["flops"] / n / 1e9, t["bytes"] / n / 1e6, t["flops"] / t["bytes"],
                 t["mma_flops"] / t["flops"], doctor.bytes_ratio(r)))
md_table(rows, ["network", "parameters (M)", "batch x input", "GFLOPs / image",
                "MB moved / image", "FLOPs / byte", "matrix share", "bytes fp32 / AMP"],
         [None, ".1f", None, ".1f", ".0f", ".1f", ".1%", ".2f"])

# %% [markdown]
# In ERFNet, ResNet-50 and ViT-B/16 almost every FLOP is a matrix FLOP, so compute
# alone would promise each the tensor cores' full gain. Whether a GPU can deliver it
# depends on the bytes. A GPU's ridge point, its matrix peak over its bandwidth, is the
# intensity an operator needs to be limited by arithmetic rather than memory; the
# step's intensity above is an average over operators of very different kinds, and the
# next table splits it.
#
# ## Where the time goes
#
# The doctor's prediction of the AMP step on the first GPU of the list, per layer type:
# its share of the step's time and of its bytes, its intensity, and whether most of its
# time is memory-bound.

# %% tags=["hide-input"]
md_table([(name, t["layer_type"], t["time_share"], t["bytes_share"],
           t["flops_per_byte"], t["bound"])
          for name, r in reports.items() for t in r["where"]["types"][:4]],
         ["network", "layer type", "time", "bytes", "FLOPs / byte", "bound"],
         [None, None, ".0%", ".0%", ".3g", None])

# %% [markdown]
# Convolutions and linear layers are where the FLOPs are; the element-wise layers
# (normalisation, activations, the blocks' own sums) do at most a few FLOPs per byte and
# can only be memory-bound. What autocast does to those bytes is the next question.
#
# ## What stays in fp32
#
# Autocast runs convolutions and matrix products in fp16 and leaves other operators in
# the dtype they are given, except those on its fp32 list (losses, softmax, layer norm,
# sums). An fp16 tensor added to an fp32 one gives fp32, so a residual sum whose skip
# path is fp32 stays fp32, and so does everything downstream that only reads it. The
# largest fp32 operators of each step, with the reason:

# %% tags=["hide-input"]
md_table([(name, f"{g['op']} in {g['layer_type']}", g["bytes_share"], g["reason"])
          for name, r in reports.items() for g in r["coverage"]["fp32_ops"][:4]],
         ["network", "op in layer type", "bytes", "why fp32"],
         [None, None, ".1%", None])

# %% tags=["hide-input"]
md_table([(name, ph, v["mma_flops_16bit"], v["bytes_16bit"]) for name, r in
          reports.items() for ph, v in r["coverage"]["phases"].items()],
         ["network", "phase", "matrix FLOPs in fp16", "bytes in fp16"],
         [None, None, ".1%", ".1%"])

# %% [markdown]
# In the three book networks every matrix FLOP runs in fp16; the bytes are another
# matter. Whatever
# share is not fp16 keeps its fp32 cost, and for a memory-bound step that share decides
# the gain.
#
# ## Two ratios bound the gain
#
# A compute-bound operator gains what the tensor cores add: the fp16 matrix peak over
# the fp32 one (TF32 on, PyTorch's default for convolutions). A memory-bound one gains
# what its bytes shrink. The device table gives the first per GPU; the trace gives the
# second per network. The table holds each network's predicted AMP speedup (fp16 over
# fp32 with TF32 on, both at the roofline) beside both ratios.

# %% tags=["hide-input"]
md_table([(name, row["gpu"], row["speedup_tf32"], row["memory_bound_share"],
           doctor.bytes_ratio(r), doctor.peak_ratio(row["gpu"]))
          for name, r in reports.items() for row in r["roofline"]
          if row["precision"] == "amp-fp16"],
         ["network", "GPU", "AMP speedup", "memory-bound", "bytes fp32 / AMP",
          "peak fp16 / TF32"], [None, None, ".2f", ".0%", ".2f", ".2f"])

# %% [markdown]
# One line per network on the last GPU of the list says which ratio its predicted gain
# follows (`doctor.gain_verdict`: the nearer of the two). A step whose time is mostly in
# memory-bound operators gains about what its bytes shrink, however fast the tensor
# cores are; only a step whose time is mostly in compute-bound matrix operators can
# approach the peak ratio.

# %%
for r in reports.values():
    print(doctor.gain_verdict(r, gpus[-1]))

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Predicted AMP (fp16) speedup over fp32 with TF32 on, at the roofline, per network and GPU; the black tick is the network's bytes ratio (fp32 bytes over AMP bytes).", "name": "fig-ch6-speedups"}}
fig, ax = plt.subplots(figsize=(7.0, 3.6))
x, width = np.arange(len(reports)), 0.8 / len(gpus)
for j, gpu in enumerate(gpus):
    vals = [next(row.get("speedup_tf32") or 0 for row in r["roofline"]
                 if row["gpu"] == gpu and row["precision"] == "amp-fp16")
            for r in reports.values()]
    offset = (j - (len(gpus) - 1) / 2) * width
    ax.bar(x + offset, vals, width, label=gpu, **bar_style(j))
ax.scatter(x, [doctor.bytes_ratio(r) for r in reports.values()], marker="_", s=900,
           color="black", zorder=3, label="bytes fp32 / AMP")
ax.axhline(1.0, color="black", linewidth=0.8)
ax.set_xticks(x, list(reports))
ax.set_ylabel("speedup (fp32 time / AMP time)")
ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3, fontsize=8)
plt.show()

# %% [markdown]
# ## Memory saved for the backward pass
#
# The bytes autograd keeps from the forward pass (the book's memory figure,
# `ampbook.memory`), predicted at each network's batch from a line through two small
# real forwards, fp32 against AMP. Autocast halves what it saves in fp16 and adds an
# fp16 copy of every weight it casts, a fixed cost that only pays off at large enough
# batches.

# %% tags=["hide-input"]
md_table([(name, m["fp32_bytes"] / 2**20, m["amp_bytes"] / 2**20, m["amp_over_fp32"],
           m["fixed_amp_bytes"] / 2**20) for name, r in reports.items()
          if "error" not in (m := r["memory"]["predicted"])],
         ["network", "fp32 (MiB)", "AMP (MiB)", "AMP / fp32", "AMP's fixed part (MiB)"],
         [None, ".0f", ".0f", ".2f", ".0f"])

# %% [markdown]
# ## Feeding the GPU
#
# A GPU that runs a step in the predicted time needs the input pipeline to deliver the
# batch as fast. The images per second each network needs on each GPU with AMP (at the
# roofline, so a ceiling on what it can use): a loader slower than that sets the pace of
# the epoch, and AMP's gain shrinks towards zero, as the RTX 3070 chapter showed.
# `--loader-images-per-s` with your loader's rate makes the doctor say which side bounds.

# %% tags=["hide-input"]
need = {(name, x["gpu"]): x["images_per_s_needed"] for name, r in reports.items()
        for x in r["roofline"] if x["precision"] == "amp-fp16"}
md_table([(devices[g].name, *[need[(name, g)] for name in reports]) for g in gpus],
         ["GPU", *[f"{name} (images/s)" for name in reports]],
         [None] + [".4g"] * len(reports))

# %% [markdown]
# ## Measured on this machine
#
# The predictions above are for GPUs. The doctor also times the runner's own training
# step here, per precision: at the full size on a GPU, with channels_last and
# cudnn.benchmark variants; at a small size on a CPU, where fp16 is timed only at tiny
# sizes (on a CPU without fp16 units its convolutions run many times slower than fp32,
# as the AMP training chapter measures) and bf16 stands in. Whether bf16 pays on a CPU
# depends on its kernels: the environment table at the top lists this CPU's bf16 and
# fp16 instruction flags, and the RTX 3070 chapter times its bf16 matmul against fp32.
# The lines below say, per network, whether the fastest AMP step here was faster than
# fp32, slower, or within 5% of it.

# %% tags=["hide-input"]
md_table([(name, x["variant"], x.get("step_s") and x["step_s"] * 1e3, x.get("speedup"),
           x["skipped"] or "") for name, r in reports.items() if r["measured"]
          for x in r["measured"]["rows"]],
         ["network", "variant", "median step (ms)", "speedup", "note"],
         [None, None, ".1f", ".2f", None])

# %%
for name, r in reports.items():
    print(f"{name}: {doctor.measured_verdict(r['measured'])}" if r["measured"]
          else f"{name}: not timed here (the parameter timed leaves it out)")

# %% [markdown]
# ## GPU runs beside the prediction
#
# GPU training runs committed under `data/results/` (read by `ampbook.results`) give
# measured ERFNet step speedups, AMP (fp16) against fp32 with TF32 on. Where the run's
# GPU is in the device table and its setting is ERFNet's here, the doctor's predicted
# range stands beside it: the roofline's ratio, and the ratio at the kernel efficiencies
# measured in committed layer profiles.

# %%
erf = reports["ERFNet"]
ranges = {(x["gpu"], x["precision"]): x for x in erf["verdict"]["ranges"]}
pairs = [q for q in load_results_dir(results_dir or None).pairs()
         if q.amp.mode == "amp-fp16" and q.baseline.mode == "fp32-tf32"]
print(f"{len(pairs)} committed GPU pairs (amp-fp16 against fp32 with TF32 on)")

# %% tags=["hide-input"]
rows = []
for q in pairs:
    s, key = q.setting, doctor.table_key(q.setting.device_name)
    same = [s.batch_size, s.height, s.width] == [erf["batch"], *erf["input"][1:]]
    rng = ranges.get((key, "amp-fp16")) if same else None
    rows.append((s.device_name, s.label, q.step_speedup, rng and rng["low"],
                 rng and rng["high"]))
md_table(rows or [("none committed", "-", None, None, None)],
         ["GPU", "setting", "measured step speedup", "predicted low", "predicted high"],
         [None, None, ".2f", ".2f", ".2f"])

# %%
for gpu, setting, measured, low, high in (r for r in rows if r[3]):
    print(doctor.measured_speedup_verdict(gpu, measured, low, high))

# %% [markdown]
# A measured speedup inside the range is what the model expects; below it, the AMP
# kernels reached a smaller fraction of their roofline than fp32's did; above it, fp32
# ran further from its roofline than the profiles say. With no pair listed, nothing is
# printed: the prediction stands alone until someone commits GPU runs
# (`python -m ampbook.gpucheck` on a GPU).
#
# ## The verdict, and what to try
#
# The doctor's last section turns the roofline into an expected AMP speedup per GPU, a
# range from the bound to the bound at measured kernel efficiencies (ERFNet's, from the
# committed GPU layer profiles: no other network is profiled on a GPU), and ranks what to
# try by predicted gain: AMP itself, TF32 for an fp32 baseline, fusing the element-wise
# operators (`torch.compile`; an upper bound, if they vanished entirely), a faster
# loader (with `--loader-images-per-s`), and on a GPU the measured effect of
# channels_last and cudnn.benchmark.

# %%
for name, r in reports.items():
    print(name + ", " + next(x["line"] for x in r["verdict"]["ranges"]
                             if x["gpu"] == gpus[-1] and x["precision"] == "amp-fp16"))

# %% tags=["hide-input"]
md_table([(name, i + 1, c["item"], c["gain"], c["source"]) for name, r in
          reports.items() for i, c in enumerate(r["verdict"]["checklist"][:3])],
         ["network", "rank", "try", "gain (x)", "from"],
         [None, None, None, ".2f", None])

# %%
glue_all(ch6_nb_erf=doctor.bytes_ratio(reports["ERFNet"]),
         ch6_nb_r50=doctor.bytes_ratio(reports["ResNet-50"]),
         ch6_nb_vit=doctor.bytes_ratio(reports["ViT-B/16"]),
         ch6_peak=doctor.peak_ratio(gpus[-1]))

# %% [markdown]
# ## Summary
#
# - Nearly every FLOP of ERFNet, ResNet-50 and ViT-B/16 is a matrix FLOP, so compute
#   alone would promise each the tensor cores' gain, {glue:text}`ch6_peak:.2f`x on the
#   last GPU of the list (the H200 by default). A step mostly in memory-bound
#   operators gains instead what autocast shrinks its bytes: {glue:text}`ch6_nb_erf:.2f`x for ERFNet,
#   {glue:text}`ch6_nb_r50:.2f`x for ResNet-50, {glue:text}`ch6_nb_vit:.2f`x for
#   ViT-B/16 at the settings above. The lines under "Two ratios bound the gain" say
#   which ratio each network's predicted gain follows.
# - Autocast leaves in fp32 what its lists name (losses, softmax, layer norm) and what
#   takes an fp32 input, such as a residual sum whose skip path is fp32: the "What stays
#   in fp32" table names them per network, with their share of the bytes.
# - The same diagnosis runs on any module:
#   `python -m ampbook.doctor --model package.module:callable --input C,H,W --batch N`,
#   with `--loader-images-per-s` to see whether the loader or the GPU bounds the epoch.
#
# ## Exercises
#
# 1. Run the doctor on `torchvision:mobilenet_v3_large` and `torchvision:convnext_tiny`.
#    Which ratio does each one's predicted gain follow, and which operators keep it
#    from the other?
# 2. Set `reader_model` to a network of yours (or `torchvision:swin_t`) and find the
#    fp32 operator with the largest share of the bytes. Can you make its input fp16?
# 3. ERFNet's residual sums stay fp32 when the skip path is fp32. Write a version whose
#    blocks cast the skip path to the convolution's dtype, run the doctor on it, and
#    compare its bytes ratio with ERFNet's.
# 4. Give `--loader-images-per-s` the rate your own DataLoader reaches (chapter 5's
#    loader benchmark measures it) and find the slowest GPU in the table it can keep
#    busy with each network.
