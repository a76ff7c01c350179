"""ampbook.chapters.ch2.bench_sweeps and ampbook.chapters.ch2.bench_matmul: the
chapter's sweeps skip what would
be too slow, records round-trip through the documented JSON format, and the benchmark
prints its ratios."""

from __future__ import annotations

import json

import pytest

from ampbook import bench
from ampbook.chapters.ch2.bench_matmul import make_record, save_record
from ampbook.chapters.ch2.bench_sweeps import (
    elementwise_sweep,
    matmul_sweep,
    shape_cliff,
    shape_penalties,
    supported_dtypes,
)
from ampbook.results.schema import MATMUL_SCHEMA

FAST = {"warmup": 1, "repeats": 2, "min_time": 0, "max_time": 0.05}


def test_cpu_dtypes():
    assert supported_dtypes("cpu") == ["fp32", "fp16", "bf16"]


def test_sweep_measures_side_by_side_and_skips_predicted_slow_sizes():
    rows, skipped = matmul_sweep(
        [16, 32, 4096], ["fp32", "bf16"], "cpu", max_call_s=0.5, **FAST
    )
    measured = {(r["dtype"], r["n"]) for r in rows}
    assert {("fp32", 16), ("bf16", 16), ("fp32", 32), ("bf16", 32)} <= measured
    # 4096 is (4096/32)^3 = 2e6 times the work of 32: predicted far beyond 0.5 s for
    # both dtypes
    assert {(s["dtype"], s["n"]) for s in skipped} == {("fp32", 4096), ("bf16", 4096)}
    assert all("predicted" in s["reason"] for s in skipped)
    assert all(
        r["tflops"] > 0 and r["p10_s"] <= r["median_s"] <= r["p90_s"] for r in rows
    )


def test_shape_cliff_rows_and_penalties():
    rows, skipped = shape_cliff([24], ["fp32"], "cpu", rounds=2, **FAST)
    assert sorted(r["n"] for r in rows) == [23, 24, 25] and not skipped
    assert all(r["base"] == 24 and r["rounds"] == 2 for r in rows)
    pens = shape_penalties(rows)
    assert sorted(p["n"] for p in pens) == [23, 25]
    for p in pens:
        assert p["slowdown"] == pytest.approx(p["tflops_aligned"] / p["tflops"])
    with pytest.raises(ValueError, match="multiples of 8"):
        shape_cliff([25], ["fp32"], "cpu")


def test_record_round_trip_and_validation(tmp_path):
    mm, skipped = matmul_sweep([16], ["fp32"], "cpu", **FAST)
    ew = elementwise_sweep([1024], ["fp32", "fp16"], "cpu", **FAST)
    record = make_record("cpu", mm, [], ew, skipped, profile="smoke")
    assert record["schema"] == MATMUL_SCHEMA and record["device_key"] is None
    path = save_record(record, tmp_path / "tensor_cores_test.json")
    loaded = json.loads(path.read_text())
    assert loaded["matmul"][0]["median_s"] == pytest.approx(mm[0]["median_s"])
    with pytest.raises(ValueError, match="bad.json: schema"):
        save_record(dict(record, schema="something/0"), tmp_path / "bad.json")
    bad = json.loads(json.dumps(record))
    del bad["elementwise"][0]["numel"]
    with pytest.raises(ValueError, match=r"elementwise\[0\] lacks \['numel'\]"):
        save_record(bad, tmp_path / "bad.json")


def test_benchmark_prints_ratios_and_saves(tmp_path, capsys):
    out = tmp_path / "tensor_cores_quick.json"
    assert bench.main(["matmul", "--quick", "--rounds", "1", "--save", str(out)]) == 0
    text = capsys.readouterr().out
    for needed in (
        "bf16/fp32 speed",
        "fp16/fp32 speed",
        "off-by-one",
        "fp16/fp32 bandwidth ratio",
        "saved",
    ):
        assert needed in text, needed
    record = json.loads(out.read_text())
    assert {r["dtype"] for r in record["matmul"]} == {"fp32", "fp16", "bf16"}
    assert bench.main(["matmul", "--rounds", "0"]) == 2


def test_load_verdict():
    from ampbook.measure.timing import load_verdict

    assert "BUSY" in load_verdict({"load1": 3.0, "cpus": 2, "busy": True}, "cpu")
    assert "quiet" in load_verdict({"load1": 0.1, "cpus": 2, "busy": False}, "cpu")
    assert "noisy" in load_verdict({"load1": 2.9, "cpus": 2, "busy": False}, "cpu")


# ---- where mixed precision pays: convolutions beside matmuls -------------------------


def test_conv_sweep_times_forward_and_training_pass_and_skips_slow_dtypes():
    from ampbook.chapters.ch2.bench_sweeps import conv_sweep

    rows, skipped, fitted = conv_sweep([1, 4, 8, 8], ["fp32", "bf16"], "cpu", **FAST)
    assert fitted is None and {(r["batch"], r["height"]) for r in rows} == {(1, 8)}
    kinds = {(r["kind"], r["dtype"]) for r in rows}
    assert kinds == {(k, d) for k in ("conv", "conv_train") for d in ("fp32", "bf16")}
    assert not skipped
    fwd = {r["dtype"]: r for r in rows if r["kind"] == "conv"}
    train = {r["dtype"]: r for r in rows if r["kind"] == "conv_train"}
    # a training pass is three times the forward's FLOPs
    assert train["fp32"]["flops"] == 3 * fwd["fp32"]["flops"] == 3 * 2 * 4 * 4 * 9 * 64
    # a limit below every forward skips the 16-bit training pass, never fp32's
    rows, skipped, _ = conv_sweep(
        [1, 4, 8, 8], ["fp32", "bf16"], "cpu", max_call_s=1e-9, **FAST
    )
    assert [(s["kind"], s["dtype"]) for s in skipped] == [("conv_train", "bf16")]
    assert ("conv_train", "fp32") in {(r["kind"], r["dtype"]) for r in rows}


def test_a_convolution_too_slow_for_max_call_s_is_timed_smaller(monkeypatch):
    """A dtype whose probe runs far slower than fp32 (here a fake bf16 600x slower:
    the CPU fallback's case) shrinks the convolution every dtype is timed at, to fit
    max_call_s, and the line says the shape, the prediction and its source."""
    from ampbook.chapters.ch2 import bench_sweeps as sweeps

    calls = []

    def fake_single(shape, kernel, dtype, dev, backward):
        calls.append((tuple(shape), dtype, backward))
        per_pixel = 1e-8 * (600 if dtype == "bf16" else 1) * (3 if backward else 1)
        return per_pixel * sweeps._conv_work(shape)

    monkeypatch.setattr(sweeps, "_single_call_s", fake_single)
    shape, line = sweeps.fit_conv_shape(
        [8, 4, 128, 256], ["fp32", "bf16"], "cpu", 3, 0.2
    )
    # full: 262144 pixels, fp32 forward 2.6 ms; bf16 training 600 x 3 x that = 4.7 s
    assert shape[0] == 1 and shape[1] == 4
    assert sweeps._conv_work(shape) <= 0.2 / 4.72 * 8 * 128 * 256
    # and no smaller than needed
    assert sweeps._conv_work(shape) > 0.2 / 4.72 * 8 * 128 * 256 / 2
    assert "not 8x4x128x256" in line and "bf16 training pass" in line
    assert "about 4.72 s" in line and "1.8e+03x fp32's forward" in line
    probe = sweeps._shrink_conv([8, 4, 128, 256], sweeps.CONV_PROBE_WORK)
    assert sweeps._conv_work(probe) <= sweeps.CONV_PROBE_WORK * 8 * 128 * 256
    assert calls[-1] == ((8, 4, 128, 256), "fp32", False)  # fp32 alone at full size
    assert all(c[0] == probe for c in calls[:-1])
    # a convolution every dtype runs fast enough stays as it is
    fast, none = sweeps.fit_conv_shape([8, 4, 128, 256], ["fp32"], "cpu", 3, 10.0)
    assert fast == (8, 4, 128, 256) and none is None
    # sides never go below 8, however slow
    tiny, _ = sweeps.fit_conv_shape([2, 4, 16, 16], ["fp32", "bf16"], "cpu", 3, 1e-12)
    assert tiny == (1, 4, 8, 8)


def test_read_from_counts_the_rotated_input_sets():
    from ampbook.chapters.ch2.bench_sweeps import read_from

    row = {"dtype": "fp32", "numel": 2**20, "bytes_moved": 12 * 2**20, "buffers": 1}
    assert read_from(row, 8 * 2**20) == "cache"  # 12 MiB against 2 x 8 MiB
    assert read_from(dict(row, buffers=2), 8 * 2**20) == "memory"
    assert read_from({"dtype": "fp16", "numel": 2**20}, 2**20) == "memory"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--sizes", "64", "100000"], ["--sizes 100000", "limit is 32768", "GiB"]),
        (["--shape-sizes", "40000"], ["--shape-sizes 40000", "limit is 32768"]),
        (["--numel", str(2**32)], [f"--numel {2**32}", "limit is 2147483648"]),
    ],
)
def test_sizes_beyond_the_limit_are_one_error(argv, words, capsys):
    from tests._cli import one_error

    assert bench.main(["matmul", *argv]) == 2
    one_error(capsys.readouterr().err, *words)


def test_every_option_has_help():
    from ampbook.chapters.ch2.bench_matmul import build_parser

    for action in build_parser()._actions:
        assert action.help, action.option_strings
