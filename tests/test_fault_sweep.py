"""The fault sweep's quick subset (``python -m tests.fault_sweep --quick``): one or two
cases of each class of fault, every one of them clear (the right exit status, one
``error:`` line naming the problem, nothing lost on disk). The whole sweep, about 270
cases, is ``python -m tests.fault_sweep``."""

from __future__ import annotations

import shutil
import signal
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fault_sweep as sweep
import pytest


@pytest.mark.slow
def test_the_quick_sweep_is_clear():
    cases = [c for c in sweep.all_cases() if c.quick]
    assert {c.cls for c in cases} == set(sweep.CLASSES)
    old = signal.getsignal(signal.SIGINT)
    sweep.default_sigint()
    shared = Path(tempfile.mkdtemp(prefix="sweep-shared-"))
    try:
        sweep.prepare(shared, sweep.HERE)
        with ThreadPoolExecutor(2) as pool:
            results = list(
                pool.map(lambda c: sweep.run_case(c, shared, sweep.HERE), cases)
            )
    finally:
        signal.signal(signal.SIGINT, old)
        shutil.rmtree(shared, ignore_errors=True)
    bad = [
        f"{r.case.cls}: {r.case.name}: {r.outcome} (exit {r.code}) {r.why}"
        for r in results
        if r.outcome not in ("clear", "skipped")
    ]
    assert not bad, "\n".join(bad)
    assert sum(r.outcome == "clear" for r in results) >= len(cases) - 3
