"""pyproject.toml and environment.yml declare the same dependencies, with ranges that
admit the torch/torchvision these machines install from local files."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject_requirements() -> dict[str, Requirement]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {_norm(r.name): r for r in map(Requirement, data["project"]["dependencies"])}


def conda_requirements() -> dict[str, Requirement]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = [d for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip) == 1, "environment.yml needs exactly one pip: section"
    return {_norm(r.name): r for r in map(Requirement, pip[0]["pip"])}


def test_pyproject_and_environment_yml_agree():
    py, conda = pyproject_requirements(), conda_requirements()
    assert sorted(py) == sorted(conda), (
        f"only in pyproject.toml: {sorted(set(py) - set(conda))}; "
        f"only in environment.yml: {sorted(set(conda) - set(py))}"
    )
    differ = {
        n: (str(py[n].specifier), str(conda[n].specifier))
        for n in py
        if py[n].specifier != conda[n].specifier
    }
    assert not differ, f"version ranges differ (pyproject, environment.yml): {differ}"


def test_environment_yml_python_matches_requires_python():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    python = next(
        d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")
    )
    version = Version(python.split("=")[-1])
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "requires-python"
    ]
    from packaging.specifiers import SpecifierSet

    assert version in SpecifierSet(requires)


def test_ranges_admit_the_local_torch_build():
    py = pyproject_requirements()
    assert py["torch"].specifier.contains("2.14.1")
    assert py["torchvision"].specifier.contains("0.29.1")
    assert not py["jupyter-book"].specifier.contains("2.0.0"), (
        "Jupyter Book 2 cannot build offline"
    )


def test_installed_versions_satisfy_the_ranges():
    from importlib import metadata

    bad = {}
    for name, req in pyproject_requirements().items():
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            bad[name] = "not installed"
            continue
        if not req.specifier.contains(
            Version(version).base_version if "+" in version else version,
            prereleases=True,
        ):
            bad[name] = version
    assert not bad, f"installed packages outside the declared ranges: {bad}"


def test_validating_a_notebook_builds_no_iri_parser():
    """Each chapter's kernel (through myst-nb's glue), the runner and jupyter-book
    import nbformat, and so jsonschema. jsonschema 4.25 and later import
    rfc3987-syntax, which builds an Earley parser as it is imported (1.35 s a process
    here); the pin keeps it out."""
    import subprocess

    code = (
        "import sys, nbformat; nbformat.validate(nbformat.v4.new_notebook()); "
        "print('rfc3987_syntax' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False", done.stderr
