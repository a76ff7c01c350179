"""ampbook.measure.autocast_rules: documented op lists, dispatcher registrations,
autocast regions real and fake, CUDA's lists as the installed torch declares them."""

import pytest
import torch

from ampbook.measure import autocast_rules


def test_documented_lists_have_the_known_ops():
    cpu, cuda = (
        autocast_rules.documented_ops("cpu"),
        autocast_rules.documented_ops("cuda"),
    )
    assert set(cpu) == set(cuda) == set(autocast_rules.CATEGORIES)
    assert "conv2d" in cpu["lower_precision"] and "conv2d" in cuda["lower_precision"]
    assert "softmax" in cuda["float32"] and "softmax" not in cpu["float32"]
    assert "cat" in cpu["promote"]
    assert autocast_rules.documented_category("nll_loss2d", "cpu") == "float32"
    assert autocast_rules.documented_category("relu", "cpu") is None
    assert (
        autocast_rules.documented_category(
            "interpolate", "cuda", aliases=("cross_entropy",)
        )
        == "float32"
    )


def test_registered_ops_come_from_the_dispatcher():
    cpu, cuda = (
        autocast_rules.registered_ops("cpu"),
        autocast_rules.registered_ops("cuda"),
    )
    assert "conv2d" in cpu and "conv2d" in cuda
    assert "softmax" in cuda and "softmax" not in cpu
    assert all("::" not in n and "." not in n for n in cpu)  # overloads merged
    with pytest.raises(ValueError, match="device_type"):
        autocast_rules.registered_ops("tpu")


def test_fake_region_is_for_cuda():
    with pytest.raises(ValueError, match="fake=True"):
        with autocast_rules.autocast_region("cpu", fake=True):
            pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_real_cuda_region_without_gpu_says_so():
    with pytest.raises(RuntimeError, match="fake=True"):
        with autocast_rules.autocast_region("cuda"):
            pass


def test_fake_region_restores_autocast_state():
    before = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
    with autocast_rules.autocast_region("cuda", torch.float16, fake=True) as dev:
        assert torch.is_autocast_enabled("cuda")
        assert (
            torch.mm(torch.randn(2, 2, device=dev), torch.randn(2, 2, device=dev)).dtype
            == torch.float16
        )
    assert (
        torch.is_autocast_enabled("cuda"),
        torch.get_autocast_dtype("cuda"),
    ) == before


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
        ("LOWER_PRECISION_FP", autocast_rules.CUDA_LOWER_PRECISION),
        ("FP32", autocast_rules.CUDA_FP32),
        ("FP32_SET_OPT_DTYPE", autocast_rules.CUDA_FP32_SET_DTYPE - {"norm"}),
        (
            "PROMOTE",
            autocast_rules.CUDA_PROMOTE - {"grid_sample"},
        ),  # F.grid_sample: grid_sampler
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
    assert autocast_rules.cuda_category("upsample_bilinear2d") == "float32"
    assert autocast_rules.cuda_category("upsample_bilinear2d_backward") == "float32"
    assert autocast_rules.cuda_category("grid_sampler_2d") == "promote"
    assert autocast_rules.cuda_category("native_layer_norm") == "float32"
    assert autocast_rules.cuda_category("_log_softmax") == "float32"
    assert autocast_rules.cuda_category("convolution") == "lower_precision"
    assert (
        autocast_rules.cuda_category("add") is None
        and autocast_rules.cuda_category("_fft_r2c") is None
    )
