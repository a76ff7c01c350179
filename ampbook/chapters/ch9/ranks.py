"""Question 14 of chapter 9: DDP ranks drifting apart when their GradScalers' scales
differ. DDP averages the scaled gradients before each rank unscales the average by
its own scale, so each rank gets a different, wrong gradient. The skips cannot differ
(every rank unscales the same average): scales differ only when they start apart (a
scaler state restored on one rank, planted), and the fix gives every rank rank 0's
state. Two ranks are simulated in one process, the all-reduce done explicitly."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ampbook.chapters.ch8.tiny import tiny_batch, tiny_model


def same_scaler_state(scalers) -> None:
    """The fix: every rank loads rank 0's scaler state (in a real run,
    ``torch.distributed.broadcast_object_list`` of ``scalers[0].state_dict()``).
    Shown on the page in chapter 9 (09_when_amp_goes_wrong)."""
    state = scalers[0].state_dict()
    for scaler in scalers[1:]:
        scaler.load_state_dict(state)


def keep_own_state(scalers) -> None:
    """No fix: each rank keeps the scale it started with."""


def all_reduce_mean(models) -> None:
    """What DDP's backward does: every rank's gradients replaced by their mean."""
    for params in zip(*(m.parameters() for m in models)):
        mean = torch.stack([p.grad for p in params]).mean(0)
        for p in params:
            p.grad.copy_(mean)


@dataclass
class RanksCheck:
    start_scales: tuple[float, ...]  # before the fix
    scales: list[tuple[float, ...]]  # each rank's scale after each step
    skipped: tuple[int, ...]  # steps each rank skipped
    gradient_error: float  # worst rank's unscaled gradient against the true mean
    drift: float  # max |w_rank0 - w_rank1| after the steps
    tolerance: float

    @property
    def ok(self) -> bool:
        same = len(set(self.skipped)) == 1
        return self.drift == 0.0 and self.gradient_error <= self.tolerance and same

    def verdict(self) -> str:
        last = ", ".join(f"{s:g}" for s in self.scales[-1])
        return (
            f"Measured on two simulated ranks whose scalers were made at "
            f"{', '.join(f'{s:g}' for s in self.start_scales)}: they skipped "
            f"{', '.join(map(str, self.skipped))} steps and ended at {last}; the "
            f"worst rank's gradient is {self.gradient_error:.1e} from the true mean "
            f"(relative; tolerance {self.tolerance:.0e}) and the replicas' weights "
            f"differ by up to {self.drift:.1e}: the ranks "
            f"{'stay one model' if self.ok else 'drift apart'}."
        )


def check_ranks(
    fix=same_scaler_state,
    scales=(2.0**16, 2.0**10),
    steps: int = 3,
    overflow_step: int = 0,
    seed: int = 0,
    tolerance: float = 1e-2,
) -> RanksCheck:
    """Two replicas, GradScalers at ``scales``, ``fix`` applied, DDP's mean simulated;
    rank 1's loss times 1e30 at ``overflow_step`` (planted)."""
    models = [tiny_model(seed) for _ in scales]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    scalers = [torch.amp.GradScaler("cpu", init_scale=s) for s in scales]
    fix(scalers)
    batches = [tiny_batch(2, 8, seed + rank) for rank in range(len(models))]
    history, skipped, error = [], [0] * len(models), 0.0
    for step in range(steps):
        for rank, (model, (images, labels)) in enumerate(zip(models, batches)):
            plant = 1e30 if (step == overflow_step and rank == 1) else 1.0
            with torch.amp.autocast("cpu", dtype=torch.float16):
                loss = F.cross_entropy(model(images), labels) * plant
            scalers[rank].scale(loss).backward()
        true = [
            torch.stack([p.grad / s.get_scale() for p, s in zip(ps, scalers)]).mean(0)
            for ps in zip(*(m.parameters() for m in models))
        ]
        all_reduce_mean(models)
        for rank, (model, opt, scaler) in enumerate(zip(models, optimizers, scalers)):
            before = scaler.get_scale()
            if all(torch.isfinite(t).all() for t in true):
                got = [p.grad / before for p in model.parameters()]
                errors = [
                    (g - t).abs().max() / t.abs().max() for g, t in zip(got, true)
                ]
                error = max(error, max(e.item() for e in errors))
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            skipped[rank] += scaler.get_scale() < before
        history.append(tuple(s.get_scale() for s in scalers))
    drift = max(
        (a - b).abs().max().item()
        for a, b in zip(models[0].parameters(), models[1].parameters())
    )
    return RanksCheck(tuple(scales), history, tuple(skipped), error, drift, tolerance)
