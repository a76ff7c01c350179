"""Chapter 2 shows committed GPU sweeps: with ``results_dir`` = the fixtures, the
fictitious GPU's provenance, summary, matmul rates and off-by-one penalties appear on
the page, and the chapter says, measured, where mixed precision pays on this machine."""

from __future__ import annotations

import pytest
from _chapters import FIXTURES, execute_with_fixtures, output_text

from ampbook import results
from ampbook.chapters import ch2
from ampbook.chapters.ch2.bench_sweeps import shape_penalties
from ampbook.core.devices import load_devices


@pytest.mark.slow
def test_chapter2_shows_the_fixture_gpu_sweep(tmp_path):
    text = output_text(execute_with_fixtures("2", tmp_path))
    records = [s.record for s in results.load_results_dir(FIXTURES).matmul_sweeps]
    assert len(records) == 1
    assert "1 committed result file, from the Fixture GPU (fictitious)." in text
    assert ch2.sweep_provenance(records[0]) in text
    assert ch2.sweep_summary(records[0], load_devices()) in text
    table = ch2.records_table(records, load_devices())
    assert table
    for _, dtype, n, tflops, _, _ in table:  # one GPU: named above the table
        assert f"| {dtype} | {n} | {tflops:.4g} |" in text
    penalties = shape_penalties(records[0]["shapes"])
    assert penalties
    for p in penalties:
        assert f"| {p['base']} | {p['n']} | {p['slowdown']:.3f} |" in text
    # where AMP pays here: the measured verdict, never the CPU's flags
    assert "On this cpu, " in text and "bf16 ran matmuls" in text
    assert "the fp32 speed" in text


def _cited(stem: str) -> set[str]:
    import re

    from ampbook.core.paths import NOTEBOOKS_DIR

    text = (NOTEBOOKS_DIR / f"{stem}.py").read_text()
    found = re.findall(r"\{cite:[pt]\}`([^`]+)`", text)
    return {key.strip() for group in found for key in group.split(",")}


def test_chapter2_cites_the_source_of_every_peak_and_every_key_exists():
    import re

    from ampbook.core.paths import BOOK_DIR

    bib = (BOOK_DIR / "references.bib").read_text()
    entries = set(re.findall(r"^@\w+\{([^,\s]+),", bib, flags=re.MULTILINE))
    sources = {s["key"] for d in load_devices().values() for s in d.sources.values()}
    assert sources <= _cited("02_tensor_cores")  # each peak's source is cited
    for stem in ("01_floating_point", "02_tensor_cores", "04_loss_scaling"):
        assert _cited(stem) <= entries, stem  # and every citation has its entry


# ---- summaries and verdicts ----------------------------------------------------------


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
    from ampbook.chapters.ch2 import (
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
    from ampbook.chapters.ch2 import shape_verdict

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


def test_elementwise_verdict():
    from ampbook.chapters.ch2 import elementwise_verdict

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


def test_roofline_ceilings_rows_and_verdict():
    from ampbook.chapters.ch2 import roofline_rows, roofline_verdict
    from ampbook.chapters.ch2.bench_matmul import roofline_ceilings
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
    from ampbook.chapters.ch2 import records_table, records_verdict
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


def _conv(kind, dtype, median_s):
    return {"kind": kind, "dtype": dtype, "median_s": median_s}


def test_op_speeds_and_amp_op_verdict_both_ways():
    from ampbook.chapters.ch2 import amp_op_verdict, op_speeds

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


def test_sweep_provenance_and_summary_of_the_committed_h200_sweep():
    from ampbook import results
    from ampbook.chapters.ch2 import (
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
    from ampbook.chapters.ch2 import sweep_summary
    from ampbook.core.devices import load_devices

    # the fixtures' path, not _chapters' (importing the runner costs seconds)
    fixtures = Path(__file__).parent / "fixtures" / "results"
    (fixture,) = results.load_results_dir(fixtures).matmul_sweeps
    text = sweep_summary(fixture.record, load_devices())
    assert "not in the peak table" in text and "of its peak" not in text
    assert "x fp32)" in text
