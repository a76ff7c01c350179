"""booktools.layers: per-module profiler times beside the cost model, on the CPU
and
(marked cuda) on a GPU; and the CUDA training runner's memory fields."""

import pytest
import torch

from ampbook.predict.roofline import Ceilings
from ampbook.predict.steptrace import LOSS
from ampbook.results import read_layer_profile, read_loader, summarise_run

CEIL = Ceilings(
    "test ceilings",
    {"float32": 1.0, "bfloat16": 1.0, "float16": 1.0},
    vector_tflops=1.0,
    bandwidth_gbs=100.0,
)


@pytest.fixture(scope="module")
def cpu_profile():
    from booktools.layers import profile_layers

    return profile_layers(
        "fp32", 1, 16, 32, "cpu", steps=1, warmup=1, timed_steps=1, ceilings=CEIL
    )


def test_cpu_profile_attributes_time_to_the_cost_models_modules(cpu_profile):
    from ampbook.predict.roofline import predict
    from ampbook.predict.steptrace import trace_step
    from ampbook.segmentation.model import ERFNet

    rec = cpu_profile
    prof = read_layer_profile(rec, "cpu profile")
    assert prof.time_source == "cpu" and prof.ceilings == "test ceilings"
    expected = {
        r["scope"] for r in predict(trace_step(ERFNet(19), 1, 16, 32), CEIL).by_scope()
    }
    scopes = {x["scope"] for x in rec["layers"]}
    assert expected <= scopes
    convs = [x for x in rec["layers"] if x["type"] == "Conv2d"]
    assert all(x["forward_s"] > 0 for x in convs)
    # the backward pass of the convolutions is attributed through the autograd sequence
    # numbers
    assert sum(x["backward_s"] > 0 for x in convs) >= len(convs) // 2
    loss = next(x for x in rec["layers"] if x["scope"] == LOSS)
    assert loss["forward_s"] > 0 and loss["backward_s"] > 0
    assert rec["predicted_step_s"] == pytest.approx(
        predict(trace_step(ERFNet(19), 1, 16, 32), CEIL).min_step_s
    )


def test_profile_rejects_bad_sizes():
    from booktools.layers import profile_layers

    with pytest.raises(ValueError, match="height must be a positive integer"):
        profile_layers("fp32", 1, 0, 32, "cpu")


def test_loader_record_is_a_results_record(tmp_path):
    from ampbook.results import read_file
    from ampbook.segmentation.synthetic import synthetic_root
    from booktools.layers import loader_record, save_json

    root = synthetic_root(train=2, val=0, height=32, width=64)
    rec = loader_record(
        root=root, height=16, width=32, workers=(0,), batch_size=1, passes=1
    )
    sweep = read_loader(rec, "x")
    assert [p.workers for p in sweep.points] == [0] and sweep.images == 2
    assert read_file(save_json(rec, tmp_path / "loader_x.json")).points == sweep.points


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "amp-fp16"])
def test_cuda_profile_measures_kernel_time(precision):
    from booktools.layers import profile_layers

    rec = profile_layers(
        precision, 2, 64, 128, "cuda", steps=2, warmup=2, timed_steps=3
    )
    prof = read_layer_profile(rec, "cuda profile")
    assert prof.time_source == "cuda" and prof.device.startswith("cuda")
    convs = [x for x in prof.layers if x.type == "Conv2d"]
    assert all(x.measured_s > 0 for x in convs)
    # kernel time attributed to modules cannot exceed the wall time of the step by much
    assert 0 < prof.measured_total_s < 3 * prof.step_s
    assert prof.predicted_step_s > 0


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "amp-fp16", "amp-bf16"])
def test_cuda_training_run_records_memory(precision):
    from ampbook.train import TrainConfig, run_training

    rec = run_training(
        TrainConfig(
            precision=precision,
            device="cuda",
            height=64,
            width=128,
            batch_size=2,
            epochs=2,
            workers=0,
            synthetic_train=4,
            synthetic_val=2,
            checkpoint=False,
            quiet=True,
        )
    )
    run = summarise_run(rec)
    assert run.is_cuda and run.memory_measure == "peak CUDA allocated"
    assert run.memory_bytes > 0 and run.cuda_reserved_bytes >= run.cuda_allocated_bytes
    assert run.step_s > 0 and run.epoch_s >= run.step_s
    if precision == "amp-fp16":
        assert rec["epochs"][-1]["loss_scale"] is not None
    assert torch.cuda.max_memory_allocated() > 0
