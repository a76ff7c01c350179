"""The book's precision vocabulary: precisions, autocast dtypes, dtype names both ways,
native 16-bit CPU arithmetic, torch's backend flags for a ``with`` block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch

from ampbook.core.env import cpu_flags, has_fp32_precision, readable_or_none, tf32_state
from ampbook.core.modes import PRECISIONS

AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {
    "fp32": None,
    "amp-fp16": torch.float16,
    "amp-bf16": torch.bfloat16,
}

DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "tf32": torch.float32,  # storage is fp32; the matmul runs on TF32 tensor cores
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
# Each dtype's one short name (tf32 and fp8 are aliases, never written).
SHORT_NAMES = {d: n for n, d in DTYPES.items() if n not in ("tf32", "fp8")}

# The instructions that give a CPU native 16-bit arithmetic (/proc/cpuinfo names).
NATIVE_CPU_FLAGS: dict[torch.dtype, tuple[str, ...]] = {
    torch.bfloat16: ("avx512_bf16", "amx_bf16"),
    torch.float16: ("avx512_fp16", "amx_fp16"),
}


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(
            f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}"
        )
    return precision


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype autocast runs ``precision`` in (None: fp32, no autocast)."""
    return AUTOCAST_DTYPES[check_precision(precision)]


def to_dtype(name: str | torch.dtype) -> torch.dtype:
    """The torch dtype of a short name (``"bf16"``), a torch name (``"bfloat16"``,
    ``"torch.bfloat16"``) or a dtype."""
    if isinstance(name, torch.dtype):
        return name
    if name in DTYPES:
        return DTYPES[name]
    found = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(found, torch.dtype):
        raise ValueError(
            f"unknown dtype {name!r}; use a short name ({', '.join(DTYPES)}) "
            "or a torch dtype name (float16, bfloat16...)"
        )
    return found


def torch_name(dtype: str | torch.dtype) -> str:
    """PyTorch's name of a dtype: ``"float16"`` for ``torch.float16`` or ``"fp16"``."""
    return str(to_dtype(dtype)).removeprefix("torch.")


def short_name(dtype: str | torch.dtype) -> str:
    """The book's name of a dtype: ``"fp16"`` for ``torch.float16`` or ``"float16"``."""
    d = to_dtype(dtype)
    if d not in SHORT_NAMES:
        raise ValueError(f"dtype {d} has no short name in the book")
    return SHORT_NAMES[d]


def native_cpu_flags(
    dtype: str | torch.dtype | None = None, flags: Iterable[str] | None = None
) -> list[str]:
    """The instructions among ``flags`` (default: this CPU's) that do ``dtype`` (or a
    precision; None: bf16 and fp16) natively: empty where 16-bit kernels convert."""
    if dtype is None:
        wanted = tuple(f for fs in NATIVE_CPU_FLAGS.values() for f in fs)
    elif isinstance(dtype, str) and dtype in AUTOCAST_DTYPES:
        wanted = NATIVE_CPU_FLAGS.get(AUTOCAST_DTYPES[dtype], ())
    else:
        wanted = NATIVE_CPU_FLAGS.get(to_dtype(dtype), ())
    have = set(cpu_flags() if flags is None else flags)
    return [f for f in wanted if f in have]


# --- torch's global backend flags --------------------------------------------------


def set_tf32(on: bool) -> None:
    """Let fp32 CUDA matmuls and cuDNN convolutions run on TF32 tensor cores (``on``)
    or not, through ``torch.backends.cuda.matmul.fp32_precision`` and
    ``torch.backends.cudnn.conv.fp32_precision`` ("tf32" or "ieee") where this PyTorch
    has them (2.9 and later), else through the legacy ``allow_tf32`` flags.
    Shown on the page in chapter 9 (09_when_amp_goes_wrong)."""
    if has_fp32_precision():
        word = "tf32" if on else "ieee"
        torch.backends.cuda.matmul.fp32_precision = word
        torch.backends.cudnn.conv.fp32_precision = word
    else:  # the legacy spelling, for a PyTorch before 2.9
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on


def backend_flags_now() -> dict:
    """The backend flags as they are now (what ``backend_flags`` restores); None for a
    value PyTorch refuses to read (after a mix of its old and new TF32 settings)."""
    return {
        "matmul_tf32": readable_or_none(lambda: torch.backends.cuda.matmul.allow_tf32),
        "cudnn_tf32": tf32_state()["cudnn_conv"] == "tf32",
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": (
            torch.is_deterministic_algorithms_warn_only_enabled()
        ),
        "float32_matmul_precision": readable_or_none(
            torch.get_float32_matmul_precision
        ),
        "fp32_precision": {
            name: getattr(getattr(torch.backends, name).matmul, "fp32_precision", None)
            for name in ("cuda", "mkldnn")
        },
    }


def _set_cudnn_tf32(on: bool) -> None:
    if has_fp32_precision():
        torch.backends.cudnn.conv.fp32_precision = "tf32" if on else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = on


def _restore(saved: dict) -> None:
    if saved["float32_matmul_precision"] is not None:
        torch.set_float32_matmul_precision(saved["float32_matmul_precision"])
    else:  # the mixed state it was in, through the new API
        for name, value in saved["fp32_precision"].items():
            if value is not None:
                getattr(torch.backends, name).matmul.fp32_precision = value
    _set_cudnn_tf32(saved["cudnn_tf32"])
    torch.backends.cudnn.benchmark = saved["cudnn_benchmark"]
    torch.backends.cudnn.deterministic = saved["cudnn_deterministic"]
    torch.use_deterministic_algorithms(
        saved["deterministic"], warn_only=saved["deterministic_warn_only"]
    )


@contextlib.contextmanager
def backend_flags(
    *,
    tf32: bool | None = None,
    matmul_tf32: bool | None = None,
    cudnn_benchmark: bool | None = None,
    deterministic: bool | None = None,
) -> Iterator[dict]:
    """Set torch's backend flags for the ``with`` block (None: left as it is) and
    restore them after it; yields them as they were. ``tf32`` sets both TF32 flags,
    ``matmul_tf32`` the matmuls' alone."""
    saved = backend_flags_now()
    try:
        if tf32 is not None and matmul_tf32 is None:
            matmul_tf32 = tf32
        if matmul_tf32 is not None:  # = torch.backends.cuda.matmul.allow_tf32, but
            # without mixing PyTorch's old and new TF32 settings
            torch.set_float32_matmul_precision("high" if matmul_tf32 else "highest")
        if tf32 is not None:
            _set_cudnn_tf32(tf32)
        if cudnn_benchmark is not None:
            torch.backends.cudnn.benchmark = cudnn_benchmark
        if deterministic is not None:
            torch.backends.cudnn.deterministic = deterministic
            torch.use_deterministic_algorithms(deterministic, warn_only=True)
        yield saved
    finally:
        _restore(saved)
