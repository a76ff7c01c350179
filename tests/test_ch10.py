"""The Findings chapter's GPU part (ampbook.chapters.ch10) says what the results
folder holds, and only that."""

from __future__ import annotations

import shutil

import pytest

from ampbook.chapters.ch3 import pace, wait_direction
from ampbook.chapters.ch10 import gpu_findings, in_short
from ampbook.core.paths import RESULTS_DIR
from ampbook.results import load_results_dir

RESULTS = RESULTS_DIR


def test_pace_words_a_ratio_against_its_epochs():
    assert pace([1.05, 1.01, 1.2]) == "faster"
    assert pace([0.89, 0.95]) == "slower"
    assert pace([1.1, 0.98]) == "within the epoch-to-epoch spread"


def test_an_empty_folder_has_no_gpu_findings(tmp_path):
    text = gpu_findings(load_results_dir(tmp_path))
    assert "no complete GPU training run" in text
    assert "|" not in text


def test_committed_h200_runs_are_read_with_their_numbers():
    rs = load_results_dir(RESULTS)
    runs = rs.gpu_runs()
    if not runs:
        pytest.skip("no GPU runs committed")
    text = gpu_findings(rs)
    for r in runs:
        assert f"| {r.mode_label} | {r.one_step_s * 1e3:.1f} |" in text
    for p in rs.pairs():
        sentence = next(
            line
            for line in text.splitlines()
            if line.startswith(f"- {p.amp.mode_label} against {p.baseline.mode_label}:")
        )
        step, epoch = p.step_speedups, p.epoch_speedups
        assert (
            f"the step in the loop {min(step):.2f}-{max(step):.2f}x over epochs "
            in sentence
        )
        assert f"({pace(step)})" in sentence
        assert f"the epoch {min(epoch):.2f}-{max(epoch):.2f}x over epochs" in sentence
        assert f"({pace(epoch)})" in sentence
        assert ("the epoch ratio measures the loader" in sentence) == p.loader_bound
        assert ("noise" in sentence) == (p.loader_bound and wait_direction(p) is None)


def test_a_run_without_its_baseline_gets_a_table_row_and_no_comparison(tmp_path):
    amp = sorted(RESULTS.glob("train_*amp-fp16*.json"))
    if not amp:
        pytest.skip("no committed AMP run")
    shutil.copy(amp[0], tmp_path)
    text = gpu_findings(load_results_dir(tmp_path))
    assert "amp-fp16" in text and " against " not in text


def test_in_short_quotes_the_fp16_pair_against_tf32_and_strict_fp32():
    rs = load_results_dir(RESULTS)
    pairs = {(p.amp.mode, p.baseline.mode): p for p in rs.pairs()}
    if ("amp-fp16", "fp32-tf32") not in pairs or ("amp-fp16", "fp32") not in pairs:
        pytest.skip("the committed runs lack fp16 against both fp32 baselines")
    main, strict = pairs["amp-fp16", "fp32-tf32"], pairs["amp-fp16", "fp32"]
    text = in_short(rs)
    base, amp = next(
        (b, a)
        for b, a in rs.profile_pairs()
        if (a.mode, b.mode) == ("amp-fp16", "fp32-tf32")
    )
    alone = base.step_s / amp.step_s
    assert "AMP's step against TF32's: timed alone " in text
    assert f"step against TF32's: timed alone {alone:.2f}x" in text
    lo, hi = min(main.step_speedups), max(main.step_speedups)
    assert f", in the loop {lo:.2f}-{hi:.2f}x" in text
    assert "strict" not in text and strict  # strict fp32: the Findings chapter's
    lo, hi = min(main.epoch_speedups), max(main.epoch_speedups)
    assert f"the book's epochs {lo:.2f}-{hi:.2f}x" in text
    wait = max(main.amp.data_wait_share, main.baseline.data_wait_share)
    said = f"{wait:.0%} of each waiting for data (our loader)"
    assert (said in text) == main.loader_bound
    assert "{" not in text and "|" not in text  # plain text, pasted into the intro
    assert not text.endswith(".")  # the intro's bullet ends there
    # read at a glance in the intro's box: three lines of about 85 characters
    assert len(text) <= 250 * len({p.setting.device_name for p in rs.pairs()})


def test_in_short_without_pairs_says_so(tmp_path):
    amp = sorted(RESULTS.glob("train_*amp-fp16*.json"))
    if amp:
        shutil.copy(amp[0], tmp_path)  # a run alone pairs with nothing
    assert in_short(load_results_dir(tmp_path)) == (
        "No GPU runs to compare are committed with this copy of the book"
    )


def test_the_erfnet_authors_defaults_are_named_only_where_the_setting_is_theirs():
    """Issue 28, C5: the H200 runs' setting (1024x512, batch 6, 4 workers, NCHW) is
    "the ERFNet authors' defaults"; any other setting has no such name (the post's
    likely setting is chapter 5's batch 12 at 512x256)."""
    from ampbook.chapters.ch3 import AUTHORS_DEFAULTS, setting_name
    from ampbook.results import Setting

    theirs = Setting("NVIDIA H200", 512, 1024, 6, False, 4, 144, True)
    assert setting_name(theirs) == AUTHORS_DEFAULTS
    for other in (
        Setting("NVIDIA H200", 256, 512, 12, False, 4, 144, True),
        Setting("NVIDIA H200", 512, 1024, 6, True, 4, 144, True),
        Setting("NVIDIA H200", 512, 1024, 6, False, 12, 144, True),
    ):
        assert setting_name(other) is None
