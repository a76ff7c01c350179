"""The error layer (``ampbook.core.cli``) and what it promises, class by class (issue
22): bad settings and numbers exit 2 with one ``error:`` line before any work; outputs
are checked before anything is changed (read-only and full tmpfs, long names, files in
the way); what is read is validated with the file and field named; SIGTERM is Ctrl-C and
leaves its outputs marked; special files are refused, not blocked on. Most tests call
``main`` in-process; the few that need a real signal or a real start-up run the
command. ``python -m tests.fault_sweep`` runs the whole sweep (``test_fault_sweep.py``
its subset)."""

from __future__ import annotations

import argparse
import ast
import errno
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _cli import one_error

from ampbook import data as data_command
from ampbook.core import cli, params, stops
from ampbook.core.paths import REPO_ROOT
from ampbook.segmentation import cityscapes as data
from ampbook.segmentation import synthetic

# --- file systems a test can make -----------------------------------------------------


def _mount(where: Path, size: str, readonly: bool = False) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if readonly else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()[:80]})")
    return where


@pytest.fixture
def tmpfs(tmp_path):
    """``make(name, size, readonly)``: a small tmpfs, unmounted after the test (the
    tests run as root, for whom permission bits do not make a folder read-only)."""
    mounted = []

    def make(name: str = "fs", size: str = "256k", readonly: bool = False) -> Path:
        where = _mount(tmp_path / name, size, readonly)
        mounted.append(where)
        return where

    yield make
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


# --- the layer itself -----------------------------------------------------------------


def test_command_maps_known_failures_to_one_line_and_exit_codes(capsys):
    @cli.command("python -m x")
    def main(argv):
        kind = argv[0]
        if kind == "user":
            raise cli.UserError("bad setting --x; give a number")
        if kind == "stopped":
            raise cli.Stopped("stopped in epoch 2; kept epoch 1")
        if kind == "full":
            raise OSError(errno.ENOSPC, "No space left on device", "/o/r.json")
        if kind == "torch-full":
            raise RuntimeError("PytorchStreamWriter failed writing file data/0")
        if kind == "ctrl-c":
            raise KeyboardInterrupt
        if kind == "term":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        if kind == "bug":
            raise ZeroDivisionError("a bug keeps its traceback")
        return 0

    for kind, code, words in (
        ("user", 2, ["bad setting --x"]),
        ("stopped", 1, ["kept epoch 1"]),
        ("full", 1, ["/o/r.json", "No space left", "free some space"]),
        ("torch-full", 1, ["disk is probably full"]),
        ("ctrl-c", 130, ["interrupted (Ctrl-C)"]),
        ("term", 143, ["interrupted (SIGTERM)"]),
    ):
        assert main([kind]) == code, kind
        one_error(capsys.readouterr().err, *words)
    with pytest.raises(ZeroDivisionError):
        main(["bug"])
    # The handlers in place before come back.
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None, stops._on_stop)


def _commands() -> dict[str, str]:
    """Every ``python -m`` entry point of the package: module -> the module whose
    ``main`` it calls."""
    found = {}
    for path in sorted((REPO_ROOT / "ampbook").rglob("*.py")):
        text = path.read_text()
        module = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        if path.name == "__main__.py":
            target = re.search(r"from (ampbook[\w.]*) import main", text)
            assert target, f"{path}: a __main__ that does not call a main()"
            found[module.removesuffix(".__main__")] = target.group(1)
        elif block := re.search(r"^if __name__ == .__main__.:.*", text, re.M):
            # the command answering before heavy imports: its main lives elsewhere
            # (a command's name: ``ampbook/doctor.py`` imports its layer's main)
            target = re.match(
                r".*\n\s+from (ampbook[\w.]*) import main", text[block.start() :]
            ) or re.search(r"^from (ampbook[\w.]*) import main$", text, re.M)
            found[module] = target.group(1) if target else module
    return found


def _command_prog(module: str) -> str | None:
    """The ``prog`` of ``@cli.command(prog)`` on ``module``'s ``main`` (read from the
    source, not imported: importing every command takes tens of seconds)."""
    base = REPO_ROOT / Path(*module.split("."))
    path = base.with_suffix(".py")
    if not path.exists():  # a package: its main is in __init__.py
        path = base / "__init__.py"
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            for deco in node.decorator_list:
                if (
                    isinstance(deco, ast.Call)
                    and ast.unparse(deco.func) in ("cli.command", "command")
                    and deco.args
                    and isinstance(deco.args[0], ast.Constant)
                ):
                    return deco.args[0].value
    return None


def test_every_command_goes_through_the_error_layer():
    """A new ``python -m ampbook...`` command (or ``bench`` subcommand) joins the
    error layer by its decorator: without it, none of the promises hold."""
    from ampbook import bench  # its subcommands, whichever modules they live in

    commands = _commands()
    assert {"ampbook.train", "ampbook.evaluate", "ampbook.bench"} <= set(commands)
    for name, module in commands.items():
        prog = _command_prog(module)
        assert prog, f"{module}.main is not decorated with @cli.command"
        assert prog.startswith(f"python -m {name}") or (
            name in bench.COMMANDS.values()
        ), (name, prog)

    for sub, module in bench.COMMANDS.items():
        assert _command_prog(module) == f"python -m ampbook.bench {sub}", module
    # The decorator is what marks them (the test above reads the source).
    assert bench.main.ampbook_command == "python -m ampbook.bench"


def test_argument_errors_are_one_line_with_exit_2(capsys):
    parser = cli.ArgumentParser(prog="python -m x")
    parser.add_argument("--min-time", type=cli.positive_float)
    parser.add_argument("--seed", type=cli.seed)
    for argv, words in (
        (["--min-time", "nan"], ["--min-time", "'nan' is not a finite number"]),
        (["--min-time", "inf"], ["not a finite number"]),
        (["--min-time", "0"], ["must be more than 0"]),
        (["--seed", "-1"], ["--seed", "between 0 and 4294967295"]),
        (["--seed", str(2**32)], ["between 0"]),
        (["--bogus"], ["unrecognized option --bogus"]),
    ):
        with pytest.raises(SystemExit) as stop:
            parser.parse_args(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "usage:" not in err
        one_error(err, *words, "--help")


def test_a_misspelt_option_is_named_with_the_nearest_one(capsys):
    """``--modle X`` names the option it does not know and the one meant, not a
    required option as missing; in a subcommand too."""
    parser = cli.ArgumentParser(prog="python -m x")
    parser.add_argument("--model", required=True)
    parser.add_argument("--input")
    sub = cli.ArgumentParser(prog="python -m y")
    sub.add_subparsers(dest="cmd").add_parser("ladder").add_argument("--json")
    for p, argv, words in (
        (parser, ["--modle", "X"], ["unrecognized option --modle", "--model?"]),
        (parser, ["--model", "m", "--inptu=3"], ["--inptu", "did you mean --input?"]),
        (parser, ["--model", "m", "--zzzzzz"], ["unrecognized option --zzzzzz"]),
        (sub, ["ladder", "--jsno", "x"], ["unrecognized option --jsno", "--json?"]),
    ):
        with pytest.raises(SystemExit) as stop:
            p.parse_args(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        one_error(err, *words)
        assert "required" not in err, err


def test_a_list_in_a_sentence_ends_with_and():
    from ampbook.core.words import and_list

    assert [and_list(x) for x in ([], ["a"], ["a", "b"], ("a", "b", "c"))] == [
        "", "a", "a and b", "a, b and c"
    ]  # fmt: skip


def test_nearest_names_are_the_likely_meant_ones():
    from ampbook.core.words import nearest

    models = ["alexnet", "convnext_base", "resnet18", "resnet34", "resnet50", "vgg11"]
    assert nearest("resnet999", models, 3) == ["resnet18", "resnet34", "resnet50"]
    assert nearest("--modle", ["--input", "--model", "--batch"]) == ["--model"]
    assert nearest("tpu", ["auto", "cpu", "cuda"]) == ["cpu"]
    assert nearest("qqqqqqqq", models) == []


def test_an_unknown_device_is_one_line_with_the_choices():
    from ampbook.core.devices import pick_device

    with pytest.raises(ValueError) as err:
        pick_device("tpu")
    text = str(err.value)
    assert "\n" not in text and len(text) < 120, text
    assert "'tpu'" in text and "auto, cpu, cuda" in text and "'cpu'?" in text


def test_number_types_refuse_what_makes_no_sense():
    assert cli.positive_int("3") == 3 and cli.nonnegative_int("0") == 0
    assert cli.positive_float("1e-3") == 1e-3 and cli.nonnegative_float("0") == 0.0
    for fn, text in (
        (cli.positive_int, "0"),
        (cli.positive_int, "x"),
        (cli.nonnegative_int, "-1"),
        (cli.positive_float, "-0.5"),
        (cli.positive_float, "inf"),
        (cli.nonnegative_float, "nan"),
        (cli.seed, "-3"),
    ):
        with pytest.raises(argparse.ArgumentTypeError):
            fn(text)


def test_is_command_recognises_ampbook_modules_only():
    assert cli.is_command(["python", "-m", "ampbook.train", "--epochs", "1"])
    assert cli.is_command(["python", "-u", "-m", "booktools.run"])
    assert cli.is_command(["python", "-mampbook.doctor"])
    assert not cli.is_command(["python", "-m", "pytest", "-m", "ampbook"])
    assert not cli.is_command(["python", "script.py", "-m", "ampbook.train"])


# --- check before you change ----------------------------------------------------------


def test_output_checks_name_the_problem(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cases = (
        (tmp_path / ("n" * 300) / "r.json", "over the 255"),
        (blocker / "r.json", "is a file, so"),
        (tmp_path, "is a folder"),
        ("", "empty path"),
    )
    for path, words in cases:
        with pytest.raises(cli.UserError, match=words):
            cli.check_output_file(path, "--json")
    with pytest.raises(cli.UserError, match="does not exist"):  # the default
        cli.check_output_file(tmp_path / "new" / "r.json", "--json")
    assert cli.check_output_file(
        tmp_path / "new" / "r.json", "--json", create_parents=True
    )
    with pytest.raises(cli.UserError, match="is a file, not a folder"):
        cli.check_output_dir(blocker, "--out")
    with pytest.raises(cli.UserError, match="over the 255"):
        cli.check_output_dir(tmp_path / ("d" * 256), "--out")
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_output_checks_on_read_only_and_full_file_systems(tmpfs):
    ro = tmpfs("ro", readonly=True)
    with pytest.raises(cli.UserError, match="read-only"):
        cli.check_output_file(ro / "r.json", "--json")
    with pytest.raises(cli.UserError, match="read-only"):
        cli.check_output_dir(ro / "runs" / "x", "--out")
    small = tmpfs("small", size="64k")
    with pytest.raises(cli.UserError, match="MiB free but"):
        cli.check_output_dir(small, "--out", size=2**20)


def test_writes_go_into_devices_and_fifos_rather_than_replace_them(tmp_path):
    assert cli.check_output_file("/dev/null", "--json") == Path("/dev/null")
    cli.write_text_atomic("/dev/null", "{}")
    assert Path("/dev/null").is_char_device()


def test_input_checks_refuse_special_files(tmp_path):
    fifo = _fifo(tmp_path / "pipe")
    with pytest.raises(cli.UserError, match="FIFO"):
        cli.read_text(fifo, "run report")
    with pytest.raises(cli.UserError, match="a folder"):
        cli.check_input_file(tmp_path, "profiles")
    with pytest.raises(cli.UserError, match="a device"):
        cli.check_input_file("/dev/null", "profiles")


# --- signals --------------------------------------------------------------------------


def _command(*argv, sig, after, env=None, timeout=240) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [sys.executable, "-m", *argv],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        start_new_session=True,
    )
    time.sleep(after)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _signalled_when(argv, sig, seen, python=(), timeout=240):
    """Run ``python -m argv`` and send ``sig`` the moment stderr shows a line for which
    ``seen(line)`` holds (not after a fixed delay, which lands elsewhere on a faster or
    a busier machine): (exit status, stderr without ``-X importtime``'s lines)."""
    proc = subprocess.Popen(
        [sys.executable, *python, "-m", *argv],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,
    )
    lines, sent = [], False
    deadline = time.monotonic() + timeout
    for line in proc.stderr:
        lines.append(line)
        if not sent and seen(line):
            proc.send_signal(sig)
            sent = True
        assert time.monotonic() < deadline, "".join(lines[-20:])
    code = proc.wait(timeout=timeout)
    assert sent, "".join(lines[-20:])
    kept = [line for line in lines if not line.startswith("import time:")]
    return code, "".join(kept)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_the_start_up_imports_is_one_line(sig, code):
    """The signal is sent while torch is being imported (``-X importtime`` prints a line
    as each of its submodules finishes): one line, 130/143, never a C++ abort from an
    exception thrown through torch's initialisation."""

    def inside_torch(line):
        name = line.rsplit("|", 1)[-1].strip()
        return name.startswith("torch.")

    # ampbook.segmentation.model imports torch as it loads (the commands import it in
    # main, after their options are parsed): a process started as python -m ampbook...
    # is one
    # A child inherits an ignored SIGINT: an earlier test in this worker may have left
    # it ignored, so the worker's own handling is put back while the child starts.
    held = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code_seen, err = _signalled_when(
            ["ampbook.segmentation.model", "x"],
            sig,
            inside_torch,
            python=("-X", "importtime"),
        )
    finally:
        signal.signal(signal.SIGINT, held)
    assert code_seen == code, err
    one_error(err, "interrupted", "while starting up", cli_name(code))


def cli_name(code):
    return "SIGTERM" if code == 143 else "Ctrl-C"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_the_command_ends_is_its_answer_or_a_stop(sig):
    """Sent the moment the command has printed its error, the signal lands just before
    ``main`` returns (a stop: 130/143 and a second line saying so) or in the teardown
    (torch's atexit callbacks and the interpreter's finalization, over half a second):
    there the exit status stays the command's (2). Never a death by the signal, a
    traceback from an interrupted callback, or "while starting up"."""
    code, err = _signalled_when(
        ["ampbook.evaluate", "x"], sig, lambda line: line.startswith("error:")
    )
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert "Cityscapes" in lines[0], err
    stop = 143 if sig == signal.SIGTERM else 130
    assert (code, lines[1:]) in [
        (2, []),
        (
            stop,
            [
                f"error: python -m ampbook.evaluate interrupted ({cli_name(stop)}) "
                "before it finished; what it had not finished was not written"
            ],
        ),
    ], err


@pytest.mark.slow
def test_a_signal_inside_an_import_in_main_is_raised_after_the_import(tmp_path):
    """A command that imports a module inside ``main``: the stop is held back until the
    import has finished (raising it inside an extension's initialisation can abort the
    process), then raised as usual: main's cleanup runs and the status is 130."""
    (tmp_path / "slow_module.py").write_text(
        "import sys, time\nsys.stderr.write('importing\\n'); sys.stderr.flush()\n"
        "time.sleep(1.5)\nsys.stderr.write('imported\\n'); sys.stderr.flush()\n"
    )
    (tmp_path / "slow_command.py").write_text(
        "import sys\nfrom ampbook.core import cli\n\n"
        "@cli.command('slow')\ndef main(argv=None):\n"
        "    try:\n        import slow_module  # noqa: F401\n"
        "        import time\n        time.sleep(30)\n"
        "        return 0\n    finally:\n"
        "        sys.stderr.write('cleaned up\\n')\n\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "slow_command.py")],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}:{REPO_ROOT}"},
    )
    assert proc.stderr.readline() == "importing\n"
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    err = proc.stderr.read()
    assert proc.wait(timeout=40) == 130, err
    # raised once the import is done (1.5 s), not after the 30 s sleep that follows it
    assert time.monotonic() - sent < 15, err
    assert err.splitlines()[:2] == ["imported", "cleaned up"], err
    one_error(err, "slow interrupted (Ctrl-C) before it finished")


def test_sigterm_in_a_notebook_cell_marks_it_and_ends_the_kernel(tmp_path):
    from booktools import run

    source = tmp_path / "slow.py"
    source.write_text(
        '# %% [markdown]\n# # Slow\n\n# %% tags=["parameters"]\nn = 1\n\n'
        "# %%\nprint('started', flush=True)\n\n# %%\nimport time\ntime.sleep(300)\n"
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "booktools.run",
            "--profile",
            "smoke",
            "--out",
            str(out),
            str(source),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # papermill saves the notebook after each cell
        try:
            nb = json.loads((out / "slow.ipynb").read_text())
            if any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"):
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.3)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    one_error(err, "slow was interrupted (SIGTERM)", "marked interrupted")
    assert run.run_status(out / "slow.ipynb") == "interrupted"
    with pytest.raises(ProcessLookupError):  # the kernel went with the runner
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            os.killpg(proc.pid, 0)
            time.sleep(0.1)


def _descendants(pid: int) -> list[int]:
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    found = [int(p) for p in kids.stdout.split()]
    return found + [d for p in found for d in _descendants(p)]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_build_book_ends_jupyter_book_with_itself(tmp_path):
    """``run_ended`` (how build.book runs jupyter-book): a signal to the builder ends
    the child's whole process group."""
    code = (
        "from ampbook.core import cli; from booktools.book import run_ended\n"
        "with cli.signals():\n"
        "    run_ended(['sh', '-c', 'sleep 300 & sleep 300'])\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    children, deadline = [], time.monotonic() + 60
    while len(children) < 2 and time.monotonic() < deadline:  # both sleeps started
        time.sleep(0.1)
        # in a session of their own (run_ended's): found as descendants, not by group
        children = [p for p in _descendants(proc.pid) if _comm(p) == "sleep"]
    assert len(children) == 2, children
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    alive = children
    while alive and time.monotonic() < deadline:  # a killed process takes a moment
        time.sleep(0.1)
        alive = [p for p in children if Path(f"/proc/{p}").exists()]
    assert not alive, f"left running: {alive}"


# --- training: overwrite, resume, validation ------------------------------------------


TRAIN = [
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
def tiny(tmp_path_factory) -> Path:
    return synthetic.synthesize(
        tmp_path_factory.mktemp("data") / "ds", 4, 2, height=32, width=64
    )


@pytest.fixture(scope="module")
def finished_run(tiny, tmp_path_factory) -> Path:
    from ampbook.train import main

    out = tmp_path_factory.mktemp("runs")
    assert (
        main([*TRAIN, "--data-root", str(tiny), "--out", str(out), "--name", "a"]) == 0
    )
    return out


def _copy(folder: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "runs"
    shutil.copytree(folder, dest)
    return dest


def _files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_overwrite_deletes_nothing_before_every_check_passed(
    finished_run, tiny, tmp_path, capsys
):
    from ampbook.train import main

    out = _copy(finished_run, tmp_path)
    before = _files(out)
    base = [*TRAIN, "--out", str(out), "--name", "a", "--overwrite"]
    code = main([*base, "--data-root", str(tmp_path / "missing")])
    assert code == 2
    one_error(capsys.readouterr().err, "missing")
    assert _files(out) == before


def test_overwrite_puts_the_old_run_back_when_stopped_before_its_first_record(
    finished_run, tiny, tmp_path, capsys, monkeypatch
):
    from ampbook.train import loop, main

    out = _copy(finished_run, tmp_path)
    before = _files(out)

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "train_epoch", interrupted)
    code = main(
        [
            *TRAIN,
            "--data-root",
            str(tiny),
            "--out",
            str(out),
            "--name",
            "a",
            "--overwrite",
        ]
    )
    assert code == 130
    one_error(capsys.readouterr().err, "interrupted")
    assert _files(out) == before
    monkeypatch.undo()
    assert (
        main(
            [
                *TRAIN,
                "--data-root",
                str(tiny),
                "--out",
                str(out),
                "--name",
                "a",
                "--overwrite",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in out.iterdir()) == ["a.ckpt", "a.json"]
    assert _files(out)["a.json"] != before["a.json"]


def test_a_killed_overwrite_has_its_old_files_put_back_by_the_next_run(
    finished_run, tiny, tmp_path, capsys
):
    from ampbook.train import main

    out = _copy(finished_run, tmp_path)
    before = _files(out)
    for name in ("a.json", "a.ckpt"):  # what a SIGKILL before the first record leaves
        os.replace(out / name, out / f".{name}.replaced")
    code = main([*TRAIN, "--data-root", str(tiny), "--out", str(out), "--name", "a"])
    assert code == 2  # refused: the earlier run is back and holds the name
    one_error(capsys.readouterr().err, "already holds run 'a'")
    assert _files(out) == before


@pytest.mark.parametrize(
    "edit, words",
    [
        ("c['epoch'] = 0", "field epoch is 0"),
        ("c['epoch'] = 9", "beyond the run's 1 epochs"),
        ("c['records'] = '[]'", "field records lists epochs []"),
    ],
)
def test_resume_refuses_a_checkpoint_whose_epochs_do_not_add_up(
    edit, words, finished_run, tiny, tmp_path, capsys
):
    from ampbook.train import main

    out = _copy(finished_run, tmp_path)
    c = torch.load(out / "a.ckpt", weights_only=True)
    exec(edit)
    torch.save(c, out / "a.ckpt")
    before = _files(out)
    code = main(
        [*TRAIN, "--data-root", str(tiny), "--out", str(out), "--name", "a", "--resume"]
    )
    assert code == 2
    one_error(capsys.readouterr().err, "resume:", words, "--overwrite")
    assert _files(out) == before


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda r: r.update(epochs="x"), "epochs"),
        (lambda r: r["epochs"][0].update(epoch=[1]), "epochs[0].epoch"),
        (lambda r: r.update(resumed=5), "resumed"),
    ],
)
def test_resume_names_the_field_of_a_hand_edited_run_file(
    edit, field, finished_run, tiny, tmp_path, capsys
):
    from ampbook.train import main

    out = _copy(finished_run, tmp_path)
    record = json.loads((out / "a.json").read_text())
    edit(record)
    (out / "a.json").write_text(json.dumps(record))
    code = main(
        [
            *TRAIN,
            "--data-root",
            str(tiny),
            "--out",
            str(out),
            "--name",
            "a",
            "--resume",
        ]
    )
    assert code == 2
    one_error(capsys.readouterr().err, f"field {field}", "a.json")


def test_predictions_of_another_run_are_not_replaced(tiny, tmp_path, capsys):
    from ampbook.train import main

    theirs = tmp_path / "preds" / "city" / "x_000000_000019_pred.png"
    theirs.parent.mkdir(parents=True)
    theirs.write_bytes(b"theirs")
    argv = [
        *TRAIN,
        "--data-root",
        str(tiny),
        "--out",
        str(tmp_path / "o"),
        "--save-predictions",
        str(tmp_path / "preds"),
    ]
    assert main(argv) == 2
    one_error(capsys.readouterr().err, "holds predictions of another run")
    assert theirs.read_bytes() == b"theirs"
    assert main([*argv, "--name", "p", "--overwrite"]) == 0  # asked for: replaced


def test_a_full_disk_stops_the_run_with_one_line(tiny, tmpfs, capsys):
    from ampbook.train import main

    # Too small for one checkpoint: refused before any work.
    small = tmpfs("small", size="200k")
    code = main([*TRAIN, "--data-root", str(tiny), "--out", str(small), "--name", "f"])
    assert code == 2
    one_error(
        capsys.readouterr().err, "checkpoint f.ckpt", "MiB free", "MiB are needed"
    )
    assert list(small.iterdir()) == []
    # Room for one checkpoint, not for the second written beside it: epoch 1 is kept.
    from ampbook.train.outdir import checkpoint_room

    room = checkpoint_room()
    full = tmpfs("full", size=f"{(room * 3) // 2 // 1024}k")
    argv = [*TRAIN, "--epochs", "2", "--data-root", str(tiny), "--out", str(full)]
    assert main([*argv, "--name", "f"]) == 1
    one_error(capsys.readouterr().err, "No space left")
    record = json.loads((full / "f.json").read_text())
    assert [e["epoch"] for e in record["epochs"]] == [1]
    assert torch.load(full / "f.ckpt", weights_only=False)["epoch"] == 1


@pytest.mark.parametrize(
    "env, words",
    [
        ({"WORLD_SIZE": "two"}, ["WORLD_SIZE='two'", "not an integer"]),
        ({"WORLD_SIZE": "2"}, ["MASTER_ADDR", "torchrun"]),
        ({"LOCAL_RANK": "-1"}, ["LOCAL_RANK"]),
        (
            {"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
            ["RANK=2 is not below WORLD_SIZE=2"],
        ),
    ],
)
def test_torchrun_variables_are_checked(
    env, words, tiny, tmp_path, capsys, monkeypatch
):
    from ampbook.train import main

    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main([*TRAIN, "--data-root", str(tiny), "--out", str(tmp_path)]) == 2
    one_error(capsys.readouterr().err, *words)


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_seeds_outside_numpys_range_are_refused(seed, tiny, tmp_path, capsys):
    from ampbook.train import main

    assert main([*TRAIN, "--data-root", str(tiny), "--seed", seed]) == 2
    one_error(capsys.readouterr().err, "seed must be an integer from 0 to 4294967295")


def test_a_damaged_class_weight_cache_is_computed_again(tiny, tmp_path, monkeypatch):
    from ampbook.segmentation.cityscapes import Cityscapes
    from ampbook.train import enet_class_weights

    monkeypatch.setenv("AMPBOOK_CACHE", str(tmp_path / "cache"))
    ds = Cityscapes(tiny, "train", 16, 32)
    good = enet_class_weights(ds)
    (cached,) = (tmp_path / "cache" / "class-weights").glob("*.json")
    for damage in ('{"weights": [1.0, 2', json.dumps({"key": "x", "weights": good})):
        cached.write_text(damage)
        assert enet_class_weights(ds) == good
        assert json.loads(cached.read_text())["weights"] == good
    cached.unlink()
    _fifo(cached)
    assert enet_class_weights(ds) == good  # a FIFO there is not read (no hang)


# --- data: synthetic sets and their markers -------------------------------------------


def test_a_cached_synthetic_set_that_does_not_match_its_marker_is_made_again(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("AMPBOOK_CACHE", str(tmp_path / "cache"))
    root = synthetic.synthetic_root(2, 1, 32, 64)
    images = sorted(root.rglob("*_leftImg8bit.png"))
    assert len(images) == 3
    images[0].unlink()
    again = synthetic.synthetic_root(2, 1, 32, 64)
    assert again == root and len(list(root.rglob("*_leftImg8bit.png"))) == 3
    meta = json.loads((root / data.SYNTHETIC_MARKER).read_text())
    (root / data.SYNTHETIC_MARKER).write_text(json.dumps({**meta, "seed": 5}))
    synthetic.synthetic_root(2, 1, 32, 64)
    assert json.loads((root / data.SYNTHETIC_MARKER).read_text())["seed"] == 0


def test_a_set_stopped_while_being_replaced_is_never_taken_for_whole(
    tiny, tmp_path, capsys, monkeypatch
):
    root = tmp_path / "ds"
    shutil.copytree(tiny, root)
    real, calls = synthetic.synthetic_pair, []

    def stop_after_one(*args, **kw):
        calls.append(args)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(synthetic, "synthetic_pair", stop_after_one)
    argv = [
        "synthesize",
        "--root",
        str(root),
        "--train",
        "3",
        "--val",
        "1",
        "--height",
        "32",
        "--width",
        "64",
    ]
    assert data_command.main(argv) == 130
    one_error(capsys.readouterr().err, "interrupted", "run it again")
    assert not (root / data.SYNTHETIC_MARKER).exists()  # the old marker went first
    assert not list(root.rglob("*.png"))
    monkeypatch.undo()
    assert data_command.main(argv) == 0
    assert len(list(root.rglob("*_leftImg8bit.png"))) == 4


def test_a_partial_set_is_refused_as_data_and_replaced_by_synthesize(tiny, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(tiny, root)
    (root / data.SYNTHETIC_MARKER).unlink()
    (root / data.SYNTHETIC_PARTIAL).write_text("")  # what a SIGKILL leaves
    with pytest.raises(FileNotFoundError, match="stopped before it finished"):
        data.resolve_root(root)
    synthetic.synthesize(root, 1, 1, height=32, width=64)
    assert data.resolve_root(root) == root
    assert not (root / data.SYNTHETIC_PARTIAL).exists()


def test_synthesize_root_empty_writes_nothing_here(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (
        data_command.main(["synthesize", "--root", "", "--train", "1", "--val", "1"])
        == 2
    )
    one_error(capsys.readouterr().err, "empty path")
    assert not list(tmp_path.iterdir())


def test_synthesize_on_a_full_disk_leaves_nothing_partial(tmpfs, capsys):
    full = tmpfs("full", size="300k")
    argv = [
        "synthesize",
        "--root",
        str(full / "ds"),
        "--train",
        "40",
        "--val",
        "2",
        "--height",
        "64",
        "--width",
        "128",
    ]
    assert data_command.main(argv) == 1
    one_error(capsys.readouterr().err, "No space left", "run it again")
    assert not (full / "ds").exists()


# --- evaluate, doctor, bench, gpucheck ------------------------------------------------


def test_evaluate_refuses_a_fifo_prediction_instead_of_blocking(tiny, tmp_path):
    gt = sorted((tiny / "gtFine" / "val").rglob("*_labelIds.png"))[0]
    stem = gt.name.replace("_gtFine_labelIds.png", "")
    _fifo(tmp_path / "preds" / gt.parent.name / f"{stem}_pred.png")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampbook.evaluate",
            str(tmp_path / "preds"),
            "--data-root",
            str(tiny),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    one_error(done.stderr, "FIFO")


@pytest.fixture
def quitter(tmp_path, monkeypatch):
    (tmp_path / "quitter.py").write_text("import sys\ndef build():\n    sys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_doctor_a_factory_that_exits_is_an_error_not_a_success(quitter, capsys):
    from ampbook import doctor

    assert doctor.main(["--model", "quitter:build", "--no-measure"]) == 2
    one_error(capsys.readouterr().err, "called sys.exit(0)", "return the nn.Module")


@pytest.mark.parametrize("spec", [":x", ".x:y", "x:", "json:nope"])
def test_doctor_model_specs_that_cannot_name_a_model(spec, capsys):
    from ampbook import doctor

    assert doctor.main(["--model", spec, "--no-measure"]) == 2
    one_error(capsys.readouterr().err)


def test_doctor_refuses_one_file_for_json_and_markdown(tmp_path, capsys):
    from ampbook import doctor

    same = str(tmp_path / "r")
    argv = ["--model", "erfnet", "--no-measure", "--json", same, "--markdown", same]
    assert doctor.main(argv) == 2
    one_error(capsys.readouterr().err, "--json and --markdown both name")
    assert not Path(same).exists()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["matmul", "--quick", "--min-time", "nan"], ["--min-time", "finite"]),
        (["matmul", "--quick", "--sizes", "0"], ["--sizes"]),
        (["loader", "--passes", "0"], ["--passes"]),
    ],
)
def test_bench_numbers_are_checked_before_measuring(argv, words, tmp_path, capsys):
    from ampbook.bench import main

    assert (
        main(
            [
                *argv,
                "--json" if argv[0] != "matmul" else "--save",
                str(tmp_path / "r.json"),
            ]
        )
        == 2
    )
    out = capsys.readouterr()
    one_error(out.err, *words)
    assert not (tmp_path / "r.json").exists() and "ms per step" not in out.out


def test_a_misspelt_torchvision_model_gets_the_nearest_names(capsys):
    from ampbook import doctor

    spec = "torchvision:resnet999"
    assert doctor.main(["--model", spec, "--no-measure"]) == 2
    line = one_error(capsys.readouterr().err, "'resnet999'", "resnet18", "resnet50")
    assert "alexnet" not in line and "convnext" not in line, line


def test_ladder_json_in_a_missing_folder_is_refused_and_nothing_made(tmp_path, capsys):
    """As the doctor refuses it: a typo in the folder makes no folders."""
    from ampbook.bench import main

    target = tmp_path / "nowhere" / "dir" / "x.json"
    assert main(["ladder", "--rungs", "0", "--json", str(target)]) == 2
    out = capsys.readouterr()
    one_error(out.err, "--json", "does not exist")
    assert not (tmp_path / "nowhere").exists()


def test_bench_outputs_are_checked_before_measuring(tmp_path, capsys):
    from ampbook.bench import main
    from booktools.bench_step import main as bench_step

    blocker = tmp_path / "file"
    blocker.write_text("x")
    for run, argv in (
        (bench_step, ["--json", str(blocker / "r.json")]),
        (main, ["matmul", "--quick", "--save", str(tmp_path / ("n" * 300))]),
    ):
        assert run(argv) == 2
        out = capsys.readouterr()
        one_error(out.err, "--")
        assert "ms" not in out.out


@pytest.mark.parametrize(
    "argv, words",
    [(["--target-s", "inf"], ["--target-s"]), (["--json", "."], ["--json"])],
)
def test_doctor_bench_checks_its_options_before_timing(argv, words, capsys):
    from booktools import doctor_bench

    assert doctor_bench.main(argv) == 2
    out = capsys.readouterr()
    one_error(out.err, *words)
    assert "ms" not in out.out


@pytest.mark.parametrize("budget", ["inf", "nan", "-1"])
def test_gpucheck_budget_must_be_a_finite_time(budget, tmp_path, capsys):
    from booktools import gpucheck

    assert gpucheck.main(["--out", str(tmp_path / "o"), "--budget-s", budget]) == 2
    one_error(capsys.readouterr().err, "--budget-s")
    assert not (tmp_path / "o").exists()


def test_gpucheck_does_not_replace_an_earlier_checks_results(tmp_path, capsys):
    from booktools import gpucheck

    (tmp_path / "report.json").write_text("{}")
    assert gpucheck.main(["--dry-run", "--out", str(tmp_path), "--stages", "env"]) == 2
    one_error(capsys.readouterr().err, "earlier check", "report.json")
    assert (tmp_path / "report.json").read_text() == "{}"


def _sentinels():
    """Handlers a caller had before a command ran, and what they received."""
    got = []

    def caller(signum, frame):
        got.append(signum)

    hook = lambda *a: None  # noqa: E731
    old = {s: signal.signal(s, caller) for s in (signal.SIGTERM, signal.SIGINT)}
    old_hup = signal.signal(signal.SIGHUP, caller)
    old_hook, sys.excepthook = sys.excepthook, hook
    return caller, hook, got, {**old, signal.SIGHUP: old_hup}, old_hook


def _assert_back(caller, hook, got):
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        assert signal.getsignal(s) is caller, signal.Signals(s).name
    assert sys.excepthook is hook
    os.kill(os.getpid(), signal.SIGTERM)  # reaches the caller's handler, not a check's
    assert got == [signal.SIGTERM]
    got.clear()


def test_a_command_leaves_its_callers_handlers_as_it_found_them(tmp_path, capsys):
    """Whatever a command installs (signal handlers, an excepthook) is undone when its
    main returns or raises: a test once found gpucheck's SIGTERM handler still in
    pytest's process, and a later SIGTERM (from ``timeout``) ended in a traceback."""
    from booktools import gpucheck, gpulease

    @cli.command("python -m x")
    def main(argv):
        signal.signal(signal.SIGTERM, lambda *a: None)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        sys.excepthook = print
        if argv[0] == "bug":
            raise ZeroDivisionError("a bug")
        return 0

    caller, hook, got, old, old_hook = _sentinels()
    try:
        assert main(["ok"]) == 0
        _assert_back(caller, hook, got)
        with pytest.raises(ZeroDivisionError):
            main(["bug"])
        _assert_back(caller, hook, got)
        # gpucheck sets its own handlers for the whole check: a finished check, a
        # check whose stage raised, and Check.run called alone all undo them.
        assert (
            gpucheck.main(["--dry-run", "--out", str(tmp_path / "a"), "--stages", "x"])
            == 2
        )
        _assert_back(caller, hook, got)

        def broken(self, res, final=False):
            raise ZeroDivisionError("a bug in the report")

        check = gpulease.Check(tmp_path / "b", 60, True, ("wheels",))
        original = gpulease.Check.finish_stage
        gpulease.Check.finish_stage = broken
        try:
            with pytest.raises(ZeroDivisionError):
                check.run()
        finally:
            gpulease.Check.finish_stage = original
            check.log_file.close()
        _assert_back(caller, hook, got)
        check = gpulease.Check(tmp_path / "c", 60, True, ("wheels",))
        assert check.run() == 0
        _assert_back(caller, hook, got)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        sys.excepthook = old_hook
    capsys.readouterr()


# --- what is read: results, reports, profiles, environment ----------------------------


def _train_record(finished_run: Path) -> dict:
    return json.loads((finished_run / "a.json").read_text())


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda r: r["epochs"][0].update(wall_s=0), "epochs[0].wall_s"),
        (lambda r: r["epochs"][0].update(step_s="x"), "epochs[0].step_s"),
        (lambda r: r["epochs"][0].update(images=0), "epochs[0].images"),
        (lambda r: r["config"].update(height="x"), "config.height"),
        (lambda r: r["summary"].update(max_saved_tensor_bytes=math.inf), "summary."),
    ],
)
def test_results_with_zero_or_non_numeric_fields_are_set_aside(
    edit, field, finished_run, tmp_path
):
    from ampbook.results import load_results_dir

    record = _train_record(finished_run)
    edit(record)
    (tmp_path / "r.json").write_text(json.dumps(record))
    _fifo(tmp_path / "pipe.json")  # read as nothing, not blocked on
    rs = load_results_dir(tmp_path)
    assert not rs.train_runs and len(rs.ignored) == 2
    reasons = " ".join(i.reason for i in rs.ignored)
    assert field in reasons and "FIFO" in reasons


def test_profiles_yml_errors_name_the_file_and_place(tmp_path):
    from booktools.run import RunError, load_profiles

    p = tmp_path / "profiles.yml"
    for text, words in (
        ("smoke: {a: [\n", "not valid YAML at line"),
        ("- smoke\n", "not a mapping"),
        ("smoke: x\ncpu: {}\ngpu: {}\n", "profile 'smoke' is a str"),
        ("smoke: {nb: [1]}\ncpu: {}\ngpu: {}\n", "smoke.nb is a list"),
    ):
        p.write_text(text)
        with pytest.raises(RunError, match=words):
            load_profiles(p)


def test_environment_variables_are_checked(tmp_path, monkeypatch):
    from ampbook.core.paths import CacheError, cache_dir
    from booktools import bookcheck, run

    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("AMPBOOK_CACHE", str(blocker))
    with pytest.raises(CacheError, match="AMPBOOK_CACHE"):
        cache_dir()
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-browser"))
    with pytest.raises(bookcheck.CheckError, match="CHROMIUM"):
        bookcheck.find_chromium()
    monkeypatch.setenv("AMPBOOK_PROFILE", "huge")
    with pytest.raises(run.RunError, match="AMPBOOK_PROFILE='huge'"):
        run.default_profile()


def _executed(tmp_path: Path, run_id: str = "r1") -> Path:
    from ampbook.core.paths import NOTEBOOKS_DIR
    from booktools import book, run

    folder = tmp_path / "executed"
    folder.mkdir()
    names = book.toc_chapters()
    for stem in names:
        shutil.copy(NOTEBOOKS_DIR / f"{stem}.ipynb", folder / f"{stem}.ipynb")
        run.mark(folder / f"{stem}.ipynb", "complete", run_id=run_id)
    report = {
        "profile": "smoke",
        "notebooks": [
            {
                "name": n,
                "status": "ok",
                "seconds": 1.0,
                "executed_cells": 1,
                "run": run_id,
            }
            for n in names
        ],
    }
    (folder / "run_report.json").write_text(json.dumps(report))
    return folder


def test_book_refuses_a_stale_report_an_unmarked_or_a_partial_notebook(tmp_path):
    from booktools import book, run

    folder = _executed(tmp_path)
    book.check_executed(folder)  # consistent: accepted
    first = folder / f"{book.toc_chapters()[0]}.ipynb"
    run.mark(first, "complete", run_id="another-run")
    with pytest.raises(book.BookError, match="does not describe"):
        book.check_executed(folder)
    nb = json.loads(first.read_text())
    nb["metadata"].pop("ampbook")
    first.write_text(json.dumps(nb))
    with pytest.raises(book.BookError, match="carries no mark"):
        book.check_executed(folder)
    report = json.loads((folder / "run_report.json").read_text())
    del report["notebooks"][0]["executed_cells"]
    (folder / "run_report.json").write_text(json.dumps(report))
    with pytest.raises(book.BookError, match=r"notebooks\[0\].executed_cells"):
        book.check_executed(folder)


def test_a_run_report_keeps_the_entries_of_notebooks_still_from_that_run(tmp_path):
    from booktools import run

    folder = _executed(tmp_path, run_id="old")
    names = [
        n["name"]
        for n in json.loads((folder / "run_report.json").read_text())["notebooks"]
    ]
    run.mark(folder / f"{names[1]}.ipynb", "complete", run_id="new")
    entry = {
        "name": names[1],
        "status": "ok",
        "seconds": 2.0,
        "executed_cells": 3,
        "run": "new",
    }
    run.write_run_report(folder, {"profile": "smoke", "notebooks": [entry]})
    report = run.load_run_report(folder / "run_report.json")
    by = {n["name"]: n["run"] for n in report["notebooks"]}
    assert by[names[1]] == "new" and by[names[0]] == "old" and len(by) == len(names)


# --- notebook parameters --------------------------------------------------------------


def test_parameter_checks_refuse_what_would_fail_later(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad = (
        lambda: params.number("min_time", math.inf, minimum=0),
        lambda: params.seed("seed", -1),
        lambda: params.seed("seed", 2**40),
        lambda: params.flag("shuffle", "maybe"),
        lambda: params.shape("erfnet_input", 5),
        lambda: params.shape("erfnet_input", [3, 0, 4]),
        lambda: params.floats("fixed_scales", [0.0]),
        lambda: params.floats("fixed_scales", [math.nan]),
        lambda: params.folder("results_dir", str(tmp_path / "missing")),
        lambda: params.output("save_results", str(blocker / "r.json")),
        lambda: params.output("out_dir", str(blocker), kind="folder"),
        lambda: params.rule("precisions", 5, lambda v: v[:1] == ["fp32"], "must ..."),
    )
    for check in bad:
        with pytest.raises(params.ParameterError, match="parameter "):
            check()
    assert params.shape("x", [3, 8, 8]) == [3, 8, 8]
    assert params.folder("results_dir", "") == ""
    assert params.output("save_results", str(tmp_path / "new" / "r.json"))


def test_a_damaged_png_is_an_error_not_a_crash(tiny, tmp_path):
    """torchvision's libpng decoder kills the process (SIGSEGV) on a damaged stream:
    every PNG's chunks are checked first
    (``ampbook.segmentation.cityscapes.png_damage``)."""
    label = sorted((tiny / "gtFine" / "train").rglob("*.png"))[0]
    raw = bytearray(label.read_bytes())
    raw[raw.find(b"IDAT") + 12] ^= 0xFF
    damaged = tmp_path / "damaged.png"
    damaged.write_bytes(bytes(raw))
    assert data.png_damage(label.read_bytes()) is None
    assert "fails its CRC" in data.png_damage(bytes(raw))
    assert "cut short" in data.png_damage(label.read_bytes()[:-20])
    code = (
        "import sys; from pathlib import Path; "
        "from ampbook.segmentation.cityscapes import DataError, "
        "read_label_ids\ntry:\n    read_label_ids(Path(sys.argv[1]))\n"
        "except DataError as err:\n    print(err)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(damaged)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "fails its CRC" in done.stdout


def test_a_stop_in_a_frozen_module_is_held_back_not_raised_there():
    # C code that calls back into <frozen abc> (isinstance on a Path that numpy
    # converts) turns an exception raised there into a SystemError: a stop landing in
    # such a frame is delivered again a moment later, in the caller's own code
    from ampbook.core import stops

    ns: dict = {}
    exec(compile("import sys\nframe = sys._getframe()", "<frozen abc>", "exec"), ns)
    assert stops._in_frozen(ns["frame"])
    assert not stops._in_frozen(sys._getframe())
    assert not stops._in_frozen(None)


# --- the start: a locale that is not UTF-8, an address-space limit, closed streams ----


def _started(argv, tmp_path, env=None, before="pass", timeout=180):
    """``python -m ARGV`` as a user starts it, after ``before`` (Python run in the
    child first: a limit, a closed stream) and with ``env`` over this one."""
    code = (
        f"import os, resource, sys; {before}; "
        "os.execv(sys.executable, [sys.executable, '-m', *sys.argv[1:]])"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        capture_output=True,
        timeout=timeout,
    )


DOCTOR = ["ampbook.doctor", "--model", "erfnet", "--no-measure", "--gpus", "h200"]


def test_a_c_locale_writes_utf8_files_and_ascii_to_the_terminal(tmp_path):
    """LC_ALL=C without UTF-8 mode: the --markdown report (an en dash in it) was a
    UnicodeEncodeError; it is written in UTF-8, stdout keeps ASCII spellings."""
    env = {
        "LC_ALL": "C",
        "LANG": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONIOENCODING": "",
    }
    done = _started([*DOCTOR, "--markdown", "r.md"], tmp_path, env)
    assert done.returncode == 0, done.stderr.decode()[-600:]
    assert "\u2013" in (tmp_path / "r.md").read_text(encoding="utf-8")
    assert done.stdout.isascii() and b"+/-" in done.stdout


def test_an_address_space_limit_too_small_for_torch_is_one_line(tmp_path):
    """Under ``ulimit -v 1500000`` importing torch fails to map libtorch_cpu.so (a
    traceback); the command says so in one line, exit 2; its --help still answers."""
    limit = "resource.setrlimit(resource.RLIMIT_AS, (1500000 * 1024,) * 2)"
    done = _started(["ampbook.train", "--epochs", "1"], tmp_path, before=limit)
    assert done.returncode == 2, done.stderr.decode()[-600:]
    one_error(done.stderr.decode(), "ulimit -v 1500000", "1.4 GiB", "torch")
    assert not (tmp_path / "runs").exists()
    helped = _started(["ampbook.train", "--help"], tmp_path, before=limit)
    assert helped.returncode == 0 and b"--epochs" in helped.stdout
    assert stops.address_space_problem(2**40) is None
    assert "ulimit -v 2097152" in stops.address_space_problem(2 * 2**30)


def test_an_allocation_that_fails_is_one_line_and_exit_1():
    err = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
        "allocate memory: you tried to allocate 40000000000 bytes. Error code 12"
    )
    code, text = cli.describe(err)
    assert code == 1 and text.startswith("out of memory (DefaultCPUAllocator: can't")
    assert "enforce" not in text and "ulimit -v" in text
    assert cli.describe(MemoryError())[0] == 1
    code, text = cli.describe(
        ImportError("libtorch_cpu.so: failed to map segment from shared object")
    )
    assert code == 2 and "ulimit -v" in text


def test_closed_stdout_is_refused_and_closed_stderr_is_no_crash(tmp_path):
    done = _started(DOCTOR, tmp_path, before="os.close(1)")
    assert done.returncode == 2
    one_error(done.stderr.decode(), "standard output is closed")
    out = tmp_path / "x"  # the notebook runner: refused before its kernel starts
    runner = ["booktools.run", "--profile", "smoke", "--out", str(out), "1"]
    done = _started(runner, tmp_path, before="os.close(1)")
    assert done.returncode == 2 and not out.exists()
    one_error(done.stderr.decode(), "standard output is closed")
    # stderr closed: the error line goes nowhere, the status still says it
    done = _started(["ampbook.doctor", "--modle", "x"], tmp_path, before="os.close(2)")
    assert done.returncode == 2 and done.stdout == b""
    done = _started(DOCTOR, tmp_path, before="os.close(2)")
    assert done.returncode == 0 and b"h200" in done.stdout.lower()


def test_a_full_standard_output_is_named(monkeypatch):
    """``> /dev/full``: the write error has no file name; the line names stdout, not
    "choose another folder"."""
    full = OSError(errno.ENOSPC, "No space left on device")
    with open("/dev/full", "w") as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        code, text = cli.os_error(full)
        assert code == 1 and text.startswith("standard output: No space left"), text
        assert "folder" not in text
        monkeypatch.setattr(sys, "stdout", sys.__stderr__)  # one that takes writes
        assert "choose another folder" in cli.os_error(full)[1]
