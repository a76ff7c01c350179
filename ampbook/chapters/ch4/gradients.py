"""Chapter 4's gradients against fp16's range (``numerics.formats``), and what a loss
scale does to them. Storing ``g * s`` in fp16 (round to nearest, ties to even) leaves a
value ``flushed`` (|g s| <= 2^-25: rounds to 0), ``below_min_subnormal`` (|g s| <
2^-24, the criterion of Micikevicius et al., "Mixed Precision Training", ICLR 2018,
arXiv:1710.03740), ``subnormal`` (fewer than 11 significant bits) or ``overflow``
(|g s| >= 65504 + 16: inf). Fractions are of the nonzero finite values: a gradient
exactly 0 in fp32 loses nothing. ``GradientRecorder`` captures activation gradients
(tensor hooks registered in forward hooks) and weight gradients, in fp32.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
from torch import nn

from ampbook.numerics.gradstats import (
    FLUSH_AT_OR_BELOW,
    FP16_MIN_SUBNORMAL,
    OVERFLOW_AT_OR_ABOVE,
    SUBNORMAL_BELOW,
    check_scale,
)

SCALES = (1.0, 8.0, 2.0**10, 2.0**16)
HIST_LO, HIST_HI = -60, 20  # log2 bins: floor(log2|g|) in [HIST_LO, HIST_HI), clamped
OUTCOMES = ("flushed", "below_min_subnormal", "subnormal", "overflow")


def fp16_outcome(g: torch.Tensor, scale: float = 1.0) -> dict[str, int]:
    """Counts of ``total``, ``zero``, ``nonfinite``, ``nonzero`` values of ``g`` and,
    among the nonzero, the ``OUTCOMES`` of storing ``g * scale`` in fp16."""
    return _outcomes(g.detach().abs().float(), (check_scale(scale),))[0]


def _at_most(limit: float, strict: bool) -> float:
    """The float32 b with ``x <= b`` iff ``x <= limit`` (``x < limit`` if strict)."""
    b = torch.tensor(limit, dtype=torch.float32)
    if float(b) > limit or (strict and float(b) == limit):
        b = torch.nextafter(b, torch.tensor(0.0))
    return float(b)


@functools.lru_cache(maxsize=16)
def _boundaries(scales: tuple[float, ...]):
    # (boundary, scale index, name): the outcome counts values v <= boundary
    bounds = []
    for i, s in enumerate(scales):
        bounds += [
            (_at_most(FLUSH_AT_OR_BELOW / s, False), i, "flushed"),
            (_at_most(FP16_MIN_SUBNORMAL / s, True), i, "below_min_subnormal"),
            (_at_most(SUBNORMAL_BELOW / s, True), i, "not_normal"),
            (_at_most(OVERFLOW_AT_OR_ABOVE / s, True), i, "finite"),
        ]
    edges = sorted({b for b, _, _ in bounds})
    return bounds, edges, {e: k for k, e in enumerate(edges)}


def _outcomes(a: torch.Tensor, scales: tuple[float, ...]) -> list[dict[str, int]]:
    """``fp16_outcome`` for each scale from ``a = |g|``, in one ``torch.bucketize``
    pass over every threshold / scale (exact for power-of-two scales)."""
    finite = torch.isfinite(a)
    total, n_finite = a.numel(), int(finite.sum())
    v = a[finite & (a > 0)]
    bounds, edge_list, pos = _boundaries(tuple(scales))
    edges = torch.tensor(edge_list, dtype=torch.float32, device=v.device)
    idx = torch.bucketize(v, edges, right=False)  # edges[idx-1] < v <= edges[idx]
    upto = (
        torch.bincount(idx, minlength=len(edges) + 1).cumsum(0).tolist()
    )  # upto[k]: v <= edges[k]
    nonzero = v.numel()
    base = dict(
        total=total,
        zero=n_finite - nonzero,
        nonfinite=total - n_finite,
        nonzero=nonzero,
    )
    out = [dict(base) for _ in scales]
    for b, i, name in bounds:
        out[i][name] = upto[pos[b]]
    for o in out:
        o["subnormal"] = o.pop("not_normal") - o["flushed"]
        o["overflow"] = nonzero - o.pop("finite")
    return out


def log2_histogram(
    g: torch.Tensor, lo: int = HIST_LO, hi: int = HIST_HI
) -> torch.Tensor:
    """Counts of floor(log2|g|) over the nonzero finite values: bin ``i`` counts
    exponent ``lo + i``; exponents outside [lo, hi) go to the first or last bin."""
    if hi <= lo:
        raise ValueError(f"need lo < hi, got lo={lo}, hi={hi}")
    a = g.detach().abs().flatten().to(torch.float32)
    a = a[torch.isfinite(a) & (a > 0)]
    _, e = torch.frexp(a)  # a = m * 2^e with m in [0.5, 1): floor(log2 a) = e - 1
    idx = (e.to(torch.int64) - 1).clamp(lo, hi - 1) - lo
    return torch.bincount(idx, minlength=hi - lo)


# --- accumulating statistics ---


@dataclass
class GroupStats:
    """Counts for one group of gradient tensors at each loss scale."""

    scales: tuple[float, ...]
    tensors: int = 0
    counts: dict[float, dict[str, int]] = field(default_factory=dict)
    histogram: torch.Tensor = field(
        default_factory=lambda: torch.zeros(HIST_HI - HIST_LO, dtype=torch.int64)
    )
    max_abs: float = 0.0

    def _count(self, counts: dict) -> None:
        for s, c in counts.items():
            acc = self.counts.setdefault(s, dict.fromkeys(c, 0))
            for k, v in c.items():
                acc[k] += v

    def add(self, g: torch.Tensor) -> None:
        a = g.detach().abs().float()
        self.tensors += 1
        self._count(dict(zip(self.scales, _outcomes(a, self.scales))))
        self.histogram += log2_histogram(a).cpu()
        finite = a[torch.isfinite(a)]
        if finite.numel():
            self.max_abs = max(self.max_abs, float(finite.max()))

    def merge(self, other: "GroupStats") -> None:
        self.tensors += other.tensors
        self._count(other.counts)
        self.histogram += other.histogram
        self.max_abs = max(self.max_abs, other.max_abs)

    def fractions(self) -> dict[float, dict[str, float]]:
        """Per scale, each outcome's share of the nonzero finite values."""
        out = {}
        for s, c in self.counts.items():
            n = c["nonzero"]
            row = {k: (c[k] / n if n else float("nan")) for k in OUTCOMES}
            row["zero_fraction"] = (
                c["zero"] / c["total"] if c["total"] else float("nan")
            )
            out[s] = row
        return out


class GradientRecorder:
    """The fp32 gradients of ``model`` by layer type, their fate in fp16 counted at
    each scale; outputs of layers not in ``low_precision``: ``"activation-fp32"``."""

    def __init__(
        self,
        model: nn.Module,
        scales: Iterable[float] = SCALES,
        low_precision: set[str] | None = None,
    ):
        self.model = model
        self.low_precision = low_precision
        self.scales = tuple(check_scale(s) for s in scales)
        if not self.scales:
            raise ValueError("give at least one loss scale")
        self.groups: dict[tuple[str, str], GroupStats] = {}
        self._handles: list = []

    def record(self, kind: str, layer_type: str, g: torch.Tensor) -> None:
        key = (kind, layer_type)
        if key not in self.groups:
            self.groups[key] = GroupStats(self.scales)
        self.groups[key].add(g)

    def _forward_hook(self, name, module, args, output):
        layer_type = type(module).__name__
        low = self.low_precision is None or name in self.low_precision
        kind = "activation" if low else "activation-fp32"
        outs = output if isinstance(output, (tuple, list)) else (output,)
        for t in outs:
            if (
                isinstance(t, torch.Tensor)
                and t.is_floating_point()
                and t.requires_grad
            ):
                t.register_hook(lambda g, lt=layer_type: self.record(kind, lt, g))

    def __enter__(self) -> "GradientRecorder":
        for name, m in self.model.named_modules():
            if not list(m.children()):
                hook = functools.partial(self._forward_hook, name)
                self._handles.append(m.register_forward_hook(hook))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def record_weight_grads(self) -> None:
        for m in self.model.modules():
            for p in m.parameters(recurse=False):
                if p.grad is not None:
                    self.record("weight", type(m).__name__, p.grad)

    def kinds(self) -> list[str]:
        return sorted({k for k, _ in self.groups})

    def combined(self, kind: str) -> GroupStats:
        """All groups of one kind (``"activation"`` or ``"weight"``) merged."""
        total = GroupStats(self.scales)
        found = [g for (k, _), g in self.groups.items() if k == kind]
        if not found:
            raise KeyError(f"no {kind!r} gradients recorded; have: {self.kinds()}")
        for g in found:
            total.merge(g)
        return total

    def fractions(self, kind: str) -> dict[float, dict[str, float]]:
        return self.combined(kind).fractions()

    def histogram(self, kind: str) -> tuple[list[int], list[int]]:
        """(exponents, counts) of floor(log2|g|) for one kind, nonzero values only."""
        h = self.combined(kind).histogram
        return list(range(HIST_LO, HIST_HI)), h.tolist()

    def table(self, kind: str, outcome: str = "flushed") -> list[tuple]:
        """Rows (layer type, tensors, values, zero share, ``outcome``'s per scale)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        s0, fr = self.scales[0], {key: g.fractions() for key, g in self.groups.items()}
        return [
            (lt, g.tensors, g.counts[s0]["total"], fr[k, lt][s0]["zero_fraction"])
            + tuple(fr[k, lt][s][outcome] for s in self.scales)
            for (k, lt), g in sorted(self.groups.items())
            if k == kind
        ]


def capture_gradients(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable | None = None,
    scales: Iterable[float] = SCALES,
    low_precision: set[str] | None = None,
) -> GradientRecorder:
    """A ``GradientRecorder`` of fp32 passes over ``batches`` (no optimizer step)."""
    loss_fn = loss_fn or nn.CrossEntropyLoss(ignore_index=255)
    device = next(model.parameters()).device
    rec = GradientRecorder(model, scales, low_precision)
    seen = 0
    for x, y in batches:
        model.zero_grad(set_to_none=True)
        with rec:
            loss = loss_fn(model(x.to(device)), y.to(device))
        loss.backward()
        rec.record_weight_grads()
        seen += 1
    model.zero_grad(set_to_none=True)
    if not seen:
        raise ValueError("capture_gradients got no batches")
    return rec


def crop_batch(batches, height: int, width: int, n: int):
    """``n`` images and labels cut from the top-left corner of ``batches``, in their own
    storage (the memory meter counts whole storages)."""
    xs, ys = (torch.cat([b[i] for b in batches]) for i in (0, 1))
    if height > xs.shape[-2] or width > xs.shape[-1]:
        raise ValueError(
            f"a crop of {height}x{width} does not fit in the "
            f"{xs.shape[-2]}x{xs.shape[-1]} images of the batches"
        )
    if len(xs) < n:
        raise ValueError(f"need {n} images, the batches hold {len(xs)}")
    return xs[:n, :, :height, :width].clone(), ys[:n, :height, :width].clone()


def labelled_pixels(labels: torch.Tensor, ignore_index: int = 255) -> int:
    """Pixels that count in the loss: cross-entropy's mean divides by this number, so
    each logit's gradient is at most 1/labelled_pixels in magnitude."""
    return int((labels != ignore_index).sum())


def median_log2(rec: GradientRecorder, kind: str) -> float:
    """The median of log2|g| over the nonzero values of one kind, the median's bin's
    values taken as spread evenly over it (in log2)."""
    exps, counts = rec.histogram(kind)
    half, acc = sum(counts) / 2, 0
    if not half:
        raise ValueError(f"no nonzero {kind} gradients recorded")
    for e, c in zip(exps, counts):
        if c and acc + c >= half:
            return e + (half - acc) / c
        acc += c
    raise AssertionError("unreachable: the counts sum to twice half")


def shifted_below(
    rec: GradientRecorder, kind: str, bins: float, scales: Iterable[float]
) -> dict[float, float]:
    """Fraction of the nonzero values of ``kind`` below 2^-24 at each scale if the
    histogram moved ``bins`` binades left (an estimate for a larger batch), each bin's
    values spread evenly over it in log2."""
    exps, counts = rec.histogram(kind)
    total = sum(counts)
    if not total:
        raise ValueError(f"no nonzero {kind} gradients recorded")
    out = {}
    for s in scales:
        lo = [e - bins + math.log2(check_scale(s)) for e in exps]
        below = sum(c * min(max(-24 - x, 0.0), 1.0) for x, c in zip(lo, counts))
        out[s] = below / total
    return out


def fraction_rows(rec: GradientRecorder, kinds=("activation", "weight")) -> list[tuple]:
    """Rows (kind, scale, zero share, flushed, below 2^-24, subnormal, overflow)."""
    return [
        (kind, f"2^{math.log2(s):g}", f["zero_fraction"], *(f[k] for k in OUTCOMES))
        for kind in kinds
        for s, f in rec.fractions(kind).items()
    ]


FRACTION_HEADERS = [
    "gradients",
    "loss scale",
    "exactly 0 (of all)",
    "flushed",
    "below 2⁻²⁴",
    "subnormal",
    "overflow",
]
FRACTION_FORMATS = [None, None, ".2%", ".4%", ".4%", ".3%", ".4%"]


def first_overflow_scale(
    rec: GradientRecorder, kinds=("activation", "weight")
) -> float | None:
    """The smallest recorded scale at which a value of ``kinds`` overflows, or None."""
    for s in rec.scales:
        if any(rec.fractions(k)[s]["overflow"] > 0 for k in kinds):
            return s
    return None
