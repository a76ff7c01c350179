"""How a number the book prints was obtained: measured (which run, where), predicted
(by which model, from what), published (the source) or assumed (a parameter of a
model).

A ``Value`` is a float that carries its kind and its source, so that the kind travels
with the number through arithmetic, glue, tables and verdicts, and rendering a
predicted or assumed number without saying so cannot happen by accident:

    v = predicted(0.0307, "predict_ladder from the H200's layer profiles", unit=" ms",
                  scale=1e3, fmt=".1f")
    f"{v}"            # '30.7 ms (predicted)'
    f"{v:.2f}"        # '30.70 ms (predicted)'
    float(v)          # 0.0307 (arithmetic sees the float itself)
    v / measured(...) # a Value, kind 'predicted'

``ampbook.core.page.glue_all`` glues a Value as its text (so a markdown reference writes
``:s``; a numeric format spec on it fails the book build), ``md_table`` marks its
cells, and the verdict functions word a result over predicted inputs as what *would*
happen (``would``).
"""

from __future__ import annotations

import math
from typing import Iterable

KINDS = ("measured", "predicted", "published", "assumed")
MEASURED, PREDICTED, PUBLISHED, ASSUMED = KINDS
# The words a printed number carries for each kind ("" for a measurement or a cited
# figure, whose provenance line or citation stands beside it).
MARKERS = {MEASURED: "", PUBLISHED: "", PREDICTED: "predicted", ASSUMED: "assumed"}
# The short marks a table cell carries, explained in a note under the table.
TABLE_MARKS = {PREDICTED: "†", ASSUMED: "‡"}


class Value(float):
    """A float with ``kind`` (one of ``KINDS``), ``source`` (text: the run, the model
    and its inputs, the citation, the parameter), a default format spec ``fmt``, a
    ``unit`` appended to the number (with its leading space, e.g. ``" ms"``, or
    ``"x"``) and a display ``scale`` (the number shown is ``float(self) * scale``:
    seconds stored, milliseconds shown)."""

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
        return (
            Value,
            (float(self), self.kind, self.source, self.fmt, self.unit, self.scale),
        )

    @property
    def is_measured(self) -> bool:
        return self.kind == MEASURED

    @property
    def marker(self) -> str:
        return MARKERS[self.kind]

    def number(self, spec: str = "", unit: bool = True) -> str:
        """The number alone, formatted (``spec`` or the Value's own ``fmt``) and
        scaled, with its unit (unless ``unit`` is false: a table's header names it),
        without the marker."""
        spec = spec or self.fmt
        x = float(self) * self.scale
        if spec.endswith("%") or not unit:
            return format(x, spec)
        return format(x, spec) + self.unit

    def text(self, spec: str = "") -> str:
        """The number with its unit and, for a prediction or an assumption, its
        marker: ``"30.7 ms (predicted)"``."""
        out = self.number(spec)
        return f"{out} ({self.marker})" if self.marker else out

    def __format__(self, spec: str) -> str:
        return self.text(spec)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"Value({float(self)!r}, {self.kind!r}, {self.source!r})"

    def with_(self, **changes) -> "Value":
        """A copy with some of ``kind``, ``source``, ``fmt``, ``unit``, ``scale``
        changed."""
        d = {
            "kind": self.kind,
            "source": self.source,
            "fmt": self.fmt,
            "unit": self.unit,
            "scale": self.scale,
        }
        d.update(changes)
        return Value(float(self), **d)

    # arithmetic keeps the kind: a number computed from a prediction is a prediction
    def _op(self, other, fn, unit: str | None = None) -> "Value":
        result = fn(float(self), float(other))
        if not isinstance(result, float) or math.isnan(result):
            return result
        kind, source = combine(self, other)
        return Value(result, kind, source)

    def __add__(self, o):
        return self._op(o, float.__add__)

    def __radd__(self, o):
        return self._op(o, lambda a, b: b + a)

    def __sub__(self, o):
        return self._op(o, float.__sub__)

    def __rsub__(self, o):
        return self._op(o, lambda a, b: b - a)

    def __mul__(self, o):
        return self._op(o, float.__mul__)

    def __rmul__(self, o):
        return self._op(o, lambda a, b: b * a)

    def __truediv__(self, o):
        return self._op(o, float.__truediv__)

    def __rtruediv__(self, o):
        return self._op(o, lambda a, b: b / a)

    def __neg__(self):
        return self.with_() * -1.0


def combine(*values) -> tuple[str, str]:
    """The kind and source of a number computed from ``values`` (plain numbers are
    constants and add nothing): one kind stays that kind; any predicted or assumed
    input makes a prediction; a measurement beside a published figure stays a
    measurement (a comparison of ours with a cited figure)."""
    vs = [v for v in values if isinstance(v, Value)]
    kinds = {v.kind for v in vs}
    sources = list(dict.fromkeys(v.source for v in vs))
    if len(kinds) == 1:
        kind = kinds.pop()
    elif kinds & {PREDICTED, ASSUMED}:
        kind = PREDICTED
    else:
        kind = MEASURED
    return kind, "; ".join(sources)


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
    """Whether every Value in ``values`` is a measurement or a cited figure (plain
    numbers and None are ignored)."""
    return all(v.kind in (MEASURED, PUBLISHED) for v in values if isinstance(v, Value))


def would(values: Iterable, did: str, would_: str) -> str:
    """A verdict's verb: ``did`` where every input was measured, ``would_`` where one
    was predicted or assumed (``"was faster"`` / ``"would be faster"``)."""
    return did if all_measured(values) else would_


def glue_text(value) -> object:
    """What ``glue_all`` glues for ``value``: a Value's text (number, unit, marker),
    anything else unchanged."""
    return value.text() if isinstance(value, Value) else value
