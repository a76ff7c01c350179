"""booktools.bench_step (``python -m booktools.bench_step``): the sections for
the runner's optimisations, what they measure and return (no timing is asserted)."""

import pytest

from booktools.bench_step import (
    SYNC_EVERY,
    main,
    measure_data_cache,
    measure_optimizers,
    measure_options,
)


def test_options_are_timed_against_the_same_runner_and_together():
    m = measure_options(
        "fp32",
        "cpu",
        16,
        32,
        1,
        options=("fused_optimizer", "sync_every", "cudnn_benchmark"),
        rounds=1,
        block=1,
    )
    assert set(m["step_s"]) == {"runner", "fused_optimizer", "sync_every", "all"}
    assert m["skipped"] == {"cudnn_benchmark": "no effect on a CPU"}
    assert all(len(t) == 1 for t in m["times_s"].values())
    for name, ratios in m["speedup_range"].items():
        lo, hi = ratios
        assert lo <= m["speedup"][name] <= hi and lo > 0
    assert m["sync_every"] == SYNC_EVERY
    with pytest.raises(ValueError, match="unknown option"):
        measure_options("fp32", "cpu", 16, 32, 1, options=("turbo",))


def test_optimizer_and_data_cache_sections_return_their_numbers():
    o = measure_optimizers("cpu", rounds=1, steps=1)
    assert set(o["step_s"]) == {"fused", "foreach", "for-loop"}
    assert o["fastest"] in o["step_s"] and o["parameters"] > 2_000_000
    d = measure_data_cache(16, 32, 1, images=2, rounds=1)
    assert d["images"] == 2 and d["cache_bytes"] == 2 * 4 * 16 * 32
    assert d["ratio"] == pytest.approx(
        d["images_per_s"]["cache"] / d["images_per_s"]["loader"]
    )


def test_the_command_line_refuses_unknown_options(capsys):
    assert main(["--device", "cpu", "--options", "channels_last,turbo"]) == 2
    assert "--options: unknown turbo" in capsys.readouterr().err


def test_the_command_line_runs_only_the_sections_asked_for(capsys, tmp_path):
    import json

    path = tmp_path / "o.json"
    code = main(
        [
            "--device",
            "cpu",
            "--height",
            "16",
            "--width",
            "32",
            "--batch-size",
            "1",
            "--rounds",
            "1",
            "--block",
            "1",
            "--options",
            "fp16_stream",
            "--option-precisions",
            "fp32",
            "--json",
            str(path),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "3. the runner with one option on (fp32" in out and "fp16_stream" in out
    assert "1. runner step vs bare loop" not in out
    numbers = json.loads(path.read_text())
    assert set(numbers["options"]) == {"fp32"} and "overhead" not in numbers
