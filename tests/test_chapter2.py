"""Chapter 2 shows committed GPU sweeps: with ``results_dir`` = the fixtures, the
fictitious GPU's provenance, summary, matmul rates and off-by-one penalties appear on
the page, and the chapter says, measured, where mixed precision pays on this machine."""

from __future__ import annotations

from _chapters import FIXTURES, execute_with_fixtures, output_text

from ampbook import results
from ampbook.bench import matmul as bm
from ampbook.core.devices import load_devices


def test_chapter2_shows_the_fixture_gpu_sweep(tmp_path):
    text = output_text(execute_with_fixtures("2", tmp_path))
    records = [s.record for s in results.load_results_dir(FIXTURES).matmul_sweeps]
    assert len(records) == 1
    assert "1 committed result file, from the Fixture GPU (fictitious)." in text
    assert bm.sweep_provenance(records[0]) in text
    assert bm.sweep_summary(records[0], load_devices()) in text
    table = bm.records_table(records, load_devices())
    assert table
    for _, dtype, n, tflops, _, _ in table:  # one GPU: named above the table
        assert f"| {dtype} | {n} | {tflops:.4g} |" in text
    penalties = bm.shape_penalties(records[0]["shapes"])
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
