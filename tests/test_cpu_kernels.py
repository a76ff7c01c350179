"""The CPU kernel probe (ampbook.measure.cpu_kernels): it times one convolution's three
passes per dtype, reads oneDNN's implementation names from its verbose lines, and says
which pass lost against fp32 and in which kernel."""

from __future__ import annotations

import pytest
import torch

from ampbook.measure import cpu_kernels as ck

# oneDNN 3.x verbose lines as a CPU with AVX-512 FP16 prints them for one fp16 3x1
# convolution (the case of issue 19: the weight gradient in the reference loop).
VERBOSE_V1 = """\
onednn_verbose,v1,info,oneDNN v3.7.1 (commit 8d263e6)
onednn_verbose,v1,primitive,exec,cpu,convolution,brg_conv_fwd:avx512_core_fp16,\
forward_training,src:f16::blocked:acdb::f0 wei:f16::blocked:Acdb32a::f0,,alg:\
convolution_direct,mb1_ic128oc128_ih64oh64kh3sh1dh0ph1_iw128ow128kw1sw1dw0pw0,0.25
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f16::blocked:abcd::f0
onednn_verbose,v1,primitive,exec,cpu,convolution,brg_conv_bwd_d:avx512_core_fp16,\
backward_data,src:f16::blocked:acdb::f0,,alg:convolution_direct,mb1_ic128oc128,0.31
onednn_verbose,v1,primitive,exec,cpu,convolution,ref:any,backward_weights,\
src:f16::blocked:abcd::f0,,alg:convolution_direct,mb1_ic128oc128,225.1
"""
# the older layout (oneDNN 2.x): no version or "primitive" fields
VERBOSE_V0 = "onednn_verbose,exec,cpu,convolution,jit:avx2,backward_data,src:f32\n"


def test_parse_verbose_names_each_pass_implementation():
    assert ck.parse_verbose(VERBOSE_V1) == {
        "forward": "brg_conv_fwd:avx512_core_fp16",
        "backward_data": "brg_conv_bwd_d:avx512_core_fp16",
        "backward_weights": "ref:any",
    }
    assert ck.parse_verbose(VERBOSE_V0) == {"backward_data": "jit:avx2"}
    assert ck.parse_verbose("no verbose output\n") == {}


def _probe(times_ms: dict, impls: dict) -> ck.ConvProbe:
    dtypes = {
        d: ck.DtypeProbe(
            d,
            {
                n: ck.PassTiming(n, times_ms[d][i] / 1e3, 3, impls[d][i])
                for i, n in enumerate(ck.PASSES)
            },
        )
        for d in times_ms
    }
    return ck.ConvProbe(128, 64, 128, (3, 1), 1, 1, 0.5, 2, True, dtypes)


def test_verdict_names_the_slow_pass_and_its_kernel():
    """The issue's CPU: fp16's forward and backward-data in JIT kernels, its weight
    gradient in oneDNN's reference loop, 750 times fp32's; bf16 faster than fp32."""
    probe = _probe(
        {"fp32": [0.4, 0.4, 0.3], "bf16": [0.2, 0.2, 0.3], "fp16": [0.3, 0.3, 225.0]},
        {
            "fp32": ["jit:avx512_core", "jit:avx512_core", "jit:avx512_core"],
            "bf16": ["brg:amx", "brg:amx", "brg:amx"],
            "fp16": ["brg:fp16", "brg:fp16", "ref:any"],
        },
    )
    assert probe.slowdown("fp16") == pytest.approx(225.6 / 1.1)
    assert probe.slowest_pass("fp16").name == "backward_weights"
    line = probe.verdict("fp16")
    assert line.startswith("fp16: the 128-channel 3x1 convolution at 128x64 ran 205x")
    assert "backward-weights 750x" in line
    assert "slowest against fp32: backward-weights, in oneDNN's reference" in line
    assert "(ref:any)" in line and "forward, backward-data in oneDNN's brg:fp16" in line
    bf16 = probe.verdict("bf16")
    assert "faster than in fp32" in bf16 and "slowest" not in bf16
    assert "all three passes in oneDNN's brg:amx" in bf16
    assert ck._impl_cell("brg_bwd:amx+brg_fwd:amx") == "brg_bwd:amx + brg_fwd:amx"
    assert ck._impl_cell(None) == "not read"
    rows = probe.rows()
    assert ("fp16", "backward-weights", 225.0, 750.0, "ref:any") in [
        (r[0], r[1], pytest.approx(r[2]), pytest.approx(r[3]), r[4]) for r in rows
    ]


def test_verdict_when_no_onednn_kernel_ran_and_when_a_dtype_failed():
    probe = _probe(
        {"fp32": [1.0, 1.0, 1.0], "bf16": [500.0, 15.0, 17.0]},
        {
            "fp32": ["jit:avx2"] * 3,
            "bf16": [ck.ATEN_FALLBACK] * 3,
        },
    )
    line = probe.verdict("bf16")
    assert "slowest against fp32: forward, in ATen's fallback" in line
    assert "all three passes in ATen's fallback (no oneDNN kernel)" in line
    failed = ck.ConvProbe(
        8,
        8,
        8,
        (3, 1),
        1,
        1,
        None,
        2,
        False,
        {**probe.dtypes, "fp16": ck.DtypeProbe("fp16", {}, "RuntimeError: no kernel")},
    )
    assert "did not run here (RuntimeError: no kernel)" in failed.verdict("fp16")
    with pytest.raises(ValueError, match="could not be probed"):
        failed.slowdown("fp16")
    with pytest.raises(KeyError, match="was not probed"):
        probe.verdict("fp8")


def test_a_real_probe_times_every_pass_and_restores_threads():
    torch.set_num_threads(2)  # not the probe's one: a failure to restore shows
    threads = torch.get_num_threads()
    probe = ck.probe_conv(channels=8, height=8, width=16, repeats=1, threads=1)
    assert torch.get_num_threads() == threads and probe.threads == 1
    assert list(probe.dtypes) == ["fp32", "bf16", "fp16"]
    for d, p in probe.dtypes.items():
        if p.error:
            continue
        assert set(p.passes) == set(ck.PASSES)
        assert all(t.seconds > 0 and t.calls >= 1 for t in p.passes.values())
        assert probe.verdict(d).startswith(f"{d}: the 8-channel 3x1 convolution")
    # PyTorch hands tiny fp32 convolutions to ATen's own kernel, and the probe says so
    tiny = {t.impl for t in probe.dtypes["fp32"].passes.values()}
    assert tiny <= {ck.ATEN_FALLBACK, None}


def test_at_the_default_size_fp32_runs_in_onednn_and_the_probe_reads_its_kernels():
    probe = ck.probe_conv(["fp32"], repeats=1)
    passes = probe.dtypes["fp32"].passes.values()
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch has no oneDNN")
    assert probe.impl_read
    assert all(t.impl and t.impl != ck.ATEN_FALLBACK for t in passes)
    assert "all three passes in oneDNN's" in probe.verdict("fp32")


def _rounds_probe(fp32_ms, bf16_ms) -> ck.ConvProbe:
    """A probe whose rounds (one time per round for every pass) are given."""

    def dtype(d, per_round):
        return ck.DtypeProbe(
            d,
            {
                n: ck.PassTiming(
                    n,
                    min(per_round) / 1e3,
                    len(per_round),
                    "jit",
                    tuple(x / 1e3 for x in per_round),
                )
                for n in ck.PASSES
            },
        )

    return ck.ConvProbe(
        64,
        32,
        64,
        (3, 1),
        1,
        1,
        2.0,
        2,
        True,
        {"fp32": dtype("fp32", fp32_ms), "bf16": dtype("bf16", bf16_ms)},
    )


def test_the_verdict_reads_the_median_of_the_rounds_and_prints_their_spread():
    """Three rounds at 1.8x, 1.26x and 1.42x faster: the old verdict printed the ratio
    of the fastest calls (here 1.8x) as if exact; the rounds' median is 1.42x, and a
    spread this wide says the size is unstable while the direction holds."""
    probe = _rounds_probe([1.0, 1.0, 1.0], [1 / 1.8, 1 / 1.26, 1 / 1.42])
    assert probe.round_ratios("bf16") == pytest.approx([1 / 1.8, 1 / 1.26, 1 / 1.42])
    assert probe.slowdown("bf16") == pytest.approx(1 / 1.42)
    line = probe.verdict("bf16")
    assert "ran 1.42x faster than in fp32 (median of 3 rounds" in line
    assert "time 0.556-0.794x fp32's" in line
    assert "its size is unstable here, its direction is not" in line
    assert "time over fp32's per pass: forward 0.704x" in line
    steady = _rounds_probe([1.0, 1.0, 1.0], [0.70, 0.71, 0.72])
    assert "unstable" not in steady.verdict("bf16")


def test_rounds_that_disagree_resolve_no_difference():
    probe = _rounds_probe([1.0, 1.0, 1.0], [0.9, 1.1, 1.05])
    line = probe.verdict("bf16")
    assert "faster than in fp32 in some rounds and slower in others" in line
    assert "no difference is resolved" in line and "ran 1.05x slower" not in line


def test_a_real_probe_takes_turns_in_rounds():
    probe = ck.probe_conv(["fp32", "bf16"], channels=8, height=8, width=16, repeats=3)
    for p in probe.dtypes.values():
        if p.error:
            continue
        assert all(len(t.samples) == 3 and t.calls == 3 for t in p.passes.values())
    if not probe.dtypes["bf16"].error:
        assert len(probe.round_ratios("bf16")) == 3
        assert "median of 3 rounds" in probe.verdict("bf16")


def test_a_slow_pass_is_timed_once():
    probe = ck.probe_conv(
        ["fp32"], channels=8, height=8, width=16, repeats=3, max_call_s=1e-9
    )
    assert all(t.calls == 1 for t in probe.dtypes["fp32"].passes.values())


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="channels must be a positive integer"):
        ck.probe_conv(channels=0)
    with pytest.raises(ValueError, match="kernel must be two positive sizes"):
        ck.probe_conv(kernel=(3,))
    with pytest.raises(ValueError, match="unknown dtype"):
        ck.probe_conv(["fp17"])
    assert ck.precision_dtype("amp-bf16") == "bf16"
    assert ck.precision_dtype("fp32") == "fp32"
