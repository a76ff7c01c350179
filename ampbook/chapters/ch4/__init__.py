"""What chapter 4 (04_loss_scaling) shows of autocast: the table and the paragraph of
the op probes on CPU and CUDA, ERFNet's layers under autocast on both, the dtypes of
the parameters and gradients after one step, and a layer used twice in a forward.

    probe_rows(probes)                  # {device: {op: ProbeResult}} as table rows
    probe_verdict(probes)               # where CPU, CUDA and the docs part ways
    layer_rows(model, x, device)        # layer types' dtypes, CPU and CUDA
    dtypes_after_step(model, x, y, device_type, dtype)
    SameLayerTwice()                    # the cast cache at work

The measurements are ``ampbook.measure``'s (``op_probes``, ``model_dtypes``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ampbook.chapters.ch4.op_probes import PROBE_NAMES, ProbeResult, disagreements
from ampbook.measure.autocast_rules import DEVICE_TYPES
from ampbook.measure.model_dtypes import (
    parameter_and_grad_dtypes,
    summarize_by_type,
    trace_layers,
)

PROBE_HEADERS = [  # short: the table must fit a 1000 px page
    "op",
    "CPU ran",
    "CPU docs",
    "CUDA ran",
    "CUDA docs",
]


def probe_rows(probes: dict[str, dict[str, ProbeResult]]) -> list[tuple]:
    """One row per probed op: observed and documented behaviour on CPU and CUDA, from
    ``{device_type: {op: ProbeResult}}``."""
    return [
        (
            op,
            probes["cpu"][op].observed,
            probes["cpu"][op].documented or "unlisted",
            probes["cuda"][op].observed,
            probes["cuda"][op].documented or "unlisted",
        )
        for op in PROBE_NAMES
    ]


def probe_verdict(probes: dict[str, dict[str, ProbeResult]]) -> str:
    """One paragraph of facts: where CPU and CUDA autocast differ among the probed ops,
    and where the observed behaviour is not what the documentation lists."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for op in PROBE_NAMES:
        a, b = probes["cpu"][op].observed, probes["cuda"][op].observed
        if a != b:
            pairs.setdefault((a, b), []).append(op)
    differ = (
        "; ".join(
            f"{', '.join(ops)} ({a} on CPU, {b} on CUDA)"
            for (a, b), ops in pairs.items()
        )
        or "none"
    )
    undocumented = []
    for d in DEVICE_TYPES:
        bad = disagreements(list(probes[d].values()))
        items = ", ".join(
            f"{r.op} ({r.observed}, documented {r.documented or 'unlisted'})"
            for r in bad
        )
        undocumented.append(f"{d.upper()}: {items or 'none'}")
    return (
        f"Ops CPU and CUDA autocast treat differently: {differ}. Observed behaviour "
        f"the documented lists do not predict: {'; '.join(undocumented)}."
    )


def layer_rows(model: nn.Module, x: torch.Tensor, device: torch.device) -> list[tuple]:
    """``(device, layer type, input dtypes, output dtype, calls)`` of one forward under
    autocast on the CPU and on CUDA (on fake CUDA tensors without a GPU)."""
    rows = []
    for d in DEVICE_TYPES:
        if d == "cuda" and device.type != "cuda":
            found, label = trace_layers(model, tuple(x.shape), "cuda"), "cuda (fake)"
        else:
            dev = torch.device("cpu") if d == "cpu" else device
            found, label = trace_layers(model.to(dev), x.to(dev), d), d
        rows += [(label, *r) for r in summarize_by_type(found)]
    model.cpu()
    return rows


def dtypes_after_step(
    model: nn.Module,
    x: torch.Tensor,
    target: torch.Tensor,
    device_type: str,
    dtype: torch.dtype | None,
) -> dict[str, dict[str, int]]:
    """``parameter_and_grad_dtypes`` after one forward (under autocast in ``dtype``, or
    without autocast for ``None``) and backward of ``model`` on (``x``, ``target``)."""
    with torch.autocast(
        device_type, dtype=dtype or torch.float32, enabled=dtype is not None
    ):
        loss = F.cross_entropy(model(x).float(), target, ignore_index=255)
    loss.backward()
    return parameter_and_grad_dtypes(model)


def dtype_counts(counts: dict[str, int]) -> str:
    """``{"float32": 97}`` as ``"float32: 97"``."""
    return ", ".join(f"{k}: {v}" for k, v in counts.items())


class SameLayerTwice(nn.Module):
    """One ``Linear`` applied twice in a forward: autocast's cast cache at work."""

    def __init__(self, features: int = 64):
        super().__init__()
        self.lin = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.lin(x))
