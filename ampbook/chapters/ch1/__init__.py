"""What chapter 1 (01_floating_point) measures and says: each format's limits as
powers of two and beside ``torch.finfo``, the updates a low-precision weight loses,
where a running sum stalls, what a cast does with values it cannot hold, and whether
a published figure agrees with the layout (``ampbook.numerics.formats``)."""

from __future__ import annotations

import math

import torch

from ampbook.numerics.formats import FORMATS, Format, get_format, spacing


def exact_powers_table() -> tuple[list[str], list[list[str]]]:
    """``(headers, rows)``: each format's max, smallest normal, smallest subnormal and
    epsilon as exact powers of two (LaTeX), written from the layout alone."""
    rows = []
    for f in FORMATS.values():
        top = f.mantissa_bits if f.has_inf else f.mantissa_bits - 1  # E4M3 loses one
        powers = (f.emin, f.emin - f.mantissa_bits, -f.mantissa_bits)
        rows.append([f.name, f"$2^{{{f.emax}}}(2-2^{{{-top}}})$",
                     *(f"$2^{{{k}}}$" for k in powers)])  # fmt: skip
    heads = [
        "format",
        "max",
        "smallest normal",
        "smallest subnormal",
        "machine epsilon",
    ]
    return heads, rows


def finfo_table() -> tuple[list[str], list[list]]:
    """The layout's max, smallest normal and epsilon beside ``torch.finfo`` for each
    format torch has a dtype for; the last column says whether all four values match."""
    rows = []
    for f in (f for f in FORMATS.values() if f.torch_dtype is not None):
        fi = torch.finfo(f.torch_dtype)
        layout = (f.bits, f.max, f.smallest_normal, f.eps)
        same = (fi.bits, fi.max, fi.tiny, fi.eps) == layout
        dtype = str(f.torch_dtype).removeprefix("torch.")
        rows.append([f.name, dtype, fi.max, fi.tiny, fi.eps, "yes" if same else "NO"])
    heads = ["format", "dtype", "finfo.max", "finfo.tiny", "finfo.eps", "as computed"]
    return heads, rows


def lost_updates(
    weights: torch.Tensor, ratios: torch.Tensor, dtype: torch.dtype
) -> list:
    """For each ratio r: the fraction of ``weights`` that do not change at all when
    ``weights / r`` is added to them in ``dtype``."""
    w = weights.to(dtype)
    return [((w + (weights / r).to(dtype)) == w).double().mean().item() for r in ratios]


def loss_onset(ratios, fractions, nearly_all: float = 0.999) -> tuple[float, float]:
    """The first ratio at which any update is lost, and the first at which at least
    ``nearly_all`` of them are (nan where never)."""
    pairs = list(zip([float(r) for r in ratios], fractions))
    some = next((r for r, f in pairs if f > 0), math.nan)
    most = next((r for r, f in pairs if f >= nearly_all), math.nan)
    return some, most


def stall_point(name: str | Format | torch.dtype, term: float) -> float:
    """The smallest power of two from which half the format's gap is at least ``term``:
    a running sum that large no longer grows by adding ``term``."""
    fmt = get_format(name)
    for k in range(fmt.emin - fmt.mantissa_bits, fmt.emax + 1):
        if spacing(torch.tensor([2.0**k]), fmt).item() / 2 >= term:
            return 2.0**k
    return math.nan


# What a cast does with values it cannot hold, probed kind by kind: a finite value past
# the largest, +inf, -inf and NaN (the OCP fp8 specification allows a conversion to
# saturate or not, and torch's eager casts changed over versions).
SPECIAL_INPUTS = ("finite overflow", "+inf", "-inf", "NaN")


def overflow_probe(name: str | Format | torch.dtype) -> float:
    """A finite float32 value past the format's range: twice its largest value, or
    float32's largest where twice is not finite in float32 (bf16)."""
    fmt = get_format(name)
    f32_max = torch.finfo(torch.float32).max
    return 2 * fmt.max if 2 * fmt.max <= f32_max else f32_max


def _outcome(value: float, fmt: Format) -> str:
    """A cast's result named: ``"+max"``/``"-max"`` (saturated), ``"+inf"``,
    ``"-inf"``, ``"NaN"`` or the number."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    if abs(value) == fmt.max:
        return "+max" if value > 0 else "-max"
    return f"{value:g}"


def cast_specials(dtype: torch.dtype, device="cpu") -> dict[str, tuple[float, str]]:
    """What this torch's cast from float32 to ``dtype`` on ``device`` gives for each
    of ``SPECIAL_INPUTS``: ``{kind: (result as a float, outcome)}`` (``_outcome``)."""
    fmt = get_format(dtype)
    if fmt.torch_dtype is None:
        raise ValueError(f"{fmt.name} has no torch dtype to cast to")
    inputs = [overflow_probe(fmt), math.inf, -math.inf, math.nan]
    x = torch.tensor(inputs, dtype=torch.float32, device=device)
    got = x.to(fmt.torch_dtype).to(torch.float32).cpu().tolist()
    return {k: (v, _outcome(v, fmt)) for k, v in zip(SPECIAL_INPUTS, got)}


def specials_rule(name: str | Format | torch.dtype, outcomes: dict) -> str:
    """One sentence naming what each kind of input became, from ``cast_specials``'s
    outcomes: the largest value is written out, saturation and NaN named."""
    fmt = get_format(name)
    top = f"{fmt.max:g}"

    def word(kind: str) -> str:
        out = outcomes[kind][1] if isinstance(outcomes[kind], tuple) else outcomes[kind]
        if out == kind:  # inf -> inf, NaN -> NaN
            return f"stays {out.lstrip('+')}"
        saturated = {"+max": f"saturates to {top}", "-max": f"saturates to -{top}"}
        return saturated.get(out, f"becomes {out.lstrip('+')}")

    return (
        f"{fmt.name}: a finite value past {top} {word('finite overflow')}, "
        f"inf {word('+inf')}, -inf {word('-inf')}, NaN {word('NaN')}."
    )


def specials_report(specials: dict[str, dict], device="cpu") -> str:
    """Markdown: which torch ran the casts, then ``specials_rule`` for each format of
    ``specials`` (``{format name: cast_specials(...)}``), one list item each."""
    where = torch.device(device).type
    lines = [f"- {specials_rule(name, out)}" for name, out in specials.items()]
    return f"torch {torch.__version__} on {where}:\n\n" + "\n".join(lines)


def agrees(claimed: float, value: float) -> bool:
    """Equal to as many significant digits as the claim gives (1.7e38 has two)."""
    digits = len(f"{claimed:.6e}".split("e")[0].replace(".", "").rstrip("0")) or 1
    return float(f"{value:.{digits}g}") == float(f"{claimed:.{digits}g}")


def claim_verdict(claimed: float, value: float, others: dict[str, float] = {}) -> str:
    """ "agrees", or how far off the claim is, and which other quantity it equals if
    any."""
    if agrees(claimed, value):
        return "agrees"
    factor = claimed / value
    big = factor > 1
    text = (
        f"{factor if big else 1 / factor:.3g} times too {'large' if big else 'small'}"
    )
    names = [name for name, v in others.items() if agrees(claimed, v)]
    return text + (f"; it equals {names[0]}" if names else "")
