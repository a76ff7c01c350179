"""FSDP2's mixed precision (chapter 8): ``shard`` casts the parameters to
``param_dtype`` at each sharded module and reduces the gradients in ``reduce_dtype``;
``check_fsdp`` trains the tiny model so in two gloo processes against one in fp32."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ampbook.chapters.ch8.ddp import gloo_group, run_processes, step_batches
from ampbook.chapters.ch8.tiny import (
    flat_parameters,
    relative_difference,
    rounding_tolerance,
    tiny_model,
)
from ampbook.core.precision import torch_name


def shard(model, param_dtype=torch.bfloat16, reduce_dtype=torch.float32):
    """Shown on the page in chapter 8 (08_amp_patterns)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for layer in (model.conv1, model.conv2, model.head):
        fully_shard(layer, mp_policy=policy)  # each layer's weights gathered alone
    fully_shard(model, mp_policy=policy)  # the root casts the inputs to param_dtype
    return model


def saved_dtypes(step) -> dict[str, int]:
    """The tensors autograd saves for backward while ``step()`` runs, by dtype."""
    seen: Counter = Counter()

    def pack(t):
        seen[torch_name(t.dtype)] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return dict(seen)


def fsdp_worker(rank, world, init, out, reduce_dtypes, steps, batch, size, seed, wrap):
    """One process of ``check_fsdp``: what ``FSDPRun`` reads; rank 0 saves it."""
    import torch.distributed as dist

    with gloo_group(rank, world, init):
        found = {}
        for name in reduce_dtypes:
            model = tiny_model(seed)
            reduced: set = set()
            if wrap:
                shard(
                    model, reduce_dtype=None if name is None else getattr(torch, name)
                )
                for m in model.modules():
                    if hasattr(m, "set_all_reduce_hook"):
                        m.set_all_reduce_hook(
                            lambda g: reduced.add(torch_name(g.dtype))
                        )
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            losses, saved = [], {}
            for i, (x, y) in enumerate(step_batches(steps, batch, size, seed)):
                optimizer.zero_grad()
                x, y = x[rank::world], y[rank::world]
                if i == 0:
                    saved = saved_dtypes(lambda: F.cross_entropy(model(x), y))
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                mean = loss.detach().float() / world
                dist.all_reduce(mean)
                losses.append(mean.item())
            full = [
                getattr(p, "full_tensor", lambda p=p: p)() for p in model.parameters()
            ]
            weights = torch.cat([p.detach().flatten().float() for p in full])
            found[str(name)] = {
                "losses": losses,
                "reduced": sorted(reduced),
                "saved": saved,
                "weights": weights,
                "param_dtype": torch_name(next(model.parameters()).dtype),
            }
        if rank == 0:
            torch.save(found, out)


@dataclass
class FSDPRun:
    reduce_dtype: str  # as given to the policy ("None": param_dtype's)
    reduced_in: list[str]  # the dtypes the gradients were reduced in (observed)
    loss_difference: float  # max over steps of |loss - fp32's| / |fp32's|
    weight_difference: float  # the update's max |a - b| over max |fp32's|
    tolerance: float
    saved: dict[str, int]  # tensors saved for backward in one forward, by dtype
    sharded_dtype: str = "float32"  # the sharded weights the optimizer updates

    @property
    def ok(self) -> bool:
        return max(self.loss_difference, self.weight_difference) <= self.tolerance

    def verdict(self) -> str:
        word = "within" if self.ok else "outside"
        return (
            f"reduce_dtype={self.reduce_dtype}: gradients reduced in "
            f"{', '.join(self.reduced_in) or 'nothing (not sharded)'}; loss "
            f"{self.loss_difference:.2e} and update {self.weight_difference:.2e} from "
            f"one process in fp32, {word} the tolerance {self.tolerance:.1e}."
        )


@dataclass
class FSDPCheck:
    runs: list[FSDPRun]
    fp32_saved: dict[str, int]  # one process, fp32: saved for backward by dtype
    autocast_saved: dict[str, int]  # one process under autocast to bf16
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)


def check_fsdp(
    reduce_dtypes=(torch.float32, torch.bfloat16, None),
    world: int = 2,
    steps: int = 3,
    batch: int = 4,
    size: int = 8,
    seed: int = 0,
    wrap: bool = True,
) -> FSDPCheck:
    """``shard``ed training in ``world`` gloo processes against one in fp32."""
    names = [None if d is None else torch_name(d) for d in reduce_dtypes]
    net = tiny_model(seed)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    losses = []
    batches = step_batches(steps, batch, size, seed)
    x0, y0 = batches[0]
    fp32_saved = saved_dtypes(lambda: F.cross_entropy(net(x0), y0))
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        autocast_saved = saved_dtypes(lambda: F.cross_entropy(net(x0), y0))
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    start = flat_parameters(tiny_model(seed))
    ours = flat_parameters(net) - start
    theirs, seconds = run_processes(
        fsdp_worker, (names, steps, batch, size, seed, wrap), world, weights_only=False
    )
    runs = [
        FSDPRun(
            name,
            t["reduced"],
            max(abs(a - b) / abs(b) for a, b in zip(t["losses"], losses)),
            relative_difference(t["weights"] - start, ours),
            rounding_tolerance(torch.bfloat16),
            t["saved"],
            t["param_dtype"],
        )
        for name, t in ((str(n), theirs[str(n)]) for n in names)
    ]
    return FSDPCheck(runs, fp32_saved, autocast_saved, seconds)
