"""Chapter 2 shows committed GPU sweeps: with ``results_dir`` = the fixtures, the
fictitious GPU's matmul rates and its off-by-one penalties appear on the page."""

from __future__ import annotations

from _chapters import FIXTURES, execute_with_fixtures, output_text

from ampbook import bench_matmul as bm
from ampbook.devices import load_devices


def test_chapter2_shows_the_fixture_gpu_sweep(tmp_path):
    text = output_text(execute_with_fixtures("2", tmp_path))
    records = bm.load_records(FIXTURES)
    assert len(records) == 1
    assert "1 committed result file(s), from: Fixture GPU (fictitious)." in text
    table = bm.records_table(records, load_devices())
    assert table
    for _, device, dtype, n, tflops, _, _ in table:
        assert f"| {device} | {dtype} | {n} | {tflops:.4g} |" in text
    penalties = bm.shape_penalties(records[0]["shapes"])
    assert penalties
    for p in penalties:
        assert f"| {p['base']} | {p['n']} | {p['slowdown']:.3f} |" in text
