"""Faults met by the training, data and notebook-runner commands: stops during a
command's cleanup, the open-file limit, loader workers that die, absurd sizes,
``-p`` values that expand without end, the light command line of ``ampbook.train``."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ampbook.core import cli


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_second_stop_during_the_cleanup_lets_the_cleanup_finish(second):
    """Ctrl-C, then Ctrl-C or SIGTERM while the command cleans up after the first:
    the cleanup runs to its end and the status is the first stop's."""
    cleaned = []

    @cli.command("python -m ampbook.fake")
    def main(argv=None):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            os.kill(os.getpid(), second)  # lands inside the cleanup
            time.sleep(0.05)
            cleaned.append(True)
            raise
        return 0

    assert main([]) == 130
    assert cleaned == [True]


def test_a_p_value_with_aliases_is_refused_before_it_expands(tmp_path, capsys):
    """``-p NAME VALUE`` is YAML without anchors and aliases: a few hundred bytes
    whose aliases repeat one another stand for 9**9 items (out of memory when the
    parameters cell spells them out); the error names -p."""
    from booktools import run

    bomb = (
        "[&a [x,x,x,x,x,x,x,x,x],"
        + ",".join(
            f"&{b} [{','.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")
        )
        + "]"
    )
    with pytest.raises(run.RunError, match="-p value .*aliases"):
        run.parse_value(bomb)
    assert run.parse_value("[1, {a: b}]") == [1, {"a": "b"}]  # plain YAML is read
    out = tmp_path / "ex"
    code = run.main(["--profile", "smoke", "--out", str(out), "-p", "n_samples", bomb])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1 and "-p" in err, err
    assert not out.exists()


def test_train_help_and_a_bad_option_need_no_torch():
    """``python -m ampbook.train --help`` (and an option it does not know) answers
    from the light modules: torch is imported only once a run starts."""
    import subprocess
    import sys

    from ampbook.core.paths import REPO_ROOT

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for argv, code in ((["--help"], 0), (["--precision", "fp7"], 2)):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "ampbook.train", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )
        assert done.returncode == code, done.stderr[-2000:]
        imported = [
            line.rsplit("|", 1)[1].strip()
            for line in done.stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2
        ]
        assert imported and not any(
            m.split(".")[0] in ("torch", "numpy") for m in imported
        ), [m for m in imported if m.startswith(("torch", "numpy"))][:5]
    assert (
        "--16-bit-stream, --fp16-stream"
        in subprocess.run(
            [sys.executable, "-m", "ampbook.train", "--help"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        ).stdout
    )


def test_precision_fp32_tf32_is_fp32_with_tf32_on(capsys):
    from ampbook.train import TrainConfig, command_line, config_from_args

    cfg = config_from_args(["--precision", "fp32-tf32"])
    assert (cfg.precision, cfg.tf32) == ("fp32", "on")
    assert cfg == config_from_args(["--precision", "fp32", "--tf32", "on"])
    assert "--tf32 on" in command_line(cfg)  # what the record and resume write
    assert TrainConfig(precision="fp32-tf32").tf32 == "on"
    assert config_from_args(["--precision", "fp32-tf32", "--tf32", "on"]) == cfg
    with pytest.raises(SystemExit) as stop:  # a contradiction is one error line
        config_from_args(["--precision", "fp32-tf32", "--tf32", "off"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.count("error:") == 1


def test_the_mode_names_have_one_home():
    """The precisions and the modes are defined once (``ampbook.core.modes``, no
    torch)."""
    from ampbook import results
    from ampbook.core import modes, precision
    from ampbook.train import config

    assert precision.PRECISIONS is modes.PRECISIONS
    assert results.MODES is modes.MODES and config.MODES is modes.MODES
    assert modes.MODES == (modes.TF32_MODE, *modes.PRECISIONS)


# --- the training runner --------------------------------------------------------------

TRAIN = ["--device", "cpu", "--batch-size", "2", "--height", "16", "--width", "32"]
TRAIN += ["--workers", "0", "--progress", "off", "--quiet"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from ampbook.segmentation import synthetic

    root = tmp_path_factory.mktemp("data") / "ds"
    return synthetic.synthesize(root, 4, 2, height=32, width=64)


def _one_error(err: str, *words: str) -> str:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_too_few_open_files_for_the_workers_is_refused_before_the_run(
    tiny, tmp_path, capsys
):
    """A hard open-file limit too low for the loader workers (``ulimit -n 20``) is one
    error naming the limit, before anything is written; a soft one is raised."""
    import resource

    from ampbook.train import main

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    argv = [*TRAIN, "--epochs", "1", "--data-root", str(tiny), "--workers", "2"]
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (20, hard))  # soft: raised
        assert main([*argv, "--out", str(tmp_path / "a")]) == 0
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 20
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    import subprocess
    import sys

    from ampbook.core.paths import REPO_ROOT

    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (20, 20));"
        "from ampbook.train import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv, "--out", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    _one_error(done.stderr, "ulimit -n", "is 20", "--workers")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    "failure, words",
    [
        (
            RuntimeError(
                "Too many open files. Communication with the workers is no longer "
                "possible. Please increase the limit using `ulimit -n` in the shell"
            ),
            ["open files", "ulimit -n"],
        ),
        (OSError(24, "Too many open files"), ["open files", "ulimit -n"]),
        (
            RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. "),
            ["pid 4242", "killed by signal", "--workers"],
        ),
        (
            RuntimeError(
                "DataLoader worker (pid(s) 4242) exited unexpectedly\\nmore lines"
            ),
            ["exited unexpectedly"],
        ),
    ],
    ids=["torch-emfile", "oserror-emfile", "worker-killed", "worker-gone"],
)
def test_the_loaders_failures_in_a_run_are_one_line_and_a_failed_record(
    failure, words, tiny, tmp_path, capsys, monkeypatch
):
    """Out of file descriptors, or a DataLoader worker killed (the out-of-memory
    killer) in epoch 2: one error line (exit 1), the record says failed and why, and
    epoch 1's checkpoint stays for --resume."""
    import json

    from ampbook.train import loop, main

    real = loop.train_epoch

    def epoch(n, *args, **kw):
        if n == 2:
            raise failure
        return real(n, *args, **kw)

    monkeypatch.setattr(loop, "train_epoch", epoch)
    out = tmp_path / "out"
    argv = [*TRAIN, "--epochs", "2", "--data-root", str(tiny), "--out", str(out)]
    assert main([*argv, "--name", "r"]) == 1
    line = _one_error(capsys.readouterr().err, *words)
    assert "--resume" in line
    record = json.loads((out / "r.json").read_text())
    assert record["status"] == "failed"
    assert words[0] in record["stopped"]["message"]
    assert [e["epoch"] for e in record["epochs"]] == [1]
    assert (out / "r.ckpt").exists()


@pytest.mark.parametrize("batch", [str(10**30), "1000"])
def test_a_batch_larger_than_the_training_set_is_refused(batch, tiny, tmp_path, capsys):
    from ampbook.train import main

    argv = [*TRAIN, "--epochs", "1", "--data-root", str(tiny), "--out", str(tmp_path)]
    assert main([*argv, "--batch-size", batch]) == 2
    _one_error(capsys.readouterr().err, f"batch_size {batch}", "4 training images")
    assert list(tmp_path.iterdir()) == []


def test_build_run_checks_the_open_file_limit_before_starting_a_kernel(tmp_path):
    """Under ``ulimit -n 20`` the runner's kernel would die or hang starting (zmq
    aborts, or a kernel that never answers): one error line first, nothing made."""
    import subprocess
    import sys

    from ampbook.core.paths import REPO_ROOT

    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (20, 20));"
        "from booktools.run import main; sys.exit(main(sys.argv[1:]))"
    )
    out = tmp_path / "ex"
    done = subprocess.run(
        [sys.executable, "-c", code, "--profile", "smoke", "--out", str(out), "1"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    _one_error(done.stderr, "ulimit -n", "is 20", "kernel")
    assert not out.exists()


def _stopped_after_epoch_1(tiny, out, monkeypatch, edit):
    """A 3-epoch run stopped in epoch 2 (its checkpoint holds epoch 1), the
    checkpoint then edited by ``edit(ckpt)``."""
    import torch

    from ampbook.train import loop, main

    real = loop.train_epoch

    def epoch(n, *args, **kw):
        if n == 2:
            raise KeyboardInterrupt
        return real(n, *args, **kw)

    argv = [*TRAIN, "--epochs", "3", "--data-root", str(tiny), "--out", str(out)]
    monkeypatch.setattr(loop, "train_epoch", epoch)
    assert main([*argv, "--name", "r"]) == 130
    monkeypatch.undo()
    path = out / "r.ckpt"
    ckpt = torch.load(path, weights_only=True)
    edit(ckpt)
    torch.save(ckpt, path)
    return [*argv, "--name", "r", "--resume"]


def _nan_weights(ckpt):
    for value in ckpt["model"].values():
        if value.is_floating_point():
            value.fill_(float("nan"))


def test_a_resume_from_nan_weights_stops_saying_nothing_was_learned(
    tiny, tmp_path, capsys, monkeypatch
):
    import json

    from ampbook.train import main

    out = tmp_path / "out"
    argv = _stopped_after_epoch_1(tiny, out, monkeypatch, _nan_weights)
    capsys.readouterr()
    assert main(argv) == 1
    line = _one_error(capsys.readouterr().err, "not finite", "--overwrite")
    assert "--resume" not in line  # resuming would meet the same NaN weights
    record = json.loads((out / "r.json").read_text())
    assert record["status"] == "stopped: nothing learned"
    assert "not finite" in record["stopped"]["message"]


def test_max_nonfinite_counts_the_skipped_steps_before_a_resume(
    tiny, tmp_path, capsys, monkeypatch
):
    """The consecutive skipped steps are in the checkpoint: a resumed run goes on
    counting (19 before the stop, --max-nonfinite 20: the first skipped step after the
    resume stops it), rather than starting again from 0."""
    import json

    from ampbook.train import main

    def edit(ckpt):
        _nan_weights(ckpt)
        ckpt["counters"]["consecutive_skipped"] = 19

    out = tmp_path / "out"
    argv = _stopped_after_epoch_1(tiny, out, monkeypatch, edit)
    capsys.readouterr()
    assert main([*argv, "--max-nonfinite", "20"]) == 1
    _one_error(capsys.readouterr().err, "20 consecutive")
    record = json.loads((out / "r.json").read_text())
    assert record["status"] == "stopped: non-finite loss"
    assert record["stopped"]["skipped_steps"] == 1  # the first step after the resume
