"""The doctor on models it had never seen (issue 20): each failure found when it was
tried as a new user would, on a tiny model built here."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from ampbook import doctor
from ampbook.chapters.ch6 import diagnosis, report_text, verdict
from ampbook.measure.memory import saved_for_backward
from ampbook.predict import calibrate as cal
from ampbook.predict import specs
from ampbook.predict.pace import speedup_verdict
from ampbook.predict.steptrace import relabel, trace_step
from tests._cli import one_error

# --------------------------------------------------------------------------------------
# tiny models (importable as tests.test_diagnosis:NAME for the command line)
# --------------------------------------------------------------------------------------


class TinyLSTM(nn.Module):
    """A 1-D convolution, a two-layer LSTM over the sequence, a linear head."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.conv = nn.Conv1d(3, 8, 3, padding=1)
        self.lstm = nn.LSTM(8, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 5)

    def forward(self, x):  # N, C, L
        y, _ = self.lstm(self.conv(x).transpose(1, 2))
        return self.head(y[:, -1])


class TinyAttention(nn.Module):
    """Patches, one attention layer with dropout (need_weights as given), a head."""

    def __init__(self, need_weights: bool = False):
        super().__init__()
        self.proj = nn.Conv2d(3, 16, 4, 4)
        self.attn = nn.MultiheadAttention(16, 2, dropout=0.1, batch_first=True)
        self.head = nn.Linear(16, 5)
        self.need_weights = need_weights

    def forward(self, x):
        y = self.proj(x).flatten(2).transpose(1, 2)
        y, _ = self.attn(y, y, y, need_weights=self.need_weights)
        return self.head(y.mean(1))


class TinyFFT(nn.Module):
    """A convolution whose output goes through an FFT and back (a spectral filter)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Conv2d(4, 5, 1)

    def forward(self, x):
        y = self.conv(x)
        y = torch.fft.irfft2(torch.fft.rfft2(y) * 0.5, s=y.shape[-2:])
        return self.head(y)


class TinyWarp(nn.Module):
    """A strided convolution, bilinear upsampling back, and a warp by grid_sample with
    an fp32 grid."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.head = nn.Conv2d(4, 5, 1)

    def forward(self, x):
        y = self.conv(x)
        up = nn.functional.interpolate(y, scale_factor=2, mode="bilinear")
        n, _, h, w = x.shape
        grid = torch.zeros(n, h, w, 2, device=x.device)  # fp32 under autocast
        warped = nn.functional.grid_sample(self.conv(x), grid, align_corners=False)
        return self.head(up + nn.functional.interpolate(warped, size=(h, w)))


class ComplexMatmul(nn.Module):
    """A convolution, then a complex matrix product (a learned spectral mixing)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.mix = nn.Parameter(torch.randn(8, 8, dtype=torch.complex64))
        self.head = nn.Conv2d(4, 5, 1)

    def forward(self, x):
        z = torch.complex(
            self.conv(x), torch.zeros_like(x[:, :1]).expand(-1, 4, -1, -1)
        )
        return self.head((z @ self.mix).real)


class DictOut(nn.Module):
    """A segmentation model returning {"out": logits, "aux": logits} as torchvision's
    do."""

    def __init__(self):
        super().__init__()
        self.body = nn.Conv2d(3, 4, 3, padding=1)
        self.out = nn.Conv2d(4, 5, 1)
        self.aux = nn.Conv2d(4, 5, 1)

    def forward(self, x):
        y = self.body(x)
        return {"out": self.out(y), "aux": self.aux(y)}


class TupleOut(nn.Module):
    """A classifier returning (logits, auxiliary logits)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )
        self.main = nn.Linear(4, 7)
        self.aux = nn.Linear(4, 3)

    def forward(self, x):
        y = self.body(x)
        return self.main(y), self.aux(y)


class TinyVideo(nn.Module):
    """A 3-D convolution network on C x T x H x W clips."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool3d(2)
        self.head = nn.Linear(4, 5)

    def forward(self, x):
        return self.head(self.pool(self.conv(x)).mean((2, 3, 4)))


class TwoInputs(nn.Module):
    """An optical-flow-like model that takes two images."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 2, 3, padding=1)

    def forward(self, image1, image2):
        return self.conv(torch.cat([image1, image2], 1))


class PairWrapper(nn.Module):
    """The README's wrapper: one tensor of 6 channels split into the two images."""

    def __init__(self):
        super().__init__()
        self.model = TwoInputs()

    def forward(self, x):
        return self.model(x[:, :3], x[:, 3:])


class DataDependent(nn.Module):
    """Keeps only the positive activations (a shape that depends on the values)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return y[y > 0].reshape(1, -1)


class WindowPad(nn.Module):
    """Pads its input to a multiple of 7 (Swin's windows): at small sizes the padding
    is most of the tensor, so a line fitted there overestimates larger sizes."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 5, 1)

    def forward(self, x):
        h, w = x.shape[-2:]
        y = nn.functional.pad(self.conv(x), (0, -w % 7, 0, -h % 7))
        return self.head(torch.relu(y))[..., :h, :w]


class PooledNorm(nn.Module):
    """BatchNorm after global pooling (DeepLabV3's ASPP): batch 1 cannot train."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.BatchNorm2d(8))
        self.head = nn.Conv2d(8, 5, 1)

    def forward(self, x):
        y = self.conv(x)
        return self.head(y + self.pool(y))


class ConvAndLinear(nn.Module):
    """Convolutions and a large linear layer: both kinds of TF32 matter."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3, padding=1)
        self.lin = nn.Linear(64, 1024)
        self.head = nn.Linear(1024, 10)

    def forward(self, x):
        return self.head(self.lin(self.conv(x).mean((2, 3))))


def tiny_lstm():
    return TinyLSTM()


def two_inputs():
    return TwoInputs()


def pair_wrapper():
    return PairWrapper()


def data_dependent():
    return DataDependent()


def dict_out():
    return DictOut()


def _cfg(model: nn.Module, shape, batch=2, **kw):
    base = dict(model="tiny", input=tuple(shape), batch=batch, device="cpu",
                measure=False, gpus=["a100", "h200"])  # fmt: skip
    base.update(kw)
    return diagnosis.DoctorConfig(**base), model


def _diagnose(model, shape, batch=2, **kw):
    cfg, model = _cfg(model, shape, batch, **kw)
    return diagnosis.diagnose(cfg, model=model)


def _ops(trace, **where):
    return [o for o in trace.ops if all(getattr(o, k) == v for k, v in where.items())]


# --------------------------------------------------------------------------------------
# 1. the range is calibrated, never one network's ratio applied to all
# --------------------------------------------------------------------------------------


def test_every_reference_contributes_its_own_speedup():
    r = _diagnose(ConvAndLinear(), (3, 64, 64), batch=64)
    rng = next(x for x in r["verdict"]["ranges"] if x["gpu"] == "a100-sxm-80gb")
    rows = rng["rows"]
    assert len(rows) >= 2 and rng["min"] == min(x["speedup"] for x in rows)
    assert rng["max"] == max(x["speedup"] for x in rows) and rng["low"] < rng["high"]
    # the point is the weighted geometric mean of every reference's speedup
    logs = sum(x["weight_share"] * math.log(x["speedup"]) for x in rows)
    assert rng["point"] == pytest.approx(math.exp(logs))
    assert rows == sorted(rows, key=lambda x: -x["weight"])
    assert len({round(x["kernel_speedup"], 6) for x in rows}) == len(rows)
    assert all(x["gpu_distance"] in cal.GPU_DISTANCES for x in rows)
    assert str(len(rows)) in rng["line"] and "same share of their bound" in rng["line"]


# --------------------------------------------------------------------------------------
# 2. a launch floor
# --------------------------------------------------------------------------------------


def test_a_tiny_step_is_launch_bound_and_amp_casts_are_counted():
    r = _diagnose(ConvAndLinear(), (3, 8, 8), batch=1)
    rng = next(x for x in r["verdict"]["ranges"] if x["gpu"] == "h200-sxm")
    launch = rng["launch"]
    assert launch["amp_kernels"] > launch["fp32_kernels"]
    assert rng["casts"] > 0
    assert launch["amp_bound"] and rng["high"] < 1  # the casts' kernels cost time
    table = report_text.launch_table(r["verdict"]["ranges"])
    assert f"| {launch['amp_kernels']} ({rng['casts']} casts added" in table
    assert "| launch-bound |" in table
    big = _diagnose(ConvAndLinear(), (3, 64, 64), batch=64)
    big_rng = next(x for x in big["verdict"]["ranges"] if x["gpu"] == "h200-sxm")
    assert big_rng["launch"]["amp_kernels"] == launch["amp_kernels"]


# --------------------------------------------------------------------------------------
# 3. the trace is what CUDA would run
# --------------------------------------------------------------------------------------


def test_lstm_is_one_cudnn_rnn_operator_in_both_precisions():
    model = TinyLSTM()
    traces = {
        p: trace_step(model, 4, 1, 1, p, input_shape=(3, 12), loss="cross_entropy")
        for p in ("fp32", "amp-fp16")
    }
    for p, dtype in (("fp32", "float32"), ("amp-fp16", "float16")):
        fwd = _ops(traces[p], op="_cudnn_rnn")
        bwd = _ops(traces[p], op="_cudnn_rnn_backward")
        assert len(fwd) == 1 and len(bwd) == 1 and fwd[0].dtype == bwd[0].dtype == dtype
        # 2 layers x 4 gates x hidden 16 x (input + hidden), 12 steps, batch 4
        expected = 2 * 12 * 4 * 4 * 16 * ((8 + 16) + (16 + 16))
        assert fwd[0].mma_flops == expected and bwd[0].mma_flops == 2 * expected
        assert fwd[0].kernels == 2 * (1 + 2 * 12)
    k32, k16 = (traces[p].totals()["kernels"] for p in ("fp32", "amp-fp16"))
    assert k16 < 2 * k32  # no cell per time step in the AMP trace


def test_attention_with_dropout_runs_fused_in_16_bits():
    tr = trace_step(TinyAttention(), 2, 16, 16, "amp-fp16", loss="sum")
    fused = [o for o in tr.ops if "flash_attention" in o.op]
    assert {o.phase for o in fused} == {"forward", "backward"}
    assert {o.dtype for o in fused} == {"float16"}
    assert not _ops(tr, op="bmm") and not _ops(tr, op="bernoulli_")
    fp32 = trace_step(TinyAttention(), 2, 16, 16, "fp32", loss="sum")
    assert any("efficient_attention" in o.op for o in fp32.ops)
    # need_weights=True: the explicit path, its softmax in fp32 as CUDA's list says
    explicit = trace_step(TinyAttention(True), 2, 16, 16, "amp-fp16", loss="sum")
    soft = [o for o in explicit.ops if o.op in ("_softmax", "_safe_softmax")]
    assert soft and {o.dtype for o in soft if o.phase == "forward"} == {"float32"}
    assert {o.dtype for o in explicit.ops if o.op in ("bmm", "baddbmm")} == {"float16"}


def test_no_cpu_only_autocast_rule_in_the_cuda_emulation():
    # CPU autocast's fp32 rule for FFTs would return fp32; CUDA returns fp16 (the CPU
    # has no 16-bit FFT kernel: the trace runs it on fp32 copies, casting back)
    fft = trace_step(TinyFFT(), 2, 8, 8, "amp-fp16")
    c2r = _ops(fft, op="_fft_c2r", phase="forward")
    assert c2r and c2r[0].dtype == "float16"
    cpu = trace_step(TinyFFT(), 2, 8, 8, "amp-fp16", autocast_rules="cpu")
    assert _ops(cpu, op="_fft_c2r", phase="forward")[0].dtype == "float32"
    video = trace_step(TinyVideo(), 2, 1, 1, "amp-fp16", input_shape=(3, 4, 8, 8),
                          loss="sum")  # fmt: skip
    pool = [o for o in video.ops if "max_pool3d" in o.op and o.phase == "forward"]
    assert pool and {o.dtype for o in pool} == {"float16"}  # CPU autocast: fp32


def test_upsampling_and_grid_sample_have_their_reasons():
    r = _diagnose(TinyWarp(), (3, 8, 8))
    reasons = {(g["phase"], g["op"]): g["reason"] for g in r["coverage"]["fp32_ops"]}
    assert reasons[("forward", "upsample_bilinear2d")] == (
        "fp32 list (upsample_bilinear)"
    )
    assert reasons[("forward", "grid_sampler_2d")] == (
        "promoted to widest input (grid_sampler)"
    )
    assert reasons[("forward", "zeros")] == "created in fp32"


def test_complex_matmul_is_reported_unmodelled_not_a_crash(tmp_path, capsys):
    r = _diagnose(ComplexMatmul(), (3, 8, 8))
    why = {u["op"]: u["why"] for u in r["unmodelled"]}
    assert any(w.startswith("dtype complex") for w in why.values()), why
    mm = [u for u in r["unmodelled"] if u["op"] in ("mm", "bmm", "_unsafe_view")]
    assert mm and all(0 < u["bytes_share"] < 1 for u in mm)
    assert "dtype complex" in r["warnings"][0]


# --------------------------------------------------------------------------------------
# 4. models as users have them
# --------------------------------------------------------------------------------------


def test_torchvision_models_built_without_any_weights():
    model = specs.load_model("torchvision:lraspp_mobilenet_v3_large")
    assert isinstance(model, nn.Module)  # weights_backbone=None: no download


def test_dict_output_reads_out_and_output_picks_another():
    r = _diagnose(DictOut(), (3, 8, 8))
    assert r["output"] == [2, 5, 8, 8] and r["output_rule"] == "the dict's 'out' entry"
    aux = _diagnose(DictOut(), (3, 8, 8), output="aux")
    assert aux["output"] == [2, 5, 8, 8] and aux["output_rule"] == "--output aux"
    with pytest.raises(specs.DoctorError, match=r"keys \['out', 'aux'\]"):
        _diagnose(DictOut(), (3, 8, 8), output="nope")


def test_tuple_output_reads_the_first_tensor_or_an_index():
    first = _diagnose(TupleOut(), (3, 8, 8))
    assert first["output"] == [2, 7]
    assert first["output_rule"] == "the first tensor of the tuple"
    assert _diagnose(TupleOut(), (3, 8, 8), output="1")["output"] == [2, 3]
    with pytest.raises(specs.DoctorError, match="index below 2"):
        _diagnose(TupleOut(), (3, 8, 8), output="5")


def test_input_of_any_rank_video():
    assert doctor.parse_input("3,4,8,8") == (3, 4, 8, 8)
    r = _diagnose(TinyVideo(), (3, 4, 8, 8), measure=True, repeats=1, rounds=1)
    assert r["output"] == [2, 5] and r["input"] == [3, 4, 8, 8]
    assert r["totals"]["fp32"]["mma_flops"] > 0 and r["measured"]["rows"]


def test_several_inputs_get_the_wrapper_message(capsys):
    argv = ["--model", "tests.test_diagnosis:two_inputs", "--input", "3,8,8",
            "--no-measure", "--gpus", "h200"]  # fmt: skip
    assert doctor.main(argv) == 2
    one_error(capsys.readouterr().err, "takes 2 inputs (image1, image2)", "wrap it")
    argv[1] = "tests.test_diagnosis:pair_wrapper"
    argv[3] = "6,8,8"
    assert doctor.main(argv) == 0


def test_data_dependent_shapes_get_a_message(capsys):
    argv = ["--model", "tests.test_diagnosis:data_dependent", "--input",
            "3,8,8", "--no-measure", "--gpus", "h200", "--loss", "mse"]  # fmt: skip
    assert doctor.main(argv) == 2
    one_error(capsys.readouterr().err, "depend on its input's values", "wrap it")


def test_output_option_on_the_command_line(tmp_path, capsys):
    j = tmp_path / "r.json"
    argv = ["--model", "tests.test_diagnosis:dict_out", "--input", "3,8,8",
            "--batch", "2", "--no-measure", "--gpus", "h200", "--output", "aux",
            "--json", str(j)]  # fmt: skip
    assert doctor.main(argv) == 0
    assert json.loads(j.read_text())["output_rule"] == "--output aux"


# --------------------------------------------------------------------------------------
# 5. memory at the requested size
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("model, shape, batch", [
    (WindowPad(), (3, 30, 30), 3),
    (PooledNorm(), (3, 16, 16), 4),
])  # fmt: skip
def test_memory_is_counted_at_the_requested_size(model, shape, batch):
    r = _diagnose(model, shape, batch)
    at = r["memory"]["at_size"]
    assert at["batch"] == batch and at["input"] == list(shape)
    x = torch.randn(batch, *shape)
    y = torch.randint(0, 5, (batch, *shape[1:]))
    real = saved_for_backward(model.train(), x, y)["new_bytes"]
    assert at["fp32_bytes"] == real
    assert "requested size" in at["method"]


# --------------------------------------------------------------------------------------
# 6. the CPU timing: rounds, and a verdict that says when they disagree
# --------------------------------------------------------------------------------------


def test_cpu_timing_takes_rounds_and_reads_them():
    cfg, model = _cfg(ConvAndLinear(), (3, 8, 8), measure=True, rounds=3)
    me = diagnosis.diagnose(cfg, model=model)["measured"]
    bf16 = next(r for r in me["rows"] if r["precision"] == "amp-bf16")
    assert me["rounds"] == 3 and len(bf16["ratios"]) == 3 and bf16["samples"] == 3
    assert me["rounds_verdict"] == speedup_verdict(bf16["ratios"], "amp-bf16")
    fp16 = next(r for r in me["rows"] if r["precision"] == "amp-fp16")
    assert fp16["batch"] == 2 and fp16["speedup"] > 0
    assert "one step at batch 2 x 3x8x8 against one fp32 step there" in fp16["note"]
    disagree = dict(me, rounds_verdict=speedup_verdict([0.8, 1.3, 1.0], "amp-bf16"))
    assert "no difference is resolved" in verdict.measured_verdict(disagree)


# --------------------------------------------------------------------------------------
# 7. TF32: convolutions (on by default) apart from matrix products (off)
# --------------------------------------------------------------------------------------


def test_tf32_split_into_convolutions_and_matrix_products():
    r = _diagnose(ConvAndLinear(), (3, 32, 32), batch=64)
    items = [i for i in r["verdict"]["items"] if i["gpu"] == "A100 SXM 80GB"]
    conv = next(i for i in items if "convolutions" in i["item"])
    mm = next(i for i in items if "matrix products" in i["item"])
    assert conv["gain"] is None and "on by default" in conv["item"]
    # listed, never ranked: after every item with a gain
    assert all(i["gain"] is None for i in items[items.index(conv) :])
    row = next(x for x in r["roofline"] if x["gpu"] == "a100-sxm-80gb")
    assert mm["gain"] == pytest.approx(row["fp32_default_s"] / row["fp32_tf32_s"])
    assert "off by default" in mm["item"] and mm["gain"] > 1


def test_bf16_trace_is_fp16s_relabelled():
    """The doctor traces fp16 and relabels it bf16 (CUDA's lists are the same for
    both): the result equals a bf16 trace, operator for operator."""
    model = TinyWarp()
    bf16 = trace_step(model, 2, 8, 8, "amp-bf16")
    relabelled = relabel(trace_step(model, 2, 8, 8, "amp-fp16"), "amp-bf16")

    def key(tr):
        return [(o.phase, o.op, o.dtype, o.bytes, o.flops) for o in tr.ops]

    assert key(relabelled) == key(bf16)
    assert relabelled.saved_tensors == bf16.saved_tensors
