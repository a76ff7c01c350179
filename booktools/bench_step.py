"""``python -m booktools.bench_step``, the project's benchmark of its training runner
(no chapter runs it; chapter 5 times steps with ``ch5.step_rounds``): the runner's step (``TrainStep``) against the six
lines one writes by hand (its overhead, target < 5%), and low precision against fp32 at
a small size (on a CPU without AMX or AVX-512 BF16/FP16 16-bit convolutions are many
times slower); on request, the runner's optimisations, Adam's implementations and the
decoded cache. Samples are taken in turns, so that drift in speed hits all alike.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from functools import partial
from typing import TYPE_CHECKING

from ampbook.core import cli
from ampbook.core.modes import PRECISIONS
from ampbook.core.words import plural

if TYPE_CHECKING:  # the run imports them: --help is answered without torch
    import torch

    from ampbook.train import TrainConfig

OVERHEAD_TARGET = 0.05
# (CPU, CUDA) defaults of the image sizes of the step and of the by-precision section
SIZES = {
    "height": (128, 512),
    "width": (256, 1024),
    "low_height": (32, 512),
    "low_width": (64, 1024),
}


def bare_step_fn(
    cfg: TrainConfig,
    device: torch.device,
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
):
    """The loop as one writes it by hand, nothing else; ``model``/``optimizer`` let it
    drive the very objects the runner trains."""
    import torch

    from ampbook.core.precision import autocast_dtype
    from ampbook.segmentation.model import ERFNet

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
    from ampbook.measure.timing import benchmark

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


def _step_config(precision, device, height, width, batch_size) -> TrainConfig:
    from ampbook.train import TrainConfig

    return TrainConfig(
        precision=precision,
        device=device,
        height=height,
        width=width,
        batch_size=batch_size,
        workers=0,
    )


def _in_turns(samplers: dict, rounds: int) -> dict[str, list]:
    """``{name: [sampler(), one per round]}``, the samplers called in turns, the order
    reversed every other round, so that drift in the machine's speed hits all."""
    out: dict[str, list] = {name: [] for name in samplers}
    for i in range(rounds):
        for name in list(samplers)[:: 1 if i % 2 == 0 else -1]:
            out[name].append(samplers[name]())
    return out


def measure_overhead(
    precision: str = "fp32",
    device: str = "auto",
    height: int = 128,
    width: int = 256,
    batch_size: int = 2,
    rounds: int = 5,
    steps_per_round: int = 3,
) -> dict:
    """Median step time of the runner's ``TrainStep`` and of the bare loop."""
    from ampbook.train import build_training, validate
    from ampbook.train.step import step_batch

    cfg = _step_config(precision, device, height, width, batch_size)
    res = validate(cfg)
    training = build_training(cfg, res)
    # Same model, same optimizer, same batches: only the code around them differs.
    fns = {
        "runner": training.step,
        "bare": bare_step_fn(cfg, res.device, training.net, training.optimizer),
    }
    batch = step_batch(cfg, res.device)
    got = _in_turns(
        {
            k: partial(_time, f, batch, res.device, steps_per_round)
            for k, f in fns.items()
        },
        rounds,
    )
    runner_t, bare_t = ([t for ts in got[k] for t in ts] for k in fns)
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
    """Median runner step time per precision at one size, and its ratio to fp32."""
    from ampbook.train import build_training, validate
    from ampbook.train.step import step_batch

    times: dict[str, float] = {}
    dev = None
    for precision in precisions:
        cfg = _step_config(precision, device, height, width, batch_size)
        try:
            res = validate(cfg)
        except ValueError as err:  # e.g. amp-bf16 on a GPU without bf16
            print(f"  {precision}: skipped ({err})", file=sys.stderr)
            continue
        dev = res.device
        step = build_training(cfg, res).step
        times[precision] = statistics.median(
            _time(step, step_batch(cfg, dev), dev, repeats)
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


# --- the runner's optimisations, one at a time ---------------------------------------

SYNC_EVERY = 8
OPTIONS: dict[str, dict] = {
    "channels_last": {"channels_last": True},
    "cudnn_benchmark": {"cudnn_benchmark": True},
    "fused_optimizer": {"fused_optimizer": True},
    "sync_every": {"sync_every": SYNC_EVERY},
    "fp16_stream": {"fp16_stream": True},
    "compile": {"compile": "default"},
}
DEFAULT_OPTIONS = tuple(o for o in OPTIONS if o != "compile")


def _block_time(step, batch, device, steps: int, cudnn_benchmark: bool) -> float:
    """Seconds per step over ``steps`` steps, the device waited for once at the end."""
    import time

    from ampbook.core.precision import backend_flags
    from ampbook.measure.timing import default_sync

    sync = default_sync(device)
    with backend_flags(cudnn_benchmark=cudnn_benchmark):
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            step(*batch)
        step.sync()
        sync()
        return (time.perf_counter() - start) / steps


def measure_options(
    precision: str = "fp32",
    device: str = "auto",
    height: int = 128,
    width: int = 256,
    batch_size: int = 2,
    options=DEFAULT_OPTIONS,
    rounds: int = 5,
    block: int = SYNC_EVERY,
) -> dict:
    """The runner's step time with each option on, and all together (``"all"``),
    against without: one untimed block each (``compile`` compiles), then ``rounds``
    rounds of a block each; ``speedup``: the median per-round ratio."""
    from ampbook.train import build_training, validate
    from ampbook.train.step import step_batch

    unknown = [o for o in options if o not in OPTIONS]
    if unknown:
        raise ValueError(
            f"{plural(len(unknown), 'unknown option')}: {', '.join(unknown)}; choose "
            f"from {', '.join(OPTIONS)}"
        )
    if rounds < 1 or block < 1:
        raise ValueError(f"rounds and block must be >= 1, got {rounds}, {block}")
    base = _step_config(precision, device, height, width, batch_size)
    res = validate(base)
    skipped = {}
    if res.device.type != "cuda" and "cudnn_benchmark" in options:
        skipped["cudnn_benchmark"] = "no effect on a CPU"
    chosen = [o for o in options if o not in skipped]
    configs = {"runner": base}
    for name in chosen:
        configs[name] = dataclasses.replace(base, **OPTIONS[name])
    eager = [o for o in chosen if o != "compile"]
    if len(eager) > 1:
        together = {k: v for name in eager for k, v in OPTIONS[name].items()}
        configs["all"] = dataclasses.replace(base, **together)
    runs = {}
    for name, cfg in configs.items():
        r = validate(cfg)
        args = (build_training(cfg, r).step, step_batch(cfg, r.device), r.device, block)
        runs[name] = partial(_block_time, *args, cfg.cudnn_benchmark)
        runs[name]()  # warm-up
    times = _in_turns(runs, rounds)
    ratios = {
        name: [b / t for b, t in zip(times["runner"], ts)]
        for name, ts in times.items()
        if name != "runner"
    }
    return {
        "precision": precision,
        "device": str(res.device),
        "height": height,
        "width": width,
        "batch_size": batch_size,
        "block": block,
        "rounds": rounds,
        "sync_every": SYNC_EVERY,
        "skipped": skipped,
        "step_s": {name: statistics.median(ts) for name, ts in times.items()},
        "times_s": times,
        "speedup": {name: statistics.median(r) for name, r in ratios.items()},
        "speedup_range": {name: (min(r), max(r)) for name, r in ratios.items()},
    }


def measure_optimizers(device: str = "auto", rounds: int = 9, steps: int = 5) -> dict:
    """Seconds per ``Adam.step`` over ERFNet's parameters (random gradients) in
    torch's fused, foreach and for-loop implementations, in turns; each sample is
    ``steps`` steps."""
    import time

    import torch

    from ampbook.core.devices import pick_device
    from ampbook.measure.timing import default_sync
    from ampbook.segmentation.model import ERFNet

    dev = pick_device(device)
    sync = default_sync(dev)
    impls = {
        "fused": {"fused": True},
        "foreach": {"foreach": True},
        "for-loop": {"foreach": False},
    }

    def sampler(kw):
        torch.manual_seed(0)
        net = ERFNet(19).to(dev)
        for p in net.parameters():
            p.grad = torch.randn_like(p) * 1e-3
        opt = torch.optim.Adam(net.parameters(), lr=5e-4, weight_decay=1e-4, **kw)
        opt.step()  # the state is made on the first step

        def sample():
            sync()
            start = time.perf_counter()
            for _ in range(steps):
                opt.step()
            sync()
            return (time.perf_counter() - start) / steps

        return sample, net

    made = {name: sampler(kw) for name, kw in impls.items()}
    net = made["fused"][1]
    times = _in_turns({name: m[0] for name, m in made.items()}, rounds)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    return {
        "device": str(dev),
        "parameters": sum(p.numel() for p in net.parameters()),
        "tensors": len(list(net.parameters())),
        "step_s": medians,
        "times_s": times,
        "fastest": min(medians, key=medians.get),
    }


def measure_data_cache(
    height: int = 128,
    width: int = 256,
    batch_size: int = 2,
    images: int = 24,
    rounds: int = 3,
) -> dict:
    """Images per second of one pass over ``images`` synthetic training images through
    the decoding loader (0 workers) and through the decoded cache in host memory, in
    turns; with the cache's one-off decoding time."""
    import time

    import torch

    from ampbook.segmentation.cityscapes import CachedLoader, Cityscapes, DecodedCache
    from ampbook.segmentation.synthetic import synthetic_root

    root = synthetic_root(images, 2, 2 * height, 2 * width)
    ds = Cityscapes(root, "train", height, width)
    start = time.perf_counter()
    cache = DecodedCache.build(ds, "cpu", workers=0)
    build_s = time.perf_counter() - start
    passes = {
        "loader": torch.utils.data.DataLoader(ds, batch_size=batch_size),
        "cache": CachedLoader(cache, batch_size, "cpu"),
    }

    def rate(loader):
        start = time.perf_counter()
        return sum(len(x) for x, _ in loader) / (time.perf_counter() - start)

    rates = _in_turns({name: partial(rate, lo) for name, lo in passes.items()}, rounds)
    medians = {name: statistics.median(r) for name, r in rates.items()}
    return {
        "height": height,
        "width": width,
        "batch_size": batch_size,
        "images": len(ds),
        "images_per_s": medians,
        "rates": rates,
        "build_s": build_s,
        "cache_bytes": cache.nbytes,
        "ratio": medians["cache"] / medians["loader"],
    }


def build_parser() -> cli.ArgumentParser:
    """The command's options (light: ``--help`` imports no torch)."""
    parser = cli.ArgumentParser(
        prog="python -m booktools.bench_step",
        description="One training step of the runner (python -m ampbook.train) "
        "against a bare hand-written loop, and the step time by precision, measured "
        "side by side. Given --options, --optimizers or --data-cache, only those "
        "sections run.",
        formatter_class=cli.HelpFormatter,
    )
    parser.add_argument(
        "--device", default="auto", help="auto (a GPU if there is one), cpu or cuda"
    )
    parser.add_argument(
        "--precision",
        default="fp32",
        choices=PRECISIONS,
        help="precision of the runner-vs-bare comparison",
    )

    def size_flag(name):
        cpu, cuda = SIZES[name]
        what = "the by-precision section" if name[:3] == "low" else "the step"
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=cli.positive_int,
            help=f"image {name.split('_')[-1]} of {what} (default: {cpu} on a CPU, "
            f"{cuda} on CUDA)",
        )

    for name in list(SIZES)[:2]:
        size_flag(name)
    parser.add_argument(
        "--batch-size", type=cli.positive_int, default=2, help="images per step"
    )
    parser.add_argument(
        "--rounds",
        type=cli.positive_int,
        default=5,
        help="rounds of the comparisons, taken in turns",
    )
    for name in list(SIZES)[2:]:
        size_flag(name)
    parser.add_argument(
        "--json", default=None, metavar="PATH", help="also write the numbers to PATH"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a --json file that exists"
    )
    parser.add_argument(
        "--options",
        nargs="?",
        const=",".join(DEFAULT_OPTIONS),
        default=None,
        metavar="LIST",
        help="section 3: the runner with each option against without it "
        f"(comma-separated, from {', '.join(OPTIONS)}; default when given without "
        "a list: all but compile)",
    )
    parser.add_argument(
        "--option-precisions",
        default="fp32,amp-bf16",
        metavar="LIST",
        help="precisions of section 3 (comma-separated)",
    )
    parser.add_argument(
        "--block",
        type=cli.positive_int,
        default=SYNC_EVERY,
        help="steps per sample in section 3 (the device waited for once per block)",
    )
    parser.add_argument(
        "--optimizers",
        action="store_true",
        help="section 4: Adam's fused, foreach and for-loop steps",
    )
    parser.add_argument(
        "--data-cache",
        action="store_true",
        help="section 5: the decoded cache against the decoding loader (0 workers)",
    )
    parser.add_argument(
        "--data-images",
        type=cli.positive_int,
        default=24,
        help="synthetic images of section 5",
    )
    return parser


@cli.command("python -m booktools.bench_step")
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    options = [o for o in (args.options or "").split(",") if o]
    option_precisions = [p for p in args.option_precisions.split(",") if p]
    for flag, given, known in (
        ("--options", options, OPTIONS),
        ("--option-precisions", option_precisions, PRECISIONS),
    ):
        bad = [o for o in given if o not in known]
        if bad:
            parser.error(
                f"{flag}: unknown {', '.join(bad)}; choose from {', '.join(known)}"
            )
    extra = bool(options or args.optimizers or args.data_cache)

    from ampbook.core.devices import pick_device
    from ampbook.core.env import cpu_flags, environment
    from ampbook.measure.timing import load_verdict, machine_load
    from ampbook.train import ConfigError, validate

    try:
        dev = pick_device(args.device)
    except (RuntimeError, ValueError) as err:
        cli.say(str(err))
        return 2
    gpu = dev.type == "cuda"
    h, w, lh, lw = (
        SIZES[k][gpu] if getattr(args, k) is None else getattr(args, k) for k in SIZES
    )
    # Every size and the batch size, checked as the runner does, before measuring.
    for height, width, which in (
        (h, w, "--height/--width"),
        (lh, lw, "--low-height/--low-width"),
    ):
        cfg = _step_config(args.precision, str(dev), height, width, args.batch_size)
        try:
            validate(cfg)
        except ConfigError as err:
            raise cli.UserError(f"{which}: {err}") from None
    if args.json:
        cli.check_output_file(args.json, "--json", overwrite=args.overwrite)
    env = environment(dev)
    load = machine_load()
    print(
        f"device: {env['device_name']} ({dev}); CPU flags: "
        f"{', '.join(cpu_flags()) or 'none'}; "
        f"torch {env['torch']}, {env['cpu_threads']} threads; "
        + load_verdict(load, dev.type)
    )

    numbers: dict = {"environment": env, "load": load}
    if not extra:
        numbers.update(_default_sections(args, dev, h, w, lh, lw))
    if options:
        numbers["options"] = _options_section(
            args, dev, h, w, options, option_precisions
        )
    if args.optimizers:
        numbers["optimizers"] = _optimizers_section(args, dev)
    if args.data_cache:
        numbers["data_cache"] = _data_section(args, h, w)
    numbers["load_after"] = machine_load()
    print(f"\nload average after: {numbers['load_after']['load1']:.2f}")
    if args.json:
        cli.save_result(args.json, numbers)
        print(f"\nwrote {args.json}")
    return 0


def _default_sections(args, dev, h, w, lh, lw) -> dict:
    gpu = dev.type == "cuda"
    o = measure_overhead(args.precision, str(dev), h, w, args.batch_size, args.rounds)
    print(
        f"\n1. runner step vs bare loop ({args.precision}, batch {args.batch_size} x "
        f"{w}x{h}, "
        f"{o['samples']} steps each, alternating rounds)"
    )
    for label, t in (
        ("runner (ampbook.train.TrainStep):", o["runner_s"]),
        ("bare hand-written loop:", o["bare_s"]),
    ):
        print(f"   {label:<33} {t * 1e3:9.1f} ms per step (median)")
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
    return {"overhead": o, "precisions": p}


def _options_section(args, dev, h, w, options, precisions) -> dict:
    out = {}
    for precision in precisions:
        try:
            m = measure_options(
                precision, str(dev), h, w, args.batch_size, options, args.rounds,
                args.block,
            )  # fmt: skip
        except ValueError as err:  # e.g. amp-bf16 on a GPU without bf16
            print(f"\n3. {precision}: skipped ({err})")
            continue
        out[precision] = m
        print(
            f"\n3. the runner with one option on ({precision}, batch "
            f"{args.batch_size} x {w}x{h}; {m['rounds']} rounds of {m['block']} "
            "steps, in turns)"
        )
        base = m["step_s"]["runner"]
        print(f"   {'runner (none)':<17} {base * 1e3:9.1f} ms per step")
        for name, t in m["step_s"].items():
            if name == "runner":
                continue
            lo, hi = m["speedup_range"][name]
            label = f"sync_every {m['sync_every']}" if name == "sync_every" else name
            print(
                f"   {label:<17} {t * 1e3:9.1f} ms per step   speedup "
                f"{m['speedup'][name]:5.2f}x (rounds {lo:.2f}-{hi:.2f})"
            )
        for name, why in m["skipped"].items():
            print(f"   {name:<17} not measured: {why}")
    return out


def _optimizers_section(args, dev) -> dict:
    m = measure_optimizers(str(dev), rounds=max(args.rounds, 3))
    print(
        f"\n4. Adam.step over ERFNet's {m['parameters']:,} parameters "
        f"({m['tensors']} tensors), {len(m['times_s']['fused'])} rounds in turns"
    )
    fastest = m["step_s"][m["fastest"]]
    for name, t in m["step_s"].items():
        print(f"   {name:<9} {t * 1e3:8.2f} ms   {t / fastest:5.2f} x the fastest")
    return m


def _data_section(args, h, w) -> dict:
    m = measure_data_cache(h, w, args.batch_size, args.data_images, args.rounds)
    print(
        f"\n5. one pass over {m['images']} synthetic images at {w}x{h}, batch "
        f"{args.batch_size}, {args.rounds} passes each in turns"
    )
    r = m["images_per_s"]
    print(f"   decoding loader, 0 workers: {r['loader']:9.1f} images/s")
    print(f"   decoded cache (host):       {r['cache']:9.1f} images/s")
    print(
        f"   ratio {m['ratio']:.1f}x; building the cache took {m['build_s']:.2f} s "
        f"({m['cache_bytes'] / 2**20:.1f} MiB)"
    )
    return m


if __name__ == "__main__":
    sys.exit(main())
