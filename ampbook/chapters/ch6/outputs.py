"""What the model returns: the tensor the doctor's loss reads, its shape on fake data,
the traced step's loss and targets; a model fake data cannot trace is told why."""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import weakref
from typing import Sequence

import torch
from torch import nn

from ampbook.predict.specs import DoctorError, first_line, shape_text

# A model that rejects the fake input runs one real zero sample of at most this many
# elements to say why in its own words.
REAL_PROBE_MAX_ELEMENTS = 3 * 1024 * 1024


def loss_fn(loss: str):
    """The traced loss: cross-entropy (``trace_step``'s own) or MSE against zeros."""
    if loss == "cross-entropy":
        return "cross_entropy"
    return lambda y: nn.functional.mse_loss(y, torch.zeros_like(y))


@contextlib.contextmanager
def quiet_fake():
    """Silence the fake-tensor module's logged traceback (the doctor says one line)."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _pick(y, key: str | None) -> tuple:
    """The output the loss reads and how, in words."""
    kind, by = type(y).__name__, f"--output {key}"
    if isinstance(y, torch.Tensor):
        if key is None:
            return y, "the tensor it returns"
        raise DoctorError(f"--output {key!r}: the model returns one tensor; drop it")
    if isinstance(y, dict):
        tensors = [k for k, v in y.items() if isinstance(v, torch.Tensor)]
        if key is None and "out" not in y and len(tensors) == 1:
            return y[tensors[0]], f"the {kind}'s only tensor, {tensors[0]!r}"
        if (key or "out") in y:
            return y[key or "out"], by if key else f"the {kind}'s 'out' entry"
        raise DoctorError(
            f"--output {key!r}: the model returns a dict with keys {list(y)}; pass "
            "one of them"
            if key
            else f"the model returns a dict with keys {list(y)} and no 'out': pass "
            "--output KEY to say which one is the output"
        )
    if isinstance(y, (tuple, list)) and key is None:
        first = next((v for v in y if isinstance(v, torch.Tensor)), None)
        if first is None:
            raise DoctorError(
                f"the model returns a {kind} without a tensor in it: pass --output "
                "KEY, or wrap it so that forward returns the logits"
            )
        return first, f"the first tensor of the {kind}"
    if isinstance(y, (tuple, list)):
        fields = getattr(y, "_fields", ())
        try:
            return (getattr(y, key) if key in fields else y[int(key)]), by
        except (ValueError, IndexError):
            named = f" or one of {list(fields)}" if fields else ""
            raise DoctorError(
                f"--output {key!r}: the model returns a {kind} of {len(y)}; pass "
                f"an index below {len(y)}{named}"
            ) from None
    raise DoctorError(
        f"the model returned {kind}, not a tensor: wrap it so that forward returns "
        "the logits"
    )


def select_output(y, key: str | None = None) -> torch.Tensor:
    """``_pick``'s output, which must be a tensor."""
    out = _pick(y, key)[0]
    if not isinstance(out, torch.Tensor):
        raise DoctorError(
            f"the output the doctor read ({key or 'by its rule'}) is a "
            f"{type(out).__name__}, not a tensor: pass --output KEY"
        )
    return out


class SelectOutput(nn.Module):
    """``model`` returning the one tensor ``select_output`` reads."""

    def __init__(self, model: nn.Module, key: str | None = None):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x):
        return select_output(self.model(x), self.key)


def _forward_inputs(model: nn.Module) -> list[str]:
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return ["x"]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in kinds and p.default is p.empty]


def _data_dependent(err: BaseException) -> bool:
    """Whether a fake forward failed on a shape that depends on the input's values."""
    from torch._subclasses import fake_tensor as ft

    kinds = (ft.DataDependentOutputException, ft.DynamicOutputShapeException)
    text = f"{type(err).__name__} {err}"
    return isinstance(err, kinds) or any(
        w in text for w in ("data-dependent", "data dependent", "DataDependent")
    )


WRAP_HINT = (
    "wrap it in a module whose forward(x) builds them from one tensor (see the "
    "README's doctor section)"
)


def _fake_forward(model: nn.Module, shape: Sequence[int], batch: int):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call

    with quiet_fake(), FakeTensorMode():
        state = {
            n: torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype)
            for n, t in [*model.named_parameters(), *model.named_buffers()]
        }
        was = model.training
        model.train()
        try:
            with torch.no_grad():
                return functional_call(model, state, (torch.empty(batch, *shape),))
        finally:
            model.train(was)


_PROBES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def probe(model, shape, batch, key) -> tuple[tuple[int, ...], bool, str]:
    """On fake tensors: the shape of the output the doctor reads, whether the model
    returns a plain tensor (else SelectOutput wraps it), which output in words."""
    cache = _PROBES.setdefault(model, {})
    k = (tuple(shape), batch, key)
    if k not in cache:
        cache[k] = _probe_uncached(model, shape, batch, key)
    return cache[k]


def _probe_uncached(model, shape, batch, key) -> tuple[tuple[int, ...], bool, str]:
    needs = _forward_inputs(model)
    if len(needs) > 1:
        raise DoctorError(
            f"the model's forward takes {len(needs)} inputs ({', '.join(needs)}); the "
            f"doctor feeds one tensor: {WRAP_HINT}"
        )
    try:
        y = _fake_forward(model, shape, batch)
    except DoctorError:
        raise
    except Exception as fake_error:
        if _data_dependent(fake_error):
            raise DoctorError(
                "the model's shapes depend on its input's values (an operator such as "
                "nonzero or non-maximum suppression, as in detection models), which "
                "fake tensors cannot trace: give the doctor the part whose shapes are "
                f"fixed (the backbone), or {WRAP_HINT}"
            ) from None
        err: BaseException = fake_error
        # fake tensors report meta-kernel messages: a real sample says the model's own
        try:
            if math.prod(shape) > REAL_PROBE_MAX_ELEMENTS:
                raise fake_error
            with torch.no_grad():
                was = model.training
                model.eval()
                try:
                    model(torch.zeros(1, *shape))
                finally:
                    model.train(was)
        except Exception as real:
            err = real
        hint = "pass --input with a shape it accepts"
        if "targets" in inspect.signature(model.forward).parameters:
            hint = "it takes targets in training mode (a detection model?): "
            hint += WRAP_HINT
        raise DoctorError(
            f"the model rejects input {shape_text(shape)}; {hint}",
            f"{type(err).__name__}: {first_line(err)}",
        ) from None
    shape_out = tuple(select_output(y, key).shape)
    return shape_out, isinstance(y, torch.Tensor), _pick(y, key)[1]


def check_loss(loss: str, out: Sequence[int]) -> None:
    if loss == "cross-entropy" and len(out) < 2:
        raise DoctorError(
            f"cross-entropy needs N x C (x ...) logits; the model returns shape "
            f"{tuple(out)}: pass --loss mse"
        )


def targets(loss: str, out: Sequence[int], generator=None) -> torch.Tensor:
    """Random targets: class indices for cross-entropy, values for MSE."""
    if loss == "mse":
        return torch.randn(tuple(out), generator=generator)
    return torch.randint(0, out[1], (out[0], *out[2:]), generator=generator)
