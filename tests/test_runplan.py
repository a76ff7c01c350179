"""Chapter 3's runs fit a time budget: fewer epochs, then fewer images, fp32 twins."""

import pytest

from ampbook.chapters.ch3.runplan import (
    RunPlan,
    epoch_seconds,
    fit_run,
    plan_runs,
    step_seconds,
)
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
    ) and "10 of the 24 training images" in small.note
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


def test_a_run_that_does_not_fit_even_small_trains_smaller_images():
    # 100 s a step at 128x256: two steps and validation fit 20 s only at 1/16 the pixels
    plan = fit_run("amp-fp16", 100.0, 24, 4, 8, 2, budget_s=20, size=(128, 256))
    assert (plan.height, plan.width) == (16, 32) and plan.epochs == 1
    assert plan.note.startswith("32x16 images: 1 epoch of the 4 planned, on")
    assert plan.size(128, 256) == (16, 32)
    step = 100.0 * 16 * 32 / (128 * 256)
    assert epoch_seconds(step, plan.train_images, 8, 2) <= 20
    # without the chapter's size nothing shrinks (the old behaviour)
    assert fit_run("amp-fp16", 100.0, 24, 4, 8, 2, budget_s=20).height is None
    # a run that fits at full size keeps it
    assert fit_run("fp32", 0.1, 24, 4, 8, 2, 20, size=(128, 256)).size(128, 256) == (
        128,
        256,
    )


def test_plan_pairs_a_shrunk_run_with_an_fp32_twin_and_says_how_it_was_timed():
    from ampbook.chapters.ch3.runplan import StepEstimate

    est = {
        "fp32": StepEstimate("fp32", 0.5, (128, 256)),
        "amp-fp16": StepEstimate("amp-fp16", 100.0, (32, 64), True, "fp16: slow"),
    }
    plans = plan_runs(est, 24, 4, 8, 2, 20, size=(128, 256))
    fp16, twin = plans[1], plans[2]
    assert (fp16.height, fp16.width) == (16, 32)
    assert "a step at 256x128 would take about 100 s here (a 64x32 step" in fp16.note
    assert (twin.precision, twin.height, twin.width) == ("fp32", 16, 32)
    assert (twin.train_images, twin.epochs) == (fp16.train_images, fp16.epochs)


def test_slow_precisions_come_from_the_probe():
    from ampbook.chapters.ch3.runplan import slow_precisions
    from ampbook.measure import cpu_kernels as ck

    def probe(bf16_ms, fp16_ms):
        times = {"fp32": 1.0, "bf16": bf16_ms, "fp16": fp16_ms}
        return ck.ConvProbe(
            64,
            32,
            64,
            (3, 1),
            1,
            1,
            None,
            2,
            True,
            {
                d: ck.DtypeProbe(
                    d, {n: ck.PassTiming(n, t / 1e3, 3, "jit") for n in ck.PASSES}
                )
                for d, t in times.items()
            },
        )

    slow = slow_precisions(probe(1.5, 300.0), ["fp32", "amp-bf16", "amp-fp16"])
    assert list(slow) == ["amp-fp16"] and slow["amp-fp16"].startswith("fp16: the")
    assert slow_precisions(None, ["fp32", "amp-fp16"]) == {}


def test_estimate_steps_times_a_slow_precision_small_and_scales_it():
    from ampbook.chapters.ch3.runplan import estimate_steps

    cfg = TrainConfig(device="cpu", height=16, width=32, batch_size=1, workers=0)
    got = estimate_steps(cfg, ["fp32", "amp-bf16"], {"amp-bf16": "why"})
    assert got["fp32"].measured_at == (16, 32) and not got["fp32"].scaled
    bf16 = got["amp-bf16"]
    assert bf16.measured_at == (8, 16) and bf16.scaled and bf16.reason == "why"
    assert bf16.seconds > 0
