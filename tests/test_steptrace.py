"""The cost model on common networks (ResNet-50, MobileNetV3, ViT-B/16, ERFNet): its
matrix FLOPs against PyTorch's own counter forward and backward, every operator of
their steps modelled, and an operator it does not know reported, never counted as 0."""

from __future__ import annotations

import math

import pytest
import torch
import torchvision.models as tvm
from torch import nn
from torch.utils.flop_counter import (
    FlopCounterMode,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

from ampbook.predict.opcost import op_is_modelled
from ampbook.predict.roofline import Ceilings, predict
from ampbook.predict.steptrace import trace_step
from ampbook.segmentation.model import ERFNet

aten = torch.ops.aten

# name: (builder, height, width); torchvision models without weights (nothing is
# downloaded), batch 1 at small sizes (ViT-B/16 needs its 224 x 224).
MODELS = {
    "resnet50": (lambda: tvm.resnet50(weights=None), 64, 64),
    "mobilenet_v3_large": (lambda: tvm.mobilenet_v3_large(weights=None), 64, 64),
    "mobilenet_v3_small": (lambda: tvm.mobilenet_v3_small(weights=None), 64, 64),
    "vit_b_16": (lambda: tvm.vit_b_16(weights=None), 224, 224),
    "erfnet": (lambda: ERFNet(5), 32, 64),
}

# FlopCounterMode has formulas for the CUDA attention kernels, not for the CPU one a
# CPU run dispatches: give it torch's own formulas for that kernel too.
_CPU_SDPA = {
    aten._scaled_dot_product_flash_attention_for_cpu: (
        lambda q, k, v, *args, out_shape=None, **kwargs: sdpa_flop_count(q, k, v)
    ),
    aten._scaled_dot_product_flash_attention_for_cpu_backward: (
        lambda g, q, k, v, *args, out_shape=None, **kwargs: sdpa_backward_flop_count(
            g, q, k, v
        )
    ),
}


def _grouped_weight_grad_excess(model: nn.Module, x: torch.Tensor) -> int:
    """FLOPs by which FlopCounterMode overcounts grouped convolutions' weight gradients.

    It counts a grouped convolution's weight gradient as if the convolution were dense
    (``C_in`` input channels per output channel instead of ``C_in / groups``): groups
    times what is computed. The excess of each is ``(groups - 1) / groups`` of that
    dense count, found here from the layers' output shapes."""
    excess = 0
    shapes = []
    hooks = [
        m.register_forward_hook(lambda m, a, o: shapes.append((m, o.shape)))
        for m in model.modules()
        if isinstance(m, nn.Conv2d) and m.groups > 1
    ]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    for m, out in shapes:
        n, c_out, h, w = out
        dense = 2 * n * h * w * c_out * m.in_channels * math.prod(m.kernel_size)
        excess += dense - dense // m.groups
    return excess


@pytest.fixture(scope="module", params=list(MODELS))
def counted(request):
    build, height, width = MODELS[request.param]
    torch.manual_seed(0)
    model = build()
    x = torch.randn(1, 3, height, width)
    with FlopCounterMode(display=False, custom_mapping=_CPU_SDPA) as counter:
        y = model(x)
        forward = counter.get_total_flops()
        y.float().sum().backward()
    model.zero_grad(set_to_none=True)
    return {
        "name": request.param,
        "model": model,
        "x": x,
        "trace": trace_step(model, 1, height, width, loss="sum"),
        "forward": forward,
        "backward": counter.get_total_flops() - forward,
    }


def _mma(trace, phase):
    return sum(o.mma_flops for o in trace.ops if o.phase == phase)


def test_forward_flops_equal_torch_flop_counter(counted):
    assert _mma(counted["trace"], "forward") == counted["forward"] > 0


def test_backward_flops_equal_torch_flop_counter(counted):
    # equal to the counter's, less its overcount of grouped convolutions (MobileNetV3's
    # depthwise layers; none in the other three)
    excess = _grouped_weight_grad_excess(counted["model"], counted["x"])
    assert (excess > 0) == counted["name"].startswith("mobilenet")
    assert _mma(counted["trace"], "backward") == counted["backward"] - excess > 0


def test_every_operator_of_the_step_is_modelled(counted):
    trace = counted["trace"]
    assert all(o.modelled for o in trace.ops)
    pred = predict(trace, CEIL)
    assert pred.unmodelled == []


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "vit_b_16"])
def test_amp_trace_runs_the_matrix_work_in_fp16(name):
    build, height, width = MODELS[name]
    trace = trace_step(build(), 1, height, width, "amp-fp16")
    mma = [o for o in trace.ops if o.mma_flops]
    assert {o.dtype for o in mma} == {"float16"}
    assert all(o.modelled for o in trace.ops)
    ops = {o.op for o in trace.ops}
    if name == "vit_b_16":
        assert {"native_layer_norm", "gelu", "addmm"} <= ops
        assert any("scaled_dot_product" in op for op in ops)
        assert "native_layer_norm_backward" in ops and "gelu_backward" in ops
    else:
        assert {"hardswish_", "hardsigmoid", "mean"} <= ops
        assert {"hardswish_backward", "hardsigmoid_backward"} <= ops


def test_attention_flops_by_hand_and_against_the_math_kernel():
    # two sequences, one head, 4 queries and 6 keys of dimension 8: the scores Q K^T
    # are 4 x 6 x 8 multiply-adds per sequence, P V as many
    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Parameter(torch.randn(2, 1, 4, 8))
            self.k = nn.Parameter(torch.randn(2, 1, 6, 8))
            self.v = nn.Parameter(torch.randn(2, 1, 6, 8))

        def forward(self, x):
            out = nn.functional.scaled_dot_product_attention(self.q, self.k, self.v)
            return out.sum() + x.sum()

    model = Attention()
    trace = trace_step(model, 1, 2, 2, loss=lambda y: y)
    fused = [o for o in trace.ops if "scaled_dot_product" in o.op]
    assert [o.phase for o in fused] == ["forward", "backward"]
    scores = 2 * 4 * 6
    assert _mma(trace, "forward") == fused[0].mma_flops == 2 * scores * (8 + 8)
    # backward: the scores again, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q
    assert _mma(trace, "backward") == fused[1].mma_flops == 2 * scores * 5 * 8
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # the unfused kernel's matrix products, counted by torch: the same forward
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, 2, 2))
    assert counter.get_total_flops() == _mma(trace, "forward")


CEIL = Ceilings("test", {"float32": 10.0}, vector_tflops=5.0, bandwidth_gbs=500.0)


class Planted(nn.Module):
    """A convolution, then an operator the cost model has no FLOPs for (lgamma)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.lgamma(self.conv(x).abs() + 1)


def test_an_unknown_operator_is_named_with_its_share_not_counted_as_zero():
    assert not op_is_modelled("lgamma") and op_is_modelled("addmm")
    trace = trace_step(Planted(), 2, 8, 8, loss="sum")
    pred = predict(trace, CEIL)
    rows = {r["op"]: r for r in pred.unmodelled}
    # lgamma forward, and its gradient through digamma backward
    assert set(rows) == {"lgamma", "digamma"}
    lgamma = rows["lgamma"]
    assert lgamma["count"] == 1 and lgamma["phases"] == ["forward"]
    assert lgamma["scopes"] == ["Planted"]
    assert lgamma["bytes"] == 2 * (2 * 4 * 8 * 8 * 4)  # reads and writes fp32
    assert 0 < lgamma["bytes_share"] < 1
    (op,) = [o for o in trace.ops if o.op == "lgamma"]
    assert not op.modelled and op.flops == 0 and op.bytes == lgamma["bytes"]
    assert {r["op"] for r in pred.unmodelled} == {"lgamma", "digamma"}
    assert [r["op"] for r in pred.unmodelled] == ["lgamma", "digamma"]
    share = sum(r["time_share"] for r in pred.unmodelled)
    assert 0 < share < 1
    assert share == pytest.approx(
        sum(t.time_s for t in pred.times if not t.op.modelled)
        / sum(t.time_s for t in pred.times)
    )


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "vit_b_16", "convnext_tiny"])
def test_cpu_amp_trace_has_cuda_autocasts_dtypes(name):
    # the CPU trace's convolutions, linear layers and layer norms have the dtypes and
    # FLOPs CUDA's autocast gives them (fake CUDA tensors, forward only). Attention is
    # left out: without a GPU the fake CUDA trace cannot pick a fused kernel.
    build, height, width = {
        **MODELS,
        "convnext_tiny": (lambda: tvm.convnext_tiny(weights=None), 64, 64),
    }[name]
    model = build()
    cpu = trace_step(model, 1, height, width, "amp-fp16", backward=False)
    cuda = trace_step(
        model, 1, height, width, "amp-fp16", backward=False, device_type="cuda"
    )
    kept = ("convolution", "addmm", "mm", "native_layer_norm")

    def ops(trace):
        return [
            (o.scope, o.op, o.dtype, o.mma_flops) for o in trace.ops if o.op in kept
        ]

    assert ops(cpu) == ops(cuda) and len(ops(cpu)) > 50
    assert {o.dtype for o in cpu.ops if o.mma_flops} == {"float16"}
    norms = {d for _, op, d, _ in ops(cpu) if op == "native_layer_norm"}
    if name == "vit_b_16":  # the layer norms read the fp32 residual stream
        assert norms == {"float32"}
    elif name == "convnext_tiny":
        # CUDA's autocast runs layer norm in fp32 even on an fp16 input; CPU autocast's
        # own rules would leave ConvNeXt's block norms (after a depthwise conv) in fp16
        assert norms == {"float32"}
        plain = trace_step(
            model, 1, height, width, "amp-fp16", backward=False, autocast_rules="cpu"
        )
        assert {o.dtype for o in plain.ops if o.op == "native_layer_norm"} == {
            "float16",
            "float32",
        }
    else:
        c, g = cpu.totals()["bytes"], cuda.totals()["bytes"]
        assert abs(c - g) <= 0.01 * g


@pytest.mark.parametrize("precision", ["fp32", "amp-bf16"])
def test_trace_predicts_the_bytes_saved_for_backward(precision):
    # the trace's saved-tensor meter (fake tensors) against the meter on a real forward
    # under CPU autocast: equal in fp32; under AMP within 0.5% (the fake batch norm
    # keeps its saved mean and inverse std in the activation's dtype, the CPU kernel in
    # fp32)
    from ampbook.measure.memory import saved_for_backward

    build, height, width = MODELS["mobilenet_v3_small"]
    torch.manual_seed(0)
    model = build()
    predicted = trace_step(model, 2, height, width, precision).saved_tensors
    dtype = None if precision == "fp32" else torch.bfloat16
    x, y = torch.randn(2, 3, height, width), torch.zeros(2, dtype=torch.long)
    measured = saved_for_backward(model.train(), x, y, "cpu", dtype)
    assert predicted["count"] == measured["count"] > 100
    assert predicted["parameter_bytes"] == measured["parameter_bytes"]
    if precision == "fp32":
        assert predicted == measured
    else:
        assert predicted["new_bytes"] == pytest.approx(measured["new_bytes"], rel=5e-3)
        assert predicted["new_bytes"] != measured["new_bytes"]


def test_a_trace_is_kept_and_read_back_only_for_code_its_key_sees(
    tmp_path, monkeypatch
):
    """A model of ampbook's or torchvision's is traced once: the next trace of the
    same model and arguments is the kept file; another setting of the model (ERFNet's
    16-bit stream), size or precision is another file; a user's module, a hook or a
    loss function is traced every time; no cache folder costs time only."""
    import dataclasses
    import json

    monkeypatch.setenv("AMPBOOK_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "steptrace" / "older").mkdir(parents=True)
    first = trace_step(ERFNet(20), 1, 16, 32, "amp-fp16")
    (kept,) = (tmp_path / "cache" / "steptrace").iterdir()  # the older one removed
    (path,) = kept.iterdir()
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "parameters": -1}))  # marked: read back?
    again = trace_step(ERFNet(20), 1, 16, 32, "amp-fp16")
    assert again.parameters == -1 and dataclasses.replace(again, parameters=0) == (
        dataclasses.replace(first, parameters=0)
    )
    with torch.no_grad(), pytest.raises(ValueError, match="nothing to trace"):
        trace_step(ERFNet(20), 1, 16, 32, "amp-fp16")  # traced, not read back
    for model, args in (
        (ERFNet(20, fp16_stream=True), (1, 16, 32, "amp-fp16")),
        (ERFNet(20), (2, 16, 32, "amp-fp16")),
        (ERFNet(20), (1, 16, 32, "amp-bf16")),
    ):
        assert trace_step(model, *args).parameters > 0  # traced, not the marked file
    assert len(list(kept.iterdir())) == 4

    class Head(nn.Module):  # a user's module: its code is not in the key
        def forward(self, x):
            return x * 2

    hooked = ERFNet(20)
    hooked.register_forward_hook(lambda m, i, o: o)
    for model, loss in (
        (nn.Sequential(ERFNet(20), Head()), "cross_entropy"),
        (hooked, "cross_entropy"),
        (ERFNet(20), lambda y: y.float().sum()),
    ):
        assert trace_step(model, 1, 16, 32, "amp-fp16", loss=loss).parameters > 0
    assert len(list(kept.iterdir())) == 4
    monkeypatch.setenv("AMPBOOK_CACHE", str(path))  # a file: no folder to keep it in
    assert trace_step(ERFNet(20), 1, 16, 32, "amp-fp16").ops == first.ops
