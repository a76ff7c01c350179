"""Where things are in the repository, and how reference data is read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from ampbook.core.cli import UserError, check_output_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
BOOK_DIR = REPO_ROOT / "book"
DATA_DIR = REPO_ROOT / "data"
REFERENCE_DIR = DATA_DIR / "reference"
RESULTS_DIR = DATA_DIR / "results"
PROFILES_FILE = NOTEBOOKS_DIR / "profiles.yml"


class CacheError(ValueError, UserError):
    """``$AMPBOOK_CACHE`` (or the default cache folder) cannot be used."""


def cache_dir() -> Path:
    """Folder for generated artefacts (synthetic datasets...): ``$AMPBOOK_CACHE`` or
    ``<repo>/build/cache``; ``CacheError`` when it cannot be written."""
    raw = os.environ.get("AMPBOOK_CACHE", "")
    path = Path(raw).expanduser() if raw.strip() else REPO_ROOT / "build" / "cache"
    what = f"AMPBOOK_CACHE={raw}" if raw.strip() else "the cache folder"
    try:
        check_output_dir(path, what)
        path.mkdir(parents=True, exist_ok=True)
    except (UserError, OSError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        how = "point AMPBOOK_CACHE at a writable folder" + (
            " or unset it" if raw.strip() else ""
        )
        raise CacheError(f"{why}; {how}") from None
    return path


def load_reference(name: str) -> Any:
    """``data/reference/<name>.yml``: figures from elsewhere, each with its source."""
    path = REFERENCE_DIR / f"{name}.yml"
    if not path.exists():
        known = sorted(p.stem for p in REFERENCE_DIR.glob("*.yml"))
        raise FileNotFoundError(f"no reference data {name!r} at {path}; known: {known}")
    with path.open() as f:
        return yaml.safe_load(f)
