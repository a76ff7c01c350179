"""What this CPU's kernels do with each dtype, measured: one convolution, three passes.

A CPU's flags say which instructions it has, not which kernels PyTorch runs: one chip
can run a dtype's forward convolution in a JIT-compiled oneDNN kernel and its weight
gradient in oneDNN's reference C++ loop, or hand it all to ATen's generic fallback.
``probe_conv`` times one convolution (by default ERFNet's 3x1 at 64 channels: below
about that size PyTorch skips oneDNN even in fp32) pass by pass: a first call, while
oneDNN's verbose lines name the implementation it ran (``jit:avx2``, ``ref:any``...),
then rounds in which the dtypes take turns, so that a change in the machine's load
falls on all of them; a comparison with fp32 is the median of the per-round ratios.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field

import torch

from ampbook.core.args import is_positive_int
from ampbook.core.precision import autocast_dtype, short_name, to_dtype
from ampbook.measure.timing import machine_load, one_call, time_rounds

DTYPES = ("fp32", "bf16", "fp16")
PASSES = ("forward", "backward_data", "backward_weights")
PASS_NAMES = {p: p.replace("_", "-") for p in PASSES}
ATEN_FALLBACK = "ATen fallback (no oneDNN kernel)"
# rounds whose largest ratio to fp32 exceeds the smallest by this factor: the size of
# the difference is unstable on this machine (its direction may still hold)
UNSTABLE_SPREAD = 1.25
# oneDNN's propagation kinds, as its verbose lines name them, for each pass
_PROP_KINDS = {
    "forward": ("forward_training", "forward_inference", "forward"),
    "backward_data": ("backward_data",),
    "backward_weights": ("backward_weights", "backward"),
}


@dataclass(frozen=True)
class PassTiming:
    """One pass in one dtype: its fastest time, calls timed, implementation run."""

    name: str
    seconds: float
    calls: int
    impl: str | None
    samples: tuple[float, ...] = ()  # one time per round (empty: ``seconds`` only)

    def in_round(self, i: int) -> float:
        """The time of round ``i`` (a pass timed once has it in every round)."""
        return self.samples[i] if i < len(self.samples) else self.seconds


@dataclass(frozen=True)
class DtypeProbe:
    """The three passes in one dtype, or the error that stopped them."""

    dtype: str
    passes: dict[str, PassTiming] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class ConvProbe:
    """The convolution's shape, the machine's state, and each dtype's passes."""

    channels: int
    height: int
    width: int
    kernel: tuple[int, int]
    batch: int
    threads: int
    load1: float | None
    cpus: int
    impl_read: bool  # whether oneDNN's verbose lines could be read here
    dtypes: dict[str, DtypeProbe]

    @property
    def shape(self) -> str:
        (kh, kw), at = self.kernel, f"{self.width}x{self.height}"
        return f"{self.channels}-channel {kh}x{kw} convolution at {at}"

    def round_ratios(self, dtype: str, name: str | None = None) -> list[float]:
        """The time in ``dtype`` over fp32's, one ratio per round: all three passes
        together, or the pass ``name``."""
        probe, base = self._probe(dtype), self._probe("fp32")
        names = [name] if name else list(PASSES)
        lengths = [len(p.samples) for q in (probe, base) for p in q.passes.values()]
        rounds = max(lengths + [1])
        return [
            sum(probe.passes[n].in_round(i) for n in names)
            / sum(base.passes[n].in_round(i) for n in names)
            for i in range(rounds)
        ]

    def slowdown(self, dtype: str, name: str | None = None) -> float:
        """The median of ``round_ratios``."""
        return statistics.median(self.round_ratios(dtype, name))

    def slowest_pass(self, dtype: str) -> PassTiming:
        """The pass that lost most against fp32's same pass."""
        passes = self._probe(dtype).passes.values()
        return max(passes, key=lambda p: self.slowdown(dtype, p.name))

    def _probe(self, dtype: str) -> DtypeProbe:
        if dtype not in self.dtypes:
            raise KeyError(f"{dtype} was not probed; probed: {', '.join(self.dtypes)}")
        probe = self.dtypes[dtype]
        if probe.error:
            raise ValueError(f"{dtype} could not be probed here: {probe.error}")
        return probe

    def verdict(self, dtype: str) -> str:
        """One line: how much slower (or faster) ``dtype``'s convolution ran than fp32's
        here, its slowest pass, and the kernels that ran it."""
        error = self.dtypes[dtype].error if dtype in self.dtypes else None
        if error:
            return f"{dtype}: the {self.shape} did not run here ({error})."
        probe = self._probe(dtype)
        impls = _impl_text(probe.passes.values(), self.impl_read)
        if dtype == "fp32":
            total = sum(p.seconds for p in probe.passes.values()) * 1e3
            return f"fp32: the {self.shape} took {total:.3g} ms in all, {impls}."
        ratios = self.round_ratios(dtype)
        ratio, lo, hi, n = self.slowdown(dtype), min(ratios), max(ratios), len(ratios)
        per_pass = ", ".join(
            f"{PASS_NAMES[p]} {self.slowdown(dtype, p):.3g}x" for p in PASSES
        )
        rounds = f"median of {n} rounds, time {lo:.3g}-{hi:.3g}x fp32's"
        spread = rounds if n > 1 else "one round"
        if n > 1 and lo <= 1 <= hi:
            text = (
                f"{dtype}: the {self.shape} was faster than in fp32 in some rounds "
                f"and slower in others ({spread}; per pass: {per_pass}): no "
                "difference is resolved"
            )
        else:
            if n > 1 and hi / lo > UNSTABLE_SPREAD:
                spread += "; its size is unstable here, its direction is not"
            way = "slower" if ratio > 1 else "faster"
            times = ratio if ratio >= 1 else 1 / ratio
            text = (
                f"{dtype}: the {self.shape} ran {times:.3g}x {way} than in fp32 "
                f"({spread}; time over fp32's per pass: {per_pass})"
            )
        if ratio > 1:
            worst = self.slowest_pass(dtype)
            text += f"; slowest against fp32: {PASS_NAMES[worst.name]}"
            if worst.impl:
                text += f", in {_impl_name(worst.impl)}"
        return text + f". Kernels: {impls}."

    def rows(self) -> list[tuple]:
        """Table rows: dtype, pass, ms, time over fp32's same pass, implementation."""
        out = []
        for d, probe in self.dtypes.items():
            if probe.error:
                out.append((d, "-", None, None, probe.error))
            for n, p in ((n, probe.passes[n]) for n in PASSES if not probe.error):
                ratio = self.slowdown(d, n) if "fp32" in self.dtypes else None
                out.append(
                    (d, PASS_NAMES[n], p.seconds * 1e3, ratio, _impl_cell(p.impl))
                )
        return out


def _impl_cell(impl: str | None) -> str:
    """oneDNN's implementation name as the page writes it. One that runs part of its
    work through another (``brg_conv_bwd:...+brg_conv_fwd:...``) is spaced at the
    ``+``, so that a narrow page wraps it there instead of cutting a table off."""
    return " + ".join(impl.split("+")) if impl else "not read"


def _impl_name(impl: str) -> str:
    if impl == ATEN_FALLBACK:
        return "ATen's fallback (no oneDNN kernel)"
    if impl.startswith("ref"):
        return f"oneDNN's reference implementation ({_impl_cell(impl)})"
    return f"oneDNN's {_impl_cell(impl)}"


def _impl_text(passes, impl_read: bool) -> str:
    if not impl_read:
        return "implementation not readable here (no oneDNN verbose output)"
    by_impl: dict[str, list[str]] = {}
    for p in passes:
        by_impl.setdefault(p.impl or "not read", []).append(PASS_NAMES[p.name])
    if len(by_impl) == 1:
        return f"all three passes in {_impl_name(next(iter(by_impl)))}"
    return "; ".join(f"{', '.join(n)} in {_impl_name(i)}" for i, n in by_impl.items())


def parse_verbose(text: str) -> dict[str, str]:
    """``{pass: implementation}`` from the ``exec`` lines of convolution primitives,
    whose fields after ``convolution`` are the implementation and the propagation kind
    (``onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx2,backward_weights,...``;
    older versions have fewer leading fields)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if "exec" not in fields or "convolution" not in fields:
            continue
        i = fields.index("convolution")
        if i + 2 >= len(fields):
            continue
        for name, kinds in _PROP_KINDS.items():
            if fields[i + 2] in kinds:
                found.setdefault(name, fields[i + 1])
    return found


@contextlib.contextmanager
def _captured_stdout():
    """File descriptor 1 (where oneDNN prints) into a temporary file for the block;
    yields a list that holds the text afterwards."""
    out: list[str] = []
    try:
        libc_flush = ctypes.CDLL(None).fflush
    except OSError:
        libc_flush = None

    def flush():  # Python's buffer and C's stdio buffer
        sys.stdout.flush()
        if libc_flush is not None:
            libc_flush(None)

    flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield out
        finally:
            flush()
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read().decode(errors="replace"))


def _passes(x, w, g, padding):
    conv = torch.ops.aten.convolution.default
    back = torch.ops.aten.convolution_backward.default
    args = ([1, 1], padding, [1, 1], False, [0, 0], 1)
    return {
        "forward": lambda: conv(x, w, None, *args),
        "backward_data": lambda: back(g, x, w, None, *args, [True, False, False]),
        "backward_weights": lambda: back(g, x, w, None, *args, [False, True, False]),
    }


def _first_call(fn, name: str) -> tuple[float, str | None]:
    """(seconds of the first call, the implementation oneDNN executed for the pass
    ``name``, read from its verbose lines: ``ATEN_FALLBACK`` where none, None where
    there is no oneDNN)."""
    mkldnn = torch.backends.mkldnn
    if not mkldnn.is_available():
        return one_call(fn), None
    with _captured_stdout() as out, mkldnn.verbose(mkldnn.VERBOSE_ON):
        seconds = one_call(fn)
    return seconds, parse_verbose(out[0]).get(name, ATEN_FALLBACK)


def probe_conv(
    dtypes: tuple[str, ...] | list[str] = DTYPES,
    *,
    channels: int = 64,
    height: int = 32,
    width: int = 64,
    kernel: tuple[int, int] = (3, 1),
    batch: int = 1,
    repeats: int = 5,
    max_call_s: float = 0.5,
    threads: int = 1,
    seed: int = 0,
) -> ConvProbe:
    """Time one same-padded ``channels``-to-``channels`` convolution on a ``batch x
    channels x height x width`` input, pass by pass, in each of ``dtypes`` (fp32
    first). One intra-op thread by default (restored after): on a loaded machine a
    multi-threaded kernel's time says more about the load than the kernel. A dtype the
    CPU cannot convolve at all gets its error instead of timings."""
    sizes = dict(channels=channels, height=height, width=width, batch=batch)
    for label, v in dict(sizes, repeats=repeats, threads=threads).items():
        if not is_positive_int(v):
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    if len(kernel) != 2 or min(kernel) < 1:
        raise ValueError(f"kernel must be two positive sizes, got {kernel!r}")
    if max_call_s <= 0:
        raise ValueError(f"max_call_s must be positive, got {max_call_s}")
    order = ["fp32"] + [d for d in dtypes if d != "fp32"]
    for d in order:
        to_dtype(d)  # a clear error for an unknown name
    gen = torch.Generator().manual_seed(seed)
    x32 = torch.randn(batch, channels, height, width, generator=gen)
    w32 = torch.randn(channels, channels, *kernel, generator=gen) * 0.05
    g32 = torch.randn(batch, channels, height, width, generator=gen)
    padding = [kernel[0] // 2, kernel[1] // 2]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    used = torch.get_num_threads()
    try:
        results = _run(order, (x32, w32, g32), padding, repeats, max_call_s)
    finally:
        torch.set_num_threads(before)
    load = machine_load()
    read = any(p.impl is not None for r in results.values() for p in r.passes.values())
    size = (channels, height, width, (int(kernel[0]), int(kernel[1])), batch)
    return ConvProbe(*size, used, load["load1"], load["cpus"], read, results)


def _run(order, tensors, padding, repeats, max_call_s):
    """Each dtype's first calls, then ``repeats`` rounds in which every dtype's passes
    run once in turn (``time_rounds``), but those too slow to repeat."""
    first: dict[str, dict] = {}
    fns: dict[str, dict] = {}
    results: dict[str, DtypeProbe] = {}
    with torch.no_grad():
        for d in order:
            fns[d] = _passes(*(t.to(to_dtype(d)) for t in tensors), padding)
            try:
                first[d] = {n: _first_call(f, n) for n, f in fns[d].items()}
            except (RuntimeError, NotImplementedError) as err:
                line = (str(err).strip().splitlines() or [""])[0]
                results[d] = DtypeProbe(d, {}, f"{type(err).__name__}: {line}")
        steps = {
            (d, n): (fns[d][n], (), torch.device("cpu"))
            for d in first
            for n, (seconds, _) in first[d].items()
            if seconds <= max_call_s
        }
        samples = time_rounds(steps, repeats, warmup=False)
    for d in first:
        passes = {}
        for name, (seconds, impl) in first[d].items():
            got = tuple(samples.get((d, name), ())) or (seconds,)  # not repeated: 1st
            passes[name] = PassTiming(name, min(got), len(got), impl, got)
        results[d] = DtypeProbe(d, passes)
    return {d: results[d] for d in order}


def precision_dtype(precision: str) -> str:
    """The dtype whose convolutions a training precision runs (``"amp-bf16"``: bf16)."""
    dt = autocast_dtype(precision)
    return "fp32" if dt is None else short_name(dt)
