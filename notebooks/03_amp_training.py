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
# - what changed between fp32 and AMP in our runs, by how much, and which of those numbers a
#   CPU can say anything about for a GPU.
#
# **What you need**: the `ampbook` package and PyTorch. A CUDA GPU for the real experiment
# (the `gpu` profile: the post's 10 epochs at 1024x512); without one the chapter trains small
# models on the synthetic Cityscapes on the CPU in a few minutes. With the real Cityscapes, set
# `data_root` (or `CITYSCAPES_DATASET`).

# %% tags=["parameters"]
device = "auto"  # "auto", "cpu" or "cuda"
data_root = None  # Cityscapes root; None: $CITYSCAPES_DATASET, else the synthetic set
precisions = ["fp32", "amp-bf16"]  # the runs compared epoch by epoch, at height x width
height = 32  # training resolution (multiples of 8)
width = 64
batch_size = 2
num_epochs = 5
train_images = 32  # size of the synthetic set (ignored with Cityscapes)
val_images = 8
shuffle = False  # the post did not shuffle its data
workers = 0  # DataLoader worker processes
lr = 2e-3  # ERFNet's recipe has 5e-4 (for 150 epochs); a few CPU epochs learn more with 2e-3
tf32 = "off"  # fp32 runs on CUDA: TF32 tensor cores "on" or "off"
fp16_height = 32  # amp-fp16 + GradScaler beside fp32 in separate small runs (None: not run)
fp16_width = 64
fp16_epochs = 2
fp16_train_images = 8
loop_steps = 3  # steps of the minimal AMP loop
out_dir = None  # run JSONs go here; None: build/runs/03_amp_training (not data/results)
seed = 0

# %%
from ampbook.env import print_environment

print_environment(device);

# %%
import math
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import display

from ampbook.env import cpu_flags, pick_device
from ampbook.paths import REPO_ROOT, RESULTS_DIR, load_reference
from ampbook.plots import md, md_table, series_style, use_style
from ampbook.timing import machine_load

use_style()
device = pick_device(device)
gpu = device.type == "cuda"
out_dir = Path(out_dir) if out_dir else REPO_ROOT / "build" / "runs" / "03_amp_training"
post = load_reference("seed_post")
load = machine_load()
print(f"device {device}; runs are written to {out_dir}; load average {load['load1']} on {load['cpus']} CPUs"
      + (" (busy: CPU times below are this busy machine's)" if load["busy"] else ""))

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
#    they are all finite; `scaler.update()` then halves the scale after an overflow and doubles
#    it after 2000 clean steps.
#
# First a few images to train on: the synthetic Cityscapes of `ampbook.data` unless a
# Cityscapes root is given (the runner's own rule, reused here).

# %%
from ampbook.data import Cityscapes, IGNORE_INDEX, NUM_CLASSES
from ampbook.model import ERFNet
from ampbook.train import TrainConfig, command_line, resolve_data, run_training, validate

loop_h, loop_w, loop_n = (fp16_height, fp16_width, fp16_train_images) if fp16_height else (height, width, train_images)
loop_cfg = TrainConfig(device=str(device), data_root=data_root, height=loop_h, width=loop_w,
                       synthetic_train=loop_n, synthetic_val=val_images)
root, synthetic = resolve_data(loop_cfg, validate(loop_cfg))
loader = torch.utils.data.DataLoader(Cityscapes(root, "train", loop_h, loop_w), batch_size=2)
print(f"{'synthetic Cityscapes' if synthetic else 'Cityscapes'} at {root}: {len(loader.dataset)} training images, "
      f"resized to {loop_w}x{loop_h} (W x H)")

# %% [markdown]
# The loop itself, with fp16 autocast and a GradScaler as in the post (on a CPU at a small size,
# because fp16 is slow there; the next sections measure how slow):

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
    print(f"step {step}: loss {loss.item():.4f} ({loss.dtype}), scale after update {scaler.get_scale():g}")

# %% [markdown]
# The printed loss is fp32: autocast runs cross-entropy in fp32. The scale starts at
# $2^{16} = 65536$. A scale that dropped between steps means the scaled gradients overflowed
# fp16 and the scaler skipped that step: it is searching for a scale that fits.
#
# ## The same through the runner
#
# The runner, `ampbook.train`, runs exactly this step (`ampbook.train.TrainStep`) and adds what
# an experiment needs: ERFNet's training recipe (Adam, lr $5 \times 10^{-4}$, weight decay
# $10^{-4}$, poly decay; from the authors' code, E. Romera, github.com/Eromera/erfnet_pytorch),
# validation with pixel accuracy and mIoU, timings that separate the model step from waiting for
# data, memory, checks for non-finite losses, a checkpoint per epoch and a JSON record per run
# (its schema is in `data/results/README.md`). From Python a run is a `TrainConfig`; the same
# run from a shell is the command printed below.

# %%
def config(precision, h, w, epochs, n_train, name):
    return TrainConfig(precision=precision, device=str(device), data_root=data_root, height=h, width=w,
                       batch_size=batch_size, epochs=epochs, synthetic_train=n_train, synthetic_val=val_images,
                       shuffle=shuffle, workers=workers, lr=lr, tf32=tf32, seed=seed, out=str(out_dir),
                       name=name, checkpoint=False, progress=False, overwrite=True)


def run_label(precision, h, w, group=""):
    return f"ch3-{group}{precision}-{w}x{h}" + ("-tf32" if tf32 == "on" and precision == "fp32" else "")


recipe_lr = TrainConfig().lr
print(command_line(config(precisions[0], height, width, num_epochs, train_images,
                          run_label(precisions[0], height, width))))
print(f"learning rate {lr:g}" + ("" if lr == recipe_lr else
      f" instead of the recipe's {recipe_lr:g}, so that {num_epochs} short epoch{'s' * (num_epochs > 1)} "
      "show some learning"))

# %% [markdown]
# ## fp32 against AMP
#
# One run per precision, same data, same seed, same order of batches (not shuffled, as in the
# post). Each epoch prints one line: the training loss, val accuracy and mIoU, the wall time of
# the training loop and how much of it was spent waiting for data, and the memory measure of
# the device (on a GPU the peak CUDA allocation; on a CPU the bytes autograd saved for the
# backward pass in one step, counted by `ampbook.memory.SavedTensorMeter`).

# %%
from ampbook.train import ConfigError

runs = {}
for precision in precisions:
    cfg = config(precision, height, width, num_epochs, train_images, run_label(precision, height, width))
    try:
        runs[precision] = run_training(cfg)
    except ConfigError as err:  # e.g. amp-bf16 on a GPU without bf16
        print(f"{precision} skipped: {err}")

# %% [markdown]
# The per-epoch records side by side. The first epoch includes one-off costs (kernel selection,
# memory pool growth, reading the data the first time). Where the chapter needs one time per run,
# it takes the fastest epoch after the first: on a shared machine other work only ever adds time,
# so the fastest epoch is the best estimate of what the run itself costs.

# %%
def time_per_epoch(record):
    """Wall time of the fastest epoch after the first (of the only one, with one epoch)."""
    return min(e["wall_s"] for e in record["epochs"][1:] or record["epochs"])


def memory(record):
    """(bytes, what they are): peak CUDA allocation on a GPU, saved-for-backward bytes on a CPU."""
    s = record["summary"]
    if s["max_cuda_allocated_bytes"] is not None:
        return s["max_cuda_allocated_bytes"], "peak CUDA memory allocated"
    return s["max_saved_tensor_bytes"], "bytes saved for backward in one step"


rows = []
for precision, r in runs.items():
    for e in r["epochs"]:
        rows.append((precision, e["epoch"], e["train_loss"], e["val_pixel_accuracy"], e["val_miou"], e["wall_s"],
                     e["data_wait_s"] / e["wall_s"], e["images_per_s"], e["skipped_steps"], e["loss_scale"]))
display(md_table(rows, ["run", "epoch", "train loss", "val acc", "val mIoU", "time (s)", "waiting for data",
                        "images/s", "skipped steps", "loss scale"],
                 [None, None, ".4f", ".3f", ".3f", ".2f", ".1%", ".2f", None, "g"]))

# %% [markdown]
# ### fp16 and GradScaler on a CPU, at a small size
#
# On a GPU, fp16 autocast is the classic AMP and the list above includes it. A CPU rarely has
# fp16 arithmetic (Intel's AMX-FP16 and AVX512-FP16 are the exceptions), so its fp16 kernels
# convert to and from wider types and are slow (measured below). Where `fp16_height` is set,
# the chapter therefore trains amp-fp16 beside fp32 at a smaller size, so that its loss scale
# and skipped steps can be seen without a long wait.

# %%
small = {}
if fp16_height and "amp-fp16" not in precisions:
    for precision in ("fp32", "amp-fp16"):
        same = precision in runs and (height, width, num_epochs, train_images) == (
            fp16_height, fp16_width, fp16_epochs, fp16_train_images)
        small[precision] = runs[precision] if same else run_training(config(
            precision, fp16_height, fp16_width, fp16_epochs, fp16_train_images,
            run_label(precision, fp16_height, fp16_width, group="small-")))
    rows = [(p, e["epoch"], e["train_loss"], e["val_pixel_accuracy"], e["wall_s"], e["optimizer_steps"],
             e["skipped_steps"], e["loss_scale"]) for p, r in small.items() for e in r["epochs"]]
    display(md_table(rows, ["run", "epoch", "train loss", "val acc", "time (s)", "steps taken", "skipped steps",
                            "loss scale"], [None, None, ".4f", ".3f", ".2f", None, None, "g"]))
else:
    print("amp-fp16 is among the main runs (or fp16_height is None): no separate small runs")

# %% [markdown]
# What one training step costs in each precision on this machine, from the runs above (the
# step time per image in the fastest epoch after the first): this is why the low-precision runs
# on a CPU are kept small.

# %%
def step_s_per_image(record):
    """Step time per image of the fastest epoch after the first."""
    return min(e["step_s"] / e["images"] for e in record["epochs"][1:] or record["epochs"])


cost_rows, cost = [], {}
for label, group in (("main", runs), ("small", small)):
    if "fp32" not in group:
        continue
    base = step_s_per_image(group["fp32"])
    for p, r in group.items():
        if label == "small" and r is runs.get(p):  # the same run as a main one: listed already
            continue
        c = r["config"]
        if p != "fp32":
            cost[p] = step_s_per_image(r) / base
        cost_rows.append((label, p, f"{c['width']}x{c['height']}", step_s_per_image(r) * 1e3,
                          step_s_per_image(r) / base))
display(md_table(cost_rows, ["runs", "precision", "size (W x H)", "step time per image (ms)",
                             "x fp32 of the same runs"], [None, None, None, ".1f", ".2f"]))
flags = cpu_flags()
if not gpu:
    low = [f"{p} {c:.2g} times" for p, c in cost.items()]
    hw = {"amp-bf16": {"amx_bf16", "avx512_bf16"}, "amp-fp16": {"amx_fp16", "avx512_fp16"}}
    missing = [p for p, c in cost.items() if c > 1 and not hw[p] & set(flags)]
    one_epoch = any(len(r["epochs"]) == 1 for g in (runs, small) for r in g.values())
    display(md(f"On this CPU (flags: {', '.join(flags) or 'none reported'}) a training step took "
               f"{' and '.join(low)} the time of fp32 at the same size. "
               + (f"It has no hardware for {' or '.join(m.removeprefix('amp-') for m in missing)} arithmetic, so "
                  "its low-precision kernels convert to and from wider types instead of computing natively. "
                  if missing else "")
               + ("With a single epoch per run these times include one-off start-up costs (kernel selection, "
                  "first allocations) and say little. " if one_epoch else "")
               + "CPU times say nothing about a GPU, whose tensor cores are fastest in 16-bit types."))

# %% [markdown]
# ## The post's figures, rebuilt
#
# The post plotted the training loss and the val accuracy of its two runs over 10 epochs. The
# same plot from our runs:

# %% mystnb={"figure": {"caption": "Training loss (left) and val pixel accuracy (right) per epoch for each precision: the same data, seed and batch order (not shuffled), as in the post's comparison.", "name": "fig-ch3-curves"}}
fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(8.0, 3.4))
for i, (precision, r) in enumerate(runs.items()):
    epochs = [e["epoch"] for e in r["epochs"]]
    ax_loss.plot(epochs, [e["train_loss"] for e in r["epochs"]], label=precision, **series_style(i))
    ax_acc.plot(epochs, [e["val_pixel_accuracy"] for e in r["epochs"]], label=precision, **series_style(i))
ax_loss.set(xlabel="epoch", ylabel="train loss")
ax_acc.set(xlabel="epoch", ylabel="val pixel accuracy")
for ax in (ax_loss, ax_acc):
    ax.set_xticks(epochs)
ax_acc.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# And the post's table (time and memory of AMP and of fp32) with our numbers beside it. The
# post did not say what its time and memory cover; the book reads them as seconds per epoch and
# GPU memory. Our memory measure is the device's: it is comparable with the post's on a GPU only,
# and as a ratio (AMP over fp32) everywhere.

# %%
post_runs = post["experiment"]["runs"]
amp_post, fp32_post = post_runs["amp"], post_runs["no_amp"]
amp_p = next((p for p in ("amp-fp16", "amp-bf16") if p in runs), None)
where = f"this {'GPU' if gpu else 'CPU'}"
gpu_name = post["environment"]["gpu"]
rows = [(f"amp (the post, {gpu_name})", amp_post["time_s"], f"{amp_post['memory_gb']} GB", "GPU memory"),
        ("no_amp (the post)", fp32_post["time_s"], f"{fp32_post['memory_gb']} GB", "GPU memory"),
        ("amp / no_amp (the post)", amp_post["time_s"] / fp32_post["time_s"],
         f"{amp_post['memory_gb'] / fp32_post['memory_gb']:.2f}", "ratio")]
for p, r in runs.items():
    b, kind = memory(r)
    rows.append((f"{p} ({where})", time_per_epoch(r), f"{b / 2**20:.1f} MiB", kind))
if amp_p and "fp32" in runs:
    rows.append((f"{amp_p} / fp32 ({where})", time_per_epoch(runs[amp_p]) / time_per_epoch(runs["fp32"]),
                 f"{memory(runs[amp_p])[0] / memory(runs['fp32'])[0]:.2f}", "ratio"))
display(md_table(rows, ["metrics", "time (s per epoch)", "memory", "memory measure"], [None, ".4g", None, None]))
md("Our times are the fastest epoch after the first; the post's are its averages.")

# %% [markdown]
# ## GPU runs committed with the book
#
# A CPU cannot show what AMP does to a GPU's speed. Results of the `gpu` profile or of
# `python -m ampbook.train` on a GPU, when someone committed them under `data/results/`, are
# read here.

# %%
from ampbook.train import load_results

gpu_runs = []
for path in sorted(RESULTS_DIR.glob("*.json")):
    try:
        rec = load_results(path)
    except (ValueError, KeyError):
        continue
    if rec["status"] == "complete" and rec["resolved"]["device"].startswith("cuda"):
        gpu_runs.append(rec)
if gpu_runs:
    rows = []
    for rec in gpu_runs:
        c, s = rec["config"], rec["summary"]
        rows.append((rec["environment"]["device_name"], c["precision"], c["tf32"], c["channels_last"],
                     f"{c['width']}x{c['height']}", c["batch_size"], s["epochs_completed"], time_per_epoch(rec),
                     s["mean_images_per_s"], (s["max_cuda_allocated_bytes"] or 0) / 2**30,
                     s["final_train_loss"], s["final_val_pixel_accuracy"]))
    display(md_table(rows, ["GPU", "precision", "TF32", "channels_last", "size", "batch", "epochs", "fastest s per epoch",
                            "images/s", "peak GiB", "final loss", "final val acc"],
                     [None, None, None, None, None, None, None, ".3g", ".1f", ".2f", ".4f", ".3f"]))
else:
    display(md("No GPU training runs are committed under `data/results/` yet, so this section has nothing "
               "to show. Run this chapter with the `gpu` profile (or `python -m ampbook.train` on a GPU with "
               "`--out data/results --no-checkpoint`) and commit the JSON files to fill it."))

# %% [markdown]
# ## Reading the numbers
#
# What changed between fp32 and AMP in our runs, computed from the records above.

# %%
def rel(a, b):
    return a / b - 1.0


sentences = []
if amp_p and "fp32" in runs:
    f, a = runs["fp32"], runs[amp_p]
    mf, kind = memory(f)
    ma, _ = memory(a)
    post_saving = 1 - amp_post["memory_gb"] / fp32_post["memory_gb"]
    sentences.append(
        f"**Memory.** {amp_p} changed the {kind} from {mf / 2**20:.1f} MiB to {ma / 2**20:.1f} MiB, "
        f"{'a saving' if ma < mf else 'an increase'} of {abs(rel(ma, mf)):.0%}; the post saw {post_saving:.0%} "
        f"less GPU memory ({fp32_post['memory_gb']} GB to {amp_post['memory_gb']} GB).")
    if not gpu:
        by = a["epochs"][0]["saved_tensor_by_dtype"]
        low_bytes = sum(v for k, v in by.items() if k in ("float16", "bfloat16"))
        sentences.append(
            f"Not all of it halves: of the {sum(by.values()) / 2**20:.1f} MiB {amp_p} saved for backward, "
            f"{low_bytes / sum(by.values()):.0%} is in 16-bit types and the rest in wider ones "
            f"({', '.join(f'{k} {v / 2**20:.2f} MiB' for k, v in sorted(by.items()))}). Chapter 4 shows which "
            "layers keep what.")
    tf, ta = time_per_epoch(f), time_per_epoch(a)
    loads = [e["load_average"] for r in runs.values() for e in r["epochs"] if e["load_average"] is not None]
    sentences.append(
        f"**Time.** The fastest epoch took {tf:.3g} s in fp32 and {ta:.3g} s in {amp_p}: {amp_p} took {ta / tf:.2f} times "
        f"the time of fp32 ({'faster' if ta < tf else 'slower'}); the post's AMP run took "
        f"{amp_post['time_s'] / fp32_post['time_s']:.3f} times the time of its fp32 run."
        + (f" These CPU times come from a busy machine (load average up to {max(loads):.1f} on {load['cpus']} "
           "CPUs during the runs): other work shared the cores, so they are only rough."
           if not gpu and loads and max(loads) > 1.5 * load["cpus"] else ""))
    wait = {p: sum(e["data_wait_s"] for e in r["epochs"]) / sum(e["wall_s"] for e in r["epochs"]) for p, r in runs.items()}
    sentences.append(
        "Waiting for data took " + " and ".join(f"{w:.1%} ({p})" for p, w in wait.items())
        + " of the training loop. When that share is large, the model step is not what bounds the epoch and "
        "a faster step cannot show; chapter 5 follows this up for the post's GPU.")
    lf, la = f["summary"]["final_train_loss"], a["summary"]["final_train_loss"]
    af, aa = f["summary"]["final_val_pixel_accuracy"], a["summary"]["final_val_pixel_accuracy"]
    gap = max(abs(ef["train_loss"] - ea["train_loss"]) for ef, ea in zip(f["epochs"], a["epochs"]))
    sentences.append(
        f"**Accuracy.** After {len(f['epochs'])} epoch{'s' if len(f['epochs']) > 1 else ''} the training loss was {lf:.4f} in fp32 and {la:.4f} in "
        f"{amp_p} (largest gap in any epoch: {gap:.4f}), and the val pixel accuracy {af:.3f} against {aa:.3f} "
        f"({(aa - af) * 100:+.1f} points). The two runs start from the same weights and see the same batches; "
        "the differences come from rounding alone.")
    fp16_run = (small or runs).get("amp-fp16")
    if fp16_run:
        steps = sum(e["optimizer_steps"] + e["skipped_steps"] for e in fp16_run["epochs"])
        sentences.append(
            f"**Loss scaling.** The fp16 run skipped {fp16_run['summary']['total_skipped_steps']} of its {steps} "
            f"optimizer steps and ended with a scale of {fp16_run['epochs'][-1]['loss_scale']:g} (from 65536): the "
            "skipped steps are GradScaler's search for a scale at which the gradients fit in fp16.")
display(md("\n\n".join(sentences) if sentences else "Run fp32 and an AMP precision to compare them."))

# %% [markdown]
# What a CPU run can and cannot say about a GPU:
#
# - **It can** show that the recipe trains the same way in each precision (the curves), that
#   GradScaler skips steps while it finds its scale, and how much of what autograd keeps for the
#   backward pass autocast stores in 16 bits. That last figure depends on the network and the
#   dtypes, not on the device, so it predicts the part of a GPU's memory that activations take;
#   the rest (the CUDA context, cuDNN workspaces, the caching allocator's reserve, the weights
#   and optimizer state, which stay fp32) it does not see.
# - **It cannot** say anything about speed. A CPU without bf16/fp16 hardware is slower in low
#   precision, a GPU with tensor cores is faster in it, and by how much depends on whether a
#   layer is limited by arithmetic or by memory traffic, on TF32 (which already speeds up fp32
#   on Ampere and later GPUs), and on whether the data loader keeps up. Those are the questions
#   of chapters 2 and 5.

# %%
record_files = sorted({Path(r["json_path"]).name for g in (runs, small) for r in g.values()})
print(f"run records of this chapter in {out_dir}: {', '.join(record_files)}")

# %% [markdown]
# ## Summary
#
# - AMP in PyTorch is three changes to a training loop: `torch.autocast` around the forward
#   pass and loss, `scaler.scale(loss).backward()`, and `scaler.step`/`scaler.update`.
#   bf16 needs no scaler.
# - `python -m ampbook.train` runs that loop with ERFNet's recipe and records every epoch:
#   time in the step and waiting for data, memory, loss, accuracy, loss scale and skipped steps.
# - The records above show, for this machine, how much of what autograd keeps for the backward
#   pass autocast stores in 16 bits, and how far the AMP curves are from fp32's.
# - Speed is a property of the device: on a CPU without 16-bit hardware low precision is slower,
#   and only a GPU run can answer the post's question about time.
#
# ## Exercises
#
# 1. Run `python -m ampbook.train --precision amp-fp16 --clip-grad 1.0` and find in the runner
#    (`TrainStep`) why gradient clipping needs `scaler.unscale_` first. What would clipping the
#    scaled gradients do?
# 2. Set `shuffle = True` and rerun. Do the fp32 and AMP curves stay as close as before?
# 3. Pass `channels_last=True` (a `TrainConfig` field) in `config` and compare the bytes saved
#    for backward and the epoch time with the runs above.
# 4. With a GPU, run the `gpu` profile with `tf32 = "on"` and then `"off"`: how much of the
#    post's missing AMP speedup does TF32 explain?
# 5. Interrupt a run (`python -m ampbook.train ... --out runs`, Ctrl-C in the second epoch), then
#    add `--resume`. Compare its JSON with that of an uninterrupted run.
