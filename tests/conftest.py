"""Shared fixtures. The notebooks are executed once per test session (smoke profile, through
the same runner `make book` uses) and the book is built once from those executions."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def executed_notebooks(tmp_path_factory) -> Path:
    from ampbook.run import run_notebooks

    out = tmp_path_factory.mktemp("executed")
    run_notebooks(None, profile="smoke", out_dir=out)
    return out


@pytest.fixture(scope="session")
def built_book(executed_notebooks, tmp_path_factory) -> Path:
    from ampbook.book import build

    out = tmp_path_factory.mktemp("book")
    index = build(executed_notebooks, out)
    return index.parent
