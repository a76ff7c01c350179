"""Shared fixtures. The notebooks are executed once per test session (smoke profile,
through the same runner `make book` uses) and the book is built once from those
executions."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def pytest_runtest_setup(item):
    """Tests marked ``cuda`` need a GPU: skipped without one (``pytest -m cuda`` selects
    them; ``python -m booktools.gpucheck`` runs them on a GPU machine)."""
    if item.get_closest_marker("cuda") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


BOOK_FIXTURES = {"executed_notebooks", "built_book"}
EVERY_TEST = {"one_thread_for_shared_fixtures"}  # autouse, below


def shared_fixtures(item) -> set[str]:
    """The module- and session-scoped fixtures of the suite (not pytest's own, such as
    ``tmp_path_factory``) that ``item`` uses: each made once per worker."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs if info else {}
    return {
        name
        for name, d in defs.items()
        if d
        and d[-1].baseid
        and d[-1].scope in ("module", "session")
        and name not in EVERY_TEST  # every test has it: it groups nothing
    }


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test``, ``--dist loadgroup``), a fixture shared by
    several tests is made once: every test that uses the session's smoke execution of
    the book runs on one worker (the notebooks executed once), and the tests of one
    module that share a module-scoped fixture (a measured ladder, an executed chapter,
    a finished run) run together on one worker, not each worker making it again.
    xdist hands out the largest groups first. A test of the book is marked ``slow``."""
    for item in items:
        shared = shared_fixtures(item)
        if BOOK_FIXTURES & shared:  # the smoke execution of every notebook: slow
            item.add_marker(pytest.mark.xdist_group("book"))
            item.add_marker(pytest.mark.slow)
        elif shared:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))


@pytest.fixture(scope="session", autouse=True)
def one_thread_for_shared_fixtures():
    """The module- and session-scoped fixtures (a finished run, a measured ladder) are
    made before ``one_thread`` applies: they run on one intra-op thread too. On two
    threads, beside the other worker, test_train's ``fp32_run`` took 17 s of CPU in
    the suite; on one it takes 2 s."""
    yield from _one_torch_thread()


@pytest.fixture(autouse=True)
def one_thread():
    """Unit tests run torch on one intra-op thread: at the small sizes tests use, two
    threads on a 2-core machine that is doing anything else wait on each other and can
    be many times slower. (Notebook kernels are separate processes: the runner's
    ``threads`` argument sets theirs.)"""
    yield from _one_torch_thread()


def _one_torch_thread():
    """One intra-op thread until the generator is resumed, then torch's as before."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def executed_notebooks(tmp_path_factory) -> Path:
    from booktools.run import run_notebooks

    out = tmp_path_factory.mktemp("executed")
    # One torch thread per kernel: the smoke sizes are tiny, and two threads that wait
    # on each other on a 2-core machine cost several times the work.
    run_notebooks(None, profile="smoke", out_dir=out, threads=1)
    return out


@pytest.fixture(scope="session")
def built_book(executed_notebooks, tmp_path_factory) -> Path:
    from booktools.book import build

    out = tmp_path_factory.mktemp("book")
    index = build(executed_notebooks, out)
    return index.parent
