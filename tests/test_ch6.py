"""Chapter 6 with smoke parameters against the fictitious GPU's fixture results: the
doctor's own report is shown, the fixture's layer profiles join the references, and the
committed pair stands in the comparison table beside no range (its GPU is not in the
device table)."""

from __future__ import annotations

import pytest
from _chapters import FIXTURES, execute_with_fixtures, output_text

from ampbook.chapters import ch3, ch5
from ampbook.core.devices import display_name
from ampbook.core.words import plural
from ampbook.predict.references import load_published, profile_references
from ampbook.results import load_results_dir


@pytest.mark.slow
def test_chapter6_shows_the_report_references_and_pairs(tmp_path):
    # the book's smoke run already shows ResNet-50's report; this run checks what the
    # fixtures add, and a smaller network is enough for that
    small = "torchvision:mobilenet_v3_small"
    text = output_text(execute_with_fixtures("6", tmp_path, shown_model=small))
    assert "Traceback" not in text
    for title in ("**1. Coverage**", "**3. Roofline per GPU**", "**5. Verdict**"):
        assert title in text
    (profile,) = profile_references(FIXTURES)
    assert f"| ERFNet | {display_name(profile.gpu)} | profile |" in text
    for ref in load_published():
        assert f"| {ref.network} |" in text
    pairs = [
        q
        for q in load_results_dir(FIXTURES).pairs()
        if q.amp.mode == "amp-fp16" and q.baseline.mode == "fp32-tf32"
    ]
    assert pairs and plural(len(pairs), "committed GPU pair") in text
    rs = load_results_dir(FIXTURES)
    for q in pairs:  # not in the device table: measured beside no range
        name = q.setting.device_name.removeprefix("NVIDIA ")
        # both measured speedups, from the sources chapters 3 and 5 quote
        alone = ch5.step_alone(rs, pair=q)
        loop = ch3.spread_text(ch3.step_in_loop(rs, pair=q), epochs=False)
        alone_text = alone.number() if alone else "–"
        assert f"| {name} | {alone_text} | {loop} | – | – |" in text
    assert "rtx3070-desktop" not in text and "e+0" not in text
    # the launch floor's sentence is read off its table, whichever side it falls
    assert "the floor lies above the predicted kernel time" in text or (
        "the floor lies below the predicted kernel time" in text
    )


def test_step_range_verdicts_for_both_cases():
    """Chapter 6's "Then the step": two lines per GPU with a measured step, one line
    saying nothing is scored without one (the prose is written for both)."""
    from ampbook.chapters import ch6

    none = ch6.step_range_verdicts([("H200 SXM", None, None, None, None)])
    assert none.startswith("No committed GPU pair has ERFNet's setting")
    rng, far = {"low": 0.9, "high": 1.1}, {"low": 1.2, "high": 1.5}
    two = ch6.step_range_verdicts([("H200 SXM", 0.99, None, rng, far)]).splitlines()
    assert two == [
        "- H200 SXM, timed alone, own profile (a cross-check): measured AMP step "
        "speedup 0.99x "
        f"against {ch6.span_text(0.9, 1.1)} predicted, inside the range.",
        "- H200 SXM, timed alone, without ERFNet (a prediction): measured AMP step "
        "speedup 0.99x "
        f"against {ch6.span_text(1.2, 1.5)} predicted, below the range.",
    ]


def test_a_calibrated_checklist_row_says_whether_its_network_is_a_reference():
    """ViT-B/16's predicted AMP row rests on other networks' references only (no
    transformer among them): its "from" cell says so; ERFNet's has its own."""
    from ampbook.chapters import ch6
    from ampbook.predict.references import references

    refs = references()
    vit = ch6.checklist_source("calibrated", "torchvision:vit_b_16", refs)
    assert vit == "predicted, calibrated on other networks (no reference of this one)"
    own = ch6.checklist_source("calibrated", "erfnet", refs)
    assert own.endswith("(a reference of this network among them)")
    assert ch6.checklist_source("already on", "erfnet", refs) == "already on"
