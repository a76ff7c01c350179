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


def test_workers_auto_uses_the_cores_and_bad_values_are_refused(capsys):
    from ampbook.train.config import cpu_cores

    cfg = config_from_args(["--workers", "auto"])
    assert cfg.workers == "auto" and "--workers auto" in command_line(cfg)
    res = validate(dataclasses.replace(cfg, device="cpu"))
    assert res.workers == res.cpu_cores == cpu_cores() >= 1
    assert validate(TrainConfig(**TINY)).workers == 0
    with pytest.raises(SystemExit):
        config_from_args(["--workers", "many"])
    assert "neither a number of worker processes nor 'auto'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="workers must be 0 or more, or 'auto'"):
        validate(TrainConfig(**{**TINY, "workers": "all"}))


def test_fused_adam_trains_like_the_for_loop_and_is_recorded():
    runs = {}
    for fused in (False, True):
        cfg = TrainConfig(**RUN, fused_optimizer=fused, out=None)
        runs[fused] = run_training(cfg)
    assert runs[True]["resolved"]["optimizer"] == "fused"
    assert runs[False]["resolved"]["optimizer"] == "for-loop"  # torch's CPU default
    assert runs[True]["config"]["fused_optimizer"] is True
    # the same update, rounded differently: the losses agree to float tolerance
    a, b = (runs[f]["epochs"][0] for f in (False, True))
    assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5)
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-3)


def test_fused_adam_where_torch_has_none_is_refused(monkeypatch):
    import ampbook.train.config as config

    monkeypatch.setattr(config, "fused_devices", lambda: ("cuda",))
    with pytest.raises(ConfigError, match="no fused Adam for cpu"):
        validate(TrainConfig(**TINY, fused_optimizer=True))
