"""Where things are in the repository, and how reference data is read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
BOOK_DIR = REPO_ROOT / "book"
DATA_DIR = REPO_ROOT / "data"
REFERENCE_DIR = DATA_DIR / "reference"
RESULTS_DIR = DATA_DIR / "results"
PROFILES_FILE = NOTEBOOKS_DIR / "profiles.yml"


def cache_dir() -> Path:
    """Directory for generated artefacts (synthetic datasets...): ``$AMPBOOK_CACHE`` or
    ``<repo>/build/cache``."""
    path = Path(os.environ.get("AMPBOOK_CACHE", REPO_ROOT / "build" / "cache"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_reference(name: str) -> Any:
    """Load ``data/reference/<name>.yml`` (figures from elsewhere, each with its
    source)."""
    path = REFERENCE_DIR / f"{name}.yml"
    if not path.exists():
        known = sorted(p.stem for p in REFERENCE_DIR.glob("*.yml"))
        raise FileNotFoundError(f"no reference data {name!r} at {path}; known: {known}")
    with path.open() as f:
        return yaml.safe_load(f)
