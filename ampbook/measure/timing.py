"""Timing CPU and GPU work properly: the one benchmark helper every chapter uses.

A measurement here follows five rules:

1. **Warm up first.** ``warmup`` calls run untimed (caches, lazy initialisation, cuBLAS
   heuristics, CPU frequency ramp-up); they never enter the statistics.
2. **Wait for the work.** GPU kernels run asynchronously: on CUDA each sample is timed
   with CUDA events and the clock stops only after the work is done; on the CPU a
   monotonic clock (``time.perf_counter``) is read after ``sync()``. ``sync`` defaults
   to ``torch.cuda.synchronize`` on CUDA and to nothing on the CPU; pass your own for
   other asynchronous work.
3. **Many samples, robust statistics.** A sample is a block of ``number`` back-to-back
   calls (chosen so that a block lasts about ``block_time``); sampling continues until
   there are ``repeats`` samples and ``min_time`` seconds of measurement. The result
   reports the median and the spread (10th/90th and 25th/75th percentiles) of the
   per-call time.
4. **Fresh random inputs, never zeros.** ``make_inputs()`` builds one set of arguments;
   all-zero floating-point inputs are refused (hardware and libraries can take shortcuts
   on zeros).
5. **No free cache hits.** When one input set would stay in the last-level cache between
   calls, ``buffers`` input sets are made and the calls rotate through them, so that
   each call reads its inputs from memory as it would inside a real network. The number
   is sized from the working set against the cache size (``cache_bytes``, read from the
   machine when not given).

Typical use: ``time_matmul(4096, 4096, 4096, "fp16", "cuda").median_s``, or
``benchmark(torch.add, make_inputs, bytes_moved=...)`` for any callable.

Dtype names used across the book: ``"fp32"``, ``"tf32"`` (fp32 tensors with TF32
tensor-core matmuls allowed; CUDA only), ``"fp16"``, ``"bf16"``, ``"fp8"`` (=
``"fp8_e4m3"``, CUDA with compute capability 8.9 or newer), ``"fp64"``.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from ampbook.core.args import is_positive_int
from ampbook.core.devices import pick_device
from ampbook.core.precision import DTYPES, SHORT_NAMES, backend_flags
from ampbook.core.words import plural

# --- dtypes (names: ampbook.core.precision) ---


def resolve_dtype(dtype: str | torch.dtype) -> tuple[str, torch.dtype]:
    """``(name, torch dtype)`` for a book dtype name (``"fp16"``...) or a
    ``torch.dtype``."""
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
    torch_dtype = DTYPES[dtype]
    if torch_dtype is None:
        raise ValueError(
            f"dtype {dtype!r} needs a PyTorch with float8 types (this is "
            f"{torch.__version__})"
        )
    return ("fp8_e4m3" if dtype == "fp8" else dtype), torch_dtype


def random_tensor(
    shape: Sequence[int] | int,
    dtype: str | torch.dtype = "fp32",
    device: str | torch.device = "cpu",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Standard-normal random values (never zeros) in ``dtype`` on ``device``.

    Values are drawn in fp32 and rounded to the format (fp8 included)."""
    _, torch_dtype = resolve_dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    x = torch.randn(shape, device=device, dtype=torch.float32, generator=generator)
    return x.to(torch_dtype)


# --- Result ---


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values (numpy's default
    method)."""
    if not sorted_values:
        raise ValueError("no samples")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac


@dataclass(frozen=True)
class TimingResult:
    """Per-call times of one benchmark and what follows from them.

    ``times_s`` holds one value per sample: the sample's time divided by the calls in it
    (``number``). Rates (``tflops``, ``gbps``) use the median time."""

    name: str
    device: str
    times_s: tuple[float, ...]
    number: int
    warmup: int
    buffers: int
    flops: float | None = None
    bytes_moved: float | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.times_s:
            raise ValueError("a TimingResult needs at least one sample")

    @property
    def _sorted(self) -> list[float]:
        return sorted(self.times_s)

    @property
    def samples(self) -> int:
        return len(self.times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def p10_s(self) -> float:
        return _quantile(self._sorted, 0.10)

    @property
    def p90_s(self) -> float:
        return _quantile(self._sorted, 0.90)

    @property
    def q25_s(self) -> float:
        return _quantile(self._sorted, 0.25)

    @property
    def q75_s(self) -> float:
        return _quantile(self._sorted, 0.75)

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def tflops(self) -> float | None:
        """TFLOP/s at the median time (None when ``flops`` was not given)."""
        return None if self.flops is None else self.flops / self.median_s / 1e12

    @property
    def gbps(self) -> float | None:
        """GB/s (1e9 bytes) at the median time (None when ``bytes_moved`` was not
        given)."""
        return (
            None if self.bytes_moved is None else self.bytes_moved / self.median_s / 1e9
        )

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity: FLOPs per byte moved (the roofline's x axis)."""
        if self.flops is None or not self.bytes_moved:
            return None
        return self.flops / self.bytes_moved

    def fraction_of_peak(self, peak: float, unit: str | None = None) -> float:
        """Median rate divided by ``peak``.

        ``unit`` is ``"tflops"`` (peak in TFLOP/s) or ``"gbps"`` (peak in GB/s); by
        default TFLOP/s when ``flops`` was given, else GB/s."""
        if peak is None or not peak > 0:
            raise ValueError(f"peak must be a positive number, got {peak!r}")
        if unit is None:
            unit = "tflops" if self.flops is not None else "gbps"
        if unit == "tflops":
            if self.tflops is None:
                raise ValueError(
                    f"{self.name or 'this result'} has no flops; pass flops= to "
                    "benchmark "
                    "or compare with a bandwidth peak (unit='gbps')"
                )
            return self.tflops / peak
        if unit == "gbps":
            if self.gbps is None:
                raise ValueError(
                    f"{self.name or 'this result'} has no bytes_moved; pass "
                    "bytes_moved= "
                    "to benchmark or compare with a compute peak (unit='tflops')"
                )
            return self.gbps / peak
        raise ValueError(f"unit must be 'tflops' or 'gbps', got {unit!r}")

    def to_dict(self) -> dict:
        """JSON-serialisable summary, without the samples (``dataclasses.asdict`` has
        them)."""
        out = {
            "name": self.name,
            "device": self.device,
            "median_s": self.median_s,
            "p10_s": self.p10_s,
            "p90_s": self.p90_s,
            "q25_s": self.q25_s,
            "q75_s": self.q75_s,
            "min_s": self.min_s,
            "samples": self.samples,
            "number": self.number,
            "warmup": self.warmup,
            "buffers": self.buffers,
            "flops": self.flops,
            "bytes_moved": self.bytes_moved,
            "tflops": self.tflops,
            "gbps": self.gbps,
        }
        out.update(self.extra)
        return out

    def __str__(self) -> str:
        rate = []
        if self.tflops is not None:
            rate.append(f"{self.tflops:.3g} TFLOP/s")
        if self.gbps is not None:
            rate.append(f"{self.gbps:.3g} GB/s")
        return (
            f"{self.name or 'benchmark'} on {self.device}: median "
            f"{_fmt_s(self.median_s)} "
            f"(p10 {_fmt_s(self.p10_s)}, p90 {_fmt_s(self.p90_s)}, "
            f"{plural(self.samples, 'sample')} x {plural(self.number, 'call')}, "
            f"{plural(self.buffers, 'input set')})"
            + (", " + ", ".join(rate) if rate else "")
        )


def _fmt_s(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


# --- Clocks ---


def default_sync(device: torch.device) -> Callable[[], None]:
    """What waits for outstanding work on ``device``: ``torch.cuda.synchronize`` on
    CUDA, nothing on the CPU (its PyTorch ops return when done)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class _HostClock:
    """Monotonic host clock; ``sync()`` runs before reading the clock at both ends."""

    def __init__(self, sync: Callable[[], None]):
        self.sync = sync

    def start(self) -> None:
        self.sync()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        self.sync()
        return time.perf_counter() - self._t0


class _CudaEventClock:
    """CUDA events recorded on the current stream around the work; the elapsed time is
    read after the end event completed (the host waits for it, and runs ``sync``)."""

    def __init__(self, device: torch.device, sync: Callable[[], None]):
        self.device = device
        self.sync = sync

    def start(self) -> None:
        self.sync()
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._start.record()

    def stop(self) -> float:
        self._end.record()
        self._end.synchronize()
        self.sync()
        return self._start.elapsed_time(self._end) / 1e3


def _clock(device: torch.device, sync: Callable[[], None]):
    return _CudaEventClock(device, sync) if device.type == "cuda" else _HostClock(sync)


# --- Cache size and input rotation ---

DEFAULT_CACHE_BYTES = 64 * 2**20


CPU_CACHE_GLOB = "/sys/devices/system/cpu/cpu0/cache/index*/size"


def last_level_cache(device: str | torch.device = "cpu") -> tuple[int, str]:
    """``(bytes, where the figure came from)`` for the last-level cache the inputs could
    sit in: the GPU's L2 (CUDA device properties), or the largest cache the OS lists for
    CPU 0 (``CPU_CACHE_GLOB``); ``DEFAULT_CACHE_BYTES`` with "not exposed" when
    neither says."""
    device = torch.device(device) if not isinstance(device, torch.device) else device
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        size = getattr(props, "L2_cache_size", 0) or getattr(props, "l2_cache_size", 0)
        if size:
            return int(size), "the GPU's L2, from the CUDA device properties"
        return DEFAULT_CACHE_BYTES, "not exposed by CUDA: assumed"
    best = 0
    try:
        import glob

        for path in glob.glob(CPU_CACHE_GLOB):
            with open(path) as f:
                text = f.read().strip().upper()
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            digits = text[:-1] if text[-1:] in "KMG" else text
            best = max(best, int(digits) * mult)
    except (OSError, ValueError):
        best = 0
    if best:
        return best, "the largest cache the OS lists for CPU 0 (/sys)"
    return DEFAULT_CACHE_BYTES, "not exposed by the OS: assumed"


def cache_bytes_of(device: str | torch.device = "cpu") -> int:
    """Size of the last-level cache the inputs could sit in: the GPU's L2, or the CPU's
    largest cache (from /sys); 64 MiB when unknown (``last_level_cache`` says
    which)."""
    return last_level_cache(device)[0]


def _tensors(args: Iterable[Any]) -> list[torch.Tensor]:
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_tensors(a))
        elif isinstance(a, dict):
            out.extend(_tensors(a.values()))
    return out


def working_set_bytes(args: Iterable[Any]) -> int:
    """Bytes of all tensors in one input set (each storage counted once)."""
    seen, total = set(), 0
    for t in _tensors(args):
        key = (t.untyped_storage().data_ptr(), t.device)
        if key in seen:
            continue
        seen.add(key)
        total += t.untyped_storage().nbytes()
    return total


def buffers_needed(
    working_set: int,
    cache_bytes: int,
    max_buffers: int = 64,
    max_total_bytes: int = 2**30,
) -> int:
    """How many input sets to rotate through so that a set is evicted before it is
    reused.

    One set when the working set alone is at least twice the cache; otherwise enough
    sets to cover twice the cache, at most ``max_buffers`` and at most
    ``max_total_bytes`` in all."""
    if working_set <= 0:
        return 1
    if working_set >= 2 * cache_bytes:
        return 1
    k = math.ceil(2 * cache_bytes / working_set)
    k = min(k, max_buffers, max(1, max_total_bytes // working_set))
    return max(1, k)


def _as_args(value: Any) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _check_not_zero(args: tuple, name: str) -> None:
    for t in _tensors(args):
        if t.is_floating_point() and t.numel() > 0:
            fp8 = (DTYPES["fp8_e4m3"], DTYPES["fp8_e5m2"])
            probe = t.float() if t.dtype in fp8 else t
            if not bool(probe.ne(0).any()):
                raise ValueError(
                    f"{name or 'benchmark'}: an input tensor of shape {tuple(t.shape)} "
                    "is all "
                    "zeros; time with random inputs "
                    "(ampbook.measure.timing.random_tensor), "
                    "since "
                    "hardware and libraries can take shortcuts on zeros"
                )


def machine_load() -> dict:
    """How busy the machine is: 1-minute load average, usable CPUs, and ``busy`` when
    the load exceeds 1.5 runnable tasks per CPU. On a busy machine CPU timings are
    unreliable: a multi-threaded kernel waits for its descheduled threads (milliseconds
    per parallel region), so report ``busy`` beside any CPU measurement."""
    import os

    try:
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


# --- benchmark ---


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
    max_repeats: int = 10_000,
    number: int | None = None,
    block_time: float = 1e-3,
    buffers: int | None = None,
    cache_bytes: int | None = None,
    max_buffer_bytes: int = 2**30,
    sync: Callable[[], None] | None = None,
    check_inputs: bool = True,
    name: str = "",
    extra: dict | None = None,
) -> TimingResult:
    """Time ``fn(*make_inputs())``; see the module docstring for the method.

    Parameters
    ----------
    fn: the work. Called as ``fn(*args)`` with one input set per call.
    make_inputs: returns one input set (a tuple of arguments, or a single argument).
        Called ``buffers`` times before timing starts. ``None``: ``fn()`` takes no
        arguments.
    flops, bytes_moved: work per call, for TFLOP/s, GB/s, intensity and fraction of
        peak.
    device: where the work runs (decides the clock and the default ``sync``).
        ``None``: the device of the first input tensor, else the CPU. ``"auto"``: CUDA
        when available.
    warmup: untimed calls first (0 allowed, to see what a cold start costs).
    repeats: at least this many samples; ``min_time``: and at least this many seconds
        of measurement; ``max_time``: stop once this many seconds were measured (after
        at least ``min(3, repeats)`` samples); ``max_repeats``: hard cap on samples.
    number: calls per sample; ``None`` picks it so a sample lasts about
        ``block_time`` (from the fastest warm-up call; 1 without warm-up).
    buffers: input sets to rotate through; ``None`` sizes it from the working set
        against ``cache_bytes`` (the machine's last-level cache when ``None``), at most
        ``max_buffer_bytes`` of inputs in all.
    sync: waits for outstanding asynchronous work; default from ``device``.
    check_inputs: refuse floating-point input tensors that are all zeros (checked on
        the first set; turn off for arguments that are legitimately zero, e.g.
        accumulators).
    name, extra: label and extra fields copied into the result (``to_dict``).
    """
    _check_settings(fn, make_inputs, warmup, repeats, min_time, max_time, number)
    if buffers is not None and buffers < 1:
        raise ValueError(f"buffers must be >= 1, got {buffers}")
    if flops is not None and flops < 0 or bytes_moved is not None and bytes_moved < 0:
        raise ValueError("flops and bytes_moved must be non-negative")
    inputs, dev = _input_sets(
        make_inputs, device, buffers, cache_bytes, max_buffer_bytes, check_inputs, name
    )
    sync = sync if sync is not None else default_sync(dev)
    clock = _clock(dev, sync)
    warm_times = [_call(fn, inputs, i, clock) for i in range(warmup)]
    if number is None:  # a sample lasts about block_time
        fastest = max(min(warm_times), 1e-9) if warm_times else None
        number = (
            1 if not fastest else max(1, min(100_000, math.ceil(block_time / fastest)))
        )
    times: list[float] = []
    total = 0.0
    call = warmup
    floor = min(3, repeats)
    while True:
        clock.start()
        for _ in range(number):
            fn(*inputs[call % len(inputs)])
            call += 1
        elapsed = clock.stop()
        times.append(elapsed / number)
        total += elapsed
        n = len(times)
        if n >= max_repeats:
            break
        if max_time is not None and total >= max_time and n >= floor:
            break
        if n >= repeats and total >= min_time:
            break
    return TimingResult(
        name=name,
        device=str(dev),
        times_s=tuple(times),
        number=number,
        warmup=warmup,
        buffers=len(inputs),
        flops=flops,
        bytes_moved=bytes_moved,
        extra=dict(extra or {}),
    )


def _call(fn, inputs, i, clock) -> float:
    """One timed call of ``fn`` on the ``i``-th input set (rotating)."""
    clock.start()
    fn(*inputs[i % len(inputs)])
    return clock.stop()


def _check_settings(fn, make_inputs, warmup, repeats, min_time, max_time, number):
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


def _input_sets(make_inputs, device, buffers, cache_bytes, max_bytes, check, name):
    """(the input sets to rotate through, the device the work runs on)."""
    first = _as_args(make_inputs()) if make_inputs is not None else ()
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
        cache = cache_bytes if cache_bytes is not None else cache_bytes_of(dev)
        buffers = buffers_needed(
            working_set_bytes(first), cache, max_total_bytes=max_bytes
        )
    return [first] + [_as_args(make_inputs()) for _ in range(buffers - 1)], dev


# --- Conveniences: matmul and elementwise ---


@contextlib.contextmanager
def tf32_matmul(enabled: bool):
    """Allow (or forbid) TF32 tensor cores for fp32 matmuls on CUDA inside the block,
    restoring the previous setting after. ``"fp32"`` timings run with TF32 off so that
    they mean fp32."""
    with backend_flags(matmul_tf32=enabled):
        yield


def check_dtype_on(
    dtype: str | torch.dtype, device: str | torch.device
) -> tuple[str, torch.dtype]:
    """Resolve ``dtype`` and raise a clear error when ``device`` cannot run matmuls in
    it."""
    name, torch_dtype = resolve_dtype(dtype)
    dev = pick_device(device)
    if name == "tf32" and dev.type != "cuda":
        raise ValueError(
            "tf32 is a tensor-core mode of NVIDIA GPUs (compute capability 8.0+); "
            f"device {dev} has none: time 'fp32' instead"
        )
    if name.startswith("fp8"):
        if dev.type != "cuda":
            raise ValueError(
                f"{name} matmuls need a CUDA GPU with fp8 tensor cores "
                f"(compute capability 8.9+); device {dev} has none"
            )
        cap = torch.cuda.get_device_capability(dev)
        if cap < (8, 9) or not hasattr(torch, "_scaled_mm"):
            raise ValueError(
                f"{name} matmuls need compute capability 8.9+ and torch._scaled_mm; "
                f"this GPU is {cap[0]}.{cap[1]}"
            )
    if name == "tf32" and torch.cuda.get_device_capability(dev) < (8, 0):
        raise ValueError("tf32 needs compute capability 8.0+ (Ampere or newer)")
    return name, torch_dtype


def matmul_flops(n: int, m: int, k: int) -> int:
    """FLOPs of an (n x k) @ (k x m) matmul: one multiply and one add per term."""
    return 2 * n * m * k


def time_matmul(
    n: int,
    m: int | None = None,
    k: int | None = None,
    dtype: str | torch.dtype = "fp32",
    device: str | torch.device = "auto",
    seed: int = 0,
    **kwargs,
) -> TimingResult:
    """Time ``C = A @ B`` with ``A`` n x k, ``B`` k x m (``m``, ``k`` default to ``n``).

    ``bytes_moved`` counts reading A and B and writing C once (the minimum traffic). fp8
    runs through ``torch._scaled_mm`` (unit scales, bf16 output, B column-major, sizes
    multiples of 16). Other keyword arguments go to :func:`benchmark`."""
    m = n if m is None else m
    k = n if k is None else k
    for label, v in (("n", n), ("m", m), ("k", k)):
        if not is_positive_int(v):
            raise ValueError(
                f"matmul size {label} must be a positive integer, got {v!r}"
            )
    name, torch_dtype = check_dtype_on(dtype, device)
    dev = pick_device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    itemsize = torch.empty((), dtype=torch_dtype).element_size()

    if name.startswith("fp8"):
        if n % 16 or m % 16 or k % 16:
            raise ValueError(
                f"fp8 matmul sizes must be multiples of 16, got n={n}, m={m}, k={k}"
            )
        one = torch.ones((), device=dev, dtype=torch.float32)

        def make():
            a = random_tensor((n, k), name, dev, gen)
            b = random_tensor((m, k), name, dev, gen).t()  # column-major k x m
            return a, b

        def fn(a, b):
            return torch._scaled_mm(
                a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16
            )

        out_bytes = n * m * 2
    else:

        def make():
            return (
                random_tensor((n, k), name, dev, gen),
                random_tensor((k, m), name, dev, gen),
                random_tensor((n, m), name, dev, gen),
            )  # output buffer, overwritten

        def fn(a, b, c):
            return torch.matmul(a, b, out=c)

        out_bytes = n * m * itemsize
    kwargs.setdefault("name", f"matmul {name} {n}x{k}x{m}")
    extra = {"kind": "matmul", "dtype": name, "n": n, "m": m, "k": k}
    extra.update(kwargs.pop("extra", {}) or {})
    with (
        tf32_matmul(name == "tf32") if dev.type == "cuda" else contextlib.nullcontext()
    ):
        return benchmark(
            fn,
            make,
            flops=matmul_flops(n, m, k),
            bytes_moved=(n * k + k * m) * itemsize + out_bytes,
            device=dev,
            extra=extra,
            **kwargs,
        )


def time_elementwise(
    numel: int,
    dtype: str | torch.dtype = "fp32",
    device: str | torch.device = "auto",
    seed: int = 0,
    **kwargs,
) -> TimingResult:
    """Time ``z = x + y`` over ``numel`` elements (written into a preallocated ``z``).

    A memory-bound op: 1 FLOP per element against 3 elements moved (read x and y, write
    z), so ``bytes_moved = 3 * numel * itemsize``; fp16 moves half the bytes of fp32."""
    if not is_positive_int(numel):
        raise ValueError(f"numel must be a positive integer, got {numel!r}")
    name, torch_dtype = resolve_dtype(dtype)
    if name.startswith("fp8") or name == "tf32":
        raise ValueError(f"elementwise timing supports fp64/fp32/fp16/bf16, not {name}")
    dev = pick_device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    itemsize = torch.empty((), dtype=torch_dtype).element_size()

    def make():
        return (
            random_tensor(numel, name, dev, gen),
            random_tensor(numel, name, dev, gen),
            random_tensor(numel, name, dev, gen),
        )  # output buffer, overwritten

    def fn(x, y, z):
        return torch.add(x, y, out=z)

    kwargs.setdefault("name", f"add {name} {numel}")
    extra = {"kind": "elementwise", "dtype": name, "numel": numel}
    extra.update(kwargs.pop("extra", {}) or {})
    return benchmark(
        fn,
        make,
        flops=numel,
        bytes_moved=3 * numel * itemsize,
        device=dev,
        extra=extra,
        **kwargs,
    )


def time_rounds(
    steps: dict[str, tuple], rounds: int = 5, warmup: bool = True
) -> dict[str, list[float]]:
    """``step_rounds``'s protocol for any steps: ``{name: (step function, batch tuple,
    device)}``, each called as ``step(*batch)``; one untimed warm-up round (unless
    ``warmup`` is False: the caller ran one), then ``rounds`` rounds that time one call
    of each in turn. Returns ``{name: [seconds, one per round]}``;
    ``ampbook.predict.pace.speedup_verdict`` reads the per-round ratios."""
    from ampbook.measure.timing import benchmark

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
