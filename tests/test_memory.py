"""SavedTensorMeter counts the bytes autograd keeps for backward; peak RSS helpers."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from ampbook.chapters.ch3 import saving_verdict
from ampbook.measure.memory import (
    OUTSIDE_MODEL,
    Line,
    SavedTensorMeter,
    crossover_pixels,
    current_rss_bytes,
    fit_line,
    peak_rss_bytes,
    reset_peak_rss,
    saved_for_backward,
    saving,
    step_saving,
)


class SaveThese(torch.autograd.Function):
    """Saves exactly the tensors it is given (the test decides what autograd keeps)."""

    @staticmethod
    def forward(ctx, x, *extra):
        ctx.save_for_backward(x, *extra)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors  # unpacks through the hooks
        return (grad,) + (None,) * (len(ctx.needs_input_grad) - 1)


def test_counts_storage_bytes_once_per_storage():
    x = torch.randn(16, 8, requires_grad=True)  # 512 bytes, a leaf: by reference
    base = torch.randn(100)  # 400 bytes of storage
    view_a, view_b = base[:10], base[50:]  # two views of one storage
    half = torch.randn(32).half()  # 64 bytes
    with SavedTensorMeter() as meter:
        y = SaveThese.apply(x, view_a, view_b, half, x)  # x twice
    assert meter.total_bytes == 512 + 400 + 64
    assert meter.count == 3
    assert meter.parameter_bytes == 512 and meter.new_bytes == 400 + 64
    assert meter.by_dtype == {"float32": 400, "float16": 64}
    y.sum().backward()  # unpacking works
    assert x.grad is not None


def test_nothing_is_counted_without_autograd():
    with SavedTensorMeter() as meter, torch.no_grad():
        nn.Linear(8, 8)(torch.randn(4, 8))
    assert meter.total_bytes == 0 and meter.count == 0


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Leaf()

    def forward(self, x):
        y = self.inner(x)
        return SaveThese.apply(
            y, torch.ones(10)
        )  # saved by Block itself: 40 + 40 bytes


class Leaf(nn.Module):
    def forward(self, x):
        return SaveThese.apply(x, torch.ones(25))  # 40 + 100 bytes


def test_by_module_type_goes_to_the_innermost_running_module():
    model = Block()
    x = torch.randn(10, requires_grad=True)  # 40 bytes, a leaf: by reference
    with SavedTensorMeter(model=model) as meter:
        out = model(x)
        SaveThese.apply(out, torch.ones(5))  # outside the model: 40 + 20 bytes
    assert meter.by_module_type == {"Leaf": 100, "Block": 80, OUTSIDE_MODEL: 60}
    new = meter.new_bytes
    assert sum(meter.by_module_type.values()) == new == meter.total_bytes - 40
    # the hooks are gone afterwards
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert not model.inner._forward_hooks


def test_graphs_alive_together_count_twice_parameters_once():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    x = torch.randn(32, 64)  # not a leaf needing grad: saved as new memory like x * 1
    with SavedTensorMeter(model=model) as one:
        out1 = model(x)
    with SavedTensorMeter(model=model) as two:
        out_a, out_b = model(x * 1), model(x * 2)
    assert one.parameter_bytes > 0
    assert two.parameter_bytes == one.parameter_bytes  # the same weights, once
    assert two.new_bytes == 2 * one.new_bytes
    (out1.sum() + out_a.sum() + out_b.sum()).backward()


def test_erfnet_bf16_autocast_saves_less_and_splits_by_layer_type():
    from ampbook.segmentation.model import ERFNet

    torch.manual_seed(0)
    model = ERFNet(19)
    x = torch.randn(1, 3, 32, 64)
    results = {}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        with SavedTensorMeter(model=model) as meter:
            with torch.autocast(
                "cpu", dtype=dtype or torch.float32, enabled=dtype is not None
            ):
                model(x).float().sum().backward()
        results[name] = meter
    fp32, bf16 = results["fp32"], results["bf16"]
    assert set(fp32.by_dtype) == {"float32", "int64"}  # int64: max-pool indices
    assert bf16.by_dtype.get("bfloat16", 0) > bf16.by_dtype.get("float32", 0)
    assert bf16.total_bytes < 0.8 * fp32.total_bytes
    for meter in (fp32, bf16):
        assert sum(meter.by_module_type.values()) == meter.new_bytes
        assert {"Conv2d", "BatchNorm2d"} <= set(meter.by_module_type)
    # fp32 transposed convolutions save only their weights (by reference) and an input a
    # ReLU saved already; under bf16 they save a new bf16 copy of the weight
    assert "ConvTranspose2d" not in fp32.by_module_type
    assert bf16.by_module_type["ConvTranspose2d"] > 0
    # fp32 convolutions save the weights themselves; bf16 ones save bf16 copies instead
    conv_weight_bytes = sum(
        m.weight.numel() * 4 for m in model.modules() if isinstance(m, nn.Conv2d)
    )
    assert fp32.parameter_bytes >= conv_weight_bytes
    assert bf16.parameter_bytes < conv_weight_bytes / 10


def test_summary_is_json_serialisable():
    import json

    with SavedTensorMeter(model=nn.Linear(4, 4)) as meter:
        nn.Linear(4, 4)(torch.randn(2, 4, requires_grad=True))
    s = json.loads(json.dumps(meter.summary()))
    assert s["total_bytes"] == meter.total_bytes > 0


def test_peak_rss_sees_a_large_allocation_after_a_reset():
    if not reset_peak_rss():
        pytest.skip("this system cannot reset the peak RSS")
    import mmap

    before = peak_rss_bytes()
    # 64 MiB of fresh pages from the kernel, touched: malloc could hand back memory this
    # process freed earlier (still resident), which would not raise the peak
    block = mmap.mmap(-1, 64 * 2**20)
    np.frombuffer(block, dtype=np.uint8)[:] = 1
    assert peak_rss_bytes() >= before + 60 * 2**20 - 8 * 2**20
    block.close()
    assert reset_peak_rss()
    current = current_rss_bytes()
    assert peak_rss_bytes() <= current + 8 * 2**20


def _conv_net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 5, 1),
    )


def test_parameters_saved_by_reference_cost_nothing():
    # fp32 saves the conv weights as they are: no new bytes. bf16 autocast saves bf16
    # copies of them: new bytes, 2 per weight, at any input size.
    model = _conv_net()
    n_weights = sum(p.numel() for p in model.parameters())
    x, y = torch.randn(1, 3, 4, 4), torch.randint(0, 5, (1, 4, 4))
    fp32 = saved_for_backward(model, x, y)
    amp = saved_for_backward(model, x, y, "cpu", torch.bfloat16)
    assert fp32["parameter_bytes"] >= 4 * sum(
        m.weight.numel() for m in model if hasattr(m, "weight")
    )
    assert fp32["new_bytes"] == fp32["total_bytes"] - fp32["parameter_bytes"]
    assert amp["parameter_bytes"] < fp32["parameter_bytes"] / 10
    assert amp["by_dtype"]["bfloat16"] >= 2 * (
        n_weights - 64 - 64 - 5
    )  # weight copies (no biases)


def test_the_rule_autocast_costs_memory_small_saves_it_large():
    """Fixed weight copies against halved activations: a crossover in pixels."""
    model = _conv_net()
    points = {"fp32": [], "amp": []}
    for side in (4, 16, 64):
        x, y = torch.randn(1, 3, side, side), torch.randint(0, 5, (1, side, side))
        for key, dt in (("fp32", None), ("amp", torch.bfloat16)):
            points[key].append(
                (side * side, saved_for_backward(model, x, y, "cpu", dt)["new_bytes"])
            )
    small_f, small_a = points["fp32"][0][1], points["amp"][0][1]
    big_f, big_a = points["fp32"][-1][1], points["amp"][-1][1]
    assert saving(small_f, small_a) < 0 < saving(big_f, big_a)
    assert "cost" in saving_verdict(small_f, small_a) and "saved" in saving_verdict(
        big_f, big_a
    )
    peak = saving_verdict(small_f, small_a, measure="peak CUDA memory allocated")
    assert "more peak CUDA memory allocated than fp32" in peak and "copies" not in peak
    f, a = fit_line(points["fp32"][:2]), fit_line(points["amp"][:2])
    assert a.slope < f.slope and a.intercept > f.intercept
    cross = crossover_pixels(f, a)
    assert 16 < cross < 64 * 64
    assert f(cross) == pytest.approx(a(cross))
    assert step_saving(cross, f, a, n_params=1000) == pytest.approx(0.0, abs=1e-12)


def test_memory_helpers_reject_bad_input():
    with pytest.raises(ValueError, match="two different pixel counts"):
        fit_line([(10, 1), (10, 2)])
    with pytest.raises(ValueError, match="fp32_bytes must be positive"):
        saving(0, 1)
    assert crossover_pixels(Line(0, 1), Line(0, 2)) == math.inf
    assert crossover_pixels(Line(5, 1), Line(0, 1)) == 0.0


def test_fake_tensors_count_like_real_ones():
    # the cost model runs the meter on fake tensors (no data, no addresses): storages
    # are still told apart, and views of one storage counted once
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        base, other = torch.empty(100), torch.empty(25)
        with SavedTensorMeter() as meter:
            SaveThese.apply(
                torch.empty(4, requires_grad=True), base[:10], base[50:], other
            )
    assert meter.count == 3 and meter.new_bytes == 400 + 100
    assert meter.parameter_bytes == 16
