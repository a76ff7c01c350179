"""Speed by dtype, measured side by side: the sweeps behind chapter 2 and ``python -m
ampbook.bench matmul``: square matmuls (``matmul_sweep``), sizes one off a multiple of
8 (``shape_cliff``), an elementwise add (``elementwise_sweep``) and a convolution's
forward and training pass (``conv_sweep``). Rows are ``TimingResult.to_dict()``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:  # torch is imported where it is used: --help answers without it
    import torch

    from ampbook.measure.timing import TimingResult

# Timing settings for one point of a sweep: a few warm-up calls, at least 5 samples and
# `min_time` seconds, never more than `max_time` seconds of measurement.
SWEEP_TIMING = {"warmup": 2, "repeats": 5, "min_time": 0.1, "max_time": 1.0}


def supported_dtypes(device: str | torch.device = "auto") -> list[str]:
    """The matmul dtypes this device runs: fp32, fp16, bf16 on a CPU; on CUDA tf32 and
    bf16 from compute capability 8.0, fp8 from 8.9 (with ``torch._scaled_mm``)."""
    import torch

    from ampbook.core.devices import pick_device

    dev = pick_device(device)
    if dev.type != "cuda":
        return ["fp32", "fp16", "bf16"]
    cap = torch.cuda.get_device_capability(dev)
    out = ["fp32", "tf32", "fp16", "bf16"] if cap >= (8, 0) else ["fp32", "fp16"]
    fp8 = hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
    return out + ["fp8"] if cap >= (8, 9) and fp8 else out


def _predict(measured: dict[int, float], n: int) -> float | None:
    """Seconds per call of an n^3 matmul, cubic from the nearest smaller size."""
    m = max((m for m in measured if m <= n), default=None)
    return None if m is None else measured[m] * (n / m) ** 3


def _best_of(results: list[dict]) -> dict:
    """The measurement of one point with the lowest median (the least disturbed)."""
    best = min(results, key=lambda r: r["median_s"])
    if len(results) > 1:
        best = dict(
            best, rounds=len(results), medians_s=[r["median_s"] for r in results]
        )
    return best


def _best_rounds(keys: Sequence, rounds: int, time_one) -> dict:
    """``{key: the best of rounds rows of time_one(key)}``, the keys timed in turns."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    got: dict = {k: [] for k in keys}
    for _ in range(rounds):
        for k in keys:
            got[k].append(time_one(k))
    return {k: _best_of(v) for k, v in got.items()}


def matmul_sweep(
    sizes: Iterable[int],
    dtypes: Sequence[str],
    device: str | torch.device = "auto",
    max_call_s: float | None = None,
    rounds: int = 1,
    **timing,
) -> tuple[list[dict], list[dict]]:
    """Square matmuls of each size in each dtype, the dtypes side by side; returns
    ``(rows, skipped)``. A size whose call is predicted (cubic from the dtype's last
    size) over ``max_call_s`` is skipped, so that a slow dtype cannot stall a run;
    ``rounds`` > 1 keeps the fastest of interleaved rounds."""
    from ampbook.core.devices import pick_device
    from ampbook.measure.timing import time_matmul

    dev = pick_device(device)
    timing = {**SWEEP_TIMING, **timing}
    measured: dict[str, dict[int, float]] = {d: {} for d in dtypes}
    rows, skipped = [], []
    for n in sorted(set(int(s) for s in sizes)):
        todo = []
        for dtype in dtypes:
            reason = _skip_reason(dtype, n, measured[dtype], max_call_s)
            if reason:
                skipped.append(
                    {"kind": "matmul", "dtype": dtype, "n": n, "reason": reason}
                )
            else:
                todo.append(dtype)
        best = _best_rounds(
            todo,
            rounds,
            lambda d: time_matmul(n, dtype=d, device=dev, **timing).to_dict(),
        )
        for dtype, row in best.items():
            measured[dtype][n] = row["median_s"]
            rows.append(row)
    return rows, skipped


def _skip_reason(
    dtype: str, n: int, measured: dict[int, float], max_call_s: float | None
) -> str | None:
    if dtype.startswith("fp8") and n % 16:
        return f"fp8 matmuls need sizes that are multiples of 16 ({n} is not)"
    if max_call_s is not None:
        predicted = _predict(measured, n)
        if predicted is not None and predicted > max_call_s:
            return f"predicted {predicted:.3g} s per call > max_call_s {max_call_s:g} s"
    return None


def shape_cliff(
    bases: Iterable[int],
    dtypes: Sequence[str],
    device: str | torch.device = "auto",
    offsets: Sequence[int] = (0, -1, 1),
    max_call_s: float | None = None,
    known: Sequence[dict] = (),
    rounds: int = 1,
    **timing,
) -> tuple[list[dict], list[dict]]:
    """Square matmuls at each base size (a multiple of 8) and one off it (``offsets``);
    rows carry ``base``. ``known`` rows help predict slow points for ``max_call_s``."""
    from ampbook.core.devices import pick_device
    from ampbook.measure.timing import time_matmul

    dev = pick_device(device)
    timing = {**SWEEP_TIMING, **timing}
    measured: dict[str, dict[int, float]] = {d: {} for d in dtypes}
    for r in known:
        if r.get("kind") == "matmul" and r.get("dtype") in measured:
            measured[r["dtype"]][r["n"]] = r["median_s"]
    rows, skipped = [], []
    for base in sorted(set(int(b) for b in bases)):
        if base % 8:
            raise ValueError(f"shape_cliff bases must be multiples of 8, got {base}")
        for dtype in dtypes:
            reasons = (
                _skip_reason(dtype, base + off, measured[dtype], max_call_s)
                for off in offsets
            )
            reason = next((r for r in reasons if r), None)
            if dtype.startswith("fp8"):
                reason = (
                    "fp8 matmuls need sizes that are multiples of 16; "
                    "no off-by-one shapes"
                )
            if reason:
                skipped.append(
                    {"kind": "shape", "dtype": dtype, "n": base, "reason": reason}
                )
                continue
            best = _best_rounds(
                [base + off for off in offsets],
                rounds,
                lambda n, d=dtype, b=base: time_matmul(
                    n, dtype=d, device=dev, extra={"base": b}, **timing
                ).to_dict(),
            )
            for n, row in best.items():
                measured[dtype][n] = row["median_s"]
                rows.append(row)
    return rows, skipped


def shape_penalties(rows: Sequence[dict]) -> list[dict]:
    """Per (dtype, base, n != base): ``slowdown`` = TFLOP/s at the multiple of 8 divided
    by TFLOP/s at the size one off (> 1 means the odd size is slower per FLOP)."""
    aligned = {(r["dtype"], r["base"]): r for r in rows if r["n"] == r["base"]}
    out = []
    for r in rows:
        if r["n"] == r["base"] or (r["dtype"], r["base"]) not in aligned:
            continue
        a = aligned[(r["dtype"], r["base"])]
        out.append(
            {
                "dtype": r["dtype"],
                "base": r["base"],
                "n": r["n"],
                "tflops_aligned": a["tflops"],
                "tflops": r["tflops"],
                "slowdown": a["tflops"] / r["tflops"],
                "outside_spread": outside_spread(a, r),
            }
        )
    return out


def outside_spread(a: dict, b: dict) -> bool:
    """Whether two measurements differ by more than their run-to-run spread: their
    per-FLOP time ranges from the 10th to the 90th percentile do not overlap.

    Shown on the page in chapter 2 (02_tensor_cores)."""
    a_lo, a_hi = a["p10_s"] / a["flops"], a["p90_s"] / a["flops"]
    b_lo, b_hi = b["p10_s"] / b["flops"], b["p90_s"] / b["flops"]
    return a_hi < b_lo or b_hi < a_lo


def elementwise_sweep(
    numels: Iterable[int],
    dtypes: Sequence[str] = ("fp32", "fp16", "bf16"),
    device: str | torch.device = "auto",
    rounds: int = 1,
    **timing,
) -> list[dict]:
    """``z = x + y`` at each size in each dtype (bandwidth-bound)."""
    from ampbook.core.devices import pick_device
    from ampbook.measure.timing import time_elementwise

    dev = pick_device(device)
    timing = {**SWEEP_TIMING, **timing}
    rows = []
    for numel in sorted(set(int(n) for n in numels)):
        best = _best_rounds(
            dtypes,
            rounds,
            lambda d: time_elementwise(numel, d, dev, **timing).to_dict(),
        )
        rows.extend(best.values())
    return rows


CONV_KINDS = ("conv", "conv_train")


# A probe call is about this share of conv_sweep's convolution (batch 1, then the sides
# halved): small enough that a dtype in a fallback kernel hundreds of times slower than
# fp32 answers in seconds.
CONV_PROBE_WORK = 1 / 128
CONV_MIN_SIDE = 8


def _conv_work(shape: Sequence[int]) -> int:
    b, _, h, w = shape
    return b * h * w


def _shrink_conv(shape: Sequence[int], fraction: float) -> tuple[int, int, int, int]:
    """``shape`` (batch, channels, height, width) with at most ``fraction`` of its work:
    the batch cut first, then the longer side halved, sides kept >= ``CONV_MIN_SIDE``;
    channels stay (they set the kernel's shape)."""
    b, c, h, w = (int(v) for v in shape)
    target = fraction * _conv_work(shape)
    while b * h * w > target:
        if b > 1:
            b = max(1, min(b // 2, math.ceil(target / (h * w))))
        elif max(h, w) // 2 >= CONV_MIN_SIDE:
            h, w = (h // 2, w) if h >= w else (h, w // 2)
        else:
            break
    return b, c, h, w


def _single_call_s(shape, kernel, dtype, dev, backward: bool) -> float:
    b, c, h, w = shape
    warm = 1 if dtype == "fp32" else 0  # a slow dtype's one call says enough
    return time_conv2d(
        b, c, h, w, kernel, dtype, dev, backward=backward,
        warmup=warm, repeats=1, min_time=0.0,
    ).median_s  # fmt: skip


def fit_conv_shape(
    shape: Sequence[int],
    dtypes: Sequence[str],
    device: str | torch.device = "auto",
    kernel: int = 3,
    max_call_s: float = 1.0,
) -> tuple[tuple[int, int, int, int], str | None]:
    """The shape at which every dtype's calls should take at most ``max_call_s``, and
    a line saying why when it is smaller than ``shape`` (else None): a dtype's call is
    predicted as fp32's at ``shape`` times its ratio to fp32 at a probe shape
    (``CONV_PROBE_WORK`` of the work), so that a fallback kernel hundreds of times
    slower than fp32 does not take minutes a call to find out."""
    from ampbook.core.devices import pick_device

    shape = tuple(int(v) for v in shape)
    dev = pick_device(device)
    probe = _shrink_conv(shape, CONV_PROBE_WORK)
    if probe == shape:
        return shape, None
    at_probe = {
        (d, bwd): _single_call_s(probe, kernel, d, dev, bwd)
        for d in ["fp32", *(d for d in dtypes if d != "fp32")]
        for bwd in (False, True)
    }
    fp32_full = _single_call_s(shape, kernel, "fp32", dev, False)
    ref = at_probe[("fp32", False)]
    predicted = {k: fp32_full * t / ref for k, t in at_probe.items()}
    (dtype, bwd), worst = max(predicted.items(), key=lambda kv: kv[1])
    if worst <= max_call_s:
        return shape, None
    fitted = _shrink_conv(shape, max_call_s / worst)
    what = "training pass" if bwd else "forward"
    line = (
        f"timed at {'x'.join(map(str, fitted))}, not {'x'.join(map(str, shape))}: "
        f"there one {dtype} {what} would take about {worst:.3g} s (fp32's "
        f"forward {fp32_full:.3g} s times the {dtype} {what}'s "
        f"{at_probe[(dtype, bwd)] / ref:.3g}x fp32's forward at "
        f"{'x'.join(map(str, probe))}), over max_call_s {max_call_s:g} s"
    )
    return fitted, line


def conv_sweep(
    shape: Sequence[int],
    dtypes: Sequence[str],
    device: str | torch.device = "auto",
    kernel: int = 3,
    max_call_s: float | None = None,
    rounds: int = 1,
    **timing,
) -> tuple[list[dict], list[dict], str | None]:
    """One convolution (``shape`` = batch, channels, height, width) in each dtype: its
    forward (kind ``"conv"``) and a training pass (``"conv_train"``), side by side;
    returns ``(rows, skipped, fit_line)``. With ``max_call_s`` the shape is first
    shrunk to fit it (``fit_conv_shape``, ``fit_line`` says so), and a dtype other than
    fp32 whose forward still took longer skips its training pass (3x the work)."""
    from ampbook.core.devices import pick_device

    dev = pick_device(device)
    timing = {**SWEEP_TIMING, **timing}
    fit_line = None
    if max_call_s is not None:
        shape, fit_line = fit_conv_shape(shape, dtypes, dev, kernel, max_call_s)
    size = dict(zip(("batch", "channels", "height", "width"), map(int, shape)))
    rows, skipped = [], []
    for backward in (False, True):
        kind = CONV_KINDS[backward]
        todo = []
        for dtype in dtypes:
            fwd = next((r for r in rows if r["dtype"] == dtype), None)
            slow = backward and max_call_s is not None and fwd and dtype != "fp32"
            if slow and fwd["median_s"] > max_call_s:
                reason = (
                    f"its forward took {fwd['median_s']:.3g} s per call > max_call_s "
                    f"{max_call_s:g} s"
                )
                skipped.append(dict(size, kind=kind, dtype=dtype, reason=reason))
            else:
                todo.append(dtype)
        best = _best_rounds(
            todo,
            rounds,
            lambda d, bwd=backward: dict(
                time_conv2d(
                    *size.values(), kernel, d, dev, backward=bwd, **timing
                ).to_dict(),
                **size,
            ),
        )
        rows.extend(best.values())
    return rows, skipped, fit_line


_ITEMSIZE = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}


def read_from(row: dict, cache_bytes: int) -> str:
    """``"memory"`` when the input sets the timer rotated through (``buffers`` of
    ``bytes_moved`` each) cover at least twice the last-level cache, so that each was
    evicted before its next use; ``"cache"`` otherwise."""
    moved = row.get("bytes_moved")
    if moved is None:
        moved = 3 * row["numel"] * _ITEMSIZE[row["dtype"]]
    return "memory" if moved * row.get("buffers", 1) >= 2 * cache_bytes else "cache"


def time_conv2d(
    batch: int,
    channels: int,
    height: int,
    width: int,
    kernel: int = 3,
    dtype: str | torch.dtype = "fp32",
    device: str | torch.device = "auto",
    backward: bool = False,
    seed: int = 0,
    **kwargs,
) -> TimingResult:
    """Time a same-padded, stride-1 ``conv2d`` (NCHW, no bias) in ``dtype``; with
    ``backward`` one training pass: the forward and ``aten.convolution_backward`` for
    the input's and the weight's gradients (3x the FLOPs). ``kwargs`` go to
    ``ampbook.measure.timing.benchmark``."""
    import contextlib

    import torch

    from ampbook.core.args import is_positive_int
    from ampbook.measure.timing import prepare_op, random_tensor, time_op

    size = dict(
        batch=batch, channels=channels, height=height, width=width, kernel=kernel
    )
    for label, v in size.items():
        if not is_positive_int(v):
            raise ValueError(f"conv {label} must be a positive integer, got {v!r}")
    if kernel % 2 == 0:
        raise ValueError(f"conv kernel must be odd (same padding), got {kernel}")
    name, dev, gen, itemsize = prepare_op(dtype, device, seed, "conv")
    pad = kernel // 2
    act = (batch, channels, height, width)

    def make():
        return (
            random_tensor(act, name, dev, gen),
            random_tensor((channels, channels, kernel, kernel), name, dev, gen),
            random_tensor(act, name, dev, gen),  # the output's gradient
        )

    def forward(x, w, grad_out):
        return torch.nn.functional.conv2d(x, w, padding=pad)

    def training_pass(x, w, grad_out):
        torch.nn.functional.conv2d(x, w, padding=pad)
        # stride, padding, dilation, transposed, output padding, groups; no bias grad
        conv = ([1, 1], [pad, pad], [1, 1], False, [0, 0], 1, [True, True, False])
        return torch.ops.aten.convolution_backward(grad_out, x, w, None, *conv)

    x_el = batch * channels * height * width
    w_el = channels * channels * kernel * kernel
    # forward: read x and w, write y; backward: read dy, x and w, write dx and dw
    elements = 3 * x_el + 3 * w_el + x_el if backward else 2 * x_el + w_el
    flops = 2 * x_el * channels * kernel * kernel  # same-padded, stride 1
    what = "conv2d forward+backward" if backward else "conv2d"
    label = f"{what} {name} {batch}x{channels}x{height}x{width}"
    extra = {"kind": CONV_KINDS[backward], "dtype": name, **size}
    fn, flops = (training_pass, 3 * flops) if backward else (forward, flops)
    with torch.no_grad() if not backward else contextlib.nullcontext():
        return time_op(fn, make, dev, label, extra, flops, elements * itemsize, kwargs)
