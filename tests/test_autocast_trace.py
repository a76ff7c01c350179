"""ampbook.measure.autocast_trace: documented op lists, dispatcher registrations, op
probes, layer and op traces, cast counting (small modules; fake CUDA tensors where there
is no GPU)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ampbook.measure import autocast_trace as at


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


def test_documented_lists_have_the_known_ops_and_a_source():
    cpu, cuda = at.documented_ops("cpu"), at.documented_ops("cuda")
    assert set(cpu) == set(cuda) == set(at.CATEGORIES)
    assert "conv2d" in cpu["lower_precision"] and "conv2d" in cuda["lower_precision"]
    assert "softmax" in cuda["float32"] and "softmax" not in cpu["float32"]
    assert "cat" in cpu["promote"]
    assert at.documented_source()["url"] == at.DOC_URL
    assert at.documented_category("nll_loss2d", "cpu") == "float32"
    assert at.documented_category("relu", "cpu") is None
    assert (
        at.documented_category("interpolate", "cuda", aliases=("cross_entropy",))
        == "float32"
    )


def test_registered_ops_come_from_the_dispatcher():
    cpu, cuda = at.registered_ops("cpu"), at.registered_ops("cuda")
    assert "conv2d" in cpu and "conv2d" in cuda
    assert "softmax" in cuda and "softmax" not in cpu
    assert all("::" not in n and "." not in n for n in cpu)  # overloads merged
    with pytest.raises(ValueError, match="device_type"):
        at.registered_ops("tpu")


def test_classify_names_the_behaviour():
    bf, f32 = torch.bfloat16, torch.float32
    assert at.classify(bf, bf, bf) == "lower_precision"
    assert at.classify(f32, f32, bf) == "float32"
    assert at.classify(f32, bf, bf) == "input dtype"
    assert at.classify(f32, bf, bf, out_mixed=f32) == "promote"


def test_cpu_probes_match_the_cpu_lists():
    rows = {
        r.op: r
        for r in at.probe_ops(
            "cpu",
            names=("conv2d", "relu", "cat", "cross_entropy", "softmax", "batch_norm"),
        )
    }
    assert (
        rows["conv2d"].observed == "lower_precision"
        and rows["conv2d"].out_from_fp32 == "bfloat16"
    )
    assert rows["relu"].observed == "input dtype"
    assert rows["cat"].observed == "promote" and rows["cat"].documented == "promote"
    assert rows["cross_entropy"].observed == "float32"
    # on CPU softmax is not forced to fp32: it runs in its input's dtype
    assert (
        rows["softmax"].observed == "input dtype" and rows["softmax"].documented is None
    )
    assert rows["batch_norm"].out_from_low == "bfloat16"
    assert at.disagreements(list(rows.values())) == []


def test_cuda_probes_run_real_or_fake():
    rows = {
        r.op: r
        for r in at.probe_ops("cuda", names=("conv2d", "softmax", "sum", "relu"))
    }
    assert rows["conv2d"].out_from_fp32 == "float16"
    assert rows["softmax"].observed == "float32" and rows["sum"].observed == "float32"
    assert rows["relu"].observed == "input dtype"
    assert rows["conv2d"].device == (
        "cuda (fake)" if not torch.cuda.is_available() else "cuda"
    )


def test_probe_rejects_bad_arguments():
    with pytest.raises(ValueError, match="no probe named"):
        at.probe_ops("cpu", names=("not_an_op",))
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        at.probe_ops("cpu", dtype=torch.float64)
    with pytest.raises(ValueError, match="fake=True"):
        with at.autocast_region("cpu", fake=True):
            pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_real_cuda_region_without_gpu_says_so():
    with pytest.raises(RuntimeError, match="fake=True"):
        with at.autocast_region("cuda"):
            pass


def test_fake_region_restores_autocast_state():
    before = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
    with at.autocast_region("cuda", torch.float16, fake=True) as dev:
        assert torch.is_autocast_enabled("cuda")
        assert (
            torch.mm(torch.randn(2, 2, device=dev), torch.randn(2, 2, device=dev)).dtype
            == torch.float16
        )
    assert (
        torch.is_autocast_enabled("cuda"),
        torch.get_autocast_dtype("cuda"),
    ) == before


def test_trace_layers_cpu():
    model = small_net()
    rows = at.trace_layers(model, torch.randn(1, 3, 8, 8), "cpu")
    assert [r["type"] for r in rows] == ["Conv2d", "BatchNorm2d", "ReLU", "Conv2d"]
    assert rows[0]["inputs"] == ["float32"] and rows[0]["output"] == ["bfloat16"]
    assert rows[1]["inputs"] == ["bfloat16"] and rows[1]["output"] == ["bfloat16"]
    assert rows[3]["inputs"] == ["bfloat16"] and rows[3]["output"] == ["bfloat16"]
    assert all(r["params"] in ([], ["float32"]) for r in rows)  # weights stay fp32
    summary = at.summarize_by_type(rows)
    assert ("Conv2d", "bfloat16", "bfloat16", 1) in summary


def test_trace_layers_cuda_leaves_the_model_alone():
    model = small_net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = at.trace_layers(model, (1, 3, 8, 8), "cuda")
    assert rows[0]["output"] == ["float16"] and rows[1]["output"] == ["float16"]
    assert rows[0]["params"] == ["float32"]
    for k, v in model.state_dict().items():
        assert v.device.type == "cpu" and torch.equal(v, before[k])


def test_trace_ops_sees_functional_ops_in_a_block():
    model = Residual()
    ops = at.trace_ops(model, torch.randn(1, 3, 8, 8), "cpu")
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
    cached = at.count_casts(model, x, "cpu")
    assert cached.parameter_casts == 2  # weight and bias, once
    assert cached.parameter_cast_bytes == (8 * 8 + 8) * 2  # bf16 copies
    uncached = at.count_casts(model, x, "cpu", cache_enabled=False)
    assert uncached.parameter_casts == 4  # cast at each use
    two_regions = at.count_casts(model, x, "cpu", forwards=2, one_region=False)
    assert two_regions.parameter_casts == 4  # the cache ends with the region
    one_region = at.count_casts(model, x, "cpu", forwards=2)
    assert one_region.parameter_casts == 2
    assert all(c.src == "float32" and c.dst == "bfloat16" for c in cached.casts)


def test_weights_and_grads_stay_fp32_under_autocast_but_not_after_half():
    model = small_net()
    x = torch.randn(2, 3, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    out.float().sum().backward()
    d = at.parameter_and_grad_dtypes(model)
    assert set(d["params"]) == {"float32"} and set(d["grads"]) == {"float32"}
    half = small_net().half()
    half(x.half()).float().sum().backward()
    d = at.parameter_and_grad_dtypes(half)
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
    counts = at.backward_dtypes(model, x, y, "cpu")
    assert (
        counts[("convolution_backward", "bfloat16")] >= 2 * 2
    )  # two convs: input/weight/bias grads
    assert ("convolution_backward", "float32") not in counts
    assert (
        counts[("_to_copy", "float32")] >= 4
    )  # conv weights' and biases' grads back to fp32
    assert all(p.grad is None for p in model.parameters())


def test_cuda_rules_give_cpu_probes_cudas_dtypes():
    # every probe, run under CPU autocast with CUDA's lists applied, gives the dtypes
    # CUDA autocast gives (on fake CUDA tensors without a GPU); without them, layer
    # norm, softmax, sums, upsampling... differ
    cuda = {r.op: r for r in at.probe_ops("cuda", dtype=torch.float16)}
    ruled = at.probe_ops("cpu", dtype=torch.float16, cuda_rules=True)
    plain = {r.op: r for r in at.probe_ops("cpu", dtype=torch.float16)}

    def dtypes(r):
        return (r.out_from_fp32, r.out_from_low, r.out_mixed, r.observed)

    assert ruled[0].device == "cpu (CUDA rules)"
    assert [dtypes(r) for r in ruled] == [dtypes(cuda[r.op]) for r in ruled]
    differ = {op for op in plain if dtypes(plain[op]) != dtypes(cuda[op])}
    assert {"layer_norm", "softmax", "sum", "upsample_bilinear2d"} <= differ
    with pytest.raises(ValueError, match="cuda_rules"):
        at.probe_ops("cuda", cuda_rules=True)


def _header_lists() -> dict[str, set[str]]:
    import re
    from pathlib import Path

    header = Path(torch.__file__).parent / "include/ATen/autocast_mode.h"
    if not header.exists():
        pytest.skip("this torch installs no C++ headers")
    text = header.read_text()
    out = {}
    for macro in ("LOWER_PRECISION_FP", "FP32", "FP32_SET_OPT_DTYPE", "PROMOTE"):
        body = re.search(rf"#define AT_FORALL_{macro}\(_\)(.*?)\n\n", text, re.S)
        out[macro] = set(re.findall(r"_\((\w+)", body.group(1)))
    return out


# ATen ops the Python functions reach under another name
_ALIASES = {
    "_convolution": "convolution",
    "native_layer_norm": "layer_norm",
    "_thnn_fused_lstm_cell": "lstm_cell",
    "_thnn_fused_gru_cell": "gru_cell",
    "_scaled_dot_product_flash_attention": "scaled_dot_product_attention",
}


def test_cuda_rule_sets_are_the_installed_torchs_lists():
    lists = _header_lists()
    for macro, ours in (
        ("LOWER_PRECISION_FP", at.CUDA_LOWER_PRECISION),
        ("FP32", at.CUDA_FP32),
        ("FP32_SET_OPT_DTYPE", at.CUDA_FP32_SET_DTYPE - {"norm"}),
        ("PROMOTE", at.CUDA_PROMOTE - {"grid_sample"}),  # F.grid_sample: grid_sampler
    ):
        for op in lists[macro]:
            name = _ALIASES.get(op, op)
            if "upsample" in name:
                name = "interpolate"  # F.interpolate reaches every upsample op
            assert name in ours, (macro, op)
        extra = ours - {_ALIASES.get(op, op) for op in lists[macro]}
        assert extra <= {"interpolate", "upsample", "upsample_nearest"} | {
            "upsample_bilinear",
            "__rpow__",
        }, (macro, extra)


def test_cuda_category_names_cuda_lists_for_aten_operators():
    assert at.cuda_category("upsample_bilinear2d") == "float32"
    assert at.cuda_category("upsample_bilinear2d_backward") == "float32"
    assert at.cuda_category("grid_sampler_2d") == "promote"
    assert at.cuda_category("native_layer_norm") == "float32"
    assert at.cuda_category("_log_softmax") == "float32"
    assert at.cuda_category("convolution") == "lower_precision"
    assert at.cuda_category("add") is None and at.cuda_category("_fft_r2c") is None
