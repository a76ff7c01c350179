"""ampbook.numerics.loss_scaling: training with fp16 gradients under no scaling, a fixed
scale and GradScaler's dynamic scale (small modules only)."""

import inspect
import math

import pytest
import torch
from torch import nn

from ampbook.chapters import ch4
from ampbook.numerics import loss_scaling as ls


def test_grad_scaler_defaults_are_read_from_torch():
    d = ch4.grad_scaler_defaults()
    sig = inspect.signature(torch.amp.GradScaler.__init__).parameters
    for k in ("init_scale", "growth_factor", "backoff_factor", "growth_interval"):
        assert d[k] == sig[k].default


def conv_net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1)
    )


def batches(n=4):
    g = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(2, 3, 8, 8, generator=g),
            torch.randint(0, 4, (2, 8, 8), generator=g),
        )
        for _ in range(n)
    ]


def test_dynamic_scaling_skips_overflowing_steps_and_backs_off():
    run = ls.train_with_scaling(
        conv_net(), batches(10), "dynamic", init_scale=2.0**22, growth_interval=2
    )
    assert run.scales[0] == 2.0**22
    assert run.skipped[0] and run.overflowed[0]
    assert run.scales[1] == 2.0**21  # backoff 0.5
    assert (
        run.skipped == run.overflowed
    )  # GradScaler skips exactly the overflowing steps
    assert not all(run.skipped) and run.weights_finite
    grew = [i for i in range(9) if run.scales[i + 1] == 2 * run.scales[i]]
    assert (
        grew and not run.skipped[grew[0]] and not run.skipped[grew[0] - 1]
    )  # after 2 clean steps
    assert len(run.losses) == len(run.scales) == len(run.flushed) == 10


def test_fixed_scale_without_check_breaks_the_weights_when_it_overflows():
    run = ls.train_with_scaling(conv_net(), batches(2), "fixed", scale=2.0**40)
    assert run.overflowed[0] and not run.weights_finite
    ok = ls.train_with_scaling(conv_net(), batches(2), "fixed", scale=8.0)
    assert not any(ok.overflowed) and ok.weights_finite and ok.scales == [8.0, 8.0]


def test_no_scaling_trains_and_matches_fp32_direction():
    model = conv_net()
    before = [p.detach().clone() for p in model.parameters()]
    run = ls.train_with_scaling(model, batches(3), "none")
    assert run.scales == [1.0] * 3 and not any(run.skipped)
    assert any(not torch.equal(p, b) for p, b in zip(model.parameters(), before))
    assert all(0 <= f <= 1 for f in run.flushed)


def test_real_fp16_autocast_mode_runs():
    run = ls.train_with_scaling(
        conv_net(), batches(2), "dynamic", fp16="autocast", init_scale=2.0**10
    )
    assert run.fp16 == "autocast" and math.isnan(run.flushed[0]) and run.weights_finite


def test_fp32_reference_mode_is_plain_fp32():
    a, b = conv_net(), conv_net()
    run = ls.train_with_scaling(a, batches(2), "none", fp16="off")
    assert math.isnan(run.flushed[0])
    opt = torch.optim.Adam(b.parameters(), lr=5e-4)
    crit = nn.CrossEntropyLoss(ignore_index=255)
    for x, y in batches(2):
        opt.zero_grad()
        crit(b(x), y).backward()
        opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_training_arguments_are_checked():
    with pytest.raises(ValueError, match="regime"):
        ls.train_with_scaling(conv_net(), batches(1), "static")
    with pytest.raises(ValueError, match="fp16"):
        ls.train_with_scaling(conv_net(), batches(1), "none", fp16="half")
    with pytest.raises(ValueError, match="growth_interval"):
        ls.train_with_scaling(conv_net(), batches(1), "dynamic", growth_interval=0)


def test_step_seconds_times_each_mode_and_leaves_no_hooks():
    model = conv_net()
    x, y = batches(1)[0]
    for mode in ls.FP16_MODES:
        t = ls.step_seconds(model, x, y, fp16=mode, warmup=0)
        assert 0 < t < 60
    assert all(p.grad is None and not p._backward_hooks for p in model.parameters())
    with pytest.raises(ValueError, match="repeats"):
        ls.step_seconds(model, x, y, repeats=0)


# ---- the runs side by side, and what they show ---------------------------------------


def _run(label, regime, fp16, losses, skipped=None, overflowed=None, finite=True):
    n = len(losses)
    return ls.ScalingRun(
        regime,
        fp16,
        label,
        losses=list(losses),
        scales=[2.0**16 / 2 ** min(i, 2) for i in range(n)]
        if regime == "dynamic"
        else [1.0] * n,
        skipped=list(skipped or [False] * n),
        flushed=[math.nan] * n,
        overflowed=list(overflowed or [False] * n),
        weights_finite=finite,
    )


def _runs(dyn_losses, none_losses=(2.0, 1.5, 1.2, 1.1)):
    ref = _run("fp32 reference", "none", "off", [2.0, 1.5, 1.2, 1.0])
    plain = _run("no scaling", "none", "autocast", none_losses)
    broken = _run(
        "fixed 2^16",
        "fixed",
        "autocast",
        [2.0, math.nan, math.nan, math.nan],
        finite=False,
    )
    dyn = _run(
        "dynamic (GradScaler)",
        "dynamic",
        "autocast",
        dyn_losses,
        skipped=[True, True, False, False],
        overflowed=[True, True, False, False],
    )
    return [ref, plain, broken, dyn]


def test_run_table_against_the_reference():
    runs = _runs([2.0, 2.0, 1.6, 1.4])
    headers, rows, formats = ch4.run_table(runs)
    assert headers == [
        "run",
        "final loss",
        "final - fp32",
        "largest difference",
        "overflow steps (skipped)",
    ]  # no emulation: no flushed column
    assert len(formats) == len(headers) and all(len(r) == len(headers) for r in rows)
    by = {r[0]: r for r in rows}
    assert by["dynamic (GradScaler)"][2] == pytest.approx(0.4)
    assert by["dynamic (GradScaler)"][3] == pytest.approx(0.5)
    assert by["dynamic (GradScaler)"][4] == "2 (2)"
    assert math.isnan(by["fixed 2^16"][2])  # weights lost: no difference to show
    runs[1].flushed = [0.01, 0.03, 0.02, 0.02]
    headers, rows, _ = ch4.run_table(runs)
    assert headers[-1] == "mean flushed" and rows[1][-1] == pytest.approx(0.02)


def test_scaling_verdict_names_the_run_furthest_from_fp32_both_ways():
    # GradScaler skipped 2 of 4 steps and ended furthest from the reference
    text = ch4.scaling_verdict(_runs([2.0, 2.0, 1.6, 1.4]))
    assert (
        "skipped 2 of 4 steps" in text and "Weights became NaN in: fixed 2^16" in text
    )
    assert "GradScaler's ended furthest from the fp32 reference (+4.00e-01" in text
    assert "its weights took 2 updates to the reference's 4" in text
    # another run ended further away: it is named, GradScaler's gap given beside it
    text = ch4.scaling_verdict(_runs([2.0, 2.0, 1.2, 1.05], [2.0, 1.5, 1.3, 1.3]))
    assert "no scaling ended furthest from the fp32 reference (+3.00e-01" in text
    assert "GradScaler's ended +5.00e-02 from it after skipping 2 of 4 steps" in text
