"""The training runner: options checked before work, the results record, AMP paths,
non-finite losses, and DistributedDataParallel (two CPU processes on gloo train a tiny
epoch with AMP; rank 0 writes one results file). Tiny runs (32x64 pixels, a few
synthetic images) on the CPU."""

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ampbook.core.paths import REPO_ROOT
from ampbook.results import TRAIN_SCHEMA_VERSION, load_results
from ampbook.train import (
    PRECISIONS,
    ConfigError,
    NonFiniteLossError,
    TrainConfig,
    TrainError,
    build_parser,
    command_line,
    config_from_args,
    enet_class_weights,
    main,
    run_name,
    run_training,
)

TINY = dict(device="cpu", height=32, width=64, workers=0, quiet=True)


# --- options --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"precision": "fp8"}, ["unknown precision", "fp8", "amp-bf16"]),
        ({"epochs": -1}, ["epochs", "-1"]),
        ({"epochs": 0}, ["epochs", "positive"]),
        ({"batch_size": 0}, ["batch_size"]),
        ({"height": 60}, ["height", "multiple of 8", "60"]),
        ({"lr": 0.0}, ["lr", "positive"]),
        ({"lr": float("nan")}, ["lr"]),
        ({"accumulate": 0}, ["accumulate"]),
        ({"clip_grad": -1.0}, ["clip_grad"]),
        ({"class_weights": "median"}, ["class_weights", "median", "enet"]),
        ({"tf32": "maybe"}, ["tf32"]),
        ({"workers": -2}, ["workers"]),
        ({"resume": True}, ["resume", "out"]),
    ],
)
def test_bad_options_are_refused_before_any_work(tmp_path, changes, words):
    cfg = TrainConfig(
        **{**TINY, "out": None, "data_root": str(tmp_path / "nowhere"), **changes}
    )
    with pytest.raises(ConfigError) as err:
        run_training(cfg)
    for w in words:
        assert w in str(err.value)
    assert not list(tmp_path.iterdir())  # nothing was written


def test_resume_without_checkpoint_names_the_file(tmp_path):
    cfg = TrainConfig(**TINY, out=str(tmp_path), resume=True, epochs=2)
    with pytest.raises(ConfigError, match=re.escape(f"{run_name(cfg)}.ckpt")):
        run_training(cfg)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_requested_without_cuda():
    with pytest.raises(ConfigError, match="no CUDA"):
        run_training(TrainConfig(**{**TINY, "device": "cuda"}))


def test_missing_data_root_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        run_training(TrainConfig(**TINY, data_root=str(tmp_path / "nowhere")))


def test_cli_reports_bad_options_with_exit_code_2(capsys, tmp_path):
    assert (
        main(["--epochs", "-3", "--device", "cpu", "--out", str(tmp_path / "o")]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error:") and "epochs" in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):  # argparse refuses an unknown precision by itself
        build_parser().parse_args(["--precision", "fp12"])


def test_command_line_round_trips_a_config():
    cfg = TrainConfig(
        precision="amp-fp16",
        shuffle=False,
        height=64,
        width=128,
        clip_grad=2.0,
        out="/tmp/x",
        checkpoint=False,
        progress=False,
        data_root="/data/cs",
    )
    line = command_line(cfg)
    assert line.startswith("python -m ampbook.train ") and "--no-shuffle" in line
    assert config_from_args(line.split()[3:]) == cfg


def test_every_config_field_is_a_cli_option():
    parser = build_parser()
    dests = {a.dest for a in parser._actions}
    assert {f.name for f in dataclasses.fields(TrainConfig)} <= dests
    cfg = config_from_args(
        [
            "--precision",
            "amp-bf16",
            "--no-shuffle",
            "--channels-last",
            "--clip-grad",
            "1.5",
            "--accumulate",
            "3",
            "--tf32",
            "on",
            "--cudnn-benchmark",
            "--progress",
            "off",
            "--data-root",
            "/x",
        ]
    )
    assert (
        cfg.precision,
        cfg.shuffle,
        cfg.channels_last,
        cfg.clip_grad,
        cfg.accumulate,
        cfg.tf32,
        cfg.cudnn_benchmark,
        cfg.progress,
        cfg.data_root,
    ) == ("amp-bf16", False, True, 1.5, 3, "on", True, False, "/x")
    assert config_from_args([]).out == "build/runs"
    assert PRECISIONS == ("fp32", "amp-fp16", "amp-bf16")


# --- a real fp32 run, shared by the tests below ---------------------------------------


@pytest.fixture(scope="module")
def fp32_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fp32")
    cfg = TrainConfig(
        **TINY,
        epochs=2,
        batch_size=2,
        synthetic_train=4,
        synthetic_val=2,
        out=str(tmp / "runs"),
        save_predictions=str(tmp / "preds"),
    )
    return cfg, run_training(cfg), tmp


def _documented_keys(section: str) -> set[str]:
    """Keys listed in a table of data/results/README.md under the heading
    ``section``."""
    text = (REPO_ROOT / "data" / "results" / "README.md").read_text()
    part = text.split(f"### {section}", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `([a-z_0-9]+)`", part, flags=re.M))


def test_results_file_matches_the_returned_record_and_schema(fp32_run):
    cfg, result, tmp = fp32_run
    path = Path(result["json_path"])
    assert path.name == f"{run_name(cfg)}.json"
    on_disk = load_results(path)
    assert on_disk == {k: v for k, v in result.items() if k != "json_path"}
    assert (
        result["schema_version"] == TRAIN_SCHEMA_VERSION
        and result["status"] == "complete"
    )
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        [path.name, f"{run_name(cfg)}.ckpt"]
    )
    assert result["config"] == json.loads(json.dumps(dataclasses.asdict(cfg)))
    assert result["resolved"]["synthetic_data"] is True
    assert (
        result["resolved"]["autocast_dtype"] is None
        and result["resolved"]["grad_scaler"] is False
    )
    assert result["environment"]["torch"] == torch.__version__
    # every key is documented, and every documented key is there
    assert set(result) - {"json_path"} == _documented_keys("Top level") - {"stopped"}
    assert set(result["resolved"]) == _documented_keys("resolved")
    assert set(result["summary"]) == _documented_keys("summary")
    for rec in result["epochs"]:
        assert set(rec) == _documented_keys("Epoch record")


def test_epoch_records_hold_consistent_numbers(fp32_run):
    cfg, result, _ = fp32_run
    e1, e2 = result["epochs"]
    for i, rec in enumerate(result["epochs"], 1):
        assert rec["epoch"] == i
        assert rec["steps"] == 2 and rec["images"] == 4 and rec["optimizer_steps"] == 2
        assert (
            rec["skipped_steps"] == 0
            and rec["nonfinite_losses"] == 0
            and rec["loss_scale"] is None
        )
        assert rec["step_s"] + rec["data_wait_s"] <= rec["wall_s"] * 1.001
        assert rec["epoch_s"] >= rec["wall_s"] + rec["val_s"]
        assert rec["images_per_s"] == pytest.approx(4 / rec["wall_s"])
        assert rec["saved_tensor_bytes"] > 1e6 and set(
            rec["saved_tensor_by_dtype"]
        ) <= {"float32", "int64"}
        assert rec["peak_rss_bytes"] > rec["saved_tensor_bytes"]
        assert rec["cuda_max_allocated_bytes"] is None
        assert 0 <= rec["val_pixel_accuracy"] <= 1 and 0 <= rec["val_miou"] <= 1
        assert len(rec["val_iou"]) == 19 and math.isfinite(rec["train_loss"])
    assert e1["lr"] == pytest.approx(5e-4)
    assert e2["lr"] == pytest.approx(5e-4 * (1 - 1 / 2) ** 0.9)  # poly decay
    s = result["summary"]
    assert s["epochs_completed"] == 2 and s["total_wall_s"] == pytest.approx(
        e1["wall_s"] + e2["wall_s"]
    )
    assert s["final_val_miou"] == e2["val_miou"]


def test_checkpoint_loads_weights_only_and_holds_the_final_state(fp32_run):
    cfg, result, tmp = fp32_run
    ckpt = torch.load(Path(cfg.out) / f"{run_name(cfg)}.ckpt", weights_only=True)
    assert ckpt["epoch"] == 2
    assert {"model", "optimizer", "scheduler", "scaler", "rng", "records"} <= set(ckpt)
    assert set(ckpt["rng"][0]) == {"torch", "cuda", "numpy", "python"}
    assert (
        json.loads(ckpt["records"])[1]["train_loss"]
        == result["epochs"][1]["train_loss"]
    )
    assert ckpt["scheduler"]["last_epoch"] == 2


def test_saved_predictions_are_label_id_pngs_that_the_evaluator_reads(fp32_run):
    from ampbook.segmentation.cityscapes import TRAIN_TO_LABEL, Cityscapes
    from ampbook.segmentation.metrics import evaluate_folder, prediction_path

    cfg, result, tmp = fp32_run
    root = result["resolved"]["data_root"]
    val = Cityscapes(root, "val", cfg.height, cfg.width)
    files = sorted((tmp / "preds").rglob("*.png"))
    assert files == sorted(prediction_path(tmp / "preds", img) for img, _ in val.pairs)
    for img, label in val.pairs:
        with (
            Image.open(prediction_path(tmp / "preds", img)) as p,
            Image.open(label) as gt,
        ):
            assert p.size == gt.size and p.mode == "L"
            assert set(np.unique(np.asarray(p)).tolist()) <= set(
                TRAIN_TO_LABEL.tolist()
            )
    scores = evaluate_folder(tmp / "preds", root, "val")
    assert scores["images"] == len(val) and 0 <= scores["pixel_accuracy"] <= 1


# --- AMP paths and options ------------------------------------------------------------


def test_fp16_with_scaler_accumulation_clipping_and_channels_last(tmp_path):
    cfg = TrainConfig(
        **TINY,
        precision="amp-fp16",
        epochs=1,
        batch_size=1,
        synthetic_train=4,
        synthetic_val=2,
        accumulate=2,
        clip_grad=1.0,
        channels_last=True,
        shuffle=False,
        out=str(tmp_path),
    )
    r = run_training(cfg)
    (rec,) = r["epochs"]
    assert (
        r["resolved"]["autocast_dtype"] == "float16"
        and r["resolved"]["grad_scaler"] is True
    )
    assert r["resolved"]["global_batch_size"] == 2
    assert r["environment"]["memory_format"] == "channels_last"
    assert (
        r["config"]["accumulate"],
        r["config"]["clip_grad"],
        r["config"]["shuffle"],
    ) == (2, 1.0, False)
    assert rec["steps"] == 4
    assert rec["optimizer_steps"] + rec["skipped_steps"] == 2  # one per two batches
    # every skipped step halved the scale (no growth within 2000 steps)
    assert rec["loss_scale"] == 65536.0 * 0.5 ** rec["skipped_steps"]
    assert rec["saved_tensor_by_dtype"].get("float16", 0) > 0
    from ampbook.core.env import cpu_flags

    if not {"amx_fp16", "avx512_fp16"} & set(cpu_flags()):
        assert any("fp16" in w for w in r["resolved"]["warnings"])


def test_bf16_autocast_without_scaler(tmp_path):
    cfg = TrainConfig(
        **TINY,
        precision="amp-bf16",
        epochs=1,
        batch_size=2,
        synthetic_train=2,
        synthetic_val=2,
        out=None,
    )
    r = run_training(cfg)
    (rec,) = r["epochs"]
    assert "json_path" not in r and r["resolved"]["autocast_dtype"] == "bfloat16"
    assert rec["loss_scale"] is None and rec["optimizer_steps"] == 1
    assert rec["saved_tensor_by_dtype"]["bfloat16"] > rec["saved_tensor_by_dtype"].get(
        "float32", 0
    )


@pytest.mark.parametrize("precision", ["fp32", "amp-fp16"])
def test_a_loss_that_stays_non_finite_stops_the_run(tmp_path, precision):
    # lr=1e30: the first update blows the weights up, every later loss is inf/NaN.
    cfg = TrainConfig(
        **TINY,
        precision=precision,
        epochs=3,
        batch_size=1,
        synthetic_train=8,
        synthetic_val=2,
        lr=1e30,
        max_nonfinite=3,
        out=str(tmp_path),
    )
    with pytest.raises(NonFiniteLossError, match="3 consecutive optimizer steps"):
        run_training(cfg)
    r = json.loads((tmp_path / f"{run_name(cfg)}.json").read_text())
    assert r["status"] == "stopped: non-finite loss"
    stop = r["stopped"]
    assert (
        stop["epoch"] == 1
        and stop["skipped_steps"] >= 3
        and stop["nonfinite_losses"] >= 1
    )
    assert stop["optimizer_steps"] >= 1  # it did train before blowing up
    assert r["epochs"] == []  # no epoch finished, none is reported
    assert (stop["loss_scale"] is not None) == (precision == "amp-fp16")


def test_enet_class_weights_follow_the_label_histogram():
    from ampbook.segmentation.cityscapes import NUM_CLASSES, Cityscapes
    from ampbook.segmentation.synthetic import synthetic_root

    ds = Cityscapes(synthetic_root(4, 2, 64, 128), "train", 32, 64)
    counts = np.zeros(NUM_CLASSES)
    for i in range(len(ds)):
        lab = ds[i][1].numpy().ravel()
        counts += np.bincount(lab[lab < NUM_CLASSES], minlength=NUM_CLASSES)
    expected = 1 / np.log(1.02 + counts / counts.sum())
    weights = enet_class_weights(ds)
    np.testing.assert_allclose(weights, expected, rtol=1e-6)
    for c in np.flatnonzero(counts == 0):  # absent classes: the largest weight
        assert weights[c] == pytest.approx(1 / np.log(1.02))
    assert enet_class_weights(ds) == weights  # cached


def test_bench_step_compares_the_runner_with_a_bare_loop_doing_the_same_work():
    from ampbook.train import build_training, validate
    from ampbook.train.step import step_batch as _batch
    from booktools.bench_step import bare_step_fn, measure_overhead

    cfg = TrainConfig(**TINY, batch_size=1)
    res = validate(cfg)
    runner, bare = build_training(cfg, res).step, bare_step_fn(cfg, res.device)
    for seed in (1, 2):  # same weights, same batch, same dropout: same loss
        x, y = _batch(cfg, res.device, seed)
        torch.manual_seed(7)
        a = runner(x, y)
        torch.manual_seed(7)
        assert bare(x, y) == a
    o = measure_overhead("fp32", "cpu", 32, 64, 1, rounds=2, steps_per_round=1)
    assert o["samples"] == 2 and len(o["bare_times_s"]) == 2
    assert (
        o["ratio"] == pytest.approx(o["runner_s"] / o["bare_s"]) and o["runner_s"] > 0
    )


def test_an_epoch_that_learned_nothing_stops_the_run(tmp_path):
    # lr=1e30: epoch 1's first update blows the weights up; from then on every loss
    # is non-finite and every step is skipped, which max_nonfinite (set high) does not
    # catch: epoch 2 learned nothing, and the run says so instead of "complete".
    cfg = TrainConfig(
        **TINY,
        epochs=3,
        batch_size=1,
        synthetic_train=4,
        synthetic_val=2,
        lr=1e30,
        max_nonfinite=10_000,
        out=str(tmp_path),
    )
    with pytest.raises(TrainError, match="learned nothing") as err:
        run_training(cfg)
    assert "stopped after epoch 2" in str(err.value)
    r = json.loads((tmp_path / f"{run_name(cfg)}.json").read_text())
    assert r["status"] == "stopped: nothing learned"
    assert r["stopped"]["epoch"] == 2 and "learned nothing" in r["stopped"]["message"]
    assert [e["epoch"] for e in r["epochs"]] == [1, 2]
    assert r["epochs"][0]["optimizer_steps"] >= 1


def test_skipped_steps_of_a_scalers_search_are_not_a_run_that_learned_nothing():
    """A short fp16 epoch can skip every step while its GradScaler halves the scale
    down from 2**16 (chapter 3's smoke run: 2 steps, both skipped): that is the search,
    not a broken run. The same skips with the scale below 1, or with no scaler (bf16,
    fp32: a skip there is a non-finite gradient), are."""
    from ampbook.train.loop import learned_nothing

    epoch = {"epoch": 1, "steps": 2, "train_loss": 2.9, "optimizer_steps": 0}
    assert learned_nothing(dict(epoch, loss_scale=2.0**14)) is None
    assert "learned nothing" in learned_nothing(dict(epoch, loss_scale=0.5))
    assert "learned nothing" in learned_nothing(dict(epoch, loss_scale=None))
    assert learned_nothing(dict(epoch, optimizer_steps=1, loss_scale=None)) is None
    assert "finite loss" in learned_nothing(
        dict(epoch, train_loss=None, loss_scale=2.0**16)
    )


def test_two_process_gloo_run_writes_one_record(tmp_path):
    out = tmp_path / "runs"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "ampbook.train",
        "--device",
        "cpu",
        "--precision",
        "amp-fp16",
        "--epochs",
        "1",
        "--batch-size",
        "1",
        "--height",
        "32",
        "--width",
        "64",
        "--workers",
        "0",
        "--synthetic-train",
        "4",
        "--synthetic-val",
        "2",
        "--out",
        str(out),
        "--name",
        "ddp",
    ]
    proc = subprocess.run(
        cmd,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["ddp.ckpt", "ddp.json"]
    assert proc.stdout.count("results:") == 1  # printed by rank 0 only

    r = json.loads((out / "ddp.json").read_text())
    assert r["status"] == "complete"
    assert r["resolved"]["world_size"] == 2 and r["resolved"]["global_batch_size"] == 2
    assert r["resolved"]["grad_scaler"] is True
    (rec,) = r["epochs"]
    assert rec["steps"] == 2 and rec["images"] == 4  # each rank: half of the 4 images
    assert rec["optimizer_steps"] + rec["skipped_steps"] == 2
    assert rec["loss_scale"] == 65536.0 * 0.5 ** rec["skipped_steps"]
    assert 0 <= rec["val_pixel_accuracy"] <= 1
    ckpt = torch.load(out / "ddp.ckpt", weights_only=True)
    assert len(ckpt["rng"]) == 2  # one RNG state per process
    assert not torch.equal(
        ckpt["rng"][0]["torch"], ckpt["rng"][1]["torch"]
    )  # own dropout streams
