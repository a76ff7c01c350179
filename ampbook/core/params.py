"""Checks for a notebook's parameters, run right after the parameters cell: a bad value
stops the run at once with one line naming the parameter and the rule; each check
returns the value."""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from ampbook.core.args import SEED_MAX
from ampbook.core.devices import gpu_key
from ampbook.core.errors import UserError
from ampbook.core.files import check_output_dir, check_output_file
from ampbook.core.words import plural


class ParameterError(ValueError, UserError):
    """A notebook parameter breaks its rule; the message names both."""


def fail(name: str, value: Any, rule: str, why: str = "") -> None:
    raise ParameterError(
        f"parameter {name} = {value!r}: {rule}" + (f" ({why})" if why else "")
    )


def rule(
    name: str, value: Any, ok: bool | Callable[[Any], bool], text: str, why: str = ""
) -> Any:
    """Any rule: ``ok`` says whether it holds, or is a test of ``value`` (one that
    raises on a value of the wrong type counts as broken); ``text`` states it."""
    if callable(ok):
        try:
            ok = bool(ok(value))
        except Exception:  # noqa: BLE001 -- a wrong type breaks the rule
            ok = False
    if not ok:
        fail(name, value, text, why)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _bounds(minimum, maximum, above) -> str:
    bounds = ((">", above), (">=", minimum), ("<=", maximum))
    text = " and ".join(f"{op} {x:g}" for op, x in bounds if x is not None)
    return f" {text}" if text else ""


def _in_bounds(value, minimum, maximum, above) -> bool:
    return (
        (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
        and (above is None or value > above)
    )


def integer(
    name: str,
    value: Any,
    minimum: int | None = None,
    maximum: int | None = None,
    why: str = "",
) -> int:
    if not _is_int(value) or not _in_bounds(value, minimum, maximum, None):
        fail(name, value, "must be an integer" + _bounds(minimum, maximum, None), why)
    return int(value)


def number(
    name: str,
    value: Any,
    minimum: float | None = None,
    above: float | None = None,
    why: str = "",
) -> float:
    """A finite real number within the bounds given (``above``: strictly greater)."""
    real = _is_number(value) and value == value  # not NaN
    finite = real and math.isfinite(value)
    if not finite or not _in_bounds(value, minimum, None, above):
        text = f"must be a {'finite ' if real and not finite else ''}number"
        fail(name, value, text + _bounds(minimum, None, above), why)
    return float(value)


def integers(
    name: str,
    value: Any,
    minimum: int | None = None,
    maximum: int | None = None,
    count: int = 1,
    multiple_of: int | None = None,
    why: str = "",
) -> list[int]:
    """A list of at least ``count`` distinct integers, each within the bounds (and a
    multiple of ``multiple_of`` when given)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        fail(name, value, "must be a list of integers", why)
    items = list(value)
    for item in items:
        if not _is_int(item) or not _in_bounds(item, minimum, maximum, None):
            rule = f"every item must be an integer{_bounds(minimum, maximum, None)}"
            fail(name, value, f"{rule}; {item!r} is not", why)
        if multiple_of and item % multiple_of:
            rule = f"every item must be a multiple of {multiple_of}; {item} is not"
            fail(name, value, rule, why)
    if len(set(items)) < count:
        fail(name, value, f"needs at least {plural(count, 'distinct value')}", why)
    return [int(i) for i in items]


def choice(name: str, value: Any, choices: Sequence, why: str = "") -> Any:
    if value not in choices:
        fail(name, value, "must be one of " + ", ".join(repr(c) for c in choices), why)
    return value


def device(name: str, value: Any) -> Any:
    """``"auto"``, a torch device string (``"cuda:1"``) or a ``torch.device``; whether
    the machine has it is ``pick_device``'s check."""
    if value == "auto":
        return value
    try:
        ok = torch.device(value).type in ("cpu", "cuda")  # torch knows mps, meta...
    except (RuntimeError, TypeError):
        ok = False
    if not ok:
        fail(name, value, "must be 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return value


def gpu(name: str, value: Any) -> str:
    """The device table's key for a GPU's key, short name or alias (``gpu_key``)."""
    try:
        return gpu_key(value)
    except ValueError as err:
        why = str(err)
    fail(name, value, why)  # raises


def seed(name: str, value: Any) -> int:
    return integer(name, value, minimum=0, maximum=SEED_MAX, why="numpy's seeds")


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        fail(name, value, "must be True or False")
    return value


def shape(name: str, value: Any, length: int = 3, why: str = "") -> list[int]:
    """A list of ``length`` positive integers (an input's C, H, W...)."""
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == length
        and all(_is_int(v) and v > 0 for v in value)
    )
    if not ok:
        fail(name, value, f"must be a list of {length} positive integers", why)
    return [int(v) for v in value]


def _no_path(name: str, value: Any, kind: str, empty: str) -> bool:
    """Whether ``value`` is empty (None or ""); a value that is no path fails."""
    if value is None or value == "":
        return True
    if not isinstance(value, (str, Path)):
        fail(name, value, f"must be a {kind}'s path (or empty for {empty})")
    return False


def folder(name: str, value: Any, empty: str = "the default") -> Any:
    """A folder to read that exists, or None / "" for ``empty``."""
    if _no_path(name, value, "folder", empty):
        return value
    if not Path(value).expanduser().is_dir():
        fail(name, value, f"must be an existing folder (or empty for {empty})")
    return value


def output(name: str, value: Any, kind: str = "file") -> Any:
    """A file (``kind="file"``) or folder the notebook will write, or None / "" for
    none, checked before any work as a command's outputs are."""
    if _no_path(name, value, kind, "none"):
        return value
    try:
        if kind == "file":
            # a notebook's own output: its next run writes it again
            check_output_file(
                value, f"parameter {name}", create_parents=True, overwrite=True
            )
        else:
            check_output_dir(value, f"parameter {name}")
    except UserError as err:
        raise ParameterError(str(err)) from None
    return value


def floats(
    name: str, value: Any, above: float | None = 0, why: str = ""
) -> list[float]:
    """A non-empty list of finite numbers, each above ``above``."""
    items = value if isinstance(value, (list, tuple)) else []
    if not items or not all(
        _is_number(v) and math.isfinite(v) and _in_bounds(v, None, None, above)
        for v in items
    ):
        rule = "must be a list of at least 1 finite number"
        fail(name, value, rule + _bounds(None, None, above), why)
    return [float(v) for v in items]
