"""Gradients against fp16's range: where they fall, what loss scaling does to them, and
what fp16 rounding does to them.

fp16's limits come from ``ampbook.numerics.formats.FORMATS["fp16"]``: its smallest
subnormal 2^-24, smallest normal 2^-14 and largest value 65504. Rounding to nearest
(ties to even) decides the fate of a gradient value ``g`` multiplied by a loss scale
``s``:

* **flushed**: ``|g s| <= 2^-25`` (half the smallest subnormal) rounds to 0: the value
  is lost;
* **below 2^-24**: ``|g s| < 2^-24``, the paper's criterion (Micikevicius et al., "Mixed
  Precision Training", ICLR 2018, arXiv:1710.03740); values between 2^-25 and 2^-24
  round up to 2^-24 and survive, badly rounded;
* **subnormal**: stored as an fp16 subnormal (``2^-25 < |g s| < 2^-14 - 2^-25``): kept
  with fewer than 11 significant bits;
* **overflow**: ``|g s| >= 65504 + 16`` (the largest value plus half its spacing) rounds
  to inf.

Fractions are of the *nonzero* finite values: a gradient that is exactly 0 in fp32
(behind a ReLU, say) loses nothing in fp16.

``GradientRecorder`` captures activation gradients (the gradient flowing into each
layer's output, via tensor hooks registered in forward hooks) and weight gradients
(``.grad``) of a model, in fp32, and keeps counts and a log2 histogram per layer type.
``emulate_fp16_grads`` makes every activation gradient inside a forward, and the weight
gradients of the layers autocast runs in fp16 (convolutions, linear layers), pass
through fp16 rounding (``ampbook.numerics.formats.round_to``), while the arithmetic
stays fp32: fp16 training's range without fp16's speed penalty on CPUs that lack fast
fp16. Short training runs under the three loss-scaling regimes are in
``ampbook.numerics.loss_scaling``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ampbook.measure.model_dtypes import traced_call
from ampbook.numerics.formats import FORMATS, round_to

FP16 = FORMATS["fp16"]
FP16_MIN_SUBNORMAL = FP16.smallest_subnormal  # 2^-24
FP16_MIN_NORMAL = FP16.smallest_normal  # 2^-14
FP16_MAX = FP16.max  # 65504
FLUSH_AT_OR_BELOW = FP16_MIN_SUBNORMAL / 2  # 2^-25: rounds to 0 (a tie goes to even 0)
_TOP_STEP = math.ldexp(
    1.0, FP16.emax - FP16.mantissa_bits
)  # spacing of fp16's top binade: 32
OVERFLOW_AT_OR_ABOVE = (
    FP16_MAX + _TOP_STEP / 2
)  # 65520: rounds to inf (a tie goes to even)
# below this a value is stored as a subnormal; from it up, it rounds to 2^-14 or more
SUBNORMAL_BELOW = FP16_MIN_NORMAL - FP16_MIN_SUBNORMAL / 2

SCALES = (1.0, 8.0, 2.0**10, 2.0**16)
OUTCOMES = ("flushed", "below_min_subnormal", "subnormal", "overflow")
HIST_LO, HIST_HI = (
    -60,
    20,
)  # log2 bins: floor(log2|g|) in [HIST_LO, HIST_HI), ends clamped
# Layer types whose weights autocast casts to the low dtype (so their weight gradients
# are computed in it): the convolution and linear layers of the documented op lists.
CAST_WEIGHT_TYPES = (nn.modules.conv._ConvNd, nn.Linear)


def check_scale(scale: float) -> float:
    scale = float(scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"a loss scale must be a positive finite number, got {scale}")
    return scale


# --- one tensor
# ----------------------------------------------------------------------------


def fp16_outcome(g: torch.Tensor, scale: float = 1.0) -> dict[str, int]:
    """Counts of what storing ``g * scale`` in fp16 does to the values of ``g``:
    ``total``, ``zero`` (exactly 0 already), ``nonfinite`` (inf/NaN already),
    ``nonzero`` (finite, not 0) and, among the nonzero ones, the ``OUTCOMES`` (see the
    module docstring)."""
    return _outcomes(g.detach().abs().float(), (check_scale(scale),))[0]


def _at_most(limit: float, strict: bool) -> float:
    """The float32 boundary b with ``x <= b`` equivalent to ``x <= limit`` (or ``x <
    limit`` when ``strict``) for float32 x."""
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
    """``fp16_outcome`` for each scale, from ``a = |g|`` (float32), in one pass: the
    values are sorted into the intervals between every threshold divided by every scale
    (``torch.bucketize``). A threshold divided by a power-of-two scale (all of
    ``SCALES``) is exact, so the counts are exactly those of rounding ``g * s`` to
    fp16."""
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
    base = {
        "total": total,
        "zero": n_finite - nonzero,
        "nonfinite": total - n_finite,
        "nonzero": nonzero,
    }
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
    """Counts of floor(log2|g|) over the nonzero finite values of ``g``: bin ``i``
    counts exponent ``lo + i``, i.e. |g| in [2^(lo+i), 2^(lo+i+1)); exponents outside
    [lo, hi) go to the first or last bin. int64 tensor of length ``hi - lo``."""
    if hi <= lo:
        raise ValueError(f"need lo < hi, got lo={lo}, hi={hi}")
    a = g.detach().abs().flatten().to(torch.float32)
    a = a[torch.isfinite(a) & (a > 0)]
    _, e = torch.frexp(a)  # a = m * 2^e with m in [0.5, 1): floor(log2 a) = e - 1
    idx = (e.to(torch.int64) - 1).clamp(lo, hi - 1) - lo
    return torch.bincount(idx, minlength=hi - lo)


# --- accumulating statistics
# -----------------------------------------------------------------


@dataclass
class GroupStats:
    """Counts for one group of gradient tensors (e.g. the activation gradients of all
    Conv2d layers), at each loss scale."""

    scales: tuple[float, ...]
    tensors: int = 0
    counts: dict[float, dict[str, int]] = field(default_factory=dict)
    histogram: torch.Tensor = field(
        default_factory=lambda: torch.zeros(HIST_HI - HIST_LO, dtype=torch.int64)
    )
    max_abs: float = 0.0

    def add(self, g: torch.Tensor) -> None:
        a = g.detach().abs().float()
        self.tensors += 1
        for s, c in zip(self.scales, _outcomes(a, self.scales)):
            acc = self.counts.setdefault(s, dict.fromkeys(c, 0))
            for k, v in c.items():
                acc[k] += v
        self.histogram += log2_histogram(a).cpu()
        finite = a[torch.isfinite(a)]
        if finite.numel():
            self.max_abs = max(self.max_abs, float(finite.max()))

    def merge(self, other: "GroupStats") -> None:
        self.tensors += other.tensors
        for s, c in other.counts.items():
            acc = self.counts.setdefault(s, dict.fromkeys(c, 0))
            for k, v in c.items():
                acc[k] += v
        self.histogram += other.histogram
        self.max_abs = max(self.max_abs, other.max_abs)

    def fractions(self) -> dict[float, dict[str, float]]:
        """Per scale: each outcome as a fraction of the nonzero finite values; also
        ``zero_fraction`` (of all values)."""
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
    """Capture fp32 gradients of ``model`` and count their fate in fp16 at each loss
    scale.

    Inside ``with GradientRecorder(model) as rec:`` every forward registers a hook on
    each leaf module's floating-point output, so that the backward hands the recorder
    the gradient of the loss with respect to that output (an *activation gradient*),
    grouped by layer type. Call ``rec.record_weight_grads()`` after ``backward()`` for
    the weight gradients (grouped by the type of the layer owning the parameter). Run
    several batches to accumulate.

    The loss must not be scaled: the recorder applies each scale itself.

    ``low_precision`` (a set of leaf-module names,
    ``model_dtypes.low_precision_layers``): only the outputs of those layers are low
    precision in a real AMP step, so only their gradients count as ``"activation"``; the
    others' go to ``"activation-fp32"``.
    """

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

    def _group(self, kind: str, layer_type: str) -> GroupStats:
        key = (kind, layer_type)
        if key not in self.groups:
            self.groups[key] = GroupStats(self.scales)
        return self.groups[key]

    def record(self, kind: str, layer_type: str, g: torch.Tensor) -> None:
        self._group(kind, layer_type).add(g)

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

    # -- results
    # ------------------------------------------------------------------------------
    def kinds(self) -> list[str]:
        return sorted({k for k, _ in self.groups})

    def combined(self, kind: str) -> GroupStats:
        """All groups of one kind (``"activation"`` or ``"weight"``) merged."""
        total = GroupStats(self.scales)
        found = False
        for (k, _), g in self.groups.items():
            if k == kind:
                total.merge(g)
                found = True
        if not found:
            raise KeyError(f"no {kind!r} gradients recorded; have: {self.kinds()}")
        return total

    def fractions(self, kind: str) -> dict[float, dict[str, float]]:
        return self.combined(kind).fractions()

    def histogram(self, kind: str) -> tuple[list[int], list[int]]:
        """(exponents, counts) of floor(log2|g|) for one kind, nonzero values only."""
        h = self.combined(kind).histogram
        return list(range(HIST_LO, HIST_HI)), h.tolist()

    def table(self, kind: str, outcome: str = "flushed") -> list[tuple]:
        """Rows ``(layer type, tensors, values, zero fraction, outcome fraction at each
        scale)``."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        rows = []
        for (k, lt), g in sorted(self.groups.items()):
            if k != kind:
                continue
            fr = g.fractions()
            first = g.counts[self.scales[0]]
            rows.append(
                (
                    lt,
                    g.tensors,
                    first["total"],
                    fr[self.scales[0]]["zero_fraction"],
                    *(fr[s][outcome] for s in self.scales),
                )
            )
        return rows

    def summary(self) -> dict:
        """JSON-serialisable: per kind, the fractions at each scale and the largest
        |g|."""
        out = {}
        for kind in self.kinds():
            c = self.combined(kind)
            out[kind] = {
                "max_abs": c.max_abs,
                "values": c.counts[self.scales[0]]["total"],
                "fractions": {str(s): f for s, f in c.fractions().items()},
            }
        return out


def capture_gradients(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable | None = None,
    scales: Iterable[float] = SCALES,
    device: torch.device | str | None = None,
    low_precision: set[str] | None = None,
) -> GradientRecorder:
    """Forward and backward ``model`` in fp32 over ``batches`` of (input, target),
    recording activation and weight gradients (``low_precision``: see
    ``GradientRecorder``). The model's weights do not change (no optimizer step); its
    gradients are cleared after."""
    loss_fn = loss_fn or nn.CrossEntropyLoss(ignore_index=255)
    device = (
        torch.device(device) if device is not None else next(model.parameters()).device
    )
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


# --- emulating fp16 gradients in fp32
# ----------------------------------------------------------


class RoundingCounter:
    """What the emulation's rounding did during one backward: values seen, nonzero
    values (before rounding) and how many of those were flushed to 0 or overflowed to
    inf. The sums stay tensors until read, so counting adds no synchronisation to a CUDA
    backward."""

    _FIELDS = ("values", "nonzero", "flushed", "overflow")

    def __init__(self):
        self.reset()

    def add(self, before: torch.Tensor, after: torch.Tensor) -> None:
        finite = torch.isfinite(before)
        nz = finite & (before != 0)
        self._sums[0] += before.numel()
        self._sums[1] = self._sums[1] + nz.sum()
        self._sums[2] = self._sums[2] + (nz & (after == 0)).sum()
        self._sums[3] = self._sums[3] + (finite & torch.isinf(after)).sum()

    def reset(self) -> None:
        self._sums = [0, 0, 0, 0]

    def __getattr__(self, name):
        if name in RoundingCounter._FIELDS:
            return int(self._sums[RoundingCounter._FIELDS.index(name)])
        raise AttributeError(name)

    def __repr__(self) -> str:
        return (
            "RoundingCounter("
            + ", ".join(f"{k}={getattr(self, k)}" for k in self._FIELDS)
            + ")"
        )

    @property
    def flushed_fraction(self) -> float:
        return self.flushed / self.nonzero if self.nonzero else float("nan")


def _to_fp16_grid(g: torch.Tensor) -> torch.Tensor:
    return round_to(g, "fp16").to(g.dtype)


class _RoundOutputs(TorchFunctionMode):
    """Registers a rounding hook on every floating tensor that needs a gradient and that
    a torch function returns inside the mode (with ``calls``: only on the outputs of the
    calls marked low precision, matched in call order)."""

    def __init__(self, emulation: "emulate_fp16_grads"):
        super().__init__()
        self.emulation = emulation
        self.k = 0

    def _low(self, func, out) -> bool:
        calls = self.emulation.calls
        if calls is None:
            return True
        name = traced_call(func, out)
        if name is None:
            return False
        if self.k >= len(calls) or calls[self.k][0] != name:
            got = calls[self.k][0] if self.k < len(calls) else "the end of the trace"
            raise RuntimeError(
                f"emulate_fp16_grads: call {self.k} of the forward is {name}, "
                f"the autocast trace has {got}: trace the same model and mode"
            )
        self.k += 1
        return calls[self.k - 1][1]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self._low(func, out):
            return out
        outs = out if isinstance(out, (tuple, list)) else (out,)
        inputs = [*args, *kwargs.values()]
        for t in outs:
            # an in-place op returns its input, whose gradient is already hooked
            if (
                isinstance(t, torch.Tensor)
                and t.requires_grad
                and t.is_floating_point()
                and not any(t is a for a in inputs)
            ):
                t.register_hook(self.emulation._round)
        return out


class emulate_fp16_grads:
    """Emulate fp16 gradients with fp32 arithmetic.

    ``emu = emulate_fp16_grads(model)`` registers hooks that round the gradients of the
    weights of ``CAST_WEIGHT_TYPES`` to fp16 (autocast computes those in fp16 and
    casts them to fp32). ``with emu: out = model(x)`` also makes the gradient of every
    tensor the forward creates (layer outputs, and the functional ops between them:
    ReLUs, sums, concatenations) pass through fp16 rounding during the backward: values
    at or below 2^-25 flush to 0, values from 65520 up become inf, everything else lands
    on fp16's grid. ``emu.counter`` counts what the rounding did; ``emu.remove()`` takes
    the weight hooks off. Scale the loss outside as usual: the rounding sees the scaled
    gradients, as fp16 does.

    ``calls`` (``model_dtypes.low_precision_calls``) rounds only the gradients that a
    real autocast step holds in fp16: the outputs of the calls marked low precision.
    Without it every gradient is rounded, including those autocast keeps in fp32
    (ERFNet's residual stream in the encoder), which overstates what fp16 loses.
    """

    def __init__(
        self,
        model: nn.Module,
        round_fn: Callable[[torch.Tensor], torch.Tensor] = _to_fp16_grid,
        calls: list[tuple[str, bool]] | None = None,
    ):
        self.model = model
        self.round_fn = round_fn
        self.calls = calls
        self.counter = RoundingCounter()
        self.weight_counter = RoundingCounter()
        self._mode: _RoundOutputs | None = None
        self._param_handles = []
        for m in model.modules():
            if isinstance(m, CAST_WEIGHT_TYPES):
                for p in m.parameters(recurse=False):
                    if p.requires_grad:
                        self._param_handles.append(p.register_hook(self._round_weight))

    def _round(self, g: torch.Tensor) -> torch.Tensor:
        r = self.round_fn(g)
        self.counter.add(g, r)
        return r

    def _round_weight(self, g: torch.Tensor) -> torch.Tensor:
        r = self.round_fn(g)
        self.weight_counter.add(g, r)
        return r

    def __enter__(self) -> "emulate_fp16_grads":
        self._mode = _RoundOutputs(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        self._mode = None

    def remove(self) -> None:
        for h in self._param_handles:
            h.remove()
        self._param_handles.clear()


# --- what chapter 4 reads from the recorder
# --------------------------------------------------


def training_batches(
    data_root,
    height: int,
    width: int,
    n: int,
    batch_size: int,
    synthetic_train: int = 8,
    seed: int = 0,
):
    """``(batches, root)``: the first ``n`` batches of (images, labels) of the training
    split at ``height`` x ``width``, not shuffled, cycling when the set is small (at
    most 16 distinct batches are held). Cityscapes at ``data_root`` (or
    ``$CITYSCAPES_DATASET``), else the synthetic Cityscapes of ``synthetic_train``
    images."""
    import itertools
    import os

    from ampbook.segmentation.cityscapes import Cityscapes, resolve_root
    from ampbook.segmentation.synthetic import synthetic_root

    if data_root or os.environ.get("CITYSCAPES_DATASET"):
        root = resolve_root(data_root)
    else:
        root = synthetic_root(synthetic_train, 2, 2 * height, 2 * width, seed=seed)
    data = Cityscapes(root, "train", height, width)
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=False)
    distinct = list(itertools.islice(loader, min(n, 16)))
    return list(itertools.islice(itertools.cycle(distinct), n)), root


def crop_batch(batches, height: int, width: int, n: int):
    """``n`` images and labels cut from the top-left corner of ``batches``, in their own
    storage (the memory meter counts whole storages)."""
    xs = torch.cat([b[0] for b in batches])
    ys = torch.cat([b[1] for b in batches])
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


def median_exponent(rec: GradientRecorder, kind: str) -> int:
    """The median of floor(log2|g|) over the nonzero values of one kind of gradient."""
    exps, counts = rec.histogram(kind)
    half, acc = sum(counts) / 2, 0
    for e, c in zip(exps, counts):
        acc += c
        if acc >= half:
            return e
    raise ValueError(f"no nonzero {kind} gradients recorded")


def median_log2(rec: GradientRecorder, kind: str) -> float:
    """The median of log2|g| over the nonzero values of one kind of gradient, read
    from the histogram with the values of the median's bin taken as spread evenly
    over it (in log2): a fraction of a bin, finer than ``median_exponent``."""
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
    """Fraction of the nonzero values of ``kind`` below 2^-24 at each scale if the whole
    histogram moved ``bins`` binades to the left (an estimate for a larger batch in
    pixels). A bin k holds 2^k <= |g| < 2^(k+1), its values taken as spread evenly over
    it in log2: after the move and the scale it lies on [k - bins + log2 s, that + 1),
    and the part of it left of -24 counts (all of it or none when ``bins`` is a whole
    number)."""
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
    rows = []
    for kind in kinds:
        for s, f in rec.fractions(kind).items():
            rows.append(
                (
                    kind,
                    f"2^{math.log2(s):g}",
                    f["zero_fraction"],
                    f["flushed"],
                    f["below_min_subnormal"],
                    f["subnormal"],
                    f["overflow"],
                )
            )
    return rows


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
