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

Precisions (``PRECISIONS``): ``fp32`` (no autocast; ``--tf32 on`` lets CUDA matmuls
and cuDNN convolutions use TF32, as PyTorch 1.7, the post's version, did by default on
Ampere; the runner's default is off, so that a bare fp32 run is strict fp32;
``fp32-tf32`` is fp32 with ``--tf32 on``), ``amp-fp16`` (autocast to float16 around the
forward pass and the loss, and a ``GradScaler``) and ``amp-bf16`` (autocast to bfloat16,
no scaler). Weights, gradients and optimizer state stay fp32 in all three. The options
of the optimised step (``--channels-last``, ``--cudnn-benchmark``,
``--fused-optimizer``, ``--sync-every``, ``--compile``, ``--data-cache``,
``--16-bit-stream``) are all off by default, the post's setup; ``--help`` says what
each does. On ``--resume``, ``sync_every`` and ``workers`` may change and
``data_cache`` may switch between host and device; the others must match.

The recipe (defaults) is ERFNet's authors' training code (E. Romera,
github.com/Eromera/erfnet_pytorch, ``train/main.py``, its "scheduler 2"): Adam (betas
0.9/0.999, eps 1e-8), lr 5e-4, weight decay 1e-4, poly decay ``(1 - epoch/epochs) **
0.9``, cross-entropy ignoring label 255. ``--class-weights enet`` weights class c by
``1 / ln(1.02 + p_c)`` (ENet's rule: A. Paszke et al., arXiv:1606.02147). Without
``--data-root`` (or ``$CITYSCAPES_DATASET``) it trains on the synthetic Cityscapes,
drawn at twice the training size. The data order is a function of (seed, epoch) only,
so a resumed run sees the same batches.

Non-finite values: a step with non-finite gradients is skipped (by the GradScaler, or
by the runner without one) and counted, exactly, from flags kept on the device; after
``--max-nonfinite`` consecutive skips the run stops with ``NonFiniteLossError``, its
results file written first.

Outputs: ``--out DIR`` holds ``NAME.json`` (the record: ``ampbook.train.record``) and
the checkpoint ``NAME.ckpt`` (model, optimizer, scaler, scheduler, every rank's RNG
states, the records; ``torch.load(..., weights_only=True)``), both written atomically
after every epoch. ``--resume`` ends with the same weights and numbers as an
uninterrupted run. One process at a time owns a run name (``OUT/NAME.lock``), and an
existing run is refused unless ``--resume``'d or ``--overwrite``'n.
``--save-predictions DIR`` writes the last epoch's val predictions as Cityscapes labelId
PNGs that ``python -m ampbook.evaluate DIR`` reads. Bad settings, data or outputs are
``ConfigError`` before the first step; a file that fails mid-epoch is ``TrainError``
and Ctrl-C ``Interrupted``, both naming what the earlier epochs saved and the
``--resume`` command.

DDP: under ``torchrun`` each process takes ``--batch-size`` images per step from its
shard (NCCL on CUDA, gloo on CPU); rank 0 validates and writes.
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
