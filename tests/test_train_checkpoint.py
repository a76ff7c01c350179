"""A run killed in the middle of an epoch and resumed from its checkpoint ends with the
same weights and numbers, bit for bit, as a run that was never interrupted."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ampbook.core.paths import REPO_ROOT
from ampbook.train import ConfigError, TrainConfig, run_training

# Shuffled data, random flips and dropout: everything that draws random numbers is on.
ARGS = [
    "--device",
    "cpu",
    "--epochs",
    "2",
    "--batch-size",
    "1",
    "--height",
    "32",
    "--width",
    "64",
    "--workers",
    "0",
    "--synthetic-train",
    "6",
    "--synthetic-val",
    "2",
    "--flip",
    "--seed",
    "3",
    "--name",
    "resume-test",
]


def _start(out: Path, *extra: str, progress: str = "off") -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ampbook.train",
            *ARGS,
            "--out",
            str(out),
            "--progress",
            progress,
            *extra,
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
    )


def _kill_during_epoch_2(proc: subprocess.Popen, timeout: float = 120.0) -> bytes:
    """Read the progress bar on stderr; SIGKILL once epoch 2 has trained at least one
    batch."""
    seen = b""
    deadline = time.monotonic() + timeout
    fd = proc.stderr.fileno()
    while time.monotonic() < deadline:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        seen += chunk
        if re.search(rb"epoch 2/2 fp32:[^\r\n]*\| *[1-5]/6", seen):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return seen
    proc.kill()
    pytest.fail(
        "never saw epoch 2 in progress; "
        f"stderr:\n{seen.decode(errors='replace')[-2000:]}"
    )


def test_killed_and_resumed_run_matches_an_uninterrupted_one(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    reference = _start(whole)  # runs beside the one we kill
    victim = _start(cut, progress="on")
    _kill_during_epoch_2(victim)
    assert victim.returncode == -signal.SIGKILL

    ckpt = torch.load(cut / "resume-test.ckpt", weights_only=True)
    assert ckpt["epoch"] == 1  # killed after epoch 1's checkpoint, inside epoch 2
    partial = json.loads((cut / "resume-test.json").read_text())
    assert partial["status"] == "running" and len(partial["epochs"]) == 1

    resumed = _start(cut, "--resume")
    out, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err.decode()
    assert b"resumed resume-test" in out
    out, err = reference.communicate(timeout=180)
    assert reference.returncode == 0, err.decode()

    a = torch.load(whole / "resume-test.ckpt", weights_only=True)
    b = torch.load(cut / "resume-test.ckpt", weights_only=True)
    assert a["epoch"] == b["epoch"] == 2
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    for pid, state in a["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][pid][key]), (pid, key)
    assert torch.equal(a["rng"][0]["torch"], b["rng"][0]["torch"])

    ra = json.loads((whole / "resume-test.json").read_text())
    rb = json.loads((cut / "resume-test.json").read_text())
    assert rb["status"] == ra["status"] == "complete"
    assert (
        rb["resolved"]["resumed_from_epoch"] == 1
        and ra["resolved"]["resumed_from_epoch"] is None
    )
    numbers = (
        "train_loss",
        "lr",
        "val_loss",
        "val_pixel_accuracy",
        "val_miou",
        "val_iou",
        "optimizer_steps",
        "skipped_steps",
        "steps",
        "images",
    )
    for ea, eb in zip(ra["epochs"], rb["epochs"], strict=True):
        assert {k: ea[k] for k in numbers} == {k: eb[k] for k in numbers}

    # Resuming with settings that change the numbers is refused, naming the setting.
    cfg = TrainConfig(
        device="cpu",
        epochs=2,
        batch_size=1,
        height=32,
        width=64,
        workers=0,
        synthetic_train=6,
        synthetic_val=2,
        flip=True,
        seed=3,
        name="resume-test",
        out=str(cut),
        resume=True,
        lr=1e-3,
        quiet=True,
    )
    with pytest.raises(ConfigError, match=r"lr: checkpoint 0.0005 vs now 0.001"):
        run_training(cfg)


def test_a_checkpoint_that_fails_with_an_empty_message_is_refused_by_name(tmp_path):
    """restore names the failure even when the error has no message (it used to index
    the message's first line and raise IndexError instead of the ConfigError)."""
    from ampbook.train.checkpoint import restore

    class Net:
        def load_state_dict(self, state):
            raise RuntimeError()

    class Training:
        net = Net()

    with pytest.raises(ConfigError, match=r"does not fit this run \(RuntimeError: "):
        restore({"model": {}}, tmp_path / "x.ckpt", Training(), 0)
