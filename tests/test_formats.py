"""ampbook.numerics.formats against torch.finfo, numpy and the IEEE-754 bit patterns."""

import math
import struct

import numpy as np
import pytest
import torch

from ampbook.numerics.formats import (
    FORMATS,
    bits,
    decode,
    encode,
    format_table,
    properties,
    round_to,
    spacing,
)

TORCH_FORMATS = [n for n, f in FORMATS.items() if f.torch_dtype is not None]
NARROW = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]  # torch dtypes narrower than float32
UINT = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}


def torch_bits(values: torch.Tensor, name: str) -> list[int]:
    """Bit patterns of torch's own cast, as unsigned ints."""
    fmt = FORMATS[name]
    raw = values.to(fmt.torch_dtype).view(UINT[fmt.bits]).to(torch.int64)
    return [int(v) % (1 << fmt.bits) for v in raw]


def wide_random(n: int, seed: int, low: int, high: int) -> torch.Tensor:
    """float32 values with random signs, mantissas and exponents in [low, high), plus
    exact ties (a quarter of them have few mantissa bits set, many on a midpoint)."""
    g = torch.Generator().manual_seed(seed)
    mant = torch.rand(n, generator=g) + 1.0
    # mantissas k / 2^j with few bits: exact ties for every format's precision
    j = torch.randint(1, 25, (n // 4,), generator=g)
    k = (torch.rand(n // 4, generator=g) * 2.0**j).floor()
    mant[: n // 4] = 1.0 + torch.ldexp(k, -j)
    exps = torch.randint(low, high, (n,), generator=g)
    signs = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    return signs * torch.ldexp(mant, exps)


# ---- the table of properties ---------------------------------------------------------


@pytest.mark.parametrize("name", TORCH_FORMATS)
def test_properties_match_torch_finfo(name):
    fmt, fi = FORMATS[name], torch.finfo(FORMATS[name].torch_dtype)
    assert fmt.bits == fi.bits
    assert fmt.max == fi.max
    assert -fmt.max == fi.min
    assert fmt.smallest_normal == fi.smallest_normal == fi.tiny
    assert fmt.eps == fi.eps
    # torch's resolution is 10**-floor(decimal digits)
    assert fi.resolution == pytest.approx(10.0 ** -math.floor(fmt.decimal_digits))


@pytest.mark.parametrize(
    "name,np_type", [("fp16", np.float16), ("fp32", np.float32), ("fp64", np.float64)]
)
def test_properties_match_numpy_finfo(name, np_type):
    fmt, fi = FORMATS[name], np.finfo(np_type)
    assert fmt.bits == fi.bits
    assert fmt.exponent_bits == fi.nexp
    assert fmt.mantissa_bits == fi.nmant
    assert fmt.max == float(fi.max)
    assert fmt.smallest_normal == float(fi.smallest_normal)
    assert fmt.smallest_subnormal == float(fi.smallest_subnormal)
    assert fmt.eps == float(fi.eps)
    assert fmt.emin == fi.minexp and fmt.emax + 1 == fi.maxexp
    assert math.floor(fmt.decimal_digits) == fi.precision


def test_smallest_subnormals_are_the_next_values_after_zero():
    for name in ["fp64", "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]:
        dtype = FORMATS[name].torch_dtype
        if dtype in (torch.float64, torch.float32):
            nxt = torch.nextafter(
                torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype)
            ).item()
        else:  # pattern 1 is the smallest subnormal
            nxt = (
                torch.tensor(
                    [1], dtype=torch.uint8 if FORMATS[name].bits == 8 else torch.int16
                )
                .view(dtype)
                .float()
                .item()
            )
        assert FORMATS[name].smallest_subnormal == nxt, name


def test_fp8_and_tf32_layouts():
    e4m3, e5m2, tf32 = FORMATS["fp8_e4m3"], FORMATS["fp8_e5m2"], FORMATS["tf32"]
    assert (e4m3.max, e4m3.smallest_subnormal, e4m3.has_inf) == (448.0, 2.0**-9, False)
    assert (e5m2.max, e5m2.smallest_subnormal, e5m2.has_inf) == (
        57344.0,
        2.0**-16,
        True,
    )
    # tf32: fp32's exponent, fp16's mantissa
    assert (
        tf32.bits == 19
        and tf32.emin == FORMATS["fp32"].emin
        and tf32.emax == FORMATS["fp32"].emax
    )
    assert tf32.eps == FORMATS["fp16"].eps
    assert tf32.max == 2.0**128 * (1 - 2.0**-11)
    assert FORMATS["fp32"].max == 2.0**128 * (1 - 2.0**-24)


def test_table_rows():
    headers, rows = format_table()
    assert headers[0] == "format" and len(rows) == len(FORMATS)
    assert [r[0] for r in rows] == list(FORMATS)
    headers_t, rows_t = format_table(["fp16", "bf16"], transpose=True)
    assert headers_t == ["property", "fp16", "bf16"]
    assert [r[0] for r in rows_t] == list(properties("fp16"))
    assert dict((r[0], r[1]) for r in rows_t)["max"] == 65504.0


# ---- bit patterns --------------------------------------------------------------------

KNOWN_BITS = [
    (1.0, "fp16", "0 01111 0000000000"),
    (-2.0, "fp16", "1 10000 0000000000"),
    (65504.0, "fp16", "0 11110 1111111111"),
    (2.0**-24, "fp16", "0 00000 0000000001"),
    (math.inf, "fp16", "0 11111 0000000000"),
    (-math.inf, "fp16", "1 11111 0000000000"),
    (math.nan, "fp16", "0 11111 1000000000"),
    (-0.0, "fp16", "1 00000 0000000000"),
    (1e6, "fp16", "0 11111 0000000000"),  # overflow to inf
    (1.0, "bf16", "0 01111111 0000000"),
    (-2.0, "bf16", "1 10000000 0000000"),
    (1.0, "tf32", "0 01111111 0000000000"),
    (1.0, "fp32", "0 01111111 00000000000000000000000"),
    (2.0**-9, "fp8_e4m3", "0 0000 001"),
    (448.0, "fp8_e4m3", "0 1111 110"),
    (1e6, "fp8_e4m3", "0 1111 110"),  # saturates, as torch's cast does
    (math.nan, "fp8_e4m3", "0 1111 111"),
    (1.0, "fp8_e4m3", "0 0111 000"),
    (2.0**-16, "fp8_e5m2", "0 00000 01"),
    (57344.0, "fp8_e5m2", "0 11110 11"),
    (math.inf, "fp8_e5m2", "0 11111 00"),
    (-0.0, "fp8_e5m2", "1 00000 00"),
]


@pytest.mark.parametrize("value,name,expected", KNOWN_BITS)
def test_bits_of_known_values(value, name, expected):
    assert bits(value, name) == expected
    back = decode(expected, name)
    rounded = round_to(torch.tensor([value], dtype=torch.float64), name).item()
    if math.isnan(rounded):
        assert math.isnan(back)
    else:
        assert back == rounded and math.copysign(1, back) == math.copysign(1, rounded)


@pytest.mark.parametrize(
    "value",
    [
        1.0,
        -2.0,
        0.1,
        1 / 3,
        65504.0,
        2.0**-1074,
        2.0**-1022,
        -0.0,
        1.7976931348623157e308,
        math.inf,
        -math.inf,
    ],
)
def test_fp64_and_fp32_bits_are_ieee_patterns(value):
    assert encode(value, "fp64") == struct.unpack("<Q", struct.pack("<d", value))[0]
    assert decode(encode(value, "fp64"), "fp64") == value
    with np.errstate(over="ignore"):
        v32 = float(np.float32(value))
    assert encode(value, "fp32") == struct.unpack("<I", struct.pack("<f", v32))[0]


def test_bits_agree_with_torch_casts_on_random_values():
    # Normal, subnormal and overflowing ranges of every narrow format, ties included.
    x = torch.cat(
        [
            wide_random(20_000, 1, -30, 18),
            torch.tensor([0.0, -0.0, math.inf, -math.inf]),
        ]
    )
    for name in NARROW:
        assert encode(x, name).tolist() == torch_bits(x, name), name
        few = x[::500].tolist()
        assert [encode(v, name) for v in few] == torch_bits(torch.tensor(few), name), (
            name
        )


def test_decode_every_pattern_matches_torch():
    for name in ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]:
        fmt = FORMATS[name]
        patterns = torch.arange(2**fmt.bits, dtype=torch.int64)
        values = patterns.to(UINT[fmt.bits]).view(fmt.torch_dtype).to(torch.float64)
        ours = torch.tensor(
            [decode(p, name) for p in patterns.tolist()], dtype=torch.float64
        )
        nan = values.isnan()
        assert torch.equal(ours.isnan(), nan), name
        assert torch.equal(ours[~nan], values[~nan]), name
        assert torch.equal(torch.signbit(ours[~nan]), torch.signbit(values[~nan])), name
        assert torch.equal(
            encode(values[~nan], name) % (1 << fmt.bits), patterns[~nan]
        ), name


def test_decode_errors():
    with pytest.raises(ValueError, match="16-bit"):
        decode("0101", "fp16")
    with pytest.raises(ValueError, match="16-bit"):
        decode("0 01111 000000000x", "fp16")
    with pytest.raises(ValueError, match="does not fit"):
        decode(256, "fp8_e4m3")
    with pytest.raises(TypeError):
        decode(1.5, "fp16")


# ---- rounding ------------------------------------------------------------------------


@pytest.mark.parametrize("name", NARROW)
def test_round_to_equals_torch_cast_float32(name):
    fmt = FORMATS[name]
    low = fmt.emin - fmt.mantissa_bits - 3  # below the smallest subnormal
    high = fmt.emax + 3  # past the largest value
    x = torch.cat(
        [
            wide_random(200_000, 2, low, high),
            torch.randn(20_000),
            torch.tensor(
                [
                    0.0,
                    -0.0,
                    math.inf,
                    -math.inf,
                    math.nan,
                    fmt.max,
                    -fmt.max,
                    fmt.smallest_subnormal / 2,
                    fmt.smallest_subnormal * 1.5,
                ]
            ),
        ]
    )
    ours = round_to(x, name)
    ref = x.to(fmt.torch_dtype).to(torch.float32)
    assert ours.dtype == torch.float32
    same = (ours == ref) | (ours.isnan() & ref.isnan())
    assert bool(same.all()), x[~same][:5]
    assert torch.equal(
        torch.signbit(ours[~ours.isnan()]), torch.signbit(ref[~ref.isnan()])
    )


@pytest.mark.parametrize("name", ["fp32", "tf32"] + NARROW)
def test_round_to_float64_path_equals_float32_path(name):
    fmt = FORMATS[name]
    x = wide_random(
        100_000, 3, fmt.emin - fmt.mantissa_bits - 3, min(fmt.emax + 3, 127)
    )
    r32 = round_to(x, name)
    r64 = round_to(x.double(), name)
    assert r64.dtype == torch.float64
    assert torch.equal(r32.double(), r64)


def test_round_to_float64_rounds_once_like_numpy():
    # 1 + 2^-11 + 2^-40 lies just above a tie: rounding once gives 1 + 2^-10, rounding
    # through float32 first (as torch's float64 -> float16 cast does) gives 1.
    x = np.array(
        [1 + 2.0**-11 + 2.0**-40, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 7e-8, 3e-8, 70000.0]
    )
    g = np.random.default_rng(4)
    y = np.concatenate(
        [x, g.standard_normal(50_000) * np.exp2(g.integers(-30, 18, 50_000))]
    )
    with np.errstate(over="ignore"):
        ref = y.astype(np.float16).astype(np.float64)
    ours = round_to(torch.from_numpy(y), "fp16").numpy()
    assert ours[0] == 1 + 2.0**-10 and ours[1] == 1.0 and ours[2] == 1 + 2.0**-9
    assert np.array_equal(ours, ref)


def test_fp32_from_float64_matches_torch_and_numpy():
    g = np.random.default_rng(5)
    y = g.standard_normal(50_000) * np.exp2(g.integers(-160, 130, 50_000))
    ours = round_to(torch.from_numpy(y), "fp32").numpy()
    with np.errstate(over="ignore"):
        assert np.array_equal(ours, y.astype(np.float32).astype(np.float64))
    assert np.array_equal(ours, torch.from_numpy(y).float().double().numpy())


def test_tf32_by_reasoning():
    x = torch.tensor(
        [
            1 + 2.0**-10,
            1 + 2.0**-11,
            1 + 3 * 2.0**-11,
            1 + 2.0**-11 + 2.0**-20,
            2.0**-126,
            2.0**-136,
            2.0**-137,
            FORMATS["fp32"].max,
        ]
    )
    expected = torch.tensor(
        [
            1 + 2.0**-10,  # representable
            1.0,  # a tie, to even
            1 + 2.0**-9,  # a tie, to even (upwards this time)
            1 + 2.0**-10,  # above the tie
            2.0**-126,  # smallest normal, same as fp32
            2.0**-136,  # smallest subnormal: 2^(-126-10)
            0.0,  # half of it: a tie, to even (zero)
            math.inf,
        ]
    )  # fp32's max is past tf32's max + half a step
    assert torch.equal(round_to(x, "tf32"), expected)
    # tf32 keeps the top 10 of fp32's 23 mantissa bits: the bit-pattern rule by hand
    b = wide_random(50_000, 6, -120, 120).view(torch.int32)
    by_hand = ((b + 0xFFF + ((b >> 13) & 1)) & ~0x1FFF).view(torch.float32)
    assert torch.equal(round_to(b.view(torch.float32), "tf32"), by_hand)


def test_overflow_rules():
    x = torch.tensor([460.0, 465.0, 1e6, math.inf, -1e6, math.nan])
    sat = round_to(x, "fp8_e4m3")
    assert sat[:5].tolist() == [448.0, 448.0, 448.0, 448.0, -448.0] and sat[5].isnan()
    nan = round_to(x, "fp8_e4m3", overflow="nan")
    assert nan[0] == 448.0 and nan[1:].isnan().all()  # 465 rounds to 480, past the top
    assert round_to(torch.tensor([65519.0, 65520.0]), "fp16").tolist() == [
        65504.0,
        math.inf,
    ]
    assert round_to(torch.tensor([1e6]), "fp16", overflow="saturate").item() == 65504.0
    with pytest.raises(ValueError, match="no infinity"):
        round_to(x, "fp8_e4m3", overflow="inf")
    with pytest.raises(ValueError, match="overflow rule"):
        round_to(x, "fp16", overflow="wrap")


def test_round_to_keeps_shape_and_device_and_rejects_bad_input():
    x = torch.randn(3, 4, 5)
    assert round_to(x, "bf16").shape == (3, 4, 5)
    assert round_to(x.t() if x.dim() == 2 else x.transpose(0, 2), "fp16").shape == (
        5,
        4,
        3,
    )
    assert round_to(x.half(), "fp16").dtype == torch.float32
    assert torch.equal(round_to(x, torch.float16), round_to(x, "fp16"))
    with pytest.raises(TypeError, match="floating-point"):
        round_to(torch.arange(3), "fp16")
    with pytest.raises(TypeError, match="torch.Tensor"):
        round_to([1.0], "fp16")


@pytest.mark.parametrize("bad", ["fp12", "float16", "", None, torch.int8])
def test_unknown_format_names_are_errors(bad):
    with pytest.raises(ValueError, match="known"):
        round_to(torch.ones(1), bad)
    with pytest.raises(ValueError):
        bits(1.0, bad)


# ---- spacing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,np_type", [("fp16", np.float16), ("fp32", np.float32), ("fp64", np.float64)]
)
def test_spacing_matches_numpy(name, np_type):
    g = np.random.default_rng(7)
    fmt = FORMATS[name]
    exps = g.integers(fmt.emin - fmt.mantissa_bits, fmt.emax, 20_000)
    x = (g.random(20_000) + 1.0) * np.exp2(exps.astype(np.float64))
    x = x.astype(np_type)  # on the grid, in range
    x = x[np.isfinite(x)]
    ours = spacing(torch.from_numpy(x.astype(np.float64)), name).numpy()
    ref = np.spacing(x).astype(np.float64)
    keep = x < fmt.max  # numpy gives inf at max (the next value would overflow)
    assert np.array_equal(ours[keep], ref[keep])


def test_spacing_special_values():
    s = spacing(
        torch.tensor([0.0, 1.0, -1.0, 65504.0, 1e6, math.inf, math.nan]), "fp16"
    )
    assert s[:4].tolist() == [2.0**-24, 2.0**-10, 2.0**-10, 32.0]
    assert s[4:].isnan().all()
    assert spacing(torch.tensor([1.0]), "tf32").item() == 2.0**-10
    assert spacing(torch.tensor([0.0]), "fp64").item() == 2.0**-1074
    assert spacing(torch.tensor([448.0, 449.0]), "fp8_e4m3").tolist()[0] == 32.0
    assert spacing(torch.tensor([500.0]), "fp8_e4m3").isnan().all()


# ---- chapter 1's measurements --------------------------------------------------------


def test_exact_powers_and_finfo_tables():
    from ampbook.chapters.ch1 import exact_powers_table, finfo_table

    headers, rows = exact_powers_table()
    fp16 = next(r for r in rows if r[0] == "fp16")
    assert fp16[1:] == ["$2^{15}(2-2^{-10})$", "$2^{-14}$", "$2^{-24}$", "$2^{-10}$"]
    e4m3 = next(r for r in rows if r[0] == "fp8_e4m3")
    assert e4m3[1] == "$2^{8}(2-2^{-2})$" and 2.0**8 * (2 - 2.0**-2) == 448
    _, rows = finfo_table()
    assert {r[0] for r in rows} >= {"fp16", "bf16", "fp32", "fp64"}
    assert all(r[-1] == "yes" for r in rows)


def test_running_sum_stalls_where_half_the_gap_exceeds_the_term():
    from ampbook.chapters.ch1 import stall_point
    from ampbook.numerics.formats import running_sum

    term = 2.0**-8
    values = torch.full((3000,), term, dtype=torch.float64)
    exact = running_sum(values, torch.float32)
    assert torch.equal(exact, values.cumsum(0))  # exact in fp32 at these sizes
    f16 = running_sum(values, torch.float16)
    stall = stall_point("fp16", term)
    assert (
        stall == 2.0**3
    )  # gap 2^-7 from 8 on: half of it equals the term, a tie to even
    assert f16[-1].item() == stall and f16.max().item() == stall
    assert stall_point("bf16", term) < stall  # fewer mantissa bits stall sooner


def test_lost_updates_and_their_onset():
    from ampbook.chapters.ch1 import loss_onset, lost_updates

    w = torch.tensor([1.0, 1.5])
    ratios = torch.tensor([2.0**9, 2.0**11, 2.0**12])
    frac = lost_updates(w, ratios, torch.float16)
    # 1 + 2^-9 exists; 1 + 2^-11 is a tie that goes to 1; 1.5 + 1.5 * 2^-11 rounds up
    assert frac == [0.0, 0.5, 1.0]
    assert loss_onset(ratios, frac) == (2.0**11, 2.0**12)
    assert all(f == 0 for f in lost_updates(w, ratios, torch.float32))
    assert math.isnan(loss_onset(ratios, [0.0, 0.0, 0.0])[0])


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"])
def test_cast_specials_probe_each_kind_with_torchs_own_cast(name):
    from ampbook.chapters.ch1 import SPECIAL_INPUTS, cast_specials, overflow_probe

    fmt = FORMATS[name]
    probe = overflow_probe(name)
    assert math.isfinite(probe) and probe > fmt.max
    out = cast_specials(fmt.torch_dtype)
    assert list(out) == list(SPECIAL_INPUTS)
    x = torch.tensor([probe, math.inf, -math.inf, math.nan])
    direct = x.to(fmt.torch_dtype).float().tolist()
    for (value, outcome), want in zip(out.values(), direct):
        assert value == want or (math.isnan(value) and math.isnan(want))
        if math.isnan(want):
            assert outcome == "NaN"
        elif abs(want) == fmt.max:
            assert outcome == ("+max" if want > 0 else "-max")
        elif math.isinf(want):
            assert outcome == ("+inf" if want > 0 else "-inf")
    assert out["NaN"][1] == "NaN"  # NaN has nowhere else to go
    if fmt.has_inf:  # IEEE-like formats keep their infinities
        assert out["+inf"][1] == "+inf" and out["-inf"][1] == "-inf"


def test_specials_rule_names_each_kind_apart():
    from ampbook.chapters.ch1 import specials_report, specials_rule

    saturate_all = {
        "finite overflow": "+max",
        "+inf": "+max",
        "-inf": "-max",
        "NaN": "NaN",
    }
    text = specials_rule("fp8_e4m3", saturate_all)
    assert text == (
        "fp8_e4m3: a finite value past 448 saturates to 448, inf saturates to 448, "
        "-inf saturates to -448, NaN stays NaN."
    )
    finite_only = dict(saturate_all, **{"+inf": "NaN", "-inf": "NaN"})
    text = specials_rule("fp8_e4m3", finite_only)
    assert "past 448 saturates to 448, inf becomes NaN, -inf becomes NaN" in text
    ieee = {"finite overflow": "+inf", "+inf": "+inf", "-inf": "-inf", "NaN": "NaN"}
    assert specials_rule("fp16", ieee) == (
        "fp16: a finite value past 65504 becomes inf, inf stays inf, -inf stays -inf, "
        "NaN stays NaN."
    )
    report = specials_report({"fp16": ieee, "fp8_e4m3": finite_only})
    assert report.startswith(f"torch {torch.__version__} on cpu:")
    assert report.count("\n- ") == 2


@pytest.mark.parametrize(
    "claimed, value, others, expected",
    [
        (
            1.7e38,
            3.4028234663852886e38,
            {"2^127": 2.0**127},
            "2 times too small; it equals 2^127",
        ),
        (6.55e4, 65504.0, {}, "agrees"),
        (9.765625e-4, 4.8828125e-4, {}, "2 times too large"),
        (2, 2.0, {}, "agrees"),
    ],
)
def test_claim_verdict(claimed, value, others, expected):
    from ampbook.chapters.ch1 import claim_verdict

    assert claim_verdict(claimed, value, others) == expected
