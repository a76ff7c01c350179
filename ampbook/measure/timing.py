"""Timing CPU and GPU work properly: the one benchmark helper every chapter uses.

1. **Warm up first.** ``warmup`` calls run untimed (caches, lazy initialisation, cuBLAS
   heuristics, CPU frequency ramp-up).
2. **Wait for the work.** GPU kernels run asynchronously: samples are timed with CUDA
   events on CUDA, ``time.perf_counter`` on the CPU, stopped only after ``sync()``.
3. **Many samples, robust statistics.** A sample is ``number`` back-to-back calls
   lasting about ``block_time``, until there are ``repeats`` samples and ``min_time``
   seconds; the result reports the median and the spread of the per-call time.
4. **Random inputs, never zeros**, on which hardware and libraries take shortcuts.
5. **No free cache hits.** When one input set would stay in the last-level cache, the
   calls rotate through ``buffers`` input sets, so that each call reads its inputs from
   memory as inside a real network.
"""

from __future__ import annotations

import contextlib
import glob
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.utils._pytree import tree_leaves

from ampbook.core.args import is_positive_int
from ampbook.core.devices import pick_device
from ampbook.core.precision import DTYPES, SHORT_NAMES, backend_flags
from ampbook.measure.memory import _storage_key_and_bytes


def resolve_dtype(dtype: str | torch.dtype) -> tuple[str, torch.dtype]:
    """``(name, torch dtype)`` for a book dtype name or a dtype: ``"tf32"`` is fp32
    tensors with TF32 tensor-core matmuls, ``"fp8"`` is ``"fp8_e4m3"``."""
    if isinstance(dtype, torch.dtype):
        if dtype not in SHORT_NAMES:
            raise ValueError(
                f"dtype {dtype} is not one the book times; use one of {sorted(DTYPES)}"
            )
        return SHORT_NAMES[dtype], dtype
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(
            f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)} or a torch.dtype"
        )
    return ("fp8_e4m3" if dtype == "fp8" else dtype), DTYPES[dtype]


def random_tensor(
    shape: Sequence[int] | int,
    dtype: str | torch.dtype = "fp32",
    device: str | torch.device = "cpu",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Standard-normal values (never zeros) drawn in fp32 and rounded to ``dtype``."""
    _, torch_dtype = resolve_dtype(dtype)
    x = torch.randn(shape, device=device, dtype=torch.float32, generator=generator)
    return x.to(torch_dtype)


def _quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default method)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] * (1 - (pos - lo)) + s[hi] * (pos - lo)


@dataclass(frozen=True)
class TimingResult:
    """Per-call times of one benchmark: ``times_s`` holds one value per sample (the
    sample's time over its ``number`` calls). Rates use the median time."""

    name: str
    device: str
    times_s: tuple[float, ...]
    number: int
    warmup: int
    buffers: int
    flops: float | None = None
    bytes_moved: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return len(self.times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def p10_s(self) -> float:
        return _quantile(self.times_s, 0.10)

    @property
    def p90_s(self) -> float:
        return _quantile(self.times_s, 0.90)

    @property
    def tflops(self) -> float | None:
        """TFLOP/s at the median time (None without ``flops``)."""
        return None if self.flops is None else self.flops / self.median_s / 1e12

    @property
    def gbps(self) -> float | None:
        """GB/s (1e9 bytes) at the median time (None without ``bytes_moved``)."""
        moved = self.bytes_moved
        return None if moved is None else moved / self.median_s / 1e9

    def to_dict(self) -> dict:
        """JSON-serialisable summary, without the samples."""
        head = ("name", "device", "median_s", "p10_s", "p90_s")
        tail = "samples number warmup buffers flops bytes_moved tflops gbps".split()
        return {
            **{k: getattr(self, k) for k in head},
            "q25_s": _quantile(self.times_s, 0.25),
            "q75_s": _quantile(self.times_s, 0.75),
            "min_s": min(self.times_s),
            **{k: getattr(self, k) for k in tail},
            **self.extra,
        }


def default_sync(device: torch.device) -> Callable[[], None]:
    """What waits for outstanding work on ``device``: ``torch.cuda.synchronize`` on
    CUDA, nothing on the CPU (its PyTorch ops return when done)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class _Clock:
    """CUDA events on the current stream around the work on CUDA, else the host's
    monotonic clock; ``sync()`` before the start and before the reading."""

    def __init__(self, device: torch.device, sync: Callable[[], None]):
        self.cuda = device.type == "cuda"
        self.sync = sync

    def start(self) -> None:
        self.sync()
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        if not self.cuda:
            self.sync()
            return time.perf_counter() - self._t0
        self._end.record()
        self._end.synchronize()
        self.sync()
        return self._start.elapsed_time(self._end) / 1e3


DEFAULT_CACHE_BYTES = 64 * 2**20
CPU_CACHE_GLOB = "/sys/devices/system/cpu/cpu0/cache/index*/size"


def last_level_cache(device: str | torch.device = "cpu") -> tuple[int, str]:
    """``(bytes, where the figure came from)`` for the last-level cache the inputs could
    sit in: the GPU's L2, or the largest cache the OS lists for CPU 0
    (``CPU_CACHE_GLOB``); ``DEFAULT_CACHE_BYTES``, assumed, when neither says."""
    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        size = getattr(props, "L2_cache_size", 0) or getattr(props, "l2_cache_size", 0)
        if size:
            return int(size), "the GPU's L2, from the CUDA device properties"
        return DEFAULT_CACHE_BYTES, "not exposed by CUDA: assumed"
    best = 0
    try:
        for path in glob.glob(CPU_CACHE_GLOB):
            with open(path) as f:
                text = f.read().strip().upper()
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * mult)
    except (OSError, ValueError):
        best = 0
    if best:
        return best, "the largest cache the OS lists for CPU 0 (/sys)"
    return DEFAULT_CACHE_BYTES, "not exposed by the OS: assumed"


def _tensors(args: Iterable[Any]) -> list[torch.Tensor]:
    return [t for t in tree_leaves(args) if isinstance(t, torch.Tensor)]


def working_set_bytes(args: Iterable[Any]) -> int:
    """Bytes of all tensors in one input set (each storage counted once)."""
    return sum(dict(_storage_key_and_bytes(t) for t in _tensors(args)).values())


def buffers_needed(
    working_set: int,
    cache_bytes: int,
    max_buffers: int = 64,
    max_total_bytes: int = 2**30,
) -> int:
    """Input sets to rotate through so that a set is evicted before it is reused: enough
    to cover twice the cache (one when the working set alone does), at most
    ``max_buffers`` and ``max_total_bytes`` in all."""
    if working_set <= 0 or working_set >= 2 * cache_bytes:
        return 1
    k = math.ceil(2 * cache_bytes / working_set)
    return max(1, min(k, max_buffers, max_total_bytes // working_set))


def _check_not_zero(args: tuple, name: str) -> None:
    fp8 = (DTYPES["fp8_e4m3"], DTYPES["fp8_e5m2"])
    for t in _tensors(args):
        floating = t.is_floating_point() and t.numel() > 0
        if floating and not bool((t.float() if t.dtype in fp8 else t).ne(0).any()):
            raise ValueError(
                f"{name or 'benchmark'}: an input tensor of shape {tuple(t.shape)} is "
                "all zeros; time with random inputs (measure.timing.random_tensor), "
                "since hardware and libraries can take shortcuts on zeros"
            )


def machine_load() -> dict:
    """1-minute load average, usable CPUs, and ``busy`` above 1.5 runnable tasks per
    CPU, where a multi-threaded kernel waits milliseconds for its descheduled threads:
    report it beside any CPU measurement."""
    try:  # Linux: the CPUs this process may use
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        load1 = os.getloadavg()[0]
    except (AttributeError, OSError):
        return {"load1": None, "cpus": cpus, "busy": False}
    return {"load1": load1, "cpus": cpus, "busy": load1 > 1.5 * cpus}


def load_verdict(load: dict, device_type: str) -> str:
    """One line: was the machine busy while CPU timings were taken?"""
    level = "unknown" if load.get("load1") is None else f"{load['load1']:.1f}"
    head = f"load average {level} on {load['cpus']} CPUs: "
    if device_type != "cpu":
        return head + "GPU timings do not depend on it much."
    if load.get("busy"):
        return head + "BUSY, read the CPU timings below as this busy machine's."
    if load.get("load1") is None or load["load1"] > 0.5 * load["cpus"]:
        return head + "shared with other work, expect noisy CPU timings below."
    return head + "quiet, the CPU timings below are the CPU's."


def benchmark(
    fn: Callable[..., Any],
    make_inputs: Callable[[], Any] | None = None,
    *,
    flops: float | None = None,
    bytes_moved: float | None = None,
    device: str | torch.device | None = None,
    warmup: int = 3,
    repeats: int = 10,
    min_time: float = 0.1,
    max_time: float | None = None,
    number: int | None = None,
    block_time: float = 1e-3,
    buffers: int | None = None,
    cache_bytes: int | None = None,
    sync: Callable[[], None] | None = None,
    check_inputs: bool = True,
    name: str = "",
    extra: dict | None = None,
) -> TimingResult:
    """Time ``fn(*make_inputs())`` by the module docstring's rules. ``make_inputs``
    returns one input set (a tuple, or one argument; None: ``fn()``); ``flops`` and
    ``bytes_moved`` are the work per call, for the rates. ``device=None``: the first
    input tensor's, else the CPU; ``"auto"``: CUDA when available. ``warmup=0`` shows
    what a cold start costs. ``max_time`` stops sampling early (after at least
    ``min(3, repeats)`` samples). ``number=None`` picks the calls per sample from the
    fastest warm-up call (1 without warm-up). ``buffers=None`` sizes the rotation
    against ``cache_bytes`` (the machine's last-level cache when None).
    ``check_inputs=False`` allows all-zero inputs (accumulators)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if make_inputs is not None and not callable(make_inputs):
        raise TypeError(
            "make_inputs must be a callable returning one input set "
            f"(got {type(make_inputs).__name__}); wrap fixed tensors as lambda: (a, b)"
        )
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if min_time < 0 or (max_time is not None and max_time <= 0):
        raise ValueError(
            f"min_time must be >= 0 and max_time > 0 (got {min_time}, {max_time})"
        )
    if number is not None and number < 1:
        raise ValueError(f"number (calls per sample) must be >= 1, got {number}")
    if buffers is not None and buffers < 1:
        raise ValueError(f"buffers must be >= 1, got {buffers}")
    if flops is not None and flops < 0 or bytes_moved is not None and bytes_moved < 0:
        raise ValueError("flops and bytes_moved must be non-negative")
    inputs, dev = _input_sets(
        make_inputs, device, buffers, cache_bytes, check_inputs, name
    )
    clock = _Clock(dev, sync if sync is not None else default_sync(dev))

    def run(first: int, calls: int) -> float:
        clock.start()
        for i in range(first, first + calls):
            fn(*inputs[i % len(inputs)])
        return clock.stop()

    warm_times = [run(i, 1) for i in range(warmup)]
    if number is None:  # a sample lasts about block_time (1 call without warm-up)
        fastest = max(min(warm_times, default=0.0), 1e-9)
        number = max(1, min(100_000, math.ceil(block_time / fastest))) if warmup else 1
    times: list[float] = []
    total = 0.0
    while True:
        elapsed = run(warmup + len(times) * number, number)
        times.append(elapsed / number)
        total += elapsed
        n = len(times)
        cut = max_time is not None and total >= max_time and n >= min(3, repeats)
        if n >= repeats and total >= min_time or cut:
            break
    counts = dict(number=number, warmup=warmup, buffers=len(inputs))
    work = dict(flops=flops, bytes_moved=bytes_moved, extra=dict(extra or {}))
    return TimingResult(name, str(dev), tuple(times), **counts, **work)


def _input_sets(make_inputs, device, buffers, cache_bytes, check, name):
    """(the input sets to rotate through, the device the work runs on)."""

    def make() -> tuple:
        value = make_inputs()
        return value if isinstance(value, tuple) else (value,)

    first = make() if make_inputs is not None else ()
    if check:
        _check_not_zero(first, name)
    if device is None:
        tensors = _tensors(first)
        dev = tensors[0].device if tensors else torch.device("cpu")
    else:
        dev = pick_device(device)
    if make_inputs is None:
        return [()], dev
    if buffers is None:
        cache = cache_bytes if cache_bytes is not None else last_level_cache(dev)[0]
        buffers = buffers_needed(working_set_bytes(first), cache)
    return [first] + [make() for _ in range(buffers - 1)], dev


def prepare_op(dtype, device, seed: int, op: str | None = None):
    """``(dtype name, device, seeded generator, bytes per element)`` for a timed op.
    ``op`` names one that runs in fp64/fp32/fp16/bf16 only; without it (matmuls) tf32
    and fp8 get a clear error where ``device`` has no tensor cores for them."""
    name, torch_dtype = resolve_dtype(dtype)
    tensor_core = name == "tf32" or name.startswith("fp8")
    if op is not None and tensor_core:
        raise ValueError(f"{op} timing supports fp64/fp32/fp16/bf16, not {name}")
    dev = pick_device(device)
    if tensor_core:
        need = (8, 0) if name == "tf32" else (8, 9)
        cap = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else None
        if cap is None or cap < need:
            have = f"device {dev} has none" if cap is None else f"this GPU is {cap}"
            raise ValueError(
                f"{name} matmuls need NVIDIA tensor cores of compute capability "
                f"{need[0]}.{need[1]}+ (fp8: and torch._scaled_mm); {have}"
                + (": time 'fp32' instead" if name == "tf32" else "")
            )
    gen = torch.Generator(device=dev).manual_seed(seed)
    return name, dev, gen, torch.empty((), dtype=torch_dtype).element_size()


def time_op(fn, make, dev, name, extra, flops, moved, kwargs) -> TimingResult:
    """``benchmark`` of one op; ``kwargs`` may override ``name`` and add ``extra``."""
    kwargs.setdefault("name", name)
    extra = {**extra, **(kwargs.pop("extra", None) or {})}
    return benchmark(
        fn, make, flops=flops, bytes_moved=moved, device=dev, extra=extra, **kwargs
    )


def time_matmul(
    n: int,
    m: int | None = None,
    k: int | None = None,
    dtype: str | torch.dtype = "fp32",
    device: str | torch.device = "auto",
    seed: int = 0,
    **kwargs,
) -> TimingResult:
    """Time ``C = A @ B``, A n x k, B k x m (``m``, ``k`` default to ``n``), counting
    the minimum traffic (A and B read, C written once). fp8 runs through
    ``torch._scaled_mm`` (unit scales, bf16 output, B column-major, sizes multiples of
    16). Other keyword arguments go to ``benchmark``."""
    m = n if m is None else m
    k = n if k is None else k
    for label, v in (("n", n), ("m", m), ("k", k)):
        if not is_positive_int(v):
            raise ValueError(
                f"matmul size {label} must be a positive integer, got {v!r}"
            )
    name, dev, gen, itemsize = prepare_op(dtype, device, seed)
    if name.startswith("fp8"):
        if n % 16 or m % 16 or k % 16:
            raise ValueError(
                f"fp8 matmul sizes must be multiples of 16, got n={n}, m={m}, k={k}"
            )
        one = torch.ones((), device=dev, dtype=torch.float32)

        def make():  # B column-major k x m
            a, b = (random_tensor(s, name, dev, gen) for s in ((n, k), (m, k)))
            return a, b.t()

        def fn(a, b):
            return torch._scaled_mm(
                a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16
            )

        out_bytes = n * m * 2
    else:

        def make():  # A, B and the output buffer C, overwritten
            shapes = ((n, k), (k, m), (n, m))
            return tuple(random_tensor(s, name, dev, gen) for s in shapes)

        def fn(a, b, c):
            return torch.matmul(a, b, out=c)

        out_bytes = n * m * itemsize
    extra = {"kind": "matmul", "dtype": name, "n": n, "m": m, "k": k}
    flops = 2 * n * m * k  # one multiply and one add per term
    moved = (n * k + k * m) * itemsize + out_bytes
    flags = backend_flags(matmul_tf32=name == "tf32")  # CUDA "fp32": no TF32
    with flags if dev.type == "cuda" else contextlib.nullcontext():
        return time_op(
            fn, make, dev, f"matmul {name} {n}x{k}x{m}", extra, flops, moved, kwargs
        )


def time_elementwise(
    numel: int,
    dtype: str | torch.dtype = "fp32",
    device: str | torch.device = "auto",
    seed: int = 0,
    **kwargs,
) -> TimingResult:
    """Time ``z = x + y`` over ``numel`` elements (into a preallocated ``z``): a
    memory-bound op, 1 FLOP per 3 elements moved."""
    if not is_positive_int(numel):
        raise ValueError(f"numel must be a positive integer, got {numel!r}")
    name, dev, gen, itemsize = prepare_op(dtype, device, seed, "elementwise")

    def make():  # x, y and the output buffer z, overwritten
        return tuple(random_tensor(numel, name, dev, gen) for _ in range(3))

    def fn(x, y, z):
        return torch.add(x, y, out=z)

    extra = {"kind": "elementwise", "dtype": name, "numel": numel}
    return time_op(
        fn, make, dev, f"add {name} {numel}", extra, numel, 3 * numel * itemsize, kwargs
    )


_ONE_CALL = dict(
    warmup=0, repeats=1, number=1, min_time=0.0, buffers=1, check_inputs=False
)


def one_call(fn, args: tuple = (), device=None) -> float:
    """Seconds of one call ``fn(*args)``, by ``benchmark``'s clock (no warm-up)."""
    return benchmark(fn, lambda: args, device=device, **_ONE_CALL).median_s


def time_rounds(
    steps: dict[str, tuple], rounds: int = 5, warmup: bool = True
) -> dict[str, list[float]]:
    """``{name: [seconds, one per round]}`` for ``{name: (step, batch, device)}``: one
    untimed warm-up round (unless ``warmup`` is False), then ``rounds`` rounds that
    time one call ``step(*batch)`` of each in turn (so load drifts hit all alike)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(0 if warmup else 1, rounds + 1):
        for name, (step, batch, dev) in steps.items():
            t = one_call(step, batch, dev)
            if r:
                times[name].append(t)
    return times
