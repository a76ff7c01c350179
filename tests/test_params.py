"""Notebook parameter checks: good values pass through, bad ones name parameter and
rule."""

from __future__ import annotations

import pytest
import torch

from ampbook.core import params
from ampbook.core.params import ParameterError


def test_good_values_come_back():
    assert params.integer("n", 5, minimum=1) == 5
    assert params.number("t", 1, above=0) == 1.0
    assert params.integers("sizes", (64, 128), minimum=1, count=2, multiple_of=8) == [
        64,
        128,
    ]
    assert params.choice("p", "fp32", ["fp32", "amp-bf16"]) == "fp32"
    assert params.device("device", "cuda:1") == "cuda:1"
    assert params.device("device", torch.device("cpu")) == torch.device("cpu")
    assert params.rule("x", 3, 3 % 2 == 1, "must be odd") == 3


@pytest.mark.parametrize(
    "call, expected",
    [
        (
            lambda: params.integer("n_samples", 10, minimum=1000),
            "parameter n_samples = 10: must be an integer >= 1000",
        ),
        (
            lambda: params.integer("n_samples", True),
            "parameter n_samples = True: must be an integer",
        ),
        (lambda: params.integer("n_samples", 2.5), "must be an integer"),
        (
            lambda: params.number("min_time", 0, above=0),
            "parameter min_time = 0: must be a number > 0",
        ),
        (
            lambda: params.number("min_time", float("nan")),
            "min_time = nan: must be a number",
        ),
        (lambda: params.number("lr", "0.1"), "parameter lr = '0.1': must be a number"),
        (
            lambda: params.integers(
                "matmul_sizes", [64], count=2, why="the fit needs two"
            ),
            "parameter matmul_sizes = [64]: needs at least 2 distinct values (the fit "
            "needs two)",
        ),
        (
            lambda: params.integers("matmul_sizes", [64, 64], count=2),
            "at least 2 distinct",
        ),
        (
            lambda: params.integers("sizes", 64),
            "parameter sizes = 64: must be a list of integers",
        ),
        (lambda: params.integers("sizes", "64"), "must be a list of integers"),
        (
            lambda: params.integers("sizes", [64, -1], minimum=1),
            "every item must be an integer >= 1; -1 is not",
        ),
        (
            lambda: params.integers("shape_sizes", [128, 100], multiple_of=8),
            "every item must be a multiple of 8; 100 is not",
        ),
        (
            lambda: params.choice("precision", "fp8", ["fp32", "amp-bf16"]),
            "parameter precision = 'fp8': must be one of 'fp32', 'amp-bf16'",
        ),
        (
            lambda: params.device("device", "gpu"),
            "parameter device = 'gpu': must be 'auto'",
        ),
        (  # torch knows these; the book runs on the CPU or CUDA
            lambda: params.device("device", "mps"),
            "parameter device = 'mps': must be 'auto'",
        ),
        (
            lambda: params.device("device", torch.device("meta")),
            "parameter device = device(type='meta'): must be 'auto'",
        ),
        (
            lambda: params.rule("x", 4, False, "must be odd", "why not"),
            "parameter x = 4: must be odd (why not)",
        ),
    ],
)
def test_bad_values_name_parameter_and_rule(call, expected):
    with pytest.raises(ParameterError) as info:
        call()
    assert expected in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)
