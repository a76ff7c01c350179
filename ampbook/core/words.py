"""Words a user reads: a count with its noun in the right number, a device as a
file-name piece.

Only the standard library: commands import it before torch.
"""

from __future__ import annotations

import re


def plural(n: int | float, word: str, many: str | None = None) -> str:
    """``n`` and ``word``, singular for exactly 1 and plural otherwise: "1 epoch",
    "4 epochs", "0 problems". ``many`` is the plural where adding "s" is wrong
    ("batch", "batches"). Integers are written with thousands separators
    ("1,200 images")."""
    form = word if n == 1 else (many if many is not None else f"{word}s")
    number = f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else f"{n:g}"
    return f"{number} {form}"


def slug(device_name: str) -> str:
    """A file-name piece for a device: ``NVIDIA H200`` -> ``h200``."""
    s = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    s = re.sub(r"^(nvidia-)?(geforce-)?", "", s)
    return s or "device"
