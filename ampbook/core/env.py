"""The environment a measurement was made in: printed by every notebook, recorded with
every result."""

from __future__ import annotations

import os
import platform
from importlib import metadata

import torch

from ampbook.core.devices import display_name, pick_device

# Tensor-core generation by CUDA compute capability (major, minor).
_TENSOR_CORES = {
    **dict.fromkeys([(7, 0), (7, 2)], "Volta (1st gen: fp16)"),
    (7, 5): "Turing (2nd gen: fp16, int8)",
    **dict.fromkeys([(8, 0), (8, 6), (8, 7)], "Ampere (3rd gen: fp16, bf16, tf32)"),
    (8, 9): "Ada (4th gen: fp16, bf16, tf32, fp8)",
    (9, 0): "Hopper (4th gen: fp16, bf16, tf32, fp8)",
    **dict.fromkeys(
        [(10, 0), (12, 0)], "Blackwell (5th gen: fp16, bf16, tf32, fp8, fp4)"
    ),
}
# The CPU features that matter for low precision on a CPU (AMX, AVX-512 bf16/fp16).
_CPU_FLAGS = "avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_fp16 amx_tile".split()


def _cpuinfo(field: str) -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(field)]
    except OSError:
        return None
    return lines[0].split(":", 1)[1].strip() if lines else None


def cpu_flags() -> list[str]:
    have = set((_cpuinfo("flags") or "").split())
    return [w for w in _CPU_FLAGS if w in have]


def cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def tensor_core_generation_text(device: torch.device) -> str:
    """The tensor cores of ``device`` in words (``"none (CPU)"``), as recorded."""
    if device.type != "cuda":
        return "none (CPU)"
    cap = torch.cuda.get_device_capability(device)
    return _TENSOR_CORES.get(cap, f"unknown (compute capability {cap[0]}.{cap[1]})")


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def readable_or_none(get):
    """``get()``, or None where PyTorch refuses to read a mix of its legacy and new
    TF32 settings (a RuntimeError)."""
    try:
        return get()
    except RuntimeError:
        return None


def has_fp32_precision() -> bool:
    """Whether this PyTorch has the per-backend ``fp32_precision`` switches (2.9 and
    later), which replace ``allow_tf32`` (the legacy spelling)."""
    return hasattr(torch.backends.cuda.matmul, "fp32_precision") and hasattr(
        getattr(torch.backends.cudnn, "conv", None), "fp32_precision"
    )


def tf32_state() -> dict[str, str]:
    """``{"matmul": "tf32" | "ieee", "cudnn_conv": ...}``: from the ``fp32_precision``
    switches where this PyTorch has them (``allow_tf32`` raises after a mix of both)."""
    if has_fp32_precision():
        top = getattr(torch.backends, "fp32_precision", "none")

        def resolved(value: str) -> str:  # "none": the global setting decides
            value = top if value == "none" else value
            return "ieee" if value == "none" else value

        return {
            "matmul": resolved(torch.backends.cuda.matmul.fp32_precision),
            "cudnn_conv": resolved(torch.backends.cudnn.conv.fp32_precision),
        }
    word = {True: "tf32", False: "ieee"}
    return {
        "matmul": word[torch.backends.cuda.matmul.allow_tf32],
        "cudnn_conv": word[torch.backends.cudnn.allow_tf32],
    }


def environment(device: str | torch.device = "auto") -> dict:
    """A JSON-serialisable description of the software and hardware."""
    dev = pick_device(device)
    cuda, cudnn, tf32 = dev.type == "cuda", torch.backends.cudnn, tf32_state()
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "numpy": _version("numpy"),
        "cuda": torch.version.cuda,
        "cudnn": cudnn.version() if cudnn.is_available() else None,
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if cuda else cpu_name(),
        "tensor_cores": tensor_core_generation_text(dev),
        "fp32_precision": tf32,
        "tf32_matmul": tf32["matmul"] == "tf32",
        "tf32_cudnn": tf32["cudnn_conv"] == "tf32",
        "cudnn_benchmark": cudnn.benchmark,
        "float32_matmul_precision": readable_or_none(
            torch.get_float32_matmul_precision
        ),
        "cpu_threads": torch.get_num_threads(),
        "cpu_flags": cpu_flags(),
        "platform": platform.platform(),
    }
    if cuda:
        cap = torch.cuda.get_device_capability(dev)
        info["compute_capability"] = f"{cap[0]}.{cap[1]}"
        memory = torch.cuda.get_device_properties(dev).total_memory
        info["gpu_memory_gb"] = round(memory / 1e9, 1)
        info["driver_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    return info


def environment_report(device: str | torch.device = "auto") -> dict:
    """``environment(device)`` plus the versions of the book's tools."""
    info = environment(device)
    for pkg in ("matplotlib", "jupytext", "papermill"):
        info[pkg] = _version(pkg)
    return info


def format_environment(info: dict) -> str:
    """An environment report as aligned ``key  value`` lines."""
    width = max(len(k) for k in info)
    return "\n".join(
        f"{k:<{width}}  {', '.join(v) or '-' if isinstance(v, list) else v}"
        for k, v in info.items()
    )


# Set by ``python -m booktools.run`` for its kernel: the profile it injected.
RUN_PROFILE_VAR = "AMPBOOK_RUN_PROFILE"
# What a profile's numbers are, where the profile is not the real experiment.
PROFILE_NOTES = {
    "smoke": "tiny sizes that check the chapter runs: its numbers show the method, "
    "not results at scale",
}


def machine_text(
    info: dict, unknown: str = "an unknown device", cuda_off_gpu: bool = False
) -> tuple[str, list[str]]:
    """The device and the software of an environment record, as the book names them:
    ``torch X``, ``CUDA Y`` on a GPU (or ``cuda_off_gpu``), ``cuDNN Z`` on a GPU."""
    on_gpu = str(info.get("device", "")).startswith("cuda")
    name = info.get("device_name") or unknown
    if on_gpu:
        name = display_name(name)
    soft = [f"torch {info.get('torch', '?')}"]
    if info.get("cuda") and (on_gpu or cuda_off_gpu):
        soft.append(f"CUDA {info['cuda']}")
    cudnn = cudnn_version_text(info.get("cudnn"))
    if on_gpu and cudnn:
        soft.append(f"cuDNN {cudnn}")
    return name, soft


def environment_line(info: dict, profile: str | None = None, day=None) -> str:
    """One sentence for the top of a chapter: "Ran on <device> (<n> CPU threads), torch
    X[, CUDA Y, cuDNN Z], with the <profile> profile, <date>." (no profile: by hand)."""
    import datetime

    from ampbook.core.words import plural

    name, soft = machine_text(info, info.get("device") or "an unknown device")
    how = "by hand, with the parameters cell's values"
    how = f"with the {profile} profile" if profile else how
    day = day or datetime.date.today()
    threads = info.get("cpu_threads")
    where = f"{name} ({plural(threads, 'CPU thread')})" if threads else name
    return f"Ran on {where}, {', '.join(soft)}, {how}, {day.isoformat()}."


def print_environment(device: str | torch.device = "auto") -> None:
    """The second code cell of every notebook: where and how it ran, then the full
    environment behind a dropdown."""
    from IPython.display import display

    profile = os.environ.get(RUN_PROFILE_VAR) or None  # None: run by hand
    display(environment_display(environment_report(device), profile))


def environment_display(info: dict, profile: str | None = None, day=None):
    """What ``print_environment`` displays, for an environment report ``info``."""
    from ampbook.core.page import Dropdown, md_table_text

    line = environment_line(info, profile, day)
    rows = [
        (key, (", ".join(value) or "–") if isinstance(value, list) else value)
        for key, value in info.items()
    ]
    if profile:
        note = PROFILE_NOTES.get(profile)
        rows.insert(0, ("profile", f"{profile}: {note}" if note else profile))
    table, plain = md_table_text(rows, ["setting", "value"]), format_environment(info)
    return Dropdown("The full environment", table, plain=plain, lead=line)


def cudnn_version_text(version: int | None) -> str | None:
    """``torch.backends.cudnn.version()`` as people write it: 91900 -> "9.19",
    8907 -> "8.9.7" (cuDNN 9 changed the encoding)."""
    if version is None:
        return None
    v = int(version)
    if v >= 10000:
        return f"{v // 10000}.{v % 10000 // 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"
