"""One training step of the runner against a bare hand-written loop, and low/full
precision.

    python -m ampbook.bench step [--device auto|cpu|cuda] [--precision fp32]
                                 [--height 128 --width 256 --batch-size 2] [--rounds 5]
                                 [--low-height 32 --low-width 64] [--json PATH]

prints, measured side by side in one run:

1. **Runner overhead.** ``TrainStep`` (the step function ``python -m ampbook.train``
   runs: autocast, loss, scaled backward, the gradient check, the loss read back to
   Python) against the six-line loop one would write by hand (zero_grad, autocast
   forward and loss, backward, step, ``loss.item()``), on the same ERFNet
   initialisation, the same batches already in memory on the device, the same precision.
   Rounds alternate between the two so that drift in the machine's speed hits both; the
   medians' ratio is the runner's overhead (target: < 5%).
2. **Low precision against fp32 on this device**: the runner's step time in amp-bf16 and
   amp-fp16 divided by fp32, at a small size (``--low-height/--low-width``), because on
   a CPU without AMX or AVX-512 BF16/FP16 low-precision convolutions are many times
   slower than fp32.

Times come from ``ampbook.timing.benchmark`` (warm-up, CUDA-synchronised clocks,
medians). ``measure_overhead`` and ``measure_precisions`` return the numbers as dicts
for the chapter.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from ampbook.bench_matmul import load_verdict
from ampbook.env import cpu_flags, environment
from ampbook.precision import PRECISIONS, autocast_dtype
from ampbook.timing import benchmark, machine_load
from ampbook.train import TrainConfig, build_training, validate

OVERHEAD_TARGET = 0.05


def _batch(cfg: TrainConfig, device: torch.device, seed: int = 1) -> tuple:
    """One random batch (images, labels) of ``cfg``'s size on ``device``: every timed
    step takes the same one."""
    from ampbook.data import NUM_CLASSES

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(cfg.batch_size, 3, cfg.height, cfg.width, generator=g)
    y = torch.randint(
        0, NUM_CLASSES, (cfg.batch_size, cfg.height, cfg.width), generator=g
    )
    return x.to(device), y.to(device)


def bare_step_fn(
    cfg: TrainConfig,
    device: torch.device,
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
):
    """The deliberately bare baseline: the loop as one writes it by hand, nothing else.
    ``model``/``optimizer`` let it drive the very objects the runner trains (the
    benchmark does, so that both time the same tensors in the same memory); by default
    it builds its own ERFNet and Adam from ``cfg``."""
    from ampbook.model import ERFNet

    if model is None:
        torch.manual_seed(cfg.seed)
        model = ERFNet(19).to(device)
    if optimizer is None:
        optimizer = torch.optim.Adam(
            model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay
        )
    criterion = torch.nn.CrossEntropyLoss(ignore_index=255)
    dtype = autocast_dtype(cfg.precision)
    scaler = torch.amp.GradScaler(device.type) if dtype is torch.float16 else None

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(
            device.type, dtype=dtype or torch.float32, enabled=dtype is not None
        ):
            loss = criterion(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.item()

    return step


def _time(fn, batch: tuple, device, repeats: int) -> list[float]:
    r = benchmark(
        fn,
        lambda: batch,
        device=device,
        warmup=1,
        repeats=repeats,
        number=1,
        min_time=0.0,
        buffers=1,
        check_inputs=False,
    )
    return list(r.times_s)


def measure_overhead(
    precision: str = "fp32",
    device: str = "auto",
    height: int = 128,
    width: int = 256,
    batch_size: int = 2,
    rounds: int = 5,
    steps_per_round: int = 3,
) -> dict:
    """Median step time of the runner's ``TrainStep`` and of the bare loop, alternating
    rounds."""
    cfg = TrainConfig(
        precision=precision,
        device=device,
        height=height,
        width=width,
        batch_size=batch_size,
        workers=0,
    )
    res = validate(cfg)
    training = build_training(cfg, res)
    runner = training.step
    # Same model, same optimizer, same batches: only the code around them differs.
    bare = bare_step_fn(
        cfg, res.device, model=training.net, optimizer=training.optimizer
    )
    batch = _batch(cfg, res.device)
    runner_t: list[float] = []
    bare_t: list[float] = []
    for r in range(rounds):
        order = [(runner, runner_t), (bare, bare_t)]
        for fn, sink in order if r % 2 == 0 else order[::-1]:
            sink += _time(fn, batch, res.device, steps_per_round)
    runner_s, bare_s = statistics.median(runner_t), statistics.median(bare_t)
    return {
        "precision": precision,
        "device": str(res.device),
        "height": height,
        "width": width,
        "batch_size": batch_size,
        "samples": len(runner_t),
        "runner_s": runner_s,
        "bare_s": bare_s,
        "ratio": runner_s / bare_s,
        "overhead": runner_s / bare_s - 1.0,
        "runner_times_s": runner_t,
        "bare_times_s": bare_t,
    }


def measure_precisions(
    device: str = "auto",
    height: int = 32,
    width: int = 64,
    batch_size: int = 2,
    precisions=PRECISIONS,
    repeats: int = 5,
) -> dict:
    """Median runner step time per precision at one (small) size, and each one's ratio
    to fp32."""
    times: dict[str, float] = {}
    dev = None
    for precision in precisions:
        cfg = TrainConfig(
            precision=precision,
            device=device,
            height=height,
            width=width,
            batch_size=batch_size,
            workers=0,
        )
        try:
            res = validate(cfg)
        except ValueError as err:  # e.g. amp-bf16 on a GPU without bf16
            print(f"  {precision}: skipped ({err})", file=sys.stderr)
            continue
        dev = res.device
        step = build_training(cfg, res).step
        times[precision] = statistics.median(
            _time(step, _batch(cfg, dev), dev, repeats)
        )
    base = times.get("fp32")
    return {
        "device": str(dev),
        "height": height,
        "width": width,
        "batch_size": batch_size,
        "step_s": times,
        "ratio_to_fp32": {p: t / base for p, t in times.items()} if base else {},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ampbook.bench step", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--precision",
        default="fp32",
        choices=PRECISIONS,
        help="precision of the runner-vs-bare comparison",
    )
    parser.add_argument(
        "--height", type=int, default=None, help="default: 128 on CPU, 512 on CUDA"
    )
    parser.add_argument(
        "--width", type=int, default=None, help="default: 256 on CPU, 1024 on CUDA"
    )
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--low-height", type=int, default=None, help="default: 32 on CPU, 512 on CUDA"
    )
    parser.add_argument(
        "--low-width", type=int, default=None, help="default: 64 on CPU, 1024 on CUDA"
    )
    parser.add_argument(
        "--json", default=None, help="also write the numbers to this file"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")

    from ampbook.env import pick_device
    from ampbook.train import ConfigError

    try:
        dev = pick_device(args.device)
    except (RuntimeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    gpu = dev.type == "cuda"
    h = args.height or (512 if gpu else 128)
    w = args.width or (1024 if gpu else 256)
    lh = args.low_height or (512 if gpu else 32)
    lw = args.low_width or (1024 if gpu else 64)
    # Every size and the batch size, checked as the runner does, before measuring.
    try:
        if args.batch_size < 1:
            raise ConfigError(f"--batch-size must be at least 1, got {args.batch_size}")
        for height, width, which in (
            (h, w, "--height/--width"),
            (lh, lw, "--low-height/--low-width"),
        ):
            try:
                validate(
                    TrainConfig(
                        precision=args.precision,
                        device=str(dev),
                        height=height,
                        width=width,
                        batch_size=args.batch_size,
                    )
                )
            except ConfigError as err:
                raise ConfigError(f"{which}: {err}") from None
        if args.json:
            path = Path(args.json)
            if path.is_dir():
                raise ConfigError(f"--json {path} is a folder; give a file name")
            path.parent.mkdir(parents=True, exist_ok=True)
    except (ConfigError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    env = environment(dev)
    load = machine_load()
    print(
        f"device: {env['device_name']} ({dev}); CPU flags: "
        f"{', '.join(cpu_flags()) or 'none'}; "
        f"torch {env['torch']}, {env['cpu_threads']} threads; "
        + load_verdict(load, dev.type)
    )

    o = measure_overhead(args.precision, str(dev), h, w, args.batch_size, args.rounds)
    print(
        f"\n1. runner step vs bare loop ({args.precision}, batch {args.batch_size} x "
        f"{w}x{h}, "
        f"{o['samples']} steps each, alternating rounds)"
    )
    print(
        f"   runner (ampbook.train.TrainStep): {o['runner_s'] * 1e3:9.1f} ms per step "
        "(median)"
    )
    print(
        f"   bare hand-written loop:           {o['bare_s'] * 1e3:9.1f} ms per step "
        "(median)"
    )
    verdict = "within" if o["overhead"] < OVERHEAD_TARGET else "OVER"
    print(
        f"   ratio {o['ratio']:.3f}: runner overhead {o['overhead'] * 100:+.1f}% "
        f"({verdict} the {OVERHEAD_TARGET * 100:.0f}% target)"
    )

    p = measure_precisions(str(dev), lh, lw, args.batch_size)
    print(f"\n2. runner step time by precision (batch {args.batch_size} x {lw}x{lh})")
    for name, t in p["step_s"].items():
        print(
            f"   {name:<9} {t * 1e3:9.1f} ms   "
            f"{p['ratio_to_fp32'].get(name, float('nan')):6.2f} x fp32"
        )
    if "amp-bf16" in p["ratio_to_fp32"]:
        r = p["ratio_to_fp32"]["amp-bf16"]
        print(
            f"   bf16/fp32 step-time ratio on this {'GPU' if gpu else 'CPU'}: {r:.2f} "
            f"({'bf16 slower' if r > 1 else 'bf16 faster'})"
        )
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {"environment": env, "load": load, "overhead": o, "precisions": p},
                indent=1,
            )
            + "\n"
        )
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def step_rounds(
    configs: dict[str, TrainConfig], rounds: int = 5
) -> dict[str, list[float]]:
    """Runner step times of several configurations, taking turns round after round.

    Each configuration gets its own model, optimizer and batch; one untimed warm-up
    round runs first. Every round times one step of each configuration in turn, so a
    shared machine's slow spells hit all of them alike; the per-round ratios then carry
    the spread. Returns ``{name: [seconds per step, one per round]}``.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    steps = {}
    for name, cfg in configs.items():
        res = validate(cfg)
        batch = _batch(cfg, res.device)
        steps[name] = (build_training(cfg, res).step, batch, res.device)
    return time_rounds(steps, rounds)


def time_rounds(
    steps: dict[str, tuple], rounds: int = 5, warmup: bool = True
) -> dict[str, list[float]]:
    """``step_rounds``'s protocol for any steps: ``{name: (step function, batch tuple,
    device)}``, each called as ``step(*batch)``; one untimed warm-up round (unless
    ``warmup`` is False: the caller ran one), then ``rounds`` rounds that time one call
    of each in turn. Returns ``{name: [seconds, one per round]}``;
    ``ampbook.costmodel.speedup_verdict`` reads the per-round ratios."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    times: dict[str, list[float]] = {name: [] for name in steps}
    first = 0 if warmup else 1
    for r in range(first, rounds + 1):
        for name, (step, batch, dev) in steps.items():
            t = benchmark(
                step,
                lambda b=batch: b,
                device=dev,
                warmup=0,
                repeats=1,
                number=1,
                min_time=0.0,
                buffers=1,
                check_inputs=False,
            ).median_s
            if r:
                times[name].append(t)
    return times
