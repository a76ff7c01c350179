"""The training runner: ERFNet on Cityscapes (or the synthetic set) in fp32 or with AMP.

    python -m ampbook.train --precision amp-fp16 --epochs 10 --no-shuffle
    torchrun --nproc_per_node 2 -m ampbook.train --precision amp-bf16 ...     (DDP)

From Python: ``run_training(TrainConfig(precision="amp-bf16", epochs=3, ...)) -> dict``.
The fields of ``TrainConfig`` are the command-line options (``data_root`` is
``--data-root``; ``shuffle=False`` is ``--no-shuffle``);
``python -m ampbook.train --help`` lists them.

Modules: ``step`` (``TrainStep``, ``build_training``: the step chapter 3 teaches),
``config`` (``TrainConfig``, ``validate``, the command line), ``checkpoint`` (atomic
writes, RNG states, the checkpoint), ``record`` (the results record: schema, reading,
writing), ``outdir`` (one run per output name), ``loop`` (``run_training``) and
``command`` (``main``, the command line: its options are read before torch is
imported). The names used elsewhere are all importable from ``ampbook.train``.

Precisions (``PRECISIONS``)
---------------------------
* ``fp32``: no autocast. ``--tf32 on|off`` decides whether CUDA matmuls and cuDNN
  convolutions may use TF32 tensor cores; the choice is recorded and named in the run.
  PyTorch 1.7, the post's version, had both on by default on Ampere GPUs, so
  ``--tf32 on`` is the post's condition: chapter 3 and the GPU check pass it for the
  comparison "as in the post". The runner's own default is off, so that a bare
  ``--precision fp32`` run is strict fp32, what its name says, on every GPU and PyTorch
  version. ``--precision fp32-tf32`` (the name the ladder and the doctor give this
  mode, ``ampbook.core.modes.TF32_MODE``) is ``--precision fp32 --tf32 on``.
* ``amp-fp16``: ``torch.autocast(dtype=float16)`` around the forward pass and the loss,
  and a ``torch.amp.GradScaler`` (dynamic loss scaling) for the backward pass and the
  update.
* ``amp-bf16``: ``torch.autocast(dtype=bfloat16)``, no scaler (bf16 has fp32's exponent
  range).

Weights, gradients and optimizer state stay fp32 in all three. Checks made before any
work: an unknown precision, non-positive epochs/batch size/lr, a height or width not
divisible by 8, ``--device cuda`` without CUDA, ``amp-bf16`` on a GPU without bf16
(compute capability < 8.0) and ``--resume`` without a checkpoint are errors
(``ConfigError``). Low precision on a CPU without hardware support for it (AMX or
AVX-512 BF16/FP16, see ``ampbook.core.precision.native_cpu_flags``) works but is much
slower than fp32; it runs with a warning, recorded in the results.

The optimised step (options, all off by default: the post's setup)
------------------------------------------------------------------
* ``--channels-last``: model and inputs in channels_last (NHWC) memory format.
* ``--cudnn-benchmark``: cuDNN times its algorithms per input shape (CUDA only), set
  through ``ampbook.core.precision.backend_flags`` for the run and restored after.
* ``--fused-optimizer``: ``Adam(fused=True)``, one kernel for all parameters (CUDA and
  CPU; on the book's 2-core CPU it was about 4x faster than foreach and for-loop:
  ``python -m ampbook.bench step --optimizers``). ``resolved.optimizer`` names the
  implementation that ran.
* ``--sync-every N``: the losses and skipped-step flags are read to the host every N
  batches (and at each epoch's end) in one transfer, not every batch; counts exact,
  ``--max-nonfinite`` checked at each read. Steps skip on the device only with the
  fused Adam.
* ``--compile MODE``: ``torch.compile`` (static shapes); the steps that compiled are
  timed apart (epoch ``compile_s``, not in ``step_s``). ``aot_eager`` is torch's
  debugging backend (no code generation).
* ``--data-cache host|device``: train and val images decoded once to uint8 at the
  training size, in host or GPU memory (size checked first), flipped and normalised
  per batch on the device: the same batches as the loader with 0 workers.
  ``--workers auto``: one loader worker per CPU core.
* ``--16-bit-stream`` (also ``--fp16-stream``, its older name):
  ``ERFNet(fp16_stream=True)``: under autocast the encoder's residual stream stays in
  the autocast dtype, fp16 or bf16 (the reference ERFNet promotes it to fp32).

On ``--resume``, ``sync_every`` and ``workers`` may change (they change no number);
``data_cache`` may switch between host and device; the others must match.

The recipe (defaults)
---------------------
ERFNet's authors' PyTorch training code (E. Romera, github.com/Eromera/erfnet_pytorch,
``train/main.py``, its "scheduler 2"): Adam (betas 0.9/0.999, eps 1e-8), lr 5e-4, weight
decay 1e-4, lr multiplied by ``(1 - epoch/epochs) ** 0.9`` each epoch (poly decay),
cross-entropy ignoring label 255. ``--class-weights enet`` weights class c by
``1 / ln(1.02 + p_c)`` with p_c the class's share of the labelled training pixels
(ENet's rule: A. Paszke et al., "ENet: A Deep Neural Network Architecture for Real-Time
Semantic Segmentation", arXiv:1606.02147), computed from the training labels once and
cached; ``none`` (default) weights all classes equally.

Data: ``--data-root`` (or ``$CITYSCAPES_DATASET``), else the synthetic Cityscapes of
``ampbook.segmentation.synthetic.synthetic_root`` with
``--synthetic-train``/``--synthetic-val`` images drawn at twice the training resolution
(as 2048x1024 Cityscapes is to the post's 1024x512); the output says which. The data
order is a function of (seed, epoch) only (a ``DistributedSampler`` with ``set_epoch``,
also for one process), so a resumed run sees the same batches.

Non-finite values
-----------------
Every optimizer step checks the gradients: with the GradScaler (amp-fp16) a step whose
scaled gradients overflow is skipped by the scaler and the scale halves (the scaler's
own found-inf flag says so); without it (fp32, amp-bf16) a step with non-finite
gradients is skipped by the runner rather than written into the weights. Skipped steps
and non-finite losses are counted per epoch, exactly, from flags kept on the device and
read with the losses (every ``--sync-every`` batches). After ``--max-nonfinite``
consecutive skipped steps (default 20) the run stops with ``NonFiniteLossError`` (at
the read that sees them); the results file is written first with ``status`` saying so.

Outputs
-------
``--out DIR`` (default ``build/runs`` on the command line; ``None`` in ``TrainConfig``
writes nothing): ``DIR/NAME.json`` after every epoch (atomically: a temporary file, then
``os.replace``), and the checkpoint ``DIR/NAME.ckpt`` after every epoch: model,
optimizer, scaler, scheduler, the RNG states of torch (CPU and CUDA), numpy and Python
of every rank, the epoch, and the records so far; it loads with
``torch.load(..., weights_only=True)``. ``--resume`` continues from it and ends with the
same weights and numbers as an uninterrupted run (same settings; the interrupted epoch
is run again from its start; accumulation windows never cross an epoch, so no gradient
is pending at a checkpoint). NAME is ``--name``, else built from the settings
(``run_name``). One process at a time owns a run name: it holds ``OUT/NAME.lock``
(``flock``, freed when the process dies), and a run whose ``NAME.json`` or ``NAME.ckpt``
exists is refused unless it is ``--resume``'d or ``--overwrite``'n. ``--accumulate N``
steps every N batches counted from the epoch's start; the epoch's last window may be
shorter (it steps at the epoch's end); N above the batches of an epoch is an error.
``--save-predictions DIR`` writes the last epoch's val predictions as Cityscapes labelId
PNGs at the label files' size (logits upsampled bilinearly, then the arg-max), named
``DIR/CITY/CITY_SEQ_FRAME_pred.png``, as cityscapesscripts' evaluator and
``python -m ampbook.evaluate DIR`` read them.

Failures: bad settings, data that cannot be listed or whose PNG headers are wrong (size,
channels), an output path that cannot be written and a checkpoint that is not this
runner's are ``ConfigError`` before the first step; a file that fails to decode
mid-epoch is ``TrainError`` and Ctrl-C ``Interrupted``, both naming what the earlier
epochs saved and the ``--resume`` command. ``python -m ampbook.train`` prints each as
one ``error:`` line.

The results record (``NAME.json``) and its schema: ``ampbook.train.record``.

DDP: under ``torchrun`` (``WORLD_SIZE`` > 1) the model is wrapped in
DistributedDataParallel (NCCL on CUDA, gloo on CPU), each process takes ``--batch-size``
images per step from its shard, autocast and the scaler are unchanged, and rank 0
validates on the whole val set and writes the results and checkpoints.
"""

# Names are imported on first use (PEP 562): ``python -m ampbook.train --help``
# reads the options without loading torch.
_WHERE = {
    "AUTOCAST_DTYPES": "ampbook.core.precision",
    "CHECKPOINT_FORMAT": "ampbook.train.checkpoint",
    "CLASS_WEIGHTS": "ampbook.train.config",
    "ConfigError": "ampbook.train.config",
    "DATA_CACHES": "ampbook.train.config",
    "Interrupted": "ampbook.train.config",
    "NonFiniteLossError": "ampbook.train.config",
    "PRECISIONS": "ampbook.core.modes",
    "PolyDecay": "ampbook.train.step",
    "RUNTIME_FIELDS": "ampbook.train.config",
    "Resolved": "ampbook.train.config",
    "RunLock": "ampbook.train.outdir",
    "StepCounters": "ampbook.train.step",
    "TF32_CHOICES": "ampbook.train.config",
    "TrainConfig": "ampbook.train.config",
    "TrainError": "ampbook.train.config",
    "TrainStep": "ampbook.train.step",
    "Training": "ampbook.train.step",
    "build_parser": "ampbook.train.config",
    "build_training": "ampbook.train.step",
    "command_line": "ampbook.train.config",
    "config_from_args": "ampbook.train.config",
    "enet_class_weights": "ampbook.train.loop",
    "main": "ampbook.train.command",
    "optimizer_impl": "ampbook.train.step",
    "resolve_data": "ampbook.train.loop",
    "resume_command": "ampbook.train.config",
    "rng_state": "ampbook.train.checkpoint",
    "run_name": "ampbook.train.config",
    "run_training": "ampbook.train.loop",
    "set_rng_state": "ampbook.train.checkpoint",
    "summarize": "ampbook.train.record",
    "train_epoch": "ampbook.train.loop",
    "validate": "ampbook.train.config",
    "write_results": "ampbook.train.record",
}

__all__ = [
    "AUTOCAST_DTYPES",
    "CHECKPOINT_FORMAT",
    "CLASS_WEIGHTS",
    "DATA_CACHES",
    "ConfigError",
    "Interrupted",
    "NonFiniteLossError",
    "PRECISIONS",
    "PolyDecay",
    "RUNTIME_FIELDS",
    "Resolved",
    "RunLock",
    "StepCounters",
    "TF32_CHOICES",
    "TrainConfig",
    "TrainError",
    "TrainStep",
    "Training",
    "build_parser",
    "build_training",
    "command_line",
    "config_from_args",
    "enet_class_weights",
    "main",
    "optimizer_impl",
    "resolve_data",
    "resume_command",
    "rng_state",
    "run_name",
    "run_training",
    "set_rng_state",
    "summarize",
    "train_epoch",
    "validate",
    "write_results",
]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
