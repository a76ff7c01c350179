"""DistributedDataParallel under AMP (chapter 8): chapter 3's loop (``train_steps``)
in two gloo processes against one process on the whole batches (``check_ddp``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ampbook.chapters.ch8.tiny import (
    Comparison,
    dtype_label,
    flat_parameters,
    relative_difference,
    rounding_tolerance,
    scaler_for,
    sgd_update,
    tiny_batch,
    tiny_model,
)
from ampbook.core.precision import torch_name


def train_steps(model, optimizer, scaler, batches, device_type, dtype):
    """The minimal AMP loop (chapter 3) over ``batches``; with DDP ``model`` is the
    DDP-wrapped one and each process passes its own share of every batch.

    Shown on the page in chapter 8 (08_amp_patterns)."""
    for images, labels in batches:
        optimizer.zero_grad()
        with torch.amp.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()  # DDP averages the gradients across processes
        scaler.step(optimizer)
        scaler.update()


def step_batches(steps: int, batch: int, size: int, seed: int):
    """``steps`` tiny batches, one seed each: every run compared sees the same data."""
    return [tiny_batch(batch, size, seed + i) for i in range(steps)]


@contextlib.contextmanager
def gloo_group(rank: int, world: int, init: str):
    """One spawned process's gloo group (one thread: the processes share the cores),
    destroyed after a barrier, so that no rank tears it down while another still uses
    it (a SIGABRT seen once on a loaded machine)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init}", rank=rank, world_size=world
    )
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_processes(worker, args: tuple, world: int, weights_only: bool = True):
    """``worker`` in ``world`` spawned processes: what rank 0 saved, the seconds."""
    import torch.multiprocessing as mp

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        init, out = os.path.join(tmp, "init"), os.path.join(tmp, "out.pt")
        mp.start_processes(
            worker, args=(world, init, out, *args), nprocs=world, start_method="spawn"
        )
        found = torch.load(out, weights_only=weights_only)
    return found, time.perf_counter() - start


def ddp_worker(
    rank: int,
    world: int,
    init: str,
    out: str,
    dtypes: list,
    steps: int,
    batch: int,
    size: int,
    seed: int,
    wrap: bool,
    net_options: dict | None = None,
) -> None:
    """One process of ``check_ddp``: its rows of each batch; rank 0 saves weights."""
    with gloo_group(rank, world, init):
        weights = {}
        for d in dtypes:
            dtype = None if d is None else getattr(torch, d)
            net = tiny_model(seed, **(net_options or {}))
            model = nn.parallel.DistributedDataParallel(net) if wrap else net
            shares = [
                (x[rank::world], y[rank::world])
                for x, y in step_batches(steps, batch, size, seed)
            ]
            args = (scaler_for("cpu", dtype), shares, "cpu", dtype)
            sgd_update(train_steps, model, *args)
            weights[str(d)] = flat_parameters(net)
        if rank == 0:
            torch.save(weights, out)


@dataclass
class DDPCheck:
    results: list[Comparison]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)


def check_ddp(
    dtypes=(None, torch.bfloat16),
    world: int = 2,
    steps: int = 3,
    batch: int = 4,
    size: int = 8,
    seed: int = 0,
    wrap: bool = True,
    **net_options,
) -> DDPCheck:
    """``train_steps`` in ``world`` gloo processes against one: weights per dtype."""
    names = [None if d is None else torch_name(d) for d in dtypes]
    ours = {}
    for d, name in zip(dtypes, names):  # one process, the whole batches
        net = tiny_model(seed, **net_options)
        batches = step_batches(steps, batch, size, seed)
        sgd_update(train_steps, net, scaler_for("cpu", d), batches, "cpu", d)
        ours[str(name)] = flat_parameters(net)
    theirs, seconds = run_processes(
        ddp_worker, (names, steps, batch, size, seed, wrap, net_options), world
    )
    results = [
        Comparison(
            f"{world} processes of {batch // world} images vs one of {batch}, "
            f"weights after {steps} steps",
            dtype_label(d),
            relative_difference(theirs[str(name)], ours[str(name)]),
            rounding_tolerance(d),
        )
        for d, name in zip(dtypes, names)
    ]
    return DDPCheck(results, seconds)
