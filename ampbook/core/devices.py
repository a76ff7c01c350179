"""Dense peak figures of GPUs, each with its source, from data/reference/devices.yml;
``peak_tflops("fp16")`` is the fp32-accumulate figure (PyTorch's fp16 matmuls' mode)."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
import yaml

from ampbook.core.paths import REFERENCE_DIR
from ampbook.core.words import edit_distance, nearest, plural

DEVICES_FILE = REFERENCE_DIR / "devices.yml"

# Figures that must carry a source when not null.
FIGURE_FIELDS = tuple(
    "fp32_tflops tf32_tflops fp16_tflops_fp32acc fp16_tflops_fp16acc bf16_tflops "
    "fp8_tflops mem_bandwidth_gbs".split()
)
COUNT_FIELDS = tuple(
    "sms cuda_cores tensor_cores boost_clock_mhz tensor_clock_mhz".split()
)
SEGMENTS = ("GeForce", "data centre", "workstation")

# Book dtype name -> the Device field holding its dense peak.
PEAK_FIELD = {
    "fp32": "fp32_tflops",
    "tf32": "tf32_tflops",
    "fp16": "fp16_tflops_fp32acc",
    "fp16_fp32acc": "fp16_tflops_fp32acc",
    "fp16_fp16acc": "fp16_tflops_fp16acc",
    "bf16": "bf16_tflops",
    "fp8": "fp8_tflops",
    "fp8_e4m3": "fp8_tflops",
    "fp8_e5m2": "fp8_tflops",
}


@dataclass(frozen=True)
class Device:
    """One GPU's published peaks (dense TFLOP/s, GB/s) and what they are based on."""

    key: str
    name: str
    short_name: str
    architecture: str
    chip: str
    segment: str
    form_factor: str
    compute_capability: str
    sms: int
    cuda_cores: int
    tensor_cores: int
    tensor_core_generation: int
    boost_clock_mhz: float
    tensor_clock_mhz: float
    memory_gb: float
    memory_type: str
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops_fp32acc: float
    fp16_tflops_fp16acc: float
    bf16_tflops: float | None
    fp8_tflops: float | None
    mem_bandwidth_gbs: float
    match: tuple[str, ...]
    aliases: tuple[str, ...] = ()  # further names a user may give (``a100``)
    # figure -> {key, title, publisher, url}
    sources: dict = field(default_factory=dict)
    derived: dict = field(default_factory=dict)  # figure -> how it was computed
    notes: str = ""

    def peak_tflops(self, dtype: str) -> float | None:
        """Dense peak for a book dtype name (None: the hardware has no such mode)."""
        if dtype not in PEAK_FIELD:
            raise ValueError(
                f"no peak for dtype {dtype!r}; use one of {sorted(PEAK_FIELD)}"
            )
        return getattr(self, PEAK_FIELD[dtype])

    def ridge_point(self, dtype: str = "fp16") -> float | None:
        """FLOP per byte where the compute ceiling meets the bandwidth ceiling."""
        peak = self.peak_tflops(dtype)
        return None if peak is None else peak * 1e12 / (self.mem_bandwidth_gbs * 1e9)

    def fma_per_clock_per_tensor_core(self, accumulate: str = "fp16") -> float:
        """Dense fp16 FMAs per clock per tensor core implied by the peak, the
        tensor-core count and the clock (Volta's 4x4x4 unit gives 64)."""
        if accumulate not in ("fp16", "fp32"):
            raise ValueError(f"accumulate must be 'fp16' or 'fp32', got {accumulate!r}")
        peak = getattr(self, f"fp16_tflops_{accumulate}acc")
        return peak * 1e12 / (2 * self.tensor_cores * self.tensor_clock_mhz * 1e6)

    @property
    def tensor_over_fp32(self) -> float:
        """The most a matmul gains from fp32 to fp16 under PyTorch (fp32 accumulate)."""
        return self.fp16_tflops_fp32acc / self.fp32_tflops

    @property
    def fp16acc_over_fp32acc(self) -> float:
        """2.0 on GeForce Ampere (fp32 accumulate at half rate), 1.0 on data centre."""
        return self.fp16_tflops_fp16acc / self.fp16_tflops_fp32acc

    def source_of(self, figure: str) -> str:
        """ "title (url)" of a figure's source, with how it was derived when it was."""
        if figure not in self.sources:
            raise KeyError(f"{self.key}: no source for {figure!r}")
        s = self.sources[figure]
        text = f"{s['title']} ({s['url']})"
        if figure in self.derived:
            text += f"; derived: {self.derived[figure]}"
        return text


def load_devices(path: str | Path | None = None) -> dict[str, Device]:
    """The device table; a ValueError names a non-null figure without a source."""
    path = Path(path) if path is not None else DEVICES_FILE
    text = path.read_bytes()
    cached = _LOADED.get(str(path))
    if cached is None or cached[0] != text:  # parsed once per content
        cached = _LOADED[str(path)] = (text, _parse_devices(text, path))
    return dict(cached[1])


# path -> (the file's bytes, its table): the doctor reads the table many times a report
_LOADED: dict[str, tuple[bytes, dict[str, Device]]] = {}
_OPTIONAL = {"key", "sources", "derived", "notes", "match", "aliases"}
_POSITIVE = FIGURE_FIELDS[:1] + FIGURE_FIELDS[2:4] + FIGURE_FIELDS[-1:]


def _parse_devices(text: bytes, path: Path) -> dict[str, Device]:
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict) or "devices" not in doc or "sources" not in doc:
        raise ValueError(f"{path}: expected top-level 'devices' and 'sources' mappings")
    table = doc["sources"]
    for skey, s in table.items():
        for need in ("title", "url"):
            if not s or need not in s:
                raise ValueError(f"{path}: source {skey!r} lacks {need!r}")
    names = [f.name for f in fields(Device)]
    required = [n for n in names if n not in _OPTIONAL]
    out: dict[str, Device] = {}
    for key, entry in doc["devices"].items():
        where = f"{path}: device {key!r}"
        unknown = set(entry) - set(names)
        missing = [n for n in required if n not in entry]
        if unknown:
            raise ValueError(f"{where} has unknown fields {sorted(unknown)}")
        if missing:
            raise ValueError(f"{where} lacks field {missing[0]!r}")
        values = {n: entry[n] for n in required}
        if values["segment"] not in SEGMENTS:
            raise ValueError(
                f"{where} segment must be one of {SEGMENTS}, got {values['segment']!r}"
            )
        for n in _POSITIVE:
            if not isinstance(values[n], (int, float)) or values[n] <= 0:
                raise ValueError(f"{where} field {n!r} must be a positive number")
        cited = entry.get("sources") or {}
        sources = {}
        for fig in FIGURE_FIELDS + COUNT_FIELDS:
            if values.get(fig) is None:
                continue
            if cited.get(fig) not in table:
                why = f"cites unknown source {cited[fig]!r}" if fig in cited else ""
                raise ValueError(f"{where} figure {fig!r} {why or 'has no source'}")
            sources[fig] = {"key": cited[fig], **table[cited[fig]]}
        match = tuple(entry.get("match") or ())
        for pattern in match:
            re.compile(pattern)
        out[key] = Device(
            key=key,
            match=match,
            aliases=tuple(str(a).lower() for a in entry.get("aliases") or ()),
            sources=sources,
            derived=dict(entry.get("derived") or {}),
            notes=str(entry.get("notes") or "").strip(),
            **values,
        )
    return out


def find_device(
    name_from_torch: str, devices: dict[str, Device] | None = None
) -> Device | None:
    """The entry whose ``match`` patterns fit ``name_from_torch`` (or None)."""
    devices = load_devices() if devices is None else devices
    name = name_from_torch.strip()
    hits = [
        d
        for d in devices.values()
        if any(re.search(p, name, re.IGNORECASE) for p in d.match)
    ]
    if len(hits) > 1:
        raise ValueError(
            f"{name!r} matches several table entries: {[d.key for d in hits]}"
        )
    return hits[0] if hits else None


def display_name(name_or_key: str, devices: dict[str, Device] | None = None) -> str:
    """How the book names a GPU: the table's ``short_name`` for a key or a name it
    matches; otherwise the name without "NVIDIA", escaped as page text."""
    if not isinstance(name_or_key, str) or not name_or_key.strip():
        raise ValueError(f"expected a GPU name or table key, got {name_or_key!r}")
    devices = load_devices() if devices is None else devices
    if name_or_key in devices:
        return devices[name_or_key].short_name
    with contextlib.suppress(ValueError):  # several entries match: none is named
        if (hit := find_device(name_or_key, devices)) is not None:
            return hit.short_name
    from ampbook.core.page import md_escape

    return md_escape(re.sub(r"^NVIDIA\s+", "", name_or_key.strip()))


def _gpu_name(text: str) -> str:
    """A GPU name as ``gpu_hits`` compares it ("GeForce RTX 4090" -> "rtx4090")."""
    text = text.lower().replace("nvidia", "").replace("geforce", "")
    return "".join(ch for ch in text if ch.isalnum())


def gpu_hits(raw: str, devices: dict[str, Device]) -> list[str]:
    """The table keys a stripped, lower-case GPU name can mean, by one rule."""
    norm = _gpu_name(raw)
    rules = (
        lambda k, d: k == raw,
        lambda k, d: raw in d.aliases or norm in map(_gpu_name, d.aliases),
        lambda k, d: norm == _gpu_name(d.short_name) or norm == _gpu_name(k),
        lambda k, d: bool(norm) and (norm in _gpu_name(k)
                                     or norm in _gpu_name(d.short_name)),
    )  # fmt: skip
    for rule in rules:
        if hits := [k for k, d in devices.items() if rule(k, d)]:
            return hits
    return []


def gpu_key(name: str, devices: dict[str, Device] | None = None) -> str:
    """The one table key a GPU's key, short name or alias means, in any case ("NVIDIA
    H200"); else a ValueError names the keys it may mean, or the nearest names."""
    devices = load_devices() if devices is None else devices
    raw = str(name).strip().lower()
    if len(hits := gpu_hits(raw, devices)) == 1:
        return hits[0]
    if hits:
        known = ", ".join(f"{k} ({devices[k].short_name})" for k in hits)
        raise ValueError(f"ambiguous GPU {raw!r}: it names {known}")
    names = {k: k for k in devices}
    for k, d in devices.items():
        names.update({a: k for a in (d.short_name.lower(), *d.aliases)})
    # the nearest distance only (h300 is no 3070); an empty name is near nothing
    close = nearest(raw, names, n=6) if raw else []
    best = min((edit_distance(raw, n) for n in close), default=0)
    near = list(dict.fromkeys(names[n] for n in close
                              if edit_distance(raw, n) == best))[:3]  # fmt: skip
    if near:
        raise ValueError(
            f"unknown GPU {raw!r}; did you mean {' or '.join(near)}? "
            "(a key, a short name or an alias)"
        )
    short = ", ".join(d.short_name for d in devices.values())
    raise ValueError(f"unknown GPU {raw!r}; the table knows {short}")


def device_for(
    device: str | torch.device = "auto", devices: dict[str, Device] | None = None
) -> Device | None:
    """The table entry of the GPU behind ``device`` (None on a CPU or unlisted)."""
    dev = pick_device(device)
    if dev.type != "cuda":
        return None
    return find_device(torch.cuda.get_device_name(dev), devices)


def attainable_tflops(
    intensity: float, peak_tflops: float, bandwidth_gbs: float
) -> float:
    """The roofline: the most TFLOP/s a kernel of ``intensity`` FLOP/byte reaches."""
    if intensity <= 0 or peak_tflops <= 0 or bandwidth_gbs <= 0:
        raise ValueError("intensity, peak_tflops and bandwidth_gbs must be positive")
    return min(peak_tflops, intensity * bandwidth_gbs / 1e3)


DEVICE_CHOICES = ("auto", "cpu", "cuda")  # what a --device takes (and cuda:N)


def pick_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` gives CUDA when available, else CPU; a name must be the CPU or a
    CUDA GPU this machine has (else a ``ValueError`` or ``RuntimeError`` says why)."""
    if isinstance(device, torch.device):  # checked as its name ("cuda:7", "meta")
        device = str(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:  # torch knows 20 device types (mps, meta...): the book runs on two
        dev = torch.device(device)
        known = dev.type in DEVICE_CHOICES
    except (RuntimeError, TypeError):
        known = False
    if not known:
        near = nearest(str(device), DEVICE_CHOICES, 1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ValueError(
            f"device {device!r} is not one of {', '.join(DEVICE_CHOICES)} or "
            f"cuda:N{hint}"
        )
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {device!r} was asked for, but this machine has no CUDA GPU "
            "(use device='cpu' or 'auto')"
        )
    if dev.type == "cuda" and (count := torch.cuda.device_count()) <= (dev.index or 0):
        raise RuntimeError(
            f"device {device!r} does not exist: this machine has "
            f"{plural(count, 'CUDA device')} (give "
            f"{'cuda or cuda:0' if count == 1 else f'cuda:0 to cuda:{count - 1}'})"
        )
    return dev
