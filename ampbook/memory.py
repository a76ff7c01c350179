"""Memory a training step needs, measured on any device.

On a GPU, ``torch.cuda.max_memory_allocated`` answers "how much memory did the step take".
A CPU has no such counter, and the process's resident size mixes everything together. What
mixed precision changes is mostly one thing: the tensors autograd keeps from the forward pass
for the backward pass (activations, and the low-precision copies autocast makes of weights).
``SavedTensorMeter`` counts exactly those, with saved-tensor hooks
(``torch.autograd.graph.saved_tensors_hooks``), on CPU and CUDA alike:

    with SavedTensorMeter(model=model) as meter:
        loss = criterion(model(x), y)      # forward: autograd saves tensors here
    loss.backward()
    meter.total_bytes, meter.by_dtype, meter.by_module_type

Rules of the count:

* A tensor's bytes are the bytes of its *storage* (what stays alive), and each storage is
  counted once however many times, or through however many views, it is saved.
* ``by_dtype`` splits the total by the saved tensor's dtype (``"float32"``, ``"bfloat16"``...).
* ``by_module_type`` (only with ``model=``) splits it by the class name of the innermost module
  of ``model`` whose forward was running when the tensor was saved. Tensors saved by layers
  (``Conv2d``, ``BatchNorm2d``...) go to those layers; tensors saved by functional calls in a
  block's own ``forward`` (e.g. ``F.relu(y + x)``) go to the block; tensors saved outside the
  model (the loss) go to ``OUTSIDE_MODEL``.
* ``parameter_bytes`` (only with ``model=``): the part of the total that is the model's own
  parameters, saved as they are (fp32 weights under plain fp32). Under autocast the weights
  are saved as low-precision *copies*, which count as new storage.

The meter adds a Python call per saved tensor: use it around one step, not a whole epoch.

``peak_rss_bytes()`` and ``reset_peak_rss()`` read and (on Linux) reset the process's peak
resident set size, for a per-epoch peak on a CPU.
"""

from __future__ import annotations

import resource
import sys
import weakref
from collections import defaultdict

import torch
from torch import nn

OUTSIDE_MODEL = "(outside model)"


def _storage_key_and_bytes(t: torch.Tensor) -> tuple[tuple, int]:
    try:
        storage = t.untyped_storage()
        return (t.device.type, t.device.index, storage.data_ptr()), storage.nbytes()
    except (RuntimeError, NotImplementedError):  # tensors without a plain storage (sparse...)
        return (t.device.type, t.device.index, "id", id(t)), t.numel() * t.element_size()


class SavedTensorMeter:
    """Count the bytes of the tensors autograd saves for backward inside the ``with`` block.

    Attributes after (and during) the block: ``total_bytes``, ``count`` (distinct storages),
    ``by_dtype``, ``by_module_type`` and ``parameter_bytes`` (the last two need ``model=``).
    See the module docstring for what is counted.
    """

    def __init__(self, model: nn.Module | None = None):
        self.model = model
        self.total_bytes = 0
        self.count = 0
        self.parameter_bytes = 0
        self.by_dtype: dict[str, int] = defaultdict(int)
        self.by_module_type: dict[str, int] = defaultdict(int)
        self._seen: dict[tuple, list] = {}
        self._stack: list[str] = []
        self._handles: list = []
        self._param_ptrs: set[tuple] = set()
        self._hooks_ctx = None

    # -- module attribution ------------------------------------------------------------------
    def _push(self, module, args):
        self._stack.append(type(module).__name__)

    def _pop(self, module, args, output):
        if self._stack:
            self._stack.pop()

    def _install_module_hooks(self) -> None:
        for module in self.model.modules():
            self._handles.append(module.register_forward_pre_hook(self._push))
            self._handles.append(module.register_forward_hook(self._pop, always_call=True))
        for p in self.model.parameters():
            key, _ = _storage_key_and_bytes(p)
            self._param_ptrs.add(key)

    # -- the saved-tensor hooks ----------------------------------------------------------------
    def _pack(self, t: torch.Tensor):
        key, nbytes = _storage_key_and_bytes(t)
        alive = self._seen.get(key)
        # A storage is counted once while any tensor saved on it is still alive; a dead entry
        # means the memory was freed and reused by a new tensor, which counts afresh.
        if alive is not None and any(r() is not None for r in alive):
            alive.append(weakref.ref(t))
            return t
        self._seen[key] = [weakref.ref(t)]
        self.total_bytes += nbytes
        self.count += 1
        self.by_dtype[str(t.dtype).removeprefix("torch.")] += nbytes
        if self.model is not None:
            owner = self._stack[-1] if self._stack else OUTSIDE_MODEL
            self.by_module_type[owner] += nbytes
            if key in self._param_ptrs:
                self.parameter_bytes += nbytes
        return t

    @staticmethod
    def _unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    def __enter__(self) -> "SavedTensorMeter":
        if self.model is not None:
            self._install_module_hooks()
        self._hooks_ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks_ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks_ctx.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._stack.clear()
        self._seen.clear()  # drop the weak references; the counts stay
        self.by_dtype = dict(self.by_dtype)
        self.by_module_type = dict(self.by_module_type)

    def summary(self) -> dict:
        """The counts as a JSON-serialisable dict."""
        return {"total_bytes": self.total_bytes, "count": self.count,
                "parameter_bytes": self.parameter_bytes if self.model is not None else None,
                "by_dtype": dict(self.by_dtype),
                "by_module_type": dict(self.by_module_type) if self.model is not None else None}


# --- resident set size ---------------------------------------------------------------------

def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes: Linux's ``VmHWM`` (which
    ``reset_peak_rss`` can reset), else ``getrusage``'s lifetime maximum."""
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # bytes on macOS, KiB elsewhere


def current_rss_bytes() -> int | None:
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def reset_peak_rss() -> bool:
    """Reset the peak RSS to the current RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs).
    Returns False where that is not possible; the peak is then the process's lifetime peak."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
