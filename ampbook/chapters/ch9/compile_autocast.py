"""Questions 10 and 11 of chapter 9, ``torch.compile`` with autocast, on a CPU with the
``aot_eager`` and ``eager`` backends (traced as for a GPU, no kernel generated).
10: with ``backward_pass_autocast="same_as_forward"`` AOTAutograd traces a compiled
region's backward under the forward's autocast state (eager runs it without): a
product the forward ran in fp32 gets an fp16 gradient, which overflows. 11: Dynamo
guards on the autocast state, so a block called under autocast and again outside it
compiles again and says why."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ampbook.chapters.ch9.overflow import FeedForward, batch
from ampbook.chapters.ch9.recompute import take_grads


class Fp32Head(nn.Module):
    """The thread's model: a product under autocast, then a Linear in fp32."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w1", torch.ones(4, 4))
        self.linear2 = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.w1
        with torch.amp.autocast(x.device.type, enabled=False):
            return self.linear2(y.float())


def backward_autocast(setting: str):
    """The backward of compiled regions traced with autocast ``"off"`` (the fix,
    eager's behaviour) or ``"same_as_forward"``.
    Shown on the page in chapter 9 (09_when_amp_goes_wrong)."""
    import torch._functorch.config as functorch_config

    return functorch_config.patch(backward_pass_autocast=setting)


def _grads(model, compiled: bool, setting: str) -> list[torch.Tensor]:
    torch._dynamo.reset()
    run = torch.compile(model, backend="aot_eager") if compiled else model
    x = torch.ones(1, 4)
    with backward_autocast(setting):
        with torch.amp.autocast("cpu", dtype=torch.float16):
            y = run(x)
        (y * 16384).sum().backward()
    return take_grads(model)


@dataclass
class BackwardCheck:
    setting: str
    default: str  # this PyTorch's default setting
    eager_largest: float  # the largest |gradient| in eager
    compiled_finite: bool
    difference: float  # compiled against eager, max |a - b|

    @property
    def ok(self) -> bool:
        return self.compiled_finite and self.difference == 0.0

    def verdict(self) -> str:
        compiled = "not finite"
        if self.compiled_finite:
            compiled = f"finite, {self.difference:g} from eager's"
        end = "matches eager" if self.ok else "overflows"
        return (
            f"Measured with backward_pass_autocast={self.setting!r} (this PyTorch's "
            f"default: {self.default!r}): eager's largest gradient is "
            f"{self.eager_largest:,.0f}; the compiled region's gradients are "
            f"{compiled}: the compiled backward {end}."
        )


def check_backward(setting: str = "off", seed: int = 0) -> BackwardCheck:
    """The model eager and compiled (aot_eager), the backward traced by ``setting``."""
    import torch._functorch.config as functorch_config

    torch.manual_seed(seed)
    model = Fp32Head()
    eager, compiled = (_grads(model, c, setting) for c in (False, True))
    finite = all(torch.isfinite(g).all() for g in compiled)
    diff = max((a - b).abs().max().item() for a, b in zip(compiled, eager))
    largest = max(g.abs().max().item() for g in eager)
    default = functorch_config.backward_pass_autocast
    return BackwardCheck(setting, default, largest, finite, diff)


class Encoder(nn.Module):
    """A Linear, then a feed-forward block compiled on its own (as a user does)."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.block = torch.compile(FeedForward(width), backend="eager")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.embed(x))


def second_call_outside(model, h):
    """The failure: the block called again after the autocast region, in fp32."""
    return model.block(h.float())


def second_call_inside(model, h):
    """Every call of the compiled block under the one autocast state of the step.
    Shown on the page in chapter 9 (09_when_amp_goes_wrong)."""
    with torch.amp.autocast(h.device.type, dtype=torch.float16):
        return model.block(h)


@dataclass
class RecompileCheck:
    rounds: int
    graphs: int  # Dynamo's unique graphs
    reasons: list[str]  # the guard failures that made it compile again

    @property
    def ok(self) -> bool:
        return self.graphs == 1 and not self.reasons

    def verdict(self) -> str:
        why = kept = ""
        if self.reasons:
            why = "; it compiled again because " + "; ".join(
                f"`{r}`" for r in self.reasons
            )
        if 1 < self.graphs < self.rounds:
            kept = f" ({self.graphs} graphs in {self.rounds} steps: one per autocast "
            kept += "state, each compiled once and reused)"
        end = "one graph serves every call" if self.ok else "the block recompiles"
        return (
            f"Measured over {self.rounds} fp16 training steps: Dynamo made "
            f"{self.graphs} graph{'s' if self.graphs != 1 else ''} of the block{why}"
            f"{kept}: {end}."
        )


def check_recompiles(second_call=second_call_inside, rounds: int = 3, seed: int = 0):
    """``rounds`` fp16 steps with ``second_call``: Dynamo's graphs and its reasons."""
    from torch._dynamo.utils import counters, guard_failures

    torch._dynamo.reset()
    counters.clear()
    guard_failures.clear()
    torch.manual_seed(seed)
    model, x = Encoder(), batch(seed=seed)
    for _ in range(rounds):
        with torch.amp.autocast("cpu", dtype=torch.float16):
            h = model(x)
        loss = h.float().pow(2).mean() + second_call(model, h).float().pow(2).mean()
        loss.backward()
    reasons = sorted(
        {str(r).split("\n")[0].strip() for rs in guard_failures.values() for r in rs}
    )
    return RecompileCheck(rounds, counters["stats"]["unique_graphs"], reasons)
