"""ampbook.measure.model_dtypes: layer and op traces, cast counting, parameter,
gradient and backward dtypes (small modules; fake CUDA tensors where there is no
GPU)."""

import torch
import torch.nn.functional as F
from torch import nn

from ampbook.chapters import ch4
from ampbook.measure import model_dtypes


class Twice(nn.Module):
    """Uses the same Linear twice: its weight is cast once per autocast region
    (cache)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(self.lin(x))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)) + x)


def small_net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 5, 1)
    )


def test_trace_layers_cpu():
    model = small_net()
    rows = model_dtypes.trace_layers(model, torch.randn(1, 3, 8, 8), "cpu")
    assert [r["type"] for r in rows] == ["Conv2d", "BatchNorm2d", "ReLU", "Conv2d"]
    assert rows[0]["inputs"] == ["float32"] and rows[0]["output"] == ["bfloat16"]
    assert rows[1]["inputs"] == ["bfloat16"] and rows[1]["output"] == ["bfloat16"]
    assert rows[3]["inputs"] == ["bfloat16"] and rows[3]["output"] == ["bfloat16"]
    assert all(r["params"] in ([], ["float32"]) for r in rows)  # weights stay fp32
    summary = ch4.summarize_by_type(rows)
    assert ("Conv2d", "bfloat16", "bfloat16", 1) in summary


def test_trace_layers_cuda_leaves_the_model_alone():
    model = small_net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = model_dtypes.trace_layers(model, (1, 3, 8, 8), "cuda")
    assert rows[0]["output"] == ["float16"] and rows[1]["output"] == ["float16"]
    assert rows[0]["params"] == ["float32"]
    for k, v in model.state_dict().items():
        assert v.device.type == "cpu" and torch.equal(v, before[k])


def test_trace_ops_sees_functional_ops_in_a_block():
    model = Residual()
    ops = model_dtypes.trace_ops(model, torch.randn(1, 3, 8, 8), "cpu")
    add = [r for r in ops if r["op"] in ("add", "__add__")]
    assert add and add[0]["module"] == "Residual"
    # bf16 conv branch + fp32 input: the sum is promoted to fp32
    assert sorted(add[0]["inputs"]) == ["bfloat16", "float32"] and add[0]["output"] == [
        "float32"
    ]
    assert any(r["op"] == "conv2d" and r["output"] == ["bfloat16"] for r in ops)


def test_cast_cache_casts_a_reused_weight_once_per_region():
    model = Twice()
    x = torch.randn(4, 8)
    cached = ch4.count_casts(model, x, "cpu")
    assert cached.parameter_casts == 2  # weight and bias, once
    assert cached.parameter_cast_bytes == (8 * 8 + 8) * 2  # bf16 copies
    uncached = ch4.count_casts(model, x, "cpu", cache_enabled=False)
    assert uncached.parameter_casts == 4  # cast at each use
    two_regions = ch4.count_casts(model, x, "cpu", forwards=2, one_region=False)
    assert two_regions.parameter_casts == 4  # the cache ends with the region
    one_region = ch4.count_casts(model, x, "cpu", forwards=2)
    assert one_region.parameter_casts == 2
    assert all(c.src == "float32" and c.dst == "bfloat16" for c in cached.casts)


def test_weights_and_grads_stay_fp32_under_autocast_but_not_after_half():
    model = small_net()
    x = torch.randn(2, 3, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    out.float().sum().backward()
    d = ch4.parameter_and_grad_dtypes(model)
    assert set(d["params"]) == {"float32"} and set(d["grads"]) == {"float32"}
    half = small_net().half()
    half(x.half()).float().sum().backward()
    d = ch4.parameter_and_grad_dtypes(half)
    assert set(d["params"]) == {"float16"} and set(d["grads"]) == {"float16"}


def test_saved_bytes_fp32_vs_autocast():
    model = small_net()
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 5, (2, 8, 8))
    from ampbook.measure.memory import saved_for_backward

    fp32 = saved_for_backward(model, x, y, "cpu")
    amp = saved_for_backward(model, x, y, "cpu", torch.bfloat16)
    assert set(fp32["by_dtype"]) - {"int64"} == {"float32"}  # int64: the loss's targets
    assert amp["by_dtype"].get("bfloat16", 0) > 0
    assert "Conv2d" in fp32["by_module_type"] and "Conv2d" in amp["by_module_type"]
    # the conv's input (1x... activations) is saved in half the bytes
    assert amp["by_module_type"]["BatchNorm2d"] < fp32["by_module_type"]["BatchNorm2d"]
    assert all(p.grad is None for p in model.parameters())


def test_backward_dtypes_show_low_precision_grads_cast_to_fp32():
    model = small_net()
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 5, (2, 8, 8))
    counts = ch4.backward_dtypes(model, x, y, "cpu")
    assert (
        counts[("convolution_backward", "bfloat16")] >= 2 * 2
    )  # two convs: input/weight/bias grads
    assert ("convolution_backward", "float32") not in counts
    assert (
        counts[("_to_copy", "float32")] >= 4
    )  # conv weights' and biases' grads back to fp32
    assert all(p.grad is None for p in model.parameters())
