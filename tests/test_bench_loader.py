"""The input-pipeline benchmark, on a tiny set (speed figures come from running it, not
here)."""

import json

import pytest

from ampbook import bench
from ampbook.chapters.ch5.bench_loader import format_table, measure_loader
from ampbook.segmentation.synthetic import synthesize


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory):
    return synthesize(
        tmp_path_factory.mktemp("cs"), train=4, val=0, seed=0, height=64, width=128
    )


def test_measure_loader_reports_rates_and_ratios(tiny_root):
    r = measure_loader(
        tiny_root, height=32, width=64, workers=(0, 1), batch_size=2, passes=2
    )
    assert r["images"] == 4 and r["synthetic"] is True
    assert (r["source_width"], r["source_height"], r["width"], r["height"]) == (
        128,
        64,
        64,
        32,
    )
    assert r["decode_resize_images_per_s"] > 0
    assert [row["workers"] for row in r["results"]] == [0, 1]
    for row in r["results"]:
        assert row["images_per_s"] > 0 and len(row["pass_s"]) == 2
        assert row["images_per_s"] == pytest.approx(4 / row["pass_s"][1])
        assert row["ratio_to_decode_resize"] == pytest.approx(
            row["images_per_s"] / r["decode_resize_images_per_s"]
        )
    assert r["synthesize_s_per_pair"] > 0
    table = format_table(r)
    assert "decode + resize (1 process)" in table and "DataLoader, 1 worker " in table
    json.dumps(r)  # the result is JSON-serialisable


def test_max_images_and_threads(tiny_root):
    import torch

    torch.set_num_threads(2)  # not the one asked for: a failure to restore shows
    before = torch.get_num_threads()
    r = measure_loader(
        tiny_root,
        height=32,
        width=64,
        workers=(0,),
        batch_size=3,
        max_images=3,
        passes=1,
        threads=1,
    )
    assert r["images"] == 3 and r["torch_threads"] == 1
    assert torch.get_num_threads() == before


def test_cli_through_the_bench_dispatcher(tiny_root, tmp_path, capsys):
    out = tmp_path / "loader.json"
    assert (
        bench.main(
            [
                "loader",
                "--root",
                str(tiny_root),
                "--height",
                "32",
                "--width",
                "64",
                "--workers",
                "0",
                "--passes",
                "1",
                "--max-images",
                "2",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    assert "DataLoader, 0 workers" in capsys.readouterr().out
    assert json.loads(out.read_text())["images"] == 2


def test_cli_errors(tmp_path, capsys):
    assert bench.main(["loader", "--root", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert bench.main(["loader", "--workers", "0,x"]) == 2  # one error line, exit 2
    assert "--workers must be" in capsys.readouterr().err
