"""A model named on the command line, its input and the GPUs it is predicted on.

``SPEC`` is ``erfnet`` (the book's network), ``torchvision:NAME`` (any torchvision
model, built with every weights argument off: nothing is downloaded) or
``package.module:callable`` (called with no arguments, it must return an
``nn.Module``); ``--input`` is one sample's shape, ``--precisions`` the precisions
compared and ``--gpus`` names of the device table. The doctor
(``ampbook.chapters.ch6.diagnosis``) and the calibration's references
(``ampbook.predict.references``) read models and GPUs through this module.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Sequence

from torch import nn

from ampbook.core import cli
from ampbook.core.errors import first_line
from ampbook.core.precision import PRECISIONS
from ampbook.core.words import nearest

AMP_PRECISIONS = tuple(p for p in PRECISIONS if p != "fp32")
LOSSES = ("cross-entropy", "mse")
ERFNET_INPUT = (3, 512, 1024)
DEFAULT_INPUT = (3, 224, 224)


class DoctorError(ValueError, cli.UserError):
    """Bad input to the doctor: the message says what is wrong and what to do. A
    ``detail`` too long for the ``error:`` line (the model's own complaint) follows
    the message in parentheses; the command prints it on lines of its own."""

    def __init__(self, message: str, detail: str | None = None):
        super().__init__(f"{message} ({detail})" if detail else message)
        self.headline, self.detail = message, detail


# --------------------------------------------------------------------------------------
# the model, the input and the GPUs
# --------------------------------------------------------------------------------------


def _torchvision_model(name: str) -> nn.Module:
    """A torchvision model with every weights argument off (``weights=None``, and
    ``weights_backbone=None`` for the models built on a backbone): nothing is
    downloaded."""
    import torchvision

    builder = torchvision.models.get_model_builder(name)
    params = inspect.signature(builder).parameters
    kwargs = {k: None for k in ("weights", "weights_backbone") if k in params}
    return builder(**kwargs)


def load_model(spec: str) -> nn.Module:
    """The module ``spec`` names: ``erfnet``, ``torchvision:NAME`` (no weights) or
    ``package.module:callable``."""
    if spec == "erfnet":
        from ampbook.segmentation.cityscapes import NUM_CLASSES
        from ampbook.segmentation.model import ERFNet

        return ERFNet(NUM_CLASSES)
    if ":" not in spec:
        raise DoctorError(
            f"unknown model {spec!r}: use 'erfnet', 'torchvision:NAME' or "
            "'package.module:callable'"
        )
    where, name = spec.split(":", 1)
    if not where.strip() or not name.strip() or where.startswith("."):
        raise DoctorError(
            f"model {spec!r}: give package.module:callable with a module name that is "
            "not relative and a callable's name, e.g. mypackage.models:build"
        )
    if where == "torchvision":
        import torchvision

        names = torchvision.models.list_models()
        if name not in names:
            from ampbook.core.words import nearest

            near = nearest(name, names, 6) or [n for n in names if name.lower() in n]
            hint = (
                f"did you mean {', '.join(near[:6])}? " if near else "no name near it "
            )
            raise DoctorError(
                f"unknown torchvision model {name!r}: {hint}"
                f"(torchvision.models.list_models() lists all {len(names)})"
            )
        return _torchvision_model(name)
    try:
        module = importlib.import_module(where)
    except ImportError as e:
        raise DoctorError(
            f"cannot import {where!r} for model {spec!r} ({first_line(e)}): is the "
            "package on PYTHONPATH?"
        ) from None
    except (Exception, SystemExit) as e:  # the user's module failed as it loaded
        raise DoctorError(
            f"importing {where!r} for model {spec!r} raised {type(e).__name__}: "
            f"{first_line(e)}"
        ) from None
    factory = getattr(module, name, None)
    if factory is None or not callable(factory):
        raise DoctorError(f"{where} has no callable {name!r} for model {spec!r}")
    try:
        model = factory()
    except SystemExit as e:  # a script's sys.exit(): not a model, and not a success
        raise DoctorError(
            f"{spec}() called sys.exit({e.code!r}) instead of returning a model: "
            "make it return the nn.Module"
        ) from None
    except Exception as e:  # the user's code: report it in one line
        raise DoctorError(f"{spec}() raised {type(e).__name__}: {first_line(e)}") from e
    if not isinstance(model, nn.Module):
        raise DoctorError(
            f"{spec}() returned {type(model).__name__}, not an nn.Module: make it "
            "return the model"
        )
    return model


def default_input(spec: str) -> tuple[int, ...]:
    """ERFNet's book setting (3 x 512 x 1024), else an ImageNet image (3 x 224 x
    224)."""
    return ERFNET_INPUT if spec == "erfnet" else DEFAULT_INPUT


def parse_input(text: str) -> tuple[int, ...]:
    """``"3,224,224"`` -> (3, 224, 224): one sample's shape, any number of positive
    dimensions (``3,16,112,112`` for a video clip: C, T, H, W)."""
    parts = [p.strip() for p in str(text).replace("x", ",").split(",")]
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if not dims or min(dims) < 1:
        raise DoctorError(
            f"--input {text!r}: give one sample's shape as positive integers, e.g. "
            "3,224,224 (C,H,W) or 3,16,112,112 (C,T,H,W)"
        )
    return dims


def shape_text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


def parse_precisions(text: str | Sequence[str]) -> list[str]:
    """The precisions asked for; the baseline is always among them, named "fp32" in
    the list returned (and the report's JSON). The doctor's baseline is fp32 with TF32
    on for convolutions and matrix products where the GPU has TF32, so its mode name,
    ``fp32-tf32`` (``modes.TF32_MODE``), is accepted for it, and so is ``fp32``."""
    from ampbook.core.modes import TF32_MODE

    items = text.split(",") if isinstance(text, str) else list(text)
    items = [p.strip() for p in items if p.strip()]
    bad = [p for p in items if p not in (TF32_MODE, *PRECISIONS)]
    if bad or not items:
        raise DoctorError(
            f"--precisions {','.join(items) or repr(text)}: unknown {bad or 'empty'}; "
            f"choose from {','.join((TF32_MODE, *AMP_PRECISIONS))} ({TF32_MODE}, the "
            "baseline, may also be written fp32)"
        )
    return ["fp32"] + [p for p in AMP_PRECISIONS if p in items]


def _gpu_name(text: str) -> str:
    """A GPU name as ``--gpus`` compares it: lower case, without the vendor, spaces,
    hyphens or underscores (``"GeForce RTX 4090"`` -> ``"rtx4090"``)."""
    text = text.lower().replace("nvidia", "").replace("geforce", "")
    return "".join(ch for ch in text if ch.isalnum())


def gpu_hits(raw: str, devices) -> list[str]:
    """The table keys one ``--gpus`` name can mean, best rule first: the key itself,
    an alias (``a100``), the short name (``RTX 4090``, ``l4``), then any key or short
    name containing it (``4090``)."""
    raw = raw.strip().lower()
    norm = _gpu_name(raw)
    rules = (
        lambda k, d: k == raw,
        lambda k, d: raw in d.aliases or norm in map(_gpu_name, d.aliases),
        lambda k, d: norm == _gpu_name(d.short_name) or norm == _gpu_name(k),
        lambda k, d: bool(norm) and (norm in _gpu_name(k)
                                     or norm in _gpu_name(d.short_name)),
    )  # fmt: skip
    for rule in rules:
        hits = [k for k, d in devices.items() if rule(k, d)]
        if hits:
            return hits
    return []


def resolve_gpus(names: str | Sequence[str] | None, devices=None) -> list[str]:
    """Keys of the device table for ``names`` (``gpu_hits``: a key, an alias such as
    ``a100``, a short name such as ``l4`` or ``RTX 4090``, or a part of exactly one
    key or short name such as ``4090``). None: every GPU. An unknown or ambiguous
    name, or a value that names none (``""``, ``",,"``), is an error that lists what
    the table knows."""
    from ampbook.core.devices import load_devices

    devices = load_devices() if devices is None else devices
    if names is None:
        return list(devices)
    items = names.split(",") if isinstance(names, str) else list(names)
    if not any(str(n).strip() for n in items):
        known = ", ".join(f"{k} ({d.short_name})" for k, d in devices.items())
        given = names if isinstance(names, str) else ",".join(map(str, items))
        raise DoctorError(
            f"--gpus {given!r} names no GPU; give one or more, comma-separated, of "
            f"{known} (or leave --gpus out for all of them)"
        )
    keys = []
    for raw in (n.strip().lower() for n in items if n.strip()):
        hits = gpu_hits(raw, devices)
        if len(hits) != 1:
            raise DoctorError(f"--gpus: {_gpu_miss(raw, hits, devices)}")
        if hits[0] not in keys:
            keys.append(hits[0])
    return keys


def _gpu_miss(raw: str, hits: list[str], devices) -> str:
    """Why ``raw`` names no single GPU: the keys it could mean when ambiguous; when
    unknown, the nearest keys (a typo's likely meaning, ``words.nearest``) or, with
    none near, the table's short names."""
    if hits:
        known = ", ".join(f"{k} ({devices[k].short_name})" for k in hits)
        return f"ambiguous GPU {raw!r}: it names {known}"
    names = {k: k for k in devices}
    for k, d in devices.items():
        names.update({a: k for a in (d.short_name.lower(), *d.aliases)})
    near = list(dict.fromkeys(names[n] for n in nearest(raw, names, n=6)))[:3]
    if near:
        return (
            f"unknown GPU {raw!r}; did you mean {' or '.join(near)}? "
            "(a key, a short name or an alias)"
        )
    short = ", ".join(d.short_name for d in devices.values())
    return f"unknown GPU {raw!r}; the table knows {short}"


def table_key(device_name: str) -> str | None:
    """The device-table key of a GPU named as ``torch.cuda.get_device_name`` names it
    (None when the table has no entry, or several match)."""
    from ampbook.core.devices import find_device

    try:
        entry = find_device(device_name)
    except ValueError:
        return None
    return entry.key if entry else None


def resnext101_32x4d() -> nn.Module:
    """ResNeXt101-32x4d as NVIDIA's DeepLearningExamples build it (cardinality 32,
    bottleneck widths 128-1024, expansion 2): torchvision's ResNet with 32 groups of
    width 4, the stride on the 3x3 convolutions as in ResNet-50 v1.5."""
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=4)
