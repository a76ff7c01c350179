"""A training run's settings (``TrainConfig``), their checks (``validate``: a
``ConfigError`` before any work) and the command line. Light: torch is imported only by
the checks that need it, so ``--help`` and a bad option answer without loading it."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ampbook.core import cli
from ampbook.core.modes import MODES, TF32_MODE

CLASS_WEIGHTS = ("none", "enet")
DATA_CACHES = ("none", "host", "device")
# torch.compile's modes, and its debugging backend "aot_eager" (graph capture and
# AOTAutograd, no code generation: no C++ compiler or Triton needed).
COMPILE_MODES = tuple(
    "default reduce-overhead max-autotune max-autotune-no-cudagraphs aot_eager".split()
)
TF32_CHOICES = ("on", "off")
# Fields that may differ between an interrupted run and its resumption: they do not
# change the numbers the run computes (sync_every: the same losses, read later).
RUNTIME_FIELDS = frozenset(
    "out name resume overwrite quiet progress workers save_predictions device "
    "checkpoint sync_every".split()
)


class ConfigError(ValueError, cli.UserError):
    """Settings that cannot work, found before any work starts."""


class NonFiniteLossError(RuntimeError, cli.Stopped):
    """The loss or gradients stayed non-finite for too many consecutive steps."""


class TrainError(RuntimeError, cli.Stopped):
    """A known failure during a run (a broken data file, an output that cannot be
    written); the message says what was kept and how to continue."""


class Interrupted(TrainError):
    """Ctrl-C (SIGINT) during a run (the message: what was saved, how to resume)."""


def _f(default, help: str, **kw):
    """A field whose metadata is its command-line option (``build_parser``)."""
    return field(default=default, metadata={"help": help, **kw})


def workers_arg(text: str) -> int | str:
    """``--workers``: a number of worker processes, or ``auto``."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a number of worker processes nor 'auto'"
        ) from None


def cpu_cores() -> int:
    """CPU cores this process may run on (its affinity mask, else the CPU count)."""
    from ampbook.measure.timing import machine_load

    return machine_load()["cpus"]


def fused_devices() -> tuple[str, ...]:
    """Device types that have torch's fused Adam kernel."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    return tuple(_get_fused_kernels_supported_devices())


@dataclass
class TrainConfig:
    """One training run's settings; each field is the command-line option so named."""

    precision: str = _f(
        "fp32",
        f"fp32 | amp-fp16 | amp-bf16, or {TF32_MODE}: fp32 with --tf32 on (the "
        "name the ladder and the doctor give it; the run records fp32 and tf32 on)",
        choices=MODES,
    )
    device: str = _f("auto", "auto (CUDA if available) | cpu | cuda | cuda:N")
    data_root: str | None = _f(
        None, "Cityscapes root (default: $CITYSCAPES_DATASET, else the synthetic set)"
    )
    synthetic_train: int = _f(100, "training images of the synthetic set")
    synthetic_val: int = _f(20, "val images of the synthetic set")
    epochs: int = _f(10, "epochs (the post: 10)")
    batch_size: int = _f(6, "images per step (per process under DDP)")
    height: int = _f(512, "training height in pixels (multiple of 8)")
    width: int = _f(1024, "training width in pixels (multiple of 8)")
    workers: int | str = _f(
        4,
        "DataLoader worker processes, or auto: one per CPU core this process may "
        "use (the number is in the run's resolved.workers)",
        type=workers_arg,
    )
    seed: int = _f(0, "seed of the weights, dropout and data order")
    shuffle: bool = _f(
        True,
        "do not shuffle the training data (the post's condition)",
        flag="--no-shuffle",
    )
    flip: bool = _f(False, "random horizontal flips of training images")
    lr: float = _f(5e-4, "Adam learning rate (the value ERFNet was trained with)")
    weight_decay: float = _f(
        1e-4, "Adam weight decay (the value ERFNet was trained with)"
    )
    poly_power: float = _f(
        0.9, "poly decay power per epoch (the value ERFNet was trained with)"
    )
    class_weights: str = _f(
        "none",
        "none | enet (1/ln(1.02 + class share), from the training labels)",
        choices=CLASS_WEIGHTS,
    )
    tf32: str = _f(
        "off",
        f"TF32 for fp32 CUDA matmuls/convolutions (--precision {TF32_MODE} is "
        "fp32 with --tf32 on)",
        choices=TF32_CHOICES,
    )
    channels_last: bool = _f(False, "model and inputs in channels_last memory format")
    cudnn_benchmark: bool = _f(
        False,
        "torch.backends.cudnn.benchmark = True: cuDNN times its algorithms for "
        "each new input shape and keeps the fastest (no effect on a CPU)",
    )
    fused_optimizer: bool = _f(
        False,
        "Adam's fused implementation (torch.optim.Adam(fused=True): one kernel "
        "for all parameters), on CUDA and on a CPU, where it was the fastest of "
        "fused, foreach and for-loop (python -m booktools.bench_step --optimizers)",
    )
    compile: str | None = _f(
        None,
        "torch.compile the model with this mode (default, reduce-overhead: CUDA "
        "graphs, max-autotune, max-autotune-no-cudagraphs), or aot_eager: its "
        "debugging backend, no code generation. The steps that compile are "
        "timed apart (epoch compile_s, kept out of step_s). Inductor needs a C++ "
        "compiler on a CPU and Triton on a GPU",
        choices=COMPILE_MODES,
        metavar="MODE",
    )
    data_cache: str = _f(
        "none",
        "none: decode and resize every image in DataLoader workers, every epoch; "
        "host or device: decode the train and val images once, at the training "
        "size, to uint8 in host or GPU memory (4 bytes per pixel, checked before "
        "it is built; --workers processes decode it), then flip and normalise "
        "each batch on the device, with no loader workers. On a CPU, device is "
        "host. The same batches as none with --workers 0",
        choices=DATA_CACHES,
    )
    fp16_stream: bool = _f(
        False,
        "keep the encoder's residual stream in the autocast dtype, fp16 under "
        "amp-fp16 and bf16 under amp-bf16: ERFNet's downsamplers cast their pool "
        "branch to the conv's dtype (default: the reference ERFNet, whose stream "
        "autocast promotes to fp32; no effect in fp32). --fp16-stream is its "
        "older name",
        flag="--16-bit-stream",
        aliases=("--fp16-stream",),
    )
    deterministic: bool = _f(False, "torch.use_deterministic_algorithms(True)")
    clip_grad: float | None = _f(
        None, "clip the gradient norm to this value (after scaler.unscale_)"
    )
    accumulate: int = _f(1, "accumulate gradients over N batches per optimizer step")
    max_nonfinite: int = _f(
        20,
        "stop after this many consecutive steps skipped for non-finite "
        "loss/gradients (checked at each host sync: see --sync-every)",
    )
    sync_every: int = _f(
        1,
        "read the losses and the skipped-step flags to the host every N batches "
        "(and at each epoch's end) instead of every batch, so the host can queue "
        "work ahead of the GPU. Counts stay exact; --max-nonfinite is checked at "
        "each read, so a run may stop up to N-1 batches later. Steps skip on the "
        "device only with --fused-optimizer (else one read per optimizer step)",
    )
    out: str | None = _f(
        None, "folder for NAME.json and NAME.ckpt", cli_default="build/runs"
    )
    name: str | None = _f(None, "run name (default: from the settings)")
    resume: bool = _f(False, "continue from OUT/NAME.ckpt")
    overwrite: bool = _f(
        False,
        "replace an earlier run's OUT/NAME.json and OUT/NAME.ckpt (refused without it)",
    )
    checkpoint: bool = _f(True, "do not write checkpoints", flag="--no-checkpoint")
    save_predictions: str | None = _f(
        None, "write the last epoch's val predictions (labelId PNGs) to this folder"
    )
    quiet: bool = _f(False, "print nothing but errors")
    progress: bool | None = _f(
        None,
        "progress bar: on | off (default: on when stderr is a terminal)",
        choices=("on", "off"),
    )

    def __post_init__(self):
        if self.precision == TF32_MODE:  # the ladder's and the doctor's name for it
            self.precision, self.tf32 = "fp32", "on"
        for name in ("out", "save_predictions"):  # "~" as the checks read it (quoted)
            value = getattr(self, name)
            if isinstance(value, str) and value.startswith("~"):
                setattr(self, name, os.path.expanduser(value))


def run_name(cfg: TrainConfig) -> str:
    """``cfg.name``, or a name built from the settings that change the numbers."""
    if cfg.name:
        return cfg.name
    size = f"{cfg.width}x{cfg.height}"
    parts = [cfg.precision, size, f"bs{cfg.batch_size}", f"e{cfg.epochs}"]
    tags = (
        (True, f"seed{cfg.seed}"),
        (cfg.tf32 == "on", "tf32"),
        (cfg.channels_last, "cl"),
        (cfg.fp16_stream, "fp16stream"),
        (cfg.fused_optimizer, "fused"),
        (cfg.compile, f"compile-{cfg.compile}"),
        (not cfg.shuffle, "noshuffle"),
        (cfg.accumulate > 1, f"acc{cfg.accumulate}"),
    )
    return "-".join(parts + [tag for on, tag in tags if on])


@dataclass
class Resolved:
    device: torch.device  # noqa: F821 -- an annotation only (torch is not loaded here)
    autocast_dtype: torch.dtype | None  # noqa: F821
    grad_scaler: bool
    warnings: list[str]
    rank: int = 0
    world_size: int = 1
    workers: int = 0  # DataLoader worker processes ("auto" resolved)
    cpu_cores: int = 1  # cores this process may use


def ranks() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's variables, checked."""
    values = []
    for key, least in (("WORLD_SIZE", 1), ("RANK", 0), ("LOCAL_RANK", 0)):
        text = os.environ.get(key, "").strip() or str(least)
        try:
            values.append(int(text))
        except ValueError:
            values.append(None)
        if values[-1] is None or values[-1] < least:
            raise ConfigError(
                f"environment variable {key}={text!r} is not an integer >= {least}; "
                f"unset it (torchrun sets it for each process)"
            )
    ws, rank, local = values
    if rank >= ws:
        raise ConfigError(
            f"environment variable RANK={rank} is not below WORLD_SIZE={ws}; unset "
            "both (torchrun sets them)"
        )
    if ws > 1:
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
        if missing:
            raise ConfigError(
                f"WORLD_SIZE={ws} asks for {ws} processes, but {' and '.join(missing)} "
                "is not set: start them with torchrun --nproc_per_node "
                f"{ws} -m ampbook.train ..., or unset WORLD_SIZE for one process"
            )
    return rank, ws, local


def local_processes() -> int:
    """Training processes on this machine (torchrun's ``LOCAL_WORLD_SIZE``; 1 alone)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def validate(cfg: TrainConfig) -> Resolved:
    """Check the settings before any work; ``ConfigError`` names the first problem."""
    import torch

    from ampbook.core.precision import AUTOCAST_DTYPES, check_precision

    try:
        check_precision(cfg.precision)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    _check_numbers(cfg)
    _check_choices(cfg)
    _check_paths(cfg)
    _check_size_and_resume(cfg)
    rank, world_size, local_rank = ranks()
    device = _device(cfg, world_size, local_rank)
    if cfg.fused_optimizer and device.type not in fused_devices():
        raise ConfigError(
            f"fused_optimizer: this torch ({torch.__version__}) has no fused Adam for "
            f"{device.type} (it has one for {', '.join(fused_devices())}); drop "
            "--fused-optimizer"
        )
    if cfg.compile is not None:
        check_compile(cfg.compile, device)
    dtype = AUTOCAST_DTYPES[cfg.precision]
    notes = _notes(cfg, device, dtype)
    cores, workers = cpu_cores(), cfg.workers
    if workers == "auto":  # the cores, shared among this machine's training processes
        workers = max(1, cores // local_processes())
    # open files: about 6 per worker measured (19 open with 2 workers, 64 with 8), so
    # 8 each with room to spare, and 8 for the run's own files
    if workers:
        try:
            need = f"{workers} DataLoader worker processes"
            cli.check_open_files(8 + 8 * workers, need)
        except cli.UserError as err:
            raise ConfigError(f"{err}, or use fewer --workers") from None
    fp16 = dtype is torch.float16  # a GradScaler
    return Resolved(device, dtype, fp16, notes, rank, world_size, workers, cores)


def _check_numbers(cfg: TrainConfig) -> None:
    """Counts, the seed, sizes and rates."""
    for name in (
        "epochs batch_size accumulate max_nonfinite sync_every synthetic_train "
        "synthetic_val"
    ).split():
        value = getattr(cfg, name)
        if not cli.is_positive_int(value):
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    try:
        cli.check_seed(cfg.seed)
    except cli.UserError as err:
        raise ConfigError(str(err)) from None
    w = cfg.workers
    if w != "auto" and not (isinstance(w, int) and not isinstance(w, bool) and w >= 0):
        raise ConfigError(f"workers must be 0 or more, or 'auto', got {cfg.workers!r}")
    for name in ("height", "width"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or value < 8 or value % 8:
            raise ConfigError(
                f"{name} must be a positive multiple of 8 (ERFNet halves it three "
                f"times), got {value!r}"
            )
    if not (isinstance(cfg.lr, (int, float)) and cfg.lr > 0 and math.isfinite(cfg.lr)):
        raise ConfigError(f"lr must be a positive finite number, got {cfg.lr!r}")
    for name in ("weight_decay", "poly_power"):
        value = getattr(cfg, name)
        if not (value >= 0 and math.isfinite(value)):
            raise ConfigError(f"{name} must be 0 or more, got {value!r}")
    clip = cfg.clip_grad
    if clip is not None and not (clip > 0 and math.isfinite(clip)):
        raise ConfigError(
            f"clip_grad must be a positive number (or None), got {clip!r}"
        )


def _check_choices(cfg: TrainConfig) -> None:
    """The settings that name one of a few choices (None: may be left unset)."""
    for name, choices in (
        ("class_weights", CLASS_WEIGHTS),
        ("compile", (None, *COMPILE_MODES)),
        ("data_cache", DATA_CACHES),
        ("tf32", TF32_CHOICES),
        ("progress", (None, True, False)),
    ):
        value = getattr(cfg, name)
        if value not in choices:
            listed = ", ".join(str(c) for c in choices if c is not None)
            unset = " (or leave it unset)" if None in choices else ""
            what = "compile mode" if name == "compile" else name
            raise ConfigError(
                f"unknown {what} {value!r}; choose one of {listed}{unset}"
            )


def _check_paths(cfg: TrainConfig) -> None:
    """The output folders and the run's name."""
    for name in ("out", "save_predictions"):
        value = getattr(cfg, name)
        if value is not None and not str(value).strip():
            raise ConfigError(
                f"{name} is an empty path; give a folder (or leave it unset)"
            )
        if value is not None:  # long names, a file in the way, read-only
            try:
                cli.check_output_dir(value, name)
            except cli.UserError as err:
                raise ConfigError(str(err)) from None
    name = cfg.name
    if name is not None and (
        not name.strip() or name.startswith(".") or {"/", os.sep} & set(name)
    ):
        raise ConfigError(
            f"name {cfg.name!r} is not a file name: give a name without a path "
            "separator and not starting with '.', or leave it unset"
        )


def _check_size_and_resume(cfg: TrainConfig) -> None:
    """An image size ERFNet can take, and ``resume``'s checkpoint."""
    if (cfg.height // 8) * (cfg.width // 8) < 2:
        raise ConfigError(
            f"{cfg.width}x{cfg.height} (W x H) is too small: ERFNet works at 1/8 of "
            "that size, where batch norm needs more than one value per channel "
            "(a batch may hold one image); use at least 16x8 or 8x16"
        )
    if cfg.resume and cfg.overwrite:
        raise ConfigError(
            "resume and overwrite contradict each other: --resume continues "
            "OUT/NAME, --overwrite replaces it; give one"
        )
    if cfg.resume and not cfg.out:
        raise ConfigError("resume needs out (the folder holding NAME.ckpt)")
    if cfg.resume:
        ckpt = Path(cfg.out) / f"{run_name(cfg)}.ckpt"
        if not ckpt.exists():
            raise ConfigError(
                f"resume: no checkpoint {ckpt} (run name {run_name(cfg)!r}; the name "
                "comes from --name or the settings, which must match the first run)"
            )


def _device(cfg: TrainConfig, world_size: int, local_rank: int):
    """The device to train on (a process's own GPU when there are several)."""
    import torch

    from ampbook.core.devices import pick_device
    from ampbook.core.words import plural

    try:
        device = pick_device(cfg.device)
    except (RuntimeError, ValueError) as err:
        raise ConfigError(str(err)) from None
    if device.type == "cuda" and world_size > 1:  # each process its own GPU
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise ConfigError(
                f"process local_rank {local_rank} of {world_size} has no GPU of its "
                f"own: this machine has {plural(count, 'CUDA device')}; start at most "
                f"{count} per machine"
            )
        device = torch.device("cuda", local_rank)
    return device


def _notes(cfg: TrainConfig, device, dtype) -> list[str]:
    """What the run should know about its precision on this device; ``ConfigError``
    for bf16 on a GPU without it."""
    import torch

    from ampbook.core import env as _env
    from ampbook.core.precision import NATIVE_CPU_FLAGS, native_cpu_flags, short_name

    notes: list[str] = []
    if device.type == "cuda":
        cap = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        if dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported(
            including_emulation=False
        ):
            raise ConfigError(
                f"amp-bf16 needs a GPU with bf16 arithmetic (compute capability 8.0+, "
                f"Ampere or newer); {name} has {cap[0]}.{cap[1]}. Use amp-fp16."
            )
        if dtype is torch.float16 and cap < (7, 0):
            notes.append(
                f"{name} (compute capability {cap[0]}.{cap[1]}) has no tensor cores: "
                "fp16 saves memory there but is unlikely to be faster than fp32"
            )
        if cfg.sync_every > 1 and not cfg.fused_optimizer:
            notes.append(
                f"sync_every {cfg.sync_every} without fused_optimizer: the losses are "
                f"read every {cfg.sync_every} batches, but each optimizer step still "
                "reads its skip flag to the host (only the fused Adam skips on the GPU)"
            )
    else:
        if dtype is not None and not native_cpu_flags(dtype):
            absent = " / ".join(sorted(NATIVE_CPU_FLAGS[dtype]))
            flags = ", ".join(sorted(_env.cpu_flags())) or "none"
            notes.append(
                f"{cfg.precision} on a CPU without {short_name(dtype)} hardware "
                f"({absent} absent; flags: {flags}): it works, but expect it to be "
                "slower than fp32, often many times (measure: python -m ampbook.bench "
                "step)"
            )
        if cfg.tf32 == "on":
            notes.append("tf32 on has no effect on a CPU")
        if cfg.compile == "reduce-overhead":
            notes.append(
                "compile reduce-overhead: its CUDA graphs do not apply on a CPU (it "
                "compiles as default there)"
            )
    return notes


def check_compile(mode: str, device: torch.device) -> None:  # noqa: F821
    """``ConfigError`` when ``torch.compile`` in ``mode`` cannot work on ``device``
    here: no TorchDynamo for this Python, no C++ compiler for Inductor on a CPU, no
    Triton for Inductor on a GPU."""
    import torch._dynamo  # (binds torch too)

    if not torch._dynamo.is_dynamo_supported():
        raise ConfigError(
            "compile: torch.compile does not support this Python "
            f"({sys.version.split()[0]}) with torch {torch.__version__}; run without "
            "--compile"
        )
    if mode == "aot_eager":
        return
    if device.type == "cpu":
        from torch._inductor.cpp_builder import get_cpp_compiler

        try:
            get_cpp_compiler()
        except Exception:  # noqa: BLE001 -- Inductor's InvalidCxxCompiler and kin
            import torch._inductor.config as inductor

            tried = ", ".join(str(c) for c in inductor.cpp.cxx if c)
            raise ConfigError(
                f"compile {mode}: Inductor needs a C++ compiler on a CPU and found "
                f"none (tried {tried}); install g++ or set CXX, or use --compile "
                "aot_eager (no code generation), or run without --compile"
            ) from None
    else:
        from torch.utils._triton import has_triton

        if not has_triton():
            raise ConfigError(
                f"compile {mode}: Inductor needs Triton on a GPU and this environment "
                "has none (pip install triton); or use --compile aot_eager, or run "
                "without --compile"
            )


def check_resumable(saved: dict, cfg: TrainConfig) -> None:
    now = dataclasses.asdict(cfg)
    # a setting newer than the checkpoint was at its default then
    saved = {**dataclasses.asdict(TrainConfig()), **saved}

    def same(k: str) -> bool:  # a cache in host or in GPU memory holds the same bytes
        a, b, cache = saved[k], now[k], ("host", "device")
        return a == b or (k == "data_cache" and a in cache and b in cache)

    diff = [k for k in now if k not in RUNTIME_FIELDS and not same(k)]
    if diff:
        pairs = ", ".join(
            f"{k}: checkpoint {saved.get(k)!r} vs now {now[k]!r}" for k in diff
        )
        raise ConfigError(
            f"resume: the checkpoint was written with other settings ({pairs}); "
            "resume with the same settings or start a new run (another --name)"
        )


def _options():
    """(field, flag, default on the command line) for each ``TrainConfig`` field."""
    for f in dataclasses.fields(TrainConfig):
        flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        yield f, flag, f.metadata.get("cli_default", f.default)


def build_parser() -> argparse.ArgumentParser:
    """The CLI, one option per ``TrainConfig`` field."""
    parser = cli.ArgumentParser(
        prog="python -m ampbook.train",
        description="Train ERFNet in fp32 or with AMP and record the run as JSON.",
        formatter_class=cli.HelpFormatter,
    )
    for f, flag, default in _options():
        meta = {k: v for k, v in f.metadata.items() if k not in ("flag", "cli_default")}
        flags = (flag, *meta.pop("aliases", ()))
        if f.type == "bool":
            action = "store_false" if f.default else "store_true"
            parser.add_argument(*flags, dest=f.name, action=action, help=meta["help"])
        else:
            kind = {"int": int, "float": float, "float | None": float}.get(f.type, str)
            meta.setdefault("type", kind)
            parser.add_argument(flag, dest=f.name, default=default, **meta)
    return parser


def command_line(cfg: TrainConfig) -> str:
    """The ``python -m ampbook.train`` command that runs ``cfg`` (its non-defaults)."""
    parts = ["python -m ampbook.train"]
    for f, flag, default in _options():
        value = getattr(cfg, f.name)
        if value == default or value is None:
            continue
        if f.type == "bool":
            parts.append(flag)
        elif f.name == "progress":
            parts.append(f"{flag} {'on' if value else 'off'}")
        else:
            parts.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


def config_from_args(argv: list[str] | None = None) -> TrainConfig:
    parser = build_parser()  # a bad option: one error line (cli.ArgumentParser)
    parser.set_defaults(tf32=None)  # given or not: --precision fp32-tf32 --tf32 off
    args = vars(parser.parse_args(argv))
    if args["progress"] is not None:
        args["progress"] = args["progress"] == "on"
    if args["precision"] == TF32_MODE and args["tf32"] == "off":
        parser.error(
            f"--precision {TF32_MODE} is fp32 with TF32 on, and --tf32 off turns it "
            f"off: give --precision fp32 --tf32 off (strict fp32) or --precision "
            f"{TF32_MODE}"
        )
    if args["tf32"] is None:
        args["tf32"] = TrainConfig.tf32
    return TrainConfig(**args)


def resume_command(cfg: TrainConfig) -> str:
    """The command that continues the run of ``cfg`` from its checkpoint."""
    line = command_line(dataclasses.replace(cfg, resume=True, overwrite=False))
    world = ranks()[1]
    if world > 1:
        line = line.replace("python -m", f"torchrun --nproc_per_node {world} -m", 1)
    return line
