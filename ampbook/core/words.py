"""Words a user reads: counts, device slugs, the nearest name to a typo (no torch)."""

from __future__ import annotations

import re


def plural(n: int | float, word: str) -> str:
    """``n`` and its noun: "1 epoch", "4 epochs", "1,200 images"."""
    form = word if n == 1 else f"{word}s"
    number = f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else f"{n:g}"
    return f"{number} {form}"


def and_list(items) -> str:
    """Items in a sentence: "a", "a and b", "a, b and c"."""
    items = list(items)
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 2 else items)


def slug(device_name: str) -> str:
    """A file-name piece for a device: ``NVIDIA H200`` -> ``h200``."""
    s = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    s = re.sub(r"^(nvidia-)?(geforce-)?", "", s)
    return s or "device"


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, a swap of neighbours counting one (modle -> model)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            cost = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, prev2[j - 2] + 1)
            row.append(cost)
        prev2, prev = prev, row
    return prev[-1]


def nearest(word: str, choices, n: int = 3) -> list[str]:
    """Up to ``n`` of ``choices`` within an edit distance of about a third of
    ``word``'s length, nearest first, a longer shared beginning first among equals."""
    w = word.lower()
    limit = max(2, len(w) // 3)

    def key(choice: str) -> tuple[int, int, str]:
        c = choice.lower()
        shared = next((k for k, (x, y) in enumerate(zip(w, c)) if x != y), None)
        shared = min(len(w), len(c)) if shared is None else shared
        return edit_distance(w, c), -shared, choice

    ranked = sorted(key(c) for c in choices)
    return [c for d, _, c in ranked if d <= limit][:n]
