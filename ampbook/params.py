"""Checks for a notebook's parameters, run right after the parameters cell.

A profile or ``-p NAME VALUE`` can hand a notebook any value; a bad one should stop the run at
once with a message that names the parameter and the rule, not deep inside a measurement::

    from ampbook import params
    params.integer("n_samples", n_samples, minimum=1000)
    params.integers("matmul_sizes", matmul_sizes, minimum=1, count=2, why="the fit needs two")
    params.number("min_time", min_time, above=0)
    params.choice("precision", precision, ["fp32", "amp-fp16", "amp-bf16"])

Each check returns the value (lists come back as lists of int) and raises
``ParameterError`` (a ``ValueError``) with one line such as
``parameter matmul_sizes = [64]: needs at least 2 sizes (the fit needs two)``.
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Sequence

import torch


class ParameterError(ValueError):
    """A notebook parameter breaks its rule; the message names both."""


def fail(name: str, value: Any, rule: str, why: str = "") -> None:
    """Raise the one-line error for parameter ``name``."""
    raise ParameterError(f"parameter {name} = {value!r}: {rule}" + (f" ({why})" if why else ""))


def rule(name: str, value: Any, ok: bool, text: str, why: str = "") -> Any:
    """Any rule: ``ok`` says whether it holds, ``text`` states it ("must be ...")."""
    if not ok:
        fail(name, value, text, why)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _bounds(minimum, maximum, above) -> str:
    parts = []
    if above is not None:
        parts.append(f"> {above:g}")
    if minimum is not None:
        parts.append(f">= {minimum:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    return " and ".join(parts)


def _in_bounds(value, minimum, maximum, above) -> bool:
    return ((minimum is None or value >= minimum) and (maximum is None or value <= maximum)
            and (above is None or value > above))


def integer(name: str, value: Any, minimum: int | None = None, maximum: int | None = None,
            why: str = "") -> int:
    """An integer (not a bool) within the bounds given."""
    bounds = _bounds(minimum, maximum, None)
    text = "must be an integer" + (f" {bounds}" if bounds else "")
    if not _is_int(value) or not _in_bounds(value, minimum, maximum, None):
        fail(name, value, text, why)
    return int(value)


def number(name: str, value: Any, minimum: float | None = None, maximum: float | None = None,
           above: float | None = None, why: str = "") -> float:
    """A real number within the bounds given (``above``: strictly greater)."""
    bounds = _bounds(minimum, maximum, above)
    text = "must be a number" + (f" {bounds}" if bounds else "")
    if not _is_number(value) or value != value or not _in_bounds(value, minimum, maximum, above):
        fail(name, value, text, why)
    return float(value)


def integers(name: str, value: Any, minimum: int | None = None, maximum: int | None = None,
             count: int = 1, multiple_of: int | None = None, why: str = "") -> list[int]:
    """A list of at least ``count`` distinct integers, each within the bounds (and a
    multiple of ``multiple_of`` when given)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        fail(name, value, "must be a list of integers", why)
    items = list(value)
    bounds = _bounds(minimum, maximum, None)
    for item in items:
        if not _is_int(item) or not _in_bounds(item, minimum, maximum, None):
            fail(name, value, "every item must be an integer" + (f" {bounds}" if bounds else "")
                 + f"; {item!r} is not", why)
        if multiple_of and item % multiple_of:
            fail(name, value, f"every item must be a multiple of {multiple_of}; {item} is not",
                 why)
    if len(set(items)) < count:
        fail(name, value, f"needs at least {count} distinct value{'s' if count > 1 else ''}",
             why)
    return [int(i) for i in items]


def choice(name: str, value: Any, choices: Sequence, why: str = "") -> Any:
    """One of ``choices``."""
    if value not in choices:
        fail(name, value, "must be one of " + ", ".join(repr(c) for c in choices), why)
    return value


def device(name: str, value: Any) -> Any:
    """``"auto"``, a torch device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``) or a
    ``torch.device``. Whether the machine has it is ``ampbook.env.pick_device``'s check."""
    if isinstance(value, torch.device) or value == "auto":
        return value
    try:
        torch.device(value)
    except (RuntimeError, TypeError):
        fail(name, value, "must be 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return value
