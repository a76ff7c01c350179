"""SavedTensorMeter counts the bytes autograd keeps for backward; peak RSS helpers."""

import numpy as np
import pytest
import torch
from torch import nn

from ampbook.memory import OUTSIDE_MODEL, SavedTensorMeter, current_rss_bytes, peak_rss_bytes, reset_peak_rss


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
    x = torch.randn(16, 8, requires_grad=True)           # 512 bytes
    base = torch.randn(100)                              # 400 bytes of storage
    view_a, view_b = base[:10], base[50:]                # two views of one storage
    half = torch.randn(32).half()                        # 64 bytes
    with SavedTensorMeter() as meter:
        y = SaveThese.apply(x, view_a, view_b, half, x)  # x twice
    assert meter.total_bytes == 512 + 400 + 64
    assert meter.count == 3
    assert meter.by_dtype == {"float32": 912, "float16": 64}
    y.sum().backward()                                   # unpacking works
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
        return SaveThese.apply(y, torch.ones(10))         # saved by Block itself: 40 + 40 bytes


class Leaf(nn.Module):
    def forward(self, x):
        return SaveThese.apply(x, torch.ones(25))         # 40 + 100 bytes


def test_by_module_type_goes_to_the_innermost_running_module():
    model = Block()
    x = torch.randn(10, requires_grad=True)               # 40 bytes
    with SavedTensorMeter(model=model) as meter:
        out = model(x)
        SaveThese.apply(out, torch.ones(5))               # outside the model: 40 + 20 bytes
    assert meter.by_module_type == {"Leaf": 140, "Block": 80, OUTSIDE_MODEL: 60}
    assert sum(meter.by_module_type.values()) == meter.total_bytes
    # the hooks are gone afterwards
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert not model.inner._forward_hooks


def test_graphs_alive_together_count_twice_parameters_once():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    x = torch.randn(32, 64, requires_grad=True)
    with SavedTensorMeter(model=model) as one:
        out1 = model(x)
    with SavedTensorMeter(model=model) as two:
        out_a, out_b = model(x * 1), model(x * 2)
    assert one.parameter_bytes > 0
    assert two.parameter_bytes == one.parameter_bytes          # the same weights, once
    activations = one.total_bytes - one.parameter_bytes
    assert two.total_bytes - two.parameter_bytes == 2 * activations
    (out1.sum() + out_a.sum() + out_b.sum()).backward()


def test_erfnet_bf16_autocast_saves_less_and_splits_by_layer_type():
    from ampbook.model import ERFNet

    torch.manual_seed(0)
    model = ERFNet(19)
    x = torch.randn(1, 3, 32, 64)
    results = {}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        with SavedTensorMeter(model=model) as meter:
            with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                model(x).float().sum().backward()
        results[name] = meter
    fp32, bf16 = results["fp32"], results["bf16"]
    assert set(fp32.by_dtype) == {"float32", "int64"}  # int64: max-pool indices
    assert bf16.by_dtype.get("bfloat16", 0) > bf16.by_dtype.get("float32", 0)
    assert bf16.total_bytes < 0.8 * fp32.total_bytes
    for meter in (fp32, bf16):
        assert sum(meter.by_module_type.values()) == meter.total_bytes
        assert {"Conv2d", "BatchNorm2d", "ConvTranspose2d"} <= set(meter.by_module_type)
    # fp32 convolutions save the weights themselves; bf16 ones save bf16 copies instead
    conv_weight_bytes = sum(m.weight.numel() * 4 for m in model.modules() if isinstance(m, nn.Conv2d))
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
    before = peak_rss_bytes()
    block = np.ones(64 * 2**20, dtype=np.uint8)  # 64 MiB, touched
    assert peak_rss_bytes() >= before + 60 * 2**20 - 8 * 2**20
    del block
    assert reset_peak_rss()
    current = current_rss_bytes()
    assert peak_rss_bytes() <= current + 8 * 2**20
