"""Question 17 of chapter 9: TF32's ``fp32_precision`` switches (PyTorch 2.9 and
later) replacing ``allow_tf32``. After TF32 is set through the new switches, reading
the legacy flags raises a RuntimeError about "a mix of the legacy and new APIs"; the
fix reads and writes only the new switches (``env.tf32_state``,
``precision.set_tf32``), the legacy flags only on a PyTorch without them."""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

import torch

from ampbook.core.env import has_fp32_precision, tf32_state
from ampbook.core.precision import set_tf32

_PARTS = ("matmul", "conv", "rnn")  # each backend's switches


@contextlib.contextmanager
def kept_fp32_precision():
    """Every fp32_precision switch (torch's and each backend's) restored after."""
    b = torch.backends
    parts = [getattr(x, p, None) for x in (b.cuda, b.cudnn, b.mkldnn) for p in _PARTS]
    saved = [(o, o.fp32_precision) for o in [b, *parts] if hasattr(o, "fp32_precision")]
    try:
        yield
    finally:
        for owner, value in saved:
            owner.fp32_precision = value


def legacy_read() -> dict:
    """TF32 read the pre-2.9 way."""
    return {
        "matmul": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_conv": torch.backends.cudnn.allow_tf32,
    }


@dataclass
class Tf32Check:
    new_api: bool
    legacy_error: str | None  # the legacy read in the mixed state
    read: dict | None  # what the reader under test read there
    reader_error: str | None
    set_on: dict | None  # tf32_state after set_tf32(True)
    set_off: dict | None
    warnings: int

    @property
    def ok(self) -> bool:
        on, off = ({"matmul": v, "cudnn_conv": v} for v in ("tf32", "ieee"))
        read = self.reader_error is None and self.read is not None
        return read and (self.set_on, self.set_off) == (on, off) and not self.warnings

    def verdict(self) -> str:
        if not self.new_api:
            return (
                "This PyTorch has no fp32_precision switches: the legacy flags apply."
            )
        legacy = "the legacy read did not raise"
        if self.legacy_error:
            legacy = f"the legacy read raised a RuntimeError ({self.legacy_error})"
        reader = f"the reader under test read {self.read}"
        if self.reader_error is not None:
            reader = f"the reader under test raised ({self.reader_error})"
        return (
            f"Measured in the mixed state: {legacy}; {reader}. Set on and off, it "
            f"read {self.set_on} and {self.set_off}, with {self.warnings} warnings: "
            f"{'the new switches work' if self.ok else 'the reader fails'}."
        )


def _first_words(error: Exception, n: int = 9) -> str:
    return " ".join(str(error).replace(",", ", ").split()[:n]) + "..."


def check_tf32(reader=tf32_state, writer=set_tf32) -> Tf32Check:
    """Put torch in the mixed state, read it the legacy way and with ``reader``, set
    TF32 on and off with ``writer`` and read it back; every switch restored after."""
    if not has_fp32_precision():
        return Tf32Check(False, None, None, None, None, None, 0)
    with kept_fp32_precision(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # what a library may leave, which the legacy single flag cannot say
        torch.backends.cudnn.conv.fp32_precision = "tf32"
        torch.backends.cudnn.rnn.fp32_precision = "ieee"
        try:
            legacy_read()
            legacy_error = None
        except RuntimeError as e:
            legacy_error = _first_words(e)
        try:
            read, reader_error = reader(), None
        except RuntimeError as e:
            read, reader_error = None, _first_words(e)
        states = []
        for on in (True, False):
            try:
                writer(on)
                states.append(reader())
            except RuntimeError:
                states.append(None)
    return Tf32Check(True, legacy_error, read, reader_error, *states, len(caught))
