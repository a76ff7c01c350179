"""The runner's optimisations (issue 18): each a ``TrainConfig`` field and a
``python -m ampbook.train`` flag, recorded in the run, checked on ``--resume``. Tiny
runs (32x64 pixels, a few synthetic images) on the CPU; no timing (``python -m
booktools.bench_step --options`` prints the ratios)."""

import dataclasses

import pytest
import torch

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
    cfg = config_from_args(["--16-bit-stream", "--cudnn-benchmark"])
    assert cfg.fp16_stream and cfg.cudnn_benchmark
    line = command_line(cfg)
    assert "--16-bit-stream" in line and "--cudnn-benchmark" in line
    assert config_from_args(line.split()[3:]) == cfg
    assert config_from_args(["--fp16-stream", "--cudnn-benchmark"]) == cfg  # old name


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


def test_workers_auto_uses_the_cores_and_bad_values_are_refused(capsys, monkeypatch):
    from ampbook.train.config import cpu_cores

    cfg = config_from_args(["--workers", "auto"])
    assert cfg.workers == "auto" and "--workers auto" in command_line(cfg)
    res = validate(dataclasses.replace(cfg, device="cpu"))
    assert res.workers == res.cpu_cores == cpu_cores() >= 1
    assert validate(TrainConfig(**TINY)).workers == 0
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun: 2 processes share them
    assert validate(dataclasses.replace(cfg, device="cpu")).workers == max(
        1, cpu_cores() // 2
    )
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


# --- the sync-free step ------------------------------------------------------------

NAN_AT = (1, 3, 4)  # batches whose images hold a NaN: loss and gradients non-finite


def _batches(n: int = 7):
    g = torch.Generator().manual_seed(5)
    out = []
    for i in range(n):
        x = torch.randn(1, 3, 16, 32, generator=g)
        if i in NAN_AT:
            x[0, 0, 0, 0] = float("nan")
        out.append((x, torch.randint(0, 19, (1, 16, 32), generator=g)))
    return out


def _train_steps(precision="fp32", fused=False, sync_every=1, max_nonfinite=20):
    cfg = TrainConfig(
        **TINY,
        precision=precision,
        fused_optimizer=fused,
        sync_every=sync_every,
        max_nonfinite=max_nonfinite,
    )
    tr = build_training(cfg, validate(cfg))
    batches = _batches()
    tr.step.begin_epoch(len(batches))
    returned = []
    for x, y in batches:
        torch.manual_seed(11)  # the same dropout masks in every variant
        returned.append(tr.step(x, y))
        assert tr.step.synced == (returned[-1] is not None)
    tr.step.sync()
    return tr, returned


@pytest.mark.parametrize(
    "precision, fused",
    [("fp32", False), ("fp32", True), ("amp-fp16", False), ("amp-fp16", True)],
)
def test_sync_every_counts_exactly_and_changes_no_number(precision, fused):
    ref, ref_returned = _train_steps(precision, fused, sync_every=1)
    tr, returned = _train_steps(precision, fused, sync_every=3)
    # values come back only at the reads: batches 3 and 6 (the 7th at sync())
    assert [v is not None for v in returned] == [i % 3 == 2 for i in range(7)]
    assert all(v is not None for v in ref_returned)
    assert ref.step.counters == tr.step.counters
    for t in (ref, tr):
        c = t.step.counters
        assert c.nonfinite_losses == 3 and c.skipped_steps + c.optimizer_steps == 7
        # fp16: the scaler may also skip a step whose scaled gradients overflowed
        assert c.skipped_steps == 3 if precision == "fp32" else c.skipped_steps >= 3
        losses = t.step.take_losses()
        assert [i for i, v in enumerate(losses) if v != v] == list(NAN_AT)
        assert all(torch.isfinite(p).all() for p in t.net.parameters())
    assert ref.step.take_losses()[0] == tr.step.take_losses()[0]
    assert str(ref.step.take_losses()) == str(tr.step.take_losses())
    for a, b in zip(ref.net.parameters(), tr.net.parameters(), strict=True):
        assert torch.equal(a, b)
    if precision == "amp-fp16":  # each skipped step halved the scale
        skipped = tr.step.counters.skipped_steps
        assert tr.scaler.get_scale() == ref.scaler.get_scale() == 65536.0 * 0.5**skipped


def test_the_fused_kernel_skips_on_the_device_without_a_read():
    cfg = TrainConfig(**TINY, fused_optimizer=True, sync_every=4)
    tr = build_training(cfg, validate(cfg))
    (x, y), (bad, _) = _batches(2)
    tr.step(x, y)
    params = [p.detach().clone() for p in tr.net.parameters()]
    state = tr.optimizer.state_dict()["state"]
    state = {k: {n: v.clone() for n, v in s.items()} for k, s in state.items()}
    assert tr.step(bad, y) is None and not tr.step.synced  # nothing read yet
    for a, b in zip(params, tr.net.parameters(), strict=True):
        assert torch.equal(a, b)  # the NaN gradients were not applied
    after = tr.optimizer.state_dict()["state"]
    for k, s in state.items():
        for n, v in s.items():
            assert torch.equal(v, after[k][n]), (k, n)  # nor counted as a step
    tr.step.sync()
    c = tr.step.counters
    assert (c.optimizer_steps, c.skipped_steps, c.nonfinite_losses) == (1, 1, 1)


def test_max_nonfinite_is_checked_at_each_read():
    from ampbook.train import NonFiniteLossError

    with pytest.raises(NonFiniteLossError, match="read every 5 batches; seen after"):
        _train_steps("fp32", fused=True, sync_every=5, max_nonfinite=2)
    with pytest.raises(NonFiniteLossError, match="^2 consecutive optimizer steps"):
        _train_steps("fp32", fused=True, sync_every=1, max_nonfinite=2)


def test_a_run_with_sync_every_gives_the_same_record_numbers():
    runs = [
        run_training(TrainConfig(**{**RUN, "synthetic_train": 5}, sync_every=n))
        for n in (1, 4)
    ]
    same = ("train_loss", "val_loss", "val_miou", "optimizer_steps", "steps")
    a, b = (r["epochs"][0] for r in runs)
    assert {k: a[k] for k in same} == {k: b[k] for k in same}
    assert runs[1]["config"]["sync_every"] == 4


# --- torch.compile -----------------------------------------------------------------


def test_compile_modes_parse_and_bad_ones_are_refused(capsys):
    assert config_from_args(["--compile", "max-autotune"]).compile == "max-autotune"
    assert config_from_args([]).compile is None
    with pytest.raises(SystemExit):
        config_from_args(["--compile", "fast"])
    assert "invalid choice: 'fast'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="unknown compile mode 'fast'"):
        validate(TrainConfig(**TINY, compile="fast"))


def test_inductor_without_a_cpp_compiler_is_refused_before_any_work(monkeypatch):
    import torch._inductor.config as inductor

    monkeypatch.setattr(inductor.cpp, "cxx", (None, "no-such-compiler-here"))
    with pytest.raises(ConfigError, match="needs a C.. compiler on a CPU") as err:
        validate(TrainConfig(**TINY, compile="default"))
    assert "no-such-compiler-here" in str(err.value)
    assert "--compile aot_eager" in str(err.value)
    validate(TrainConfig(**TINY, compile="aot_eager"))  # generates no code: fine


@pytest.mark.slow  # TorchDynamo + AOTAutograd trace ERFNet: ~17 s of CPU time
def test_a_compiled_run_times_its_compilation_apart(tmp_path):
    cfg = TrainConfig(
        **{**RUN, "epochs": 2}, compile="aot_eager", out=str(tmp_path), name="c"
    )
    r = run_training(cfg)
    e1, e2 = r["epochs"]
    assert r["config"]["compile"] == "aot_eager"
    # epoch 1's first step compiled (one batch size: no recompile); the rest did not
    assert e1["compile_s"] > 0 and e2["compile_s"] == 0.0
    assert e1["compile_s"] > e1["step_s"]  # compiling costs more than the steps
    assert e1["compile_s"] + e1["step_s"] + e1["data_wait_s"] <= e1["wall_s"] * 1.001
    ckpt = torch.load(tmp_path / "c.ckpt", weights_only=True)
    assert not any(k.startswith("_orig_mod") for k in ckpt["model"])  # bare ERFNet
    with pytest.raises(ConfigError, match="compile: checkpoint 'aot_eager' vs now"):
        run_training(dataclasses.replace(cfg, compile=None, resume=True))


def test_a_quoted_tilde_in_the_output_folders_is_the_home_folder(tmp_path, monkeypatch):
    """validate checks "~/runs" as the home folder's runs: the run must write there, not
    into a folder named "~" under the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = TrainConfig(out="~/runs", save_predictions="~/predictions")
    assert cfg.out == str(tmp_path / "runs")
    assert cfg.save_predictions == str(tmp_path / "predictions")
    assert TrainConfig(out="runs/~x").out == "runs/~x"  # only a leading ~ is the home
