"""Chapter 3's runs fit a time budget: fewer epochs, then fewer images, fp32 twins."""

import pytest

from ampbook.runplan import RunPlan, epoch_seconds, fit_run, plan_runs, step_seconds
from ampbook.train import TrainConfig


def test_a_run_that_fits_is_left_alone():
    plan = fit_run("amp-bf16", 0.1, 24, 4, 8, 2, budget_s=30)
    assert plan == RunPlan("amp-bf16", 24, 4) and not plan.reduced


def test_a_slow_run_loses_epochs_first_then_images():
    per_epoch = epoch_seconds(1.0, 24, 8, 2)  # 12 steps + 4/3 val = 13.33 s
    assert per_epoch == pytest.approx(12 + 4 / 3)
    two = fit_run("amp-fp16", 1.0, 24, 4, 8, 2, budget_s=30)
    assert (two.train_images, two.epochs) == (24, 2) and "2 of 4 epochs" in two.note
    small = fit_run("amp-fp16", 3.0, 24, 4, 8, 2, budget_s=20)
    # 20 s - 4 s of validation leaves 5 steps of 3 s: 10 images, one epoch
    assert (small.train_images, small.epochs) == (
        10,
        1,
    ) and "10 of 24 images" in small.note
    floor = fit_run("amp-fp16", 100.0, 24, 4, 8, 2, budget_s=20)
    assert (floor.train_images, floor.epochs) == (4, 1)  # never below 2 batches


def test_plan_adds_one_fp32_twin_per_reduced_size():
    plans = plan_runs({"fp32": 0.1, "amp-bf16": 0.08, "amp-fp16": 3.0}, 24, 4, 8, 2, 20)
    assert [(p.precision, p.train_images, p.epochs) for p in plans] == [
        ("fp32", 24, 4),
        ("amp-bf16", 24, 4),
        ("amp-fp16", 10, 1),
        ("fp32", 10, 1),
    ]
    assert plans[-1].reduced and "amp-fp16" in plans[-1].note


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="fp32 step time is needed"):
        plan_runs({"amp-bf16": 1.0}, 24, 4, 8, 2, 20)
    with pytest.raises(ValueError, match="budget_s > 0"):
        fit_run("fp32", 1.0, 24, 4, 8, 2, budget_s=0)


def test_no_twin_when_the_baseline_has_that_size_already():
    plans = plan_runs({"fp32": 3.0, "amp-bf16": 3.0, "amp-fp16": 3.0}, 24, 4, 8, 2, 20)
    assert [(p.precision, p.train_images, p.epochs) for p in plans] == [
        ("fp32", 10, 1),
        ("amp-bf16", 10, 1),
        ("amp-fp16", 10, 1),
    ]


def test_step_seconds_times_each_runnable_precision():
    cfg = TrainConfig(device="cpu", height=16, width=32, batch_size=1, workers=0)
    got = step_seconds(cfg, ["fp32", "amp-bf16"])
    assert set(got) == {"fp32", "amp-bf16"} and all(0 < s < 60 for s in got.values())
