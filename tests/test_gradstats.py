"""ampbook.numerics.gradstats: fp16 fates of gradient values, log2 histograms, the
gradient recorder, fp16-gradient emulation (small modules only)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ampbook.chapters.ch4 import gradients as g4
from ampbook.numerics import gradstats as gs
from ampbook.numerics.formats import round_to


def log_uniform(n, lo=-40, hi=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    e = torch.rand(n, generator=g) * (hi - lo) + lo
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    return sign * torch.exp2(e)


def test_fp16_limits_come_from_the_format():
    assert (
        gs.FP16_MIN_SUBNORMAL
        == torch.finfo(torch.float16).smallest_normal * torch.finfo(torch.float16).eps
    )
    assert gs.FP16_MIN_NORMAL == torch.finfo(torch.float16).smallest_normal
    assert gs.FP16_MAX == torch.finfo(torch.float16).max
    # the two rounding thresholds, checked against torch's own cast
    lo, hi = torch.tensor(gs.FLUSH_AT_OR_BELOW), torch.tensor(gs.OVERFLOW_AT_OR_ABOVE)
    t = torch.stack(
        [
            lo,
            torch.nextafter(lo, torch.tensor(1.0)),
            torch.nextafter(hi, torch.tensor(0.0)),
            hi,
        ]
    )
    h = t.half()  # float32 -> float16, rounding to nearest even
    assert h[0] == 0 and h[1] > 0
    assert torch.isfinite(h[2]) and torch.isinf(h[3])


@pytest.mark.parametrize("scale", g4.SCALES)
def test_fp16_outcome_agrees_with_real_rounding(scale):
    g = torch.cat(
        [
            log_uniform(20000),
            torch.zeros(100),
            torch.tensor([math.inf, 2.0**-25, 2.0**-24]),
        ]
    )
    c = g4.fp16_outcome(g, scale)
    r = round_to(g * scale, "fp16")
    nz = torch.isfinite(g) & (g != 0)
    assert c["total"] == g.numel() and c["zero"] == 100 and c["nonfinite"] == 1
    assert c["nonzero"] == int(nz.sum())
    assert c["flushed"] == int((nz & (r == 0)).sum())
    assert c["overflow"] == int((nz & torch.isinf(r)).sum())
    assert c["below_min_subnormal"] == int((nz & ((g * scale).abs() < 2.0**-24)).sum())
    sub = nz & (r != 0) & (r.abs() < 2.0**-14)
    assert c["subnormal"] == int(sub.sum())


def test_scaling_moves_values_out_of_underflow_and_into_overflow():
    g = log_uniform(50000)
    fl = [g4.fp16_outcome(g, s)["flushed"] for s in g4.SCALES]
    ov = [g4.fp16_outcome(g, s)["overflow"] for s in g4.SCALES]
    assert fl == sorted(fl, reverse=True) and fl[0] > fl[-1]
    assert ov == sorted(ov) and ov[-1] > ov[0]


def test_bad_scales_are_refused():
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError, match="loss scale"):
            g4.fp16_outcome(torch.ones(3), bad)
    with pytest.raises(ValueError, match="at least one"):
        g4.GradientRecorder(nn.Linear(2, 2), scales=())


def test_log2_histogram_bins():
    g = torch.tensor([1.0, 1.5, -0.25, 3.0, 0.0, math.inf, 2.0**-70, 2.0**30])
    h = g4.log2_histogram(g, lo=-4, hi=4)
    assert h.tolist() == [1, 0, 1, 0, 2, 1, 0, 1]  # -70 clamped to -4, 30 clamped to 3
    assert int(h.sum()) == 6  # zero and inf are not counted
    with pytest.raises(ValueError, match="lo < hi"):
        g4.log2_histogram(g, lo=3, hi=3)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.act, self.fc2 = nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_recorder_captures_activation_and_weight_gradients():
    model = Tiny()
    x, y = torch.randn(4, 6), torch.tensor([0, 1, 2, 1])
    rec = g4.capture_gradients(model, [(x, y)], loss_fn=F.cross_entropy)
    assert all(p.grad is None for p in model.parameters())  # capture cleans up
    # the same gradients, by hand
    h1 = model.fc1(x)
    h1.retain_grad()
    a = model.act(h1)
    a.retain_grad()
    out = model.fc2(a)
    out.retain_grad()
    F.cross_entropy(out, y).backward()
    expect = {"Linear": [h1.grad, out.grad], "ReLU": [a.grad]}
    for layer_type, grads in expect.items():
        got = rec.groups[("activation", layer_type)]
        assert got.tensors == len(grads)
        for s in g4.SCALES:
            want = [g4.fp16_outcome(t, s) for t in grads]
            assert got.counts[s]["nonzero"] == sum(w["nonzero"] for w in want)
            assert got.counts[s]["flushed"] == sum(w["flushed"] for w in want)
    w = rec.groups[("weight", "Linear")]
    assert w.tensors == 4 and w.counts[1.0]["total"] == 6 * 5 + 5 + 5 * 3 + 3
    assert math.isclose(
        w.max_abs, max(float(p.grad.abs().max()) for p in model.parameters())
    )
    exps, counts = rec.histogram("activation")
    assert len(exps) == len(counts) and sum(counts) == sum(
        int(t.ne(0).sum()) for t in [h1.grad, a.grad, out.grad]
    )
    rows = rec.table("activation")
    assert {r[0] for r in rows} == {"Linear", "ReLU"} and len(rows[0]) == 4 + len(
        g4.SCALES
    )
    with pytest.raises(KeyError, match="no 'bias'"):
        rec.combined("bias")


def test_recorder_sees_flushing_in_tiny_gradients():
    model = Tiny()
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    # a loss multiplied by 2^-30 makes most gradients too small for fp16
    rec = g4.capture_gradients(
        model, [(x, y)], loss_fn=lambda o, t: F.cross_entropy(o, t) * 2.0**-30
    )
    fr = rec.fractions("activation")
    assert fr[1.0]["flushed"] > 0.5
    assert fr[2.0**16]["flushed"] < fr[1.0]["flushed"]


def test_emulation_rounds_gradients_to_fp16():
    model = Tiny()
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    small = lambda o, t: F.cross_entropy(o, t) * 2.0**-28  # noqa: E731
    model.zero_grad()
    small(model(x), y).backward()
    exact = [p.grad.clone() for p in model.parameters()]
    emu = gs.emulate_fp16_grads(model)
    model.zero_grad()
    with emu:
        out = model(x)
    small(out, y).backward()
    emu.remove()
    assert emu.counter.nonzero > 0 and emu.counter.flushed > 0
    for p, e in zip(model.parameters(), exact):
        assert torch.equal(p.grad, round_to(p.grad, "fp16"))  # on fp16's grid
        assert p.grad.abs().sum() < e.abs().sum()  # and values were lost
    # scaled by 2^20 first, nothing is lost any more; unscaled it matches fp32 closely
    model.zero_grad()
    emu = gs.emulate_fp16_grads(model)
    with emu:
        out = model(x)
    (small(out, y) * 2.0**20).backward()
    emu.remove()
    assert emu.counter.flushed == 0
    for p, e in zip(
        model.parameters(), exact
    ):  # fp16 rounding: ~2^-11 relative, normwise
        assert float((p.grad / 2.0**20 - e).norm() / e.norm()) < 2e-3


def test_emulation_overflows_to_inf():
    model = Tiny()
    emu = gs.emulate_fp16_grads(model)
    with emu:
        out = model(torch.randn(4, 6))
    (out.sum() * 1e6).backward()
    emu.remove()
    assert emu.counter.overflow > 0
    assert not all(torch.isfinite(p.grad).all() for p in model.parameters())


class _Residual(nn.Module):
    """conv branch + fp32 skip: under autocast the sum (and its gradient) is fp32."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + x)


def test_only_gradients_autocast_holds_in_fp16_count_as_fp16():
    from ampbook.measure import model_dtypes

    torch.manual_seed(0)
    model = nn.Sequential(_Residual(), nn.MaxPool2d(1), nn.Conv2d(3, 5, 1))
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 5, (2, 8, 8))
    low = model_dtypes.low_precision_layers(
        model, x
    )  # CUDA fp16 rules (fake tensors without a GPU)
    assert low == {"0.conv", "0.bn", "2"}  # the max-pool of the fp32 sum stays fp32
    rec = g4.capture_gradients(model, [(x, y)], scales=(1.0,), low_precision=low)
    assert rec.combined("activation").tensors == 3
    assert rec.combined("activation-fp32").tensors == 1
    calls = model_dtypes.low_precision_calls(model, x)
    ops = [op for op, _ in calls]
    assert (
        ("add", False) in calls
        and ("relu", False) in calls
        and ("conv2d", True) in calls
    )
    counts = {}
    for key, c in (("all", None), ("fp16 only", calls)):
        emu = gs.emulate_fp16_grads(model, calls=c)
        with emu:
            out = model(x)
        nn.functional.cross_entropy(out, y).backward()
        emu.remove()
        counts[key] = emu.counter.values
    per_tensor = 2 * 3 * 8 * 8
    # the fp32 add and relu (and the pool) keep their gradients unrounded
    assert counts["all"] - counts["fp16 only"] == 3 * per_tensor
    assert len(ops) == 6
    with pytest.raises(
        RuntimeError,
        match="call 0 of the forward is conv2d, the autocast trace has relu",
    ):
        with gs.emulate_fp16_grads(model, calls=[("relu", True)] + calls):
            model(x)


# ---- moving the histogram: chapter 4's estimate for a larger batch -------------------


def _recorder_with(values: torch.Tensor) -> g4.GradientRecorder:
    rec = g4.GradientRecorder(nn.Identity(), scales=(1.0, 8.0))
    rec.record("activation", "Test", values)
    return rec


def test_median_log2_reads_a_fraction_of_a_bin():
    # log-uniform magnitudes over [2^-30, 2^-19): the median of log2|g| is -24.5
    values = log_uniform(200_000, lo=-30, hi=-19, seed=3)
    rec = _recorder_with(values)
    assert g4.median_log2(rec, "activation") == pytest.approx(-24.5, abs=0.03)
    # one decade lower, the same median in bins: a shift of exactly -10 read back
    lower = _recorder_with(values * 2.0**-10)
    shift = g4.median_log2(lower, "activation") - g4.median_log2(rec, "activation")
    assert shift == pytest.approx(-10.0, abs=1e-9)
    with pytest.raises(ValueError, match="no nonzero"):
        g4.median_log2(_recorder_with(torch.zeros(4)), "activation")


def test_shifted_below_whole_and_fractional_bins():
    values = log_uniform(200_000, lo=-30, hi=-14, seed=4)
    rec = _recorder_with(values)
    a = values.abs()
    for bins in (0, 1, 3):
        got = g4.shifted_below(rec, "activation", bins, (1.0, 8.0))
        for s in (1.0, 8.0):
            # whole bins: a bin counts when all of it lands below 2^-24
            top = torch.exp2(torch.floor(torch.log2(a)) + 1)
            want = float((top * 2.0**-bins * s <= 2.0**-24).double().mean())
            assert got[s] == pytest.approx(want, abs=1e-12)
    # a fraction of a bin: close to moving the values themselves (log-uniform within
    # each bin, as the estimate assumes)
    got = g4.shifted_below(rec, "activation", 2.5, (1.0, 8.0))
    for s in (1.0, 8.0):
        want = float((a * 2.0**-2.5 * s < 2.0**-24).double().mean())
        assert got[s] == pytest.approx(want, abs=0.005)
    # further left, more below
    assert g4.shifted_below(rec, "activation", 3.7, (1.0,))[1.0] > got[1.0]
