"""ampbook.bench.matmul: the chapter's sweeps skip what would be too slow, records
round-trip through the documented JSON format, and the benchmark prints its ratios."""

from __future__ import annotations

import json

import pytest

from ampbook import bench
from ampbook.bench.matmul import (
    SCHEMA,
    elementwise_sweep,
    load_records,
    make_record,
    matmul_sweep,
    save_record,
    shape_cliff,
    shape_penalties,
    supported_dtypes,
)

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
    assert record["schema"] == SCHEMA and record["device_key"] is None
    save_record(record, tmp_path / "tensor_cores_test.json")
    (tmp_path / "other.json").write_text("{}")  # not matched by the pattern
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
    for needed in (
        "bf16/fp32 speed",
        "fp16/fp32 speed",
        "off-by-one",
        "fp16/fp32 bandwidth ratio",
        "saved",
    ):
        assert needed in text, needed
    record = load_records(tmp_path)[0]
    assert {r["dtype"] for r in record["matmul"]} == {"fp32", "fp16", "bf16"}
    assert bench.main(["matmul", "--rounds", "0"]) == 2


# ---- summaries and verdicts (chapter 2) ----------------------------------------------


def _row(dtype, n, median_s, spread=0.05, **extra):
    flops = 2.0 * n**3
    return {
        "kind": "matmul",
        "dtype": dtype,
        "n": n,
        "m": n,
        "k": n,
        "median_s": median_s,
        "p10_s": median_s * (1 - spread),
        "p90_s": median_s * (1 + spread),
        "flops": flops,
        "tflops": flops / median_s / 1e12,
        **extra,
    }


def test_best_and_common_size_and_speed_verdict():
    from ampbook.bench.matmul import (
        best_per_dtype,
        speed_verdict,
        speeds_at_common_size,
    )

    rows = [
        _row("fp32", 64, 1e-4),
        _row("fp32", 128, 5e-4),
        _row("bf16", 64, 4e-4),
        _row("bf16", 128, 4e-3),
        _row("fp32", 256, 3e-3),
    ]
    best = best_per_dtype(rows)
    assert best["fp32"]["n"] == 256 and best["bf16"]["n"] == 64
    n, speed = speeds_at_common_size(rows)
    assert n == 128 and speed["bf16"] / speed["fp32"] == pytest.approx(0.125)
    line = speed_verdict(speed, n, "cpu")
    assert "bf16 0.125x fp32" in line and "SLOWER" in line
    assert "AMX" not in line  # measured, never inferred from the CPU's flags
    fast = speed_verdict({"fp32": 1.0, "fp16": 2.0}, 512, "cuda")
    assert "faster than fp32 on this cuda" in fast
    with pytest.raises(ValueError, match="every dtype"):
        speeds_at_common_size([_row("fp32", 64, 1e-4), _row("bf16", 128, 1e-3)])


def test_shape_verdict_separates_noise_from_a_cliff():
    from ampbook.bench.matmul import shape_penalties, shape_verdict

    # n=513 looks 3% faster per FLOP but the spreads (5%) overlap: noise.
    base = _row("bf16", 512, 1e-2, base=512)
    t513 = 1e-2 * (513 / 512) ** 3 / 1.03
    noisy = shape_penalties([base, _row("bf16", 513, t513, base=512)])
    assert noisy[0]["slowdown"] < 1 and not noisy[0]["outside_spread"]
    assert "within the run-to-run spread" in shape_verdict(noisy)
    assert "0 of 1 pairs" in shape_verdict(noisy)
    # n=511 twice as slow per FLOP with tight spreads: a real cliff.
    t511 = 2e-2 * (511 / 512) ** 3
    cliff = shape_penalties([base, _row("bf16", 511, t511, spread=0.01, base=512)])
    line = shape_verdict(cliff)
    assert "2.00x slower" in line and "outside the run-to-run spread" in line
    assert shape_verdict([]) == "no shape comparison ran."


def test_elementwise_and_load_verdicts():
    from ampbook.bench.matmul import elementwise_verdict, load_verdict

    def ew(dtype, numel, t, buffers=1):
        size = 4 if dtype == "fp32" else 2
        return {
            "dtype": dtype,
            "numel": numel,
            "median_s": t,
            "bytes_moved": 3 * numel * size,
            "buffers": buffers,
        }

    half = [
        ew("fp32", 2**24, 1.0),
        ew("fp16", 2**24, 0.52),
        ew("fp32", 2**10, 1e-6),
        ew("fp16", 2**10, 1e-6),
    ]
    line = elementwise_verdict(half, 2**20)
    assert "half the bytes, close to half the time" in line
    assert "read from memory; last-level cache 1 MiB" in line
    # 96 MiB of fp16 inputs against a 1 GiB cache: they stay in it
    two_thirds = [ew("fp32", 2**24, 1.0), ew("fp16", 2**24, 0.66)]
    line = elementwise_verdict(two_thirds, 2**30)
    assert "well short of half" in line and "read from the cache" in line
    # ... unless the timer rotated enough input sets to cover twice the cache
    rotated = [ew("fp32", 2**24, 1.0, 11), ew("fp16", 2**24, 0.66, 22)]
    assert "read from memory" in elementwise_verdict(rotated, 2**30)
    same = [ew("fp32", 2**24, 1.0), ew("fp16", 2**24, 0.98)]
    assert "little or no gain" in elementwise_verdict(same, 2**20)
    assert "BUSY" in load_verdict({"load1": 3.0, "cpus": 2, "busy": True}, "cpu")
    assert "quiet" in load_verdict({"load1": 0.1, "cpus": 2, "busy": False}, "cpu")
    assert "noisy" in load_verdict({"load1": 2.9, "cpus": 2, "busy": False}, "cpu")


def test_roofline_ceilings_rows_and_verdict():
    from ampbook.bench.matmul import roofline_ceilings, roofline_rows, roofline_verdict
    from ampbook.core.devices import load_devices

    best = {"fp32": dict(_row("fp32", 256, 1e-3), bytes_moved=3 * 256**2 * 4, gbps=1.0)}
    add = {
        "dtype": "fp32",
        "numel": 2**24,
        "flops": 2**24,
        "bytes_moved": 3 * 2**26,
        "tflops": 2**24 / 0.02 / 1e12,
        "gbps": 3 * 2**26 / 0.02 / 1e9,
    }
    c = roofline_ceilings(None, best, [add], cache_bytes=2**20)
    assert (
        c["compute"]["fp32"] == best["fp32"]["tflops"] and c["bandwidth"] == add["gbps"]
    )
    rows = roofline_rows(
        [("add fp32", add, "fp32"), ("matmul fp32", best["fp32"], "fp32")], c
    )
    assert rows[0]["bound"] == "memory" and rows[0]["fraction"] == pytest.approx(1.0)
    assert rows[1]["bound"] == "compute" and rows[1]["fraction"] == pytest.approx(1.0)
    assert "adds left of it" in roofline_verdict(rows, c)
    # a busy machine slowed the fp32 matmul below the add: the roof is raised to the add
    slow = {"fp32": dict(best["fp32"], tflops=add["tflops"] / 10)}
    c = roofline_ceilings(None, slow, [add], cache_bytes=2**20)
    assert c["compute"]["fp32"] == add["tflops"] and "raised" in c["kind"]
    rows = roofline_rows([("add fp32", add, "fp32")], c)
    assert rows[0]["fraction"] == pytest.approx(1.0)
    h100 = load_devices()["h100-sxm"]
    pub = roofline_ceilings(h100, best, [add], 2**20)
    assert pub["compute"]["fp32"] == h100.fp32_tflops and pub["bandwidth"] == 3350


def test_records_verdict_and_table(tmp_path):
    from ampbook.bench.matmul import records_table, records_verdict
    from ampbook.core.devices import load_devices

    assert records_verdict([], tmp_path).startswith("no GPU results committed")
    assert "under data/results/" in records_verdict([])
    rec = {
        "file": "tensor_cores_h100.json",
        "device_key": "h100-sxm",
        "environment": {"device_name": "NVIDIA H100 80GB HBM3"},
        "matmul": [_row("fp16", 4096, 0.5e-3), _row("fp16", 8192, 2e-3)],
    }
    rec["environment"]["device"] = "cuda:0"
    rows = records_table([rec], load_devices())
    assert len(rows) == 1 and rows[0][:3] == ["H100 SXM", "fp16", 8192]
    assert rows[0][5] == pytest.approx(rows[0][3] / 989.4)
    assert "1 committed result file, from the H100 SXM." == records_verdict([rec])


# ---- where mixed precision pays: convolutions beside matmuls -------------------------


def test_conv_sweep_times_forward_and_training_pass_and_skips_slow_dtypes():
    from ampbook.bench.matmul import conv_sweep

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
    from ampbook.bench import matmul as bm

    calls = []

    def fake_single(shape, kernel, dtype, dev, backward):
        calls.append((tuple(shape), dtype, backward))
        per_pixel = 1e-8 * (600 if dtype == "bf16" else 1) * (3 if backward else 1)
        return per_pixel * bm._conv_work(shape)

    monkeypatch.setattr(bm, "_single_call_s", fake_single)
    shape, line = bm.fit_conv_shape([8, 4, 128, 256], ["fp32", "bf16"], "cpu", 3, 0.2)
    # full: 262144 pixels, fp32 forward 2.6 ms; bf16 training 600 x 3 x that = 4.7 s
    assert shape[0] == 1 and shape[1] == 4
    assert bm._conv_work(shape) <= 0.2 / 4.72 * 8 * 128 * 256
    # and no smaller than needed
    assert bm._conv_work(shape) > 0.2 / 4.72 * 8 * 128 * 256 / 2
    assert "not 8x4x128x256" in line and "bf16 training pass" in line
    assert "about 4.72 s" in line and "1.8e+03x fp32's forward" in line
    probe = bm._shrink_conv([8, 4, 128, 256], bm.CONV_PROBE_WORK)
    assert bm._conv_work(probe) <= bm.CONV_PROBE_WORK * 8 * 128 * 256
    assert calls[-1] == ((8, 4, 128, 256), "fp32", False)  # fp32 alone at full size
    assert all(c[0] == probe for c in calls[:-1])
    # a convolution every dtype runs fast enough stays as it is
    fast, none = bm.fit_conv_shape([8, 4, 128, 256], ["fp32"], "cpu", 3, 10.0)
    assert fast == (8, 4, 128, 256) and none is None
    # sides never go below 8, however slow
    tiny, _ = bm.fit_conv_shape([2, 4, 16, 16], ["fp32", "bf16"], "cpu", 3, 1e-12)
    assert tiny == (1, 4, 8, 8)


def _conv(kind, dtype, median_s):
    return {"kind": kind, "dtype": dtype, "median_s": median_s}


def test_op_speeds_and_amp_op_verdict_both_ways():
    from ampbook.bench.matmul import amp_op_verdict, op_speeds

    mm = [_row("fp32", 256, 1e-3), _row("bf16", 256, 0.3e-3), _row("fp16", 256, 2e-3)]
    conv = [
        _conv("conv", "fp32", 1e-3),
        _conv("conv", "bf16", 0.5e-3),
        _conv("conv_train", "fp32", 3e-3),
        _conv("conv_train", "bf16", 2e-3),
        _conv("conv", "fp16", 4e-3),
    ]
    n, ratios = op_speeds(mm, conv)
    assert n == 256
    assert ratios["bf16"] == pytest.approx(
        {"matmul": 1e-3 / 0.3e-3, "conv": 2.0, "conv_train": 1.5}
    )
    assert ratios["fp16"] == pytest.approx({"matmul": 0.5, "conv": 0.25})
    # an AMX-like CPU: bf16 faster on every op, fp16 slower
    line = amp_op_verdict(ratios, "cpu")
    assert (
        "bf16 ran matmuls 3.33x" in line and "(faster)" in line and "(slower)" in line
    )
    assert "Autocast's bf16 can pay here" in line
    # faster operators do not make a faster step (issue 28, U8: the CPU ladder's
    # amp-bf16 step took 44.2 ms against fp32's 28.2 at rung 0): the line says so
    assert "a whole step can still gain less or lose" in line
    # a CPU whose 16-bit kernels are slow: autocast costs time
    slow = {"bf16": {"matmul": 0.01, "conv": 0.02, "conv_train": 0.05}}
    line = amp_op_verdict(slow, "cpu")
    assert "Autocast's bf16 costs time here" in line
    assert "does not pay on this cpu" in line and "busy" not in line
    # on CUDA autocast's dtype is fp16; a mixed result names no winner
    mixed = {"fp16": {"matmul": 4.0, "conv": 0.8}}
    assert "only a whole step says which wins" in amp_op_verdict(mixed, "cuda")
    # timings from a busy machine carry a warning
    busy = {"load1": 9.0, "cpus": 2, "busy": True}
    assert "busy machine (load average 9.0 on 2 CPUs)" in amp_op_verdict(
        slow, "cpu", busy
    )
    assert amp_op_verdict({}, "cpu").startswith("no 16-bit dtype")


def test_read_from_counts_the_rotated_input_sets():
    from ampbook.bench.matmul import read_from

    row = {"dtype": "fp32", "numel": 2**20, "bytes_moved": 12 * 2**20, "buffers": 1}
    assert read_from(row, 8 * 2**20) == "cache"  # 12 MiB against 2 x 8 MiB
    assert read_from(dict(row, buffers=2), 8 * 2**20) == "memory"
    assert read_from({"dtype": "fp16", "numel": 2**20}, 2**20) == "memory"


def test_sweep_provenance_and_summary_of_the_committed_h200_sweep():
    from ampbook import results
    from ampbook.bench.matmul import (
        best_per_dtype,
        record_device,
        sweep_provenance,
        sweep_summary,
    )
    from ampbook.core.devices import load_devices

    sweeps = results.load_results_dir().matmul_sweeps
    h200 = next(s.record for s in sweeps if s.record["device_key"] == "h200-sxm")
    line = sweep_provenance(h200)
    assert line.startswith(f"{record_device(h200)} · {h200['created'][:10]} · torch")
    sizes = sorted({r["n"] for r in h200["matmul"]})
    assert f"matmul sizes n = {sizes[0]}-{sizes[-1]}" in line
    text = sweep_summary(h200, load_devices())
    peak = load_devices()["h200-sxm"].fp16_tflops_fp32acc
    fp16 = best_per_dtype(h200["matmul"])["fp16"]
    assert f"fp16 {fp16['tflops']:.4g} TFLOP/s at n = {fp16['n']}" in text
    assert f"({fp16['tflops'] / peak:.0%} of its peak" in text
    assert "A size one off a multiple of 8 ran up to" in text


def test_sweep_summary_of_a_gpu_outside_the_peak_table():
    from pathlib import Path

    from ampbook import results
    from ampbook.bench.matmul import sweep_summary
    from ampbook.core.devices import load_devices

    # the fixtures' path, not _chapters' (importing the runner costs seconds)
    fixtures = Path(__file__).parent / "fixtures" / "results"
    (fixture,) = results.load_results_dir(fixtures).matmul_sweeps
    text = sweep_summary(fixture.record, load_devices())
    assert "not in the peak table" in text and "of its peak" not in text
    assert "x fp32)" in text


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
    from ampbook.bench.matmul import build_parser

    for action in build_parser()._actions:
        assert action.help, action.option_strings
