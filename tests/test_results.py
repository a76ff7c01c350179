"""ampbook.results: reading, summarising and pairing results, on the fixture GPU's
files."""

import json
import shutil
from pathlib import Path

import pytest

from ampbook.results import (
    LAYER_SCHEMA,
    PEAK_CUDA,
    SAVED_FOR_BACKWARD,
    ResultsError,
    load_results_dir,
    pair_runs,
    read_file,
    summarise_run,
)

FIXTURES = Path(__file__).parent / "fixtures" / "results"
GPU = "Fixture GPU (fictitious)"
OTHER = "Other Fixture GPU (fictitious)"


@pytest.fixture(scope="module")
def rs():
    return load_results_dir(FIXTURES)


def test_fixture_folder_reads_completely(rs):
    assert rs.ignored == []
    assert sorted(r.mode for r in rs.train_runs if r.device_name == GPU) == sorted(
        ["fp32-tf32", "fp32", "amp-fp16", "amp-bf16"]
    )
    assert len(rs.matmul_sweeps) == 1 and len(rs.loader_sweeps) == 1
    assert sorted(p.precision for p in rs.layer_profiles) == ["amp-fp16", "fp32"]
    assert rs.devices() == [GPU, OTHER]


def test_epoch_time_is_median_of_epochs_after_first(rs):
    for run in rs.train_runs:
        walls = [e["wall_s"] for e in run.record["epochs"]]
        later = sorted(walls[1:])
        assert run.epoch_s == pytest.approx(
            later[len(later) // 2]
            if len(later) % 2
            else (later[len(later) // 2 - 1] + later[len(later) // 2]) / 2
        )
        assert run.epoch_s < walls[0]  # the warm-up epoch is left out
        assert run.images_per_s == pytest.approx(run.images_per_epoch / run.epoch_s)
        assert 0 < run.data_wait_share < 1


def test_one_epoch_run_uses_its_only_epoch(rs):
    record = json.loads(json.dumps(rs.train_runs[0].record))
    record["epochs"] = record["epochs"][:1]
    run = summarise_run(record)
    assert run.epoch_s == record["epochs"][0]["wall_s"] and run.epochs_timed == 1


def test_memory_definition_cuda_and_cpu(rs):
    run = rs.gpu_runs()[0]
    assert run.memory_measure == PEAK_CUDA
    assert run.memory_bytes == run.record["summary"]["max_cuda_allocated_bytes"]
    assert run.cuda_reserved_bytes >= run.cuda_allocated_bytes
    cpu = json.loads(json.dumps(run.record))
    cpu["resolved"]["device"] = "cpu"
    cpu["summary"]["max_cuda_allocated_bytes"] = None
    as_cpu = summarise_run(cpu)
    assert as_cpu.memory_measure == SAVED_FOR_BACKWARD and not as_cpu.is_cuda
    assert as_cpu.memory_bytes == cpu["summary"]["max_saved_tensor_bytes"]


def test_pairs_same_gpu_only(rs):
    pairs = rs.pairs()
    assert {(p.baseline.mode, p.amp.mode) for p in pairs} == {
        ("fp32-tf32", "amp-fp16"),
        ("fp32-tf32", "amp-bf16"),
        ("fp32", "amp-fp16"),
        ("fp32", "amp-bf16"),
    }
    for p in pairs:
        assert p.baseline.device_name == p.amp.device_name == GPU
        assert p.speedup == pytest.approx(p.baseline.epoch_s / p.amp.epoch_s)
        assert p.step_speedup == pytest.approx(p.baseline.step_s / p.amp.step_s)
        assert p.memory_ratio == pytest.approx(
            p.amp.memory_bytes / p.baseline.memory_bytes
        )
    assert not any(OTHER in (p.baseline.device_name, p.amp.device_name) for p in pairs)


def test_mismatched_gpus_do_not_pair(rs):
    fp32 = next(r for r in rs.train_runs if r.device_name == GPU and r.mode == "fp32")
    other_fp16 = next(r for r in rs.train_runs if r.device_name == OTHER)
    assert pair_runs([fp32, other_fp16]) == []
    same = next(
        r for r in rs.train_runs if r.device_name == GPU and r.mode == "amp-fp16"
    )
    assert len(pair_runs([fp32, same])) == 1


def _run(rs, mode: str):
    """The fixture GPU's run of ``mode``."""
    return next(r for r in rs.train_runs if r.device_name == GPU and r.mode == mode)


def test_other_setting_does_not_pair(rs):
    fp32 = _run(rs, "fp32")
    amp = json.loads(json.dumps(_run(rs, "amp-fp16").record))
    amp["config"]["batch_size"] = 2
    assert pair_runs([fp32, summarise_run(amp)]) == []


def test_incomplete_runs_do_not_pair(rs):
    fp32 = _run(rs, "fp32")
    amp = json.loads(json.dumps(_run(rs, "amp-fp16").record))
    amp["status"] = "running"
    assert pair_runs([fp32, summarise_run(amp)]) == []
    assert len(pair_runs([fp32, summarise_run(amp)], complete_only=False)) == 1


def test_layer_profile_and_loader(rs):
    lp = next(p for p in rs.layer_profiles if p.precision == "fp32")
    assert lp.time_source == "cuda" and lp.device_name == GPU
    assert lp.measured_total_s == pytest.approx(
        sum(x.measured_s for x in lp.layers) + lp.unattributed_s
    )
    types = lp.by_type()
    assert sum(t.measured_s for t in types) == pytest.approx(
        lp.measured_total_s - lp.unattributed_s
    )
    assert types == sorted(types, key=lambda t: -t.measured_s)
    assert any(t.type == "Conv2d" for t in types)
    loader = rs.loader_sweeps[0]
    assert [p.workers for p in loader.points] == list(range(9))


def test_bad_and_foreign_files_are_listed_not_mixed_in(tmp_path):
    shutil.copy(FIXTURES / "train_fixture-gpu_fp32_1024x512.json", tmp_path)
    (tmp_path / "notes.json").write_text(json.dumps({"hello": 1}))
    (tmp_path / "broken.json").write_text("{not json")
    bad = json.loads(
        (FIXTURES / "layer_profile_fixture-gpu_fp32_1024x512.json").read_text()
    )
    bad["layers"][0]["measured_s"] = -1.0
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "layer_bad.json").write_text(json.dumps(bad))
    rs = load_results_dir(tmp_path)
    assert len(rs.train_runs) == 1 and rs.layer_profiles == []
    reasons = {Path(i.path).name: i.reason for i in rs.ignored}
    assert set(reasons) == {"notes.json", "broken.json", "layer_bad.json"}
    assert "unknown schema" in reasons["notes.json"]
    assert "not readable JSON" in reasons["broken.json"]
    assert "measured_s" in reasons["layer_bad.json"]


def test_missing_folder_and_wrong_schema_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_results_dir(tmp_path / "nope")
    record = json.loads((FIXTURES / "loader_fixture-gpu.json").read_text())
    del record["results"]
    (tmp_path / "x.json").write_text(json.dumps(record))
    with pytest.raises(ResultsError, match="x.json: loader sweep lacks"):
        read_file(tmp_path / "x.json")
    record = {"schema": LAYER_SCHEMA}
    (tmp_path / "y.json").write_text(json.dumps(record))
    with pytest.raises(ResultsError, match="layer profile lacks"):
        read_file(tmp_path / "y.json")


def test_empty_data_results_folder_reads(tmp_path):
    rs = load_results_dir(tmp_path)
    assert rs.pairs() == [] and rs.devices() == []


def test_cudnn_version_text_both_encodings():
    from ampbook.core.env import cudnn_version_text

    assert cudnn_version_text(91900) == "9.19"
    assert cudnn_version_text(8907) == "8.9.7"
    assert cudnn_version_text(None) is None


def test_provenance_line_of_a_gpu_run():
    from ampbook.results import provenance

    env = {
        "device": "cuda",
        "device_name": "NVIDIA H200",
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "cudnn": 91900,
        "cpu_threads": 16,
    }
    line = provenance(env, "2026-11-30T23:55:39+00:00", {"workers": 4, "": "NCHW"})
    assert line == (
        "H200 SXM · 2026-11-30 · torch 2.11.0+cu130, CUDA 13.0, cuDNN 9.19 · "
        "16 CPU threads · workers 4 · NCHW"
    )
    cpu = provenance({"device": "cpu", "device_name": "AMD EPYC", "torch": "2.14.1"})
    assert cpu == "AMD EPYC · torch 2.14.1"


def _edited(name: str, edit) -> dict:
    record = json.loads((FIXTURES / name).read_text())
    edit(record)
    return record


TRAIN = "train_fixture-gpu_amp-fp16_1024x512.json"

# What cannot be, one per file, each with the words its reason must hold.
IMPOSSIBLE = {
    "wait_over_wall": (
        lambda r: r["epochs"][1].update(data_wait_s=r["epochs"][1]["wall_s"] * 2.5),
        "exceed the epoch's wall_s",
    ),
    "step_over_wall": (
        lambda r: r["epochs"][1].update(step_s=r["epochs"][1]["wall_s"] * 40),
        "exceed the epoch's wall_s",
    ),
    "tiny_wall": (
        lambda r: r["epochs"][1].update(wall_s=1e-300, step_s=1e-301, data_wait_s=0),
        "epochs[1].wall_s",
    ),
    "miou": (lambda r: r["summary"].update(final_val_miou=7.5), "final_val_miou"),
    "accuracy": (
        lambda r: r["summary"].update(final_val_pixel_accuracy=-3.0),
        "final_val_pixel_accuracy",
    ),
    "string_loss": (
        lambda r: r["summary"].update(final_train_loss="0.5"),
        "final_train_loss",
    ),
    "fractional_images": (
        lambda r: r["epochs"][0].update(images=2.5),
        "epochs[0].images",
    ),
    "huge_batch": (
        lambda r: r["config"].update(batch_size=10**12),
        "config.batch_size",
    ),
}


def test_impossible_files_are_skipped_with_one_line_and_the_rest_is_read(
    tmp_path, capsys
):
    for f in FIXTURES.glob("*.json"):
        shutil.copy(f, tmp_path)
    for name, (edit, _) in IMPOSSIBLE.items():
        (tmp_path / f"bad_{name}.json").write_text(json.dumps(_edited(TRAIN, edit)))
    (tmp_path / "bad_nested.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp_path / "bad_digits.json").write_text(
        '{"schema": "ampbook.train", "n": ' + "7" * 5000 + "}"
    )
    (tmp_path / "bad_deep_object.json").write_text(
        '{"schema": "ampbook.loader_sweep/1", "x": ' + '{"a": ' * 100 + "1" + "}" * 101
    )
    good = load_results_dir(FIXTURES)
    capsys.readouterr()
    rs = load_results_dir(tmp_path)
    err = capsys.readouterr().err.splitlines()
    reasons = {Path(i.path).name: i.reason for i in rs.ignored}
    expected = {f"bad_{n}.json": words for n, (_, words) in IMPOSSIBLE.items()}
    expected |= {
        "bad_nested.json": "nested more than",
        "bad_digits.json": "5,000 digits",
        "bad_deep_object.json": "nested more than",
    }
    assert set(reasons) == set(expected)
    for name, words in expected.items():
        assert name in reasons[name] and words in reasons[name], reasons[name]
    # one line each on stderr, naming the file and why
    assert len(err) == len(expected)
    for line in err:
        assert line.startswith("results: skipped ") and "bad_" in line
    # the good files beside them are all read
    assert len(rs.train_runs) == len(good.train_runs)
    assert len(rs.layer_profiles) == len(good.layer_profiles)
    assert len(rs.ladders) == len(good.ladders) == 1
    assert len(rs.pairs()) == len(good.pairs()) > 0
    # the readers of a folder beyond the chapters: the calibration's
    from ampbook.predict.calibrate import launch_floor
    from ampbook.predict.references import profile_references

    profile_references(tmp_path)
    launch_floor(tmp_path)


def test_two_records_of_one_setting_are_an_error_naming_both(tmp_path, capsys):
    for f in FIXTURES.glob("*.json"):
        shutil.copy(f, tmp_path)
    copy = tmp_path / "zz_copy_of_amp_fp16.json"
    shutil.copy(FIXTURES / TRAIN, copy)
    rs = load_results_dir(tmp_path)
    reasons = {Path(i.path).name: i.reason for i in rs.ignored}
    assert set(reasons) == {TRAIN, copy.name}
    for reason in reasons.values():
        assert TRAIN in reason and copy.name in reason and "one setting" in reason
    good = load_results_dir(FIXTURES, report=False)
    assert len(rs.train_runs) == len(good.train_runs) - 1
    assert len(rs.pairs()) < len(good.pairs())
    runs = [read_file(FIXTURES / TRAIN), read_file(copy)]
    with pytest.raises(ResultsError, match="two records of one setting") as err:
        pair_runs(runs)
    assert TRAIN in str(err.value) and copy.name in str(err.value)


def test_a_matmul_record_that_is_not_an_object_is_named():
    from ampbook.results.sweeps import validate_matmul

    with pytest.raises(ValueError, match=r"x\.json: a results record is a JSON object"):
        validate_matmul([], "x.json")
