"""``ampbook.chapters.ch5.bench_step.step_rounds``: configurations timed in turns, one
time per
round."""

from __future__ import annotations

import pytest

from ampbook.chapters.ch5.bench_step import step_rounds
from ampbook.train import TrainConfig


def test_step_rounds_times_each_configuration_once_per_round():
    cfgs = {
        b: TrainConfig(device="cpu", height=16, width=32, batch_size=b, workers=0)
        for b in (1, 4)
    }
    times = step_rounds(cfgs, rounds=3)
    assert set(times) == {1, 4} and all(len(t) == 3 for t in times.values())
    assert all(t > 0 for ts in times.values() for t in ts)
    # four images cost more than one: the times belong to their configurations
    assert min(times[4]) > min(times[1])
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        step_rounds(cfgs, rounds=0)
