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
# The RTX 3070 blog post {cite:p}`rtx3070post` trained ERFNet
# {cite:p}`romera2018erfnet` on Cityscapes {cite:p}`cordts2016cityscapes` in fp32 and
# with automatic mixed precision: AMP used about a quarter less memory, was not faster,
# and the two runs' curves looked the same. This chapter repeats it on a GPU and here.
#
# **What you will learn**: AMP's three changes to a loop; what "fp32" meant in the post
# (TF32); how to run `python -m ampbook.train`; what a CPU run says about a GPU.
#
# **What you need**: `ampbook`, PyTorch; a GPU only to repeat the GPU runs.

# %% tags=["parameters", "remove-cell"]
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
loop_height = 32  # the minimal loop's images (small: fp16 is slow on most CPUs)
loop_width = 64
results_dir = None  # committed GPU run records; None: data/results
out_dir = None  # run JSONs go here; None: build/runs/03_amp_training
seed = 0

# %% tags=["remove-input"]
from ampbook.core import params
from ampbook.core.env import print_environment
from ampbook.core.precision import PRECISIONS

params.device("device", device)
ok = lambda v: list(v[:1]) == ["fp32"] and len(v) > 1  # noqa: E731
params.rule("precisions", precisions, ok, "must start with fp32 and name an AMP one",
            why="runs pair with fp32")
ok = lambda v: set(v) <= set(PRECISIONS)  # noqa: E731
params.rule("precisions", precisions, ok, f"may hold {', '.join(PRECISIONS)}")
for name in ("height", "width", "loop_height", "loop_width"):
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

# %% tags=["hide-cell"]
import dataclasses
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from ampbook import results
from ampbook.chapters import ch3
from ampbook.chapters.ch3 import runplan
from ampbook.core.devices import display_name, load_devices, pick_device
from ampbook.core.page import (
    GIB,
    MIB,
    bar_style,
    glue_all,
    md,
    md_table,
    series_style,
    use_style,
)
from ampbook.core.paths import REPO_ROOT, load_reference
from ampbook.core.words import plural
from ampbook.measure import memory
from ampbook.measure.cpu_kernels import probe_conv

use_style()
device = pick_device(device)
gpu = device.type == "cuda"
out_dir = Path(out_dir or REPO_ROOT / "build" / "runs" / "03_amp_training")
post = load_reference("seed_post")
found = results.load_results_dir(results_dir)
gpu_pairs = found.pairs()

# %% tags=["remove-input"]
md(":::{admonition} In short\n" + ch3.gpu_training_answer(gpu_pairs) + "\n:::")

# %% [markdown]
# ## The minimal AMP loop
#
# The post used `torch.cuda.amp` (PyTorch 1.7); today the same two tools live in `torch.amp`
# and take the device type, so the loop below runs on a GPU and on a CPU. Compared with an
# fp32 loop, three things change:
#
# 1. the forward pass and the loss run inside `torch.autocast(device_type, dtype=
#    torch.float16)`, which runs each operation in fp16 or fp32 as PyTorch's per-device op
#    lists say (on a GPU, for example, convolutions in fp16 and the loss's softmax and
#    reductions in fp32; chapter 4 traces what runs where);
# 2. `scaler.scale(loss).backward()` multiplies the loss by the current scale before the
#    backward pass, so that small gradients survive in fp16;
# 3. `scaler.step(optimizer)` divides the gradients by the scale and takes the step only
#    when they are all finite; `scaler.update()` then lowers the scale after an overflow
#    and raises it after a run of clean steps (chapter 4 reads its defaults).
#
# First a few images to train on: the synthetic Cityscapes of `ampbook.segmentation.synthetic` unless a
# Cityscapes root is given (the runner's own rule, reused here), at the loop's own small
# size (`loop_height` x `loop_width`: fp16 is slow on most CPUs, as this chapter measures).

# %%
from ampbook.segmentation.cityscapes import IGNORE_INDEX, NUM_CLASSES, Cityscapes
from ampbook.segmentation.model import ERFNet
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
dataset = Cityscapes(root, "train", loop_height, loop_width)
loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size)
kind = "synthetic Cityscapes" if synthetic else "Cityscapes"
print(f"{kind}: {len(dataset)} training images at {loop_width}x{loop_height}")

# %% [markdown]
# The loop itself, with fp16 autocast and a GradScaler as in the post:

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
    before = scaler.get_scale()
    scaler.update()
    # a scale that fell: the scaled gradients overflowed and step() left the weights
    skipped = " (step skipped)" if scaler.get_scale() < before else ""
    print(f"step {step}: loss {loss.item():.4f} ({loss.dtype}), "
          f"scale after update {scaler.get_scale():g}{skipped}")

# %% [markdown]
# The printed loss is fp32: autocast runs cross-entropy in fp32. The scale starts at
# GradScaler's initial value (2¹⁶). A step printed as skipped is one whose scaled
# gradients overflowed fp16: the scaler left the weights as they were and halved its
# scale; it is searching for a scale that fits.
#
# ## The same step in the runner
#
# The runner, `ampbook.train`, runs exactly these lines in its step
# (`ampbook.train.TrainStep`, in `ampbook/train/step.py`) and adds what an experiment
# needs: gradient accumulation, DistributedDataParallel, clipping after
# `scaler.unscale_`, a count of skipped steps; ERFNet's training recipe (Adam, lr 5e-4,
# weight decay 1e-4, poly decay, from the authors' code {cite:p}`erfnet-code`);
# validation with pixel accuracy and mIoU; timings that separate the model step from
# waiting for data; memory; a JSON record per run (its schema is in
# `data/results/README.md`). From Python a run is a `TrainConfig`; from a shell, the same
# run is the command below. The learning rate is the chapter's `lr`: the recipe's 5e-4
# is for 150 epochs, and the CPU profile trains a few short epochs at a higher rate so
# that they show some learning.

# %%
# TF32 exists on a GPU only: a CPU run is strict fp32 and its command says so
cmd = command_line(dataclasses.replace(base, precision="fp32",
                                       tf32=tf32 if gpu else "off"))
md("```bash\n" + cmd.replace(" --", " \\\n    --") + "\n```")

# %% [markdown]
# ### Clipping needs `scaler.unscale_` first
#
# A loop that clips its gradients under GradScaler takes five lines, in this order:
#
# ```python
# scaler.scale(loss).backward()  # the gradients are the scale times the true ones
# scaler.unscale_(optimizer)  # divides them by the scale in place, looks for inf/NaN
# torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
# scaler.step(optimizer)  # does not divide again; skips the step on inf/NaN
# scaler.update()
# ```
#
# `clip_grad_norm_` computes one 2-norm over all the gradients together and, when it
# exceeds `max_norm`, multiplies every gradient by the same factor so that the norm
# equals `max_norm`. Called on scaled gradients it measures the scale S times the true
# norm, which at S = 2¹⁶ is above `max_norm` on nearly every step; it clips in scaled
# units, and once `scaler.step` divides by S the optimizer receives a gradient of norm
# `max_norm`/S. `unscale_` records that it ran, so `step` does not divide a second time.
# It may run once per optimizer between two `update()` calls (a second call, or one
# after `step`, raises a `RuntimeError`), so with gradient accumulation it comes after
# the window's last backward, as in the runner's step (`TrainStep._optimizer_step`). On
# a step whose gradients overflowed, `unscale_` finds the inf or NaN and `step` skips
# the update, so the clip in between does no harm: it returns inf or NaN for that step
# (a logged norm of inf on a skipped step is expected), and `error_if_nonfinite=True`
# would raise on exactly the steps the scaler is there to skip. With bf16 or fp32 there
# is no scaler and nothing is scaled: clip directly.
#
# The cell runs one step of a tiny linear model (16 inputs, 4 outputs) both ways, from
# the same weights and batch, with SGD and with Adam (lr 0.1), on the CPU in fp32 (the
# scaler's arithmetic is the same on every device: S is a power of two, so dividing by
# it is exact). Each row gives the norm `clip_grad_norm_` measured, the norm of the
# gradient the optimizer then received, and how far the step moved the weights (the
# 2-norm of their change), all measured in this run.

# %%
max_norm = 1.0
gen = torch.Generator().manual_seed(seed)
clip_x, clip_y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
seen, rows = {}, []
for opt_name in ("SGD", "Adam"):
    for unscale_first in (True, False):
        torch.manual_seed(seed)  # the same weights every time
        tiny = torch.nn.Linear(16, 4)
        before = torch.cat([p.detach().flatten() for p in tiny.parameters()])
        tiny_opt = getattr(torch.optim, opt_name)(tiny.parameters(), lr=0.1)
        tiny_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
        loss = torch.nn.functional.mse_loss(tiny(clip_x), clip_y)
        tiny_scaler.scale(loss).backward()
        if unscale_first:
            tiny_scaler.unscale_(tiny_opt)  # the right order: unscale, then clip
        norm = torch.nn.utils.clip_grad_norm_(tiny.parameters(), max_norm).item()
        seen[opt_name, unscale_first] = norm
        if not unscale_first:
            # by hand, to read the gradients the optimizer gets; step would do it
            tiny_scaler.unscale_(tiny_opt)
        handed = torch.cat([p.grad.flatten() for p in tiny.parameters()]).norm().item()
        tiny_scaler.step(tiny_opt)
        tiny_scaler.update()
        after = torch.cat([p.detach().flatten() for p in tiny.parameters()])
        order = "unscale_, then clip" if unscale_first else "clip only"
        rows.append((opt_name, order, f"{norm:.4g}", f"{handed:.4g}",
                     f"{(after - before).norm():.4g}"))
md_table(rows, ["optimizer", "order", "norm measured by the clip",
               "norm the optimizer got", "weights moved"])

# %%
print(f"norm measured on the scaled gradients / on the true ones: "
      f"{seen['SGD', False] / seen['SGD', True]:g} (the scale, {2.0**16:g})")
n_params = sum(p.numel() for p in model.parameters())
per_element = max_norm / 2**16 / n_params**0.5
print(f"arithmetic, not a measurement: a norm of {max_norm:g} / 2**16 spread evenly\n"
      f"over ERFNet's {n_params:,} parameters is {per_element:.2g} per element "
      "(Adam's default eps: 1e-08)")

# %% [markdown]
# Unscaled first, clipping sees the true norm and hands the optimizer a gradient of
# norm `max_norm`. On the scaled gradients it sees S times that norm, and the gradient
# handed over is S times smaller than it should be. What that does depends on the
# optimizer. SGD's step is proportional to the gradient, so it shrinks by S as well:
# almost no step at all. Adam divides each element of the gradient by a running
# estimate of its own size, so on the tiny model its step keeps about its length (the
# two Adam rows), but only while the elements handed over stay well above Adam's eps,
# the constant added to that estimate. The last line printed is arithmetic, not a
# measurement: in a network of ERFNet's size the wrongly clipped gradient is about eps
# per element, where eps and weight decay rather than the gradient set the update.
# Either way, a threshold meant for scaled gradients would have to move with the
# scale, which GradScaler changes as it trains.

# %% [markdown]
# ## What "fp32" meant in the post: TF32
#
# On Ampere GPUs (the RTX 3070 among them) PyTorch can run fp32 convolutions and matmuls
# on the tensor cores in TF32, a format with fp32's range and 10 mantissa bits (chapter
# 1). The post's PyTorch 1.7.1 had TF32 on by default for both cuDNN convolutions and
# matmuls {cite:p}`pytorch-cuda-notes`; PyTorch 1.12 turned the matmul default off, and
# convolutions still default to TF32. Today's switches are
# `torch.backends.cuda.matmul.fp32_precision` and
# `torch.backends.cudnn.conv.fp32_precision`, each `"tf32"` or `"ieee"` (strict fp32)
# {cite:p}`pytorch-cuda-notes`; `ampbook.core.precision.set_tf32` sets both, and on a
# PyTorch before 2.9 falls back to the legacy spelling,
# `torch.backends.cuda.matmul.allow_tf32` and `torch.backends.cudnn.allow_tf32`
# (deprecated since 2.9). So the post's "no_amp" run was fp32 *with TF32*,
# and this chapter's comparison "as in the post" is the same: its default is
# `tf32 = "on"`. Strict fp32 (TF32 off) is run beside it on a GPU (`strict_fp32`) and
# labelled "fp32 (strict)". On a CPU TF32 does not exist; the fp32 run there is strict.
#
# Whether TF32 makes fp32 faster depends on the card. The published dense peaks (chapter
# 2's table, `data/reference/devices.yml`):

# %% tags=["hide-input"]
cards = load_devices()
rows = [(display_name(k), d.fp32_tflops, d.tf32_tflops, d.tf32_tflops / d.fp32_tflops)
        for k, d in cards.items() if d.tf32_tflops]
rtx, a100 = cards["rtx3070-desktop"], cards["a100-sxm-80gb"]
glue_all(tf32_3070=rtx.tf32_tflops, fp32_3070=rtx.fp32_tflops,
         tf32_ratio_a100=a100.tf32_tflops / a100.fp32_tflops)
md_table(rows, ["GPU", "fp32 TFLOP/s", "TF32 tensor TFLOP/s", "TF32 / fp32 (x)"],
         [None, ".1f", ".1f", ".2f"])

# %% [markdown]
# On the RTX 3070, a GeForce card, TF32 tensor math peaks at {glue:text}`tf32_3070:.1f`
# TFLOP/s, the same as its fp32 cores ({glue:text}`fp32_3070:.1f`): on paper TF32 does
# not raise the fp32 ceiling there, so the peaks cannot explain the post's missing AMP
# speedup by a faster fp32. (Peaks are not the kernels' speed: only a run on the card
# measures that.) On the data-centre A100 TF32 peaks at
# {glue:text}`tf32_ratio_a100:.0f` times fp32, and there the choice matters.
#
# (ch3-gpu)=
# ## The post's experiment on a GPU
#
# The experiment itself needs a GPU. Runs of this chapter's `gpu` profile (or of
# `python -m ampbook.train` on a GPU) committed under `data/results/` are read by
# `ampbook.results`, which pairs each AMP run with the fp32 runs of the same GPU and
# setting and defines each figure once for the book: the epoch time is the median
# training-loop time of the epochs after the first, the step time the same median of the
# time inside the step function, and the memory the peak CUDA allocation. The runs
# committed here, and how they ran:

# %% tags=["remove-input"]
gpu_runs = found.gpu_runs()
main_gpu = ch3.headline_pair(gpu_pairs)
same = sorted((r for r in gpu_runs if main_gpu and r.setting == main_gpu.setting),
              key=lambda r: results.MODES.index(r.mode))
md("\n\n".join(sorted({"Provenance: " + r.provenance for r in same}))
   or "No GPU run is committed: the figures below are empty.")

# %% tags=["hide-input"] mystnb={"figure": {"caption": "The post's two plots, rebuilt from the committed GPU runs of one GPU and setting: training loss (left) and val pixel accuracy (right) per epoch, for each precision. Same data, seed and batch order (not shuffled).", "name": "fig-ch3-gpu-curves"}}
fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(8.0, 3.4))
for i, r in enumerate(same):
    ep = r.record["epochs"]
    x = [e["epoch"] for e in ep]
    style = dict(label=r.mode_label, **series_style(i))
    ax_loss.plot(x, [e["train_loss"] for e in ep], **style)
    ax_acc.plot(x, [e["val_pixel_accuracy"] for e in ep], **style)
ax_loss.set(xlabel="epoch", ylabel="train loss")
ax_acc.set(xlabel="epoch", ylabel="val pixel accuracy")
if same:
    ax_acc.legend(fontsize=8)
else:
    ax_loss.text(0.5, 0.5, "no GPU runs committed", ha="center",
                 transform=ax_loss.transAxes)
fig.tight_layout()
plt.show()

# %% [markdown]
# The curves of every precision lie on top of each other, as in the post. The post's
# table had a time and a memory figure per run; the same for the GPU runs, with the
# epoch's time split into the step and the wait for data:

# %% tags=["hide-input"] mystnb={"figure": {"caption": "The post's table as bars, from the same GPU runs: seconds per epoch split into the time inside the training step and the time waiting for the DataLoader (left), and peak CUDA memory allocated (right). A step that gets faster only lengthens the wait when the loader sets the pace.", "name": "fig-ch3-gpu-bars"}}
fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(8.0, 1.4 + 0.45 * max(len(same), 1)))
labels = [r.mode_label for r in same]
ys = np.arange(len(same))
parts = [("step", [r.step_s for r in same]), ("waiting for data",
                                                [r.data_wait_s for r in same]),
         ("rest", [max(r.epoch_s - r.step_s - r.data_wait_s, 0.0) for r in same])]
left = np.zeros(len(same))
for i, (name, vals) in enumerate(parts):
    ax_t.barh(ys, vals, left=left, label=name, **bar_style(i))
    left += np.array(vals)
ax_t.set_yticks(ys, labels)
ax_t.invert_yaxis()
ax_t.set_xlabel("seconds per epoch")
ax_t.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3, fontsize=8)
ax_m.barh(ys, [(r.memory_bytes or 0) / GIB for r in same], **bar_style(1))
ax_m.set_yticks(ys, [""] * len(same))
ax_m.invert_yaxis()
ax_m.set_xlabel("peak memory allocated (GiB)")
fig.tight_layout()
plt.show()

# %% [markdown]
# Each pair of that GPU, read by `ampbook.chapters.ch3.gpu_pair_verdict`: where the loop
# waited for data half its time or more, the epoch ran at the loader's pace and its ratio
# measures the loader (systematically where one run waited longer in every epoch, else
# the loader's noise), and the step's ratio is the one that speaks for AMP (chapter 5
# weighs it against the GPU's ceilings):

# %% tags=["hide-input"]
rows = [(p.label, p.step_speedup, p.speedup, p.memory_ratio)
        for p in gpu_pairs if main_gpu and p.setting == main_gpu.setting]
md_table(rows or [("no GPU pairs committed", None, None, None)],
         ["pair", "step in the loop (x)", "epoch speedup (x)", "memory AMP / fp32"],
         [None, ".2f", ".2f", ".2f"])

# %% tags=["remove-input"]
md("\n\n".join(ch3.gpu_pair_verdict(p) for p in gpu_pairs)
   or "No GPU pairs are committed.")

# %% [markdown]
# On that GPU the post's three findings return: the same curves, a quarter to a third
# less memory, and epochs no shorter. The last one, read with the wait for data beside
# it, is a finding about the loader our runs had, not about AMP. Where AMP gives no
# speedup in your own runs, chapter 7, {doc}`07_making_amp_pay`, takes the step apart and
# changes one thing at a time, measuring each change where a GPU ladder is committed
# and predicting it where none is.
#
# The memory AMP saves is what autograd keeps for the backward pass. This chapter's CPU
# can count those bytes for the GPU's setting without a GPU: the count grows as a
# straight line in the pixels of a batch (`ampbook.measure.memory.fit_line`), so two small
# forward passes per precision give it at any size. Set beside the bytes the GPU runs
# recorded (the runner counts them on every device):

# %%
mem_model = ERFNet(NUM_CLASSES)
sizes = [(16, 32), (32, 64)]
lines = {}
for p in ("fp32", "amp-fp16"):
    dtype = None if p == "fp32" else torch.float16
    points = [(h * w, memory.saved_for_backward(
        mem_model, torch.randn(1, 3, h, w), torch.zeros(1, h, w, dtype=torch.long),
        dtype=dtype)["new_bytes"]) for h, w in sizes]
    lines[p] = memory.fit_line(points)

# %% tags=["hide-input"]
by_mode = {r.mode: r for r in same}
rows = []
for p in ("fp32", "amp-fp16"):
    r = by_mode.get(p) or by_mode.get("fp32-tf32" if p == "fp32" else p)
    if r is None or not r.saved_tensor_bytes:
        continue
    s = r.setting
    here = lines[p](s.batch_size * s.height * s.width)
    rows.append((p, r.saved_tensor_bytes / GIB, here / GIB,
                 here / r.saved_tensor_bytes))
glue_all(**{f"mem_{p.replace('-', '_')}": abs(x - 1) for p, _, _, x in rows})
md_table(rows or [("no GPU runs committed", None, None, None)],
         ["precision", "GPU run (GiB)", "counted on this CPU (GiB)", "CPU / GPU"],
         [None, ".3f", ".3f", ".3f"])

# %% [markdown]
# The fp32 count differs from the GPU's by {glue:text}`mem_fp32:.1%`: these bytes depend
# on the network, the dtypes and the batch, not on the device. The AMP count differs by
# {glue:text}`mem_amp_fp16:.1%`, and the cause is not known. It is not autocast's op
# lists: traced on fake tensors, ERFNet's step keeps the same bytes under CUDA's rules
# and the CPU's, and chapter 4's layer table shows the same dtypes. What the GPU's own
# kernels keep for backward (cuDNN's batch norm, for one) a CPU run cannot see; that is
# a candidate, not a measurement. The rest of a GPU's memory (the CUDA context, cuDNN's workspaces, the
# caching allocator's reserve, weights and optimizer state) a CPU does not see.
#
# ## The same experiment on this machine
#
# On this machine the runner trains the same network at a small size. A CPU may be many
# times slower in a 16-bit type than in fp32, and its flags do not say by how much: the
# instructions it lists are not the kernels PyTorch runs. So the chapter measures first.
# `ampbook.measure.cpu_kernels.probe_conv` times one ERFNet-like convolution (64 channels, 3x1)
# forward, backward-data and backward-weights in each dtype, and reads from oneDNN's
# verbose output which kernel ran each pass (a JIT-compiled one, `jit:` or `brg`, for
# oneDNN's batch-reduce GEMM kernels; oneDNN's reference loop `ref:any`; or ATen's
# generic fallback when oneDNN took none). A name of the form `A + B` is one oneDNN
# implementation, `A`, that runs part of its work through another, `B`. The dtypes take
# turns for several rounds; a pass's time in the table is its fastest round, and each
# ratio to fp32 is the median of the rounds' ratios (so it is not the quotient of two
# times in the table), with their range: the size of such a ratio moves from run to run
# on this machine (the line says when it moved by more than a quarter), and one figure
# would hide that:

# %%
probe = probe_conv() if device.type == "cpu" else None
threads = probe and (f"{probe.threads} threads" if probe.threads > 1 else "1 thread")
load = (f"batch {probe.batch}, {threads} of {probe.cpus} CPUs, "
        f"load average {probe.load1:.1f} read after the probe") if probe else ""
md("\n\n".join([probe.verdict(d) for d in probe.dtypes] + [f"Measured with {load}."])
   if probe else "On a GPU the probe does not apply: each precision is timed directly.")

# %% tags=["hide-input"]
md_table(probe.rows() if probe else [("-", "-", None, None, "GPU")],
         ["dtype", "pass", "fastest round (ms)", "median ratio to fp32 (x)", "kernel"],
         [None, None, ".3g", ".3g", None])

# %% [markdown]
# The plan then sizes each run to the `run_budget_s` seconds it gets
# (`ampbook.chapters.ch3.runplan`). Each precision's step is timed after a warm-up
# step; one whose convolution the probe found more than four times slower than fp32's
# is timed at a quarter of the height and width and scaled up by the pixels, so that
# finding out costs seconds. A run that would take longer than its budget trains fewer epochs, then fewer
# images, then smaller images, and gets an fp32 twin of the same size to be compared
# with. Each precision, its size, and why it was cut:

# %%
slow = runplan.slow_precisions(probe, precisions)
estimates = runplan.estimate_steps(base, precisions, slow)
plans = runplan.plan_runs(estimates, len(dataset), num_epochs, val_images, batch_size,
                          run_budget_s, size=(height, width))
rows = [(p.precision, "{1}x{0}".format(*p.size(height, width)), p.train_images,
         p.epochs, p.note or "-") for p in plans]
md_table(rows, ["precision", "image size", "training images", "epochs",
               "reduced because"])

# %% [markdown]
# The runs of the plan, and on a GPU strict fp32 beside fp32 with TF32. The runner records
# per epoch the training loss, val accuracy and mIoU, the wall time of the training loop
# and how much of it was spent waiting for data, and on a CPU the book's memory figure,
# the {term}`new bytes saved for backward` in one step (`ampbook.measure.memory`). It runs
# quietly here; the tables below show its records.

# %%
if gpu and strict_fp32:
    plans.insert(1, dataclasses.replace(plans[0], note="strict fp32 beside TF32"))
records = []
for i, p in enumerate(plans):
    t32 = "off" if not gpu or (strict_fp32 and i == 1) else tf32
    h, w = p.size(height, width)
    name = (f"ch3-{p.precision}{'-tf32' * (t32 == 'on')}-{w}x{h}-{p.train_images}img"
            f"-e{p.epochs}")
    cfg = dataclasses.replace(base, precision=p.precision, tf32=t32, epochs=p.epochs,
                              height=h, width=w, synthetic_train=p.train_images,
                              name=name, quiet=True)
    records.append(run_training(cfg))
runs = [results.summarise_run(r) for r in records]
pairs = results.pair_runs(runs)
main = max(pairs, key=lambda p: (p.setting.height * p.setting.width
                                 * p.setting.train_images * p.amp.epochs_completed))

# %% [markdown]
# The per-epoch records side by side. The first epoch includes one-off costs (kernel
# selection, memory pool growth, reading the data the first time).

# %% tags=["hide-input"]
rows = [(r.mode_label, f"{r.setting.width}x{r.setting.height}, "
         f"{r.setting.train_images} img", e["epoch"], e["train_loss"],
         e["val_pixel_accuracy"], e["skipped_steps"])
        for r in runs for e in r.record["epochs"]]
md_table(rows, ["run", "setting", "epoch", "train loss", "val acc", "skipped steps"],
         [None, None, None, ".4f", ".3f", None])

# %% [markdown]
# The same plot as the GPU's from this machine's runs of the largest setting the plan
# allowed an AMP run (`main`: the pair with the most pixels times images times epochs),
# with every other run of that setting:

# %% tags=["hide-input"] mystnb={"figure": {"caption": "This machine's runs: training loss (left) and val pixel accuracy (right) per epoch for each precision of one setting, the same data, seed and batch order.", "name": "fig-ch3-curves"}}
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
ax_acc.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# Each pair on this machine: the step time and the memory (new bytes saved for
# backward) of AMP over fp32's.

# %% tags=["hide-input"]
rows = [(p.label, f"{p.setting.width}x{p.setting.height}, {p.setting.train_images} img",
         p.amp.step_s / p.baseline.step_s, p.baseline.memory_bytes / MIB,
         p.amp.memory_bytes / MIB, p.memory_ratio) for p in pairs]
md_table(rows, ["pair", "setting", "step AMP / fp32", "fp32 MiB", "AMP MiB",
                "memory AMP / fp32"], [None, None, ".2f", ".2f", ".2f", ".2f"])

# %% [markdown]
# AMP's memory can go either way. Autocast halves the activations its low-precision ops
# save, but saves a 16-bit copy of every weight it casts, which fp32 does not (it saves
# the weights by reference, at no cost): on a small batch the copies outweigh the
# savings, on a large one the halved activations win (chapter 4 finds the crossover).
# For the pair of the figure above:

# %%
measure = "peak CUDA memory allocated" if gpu else memory.NEW_BYTES
md(ch3.saving_verdict(main.baseline.memory_bytes, main.amp.memory_bytes,
                      what=main.amp.mode_label, measure=measure))

# %% [markdown]
# Speed on a CPU depends on the kernels PyTorch picks for the 16-bit type, which the
# probe above measured: a dtype whose convolutions run in oneDNN's JIT kernels can match
# or beat fp32, one whose passes fall to a reference loop or to ATen's fallback runs many
# times slower. Each pair on this machine, with the probe's finding for its dtype:

# %%
md("\n\n".join(ch3.speed_verdict(p, probe) for p in pairs))

# %% [markdown]
# And the post's table with the GPU runs and this machine's beside it. The post did not
# say what its time and memory cover; the book reads them as seconds per epoch and GPU
# memory as a monitor shows it (in the GB the post gives). Ours are each device's own
# memory measure, so only the ratios compare across columns.

# %% tags=["hide-input"]
amp_post, fp32_post = (post["experiment"]["runs"][k] for k in ("amp", "no_amp"))
cols = [("the post (RTX 3070)", fp32_post["time_s"], amp_post["time_s"],
         f"{fp32_post['memory_gb']} GB", f"{amp_post['memory_gb']} GB",
         amp_post["memory_gb"] / fp32_post["memory_gb"])]
if main_gpu:
    b, a = main_gpu.baseline, main_gpu.amp
    cols.append((f"{display_name(b.device_name)} (ours)", b.epoch_s, a.epoch_s,
                 f"{b.memory_bytes / GIB:.2f} GiB", f"{a.memory_bytes / GIB:.2f} GiB",
                 main_gpu.memory_ratio))
b, a = main.baseline, main.amp
cols.append(("this machine", b.epoch_s, a.epoch_s, f"{b.memory_bytes / MIB:.1f} MiB",
             f"{a.memory_bytes / MIB:.1f} MiB", main.memory_ratio))
rows = [("fp32 epoch (s)", *(f"{c[1]:.4g}" for c in cols)),
        ("AMP epoch (s)", *(f"{c[2]:.4g}" for c in cols)),
        ("speedup, fp32 / AMP (x)", *(f"{c[1] / c[2]:.2f}" for c in cols)),
        ("fp32 memory", *(c[3] for c in cols)),
        ("AMP memory", *(c[4] for c in cols)),
        ("memory, AMP / fp32", *(f"{c[5]:.2f}" for c in cols))]
md_table(rows, ["", *(c[0] for c in cols)])

# %%
f, a = main.baseline, main.amp
gap = max(abs(x["train_loss"] - y["train_loss"])
          for x, y in zip(f.record["epochs"], a.record["epochs"]))
glue_all(loss_f=f.final_train_loss, loss_a=a.final_train_loss, gap=gap,
         acc_f=f.final_val_pixel_accuracy, acc_a=a.final_val_pixel_accuracy,
         epochs_main=plural(a.epochs_completed, "epoch"), wait_f=f.data_wait_share,
         wait_a=a.data_wait_share)
# what the runs' differences come from: rounding, and any steps GradScaler skipped
updated = sum(e["optimizer_steps"] for e in a.record["epochs"])
if a.skipped_steps and not updated:  # the scale search took every step
    differ = (f"but GradScaler skipped all {a.skipped_steps} of the AMP run's steps "
              "while it searched for its scale, so the AMP run's weights never "
              "changed: its losses cannot show how AMP trains (more steps can).")
    curves = (f"(the curves; not this copy's: GradScaler skipped all "
              f"{a.skipped_steps} AMP steps)")
    skips = (f"but GradScaler skipped all {a.skipped_steps} of the AMP run's steps, "
             "so the AMP run never trained")
else:
    differ = ("the differences come from rounding alone." if a.skipped_steps == 0 else
              "the differences come from rounding and from the "
              f"{plural(a.skipped_steps, 'step')} GradScaler skipped while it "
              "searched for its scale (fp32 "
              "skips none): those batches did not update the AMP run's weights.")
    curves = "(the curves)"
    skips = (f"with {a.skipped_steps} of the AMP run's {updated + a.skipped_steps} "
             "steps skipped by GradScaler" if a.precision == "amp-fp16" else
             f"with every step of the AMP run applied ({a.mode_label} trains "
             "without GradScaler)")
glue_all(ch3_differ=md(differ), ch3_curves=md(curves), ch3_skips=skips)

# %% [markdown]
# **Accuracy.** This machine's pair trained for {glue:text}`epochs_main`. Its
# final training loss was {glue:text}`loss_f:.4f` (fp32) and {glue:text}`loss_a:.4f`
# (AMP), with a largest gap in any epoch of {glue:text}`gap:.4f`; val pixel accuracy
# {glue:text}`acc_f:.3f` and {glue:text}`acc_a:.3f`. The two runs start from the same
# weights and see the same batches; {glue:md}`ch3_differ`
#
# **Waiting for data** took {glue:text}`wait_f:.1%` (fp32) and {glue:text}`wait_a:.1%`
# (AMP) of this machine's training loop. When that share is large, as on the GPU above,
# the model step is not what bounds the epoch and a faster step cannot show; chapter 5
# follows this up for the post's GPU.
#
# ## What a CPU run can and cannot say about a GPU
#
# - **It can** show that the recipe trains the same way in each precision
#   {glue:md}`ch3_curves`,
#   that GradScaler skips steps while it finds its scale, and how many new bytes autograd
#   saves for the backward pass in each precision: in fp32 the count above matched the
#   GPU's own; with AMP it is off by the operators the two autocasts treat differently.
# - **It cannot** say anything about a GPU's speed. A CPU's 16-bit speed depends on the
#   kernels PyTorch picks there (measured above); a GPU's on its tensor cores, on whether
#   a layer is limited by arithmetic or by memory traffic, on the card (on the RTX 3070
#   TF32 brings fp32 no higher peak; on the A100 it does), and on whether the data loader
#   keeps up. Those are the questions of chapters 2 and 5.

# %%
print(f"run records of this chapter in {out_dir.name}/:")
print("\n".join(sorted(Path(r["json_path"]).name for r in records)))

# %% [markdown]
# ## Summary
#
# - AMP in PyTorch is three changes to a training loop: `torch.autocast` around the
#   forward pass and loss, `scaler.scale(loss).backward()`, and
#   `scaler.step`/`scaler.update`. bf16 needs no scaler.
# - `python -m ampbook.train` runs that loop with ERFNet's recipe and records every epoch:
#   time in the step and waiting for data, memory, loss, accuracy, loss scale and skipped
#   steps.
# - The post's fp32 was TF32 on its Ampere card; on a GeForce card TF32 peaks at the
#   fp32 rate, so on paper it does not make fp32 faster there.
# - The committed GPU runs ({numref}`fig-ch3-gpu-curves`, {numref}`fig-ch3-gpu-bars`)
#   repeat the post's three findings, and show why the time did not change where the loop
#   waited for data; the pairs' verdicts above say which case each pair is.
# - Memory, measured as the new bytes saved for backward: autocast's 16-bit weight copies
#   cost memory on small batches, its halved activations save it on large ones; a CPU
#   counts the GPU's fp32 bytes exactly.
# - On a CPU, 16-bit speed is a property of the kernels PyTorch runs, which the probe
#   measures; a CPU cannot answer the post's question about a GPU's time.
#
# ## Exercises
#
# 1. Run the command of "The same step in the runner" with `--precision amp-fp16
#    --clip-grad 1.0` (on a GPU; fp16 training on a CPU is slow), and compare its losses
#    and skipped steps with the same run without `--clip-grad`. Then, in the clipping
#    cell above, give the clip without `unscale_` a `max_norm` of 1.0 times the scale:
#    does the gradient handed to the optimizer now match, and for how long would it in a
#    run?
#
#    :::{dropdown} Hint
#    Whether a step is skipped is decided in `unscale_`, before the clip, so clipping
#    changes the skips only through the weights it leads to. Clipping the scaled
#    gradients at the scale times the threshold is the same clip until GradScaler
#    changes its scale: by default it halves the scale after each skipped step and
#    doubles it after 2000 consecutive clean ones.
#    :::
# 2. Set `shuffle = True` and rerun. Do the fp32 and AMP curves stay as close as before?
# 3. Add `channels_last=True` to `base` and compare the new bytes saved for backward and
#    the epoch time with the runs above.
# 4. With a GPU, compare the pairs against fp32 with TF32 on and against strict fp32: how
#    much of the post's missing AMP speedup does TF32 explain on your card?
#
#    :::{dropdown} Hint
#    Compare the step speedups, not the epoch speedups, of the two baselines; where the
#    loop waits for data, add workers first (chapter 5).
#    :::
# 5. Interrupt a run (`python -m ampbook.train ... --out runs`, Ctrl-C in the second
#    epoch), then add `--resume`. Compare its JSON with that of an uninterrupted run.
