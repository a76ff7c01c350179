"""How a number the book prints was obtained: measured (which run), predicted (by which
model, from what), published (the source) or assumed (a model's parameter). A ``Value``
carries its kind and source through arithmetic, glue, tables and verdicts, so a
predicted number cannot be printed as a measurement by accident."""

from __future__ import annotations

import math
import operator
from typing import Iterable

KINDS = ("measured", "predicted", "published", "assumed")
MEASURED, PREDICTED, PUBLISHED, ASSUMED = KINDS
# The words a printed number carries ("" where a provenance line or citation is beside)
MARKERS = {MEASURED: "", PUBLISHED: "", PREDICTED: "predicted", ASSUMED: "assumed"}
# The short marks a table cell carries, explained in a note under the table.
TABLE_MARKS = {PREDICTED: "†", ASSUMED: "‡"}


def _binary(fn, reflected: bool = False):
    """An arithmetic method of ``Value`` (``reflected``: ``other`` on the left)."""
    if reflected:
        return lambda self, other: self._op(other, lambda a, b: fn(b, a))
    return lambda self, other: self._op(other, fn)


class Value(float):
    """A float with ``kind``, ``source`` (the run, the model and its inputs, the
    citation), format ``fmt``, ``unit`` and display ``scale`` (s stored, ms shown)."""

    __slots__ = ("kind", "source", "fmt", "unit", "scale")

    def __new__(
        cls,
        x: float,
        kind: str,
        source: str,
        fmt: str = ".3g",
        unit: str = "",
        scale: float = 1.0,
    ):
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not str(source).strip():
            raise ValueError("a Value needs a source: which run, model or citation")
        self = super().__new__(cls, x)
        self.kind, self.source = kind, str(source)
        self.fmt, self.unit, self.scale = fmt, unit, scale
        return self

    def __reduce__(self):
        return (Value, (float(self), *(getattr(self, k) for k in self.__slots__)))

    @property
    def is_measured(self) -> bool:
        return self.kind == MEASURED

    @property
    def marker(self) -> str:
        return MARKERS[self.kind]

    def number(self, spec: str = "", unit: bool = True) -> str:
        """The number alone, formatted (``spec`` or ``fmt``) and scaled, with its unit
        unless ``unit`` is false (a table's header names it); no marker."""
        x = format(float(self) * self.scale, spec or self.fmt)
        return x if (spec or self.fmt).endswith("%") or not unit else x + self.unit

    def text(self, spec: str = "") -> str:
        """The number, its unit and its marker: ``"30.7 ms (predicted)"``."""
        out = self.number(spec)
        return f"{out} ({self.marker})" if self.marker else out

    def __format__(self, spec: str) -> str:
        return self.text(spec)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"Value({float(self)!r}, {self.kind!r}, {self.source!r})"

    def with_(self, **changes) -> "Value":
        """A copy with some of its slots changed."""
        now = {k: getattr(self, k) for k in self.__slots__}
        return Value(float(self), **(now | changes))

    # arithmetic keeps the kind: a number computed from a prediction is a prediction
    def _op(self, other, fn) -> "Value":
        result = fn(float(self), float(other))
        if not isinstance(result, float) or math.isnan(result):
            return result
        return Value(result, *combine(self, other))

    __add__ = _binary(operator.add)
    __radd__ = _binary(operator.add, reflected=True)
    __sub__ = _binary(operator.sub)
    __rsub__ = _binary(operator.sub, reflected=True)
    __mul__ = _binary(operator.mul)
    __rmul__ = _binary(operator.mul, reflected=True)
    __truediv__ = _binary(operator.truediv)
    __rtruediv__ = _binary(operator.truediv, reflected=True)

    def __neg__(self):
        return self.with_() * -1.0


def combine(*values) -> tuple[str, str]:
    """The kind and source of a number computed from ``values``: a predicted or assumed
    input makes a prediction; a measurement beside a published figure stays one."""
    vs = [v for v in values if isinstance(v, Value)]
    kinds = {v.kind for v in vs}
    if len(kinds) == 1:
        kind = kinds.pop()
    else:
        kind = PREDICTED if kinds & {PREDICTED, ASSUMED} else MEASURED
    return kind, "; ".join(dict.fromkeys(v.source for v in vs))


def measured(x: float, source: str, **kw) -> Value:
    return Value(x, MEASURED, source, **kw)


def predicted(x: float, source: str, **kw) -> Value:
    return Value(x, PREDICTED, source, **kw)


def published(x: float, source: str, **kw) -> Value:
    return Value(x, PUBLISHED, source, **kw)


def assumed(x: float, source: str, **kw) -> Value:
    return Value(x, ASSUMED, source, **kw)


def kind_of(x) -> str | None:
    """A Value's kind; None for a plain number (whose kind the caller knows)."""
    return x.kind if isinstance(x, Value) else None


def all_measured(values: Iterable) -> bool:
    """Whether every Value in ``values`` is measured or published (others ignored)."""
    return all(v.kind in (MEASURED, PUBLISHED) for v in values if isinstance(v, Value))


def would(values: Iterable, did: str, would_: str) -> str:
    """A verdict's verb: ``did`` where every input was measured, ``would_`` where one
    was predicted or assumed (``"was faster"`` / ``"would be faster"``)."""
    return did if all_measured(values) else would_


def glue_text(value) -> object:
    """What ``glue_all`` glues: a Value's text, anything else unchanged."""
    return value.text() if isinstance(value, Value) else value
