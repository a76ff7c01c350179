"""gpu-wheels.txt (what `make gpu-wheels` carries to the GPU machine) against what the
book imports: every distribution the notebooks, ampbook and the tests import, or the
runner needs, is in the device image (data/reference/device_image_packages.txt) or in
the wheel list, and the list is closed under its packages' requirements."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from ampbook.core.paths import REPO_ROOT
from booktools.gpuwheels import (
    PY312_LINUX,
    RUNNER_MODULES,
    WHEEL_NEVER,
    WHEEL_ROOTS,
)

# Modules that only build or check the HTML book; they never run on the GPU machine.
BOOK_ONLY = {
    "booktools/book.py",
    "booktools/bookcheck.py",
    "booktools/sphinx_scripts.py",
    "booktools/sphinx_book.py",
    # the reader's copies: written by `python -m booktools.run` where the book's
    # packages are installed (it warns and goes on without them), never by gpucheck
    "booktools/reader.py",
    # a real JupyterLab in headless Chromium: the book's packages (playwright)
    "tests/test_jupyterlab.py",
}
# Requirements the list leaves out on purpose (gpu-wheels.txt says why).
LEFT_OUT = set(WHEEL_NEVER)
# Imported only on Python < 3.11 (the device has 3.12): tests/test_environment.py's
# fallback.
OLD_PYTHON_ONLY = {"tomli"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_list(path: Path) -> list[str]:
    return [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def wheels() -> dict[str, str]:
    out = {}
    for line in read_list(REPO_ROOT / "gpu-wheels.txt"):
        name, sep, version = line.partition("==")
        assert sep and version, f"gpu-wheels.txt: {line!r} is not NAME==VERSION"
        assert norm(name) not in out, f"gpu-wheels.txt names {name} twice"
        out[norm(name)] = version
    return out


def image() -> set[str]:
    return {
        norm(n)
        for n in read_list(REPO_ROOT / "data/reference/device_image_packages.txt")
    }


def imported_modules() -> dict[str, set[str]]:
    """Top-level module -> files importing it, over everything that runs on the GPU
    machine."""
    files = [
        p
        for p in sorted((REPO_ROOT / "ampbook").rglob("*.py"))
        if p.relative_to(REPO_ROOT).as_posix() not in BOOK_ONLY
    ]
    files += sorted((REPO_ROOT / "notebooks").glob("*.py")) + [
        p
        for p in sorted((REPO_ROOT / "tests").rglob("*.py"))
        if p.relative_to(REPO_ROOT).as_posix() not in BOOK_ONLY
    ]
    found: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(
                    path.relative_to(REPO_ROOT).as_posix()
                )
    for module in RUNNER_MODULES:
        found.setdefault(module, set()).add("booktools/gpuwheels.py (RUNNER_MODULES)")
    return found


def test_list_and_image_are_well_formed():
    w, img = wheels(), image()
    assert len(w) >= 10 and len(img) > 100
    assert all(norm(r) in w or norm(r) in img for r in WHEEL_ROOTS)
    both = sorted(set(w) & img)
    assert not both, f"in the device image already, drop from gpu-wheels.txt: {both}"
    assert not set(w) & LEFT_OUT


def test_every_import_is_on_the_device_or_carried():
    w, img = wheels(), image()
    dists = md.packages_distributions()
    missing = []
    for module, where in sorted(imported_modules().items()):
        if (
            module in sys.stdlib_module_names
            or module in OLD_PYTHON_ONLY
            or module in ("ampbook", "booktools", "tests", "__future__", "conftest")
        ):
            continue
        local = REPO_ROOT / "tests" / module
        if (
            local.with_suffix(".py").exists()
            or local.is_dir()
            or module == "make_results"
        ):
            continue
        names = dists.get(module)
        assert names, (
            f"{module} (imported by {sorted(where)}) is not installed here: no package"
        )
        if not any(norm(n) in w or norm(n) in img for n in names):
            missing.append(
                f"{module} ({'/'.join(names)}, imported by {', '.join(sorted(where))})"
            )
    assert not missing, (
        "neither in the device image nor in gpu-wheels.txt: " + "; ".join(missing)
    )


def _requirements(name: str, version: str) -> list[str] | None:
    """Requires-Dist of NAME==VERSION: from its wheel in .whl when downloaded, else from
    the
    installed distribution when it is that version; None when neither is at hand."""
    for whl in (REPO_ROOT / ".whl").glob("*.whl"):
        stem = whl.name.split("-")
        if norm(stem[0]) == name and stem[1] == version:
            with zipfile.ZipFile(whl) as z:
                meta = next(
                    n for n in z.namelist() if n.endswith(".dist-info/METADATA")
                )
                return (
                    Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist")
                    or []
                )
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        return None
    return (dist.requires or []) if dist.version == version else None


def test_the_list_is_closed_under_requirements():
    w, img = wheels(), image()
    checked, open_ends = 0, []
    for name, version in w.items():
        reqs = _requirements(name, version)
        if reqs is None:
            continue
        checked += 1
        for text in reqs:
            req = Requirement(text)
            if req.marker and not req.marker.evaluate(PY312_LINUX):
                continue
            n = norm(req.name)
            if n not in w and n not in img and n not in LEFT_OUT:
                open_ends.append(f"{name} needs {req.name}")
            if (
                n in w
                and req.specifier
                and not req.specifier.contains(w[n], prereleases=True)
            ):
                open_ends.append(f"{name} needs {req}, the list has {w[n]}")
    if checked == 0:
        pytest.skip("none of the listed versions is installed or downloaded here")
    assert not open_ends, "gpu-wheels.txt misses requirements: " + "; ".join(open_ends)
