"""DistributedDataParallel: two CPU processes (gloo) train a tiny epoch with AMP; rank 0
writes one results file."""

import json
import os
import subprocess
import sys

import torch

from ampbook.core.paths import REPO_ROOT


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
