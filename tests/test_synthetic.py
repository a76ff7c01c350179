"""Synthetic Cityscapes drawn by several processes equals the serial drawing byte for
byte."""

import hashlib
from pathlib import Path

import pytest

from ampbook.segmentation.synthetic import synthesize


def digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_parallel_output_equals_serial_output(tmp_path):
    serial = digests(
        synthesize(
            tmp_path / "serial", train=5, val=2, seed=3, height=48, width=96, workers=1
        )
    )
    assert len([k for k in serial if k.endswith(".png")]) == 14
    for workers in (2, 3):
        parallel = digests(
            synthesize(
                tmp_path / f"p{workers}",
                train=5,
                val=2,
                seed=3,
                height=48,
                width=96,
                workers=workers,
            )
        )
        assert parallel == serial
    other_seed = digests(
        synthesize(
            tmp_path / "seed4", train=5, val=2, seed=4, height=48, width=96, workers=2
        )
    )
    assert other_seed.keys() == serial.keys() and other_seed != serial


def test_workers_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="workers must be at least 1"):
        synthesize(tmp_path, 1, 1, height=32, width=64, workers=0)
