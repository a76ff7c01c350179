"""The per-layer cost model (ampbook.predict.opcost, steptrace, roofline, pace): FLOPs
and bytes by hand, against PyTorch's own FLOP counter, attribution to layers, the
autocast dtypes, and the roofline arithmetic."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ampbook.predict.opcost import OpCost, conv_flops
from ampbook.predict.roofline import Ceilings, op_time, predict
from ampbook.predict.steptrace import LOSS, optimizer_bytes, trace_step


def _ops(trace, phase=None, op=None, scope=None):
    return [
        o
        for o in trace.ops
        if (phase is None or o.phase == phase)
        and (op is None or o.op == op)
        and (scope is None or o.scope == scope)
    ]


class Single(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)


# --- FLOPs ----------------------------------------------------------------------------


def test_conv_flops_by_hand():
    # 3x3 stride-2 conv, 3 -> 16 channels, 8x8 input -> 4x4 output: each of the
    # 1*16*4*4 = 256 outputs needs 3*3*3 = 27 multiply-adds = 54 FLOPs.
    assert conv_flops((1, 3, 8, 8), (16, 3, 3, 3), (1, 16, 4, 4)) == 256 * 54
    # transposed 2x2 stride 2, 16 -> 19 channels from a 2x16x4x4 input: each of the
    # 2*16*4*4 = 512 input elements is spread over 19*2*2 = 76 outputs.
    assert (
        conv_flops((2, 16, 4, 4), (16, 19, 2, 2), (2, 19, 8, 8), transposed=True)
        == 512 * 76 * 2
    )
    with pytest.raises(ValueError, match="same number of dimensions"):
        conv_flops((1, 3, 8, 8), (16, 3, 3), (1, 16, 4, 4))


def test_traced_conv_flops_match_hand_count():
    model = Single(nn.Conv2d(3, 16, 3, stride=2, padding=1))
    trace = trace_step(model, 1, 8, 8, loss="sum")
    (conv,) = _ops(trace, "forward", "convolution")
    assert conv.mma_flops == 256 * 54
    (back,) = _ops(trace, "backward", "convolution_backward")
    # the input is the image: it needs no gradient, so only the weight gradient is
    # computed
    assert back.mma_flops == 256 * 54


@pytest.mark.parametrize(
    "layer, shape",
    [
        (nn.Conv2d(8, 12, 3, padding=1), (2, 8, 16, 16)),
        (nn.Conv2d(8, 8, (3, 1), padding=(4, 0), dilation=(4, 1)), (2, 8, 16, 16)),
        (nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), (2, 8, 15, 17)),
        (nn.Conv2d(8, 16, 3, padding=1, groups=4), (2, 8, 16, 16)),
        (
            nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1),
            (2, 8, 8, 8),
        ),
        (nn.ConvTranspose2d(8, 6, 2, stride=2, groups=2), (1, 8, 8, 8)),
    ],
)
def test_forward_flops_agree_with_torch_flop_counter(layer, shape):
    model = Single(layer)
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(shape))
    trace = trace_step(
        model,
        shape[0],
        shape[2],
        shape[3],
        in_channels=shape[1],
        loss="sum",
        backward=False,
    )
    assert sum(o.mma_flops for o in trace.ops) == counter.get_total_flops()


class TwoConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, (1, 3), padding=(0, 2), dilation=(1, 2))
        self.c = nn.ConvTranspose2d(8, 5, 2, stride=2)

    def forward(self, x):
        return self.c(F.relu(self.b(F.relu(self.a(x)))))


def test_forward_and_backward_flops_agree_with_torch_flop_counter():
    model = TwoConvs()
    x = torch.randn(2, 3, 12, 16)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    trace = trace_step(model, 2, 12, 16, loss="sum")
    assert sum(o.mma_flops for o in trace.ops) == counter.get_total_flops()
    fwd = sum(o.mma_flops for o in _ops(trace, "forward"))
    bwd = sum(o.mma_flops for o in _ops(trace, "backward"))
    # backward: weight gradients of all three layers, input gradients of the last two
    first = conv_flops((2, 3, 12, 16), (8, 3, 3, 3), (2, 8, 12, 16))
    assert bwd == 2 * fwd - first


def test_grouped_conv_backward_counts_groups():
    # torch's FlopCounterMode counts a grouped convolution's weight gradient as if the
    # convolution were dense (groups times too many); the model counts what is computed.
    layer = nn.Conv2d(8, 16, 3, padding=1, groups=4)
    trace = trace_step(Single(layer), 2, 10, 10, in_channels=8, loss="sum")
    fwd = conv_flops((2, 8, 10, 10), (16, 2, 3, 3), (2, 16, 10, 10))
    (back,) = _ops(trace, "backward", "convolution_backward")
    assert back.mma_flops == fwd  # weight gradient only: the input is the image


def test_erfnet_flops_agree_with_torch_flop_counter():
    from ampbook.segmentation.model import ERFNet

    torch.manual_seed(0)
    model = ERFNet(num_classes=5)
    x = torch.randn(1, 3, 16, 32)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    trace = trace_step(model, 1, 16, 32, loss="sum")
    assert sum(o.mma_flops for o in trace.ops) == counter.get_total_flops()


# --- bytes ----------------------------------------------------------------------------


def test_conv_bytes_by_hand_fp32_and_amp():
    model = Single(nn.Conv2d(4, 8, 3, padding=1))
    x_bytes, w_bytes, b_bytes, y_bytes = (
        2 * 4 * 16 * 16 * 4,
        8 * 4 * 9 * 4,
        8 * 4,
        2 * 8 * 16 * 16 * 4,
    )
    trace = trace_step(model, 2, 16, 16, in_channels=4, loss="sum", backward=False)
    (conv,) = _ops(trace, op="convolution")
    assert (conv.read_bytes, conv.write_bytes) == (x_bytes + w_bytes + b_bytes, y_bytes)
    assert conv.dtype == "float32"

    amp = trace_step(
        model, 2, 16, 16, "amp-fp16", in_channels=4, loss="sum", backward=False
    )
    (conv16,) = _ops(amp, op="convolution")
    assert conv16.dtype == "float16"
    assert (conv16.read_bytes, conv16.write_bytes) == (
        (x_bytes + w_bytes + b_bytes) / 2,
        y_bytes / 2,
    )
    # autocast's casts of input, weight and bias: read fp32, write fp16
    casts = sorted(
        (o.read_bytes, o.write_bytes) for o in _ops(amp, "forward", "_to_copy", "layer")
    )
    assert casts == sorted(
        [(x_bytes, x_bytes / 2), (w_bytes, w_bytes / 2), (b_bytes, b_bytes / 2)]
    )


def test_relu_bytes_and_in_place():
    shape = (2, 4, 16, 16)
    nbytes = math.prod(shape) * 4
    out_of_place = trace_step(
        Single(nn.ReLU()), 2, 16, 16, in_channels=4, loss="sum", backward=False
    )
    (relu,) = _ops(out_of_place, op="relu")
    assert (relu.read_bytes, relu.write_bytes) == (nbytes, nbytes)
    in_place = trace_step(
        Single(nn.ReLU(inplace=True)),
        2,
        16,
        16,
        in_channels=4,
        loss="sum",
        backward=False,
    )
    (relu_,) = _ops(in_place, op="relu_")
    assert (relu_.read_bytes, relu_.write_bytes) == (nbytes, nbytes)


class Views(nn.Module):
    def __init__(self, copy: bool = False):
        super().__init__()
        self.copy = copy

    def forward(self, x):
        y = x.view(x.shape[0], -1).t()[1:]
        # flattening a transposed tensor cannot be a view: reshape copies it
        return y.reshape(-1) if self.copy else y


def test_views_move_no_bytes():
    trace = trace_step(Views(), 2, 4, 4, in_channels=3, loss="sum", backward=False)
    assert _ops(trace, scope="Views") == []
    copied = trace_step(
        Views(copy=True), 2, 4, 4, in_channels=3, loss="sum", backward=False
    )
    (clone,) = _ops(copied, scope="Views")
    assert (clone.op, clone.read_bytes, clone.write_bytes) == (
        "clone",
        2 * 47 * 4,
        2 * 47 * 4,
    )
    with pytest.raises(ValueError, match="no trainable parameter|does not depend"):
        trace_step(Views(), 2, 4, 4, in_channels=3, loss="sum")


def test_maxpool_writes_its_indices():
    trace = trace_step(
        Single(nn.MaxPool2d(2)), 1, 8, 8, in_channels=2, loss="sum", backward=False
    )
    (pool,) = _ops(trace, op="max_pool2d_with_indices")
    out = 1 * 2 * 4 * 4
    assert pool.read_bytes == 1 * 2 * 8 * 8 * 4
    assert pool.write_bytes == out * 4 + out * 8  # fp32 values and int64 indices


# --- attribution ----------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)) + x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1)
        self.block = Block()
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.head(self.block(self.stem(x)))


def test_ops_go_to_the_innermost_module_forward_and_backward():
    trace = trace_step(Net(), 2, 8, 8)
    fwd = {(o.scope, o.op) for o in _ops(trace, "forward")}
    assert {
        ("stem", "convolution"),
        ("block.conv", "convolution"),
        ("block.bn", "native_batch_norm"),
        ("block", "add"),
        ("block", "relu"),
        ("head", "convolution"),
    } <= fwd
    assert any(o.scope == LOSS for o in _ops(trace, "forward"))
    bwd = {(o.scope, o.op) for o in _ops(trace, "backward")}
    assert {
        ("head", "convolution_backward"),
        ("block.conv", "convolution_backward"),
        ("stem", "convolution_backward"),
        ("block.bn", "native_batch_norm_backward"),
        ("block", "threshold_backward"),
    } <= bwd
    assert [
        o.scope_type
        for o in _ops(trace, "backward", "convolution_backward", "block.conv")
    ] == ["Conv2d"]


def test_trace_leaves_the_model_alone():
    model = Net().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trace_step(model, 2, 8, 8, "amp-bf16")
    assert not model.training
    after = model.state_dict()
    assert all(
        torch.equal(before[k], after[k]) and type(after[k]) is torch.Tensor
        for k in before
    )
    assert all(p.grad is None for p in model.parameters())


# --- autocast -------------------------------------------------------------------------


def test_amp_trace_dtypes():
    trace = trace_step(Net(), 2, 8, 8, "amp-fp16")
    assert {o.dtype for o in _ops(trace, "forward", "convolution")} == {"float16"}
    assert {o.dtype for o in _ops(trace, "backward", "convolution_backward")} == {
        "float16"
    }
    (bn,) = _ops(trace, "forward", "native_batch_norm")
    assert bn.dtype == "float16"  # batch norm takes and writes the fp16 activation
    assert {o.dtype for o in _ops(trace, "forward", "_log_softmax")} == {"float32"}


def test_cpu_trace_has_the_cuda_autocast_dtypes_for_erfnet():
    # The cost model traces on the CPU; CUDA's autocast decides the same dtypes for
    # every convolution of ERFNet. The CPU's explicit casts before torch.cat and the
    # loss add a few percent of bytes that CUDA folds into the ops themselves.
    from ampbook.segmentation.model import ERFNet

    model = ERFNet()
    for precision in ("amp-fp16", "fp32"):
        cpu = trace_step(model, 2, 32, 64, precision, backward=False)
        cuda = trace_step(
            model, 2, 32, 64, precision, backward=False, device_type="cuda"
        )

        def convs(t):
            return [(o.scope, o.dtype, o.bytes) for o in _ops(t, op="convolution")]

        assert convs(cpu) == convs(cuda) and len(convs(cpu)) == 74
        c, g = cpu.totals()["bytes"], cuda.totals()["bytes"]
        assert g <= c <= 1.05 * g
        if precision == "fp32":
            assert c == g


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown precision"):
        trace_step(Net(), 1, 8, 8, "fp8")
    with pytest.raises(ValueError, match="height must be a positive integer"):
        trace_step(Net(), 1, 0, 8)
    with pytest.raises(ValueError, match="backward=False"):
        trace_step(Net(), 1, 8, 8, device_type="cuda")
    with pytest.raises(ValueError, match="unknown loss"):
        trace_step(Net(), 1, 8, 8, loss="hinge")
    with pytest.raises(ValueError, match="autocast_rules must be"):
        trace_step(Net(), 1, 8, 8, "amp-fp16", autocast_rules="tpu")

    class Dict(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = Net()

        def forward(self, x):
            return {"out": self.net(x)}

    with pytest.raises(ValueError, match="returned a dict, not a tensor"):
        trace_step(Dict(), 1, 8, 8)
    # with a loss that reads the dict, it traces
    trace = trace_step(Dict(), 1, 8, 8, loss=lambda y: y["out"].sum())
    assert {o.scope for o in trace.ops} >= {"net.stem", LOSS}


# --- roofline -------------------------------------------------------------------------

CEIL = Ceilings(
    "test", {"float32": 10.0, "float16": 40.0}, vector_tflops=5.0, bandwidth_gbs=500.0
)


def _op(mma, other, nbytes, dtype="float32"):
    return OpCost("forward", "x", "X", "op", dtype, mma, other, nbytes, 0.0)


def test_roofline_arithmetic():
    # 1e12 FLOPs at 10 TFLOP/s = 0.1 s; 1e9 bytes at 500 GB/s = 2 ms: compute-bound
    t = op_time(_op(1e12, 0, 1e9), CEIL)
    assert t.compute_s == pytest.approx(0.1) and t.memory_s == pytest.approx(0.002)
    assert t.time_s == pytest.approx(0.1) and t.bound == "compute"
    # the same in fp16 at 40 TFLOP/s: 25 ms
    assert op_time(_op(1e12, 0, 1e9, "float16"), CEIL).time_s == pytest.approx(0.025)
    # vector work at the vector peak, plus mma work: 1e10/5e12 + 1e11/1e13 = 2 ms + 10
    # ms
    assert op_time(_op(1e11, 1e10, 0), CEIL).compute_s == pytest.approx(0.012)
    # an elementwise op: 1e8 FLOPs, 4e9 bytes -> 8 ms, memory-bound
    t = op_time(_op(0, 1e8, 4e9), CEIL)
    assert t.time_s == pytest.approx(0.008) and t.bound == "memory"
    # the launch floor
    assert op_time(_op(0, 1, 8), CEIL, min_kernel_s=5e-6).time_s == 5e-6
    with pytest.raises(KeyError, match="bfloat16"):
        op_time(_op(1, 0, 1, "bfloat16"), CEIL)


def test_prediction_sums_operators_and_optimizer():
    trace = trace_step(Net(), 2, 8, 8)
    pred = predict(trace, CEIL, optimizer="adam")
    per_op = sum(op_time(o, CEIL).time_s for o in trace.ops)
    opt = optimizer_bytes(trace.parameters, "adam") / 500e9
    assert pred.min_step_s == pytest.approx(per_op + opt)
    assert pred.max_images_per_s == pytest.approx(2 / pred.min_step_s)
    assert 0.0 <= pred.memory_bound_share <= 1.0
    rows = pred.by_scope()
    assert sum(r["time_s"] for r in rows) == pytest.approx(per_op)
    assert {r["scope"] for r in rows} >= {"stem", "block", "block.conv", "head", LOSS}
    assert predict(trace, CEIL, optimizer=None).min_step_s == pytest.approx(per_op)


def test_optimizer_bytes():
    assert optimizer_bytes(1000, "adam") == 1000 * 4 * 7
    assert optimizer_bytes(1000, "adam", amp=True) == 1000 * 4 * 9
    assert optimizer_bytes(10, "sgd") == 10 * 4 * 5
    with pytest.raises(ValueError, match="unknown optimizer"):
        optimizer_bytes(10, "lamb")
    with pytest.raises(ValueError, match="parameters must be >= 0"):
        optimizer_bytes(-1, "adam")


def test_ceilings_from_device_and_checks():
    dev = SimpleNamespace(
        name="GPU",
        fp32_tflops=20.0,
        tf32_tflops=40.0,
        fp16_tflops_fp32acc=80.0,
        bf16_tflops=80.0,
        mem_bandwidth_gbs=900.0,
    )
    c = Ceilings.from_device(dev)
    assert c.mma_tflops == {"float32": 40.0, "float16": 80.0, "bfloat16": 80.0}
    assert Ceilings.from_device(dev, tf32=False).mma_tflops["float32"] == 20.0
    assert c.vector_tflops == 20.0 and c.bandwidth_gbs == 900.0
    with pytest.raises(ValueError, match="bandwidth_gbs must be positive"):
        Ceilings("bad", {"float32": 1.0}, 1.0, 0.0)


def test_ceilings_from_the_device_table():
    devices = pytest.importorskip("ampbook.core.devices")
    d = devices.load_devices()["rtx3070-desktop"]
    c = Ceilings.from_device(d)
    assert c.mma_tflops["float32"] == d.tf32_tflops
    assert c.mma_tflops["float16"] == d.fp16_tflops_fp32acc
    assert c.bandwidth_gbs == d.mem_bandwidth_gbs


def test_amp_bytes_for_erfnet_depend_on_the_image_size():
    # Autocast casts every fp32 weight to fp16 each step (and the weight gradients
    # back): about 6 bytes per parameter each way whatever the image size, while
    # activations scale with it. Tiny images: AMP moves more bytes than fp32; real ones:
    # fewer.
    from ampbook.segmentation.model import ERFNet

    model = ERFNet()
    for (h, w), amp_is_smaller in (((32, 64), False), ((256, 512), True)):
        fp32 = trace_step(model, 1, h, w).totals()
        amp = trace_step(model, 1, h, w, "amp-fp16").totals()
        assert amp["mma_flops"] == fp32["mma_flops"]
        assert (amp["bytes"] < fp32["bytes"]) == amp_is_smaller
        assert (
            amp["kernels"] > fp32["kernels"]
        )  # autocast's casts are kernels of their own


# --- the pipeline model ---------------------------------------------------------------


def test_loader_model():
    from ampbook.predict.pace import loader_images_per_s

    # 0.1 s per image: 10 img/s alone; 4 workers on 8 cores (1 kept for training): 40
    # img/s
    assert loader_images_per_s(0.1, 0, 8) == pytest.approx(10.0)
    assert loader_images_per_s(0.1, 4, 8) == pytest.approx(40.0)
    # more workers than free cores add nothing: 7 free cores -> 70 img/s
    assert loader_images_per_s(0.1, 12, 8) == pytest.approx(70.0)
    assert loader_images_per_s(0.1, 2, 1) == pytest.approx(10.0)  # at least one core
    with pytest.raises(ValueError, match="load_s_per_image must be positive"):
        loader_images_per_s(0.0, 1, 4)
    with pytest.raises(ValueError, match="workers >= 0"):
        loader_images_per_s(0.1, -1, 4)


# --- the bound's direction ------------------------------------------------------------


def _cpu_peak_ceilings() -> Ceilings:
    """Ceilings no CPU core here can beat: 32 fp32 FLOPs per cycle per thread (two AVX2
    FMA units; AVX-512 would be 64, so use that) at 6 GHz, and 2 TB/s of bandwidth."""
    flops = torch.get_num_threads() * 64 * 6e9 / 1e12
    return Ceilings("cpu upper peaks", {"float32": flops}, flops, 2000.0)


def _fastest(fn, repeats=3):
    import time

    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def test_the_roofline_is_a_lower_bound_on_measured_cpu_times():
    from ampbook.chapters.ch5 import bound_verdict

    ceil = _cpu_peak_ceilings()
    conv = nn.Conv2d(64, 64, 3, padding=1)
    x = torch.randn(1, 64, 64, 64, requires_grad=True)
    pred = predict(
        trace_step(conv, 1, 64, 64, in_channels=64, loss="sum"), ceil, optimizer=None
    )
    measured = _fastest(lambda: conv(x).sum().backward())
    assert 0 < pred.min_step_s <= measured
    assert 0 < pred.efficiency_of(measured) <= 1
    # a whole ERFNet step too
    from ampbook.segmentation.model import ERFNet

    model = ERFNet()
    img, lab = torch.randn(1, 3, 32, 64), torch.zeros(1, 32, 64, dtype=torch.long)
    step = predict(trace_step(model, 1, 32, 64), ceil, optimizer=None).min_step_s
    measured = _fastest(lambda: nn.functional.cross_entropy(model(img), lab).backward())
    assert step <= measured
    assert bound_verdict(step, measured).startswith(
        f"The bound ({step:.3g} s) is below"
    )
    assert "wrong" in bound_verdict(2.0, 1.0)
    # a step timed alone is the device's own work: no open question about the pace
    alone = bound_verdict(0.1, 10.0, "an fp32 step here", timed_alone=True)
    assert "timed without a loader" in alone and "reached 1% of the roofline" in alone
    assert "pace" not in alone
    assert "does not say what set the pace" in bound_verdict(0.1, 10.0)


# --- the post's setting from its memory figures ---------------------------------------


def test_solve_pixels_recovers_a_planted_setting():
    from ampbook.chapters.ch5 import solve_pixels
    from ampbook.measure.memory import Line

    fp32, amp = (
        Line(0.0, 100.0),
        Line(10.0, 60.0),
    )  # new bytes = intercept + slope * pixels
    for slack in (1.0, 1.2):
        f = 500 + slack * fp32(1000)
        a = 500 + slack * amp(1000)
        s = solve_pixels(fp32, amp, f, a, slack)
        assert s["pixels"] == pytest.approx(1000) and s["fixed_bytes"] == pytest.approx(
            500
        )
        assert s["fp32_saved_bytes"] == pytest.approx(100_000)
    with pytest.raises(ValueError, match="no positive batch"):
        solve_pixels(fp32, amp, 100, 200)  # AMP reported more than fp32
    with pytest.raises(ValueError, match="AMP saves no bytes per pixel"):
        solve_pixels(fp32, Line(0.0, 100.0), 200, 100)
    with pytest.raises(ValueError, match="slack must be >= 1"):
        solve_pixels(fp32, amp, 200, 100, slack=0.5)


# --- verdicts -------------------------------------------------------------------------


def test_verdicts_read_both_cases():
    from ampbook.chapters.ch5 import hypotheses_verdict, lowp_verdict
    from ampbook.predict.pace import pace_verdict, speedup_verdict

    assert speedup_verdict([0.2, 0.25, 0.3]).startswith(
        "AMP was slower than fp32 in every"
    )
    assert "median 0.25x" in speedup_verdict([0.2, 0.25, 0.3])
    assert speedup_verdict([1.2, 1.3]).startswith("AMP was faster")
    assert speedup_verdict([0.9, 1.1]).startswith("The rounds disagree")
    with pytest.raises(ValueError, match="no speedups"):
        speedup_verdict([])
    assert pace_verdict(10, 20).startswith("The loader sets the pace")
    assert pace_verdict(30, 20).startswith("The step sets the pace")
    assert hypotheses_verdict(1.5, 1.0, 0.8).startswith("(a) the loader")
    assert hypotheses_verdict(0.4, 1.0, 0.8).startswith("Both")
    assert hypotheses_verdict(0.4, 0.4, 0.1).startswith("(b) the AMP step is no faster")
    # the loader dominates and the step gained nothing: both, even though the epochs
    # differ more than the steps (loader noise), as in an H200 pair against TF32
    assert hypotheses_verdict(1.05, 0.89, 0.65).startswith("Both")
    assert hypotheses_verdict(1.06, 0.89, 0.65).startswith("(a) the loader")
    assert hypotheses_verdict(1.5, 1.5, 0.1).startswith("Neither")
    # one round is one timing: no median, no "every round", no spread
    one = speedup_verdict([1.01], "amp-bf16")
    assert one == ("amp-bf16 was faster than fp32 in the one round timed (1.01x); one "
                   "round: no spread to judge by.")  # fmt: skip
    assert "every round" not in one and "median" not in one
    assert "slower than fp32 in the one round" in speedup_verdict([0.5])
    assert "2 rounds from 1.20x to 1.30x" in speedup_verdict([1.2, 1.3])
    slow = lowp_verdict(["avx512_bf16"], 0.1)
    assert "bf16 matmul runs at 0.10x fp32's rate (it lists avx512_bf16)" in slow
    assert "slower than fp32's, and AMP costs time" in slow
    assert "lists no bf16/fp16 units" in lowp_verdict([], 0.1)
    assert "can pay" in lowp_verdict(["amx_bf16"], 3.0)
    assert "lists" not in lowp_verdict(None, 0.1)  # flags are not needed
    from ampbook.chapters.ch5 import MeasuredEfficiency as E
    from ampbook.chapters.ch5 import efficiency_range_verdict as erv

    effs = [E("net", "gpu", 0.4), E("net", "gpu", 1.3), E("net", "gpu", 0.8)]
    line = erv(39, effs, 66.7, "x", network="net", device="gpu")  # 1.3 left out
    assert "(48.8 to 97.5 s at the 2 measured efficiencies (40%-80%))" in line
    assert erv(39, effs[1:2], 66.7, "x", network="net", device="gpu").startswith(
        "No profile of net on gpu is committed"
    )
