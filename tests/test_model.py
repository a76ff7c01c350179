"""ERFNet: the architecture of the paper, its parameter count, shapes, errors,
precisions."""

import pytest
import torch
from torch import nn

from ampbook.segmentation.model import (
    Downsampler,
    ERFNet,
    NonBottleneck1D,
    Upsampler,
)


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# The count Table I's layer shapes give, independently of the module: convolutions
# with biases, BatchNorm's weight and bias per channel (running stats are buffers).
def _conv(cin: int, cout: int, kh: int, kw: int) -> int:
    return cin * cout * kh * kw + cout


def _downsampler(cin: int, cout: int) -> int:
    return _conv(cin, cout - cin, 3, 3) + 2 * cout


def _non_bottleneck_1d(c: int) -> int:
    return 2 * (_conv(c, c, 3, 1) + _conv(c, c, 1, 3) + 2 * c)


def _upsampler(cin: int, cout: int) -> int:
    return _conv(cin, cout, 3, 3) + 2 * cout


def _table_count(num_classes: int) -> int:
    encoder = (
        _downsampler(3, 16)
        + _downsampler(16, 64)
        + 5 * _non_bottleneck_1d(64)
        + _downsampler(64, 128)
        + 8 * _non_bottleneck_1d(128)
    )
    decoder = (
        _upsampler(128, 64)
        + 2 * _non_bottleneck_1d(64)
        + _upsampler(64, 16)
        + 2 * _non_bottleneck_1d(16)
        + _conv(16, num_classes, 2, 2)
    )
    return encoder + decoder


@pytest.mark.parametrize("num_classes", [19, 20])
def test_parameter_count_of_the_layer_table(num_classes):
    assert _params(ERFNet(num_classes)) == _table_count(num_classes)


def test_parameter_count_grows_by_the_output_layer_per_class():
    # Each class adds one 2x2 filter over 16 channels and one bias to the last layer.
    assert _params(ERFNet(20)) - _params(ERFNet(19)) == 16 * 2 * 2 + 1


def test_layers_follow_the_paper():
    model = ERFNet()
    enc = list(model.encoder.layers)
    kinds = [type(b).__name__ for b in enc]
    assert kinds == (
        ["Downsampler"] * 2
        + ["NonBottleneck1D"] * 5
        + ["Downsampler"]
        + ["NonBottleneck1D"] * 8
    )
    assert [b.bn.num_features for b in enc if isinstance(b, Downsampler)] == [
        16,
        64,
        128,
    ]
    blocks = [b for b in enc if isinstance(b, NonBottleneck1D)]
    assert [b.dilation for b in blocks] == [1] * 5 + [2, 4, 8, 16, 2, 4, 8, 16]
    assert [b.dropout.p for b in blocks] == [0.03] * 5 + [0.3] * 8
    # the second factorised pair is dilated, the first is not
    assert blocks[8].conv3x1_2.dilation == (16, 1) and blocks[8].conv1x3_2.dilation == (
        1,
        16,
    )
    assert blocks[8].conv3x1_1.dilation == (1, 1)
    dec = list(model.decoder.layers)
    assert [type(b).__name__ for b in dec] == [
        "Upsampler",
        "NonBottleneck1D",
        "NonBottleneck1D",
    ] * 2
    assert [b.bn.num_features for b in dec if isinstance(b, Upsampler)] == [64, 16]
    assert all(
        isinstance(b.dropout, nn.Identity)
        for b in dec
        if isinstance(b, NonBottleneck1D)
    )
    assert isinstance(model.decoder.output, nn.ConvTranspose2d)
    assert model.decoder.output.out_channels == 19 and model.decoder.output.stride == (
        2,
        2,
    )


def test_downsamplers_halve_and_decoder_restores_resolution():
    model = ERFNet(5).eval()
    sizes = []
    hooks = [
        m.register_forward_hook(lambda m, i, o: sizes.append(tuple(o.shape[1:])))
        for m in model.modules()
        if isinstance(m, (Downsampler, Upsampler))
    ]
    with torch.no_grad():
        out = model(torch.randn(1, 3, 32, 48))
    for h in hooks:
        h.remove()
    assert sizes == [(16, 16, 24), (64, 8, 12), (128, 4, 6), (64, 8, 12), (16, 16, 24)]
    assert out.shape == (1, 5, 32, 48)


@pytest.mark.parametrize("shape", [(2, 3, 16, 32), (1, 3, 40, 24)])
def test_output_has_input_size(shape):
    with torch.no_grad():
        out = ERFNet(20).eval()(torch.randn(*shape))
    assert out.shape == (shape[0], 20, *shape[2:])


@pytest.mark.parametrize("hw", [(30, 64), (64, 100), (4, 8)])
def test_sides_not_divisible_by_8_are_an_error(hw):
    with pytest.raises(ValueError, match="divisible by 8"):
        ERFNet()(torch.randn(1, 3, *hw))


def test_wrong_channel_count_is_an_error():
    with pytest.raises(ValueError, match="N x 3 x H x W"):
        ERFNet()(torch.randn(1, 1, 32, 32))


def test_channels_last_gives_the_same_result():
    torch.manual_seed(0)
    model = ERFNet(7).eval()
    x = torch.randn(2, 3, 32, 64)
    with torch.no_grad():
        ref = model(x)
        model_cl = model.to(memory_format=torch.channels_last)
        out = model_cl(x.contiguous(memory_format=torch.channels_last))
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_on_cpu_trains(dtype):
    # Tiny input: low-precision convolutions are very slow on CPUs without AMX.
    torch.manual_seed(0)
    model = ERFNet(4).train()
    x = torch.randn(2, 3, 16, 16)
    target = torch.randint(0, 4, (2, 16, 16))
    with torch.autocast("cpu", dtype=dtype):
        out = model(x)
        loss = nn.functional.cross_entropy(out.float(), target)
    assert out.dtype == dtype
    loss.backward()
    assert all(
        p.dtype == torch.float32 for p in model.parameters()
    )  # weights stay fp32
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters()
    )


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_on_cuda_channels_last(dtype):
    if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    model = ERFNet().cuda().to(memory_format=torch.channels_last).train()
    x = torch.randn(2, 3, 64, 128, device="cuda").contiguous(
        memory_format=torch.channels_last
    )
    with torch.autocast("cuda", dtype=dtype):
        out = model(x)
    assert out.dtype == dtype and out.shape == (2, 19, 64, 128)
    out.float().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


# --- the fp16 residual stream (an option; the reference ERFNet is the default) --------


def _pair(num_classes: int = 19):
    torch.manual_seed(0)
    reference = ERFNet(num_classes)
    torch.manual_seed(0)
    stream = ERFNet(num_classes, fp16_stream=True)
    return reference, stream


def test_fp16_stream_changes_no_parameter_and_no_fp32_output():
    reference, stream = _pair()
    assert not reference.fp16_stream and stream.fp16_stream
    a, b = reference.state_dict(), stream.state_dict()
    assert list(a) == list(b)
    for key in a:
        assert a[key].shape == b[key].shape and torch.equal(a[key], b[key]), key
    x = torch.randn(2, 3, 32, 64)
    for mode in ("eval", "train"):
        getattr(reference, mode)(), getattr(stream, mode)()
        torch.manual_seed(1)  # the same dropout masks in train mode
        out_a = reference(x)
        torch.manual_seed(1)
        out_b = stream(x)
        assert out_a.dtype == out_b.dtype == torch.float32
        assert torch.equal(out_a, out_b), mode


def _encoder_dtypes(model: ERFNet, x: torch.Tensor) -> list[torch.dtype]:
    """Output dtype of each encoder block under CPU bf16 autocast."""
    seen: list[torch.dtype] = []
    hooks = [
        block.register_forward_hook(lambda m, a, out: seen.append(out.dtype))
        for block in model.encoder.layers
    ]
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return seen


def test_fp16_stream_keeps_the_encoder_16_bit_under_autocast():
    from ampbook.measure.memory import saved_for_backward

    reference, stream = _pair()
    x = torch.randn(2, 3, 32, 64)
    target = torch.randint(0, 19, (2, 32, 64))
    # The reference: the first downsampler's cat promotes to fp32, and every residual
    # add of a bf16 branch to that fp32 skip stays fp32.
    assert set(_encoder_dtypes(reference, x)) == {torch.float32}
    assert set(_encoder_dtypes(stream, x)) == {torch.bfloat16}
    saved_ref = saved_for_backward(reference, x, target, "cpu", torch.bfloat16)
    saved_16 = saved_for_backward(stream, x, target, "cpu", torch.bfloat16)
    assert saved_16["new_bytes"] < saved_ref["new_bytes"]
    fp32_ref = saved_ref["by_dtype"]["float32"]
    assert saved_16["by_dtype"].get("float32", 0) < fp32_ref / 2


def test_a_downsampler_that_does_not_widen_is_refused():
    for out in (16, 8):  # the conv would get 0 or negative channels
        with pytest.raises(ValueError, match="a downsampler widens"):
            Downsampler(16, out)
