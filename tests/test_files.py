"""No command replaces another's output (issue 30): every --json / --markdown / --save
refuses an existing file it did not write (or of another kind) without --overwrite,
through the one rule in ``ampbook.core.cli.check_output_file``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ampbook import bench, doctor
from ampbook.chapters.ch6 import diagnosis
from ampbook.core import cli
from tests._cli import one_error

TRAIN = (
    Path(__file__).parent
    / "fixtures"
    / "results"
    / ("train_fixture-gpu_amp-fp16_1024x512.json")
)


@pytest.fixture
def record(tmp_path) -> Path:
    path = tmp_path / "a.json"
    shutil.copy(TRAIN, path)
    return path


def test_the_rule(record, tmp_path):
    with pytest.raises(cli.UserError, match="schema ampbook.train") as err:
        cli.check_output_file(record, "--json", kind="ampbook.doctor/2")
    assert str(record) in str(err.value) and "--overwrite" in str(err.value)
    with pytest.raises(cli.UserError, match="schema ampbook.train"):
        cli.check_output_file(record, "--json")
    assert cli.check_output_file(record, "--json", kind="ampbook.train") == record
    assert cli.check_output_file(record, "--json", overwrite=True) == record
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    with pytest.raises(cli.UserError, match="did not write"):
        cli.check_output_file(notes, "--markdown")
    empty = tmp_path / "empty.json"
    empty.touch()
    assert cli.check_output_file(empty, "--json") == empty
    assert cli.file_kind(notes) is None and cli.file_kind(record) == "ampbook.train"


DOCTOR = ["--model", "tests.test_diagnosis:dict_out", "--input", "3,8,8",
          "--batch", "2", "--no-measure", "--gpus", "h200",
          "--output", "aux"]  # fmt: skip


def test_doctor_keeps_a_training_record_and_its_own_report_is_its_own(
    record, tmp_path, capsys
):
    before = record.read_bytes()
    assert doctor.main([*DOCTOR, "--json", str(record)]) == 2
    one_error(capsys.readouterr().err, str(record), "ampbook.train", "--overwrite")
    assert record.read_bytes() == before
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    assert doctor.main([*DOCTOR, "--markdown", str(notes)]) == 2
    assert notes.read_text() == "# my notes\n"
    capsys.readouterr()
    mine = tmp_path / "report.json"
    assert doctor.main([*DOCTOR, "--json", str(mine)]) == 0
    assert doctor.main([*DOCTOR, "--json", str(mine)]) == 0  # its own kind
    assert doctor.main([*DOCTOR, "--json", str(record), "--overwrite"]) == 0
    assert json.loads(record.read_text())["schema"] == diagnosis.REPORT_SCHEMA


@pytest.mark.parametrize(
    "argv",
    [
        ["step", "--device", "cpu", "--json"],
        ["loader", "--json"],
        ["matmul", "--device", "cpu", "--quick", "--save"],
    ],
    ids=["step", "loader", "matmul"],
)
def test_bench_commands_keep_a_training_record(argv, record, capsys):
    from booktools import bench_step

    run = bench_step.main if argv[0] == "step" else bench.main
    before = record.read_bytes()
    assert run([*argv[argv[0] == "step" :], str(record)]) == 2
    one_error(capsys.readouterr().err, str(record), "--overwrite")
    assert record.read_bytes() == before
