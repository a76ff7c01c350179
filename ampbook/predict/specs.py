"""A model named by a spec (``erfnet``, ``torchvision:NAME`` without weights or
``package.module:callable``), and a GPU's device-table key from its CUDA name."""

from __future__ import annotations

import importlib
import inspect
from typing import Sequence

from torch import nn

from ampbook.core import cli
from ampbook.core.devices import find_device
from ampbook.core.errors import first_line
from ampbook.core.words import nearest


class DoctorError(ValueError, cli.UserError):
    """Bad input to the doctor; a ``detail`` too long for the ``error:`` line (the
    model's own complaint) follows the message in parentheses."""

    def __init__(self, message: str, detail: str | None = None):
        super().__init__(f"{message} ({detail})" if detail else message)
        self.headline, self.detail = message, detail


def load_model(spec: str) -> nn.Module:
    """The module ``spec`` names (a callable's is called with no arguments)."""
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
            near = nearest(name, names, 6) or [n for n in names if name.lower() in n]
            hint = (
                f"did you mean {', '.join(near[:6])}? " if near else "no name near it "
            )
            raise DoctorError(
                f"unknown torchvision model {name!r}: {hint}"
                f"(torchvision.models.list_models() lists all {len(names)})"
            )
        builder = torchvision.models.get_model_builder(name)
        params = inspect.signature(builder).parameters
        # every weights argument off: nothing is downloaded
        kwargs = {k: None for k in ("weights", "weights_backbone") if k in params}
        return builder(**kwargs)
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


def shape_text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


def table_key(device_name: str) -> str | None:
    """The device-table key of a GPU named as ``torch.cuda.get_device_name`` names it
    (None when the table has no entry, or several match)."""
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
