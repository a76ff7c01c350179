"""The runner's optimisations (issue 18): each a ``TrainConfig`` field and a
``python -m ampbook.train`` flag, recorded in the run, checked on ``--resume``. Tiny
runs (32x64 pixels, a few synthetic images) on the CPU; no timing (``python -m
ampbook.bench step --options`` prints the ratios)."""

import dataclasses

import pytest

from ampbook.train import (
    ConfigError,
    TrainConfig,
    build_training,
    command_line,
    config_from_args,
    run_training,
    validate,
)

TINY = dict(device="cpu", height=32, width=64, workers=0, quiet=True)
RUN = dict(TINY, epochs=1, batch_size=2, synthetic_train=4, synthetic_val=2)


def test_new_flags_parse_and_round_trip():
    cfg = config_from_args(["--fp16-stream", "--cudnn-benchmark"])
    assert cfg.fp16_stream and cfg.cudnn_benchmark
    line = command_line(cfg)
    assert "--fp16-stream" in line and "--cudnn-benchmark" in line
    assert config_from_args(line.split()[3:]) == cfg


def test_fp16_stream_builds_the_option_model_and_must_match_on_resume(tmp_path):
    cfg = TrainConfig(**RUN, fp16_stream=True, out=str(tmp_path), name="stream")
    tr = build_training(cfg, validate(cfg))
    assert tr.net.fp16_stream and all(
        d.fp16_stream for d in tr.net.encoder.layers if hasattr(d, "pool")
    )
    r = run_training(cfg)
    assert r["config"]["fp16_stream"] is True
    again = dataclasses.replace(cfg, fp16_stream=False, resume=True, epochs=2)
    with pytest.raises(ConfigError, match="fp16_stream: checkpoint True vs now False"):
        run_training(again)
