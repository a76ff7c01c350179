"""Op probes: each op run under autocast with fp32, low-precision and (for two
inputs) mixed activations, its output dtype read off (``probe_ops``) and held against
the documented lists and the dispatcher's registrations (``autocast_rules``). CUDA
probes run on fake CUDA tensors without a GPU.
"""

from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from ampbook.measure.autocast_rules import (
    CudaAutocastRules,
    autocast_region,
    check_device_type,
    cuda_is_fake,
    default_dtype,
    documented_category,
    dtype_name,
    registered_ops,
)


@dataclass(frozen=True)
class Probe:
    """``fn(make, dt)`` runs the op, ``make(shape, dtype=float32)`` makes a random
    tensor; ``dt`` is the activations' dtype (parameters stay fp32, as a model's do).
    ``mixed``: the op with one low and one fp32 activation; ``aliases``: the docs'."""

    name: str
    fn: Callable
    aliases: tuple[str, ...] = ()
    mixed: Callable | None = None


def _pos(make, shape, dt):
    return make(shape, dt).abs() + 0.5


X4 = (2, 4, 8, 8)  # the activations' shape: batch, channels, height, width
QKV = (2, 2, 4, 8)  # batch, heads, tokens, head dimension


def _two(name: str, op: Callable) -> Probe:
    """A probe of an op on two activations, also run with one low and one fp32."""
    return Probe(
        name,
        lambda m, dt: op(m(X4, dt), m(X4, dt)),
        mixed=lambda m, dt: op(m(X4, dt), m(X4)),
    )


def _labels(make, shape, classes):
    # integer targets built from a float tensor so that fake and real modes both work
    return (make(shape).abs() * 1000).long() % classes


PROBES: tuple[Probe, ...] = (
    # convolutions, matrix products and attention
    Probe(
        "conv2d",
        lambda m, dt: F.conv2d(m(X4, dt), m((4, 4, 3, 3)), m((4,)), padding=1),
    ),
    Probe(
        "conv_transpose2d",
        lambda m, dt: F.conv_transpose2d(m(X4, dt), m((4, 4, 3, 3)), m((4,))),
    ),
    Probe("linear", lambda m, dt: F.linear(m((4, 8), dt), m((8, 8)), m((8,)))),
    Probe(
        "matmul",
        lambda m, dt: torch.matmul(m((4, 8), dt), m((8, 8), dt)),
        ("__matmul__",),
    ),
    Probe("bmm", lambda m, dt: torch.bmm(m((2, 4, 8), dt), m((2, 8, 8), dt))),
    Probe(
        "addmm",
        lambda m, dt: torch.addmm(m((8,), dt), m((4, 8), dt), m((8, 8), dt)),
    ),
    Probe(
        "conv2d_depthwise",
        lambda m, dt: F.conv2d(m(X4, dt), m((4, 1, 3, 3)), m((4,)), groups=4),
        ("conv2d",),
    ),
    Probe(
        "scaled_dot_product_attention",
        lambda m, dt: F.scaled_dot_product_attention(
            m(QKV, dt), m(QKV, dt), m(QKV, dt)
        ),
    ),
    # normalisations, activations, pooling and upsampling
    Probe("prelu", lambda m, dt: F.prelu(m(X4, dt), m((4,)))),
    Probe(
        "batch_norm",
        lambda m, dt: F.batch_norm(
            m(X4, dt), m((4,)), m((4,)).abs() + 1, m((4,)), m((4,)), training=True
        ),
    ),
    Probe(
        "layer_norm",
        lambda m, dt: F.layer_norm(m((4, 8), dt), (8,), m((8,)), m((8,))),
    ),
    Probe("group_norm", lambda m, dt: F.group_norm(m(X4, dt), 2, m((4,)), m((4,)))),
    Probe("relu", lambda m, dt: F.relu(m(X4, dt))),
    Probe("gelu", lambda m, dt: F.gelu(m(X4, dt))),
    Probe("silu", lambda m, dt: F.silu(m(X4, dt))),
    Probe("hardswish", lambda m, dt: F.hardswish(m(X4, dt))),
    Probe("hardsigmoid", lambda m, dt: F.hardsigmoid(m(X4, dt))),
    Probe("sigmoid", lambda m, dt: torch.sigmoid(m(X4, dt))),
    Probe("dropout2d", lambda m, dt: F.dropout2d(m(X4, dt), 0.3, training=True)),
    Probe("max_pool2d", lambda m, dt: F.max_pool2d(m(X4, dt), 2)),
    Probe("avg_pool2d", lambda m, dt: F.avg_pool2d(m(X4, dt), 2)),
    Probe(
        "adaptive_avg_pool2d",
        lambda m, dt: F.adaptive_avg_pool2d(m(X4, dt), 1),
    ),
    Probe(
        "upsample_bilinear2d",
        lambda m, dt: F.interpolate(m(X4, dt), scale_factor=2, mode="bilinear"),
        ("interpolate",),
    ),
    Probe(
        "upsample_nearest2d",
        lambda m, dt: F.interpolate(m(X4, dt), scale_factor=2, mode="nearest"),
    ),
    # arithmetic, joins, reductions and pointwise functions
    _two("add", operator.add),
    _two("mul", operator.mul),
    _two("cat", lambda a, b: torch.cat([a, b], 1)),
    _two("stack", lambda a, b: torch.stack([a, b])),
    Probe("softmax", lambda m, dt: torch.softmax(m(X4, dt), 1)),
    Probe("log_softmax", lambda m, dt: torch.log_softmax(m(X4, dt), 1)),
    Probe("sum", lambda m, dt: m(X4, dt).sum()),
    Probe("mean", lambda m, dt: m(X4, dt).mean()),
    Probe("prod", lambda m, dt: _pos(m, (8,), dt).prod()),
    Probe("cumsum", lambda m, dt: torch.cumsum(m(X4, dt), 1)),
    Probe("exp", lambda m, dt: torch.exp(m(X4, dt))),
    Probe("log", lambda m, dt: torch.log(_pos(m, X4, dt))),
    Probe("pow", lambda m, dt: torch.pow(m(X4, dt), 2), ("__pow__",)),
    Probe("rsqrt", lambda m, dt: torch.rsqrt(_pos(m, X4, dt))),
    Probe("norm", lambda m, dt: torch.norm(m(X4, dt))),
    # losses
    Probe(
        "cross_entropy",
        lambda m, dt: F.cross_entropy(m(X4, dt), _labels(m, (2, 8, 8), 4)),
        ("cross_entropy_loss",),
    ),
    Probe(
        "nll_loss",
        lambda m, dt: F.nll_loss(m((4, 5), dt), _labels(m, (4,), 5)),
        ("nll_loss2d",),
    ),
    Probe("mse_loss", lambda m, dt: F.mse_loss(m(X4, dt), m(X4, dt))),
    Probe(
        "binary_cross_entropy_with_logits",
        lambda m, dt: F.binary_cross_entropy_with_logits(
            m(X4, dt), m(X4, dt).sigmoid()
        ),
    ),
)
PROBE_NAMES: tuple[str, ...] = tuple(p.name for p in PROBES)


@dataclass
class ProbeResult:
    op: str
    device: str  # "cpu", "cuda" or "cuda (fake)"
    low_dtype: str  # the autocast dtype
    out_from_fp32: str  # output dtype when the activations come in as fp32
    out_from_low: str  # output dtype when they come in as the low dtype
    out_mixed: str | None  # ops with two activations: one low, one fp32
    # "lower_precision", "float32", "input dtype", "promote" or "error: ..."
    observed: str
    documented: str | None
    registered: bool


def classify(
    out_from_fp32: torch.dtype,
    out_from_low: torch.dtype,
    low: torch.dtype,
    out_mixed: torch.dtype | None = None,
) -> str:
    """Name what autocast did from the two (three) output dtypes of a probe."""
    if out_from_fp32 == low:
        return "lower_precision"
    if out_from_low == torch.float32:
        return "float32"
    if out_from_fp32 == torch.float32 and out_from_low == low:
        if out_mixed == torch.float32:
            return "promote"
        return "input dtype"
    return f"other ({dtype_name(out_from_fp32)}, {dtype_name(out_from_low)})"


def _run_probe(
    probe: Probe, device_type: str, dtype: torch.dtype, fake: bool, cuda_rules=False
) -> dict:
    gen = torch.Generator().manual_seed(0)
    rules = CudaAutocastRules if cuda_rules else contextlib.nullcontext

    out = {}
    for label, fn, dt in (
        ("fp32", probe.fn, torch.float32),
        ("low", probe.fn, dtype),
        ("mixed", probe.mixed, dtype),
    ):
        if fn is None:
            out[label] = None
            continue
        with autocast_region(device_type, dtype, fake=fake) as dev, rules():

            def make(shape, dt_=torch.float32, dev=dev):
                t = torch.randn(shape) if fake else torch.randn(shape, generator=gen)
                return t.to(device=dev, dtype=dt_)

            out[label] = fn(make, dt).dtype
    return out


def probe_ops(
    device_type: str,
    dtype: torch.dtype | None = None,
    fake: bool | None = None,
    names: tuple[str, ...] | None = None,
    cuda_rules: bool = False,
) -> list[ProbeResult]:
    """Each probe (or those in ``names``) under autocast on ``device_type``: output
    dtypes, what autocast did, the documented category and whether the dispatcher has
    an autocast kernel. ``fake=None``: fake CUDA tensors when CUDA is absent;
    ``cuda_rules`` (CPU only): CUDA's decisions in a CPU autocast region."""
    check_device_type(device_type)
    dtype = dtype or default_dtype(device_type)
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(
            f"autocast's low-precision dtype is float16 or bfloat16, got {dtype}"
        )
    if fake is None:
        fake = device_type == "cuda" and cuda_is_fake()
    chosen = PROBES
    if names is not None:
        unknown = sorted(set(names) - set(PROBE_NAMES))
        if unknown:
            raise ValueError(
                f"no probe named {unknown}; known: {', '.join(PROBE_NAMES)}"
            )
        chosen = tuple(p for p in PROBES if p.name in names)
    registered = set(registered_ops(device_type))
    if cuda_rules and device_type != "cpu":
        raise ValueError("cuda_rules applies CUDA's lists to CPU probes: use 'cpu'")
    label = device_type + " (fake)" * fake + " (CUDA rules)" * cuda_rules
    results = []
    for p in chosen:
        doc = documented_category(p.name, device_type, p.aliases)
        reg = bool({p.name, *p.aliases} & registered)
        try:
            o = _run_probe(p, device_type, dtype, fake, cuda_rules)
            outs = (
                dtype_name(o["fp32"]),
                dtype_name(o["low"]),
                dtype_name(o["mixed"]) if o["mixed"] else None,
                classify(o["fp32"], o["low"], dtype, o["mixed"]),
            )
        except Exception as exc:  # an op the device cannot run in this dtype: say so
            outs = ("-", "-", None, f"error: {type(exc).__name__}")
        results.append(ProbeResult(p.name, label, dtype_name(dtype), *outs, doc, reg))
    return results


def disagreements(results: list[ProbeResult]) -> list[ProbeResult]:
    """Probes that did not do what their list says, or unlisted ops autocast changed."""
    out = []
    for r in results:
        doc = r.documented
        if r.observed.startswith("error"):
            continue
        if doc is None and r.observed in ("lower_precision", "float32"):
            out.append(r)
        elif doc == "promote" and r.observed not in ("promote", "input dtype"):
            out.append(r)
        elif doc in ("lower_precision", "float32") and r.observed != doc:
            out.append(r)
    return out
