"""Floating-point formats used in mixed-precision training, every property computed
from the bit layout (nothing typed in; the tests compare with ``torch.finfo``,
``numpy.finfo`` and the IEEE-754 bit patterns). ``round_to`` emulates rounding to any
format on any device (later chapters emulate fp16 tensors with it, and TF32, which has
no dtype)."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: 1 sign bit, ``exponent_bits``, ``mantissa_bits``.

    ``has_inf``: the IEEE-754 layout, whose all-ones exponent is infinity and NaN; not
    so the ``fn`` layout of fp8 E4M3, where only S.1111.111 is NaN. ``overflow``: what
    rounding a too-large value gives, ``"inf"`` or ``"saturate"`` (the largest finite
    value, as torch's cast to ``float8_e4m3fn`` does).
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    has_inf: bool
    overflow: str
    torch_dtype: torch.dtype | None

    @property
    def bits(self) -> int:
        """Storage width (TF32's 19 significant bits, not its 32-bit word)."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number (field 1)."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number (below all-ones if that is inf/NaN)."""
        top_field = 2**self.exponent_bits - 1
        return (top_field - 1 if self.has_inf else top_field) - self.bias

    @property
    def max(self) -> float:
        """Largest finite value: 2^emax * (2 - 2^-m); the fn layout gives the all-ones
        mantissa to NaN, so its largest has mantissa 1...10."""
        lost = self.mantissa_bits if self.has_inf else self.mantissa_bits - 1
        return math.ldexp(2.0 - math.ldexp(1.0, -lost), self.emax)

    @property
    def smallest_normal(self) -> float:
        return math.ldexp(1.0, self.emin)

    @property
    def smallest_subnormal(self) -> float:
        """2^(emin - m): exponent field 0, only the last mantissa bit set."""
        return math.ldexp(1.0, self.emin - self.mantissa_bits)

    @property
    def eps(self) -> float:
        """Machine epsilon: the gap between 1 and the next larger number, 2^-m."""
        return math.ldexp(1.0, -self.mantissa_bits)

    @property
    def unit_roundoff(self) -> float:
        """The largest relative error of rounding to nearest in the normal range."""
        return self.eps / 2

    @property
    def decimal_digits(self) -> float:
        """-log10(eps) (numpy's ``finfo.precision`` is this, rounded down)."""
        return -math.log10(self.eps)

    def __repr__(self) -> str:
        return (
            f"Format({self.name}: 1 sign, {self.exponent_bits} exponent, "
            f"{self.mantissa_bits} mantissa bits, max {self.max:.6g})"
        )


# Sources: IEEE 754-2019 (fp64, fp32, fp16); NVIDIA A100 Tensor Core GPU Architecture
# whitepaper (2020) (TF32: fp32 range, fp16 precision, tensor-core matmul inputs only);
# Kalamkar et al., A Study of BFLOAT16 for Deep Learning Training, arXiv:1905.12322
# (2019) (bf16); Micikevicius et al., FP8 Formats for Deep Learning, arXiv:2209.05433
# (2022) and OCP 8-bit Floating Point Specification (OFP8) rev. 1.0 (2023) (fp8 E4M3:
# no infinity, one NaN pattern; E5M2: IEEE-like).
FORMATS: dict[str, Format] = {
    f.name: f
    for f in [
        Format("fp64", 11, 52, True, "inf", torch.float64),
        Format("fp32", 8, 23, True, "inf", torch.float32),
        Format("tf32", 8, 10, True, "inf", None),
        Format("fp16", 5, 10, True, "inf", torch.float16),
        Format("bf16", 8, 7, True, "inf", torch.bfloat16),
        Format("fp8_e4m3", 4, 3, False, "saturate", torch.float8_e4m3fn),
        Format("fp8_e5m2", 5, 2, True, "inf", torch.float8_e5m2),
    ]
}

_BY_DTYPE = {f.torch_dtype: f for f in FORMATS.values() if f.torch_dtype is not None}


def get_format(name: str | Format | torch.dtype) -> Format:
    """The ``Format`` of a name in ``FORMATS``, of a torch dtype, or a Format."""
    if isinstance(name, Format):
        return name
    if isinstance(name, torch.dtype):
        if name in _BY_DTYPE:
            return _BY_DTYPE[name]
        raise ValueError(
            f"no format for torch dtype {name}; known dtypes: "
            f"{', '.join(str(d) for d in _BY_DTYPE)}"
        )
    if isinstance(name, str) and name in FORMATS:
        return FORMATS[name]
    raise ValueError(
        f"unknown floating-point format {name!r}; known formats: {', '.join(FORMATS)}"
    )


_OVERFLOW_MODES = ("inf", "saturate", "nan")


def _quantum_exponent(a: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Per element of a (float64, >= 0), the power of two of the format's grid spacing
    at a: floor(log2 a) clamped below at emin (the subnormal range and zero share emin's
    spacing), minus m."""
    _, exp = torch.frexp(a)  # a = f * 2^exp, f in [0.5, 1): floor(log2 a) = exp - 1
    e = torch.where(a == 0, fmt.emin, exp.to(torch.int64) - 1)  # frexp(0) gives exp 0
    return e.clamp_(min=fmt.emin) - fmt.mantissa_bits


def _round64(a: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Round non-negative float64 values to the format's grid, ties to even, without an
    overflow rule (values past max come back larger than max, or inf)."""
    q = torch.ldexp(torch.ones_like(a), _quantum_exponent(a, fmt))
    # a / q is exact (a power-of-two scaling) and torch.round rounds half to even.
    return torch.round(a / q) * q


def _round_fp32_bits(x: torch.Tensor, fmt: Format, mode: str) -> torch.Tensor:
    """The float32 path of ``round_to``: round the bit pattern (add half a step minus
    one, plus the lowest kept bit for ties to even, and clear the dropped bits). Below
    the smallest normal, adding C = 2^(emin - m + 23) puts |x| where float32's own step
    is the format's, so float32 addition rounds it and subtracting C is exact."""
    drop = 23 - fmt.mantissa_bits
    b = x.view(torch.int32)
    a = b & 0x7FFFFFFF
    r = (a + ((1 << (drop - 1)) - 1) + ((a >> drop) & 1)) & ~((1 << drop) - 1)
    c = math.ldexp(1.0, fmt.emin - fmt.mantissa_bits + 23)
    small = (x.abs() + c) - c
    y = torch.where(a < _fp32_bits(fmt.smallest_normal), small, r.view(torch.float32))
    # finite overflow or inf, not NaN
    too_big = (r > _fp32_bits(fmt.max)) & (a <= 0x7F800000)
    y = torch.where(
        too_big, _overflow_value(fmt, mode), torch.where(a > 0x7F800000, x.abs(), y)
    )
    return torch.copysign(y, x)


def _overflow_value(fmt: Format, mode: str) -> float:
    return {"inf": math.inf, "saturate": fmt.max, "nan": math.nan}[mode]


def _fp32_bits(value: float) -> int:
    """The float32 bit pattern of a value that float32 holds exactly, as an int."""
    return struct.unpack("<i", struct.pack("<f", value))[0]


def round_to(
    x: torch.Tensor, name: str | Format | torch.dtype, overflow: str | None = None
) -> torch.Tensor:
    """Round every element of ``x`` to the nearest value of the format, ties to even;
    past the largest finite value ``overflow`` (default: the format's own): ``"inf"``,
    ``"saturate"`` or ``"nan"``. float64 inputs are rounded once, in float64 (torch's
    own casts from float64 can round twice); the result is float32 otherwise."""
    fmt = get_format(name)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"round_to expects a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(
            f"round_to expects a floating-point tensor, got dtype {x.dtype}"
        )
    mode = fmt.overflow if overflow is None else overflow
    if mode not in _OVERFLOW_MODES:
        raise ValueError(
            f"unknown overflow rule {overflow!r}; choose one of {_OVERFLOW_MODES}"
        )
    if mode == "inf" and not fmt.has_inf:
        raise ValueError(
            f"{fmt.name} has no infinity; use overflow='saturate' or 'nan'"
        )
    out_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    if fmt.name == "fp64" or (fmt.name == "fp32" and out_dtype == torch.float32):
        return x.to(out_dtype)  # every float32 (and narrower) value is on the grid
    if out_dtype == torch.float32:
        return _round_fp32_bits(x.to(torch.float32), fmt, mode)
    y = _round64(x.abs(), fmt)  # y > max: also for inf inputs, not for NaN
    y = torch.where(y > fmt.max, _overflow_value(fmt, mode), y)
    return torch.copysign(y, x)


def spacing(x: torch.Tensor, name: str | Format | torch.dtype) -> torch.Tensor:
    """The gap from |x| (rounded to the format) to the next larger magnitude, float64:
    ``numpy.spacing`` made positive; NaN where x is NaN or rounds past the largest."""
    fmt = get_format(name)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("spacing expects a floating-point torch.Tensor")
    a = x.to(torch.float64).abs()
    r = a if fmt.name == "fp64" else _round64(a, fmt)
    gap = torch.ldexp(torch.ones_like(r), _quantum_exponent(r, fmt))
    return torch.where(r <= fmt.max, gap, math.nan)


def encode(
    value: float | torch.Tensor, name: str | Format | torch.dtype
) -> int | torch.Tensor:
    """The format's bit pattern of ``value`` rounded to it: an int, or an int64 tensor
    for a tensor (fp64's negative numbers come out negative); NaN is the canonical
    quiet NaN with the input's sign."""
    fmt = get_format(name)
    if isinstance(value, torch.Tensor):
        return _encode_tensor(value, fmt)
    one = torch.tensor([float(value)], dtype=torch.float64)
    return int(_encode_tensor(one, fmt)[0]) % (1 << fmt.bits)


def _encode_tensor(x: torch.Tensor, fmt: Format) -> torch.Tensor:
    m = fmt.mantissa_bits
    r = round_to(x.to(torch.float64), fmt)
    a = r.abs()
    normal = a >= fmt.smallest_normal  # false for NaN
    e = torch.frexp(a)[1].to(torch.int64) - 1
    exp_field = torch.where(normal, e + fmt.bias, 0)
    # normal: a = (1 + mant / 2^m) 2^e; subnormal (and zero): a = mant 2^(emin - m)
    mant = torch.where(
        normal,
        torch.ldexp(a, m - e) - 2.0**m,
        torch.ldexp(a, torch.tensor(m - fmt.emin)),
    )
    top = 2**fmt.exponent_bits - 1
    nan_mant = 2**m - 1 if not fmt.has_inf else 2 ** (m - 1)
    exp_field = torch.where(r.isnan() | r.isinf(), top, exp_field)
    mant = torch.where(r.isnan(), float(nan_mant), torch.where(r.isinf(), 0.0, mant))
    sign = torch.signbit(r).to(torch.int64)
    return (sign << (fmt.bits - 1)) | (exp_field << m) | mant.to(torch.int64)


def bits(value: float, name: str | Format | torch.dtype, sep: str = " ") -> str:
    """``value`` rounded to the format, as its bit pattern split sign, exponent,
    mantissa: ``bits(1.0, "fp16") == "0 01111 0000000000"``."""
    fmt = get_format(name)
    s = format(encode(value, fmt), f"0{fmt.bits}b")
    return sep.join([s[0], s[1 : 1 + fmt.exponent_bits], s[1 + fmt.exponent_bits :]])


def decode(pattern: int | str, name: str | Format | torch.dtype) -> float:
    """The value of a bit pattern: an int, or a string of 0/1 (spaces, '|' and '_'
    ignored)."""
    fmt = get_format(name)
    if isinstance(pattern, str):
        digits = "".join(ch for ch in pattern if ch not in " |_")
        if len(digits) != fmt.bits or set(digits) - {"0", "1"}:
            raise ValueError(
                f"{pattern!r} is not a {fmt.bits}-bit pattern of 0s and 1s "
                f"for {fmt.name}"
            )
        pattern = int(digits, 2)
    if isinstance(pattern, bool) or not isinstance(pattern, int):
        raise TypeError(
            f"decode expects an int or a bit string, got {type(pattern).__name__}"
        )
    if not 0 <= pattern < 2**fmt.bits:
        raise ValueError(f"{pattern} does not fit in {fmt.bits} bits ({fmt.name})")
    m = fmt.mantissa_bits
    sign = -1.0 if pattern >> (fmt.bits - 1) else 1.0
    exp_field = (pattern >> m) & (2**fmt.exponent_bits - 1)
    mant = pattern & (2**m - 1)
    top = 2**fmt.exponent_bits - 1
    if exp_field == top and fmt.has_inf:
        return math.nan if mant else sign * math.inf
    if exp_field == top and mant == 2**m - 1:  # the fn layout's only NaN
        return math.nan
    if exp_field == 0:
        return sign * math.ldexp(mant, fmt.emin - m)
    return sign * math.ldexp(2**m + mant, exp_field - fmt.bias - m)


def properties(name: str | Format | torch.dtype) -> dict:
    """The format's layout and derived values, in the order of ``format_table``."""
    f = get_format(name)
    return {
        "bits": f.bits,
        "exponent bits": f.exponent_bits,
        "mantissa bits": f.mantissa_bits,
        "bias": f.bias,
        "max": f.max,
        "smallest normal": f.smallest_normal,
        "smallest subnormal": f.smallest_subnormal,
        "machine epsilon": f.eps,
        "decimal digits": f.decimal_digits,
    }


def format_table(names=None, transpose: bool = False) -> tuple[list[str], list[list]]:
    """``(headers, rows)`` for ``ampbook.core.page.md_table``: one row per format (or,
    with ``transpose``, one row per property and one column per format)."""
    fmts = [get_format(n) for n in (FORMATS if names is None else names)]
    props = [properties(f) for f in fmts]
    if transpose:
        rows = [[k] + [p[k] for p in props] for k in props[0]]
        return ["property"] + [f.name for f in fmts], rows
    return ["format"] + list(props[0]), [
        [f.name, *p.values()] for f, p in zip(fmts, props)
    ]


def running_sum(values: torch.Tensor, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """Add ``values`` one at a time into an accumulator of ``dtype``; every partial
    sum.

    Shown on the page in chapter 1 (01_floating_point)."""
    values = values.to(device=device, dtype=dtype)
    acc, trace = torch.zeros((), dtype=dtype, device=device), []
    for v in values:
        acc = acc + v  # rounded to dtype after every addition
        trace.append(acc)
    return torch.stack(trace).double().cpu()
