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
# # Training ERFNet with autocast and GradScaler
#
# The RTX 3070 blog post this book grew from trained ERFNet on Cityscapes for 10 epochs twice,
# once in fp32 and once with automatic mixed precision, and reported three things: AMP used
# about a quarter less GPU memory, it was not faster, and the train-loss and val-accuracy curves
# of the two runs looked the same. This chapter repeats that experiment with the book's training
# runner and rebuilds the post's table and curves from our own runs.
#
# **What you will learn**
#
# - the few lines AMP adds to a PyTorch training loop: `torch.autocast` around the forward pass
#   and the loss, and a `GradScaler` around the backward pass and the update;
# - how to run the same experiment with the book's runner, `python -m ampbook.train`, and what
#   it records for every epoch (time in the step and waiting for data, memory, loss, accuracy,
#   the loss scale and skipped steps);
# - what "fp32" meant in the post: its PyTorch ran fp32 convolutions and matmuls in TF32;
# - what changed between fp32 and AMP in our runs, by how much, and which of those numbers a
#   CPU can say anything about for a GPU.
#
# **What you need**: the `ampbook` package and PyTorch. A CUDA GPU for the real experiment
# (the `gpu` profile: the post's 10 epochs at 1024x512); without one the chapter trains on
# the synthetic Cityscapes on the CPU at 256x128 in a few minutes. With the real Cityscapes,
# set `data_root` (or `CITYSCAPES_DATASET`).

# %% tags=["parameters"]
device = "auto"  # "auto", "cpu" or "cuda"
data_root = None  # Cityscapes root; None: $CITYSCAPES_DATASET, else the synthetic set
precisions = ["fp32", "amp-bf16", "amp-fp16"]  # fp32 first, then the AMP precisions
height = 128  # training resolution (multiples of 8: ERFNet downsamples by 8)
width = 256
batch_size = 2
num_epochs = 4
train_images = 24  # size of the synthetic set (ignored with Cityscapes)
val_images = 8
shuffle = False  # the post did not shuffle its data
workers = 0  # DataLoader worker processes
lr = 2e-3  # ERFNet's recipe: 5e-4 for 150 epochs; a few CPU epochs learn more with 2e-3
tf32 = "on"  # fp32 on CUDA: TF32 "on" as in the post's PyTorch 1.7.1, or "off"
strict_fp32 = True  # on CUDA, also train fp32 with TF32 off beside it
run_budget_s = 20.0  # seconds per run; slower precisions train fewer epochs/images
loop_steps = 1  # steps of the minimal AMP loop
results_dir = None  # committed GPU run records; None: data/results
out_dir = None  # run JSONs go here; None: build/runs/03_amp_training
seed = 0

# %%
from ampbook import params
from ampbook.env import print_environment
from ampbook.precision import PRECISIONS

params.device("device", device)
ok = lambda v: list(v[:1]) == ["fp32"] and len(v) > 1  # noqa: E731
params.rule("precisions", precisions, ok, "must start with fp32 and name an AMP one",
            why="runs pair with fp32")
ok = lambda v: set(v) <= set(PRECISIONS)  # noqa: E731
params.rule("precisions", precisions, ok, f"may hold {', '.join(PRECISIONS)}")
for name in ("height", "width"):
    value = params.integer(name, globals()[name], minimum=8)
    params.rule(name, value, value % 8 == 0, "must be a multiple of 8",
                why="ERFNet downsamples by 8")
for name in ("batch_size", "num_epochs", "val_images", "loop_steps"):
    params.integer(name, globals()[name], minimum=1)
params.integer("train_images", train_images, minimum=2 * batch_size)
params.number("lr", lr, above=0)
params.number("run_budget_s", run_budget_s, above=0)
params.choice("tf32", tf32, ["on", "off"])
params.integer("workers", workers, minimum=0)
params.seed("seed", seed)
for name in ("shuffle", "strict_fp32"):
    params.flag(name, globals()[name])
params.folder("data_root", data_root, empty="$CITYSCAPES_DATASET or the synthetic set")
params.folder("results_dir", results_dir, empty="data/results")
params.output("out_dir", out_dir, kind="folder")
print_environment(device)

# %%
import dataclasses
import inspect
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from ampbook import memory, results, verdicts
from ampbook.env import cpu_flags, pick_device
from ampbook.paths import REPO_ROOT, load_reference
from ampbook.plots import glue_all, md, md_table, series_style, use_style

use_style()
device = pick_device(device)
gpu = device.type == "cuda"
out_dir = Path(out_dir or REPO_ROOT / "build" / "runs" / "03_amp_training")
post = load_reference("seed_post")

# %% [markdown]
# ## The minimal AMP loop
#
# The post used `torch.cuda.amp` (PyTorch 1.7); today the same two tools live in `torch.amp`
# and take the device type, so the loop below runs on a GPU and on a CPU. Compared with an fp32
# loop, three things change:
#
# 1. the forward pass and the loss run inside `torch.autocast(device_type, dtype=torch.float16)`,
#    which runs each operation in fp16 or fp32 as PyTorch's per-device op lists say (on a GPU,
#    for example, convolutions in fp16 and the loss's softmax and reductions in fp32; chapter 4
#    traces what runs where);
# 2. `scaler.scale(loss).backward()` multiplies the loss by the current scale before the
#    backward pass, so that small gradients survive in fp16;
# 3. `scaler.step(optimizer)` divides the gradients by the scale and takes the step only when
#    they are all finite; `scaler.update()` then lowers the scale after an overflow and raises
#    it after a run of clean steps (chapter 4 reads its defaults).
#
# First a few images to train on: the synthetic Cityscapes of `ampbook.synthetic` unless a
# Cityscapes root is given (the runner's own rule, reused here).

# %%
from ampbook.data import IGNORE_INDEX, NUM_CLASSES, Cityscapes
from ampbook.model import ERFNet
from ampbook.train import (
    TrainConfig,
    command_line,
    resolve_data,
    run_training,
    validate,
)

base = TrainConfig(device=str(device), data_root=data_root, height=height, width=width,
                   batch_size=batch_size, epochs=num_epochs, lr=lr, seed=seed,
                   synthetic_train=train_images, synthetic_val=val_images,
                   shuffle=shuffle, workers=workers, out=str(out_dir),
                   checkpoint=False, progress=False, overwrite=True)
root, synthetic = resolve_data(base, validate(base))
dataset = Cityscapes(root, "train", height, width)
loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size)
kind = "synthetic Cityscapes" if synthetic else "Cityscapes"
print(f"{kind} at {root}: {len(dataset)} training images, resized to {width}x{height}")

# %% [markdown]
# The loop itself, with fp16 autocast and a GradScaler as in the post (fp16 is slow on most
# CPUs; the runs below measure how slow here):

# %%
torch.manual_seed(seed)
model = ERFNet(NUM_CLASSES).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=1e-4)
criterion = torch.nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
scaler = torch.amp.GradScaler(device.type)

for step, (images, labels) in zip(range(loop_steps), loader):
    images, labels = images.to(device), labels.to(device)
    optimizer.zero_grad()
    with torch.autocast(device.type, dtype=torch.float16):
        loss = criterion(model(images), labels)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print(f"step {step}: loss {loss.item():.4f} ({loss.dtype}), "
          f"scale after update {scaler.get_scale():g}")

# %% [markdown]
# The printed loss is fp32: autocast runs cross-entropy in fp32. The scale starts at
# GradScaler's initial value (2¹⁶). A scale that dropped between steps means the scaled
# gradients overflowed fp16 and the scaler skipped that step: it is searching for a scale
# that fits.
#
# ## The same step in the runner
#
# The runner, `ampbook.train`, runs exactly this step and adds what an experiment needs:
# ERFNet's training recipe (Adam, lr 5e-4, weight decay 1e-4, poly decay; from the authors'
# code, E. Romera, github.com/Eromera/erfnet_pytorch), validation with pixel accuracy and
# mIoU, timings that separate the model step from waiting for data, memory, checks for
# non-finite losses, a checkpoint per epoch and a JSON record per run (its schema is in
# `data/results/README.md`). Its step, `ampbook.train.TrainStep`, from its source:

# %%
from ampbook.train import TrainStep

print(inspect.getsource(TrainStep.__call__))
print(inspect.getsource(TrainStep._optimizer_step))

# %% [markdown]
# From Python a run is a `TrainConfig`; the same run from a shell is the command printed
# below. The learning rate is the chapter's `lr` parameter: ERFNet's recipe uses 5e-4 for
# 150 epochs, and the CPU profile trains a few short epochs at a higher rate so that they
# show some learning.

# %%
print(command_line(dataclasses.replace(base, precision="fp32", tf32=tf32)))

# %% [markdown]
# ## What "fp32" meant in the post: TF32
#
# On Ampere GPUs (the RTX 3070 among them) PyTorch can run fp32 convolutions and matmuls on
# the tensor cores in TF32, a format with fp32's range and 10 mantissa bits (chapter 1). The
# post's PyTorch 1.7.1 had TF32 on by default for both cuDNN convolutions and matmuls
# (`torch.backends.cudnn.allow_tf32` and `torch.backends.cuda.matmul.allow_tf32`, both
# `True`; PyTorch's documentation, "TensorFloat-32 (TF32) on Ampere devices", and its 1.7
# release notes). PyTorch 1.12 turned the matmul default off; convolutions still default to
# TF32. So the post's "no_amp" run was fp32 *with TF32*, and this chapter's comparison "as in
# the post" is the same: its default is `tf32 = "on"`. Strict fp32 (TF32 off) is run beside
# it on a GPU (`strict_fp32`) and labelled "fp32 (strict)". On a CPU TF32 does not exist; the
# fp32 run there is strict fp32.
#
# Whether TF32 makes fp32 faster depends on the card. The published dense peaks (chapter 2's
# table, `data/reference/devices.yml`):

# %% tags=["hide-input"]
from ampbook.devices import load_devices

cards = load_devices()
rows = [(d.name, d.fp32_tflops, d.tf32_tflops, d.tf32_tflops / d.fp32_tflops)
        for d in cards.values() if d.tf32_tflops]
rtx, a100 = cards["rtx3070-desktop"], cards["a100-sxm-80gb"]
glue_all(tf32_3070=rtx.tf32_tflops, fp32_3070=rtx.fp32_tflops,
         tf32_ratio_a100=a100.tf32_tflops / a100.fp32_tflops)
md_table(rows, ["GPU", "fp32 TFLOP/s", "TF32 tensor TFLOP/s", "TF32 / fp32"],
         [None, ".1f", ".1f", ".2f"])

# %% [markdown]
# On the RTX 3070, a GeForce card, TF32 tensor math peaks at {glue:text}`tf32_3070:.1f`
# TFLOP/s, the same as its fp32 cores ({glue:text}`fp32_3070:.1f`): TF32 does not raise the
# fp32 ceiling there, so it cannot explain the post's missing AMP speedup by making fp32
# faster. On the data-centre A100 TF32 peaks at {glue:text}`tf32_ratio_a100:.0f` times fp32,
# and there the choice matters.
#
# ## Sizing the runs to this machine
#
# Each precision trains from the same weights on the same data in the same order. A CPU may
# be many times slower in a 16-bit type than in fp32, so the chapter first times one step of
# each precision at the chapter's size after a warm-up step (`ampbook.runplan.step_seconds`),
# then gives each run at most `run_budget_s` seconds (`ampbook.runplan.plan_runs`): a run
# that would take longer trains fewer epochs, then fewer images, and gets an fp32 twin of
# the same size to be compared with. The plan says which runs were cut and why:

# %%
from ampbook.runplan import plan_runs, step_seconds

step_s = step_seconds(base, precisions)
plans = plan_runs(step_s, len(dataset), num_epochs, val_images, batch_size,
                  run_budget_s)
rows = [(p.precision, step_s[p.precision], p.train_images, p.epochs, p.note or "-")
        for p in plans]
md_table(rows, ["precision", "one step (s)", "images", "epochs", "reduced because"],
         [None, ".3f", None, None, None])

# %% [markdown]
# ## fp32 against AMP
#
# The runs of the plan, and on a GPU strict fp32 beside fp32 with TF32. The runner records
# per epoch the training loss, val accuracy and mIoU, the wall time of the training loop and
# how much of it was spent waiting for data, and the memory measure of the device (on a GPU
# the peak CUDA allocation; on a CPU the book's memory figure, the new bytes autograd saved
# for the backward pass in one step, `ampbook.memory`). It runs quietly here; the table
# below shows its records.

# %%
if gpu and strict_fp32:
    plans.insert(1, dataclasses.replace(plans[0], note="strict fp32 beside TF32"))
records = []
for i, p in enumerate(plans):
    t32 = "off" if not gpu or (strict_fp32 and i == 1) else tf32
    name = f"ch3-{p.precision}{'-tf32' * (t32 == 'on')}-{p.train_images}img-e{p.epochs}"
    cfg = dataclasses.replace(base, precision=p.precision, tf32=t32, epochs=p.epochs,
                              synthetic_train=p.train_images, name=name, quiet=True)
    records.append(run_training(cfg))
runs = [results.summarise_run(r) for r in records]
pairs = results.pair_runs(runs)
main = max(pairs, key=lambda p: p.setting.train_images * p.amp.epochs_completed)

# %% [markdown]
# The per-epoch records side by side. The first epoch includes one-off costs (kernel
# selection, memory pool growth, reading the data the first time).

# %% tags=["hide-input"]
rows = [(r.mode_label, r.setting.train_images, e["epoch"], e["train_loss"],
         e["val_pixel_accuracy"], e["val_miou"], e["wall_s"],
         e["data_wait_s"] / e["wall_s"], e["skipped_steps"], e["loss_scale"])
        for r in runs for e in r.record["epochs"]]
md_table(rows, ["run", "images", "epoch", "train loss", "val acc", "val mIoU",
                "time (s)", "waiting for data", "skipped steps", "loss scale"],
         [None, None, None, ".4f", ".3f", ".3f", ".2f", ".1%", None, "g"])

# %% [markdown]
# ## The post's figures, rebuilt
#
# The post plotted the training loss and the val accuracy of its two runs over 10 epochs. The
# same plot from our runs of the largest size the plan allowed an AMP run (`main`, the pair
# with the most images times epochs; on a GPU the post's comparison, AMP fp16 against fp32
# with TF32), with every other run of that size:

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Training loss (left) and val pixel accuracy (right) per epoch for each precision: the same data, seed and batch order (not shuffled), as in the post's comparison.", "name": "fig-ch3-curves"}}
size = (main.setting, main.amp.epochs_completed)
full = [r for r in runs if (r.setting, r.epochs_completed) == size]
fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(8.0, 3.4))
for i, r in enumerate(full):
    ep = r.record["epochs"]
    x = [e["epoch"] for e in ep]
    style = dict(label=r.mode_label, **series_style(i))
    ax_loss.plot(x, [e["train_loss"] for e in ep], **style)
    ax_acc.plot(x, [e["val_pixel_accuracy"] for e in ep], **style)
ax_loss.set(xlabel="epoch", ylabel="train loss", xticks=x)
ax_acc.set(xlabel="epoch", ylabel="val pixel accuracy", xticks=x)
ax_acc.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## fp32 and AMP, pair by pair
#
# `ampbook.results` pairs each AMP run with the fp32 run of the same device and setting
# (size, batch, images, data) and defines each figure once for every chapter: the epoch time
# is the median training-loop time of the epochs after the first (of the only epoch, when
# there is one), the step time the same median of the time inside the step function, and
# the memory on a CPU the new bytes saved for backward in one step.

# %% tags=["hide-input"]
rows = [(p.label, p.setting.train_images, p.amp.epochs_completed,
         p.amp.step_s / p.baseline.step_s, p.amp.epoch_s / p.baseline.epoch_s,
         p.baseline.memory_bytes / 2**20, p.amp.memory_bytes / 2**20,
         memory.saving(p.baseline.memory_bytes, p.amp.memory_bytes)) for p in pairs]
md_table(rows, ["pair", "images", "epochs", "step time AMP / fp32",
                "epoch time AMP / fp32", "fp32 MiB", "AMP MiB", "memory saved"],
         [None, None, None, ".2f", ".2f", ".2f", ".2f", ".1%"])

# %% [markdown]
# AMP's memory can go either way. Autocast halves the activations its low-precision ops save,
# but saves a 16-bit copy of every weight it casts, which fp32 does not (it saves the weights
# by reference, at no cost): on a small batch the copies outweigh the savings, on a large one
# the halved activations win (chapter 4 finds the crossover). For the pair of the figure
# above, measured:

# %%
measure = "peak CUDA memory allocated" if gpu else memory.NEW_BYTES
md(memory.saving_verdict(main.baseline.memory_bytes, main.amp.memory_bytes,
                         what=main.amp.mode_label, measure=measure))

# %% [markdown]
# Speed on a CPU depends on whether it has instructions for the 16-bit type: without them
# (no AVX-512 BF16/FP16 or AMX), 16-bit convolutions convert to and from wider types and run
# many times slower than fp32; with them, bf16 can beat fp32. Each pair on this machine:

# %%
md("\n\n".join(verdicts.speed_verdict(p, cpu_flags()) for p in pairs))

# %% [markdown]
# And the post's table (time and memory of AMP and of fp32) with that pair beside it.
# The post did not say what its time and memory cover; the book reads them as seconds per
# epoch and GPU memory. Our memory is the device's measure: comparable with the post's on a
# GPU only, and as a ratio (AMP over fp32) everywhere.

# %% tags=["hide-input"]
amp_post, fp32_post = (post["experiment"]["runs"][k] for k in ("amp", "no_amp"))
rows = [(f"{k} (the post)", r["time_s"], r["memory_gb"] * 1e9 / 2**20)
        for k, r in (("amp", amp_post), ("no_amp", fp32_post))]
rows.append(("amp / no_amp (the post)", amp_post["time_s"] / fp32_post["time_s"],
             amp_post["memory_gb"] / fp32_post["memory_gb"]))
rows += [(f"{r.mode_label} (here)", r.epoch_s, r.memory_bytes / 2**20)
         for r in (main.amp, main.baseline)]
rows.append(("AMP / fp32 (here)", main.amp.epoch_s / main.baseline.epoch_s,
             main.amp.memory_bytes / main.baseline.memory_bytes))
md_table(rows, ["metrics", "time (s per epoch)", "memory (MiB; ratio)"],
         [None, ".4g", ".4g"])

# %%
f, a = main.baseline, main.amp
gap = max(abs(x["train_loss"] - y["train_loss"])
          for x, y in zip(f.record["epochs"], a.record["epochs"]))
glue_all(loss_f=f.final_train_loss, loss_a=a.final_train_loss, gap=gap,
         acc_f=f.final_val_pixel_accuracy, acc_a=a.final_val_pixel_accuracy,
         epochs_main=a.epochs_completed, wait_f=f.data_wait_share,
         wait_a=a.data_wait_share)

# %% [markdown]
# **Accuracy.** That pair trained for {glue:text}`epochs_main` epoch(s). Its final training
# loss was {glue:text}`loss_f:.4f` (fp32) and {glue:text}`loss_a:.4f` (AMP), with a largest
# gap in any epoch of {glue:text}`gap:.4f`; val pixel accuracy {glue:text}`acc_f:.3f` and
# {glue:text}`acc_a:.3f`. The two runs start from the same weights and see the same batches;
# the differences come from rounding alone.
#
# **Waiting for data** took {glue:text}`wait_f:.1%` (fp32) and {glue:text}`wait_a:.1%` (AMP)
# of the training loop. When that share is large, the model step is not what bounds the epoch
# and a faster step cannot show; chapter 5 follows this up for the post's GPU.
#
# ## GPU runs
#
# A CPU cannot show what AMP does to a GPU's speed. Runs of the `gpu` profile or of
# `python -m ampbook.train` on a GPU, committed under `results_dir` (by default
# `data/results/`), are read here by `ampbook.results`. Each run:

# %% tags=["hide-input"]
found = results.load_results_dir(results_dir)
print(f"{len(found.gpu_runs())} complete GPU run(s) in {found.directory}")
rows = [(r.device_name, r.mode_label, r.setting.label, r.epochs_completed, r.epoch_s,
         r.images_per_s, r.memory_bytes / 2**30, r.final_train_loss,
         r.final_val_pixel_accuracy) for r in found.gpu_runs()]
md_table(rows, ["GPU", "run", "setting", "epochs", "s per epoch", "images/s",
                "peak GiB", "final loss", "final val acc"],
         [None, None, None, None, ".3g", ".1f", ".2f", ".4f", ".3f"])

# %% [markdown]
# and each pair of one GPU and one setting, AMP against fp32 with TF32 on (the post's
# comparison) and against strict fp32. A speedup above 1 means AMP was faster; the step
# speedup leaves out the time spent waiting for data.

# %% tags=["hide-input"]
rows = [(p.setting.device_name, p.label, p.speedup, p.step_speedup, p.memory_ratio)
        for p in found.pairs()]
md_table(rows, ["GPU", "pair", "epoch speedup", "step speedup", "memory AMP / fp32"],
         [None, None, ".2f", ".2f", ".2f"])

# %% [markdown]
# With no GPU runs in the folder both tables are empty; run this chapter with the `gpu`
# profile (or `python -m ampbook.train` on a GPU with `--out data/results --no-checkpoint`)
# and commit the JSON files to fill them.
#
# ## What a CPU run can and cannot say about a GPU
#
# - **It can** show that the recipe trains the same way in each precision (the curves), that
#   GradScaler skips steps while it finds its scale, and how many new bytes autograd saves for
#   the backward pass in each precision. That last figure depends on the network, the dtypes
#   and the batch size, not on the device, so it predicts the part of a GPU's memory that
#   activations take; the rest (the CUDA context, cuDNN workspaces, the caching allocator's
#   reserve, the weights and optimizer state, which stay fp32) it does not see.
# - **It cannot** say anything about a GPU's speed. A CPU's 16-bit speed depends on its
#   instructions; a GPU's on its tensor cores, on whether a layer is limited by arithmetic or
#   by memory traffic, on the card (on the RTX 3070 TF32 brings fp32 no higher peak; on the
#   A100 it does), and on whether the data loader keeps up. Those are the questions of
#   chapters 2 and 5.

# %%
print(f"run records of this chapter in {out_dir}:")
print("\n".join(sorted(Path(r["json_path"]).name for r in records)))

# %% [markdown]
# ## Summary
#
# - AMP in PyTorch is three changes to a training loop: `torch.autocast` around the forward
#   pass and loss, `scaler.scale(loss).backward()`, and `scaler.step`/`scaler.update`.
#   bf16 needs no scaler.
# - `python -m ampbook.train` runs that loop with ERFNet's recipe and records every epoch:
#   time in the step and waiting for data, memory, loss, accuracy, loss scale and skipped steps.
# - The post's fp32 was TF32 on its Ampere card; on a GeForce card TF32 peaks at the fp32
#   rate, so it does not make fp32 faster there.
# - Memory, measured as the new bytes saved for backward: autocast's 16-bit weight copies
#   cost memory on small batches, its halved activations save it on large ones.
# - Speed is a property of the device: only a GPU run can answer the post's question about
#   time.
#
# ## Exercises
#
# 1. Run `python -m ampbook.train --precision amp-fp16 --clip-grad 1.0` and find in the
#    step above why gradient clipping needs `scaler.unscale_` first. What would clipping the
#    scaled gradients do?
# 2. Set `shuffle = True` and rerun. Do the fp32 and AMP curves stay as close as before?
# 3. Add `channels_last=True` to `base` and compare the new bytes saved for backward and the
#    epoch time with the runs above.
# 4. With a GPU, compare the pairs against fp32 with TF32 on and against strict fp32: how
#    much of the post's missing AMP speedup does TF32 explain on your card?
# 5. Interrupt a run (`python -m ampbook.train ... --out runs`, Ctrl-C in the second epoch),
#    then add `--resume`. Compare its JSON with that of an uninterrupted run.
