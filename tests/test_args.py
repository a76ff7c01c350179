"""One positive-integer rule (``ampbook.core.args.is_positive_int``, behind
``cli.positive_int``): every check of a count or a size that takes a value in code
refuses True (1 to Python), 0, -1 and 1.5, and accepts 1."""

from __future__ import annotations

import argparse

import pytest
from torch import nn

from ampbook.core import cli

REFUSED = (True, 0, -1, 1.5)


def test_the_rule():
    assert cli.is_positive_int(1) and cli.is_positive_int(2**40)
    for value in (*REFUSED, False, None, "3", 2.0):
        assert not cli.is_positive_int(value), value


@pytest.mark.parametrize("text", ["True", "0", "-1", "1.5", ""])
def test_the_command_lines_type(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cli.positive_int(text)
    assert cli.positive_int("1") == 1


def _train(v):
    from ampbook.train.config import TrainConfig, validate

    validate(TrainConfig(epochs=v))


def _trace(v):
    from ampbook.predict.steptrace import trace_step

    trace_step(nn.Conv2d(3, 4, 1), v, 8, 8)


def _doctor(v):
    from ampbook.chapters.ch6.diagnosis import DoctorConfig, diagnose

    diagnose(DoctorConfig(model="erfnet", batch=v, measure=False))


def _probe(v):
    from ampbook.measure.cpu_kernels import probe_conv

    probe_conv(("fp32",), channels=v)


def _probe_threads(v):
    from ampbook.measure.cpu_kernels import probe_conv

    probe_conv(("fp32",), threads=v)


def _matmul(v):
    from ampbook.measure.timing import time_matmul

    time_matmul(v, device="cpu")


def _elementwise(v):
    from ampbook.measure.timing import time_elementwise

    time_elementwise(v, device="cpu")


def _conv(v):
    from ampbook.chapters.ch2.bench_sweeps import time_conv2d

    time_conv2d(v, 4, 8, 8, device="cpu")


def _profile(v):
    from booktools.layers import profile_layers

    profile_layers("fp32", v, 16, 32, "cpu")


def _ladder(v):
    from ampbook.chapters.ch7.rungs import LadderSpec

    LadderSpec(batch_size=v).check()


def _ladder_warmup(v):
    from ampbook.chapters.ch7.rungs import LadderSpec

    LadderSpec(warmup=v).check()


ENTRY_POINTS = {
    "train.config.validate (epochs)": (_train, "epochs must be a positive integer"),
    "steptrace.trace_step (batch_size)": (_trace, "batch_size must be a positive"),
    "diagnosis.diagnose (batch)": (_doctor, "--batch .*must be a positive integer"),
    "cpu_kernels.probe_conv (channels)": (_probe, "channels must be a positive"),
    "cpu_kernels.probe_conv (threads)": (_probe_threads, "threads must be a positive"),
    "timing.time_matmul (n)": (_matmul, "matmul size n must be a positive"),
    "timing.time_elementwise (numel)": (_elementwise, "numel must be a positive"),
    "bench_sweeps.time_conv2d (batch)": (_conv, "conv batch must be a positive"),
    "layers.profile_layers (batch_size)": (_profile, "batch_size must be a positive"),
    "ladder.LadderSpec (batch_size)": (_ladder, "batch_size must be a positive"),
    "ladder.LadderSpec (warmup)": (_ladder_warmup, "warmup must be at least 1"),
}


@pytest.mark.parametrize("value", REFUSED, ids=repr)
@pytest.mark.parametrize("where", sorted(ENTRY_POINTS))
def test_every_former_copy_refuses(where, value):
    call, words = ENTRY_POINTS[where]
    with pytest.raises(ValueError, match=words):
        call(value)
