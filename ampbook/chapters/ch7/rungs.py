"""The ladder's settings and record: ``RUNGS`` (the one place a rung is written, as
``TrainConfig`` fields), the modes, ``LadderSpec`` and the record (``ampbook.ladder/1``)
written as cells are measured, so a ladder stopped part-way keeps them. Then, each
importing those before it: ``ladder_measure``, ``_predict``, ``_report``, ``_run``."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from pathlib import Path

from ampbook.core import cli
from ampbook.core.modes import MODES
from ampbook.results import LADDER_SCHEMA, PEAK_CUDA, SAVED_FOR_BACKWARD

MODE_SETTINGS = {  # mode -> (precision, tf32)
    "fp32-tf32": ("fp32", "on"), "fp32": ("fp32", "off"),
    "amp-fp16": ("amp-fp16", "on"), "amp-bf16": ("amp-bf16", "on"),
}  # fmt: skip
# The order modes take turns in: the targets' comparison (TF32 against amp-fp16) first.
GPU_MODES = ("fp32-tf32", "amp-fp16", "amp-bf16", "fp32")
# A CPU has no TF32, and its mixed precision is bf16.
CPU_MODES = ("fp32", "amp-bf16")
SYNC_EVERY = 25  # the sync rung's loss read-back interval, in steps
COMPILE_MODE = "default"


@dataclass(frozen=True)
class Rung:
    """What a rung adds (``TrainConfig`` fields), why, how the prediction treats it
    (a key of ``ladder_predict.EFFECTS``; None: it cannot) and whether it compiles."""

    index: int
    key: str
    title: str
    changes: dict = field(hash=False)
    why: str = ""
    predicted: str | None = None
    compiles: bool = False


# The table of rungs: everything else reads the rungs from it (adding a rung is a row).
# fmt: off
RUNGS = tuple(Rung(i, *row) for i, row in enumerate((
    ("post", "the ERFNet authors' defaults",
     {"channels_last": False, "cudnn_benchmark": False, "data_cache": "none",
      "workers": 4, "fused_optimizer": False, "sync_every": 1, "fp16_stream": False,
      "compile": None},
     "NCHW, 4 loader workers decoding PNGs, the loss read back every step",
     "measured"),
    ("data", "+ data cached", {"data_cache": "device"},
     "images decoded once at the training size, normalised on the device",
     "no_data_wait"),
    ("layout", "+ channels_last, cudnn.benchmark",
     {"channels_last": True, "cudnn_benchmark": True},
     "NHWC kernels for batch norm and the 16-channel convolutions; cuDNN picks the "
     "fastest algorithm per shape",
     "nhwc_batch_norm"),
    ("sync", "+ fused Adam, no per-step sync",
     {"fused_optimizer": True, "sync_every": SYNC_EVERY},
     "no per-step read-back of the GradScaler's found_inf flag or of the loss; the "
     "host runs ahead of the GPU",
     "no_idle"),
    ("stream", "+ 16-bit residual stream", {"fp16_stream": True},
     "the encoder's activations stay 16-bit under autocast",
     "stream_bound"),
    ("compile", "+ torch.compile", {"compile": COMPILE_MODE},
     "elementwise operators fused into the kernels around them",
     None, True),
)))
# fmt: on
RUNG_INDICES = tuple(r.index for r in RUNGS)
EAGER = tuple(r.index for r in RUNGS if not r.compiles)  # without torch.compile
COMPILED = tuple(r.index for r in RUNGS if r.compiles)
# Named sets of rungs (``parse_rungs``): the ends are the post's setup against every
# eager change at once.
RUNG_SETS = {
    "all": RUNG_INDICES,
    "eager": EAGER,
    "compiled": COMPILED,
    "ends": (EAGER[0], EAGER[-1]),
}


def rung_title(index: int) -> str:
    return next((r.title for r in RUNGS if r.index == index), f"rung {index}")


def rung_of(predicted: str | None) -> int:
    """The first rung the prediction treats as ``predicted`` (None: cannot)."""
    return next(r.index for r in RUNGS if r.predicted == predicted)


def rung_range() -> str:
    return f"{RUNG_INDICES[0]}-{RUNG_INDICES[-1]}"


class LadderError(ValueError):
    """Settings the ladder cannot run (checked before any measurement)."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# A CPU's default ladder: the ends, at 64x32, one image a step, 3 timed steps, one
# torch thread. Timed on 2 busy cores (load 3-4): 27 s with one thread, 83 s to 2.5 min
# with torch's two, which wait for each other while another process holds a core.
CPU_MINUTE = "under a minute on 2 cores, timed with other work running"
CPU_THREADS = 1  # the command's --threads on a CPU (run_ladder itself sets none)
CPU_DEFAULTS = dict(
    rungs=RUNG_SETS["ends"], height=32, width=64, batch_size=1, warmup=1, steps=3,
    profile_steps=1, epochs=2, train_images=2, val_images=1,
)  # fmt: skip
# The spec's fields a record's settings hold, in order.
SETTINGS = ("height", "width", "batch_size", "warmup", "steps", "profile_steps",
            "epochs", "train_images", "val_images")  # fmt: skip


@dataclass
class LadderSpec:
    device: str = "auto"
    height: int = 512
    width: int = 1024
    batch_size: int = 6
    rungs: tuple[int, ...] = RUNG_INDICES
    modes: tuple[str, ...] = GPU_MODES
    warmup: int = 3
    steps: int = 10
    profile_steps: int = 3
    epochs: int = 2
    train_images: int = 48
    val_images: int = 2
    compile_mode: str = COMPILE_MODE

    @classmethod
    def for_device(cls, device_type: str, **kw) -> "LadderSpec":
        """The defaults for a GPU (the post's setting) or a CPU (``CPU_DEFAULTS``)."""
        base = dict(CPU_DEFAULTS, modes=CPU_MODES) if device_type == "cpu" else {}
        base.update({k: v for k, v in kw.items() if v is not None})
        return cls(**base)

    def check(self) -> None:
        """``LadderError`` naming the first setting the ladder cannot run."""
        why = {"warmup": (1, "the first step compiles"),
               "epochs": (2, "the first one warms up")}  # fmt: skip
        for name in sorted(SETTINGS, key=lambda n: n in why):
            v, (least, reason) = getattr(self, name), why.get(name, (1, ""))
            if not (cli.is_positive_int(v) and v >= least):
                raise LadderError(
                    f"{name} must be at least {least} ({reason}), got {v!r}"
                    if reason
                    else f"{name} must be a positive integer, got {v!r}"
                )
        for name in ("height", "width"):
            if getattr(self, name) % 8:
                raise LadderError(
                    f"{name} must be a multiple of 8 (ERFNet halves it three times), "
                    f"got {getattr(self, name)}"
                )
        if self.train_images < self.batch_size:
            raise LadderError(
                f"train_images ({self.train_images}) must hold at least one batch of "
                f"{self.batch_size}"
            )
        bad = [r for r in self.rungs if r not in RUNG_INDICES]
        if bad or not self.rungs:
            raise LadderError(f"rungs {bad or '(none)'}: choose from {rung_range()}")
        bad = [m for m in self.modes if m not in MODE_SETTINGS]
        if bad or not self.modes:
            raise LadderError(
                f"precisions {bad or '(none)'}: choose from {', '.join(MODES)}"
            )

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def settings(self, time_source: str, isolate: str) -> dict:
        """The record's settings: the spec's sizes and lengths, how it measured."""
        memory = PEAK_CUDA if time_source == "cuda" else SAVED_FOR_BACKWARD
        return {**{k: getattr(self, k) for k in SETTINGS}, "time_source": time_source,
                "memory_measure": memory, "isolate": isolate}  # fmt: skip


def parse_rungs(text: str) -> tuple[int, ...]:
    """``"0-5"``, ``"0,2,4"``, a rung's key or a named set (``RUNG_SETS``) -> rung
    indices (``LadderError`` if not)."""
    if not isinstance(text, str):  # a list of indices (a notebook's parameter)
        text = ",".join(map(str, text))
    keys = {r.key: r.index for r in RUNGS}
    out: list[int] = []
    try:
        for part in (p.strip() for p in str(text).split(",")):
            if part in RUNG_SETS or part in keys:
                out.extend(RUNG_SETS.get(part) or (keys[part],))
            elif "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                out.extend(range(a, b + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise LadderError(
            f"--rungs {text!r}: give indices such as {rung_range()} or 0,2, a rung's "
            f"name or one of {', '.join(RUNG_SETS)}"
        ) from None
    bad = [r for r in out if r not in RUNG_INDICES]
    if bad or not out:
        raise LadderError(f"--rungs {text!r}: rungs are {rung_range()}")
    return tuple(sorted(set(out)))


def parse_modes(text: str) -> tuple[str, ...]:
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    bad = [m for m in modes if m not in MODE_SETTINGS]
    if bad or not modes:
        raise LadderError(f"--precisions {text!r}: choose from {', '.join(MODES)}")
    return tuple(dict.fromkeys(modes))


def rung_fields(index: int, compile_mode: str = COMPILE_MODE) -> dict:
    """The ``TrainConfig`` fields rung ``index`` sets: its and every lower rung's."""
    fields = {k: v for rung in RUNGS[: index + 1] for k, v in rung.changes.items()}
    if fields.get("compile") == COMPILE_MODE:  # --compile-mode
        fields["compile"] = compile_mode
    return fields


def rung_config(spec: LadderSpec, index: int, mode: str, device: str):
    """The runner's ``TrainConfig`` of rung ``index`` in ``mode``."""
    from ampbook.train import TrainConfig

    fields = rung_fields(index, spec.compile_mode)
    precision, tf32 = MODE_SETTINGS[mode]
    return TrainConfig(
        precision=precision, tf32=tf32, device=device, height=spec.height,
        width=spec.width, batch_size=spec.batch_size, epochs=spec.epochs,
        synthetic_train=spec.train_images, synthetic_val=spec.val_images,
        shuffle=False, checkpoint=False, quiet=True, **fields,
    )  # fmt: skip


def ladder_path(json_arg: str | Path, device_name: str) -> Path:
    """``--json``'s file: a ``.json`` path itself, else ``ladder_<gpu>.json`` in it."""
    from ampbook.core.words import slug

    path = Path(json_arg)
    if path.suffix == ".json" and not path.is_dir():
        return path
    return path / f"ladder_{slug(device_name)}.json"


def new_record(spec: LadderSpec, environment: dict, isolate: str) -> dict:
    from ampbook.core.devices import find_device

    cuda = str(environment.get("device", "")).startswith("cuda")
    entry = find_device(environment["device_name"]) if cuda else None
    rungs = [
        {"index": r.index, "key": r.key, "title": r.title, "why": r.why,
         "changes": {k: spec.compile_mode if k == "compile" and v == COMPILE_MODE
                     else v for k, v in r.changes.items()},
         "compiles": r.compiles}
        for r in RUNGS
    ]  # fmt: skip
    return {
        "schema": LADDER_SCHEMA,
        "created": _now(),
        "updated": _now(),
        "status": "running",
        "environment": environment,
        "device_key": entry.key if entry else None,
        "settings": spec.settings("cuda" if cuda else "cpu", isolate),
        "rungs": rungs,
        "cells": [],
    }


def write_record(record: dict, path: Path) -> None:
    """Write atomically (``cli.write_text_atomic``)."""
    cli.write_text_atomic(path, json.dumps(record, indent=1) + "\n")


def add_cell(path: Path, cell: dict) -> None:
    """Put ``cell`` into the record at ``path`` (replacing the same rung and mode)."""
    record = json.loads(path.read_text())
    key = (cell["rung"], cell["mode"])
    record["cells"] = [c for c in record["cells"] if (c["rung"], c["mode"]) != key]
    record["cells"].append(cell)
    record["cells"].sort(key=lambda c: (c["rung"], MODES.index(c["mode"])))
    record["updated"] = _now()
    write_record(record, path)


def _same_setting(old: dict, new: dict) -> bool:
    keys = ("height", "width", "batch_size", "time_source")
    return old.get("environment", {}).get("device_name") == new["environment"][
        "device_name"
    ] and all(old.get("settings", {}).get(k) == new["settings"][k] for k in keys)
