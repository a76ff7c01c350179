"""`python -m ampbook.train` under bad input: each known failure is one `error:` line
and a nonzero exit, and what earlier runs wrote stays as it was. Tiny runs on the
CPU."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _cli import one_error
from PIL import Image

from ampbook.core.paths import REPO_ROOT
from ampbook.train import main

# 4 train / 2 val images of 32x64, trained at 16x32: an epoch is 2 batches of 2.
ARGS = [
    "--device",
    "cpu",
    "--epochs",
    "1",
    "--batch-size",
    "2",
    "--height",
    "16",
    "--width",
    "32",
    "--workers",
    "0",
    "--progress",
    "off",
    "--quiet",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from ampbook.segmentation.synthetic import synthesize

    return synthesize(tmp_path_factory.mktemp("data") / "ds", 4, 2, height=32, width=64)


@pytest.fixture(scope="module")
def finished(data, tmp_path_factory) -> Path:
    """A folder holding one finished run, `a`, kept intact by every later failure."""
    out = tmp_path_factory.mktemp("runs")
    assert (
        main([*ARGS, "--data-root", str(data), "--out", str(out), "--name", "a"]) == 0
    )
    return out


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def run_cli(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    code = main([*ARGS, *argv])
    err = capsys.readouterr().err
    return code, err


# --- overwrite, lock, output paths ----------------------------------------------------


def test_second_run_of_a_name_is_refused_and_overwrite_replaces(finished, data, capsys):
    before = snapshot(finished)
    code, err = run_cli(
        capsys, "--data-root", str(data), "--out", str(finished), "--name", "a"
    )
    assert code == 2
    one_error(err, "a.json already holds run 'a'", "complete", "--overwrite", "--name")
    assert "--resume" not in err  # a finished run has nothing to resume
    assert snapshot(finished) == before

    copy = finished.parent / "copy"
    shutil.copytree(finished, copy)
    old = json.loads((copy / "a.json").read_text())
    code, err = run_cli(
        capsys,
        "--data-root",
        str(data),
        "--out",
        str(copy),
        "--name",
        "a",
        "--overwrite",
    )
    assert code == 0, err
    new = json.loads((copy / "a.json").read_text())
    assert new["status"] == "complete" and new["started"] >= old["started"]
    assert sorted(p.name for p in copy.iterdir()) == [
        "a.ckpt",
        "a.json",
    ]  # no lock left

    code, err = run_cli(
        capsys,
        "--data-root",
        str(data),
        "--out",
        str(copy),
        "--name",
        "a",
        "--overwrite",
        "--resume",
    )
    assert code == 2 and "contradict" in one_error(err)


def test_a_name_in_use_by_a_live_process_is_refused_naming_it(finished, data, capsys):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from ampbook.train import RunLock; "
            f"RunLock({str(finished / 'b.lock')!r}, 'b'); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        before = snapshot(finished)
        code, err = run_cli(
            capsys, "--data-root", str(data), "--out", str(finished), "--name", "b"
        )
        assert code == 2
        one_error(err, "run 'b'", "in use by another process", f"pid {holder.pid}")
        assert snapshot(finished) == before
    finally:
        holder.kill()  # SIGKILL: the kernel frees the lock; nothing stale remains
        holder.wait()
    code, err = run_cli(
        capsys, "--data-root", str(data), "--out", str(finished), "--name", "b"
    )
    assert code == 0, err
    (finished / "b.json").unlink()
    (finished / "b.ckpt").unlink()


def test_two_runs_started_at_once_one_refuses(data, tmp_path):
    out = tmp_path / "runs"
    cmd = [
        sys.executable,
        "-m",
        "ampbook.train",
        *ARGS,
        "--data-root",
        str(data),
        "--out",
        str(out),
        "--name",
        "same",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(cmd, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    results = [(p.wait(timeout=240), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    err = next(e for code, e in results if code == 2)
    one_error(err, "same")
    assert "in use by another process" in err or "already holds run 'same'" in err
    assert json.loads((out / "same.json").read_text())["status"] == "complete"


@pytest.mark.parametrize(
    "case",
    [
        "out-empty",
        "out-file",
        "json-folder",
        "pred-unwritable",
        "name-path",
        "too-small",
    ],
)
def test_output_and_size_errors_before_any_step(case, finished, data, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    argv = ["--data-root", str(data), "--out", str(finished), "--name", "c"]
    words = {
        "out-empty": (["--out", ""], ["out is an empty path"]),
        "out-file": (["--out", str(blocker)], ["is a file, not a folder"]),
        "json-folder": ([], ["c.json is a folder"]),
        "pred-unwritable": (
            ["--save-predictions", str(blocker / "p")],
            ["save_predictions", "is a file, so", "cannot be made below it"],
        ),
        "name-path": (["--name", "../c"], ["is not a file name"]),
        "too-small": (
            ["--height", "8", "--width", "8"],
            ["8x8 (W x H) is too small", "batch norm"],
        ),
    }
    extra, expected = words[case]
    if case == "json-folder":
        (finished / "c.json").mkdir()
    before = snapshot(finished)
    try:
        code, err = run_cli(capsys, *argv, *extra)
    finally:
        if case == "json-folder":
            (finished / "c.json").rmdir()
    assert code == 2
    one_error(err, *expected)
    assert snapshot(finished) == before
    assert not (finished / "c.lock").exists() and blocker.read_text() == "x"


def test_read_only_out_is_refused(data, tmp_path, capsys):
    """A read-only file system (a tmpfs mounted ro: the tests run as root, for whom
    permission bits do not make a folder read-only)."""
    out = tmp_path / "ro"
    out.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(out)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a read-only tmpfs here: {done.stderr.strip()}")
    try:
        code, err = run_cli(
            capsys, "--data-root", str(data), "--out", str(out / "runs"), "--name", "d"
        )
    finally:
        subprocess.run(["umount", "-l", str(out)], capture_output=True)
    assert code == 2 and "read-only file system" in one_error(err, str(out))


def test_stale_temporary_files_of_the_name_are_removed(data, tmp_path, capsys):
    out = tmp_path / "runs"
    out.mkdir()
    for name in (
        ".e.ckpt.4242.tmp",
        ".e.json.17.tmp",
        ".other.ckpt.5.tmp",
        ".e.ckpt.tmp",
    ):
        (out / name).write_text("left by a killed run")
    code, err = run_cli(
        capsys, "--data-root", str(data), "--out", str(out), "--name", "e"
    )
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        ".e.ckpt.tmp",
        ".other.ckpt.5.tmp",
        "e.ckpt",
        "e.json",
    ]


# --- accumulation ---------------------------------------------------------------------


def test_accumulation_steps_at_the_end_of_each_epoch_and_rejects_impossible_windows(
    data, tmp_path, capsys
):
    out = tmp_path / "runs"
    # 4 batches of 1 per epoch in windows of 3: one full window, one of 1 at the end.
    code, err = run_cli(
        capsys,
        "--data-root",
        str(data),
        "--out",
        str(out),
        "--name",
        "acc",
        "--batch-size",
        "1",
        "--accumulate",
        "3",
        "--epochs",
        "2",
    )
    assert code == 0, err
    r = json.loads((out / "acc.json").read_text())
    assert [e["optimizer_steps"] for e in r["epochs"]] == [2, 2]
    before = snapshot(out)
    code, err = run_cli(
        capsys,
        "--data-root",
        str(data),
        "--out",
        str(out),
        "--name",
        "acc10",
        "--accumulate",
        "10",
    )
    assert code == 2
    one_error(
        err,
        "accumulate 10 is more than the 2 batches of an epoch",
        "--accumulate 2 or less",
    )
    assert snapshot(out) == before


# --- data -----------------------------------------------------------------------------


def _damage(root: Path, case: str) -> None:
    image = sorted((root / "leftImg8bit" / "train").glob("*/*.png"))[1]
    label = sorted((root / "gtFine" / "train").glob("*/*.png"))[1]
    if case == "image-without-label":
        label.unlink()
    elif case == "label-without-image":
        image.unlink()
    elif case == "split-without-images":
        for f in (root / "leftImg8bit" / "val").glob("*/*.png"):
            f.unlink()
        for f in (root / "gtFine" / "val").glob("*/*.png"):
            f.unlink()
    elif case == "missing-split":
        shutil.rmtree(root / "leftImg8bit" / "val")
        shutil.rmtree(root / "gtFine" / "val")
    elif case == "truncated-label":
        label.write_bytes(label.read_bytes()[:100])
    elif case == "wrong-size-label":
        Image.new("L", (10, 10)).save(label)
    elif case == "rgb-label":
        Image.new("RGB", (64, 32)).save(label)
    elif case == "out-of-table-label":
        Image.new("L", (64, 32), 200).save(label)


DATA_CASES = {
    "image-without-label": (2, ["has no label file"]),
    "label-without-image": (2, ["has no image"]),
    "split-without-images": (2, ["split 'val'", "holds no"]),
    "missing-split": (2, ["split 'val' is missing"]),
    "truncated-label": (
        1,
        ["cannot decode label file", "Fix or remove that file", "nothing was saved"],
    ),
    "wrong-size-label": (2, ["is 64x32 but its label file", "is 10x10"]),
    "rgb-label": (2, ["has 3 channels"]),
    "out-of-table-label": (1, ["ids outside the Cityscapes label table", "[200]"]),
}


@pytest.mark.parametrize("case", sorted(DATA_CASES))
def test_data_errors_are_one_line(case, data, finished, tmp_path, capsys):
    root = tmp_path / "ds"
    shutil.copytree(data, root)
    _damage(root, case)
    before = snapshot(finished)
    code, err = run_cli(
        capsys, "--data-root", str(root), "--out", str(finished), "--name", "f"
    )
    expected_code, words = DATA_CASES[case]
    assert code == expected_code
    one_error(err, *words)
    assert "Caught" not in err and ".cpp" not in err
    assert snapshot(finished) == before


def test_data_error_mid_run_keeps_the_finished_epochs(data, tmp_path, capsys):
    """A label that decodes badly after epoch 1 was saved stops the run with the
    resume command; the checkpoint and results of epoch 1 stay."""
    root = tmp_path / "ds"
    shutil.copytree(data, root)
    out = tmp_path / "runs"
    # Many short epochs; break a label file as soon as epoch 1's results appear.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ampbook.train",
            *ARGS,
            "--data-root",
            str(root),
            "--out",
            str(out),
            "--name",
            "g",
            "--workers",
            "1",
            "--batch-size",
            "1",
            "--epochs",
            "30",
        ],
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + 120
    while not (out / "g.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    label = sorted((root / "gtFine" / "train").glob("*/*.png"))[0]
    Image.new("L", (64, 32), 200).save(label)
    proc.wait(timeout=240)
    err = proc.stderr.read()
    assert proc.returncode == 1, err
    line = one_error(
        err, "ids outside the Cityscapes label table", "continue with:", "--resume"
    )
    r = json.loads((out / "g.json").read_text())
    assert r["status"] == "failed" and len(r["epochs"]) >= 1
    ckpt = torch.load(out / "g.ckpt", weights_only=True)
    assert ckpt["epoch"] == len(r["epochs"])
    assert (
        f"hold epoch{'s 1-' if len(r['epochs']) > 1 else ' '}{len(r['epochs'])}" in line
    )


# --- checkpoints ----------------------------------------------------------------------


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo this should never run",))


CHECKPOINTS = {
    "truncated": lambda good, path: path.write_bytes(good[:1000]),
    "empty": lambda good, path: path.write_bytes(b""),
    "text": lambda good, path: path.write_text("hello\n"),
    "list": lambda good, path: torch.save([1, 2], path),
    "dict-without-keys": lambda good, path: torch.save(
        {"format": "ampbook.train.checkpoint/1", "epoch": 1}, path
    ),
    "other-dict": lambda good, path: torch.save({"model": {}}, path),
    "malicious-pickle": lambda good, path: torch.save({"x": _Evil()}, path),
}


@pytest.mark.parametrize("case", sorted(CHECKPOINTS))
def test_resume_from_a_bad_checkpoint_is_one_line(
    case, finished, data, tmp_path, capsys
):
    out = tmp_path / "runs"
    shutil.copytree(finished, out)
    path = out / "a.ckpt"
    CHECKPOINTS[case](path.read_bytes(), path)
    before = snapshot(out)
    code, err = run_cli(
        capsys, "--data-root", str(data), "--out", str(out), "--name", "a", "--resume"
    )
    assert code == 2
    one_error(err, f"{path} is not a checkpoint of this runner", "--overwrite")
    assert "weights_only" not in err
    assert snapshot(out) == before


# --- Ctrl-C, and accumulation + resume equal to an uninterrupted run ------------------

# 6 batches per epoch in windows of 4 (4 + 2), with every option that carries state.
RESUME_ARGS = [
    "--device",
    "cpu",
    "--epochs",
    "2",
    "--batch-size",
    "1",
    "--height",
    "16",
    "--width",
    "32",
    "--workers",
    "0",
    "--seed",
    "5",
    "--flip",
    "--accumulate",
    "4",
    "--clip-grad",
    "1.0",
    "--class-weights",
    "enet",
    "--precision",
    "amp-fp16",
    "--name",
    "acc-resume",
]


def _train(data: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ampbook.train",
            *RESUME_ARGS,
            "--data-root",
            str(data),
            "--out",
            str(out),
            *extra,
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
    )


def test_ctrl_c_then_resume_with_accumulation_equals_an_uninterrupted_run(tmp_path):
    from ampbook.segmentation.synthetic import synthesize

    data = synthesize(tmp_path / "ds", 6, 2, height=32, width=64)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    reference = _train(data, whole)
    victim = _train(data, cut, "--progress", "on")
    seen, deadline = b"", time.monotonic() + 180
    while time.monotonic() < deadline:
        chunk = os.read(victim.stderr.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
        if re.search(
            rb"epoch 2/2 amp-fp16:[^\r\n]*\| *[1-4]/6", seen
        ):  # inside a window
            victim.send_signal(signal.SIGINT)
            break
    else:
        pytest.fail(f"never saw epoch 2 in progress: {seen[-2000:]!r}")
    victim.wait(timeout=120)
    err = (seen + victim.stderr.read()).decode(errors="replace")
    assert victim.returncode == 130, err
    line = one_error(err, "interrupted in epoch 2", "hold epoch 1", "continue with:")
    partial = json.loads((cut / "acc-resume.json").read_text())
    assert partial["status"] == "interrupted" and len(partial["epochs"]) == 1
    epoch1 = partial["epochs"][0]
    assert epoch1["checkpoint_s"] is not None

    command = shlex.split(line.split("continue with: ", 1)[1])
    assert command[:3] == ["python", "-m", "ampbook.train"] and "--resume" in command
    resumed = subprocess.run(
        [sys.executable, *command[1:]],
        cwd=REPO_ROOT,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert reference.wait(timeout=240) == 0, reference.stderr.read().decode()

    a = torch.load(whole / "acc-resume.ckpt", weights_only=True)
    b = torch.load(cut / "acc-resume.ckpt", weights_only=True)
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    for pid, state in a["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][pid][key]), (pid, key)
    assert a["scaler"] == b["scaler"] and a["counters"] == b["counters"]

    ra = json.loads((whole / "acc-resume.json").read_text())
    rb = json.loads((cut / "acc-resume.json").read_text())
    numbers = (
        "train_loss",
        "val_loss",
        "val_miou",
        "optimizer_steps",
        "skipped_steps",
        "loss_scale",
        "steps",
    )
    for ea, eb in zip(ra["epochs"], rb["epochs"], strict=True):
        assert {k: ea[k] for k in numbers} == {k: eb[k] for k in numbers}
    assert [e["optimizer_steps"] + e["skipped_steps"] for e in rb["epochs"]] == [2, 2]
    # The earlier epoch's record is kept as written; the resume time is recorded apart.
    assert rb["epochs"][0] == epoch1
    assert rb["started"] == partial["started"] and rb["status"] == "complete"
    assert [r["after_epoch"] for r in rb["resumed"]] == [1] and ra["resumed"] == []
    assert rb["resumed"][0]["at"] >= partial["started"]
