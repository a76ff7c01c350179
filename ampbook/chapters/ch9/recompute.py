"""Question 12 of chapter 9: activation checkpointing with autocast. A checkpointed
block runs again in the backward, outside the autocast region; ``checkpoint``
restores the forward's autocast state, and a recomputation under another (planted:
autocast off, as in a hand-written checkpoint) makes fp32 tensors where the forward
made fp16 ones: "Recomputed values ... have different metadata"."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import CheckpointError, checkpoint

from ampbook.chapters.ch9.overflow import FeedForward, batch


def forward_state():
    """The fix: no recompute context added (the forward's recorded autocast state)."""
    return contextlib.nullcontext(), contextlib.nullcontext()


def autocast_off():
    """The failure, planted: the recomputation runs with autocast off."""
    return contextlib.nullcontext(), torch.amp.autocast("cpu", enabled=False)


def checkpointed_step(block, x, context_fn=forward_state):
    """The block checkpointed inside the fp16 autocast region, the backward
    outside it. Shown on the page in chapter 9 (09_when_amp_goes_wrong)."""
    with torch.amp.autocast(x.device.type, dtype=torch.float16):
        y = checkpoint(block, x, use_reentrant=False, context_fn=context_fn)
    y.float().pow(2).mean().backward()


@dataclass
class CheckpointCheck:
    forward_dtypes: list[str]  # each Linear's output dtype, in the forward
    recomputed_dtypes: list[str]  # the same in the recomputation
    error: str | None  # the first line of a CheckpointError
    grad_difference: float  # max |a - b| / max |b| against the unchecked run
    tolerance: float

    @property
    def same_dtypes(self) -> bool:
        """Compared with the forward's first outputs: the recomputation stops once it
        has what the backward needs."""
        n = len(self.recomputed_dtypes)
        return n > 0 and self.recomputed_dtypes == self.forward_dtypes[:n]

    @property
    def ok(self) -> bool:
        close = self.grad_difference <= self.tolerance
        return self.error is None and self.same_dtypes and close

    def verdict(self) -> str:
        same = "the same dtypes" if self.same_dtypes else "other dtypes"
        error = f"; the backward raised `{self.error}`" if self.error else ""
        grads = "no gradients"
        if self.error is None:
            grads = (
                f"the gradients differ from the unchecked run's by at most "
                f"{self.grad_difference:.1e} (tolerance {self.tolerance:.0e})"
            )
        return (
            f"Measured: the forward's Linear outputs were "
            f"{', '.join(self.forward_dtypes)}; the recomputation made "
            f"{', '.join(self.recomputed_dtypes) or 'none'} ({same}){error}; "
            f"{grads}: the checkpoint {'is exact' if self.ok else 'fails'}."
        )


def take_grads(block) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad(set_to_none=True)
    return grads


def check_checkpoint(context_fn=forward_state, seed: int = 0, tolerance=1e-3):
    """``checkpointed_step``: the Linear outputs' dtypes, gradients vs unchecked."""
    torch.manual_seed(seed)
    block, x = FeedForward(), batch(seed=seed)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        y = block(x)
    y.float().pow(2).mean().backward()
    reference = take_grads(block)
    seen: list[str] = []
    handles = [
        m.register_forward_hook(lambda m, i, o: seen.append(str(o.dtype)[6:]))
        for m in (block.up, block.down)
    ]
    error = None
    try:
        checkpointed_step(block, x, context_fn)
    except CheckpointError as e:
        error = str(e).splitlines()[0].removeprefix("torch.utils.checkpoint: ")
    finally:
        for h in handles:
            h.remove()
    diff = float("inf")
    if error is None:
        pairs = zip(take_grads(block), reference)
        diff = max(((a - b).abs().max() / b.abs().max()).item() for a, b in pairs)
    return CheckpointCheck(seen[:2], seen[2:], error, diff, tolerance)
