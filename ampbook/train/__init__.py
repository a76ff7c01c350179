"""The training runner: ERFNet on Cityscapes (or the synthetic set) in fp32 or with AMP.

    python -m ampbook.train --precision amp-fp16 --epochs 10 --no-shuffle
    torchrun --nproc_per_node 2 -m ampbook.train --precision amp-bf16 ...     (DDP)

From Python: ``run_training(TrainConfig(precision="amp-bf16", epochs=3)) -> dict``.

TF32 is off by default (PyTorch 1.7, the post's version, used it on Ampere), so a bare
fp32 run is strict; the optimised step's options are all off, the post's setup.

The recipe is ERFNet's authors' training code (E. Romera,
github.com/Eromera/erfnet_pytorch, ``train/main.py``, its "scheduler 2"): Adam (betas
0.9/0.999, eps 1e-8), lr 5e-4, weight decay 1e-4, poly decay ``(1 - epoch/epochs) **
0.9``, cross-entropy ignoring label 255. ``--class-weights enet`` weights class c by
``1 / ln(1.02 + p_c)`` (ENet's rule: A. Paszke et al., arXiv:1606.02147). The data
order is a function of (seed, epoch) only, so ``--resume`` ends with the same weights
and numbers as an uninterrupted run. Bad settings are ``ConfigError`` before the first
step; a failure mid-epoch is ``TrainError`` naming what was saved and how to resume.
"""

# Names are imported on first use (PEP 562): ``python -m ampbook.train --help``
# reads the options without loading torch.
_WHERE = {
    name: f"ampbook.{module}"
    for module, names in (
        ("core.modes", "PRECISIONS"),
        ("train.command", "main"),
        ("train.loop", "enet_class_weights resolve_data run_training"),
        ("train.outdir", "RunLock"),
        ("train.step", "TrainStep build_training"),
        (
            "train.config",
            "ConfigError NonFiniteLossError TrainConfig TrainError build_parser "
            "command_line config_from_args run_name validate",
        ),
    )
    for name in names.split()
}

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
