"""Question 12 of chapter 9: activation checkpointing with autocast. A checkpointed
block saves only its input in the forward and runs again in the backward; the
tensors it makes the second time must match the first, in shape and dtype. The
backward runs outside the autocast region (as PyTorch recommends), so a
recomputation that does not restore the forward's autocast state makes fp32 tensors
where the forward made fp16 ones, and ``torch.utils.checkpoint`` raises
"Recomputed values ... have different metadata". ``torch.utils.checkpoint``
restores that state itself (it records it when the forward runs); what breaks it is
a recomputation under another state, planted here as a recompute context with
autocast off (what a hand-written checkpoint that reruns the block in the backward
does). Forward hooks record the dtype of each Linear's output in the forward and in
the recomputation; the check compares them and the gradients with an unchecked
run."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import CheckpointError, checkpoint

from ampbook.chapters.ch9.overflow import FeedForward, batch


def forward_state():
    """The recompute context of the fix: none added, so the recomputation runs
    under the autocast state ``torch.utils.checkpoint`` recorded in the forward."""
    return contextlib.nullcontext(), contextlib.nullcontext()


def autocast_off():
    """The failure, planted: the recomputation runs with autocast off, as the
    backward outside the autocast region does."""
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
        """The recomputation stops once it has made every tensor the backward
        needs (``torch.utils.checkpoint``'s early stop): its outputs are compared
        with the forward's first ones."""
        n = len(self.recomputed_dtypes)
        return n > 0 and self.recomputed_dtypes == self.forward_dtypes[:n]

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and self.same_dtypes
            and self.grad_difference <= self.tolerance
        )

    def verdict(self) -> str:
        same = "the same dtypes" if self.same_dtypes else "other dtypes"
        error = f"; the backward raised `{self.error}`" if self.error else ""
        grads = (
            f"the gradients differ from the unchecked run's by at most "
            f"{self.grad_difference:.1e} (tolerance {self.tolerance:.0e})"
            if self.error is None
            else "no gradients"
        )
        return (
            f"Measured: the forward's Linear outputs were "
            f"{', '.join(self.forward_dtypes)}; the recomputation made "
            f"{', '.join(self.recomputed_dtypes) or 'none'} ({same}){error}; "
            f"{grads}: "
            + ("the checkpoint is exact." if self.ok else "the checkpoint fails.")
        )


def _grads(block) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad(set_to_none=True)
    return grads


def check_checkpoint(context_fn=forward_state, seed: int = 0, tolerance=1e-3):
    """Run ``checkpointed_step`` with ``context_fn`` and record the Linear outputs'
    dtypes with forward hooks (they fire in the forward and again in the
    recomputation); compare the gradients with the same step unchecked."""
    torch.manual_seed(seed)
    block, x = FeedForward(), batch(seed=seed)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        y = block(x)
    y.float().pow(2).mean().backward()
    reference = _grads(block)
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
        got = _grads(block)
        diff = max(
            ((a - b).abs().max() / b.abs().max()).item() for a, b in zip(got, reference)
        )
    return CheckpointCheck(seen[:2], seen[2:], error, diff, tolerance)
