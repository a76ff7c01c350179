"""The host's share of a training step, which the kernels' time leaves out: the GPU
idles after each synchronisation (``loss.item()``, GradScaler's inf/NaN check) until
the host has launched the next kernels. The committed H200 layer profiles measured it
(wall time minus kernel time) for a runner of known syncs per step; the doctor adds
``syncs x idle per sync`` to a layer profile's kernel time, assuming it the same for
every network, GPU and batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Loop:
    """The host synchronisations per training step of a loop, per precision."""

    name: str
    fp32: int
    amp: int
    detail: str

    def syncs(self, precision: str) -> int:
        return self.fp32 if precision == "fp32" else self.amp


# The loop the doctor predicts for: PyTorch's AMP examples (pytorch-amp-examples), the
# loss logged every step.
EXAMPLE_LOOP = Loop(
    "a loop as PyTorch's AMP examples write it, logging the loss each step", 1, 2,
    "fp32: loss.item(); AMP: loss.item() and GradScaler's inf/NaN check in scaler.step",
)  # fmt: skip
# The book's runner that measured the H200 runs and layer profiles of 2026-11-30
# (`git show 483e4df:ampbook/train.py`); commit 61ebb68 (2026-12-01) removed the
# syncs that were the runner's, not AMP's (``--sync-every``).
RUNNER_2026_11_30 = Loop(
    "the book's runner of 2026-11-30", 2, 4,
    "fp32: loss.item(), the runner's isfinite(grad norm); AMP: loss.item(), the "
    "runner's get_scale() before and after scaler.step, GradScaler's inf/NaN check",
)  # fmt: skip
# Layer profiles recorded before this date came from RUNNER_2026_11_30.
RUNNER_CHANGED = "2026-12-01"


@dataclass(frozen=True)
class HostModel:
    """GPU idle time per host synchronisation, measured, and the loop predicted."""

    idle_per_sync_s: float
    source: str
    loop: Loop = EXAMPLE_LOOP
    fit: str = ""  # how idle_per_sync_s was fitted, in words (``host_model``)

    def idle_s(self, precision: str) -> float:
        return self.loop.syncs(precision) * self.idle_per_sync_s

    def with_loop(self, loop: Loop) -> "HostModel":
        return HostModel(self.idle_per_sync_s, self.source, loop, self.fit)


def profile_loop(record: dict[str, Any]) -> Loop | None:
    """The loop that recorded a layer profile: the runner of 2026-11-30 before
    ``RUNNER_CHANGED``; None after (its syncs depend on its ``--sync-every``)."""
    when = str(record.get("created") or record.get("started") or "")
    if when and when[:10] < RUNNER_CHANGED:
        return RUNNER_2026_11_30
    return None


def host_model(results_dir=None, loop: Loop = EXAMPLE_LOOP) -> HostModel | None:
    """The idle time per sync: all idle time of the committed layer-profile pairs
    whose loop is known over their syncs; None without one."""
    from ampbook.core.devices import display_name
    from ampbook.results import load_results_dir

    idle, syncs, where, each, gpus = 0.0, 0, [], [], set()
    for base, amp in load_results_dir(results_dir).profile_pairs():
        loops = [profile_loop(lp.record) for lp in (base, amp)]
        if None in loops:
            continue
        idle += base.idle_s + amp.idle_s
        n32, n16 = loops[0].syncs("fp32"), loops[1].syncs(amp.precision)
        syncs += n32 + n16
        each += [amp.idle_s / n16, base.idle_s / n32]
        gpus.add(display_name(amp.device_name))
        where.append(
            f"{display_name(amp.device_name)} layer profiles ({amp.mode} "
            f"{amp.idle_s * 1e3:.1f} ms idle, {base.mode} {base.idle_s * 1e3:.1f} ms; "
            f"{loops[0].name}: {loops[1].amp} and {loops[0].fp32} syncs)"
        )
    if not syncs:
        return None
    fit = (
        f"fitted: all idle of the {2 * len(where)} {', '.join(sorted(gpus))} "
        f"profiles over their {syncs} syncs "
        f"({' and '.join(f'{x * 1e3:.1f}' for x in each)} ms each), assumed "
        "independent of kernel count, batch and GPU"
    )
    return HostModel(idle / syncs, "; ".join(where), loop, fit)
