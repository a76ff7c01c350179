"""Chapter 6 with smoke parameters against the fictitious GPU's fixture results: the
committed pairs stand in the comparison table, and the verdict ranges use the fixture's
measured kernel efficiencies."""

from __future__ import annotations

from _chapters import FIXTURES, execute_with_fixtures, output_text

from ampbook.doctor import profile_efficiencies
from ampbook.results import load_results_dir


def test_fixture_pairs_and_efficiencies_render(tmp_path):
    text = output_text(execute_with_fixtures("6", tmp_path))
    pairs = [
        q
        for q in load_results_dir(FIXTURES).pairs()
        if q.amp.mode == "amp-fp16" and q.baseline.mode == "fp32-tf32"
    ]
    assert pairs and f"{len(pairs)} committed GPU pairs" in text
    for q in pairs:  # not in the device table: measured beside no prediction
        s = q.setting
        assert f"| {s.device_name} | {s.label} | {q.step_speedup:.2f} | – | – |" in text
    (name,) = profile_efficiencies(FIXTURES)
    assert f"at the kernel efficiencies of ERFNet's layer profiles on {name}" in text
    assert "Traceback" not in text
