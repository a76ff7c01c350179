"""The precision vocabulary (ampbook.core.precision): names both ways, the CPU check,
and the backend flags put back as they were, by the context manager and by a training
run."""

from __future__ import annotations

import pytest
import torch

from ampbook.core import precision as P
from ampbook.train import TrainConfig, run_training


def test_dtype_names_both_ways():
    for short, torch_name in (
        ("fp32", "float32"),
        ("fp16", "float16"),
        ("bf16", "bfloat16"),
        ("fp64", "float64"),
    ):
        dtype = getattr(torch, torch_name)
        assert P.to_dtype(short) is dtype and P.to_dtype(torch_name) is dtype
        assert P.to_dtype(f"torch.{torch_name}") is dtype
        assert P.torch_name(short) == torch_name and P.short_name(torch_name) == short
        assert P.short_name(dtype) == short and P.torch_name(dtype) == torch_name
    assert P.to_dtype("tf32") is torch.float32 and P.short_name("tf32") == "fp32"
    with pytest.raises(ValueError, match="unknown dtype 'float17'"):
        P.to_dtype("float17")
    with pytest.raises(ValueError, match="no short name"):
        P.short_name(torch.int8)


def test_precisions_and_their_autocast_dtypes():
    assert P.PRECISIONS == ("fp32", "amp-fp16", "amp-bf16")
    assert [P.autocast_dtype(p) for p in P.PRECISIONS] == [
        None,
        torch.float16,
        torch.bfloat16,
    ]
    with pytest.raises(ValueError, match="unknown precision 'fp8'.*amp-bf16"):
        P.autocast_dtype("fp8")


def test_native_cpu_flags_reads_the_flags_given():
    flags = ["avx2", "avx512f", "avx512_bf16"]
    assert P.native_cpu_flags("bf16", flags) == ["avx512_bf16"]
    assert P.native_cpu_flags("amp-bf16", flags) == ["avx512_bf16"]
    assert P.native_cpu_flags(torch.float16, flags) == []
    assert P.native_cpu_flags("amp-fp16", ["amx_fp16"]) == ["amx_fp16"]
    assert P.native_cpu_flags("fp32", flags) == []
    assert P.native_cpu_flags(None, ["amx_bf16", "amx_fp16", "avx2"]) == [
        "amx_bf16",
        "amx_fp16",
    ]


@pytest.fixture
def unusual_flags():
    """Backend flags set to values no code path here chooses; put back after the
    test."""
    saved = P.backend_flags_now()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("medium")  # also allows TF32 matmuls
    torch.backends.cudnn.deterministic = False
    torch.use_deterministic_algorithms(False)
    yield P.backend_flags_now()
    P._restore(saved)


def test_backend_flags_restores_even_after_an_error(unusual_flags):
    with pytest.raises(RuntimeError, match="inside"):
        with P.backend_flags(tf32=True, cudnn_benchmark=False, deterministic=True):
            now = P.backend_flags_now()
            assert now["float32_matmul_precision"] == "high" and now["cudnn_tf32"]
            assert not now["cudnn_benchmark"] and now["deterministic"]
            raise RuntimeError("inside")
    assert P.backend_flags_now() == unusual_flags


def test_run_training_leaves_the_flags_as_it_found_them(unusual_flags):
    # every flag the run sets differs from the unusual values: tf32 on turns the fp32
    # matmul precision from "medium" to "high"
    cfg = TrainConfig(
        device="cpu",
        height=16,
        width=32,
        workers=0,
        quiet=True,
        epochs=1,
        batch_size=2,
        synthetic_train=2,
        synthetic_val=1,
        tf32="on",
        cudnn_benchmark=False,
        deterministic=True,
        checkpoint=False,
    )
    r = run_training(cfg)
    env = r["environment"]  # read during the run: the run's own flags
    assert env["tf32_cudnn"] is True and env["cudnn_benchmark"] is False
    assert env["float32_matmul_precision"] == "high"
    assert P.backend_flags_now() == unusual_flags
