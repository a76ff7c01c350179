"""Memory a training step needs, measured on any device.

A CPU has no ``torch.cuda.max_memory_allocated``, and the resident size mixes
everything. What mixed precision changes is mostly the tensors autograd keeps from the
forward pass for the backward pass; ``SavedTensorMeter`` counts those with saved-tensor
hooks, on any device and on fake tensors (how ``ampbook.predict.steptrace`` predicts
them). Each storage counts once, however many views of it are saved; tensors saved as
they are (leaves that require grad, ``model``'s parameters) cost nothing and go to
``parameter_bytes``; autocast's low-precision weight copies are new storage.
``by_dtype`` and ``by_module_type`` (the class of the innermost running module of
``model``, ``OUTSIDE_MODEL`` for the loss) split ``new_bytes``.

**The book's one definition of activation memory** is ``new_bytes``: the bytes saved for
backward that did not exist before the step, ``total_bytes - parameter_bytes`` (the
runner records it as ``saved_tensor_bytes``). Each activation a 16-bit op saves is half
its fp32 twin, so the part that grows with the pixels of a batch shrinks (by less than
half: ops autocast keeps in fp32 still save fp32); but autocast adds the 2-byte copy of
every weight it casts, which fp32 saves by reference. So autocast saves memory above a
crossover batch size and costs memory below it (``fit_line``, ``crossover_pixels``).
"""

from __future__ import annotations

import contextlib
import math
import resource
import sys
import weakref
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ampbook.core.precision import torch_name
from ampbook.measure.tracking import ModuleScopes

OUTSIDE_MODEL = "(outside model)"


def _storage_key_and_bytes(t: torch.Tensor) -> tuple[tuple, int]:
    from torch._subclasses.fake_tensor import is_fake

    try:
        storage = t.untyped_storage()
        if is_fake(t):  # no data, no address: the storage object stands for it
            return ("fake", t.device.type, storage._cdata), storage.nbytes()
        return (t.device.type, t.device.index, storage.data_ptr()), storage.nbytes()
    except (RuntimeError, NotImplementedError):  # no plain storage (sparse...)
        return (t.device.type, "id", id(t)), t.numel() * t.element_size()


class SavedTensorMeter:
    """Count the bytes of the tensors autograd saves for backward inside the ``with``
    block (see the module docstring); ``count`` is the distinct storages."""

    def __init__(self, model: nn.Module | None = None, parameters=()):
        self.model = model
        # the state a ``torch.func.functional_call`` runs the model with
        self.parameters = list(parameters)
        self.total_bytes = self.count = self.parameter_bytes = 0
        self.by_dtype: dict[str, int] = defaultdict(int)
        self.by_module_type: dict[str, int] = defaultdict(int)
        self._seen: dict[tuple, list] = {}
        self._param_ptrs: set[tuple] = set()
        self._scopes = ModuleScopes(model) if model is not None else None

    def _owner(self) -> str:
        """Class name of the innermost module of the model running now."""
        scope = self._scopes.innermost()
        return scope[1] if scope is not None else OUTSIDE_MODEL

    def _pack(self, t: torch.Tensor):
        """Shown on the page in chapter 4 (04_loss_scaling)."""
        key, nbytes = _storage_key_and_bytes(t)
        alive = self._seen.get(key)
        # A storage is counted once while any tensor saved on it is still alive; a dead
        # entry means the memory was freed and reused by a new tensor, which counts
        # afresh.
        if alive is not None and any(r() is not None for r in alive):
            alive.append(weakref.ref(t))
            return t
        self._seen[key] = [weakref.ref(t)]
        self.total_bytes += nbytes
        self.count += 1
        if key in self._param_ptrs or (t.is_leaf and t.requires_grad):
            self.parameter_bytes += nbytes  # saved by reference: no new memory
            return t
        self.by_dtype[torch_name(t.dtype)] += nbytes
        if self.model is not None:
            self.by_module_type[self._owner()] += nbytes
        return t

    @property
    def new_bytes(self) -> int:
        """Bytes saved for backward that did not exist before (the book's memory)."""
        return self.total_bytes - self.parameter_bytes

    def __enter__(self) -> "SavedTensorMeter":
        self._stack = contextlib.ExitStack()
        if self._scopes is not None:
            self._stack.enter_context(self._scopes)
        for p in [*(self.model.parameters() if self.model else ()), *self.parameters]:
            self._param_ptrs.add(_storage_key_and_bytes(p)[0])
        hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._stack.enter_context(hooks)
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)  # the hooks first, then the scopes
        self._seen.clear()  # drop the weak references; the counts stay
        self.by_dtype = dict(self.by_dtype)
        self.by_module_type = dict(self.by_module_type)

    def summary(self) -> dict:
        """The counts as a JSON-serialisable dict."""
        counts = ("new_bytes", "total_bytes", "count", "parameter_bytes")
        by_module = dict(self.by_module_type) if self.model is not None else None
        return {
            **{k: getattr(self, k) for k in counts},
            "by_dtype": dict(self.by_dtype),
            "by_module_type": by_module,
        }


def saved_for_backward(
    model: nn.Module,
    x: torch.Tensor,
    target: torch.Tensor,
    device_type: str = "cpu",
    dtype: torch.dtype | None = None,
    loss_fn: Callable | None = None,
) -> dict:
    """``SavedTensorMeter.summary()`` of one training forward (model + loss), in fp32
    (``dtype=None``) or under autocast in ``dtype``; the graph is dropped unused."""
    loss_fn = loss_fn or nn.CrossEntropyLoss(ignore_index=255)
    amp = {"dtype": dtype or torch.float32, "enabled": dtype is not None}
    with SavedTensorMeter(model=model) as meter, torch.autocast(device_type, **amp):
        loss_fn(model(x), target)
    return meter.summary()


def saving(fp32_bytes: float, amp_bytes: float) -> float:
    """The share of ``fp32_bytes`` AMP saved: ``1 - amp/fp32`` (negative: it cost)."""
    if not fp32_bytes > 0:
        raise ValueError(f"fp32_bytes must be positive, got {fp32_bytes}")
    return 1.0 - amp_bytes / fp32_bytes


NEW_BYTES = "new bytes saved for backward"


@dataclass(frozen=True)
class Line:
    """``bytes = intercept + slope * pixels``: new bytes saved for backward per step."""

    intercept: float
    slope: float

    def __call__(self, pixels: float) -> float:
        return self.intercept + self.slope * pixels


def fit_line(points: Sequence[tuple[float, float]]) -> Line:
    """The line through (pixels per batch, bytes) points: exact through two, least
    squares through more. Needs at least two distinct pixel counts."""
    xs = [float(p) for p, _ in points]
    ys = [float(b) for _, b in points]
    if len(set(xs)) < 2:
        raise ValueError(
            f"fit_line needs two different pixel counts, got {sorted(set(xs))}"
        )
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sum((x - mx) ** 2 for x in xs)
    return Line(my - slope * mx, slope)


def crossover_pixels(fp32: Line, amp: Line) -> float:
    """Pixels per batch above which AMP's new saved bytes are fewer than fp32's: 0 when
    AMP saves at any size, ``inf`` when it never does (its per-pixel cost is not
    smaller)."""
    if amp.slope >= fp32.slope:
        same_slope_lower = amp.slope == fp32.slope and amp.intercept < fp32.intercept
        return 0.0 if same_slope_lower else math.inf
    return max(0.0, (amp.intercept - fp32.intercept) / (fp32.slope - amp.slope))


ADAM_STATE_BYTES_PER_PARAM = 16  # fp32 weight + fp32 gradient + Adam's two fp32 moments


def step_saving(pixels: float, fp32: Line, amp: Line, n_params: int) -> float:
    """Predicted saving of a training step's memory: new saved bytes plus the fp32
    weights, gradients and Adam state (``ADAM_STATE_BYTES_PER_PARAM``), which autocast
    leaves alone."""
    static = ADAM_STATE_BYTES_PER_PARAM * n_params
    return saving(static + fp32(pixels), static + amp(pixels))


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024  # written in kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes: Linux's ``VmHWM`` (which
    ``reset_peak_rss`` can reset), else ``getrusage``'s lifetime maximum."""
    if (peak := _status_bytes("VmHWM")) is not None:
        return peak
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # macOS: bytes


def current_rss_bytes() -> int | None:
    return _status_bytes("VmRSS")


def reset_peak_rss() -> bool:
    """Reset the peak RSS to the current RSS (Linux >= 4.0: write 5 to
    /proc/self/clear_refs). Returns False where that is not possible; the peak is then
    the process's lifetime peak."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class AllocatedBytesMeter(TorchDispatchMode):
    """``peak_bytes``: the most bytes the tensors made inside the ``with`` block held at
    once, a CPU's stand-in for ``torch.cuda.max_memory_allocated``. Every operator's new
    output storage (backward and checkpoint recomputations included) counts until a
    finalizer sees it freed; tensors made before the block, and views and in-place
    results of an operator's inputs, do not. No allocator's cache or fragmentation."""

    def __init__(self):
        super().__init__()
        self.live_bytes = self.peak_bytes = self.storages = 0
        self._seen: set[int] = set()

    def _freed(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.live_bytes -= nbytes

    def _add(self, t, inputs: set[int]) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        storage = t.untyped_storage()
        key = id(storage)
        if key in self._seen or storage.data_ptr() in inputs:
            return  # counted already, or a view of (or in place on) an input
        self._seen.add(key)
        nbytes = storage.nbytes()
        self.storages += 1
        self.live_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        weakref.finalize(storage, self._freed, key, nbytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor) and t.device.type != "meta"
        }
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            self._add(t, inputs)
        return out
