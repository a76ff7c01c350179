"""ampbook.bench_matmul: the chapter's sweeps skip what would be too slow, records round-trip
through the documented JSON format, and the benchmark prints its ratios."""

from __future__ import annotations

import json

import pytest

from ampbook import bench
from ampbook.bench_matmul import (SCHEMA, elementwise_sweep, load_records, make_record, matmul_sweep,
                                  save_record, shape_cliff, shape_penalties, supported_dtypes)

FAST = {"warmup": 1, "repeats": 2, "min_time": 0, "max_time": 0.05}


def test_cpu_dtypes():
    assert supported_dtypes("cpu") == ["fp32", "fp16", "bf16"]


def test_sweep_measures_side_by_side_and_skips_predicted_slow_sizes():
    rows, skipped = matmul_sweep([16, 32, 4096], ["fp32", "bf16"], "cpu", max_call_s=0.5, **FAST)
    measured = {(r["dtype"], r["n"]) for r in rows}
    assert {("fp32", 16), ("bf16", 16), ("fp32", 32), ("bf16", 32)} <= measured
    # 4096 is (4096/32)^3 = 2e6 times the work of 32: predicted far beyond 0.5 s for both dtypes
    assert {(s["dtype"], s["n"]) for s in skipped} == {("fp32", 4096), ("bf16", 4096)}
    assert all("predicted" in s["reason"] for s in skipped)
    assert all(r["tflops"] > 0 and r["p10_s"] <= r["median_s"] <= r["p90_s"] for r in rows)


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
    assert record["schema"] == SCHEMA and record["device_key"] is None
    save_record(record, tmp_path / "tensor_cores_test.json")
    (tmp_path / "other.json").write_text("{}")          # not matched by the pattern
    loaded = load_records(tmp_path)
    assert len(loaded) == 1 and loaded[0]["file"] == "tensor_cores_test.json"
    assert loaded[0]["matmul"][0]["median_s"] == pytest.approx(mm[0]["median_s"])
    assert load_records(tmp_path / "empty") == []
    bad = dict(record, schema="something/0")
    (tmp_path / "tensor_cores_bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="tensor_cores_bad.json: schema"):
        load_records(tmp_path)
    bad = json.loads(json.dumps(record))
    del bad["elementwise"][0]["numel"]
    (tmp_path / "tensor_cores_bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"elementwise\[0\] lacks \['numel'\]"):
        load_records(tmp_path)


def test_benchmark_prints_ratios_and_saves(tmp_path, capsys):
    out = tmp_path / "tensor_cores_quick.json"
    assert bench.main(["matmul", "--quick", "--rounds", "1", "--save", str(out)]) == 0
    text = capsys.readouterr().out
    for needed in ("bf16/fp32 speed", "fp16/fp32 speed", "off-by-one", "fp16/fp32 bandwidth ratio", "saved"):
        assert needed in text, needed
    record = load_records(tmp_path)[0]
    assert {r["dtype"] for r in record["matmul"]} == {"fp32", "fp16", "bf16"}
    with pytest.raises(SystemExit):
        bench.main(["matmul", "--rounds", "0"])
