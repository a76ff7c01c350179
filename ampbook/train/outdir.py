"""The output folder: one run per name, nothing overwritten by accident. A run holds
``OUT/NAME.lock`` (``RunLock``) while it works; ``output_folder`` refuses an earlier
run's files unless resuming or overwriting, and removes temporary files a killed run
left. ``--overwrite`` moves the earlier run's files aside (``.NAME.json.replaced``,
``.NAME.ckpt.replaced``) and deletes them only once the new run has written its first
record (``discard_replaced``); a run that stops before that puts them back, and one
killed before that has them put back by the next run of the name."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from ampbook.core import cli
from ampbook.train.checkpoint import earlier_record
from ampbook.train.config import ConfigError, TrainConfig


def _aside(path: Path) -> Path:  # an earlier run's file, moved aside by --overwrite
    return path.with_name(f".{path.name}.replaced")


def discard_replaced(out: Path, name: str) -> None:
    """The new run has written its first record: the files it replaces go."""
    for suffix in (".json", ".ckpt"):
        _aside(out / f"{name}{suffix}").unlink(missing_ok=True)


def _settle_replaced(out: Path, name: str) -> None:
    """Files moved aside by an ``--overwrite`` run that ended (or was killed): gone
    when the new run wrote its record, else put back."""
    paths = [out / f"{name}{suffix}" for suffix in (".json", ".ckpt")]
    if not any(_aside(p).exists() for p in paths):
        return
    if paths[0].exists():  # written by the new run: the earlier one was moved
        discard_replaced(out, name)
        return
    for path in paths:  # the new run wrote no record: none of it stays
        if _aside(path).exists():
            os.replace(_aside(path), path)
        else:
            path.unlink(missing_ok=True)


class RunLock:
    """An exclusive lock on ``OUT/NAME.lock`` for one run name (``flock``: released
    when the process dies, so a killed run leaves no stale lock)."""

    def __init__(self, path: Path, name: str):
        self.path = Path(path)
        try:
            self.fd = cli.hold_lock(self.path)
        except cli.LockBusy as err:
            raise ConfigError(
                f"run {name!r} in {self.path.parent} is in use by another "
                f"process ({err.holder}); wait for it to end, or choose another "
                "--name"
            ) from None
        except OSError as err:
            raise ConfigError(
                f"cannot write in {self.path.parent}: {err.strerror}; choose "
                "a writable folder for --out"
            ) from None

    def release(self) -> None:
        cli.release_lock(self.path, self.fd)


def checkpoint_room() -> int:
    """Bytes a run's checkpoint takes (parameters, Adam's two moments, buffers: read
    on the meta device), with a margin; checked before any work, not after an epoch."""
    import torch

    from ampbook.segmentation.cityscapes import NUM_CLASSES
    from ampbook.segmentation.model import ERFNet

    with torch.device("meta"):
        net = ERFNet(NUM_CLASSES)
    params = sum(p.numel() * p.element_size() for p in net.parameters())
    buffers = sum(b.numel() * b.element_size() for b in net.buffers())
    return int((3 * params + buffers) * 1.05) + (1 << 20)


@contextlib.contextmanager
def output_folder(cfg: TrainConfig, out: Path, name: str):
    """Lock ``out`` for ``name`` and check it before any work (see the module); a
    file in its place was refused by ``validate``."""
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"cannot create the output folder {out}: {err.strerror}; choose "
            "another --out"
        ) from None
    lock = None
    try:
        lock = RunLock(out / f"{name}.lock", name)
        # Room for the checkpoint, before an earlier run's files are touched (moved
        # aside, they still take their space until the new run's first record).
        cli.check_free_space(
            out, checkpoint_room(), f"out (the checkpoint {name}.ckpt)"
        )
        json_path, ckpt_path = out / f"{name}.json", out / f"{name}.ckpt"
        _settle_replaced(out, name)  # a killed --overwrite run's earlier files
        for path in (json_path, ckpt_path):
            if path.is_dir():
                raise ConfigError(
                    f"{path} is a folder, but the run writes a file there; move "
                    "it away or choose another --name"
                )
        existing = [p for p in (json_path, ckpt_path) if p.exists()]
        if existing and not cfg.resume and not cfg.overwrite:
            earlier = earlier_record(json_path)
            status = f" (status: {earlier.get('status')})" if earlier else ""
            finished = earlier is not None and earlier.get("status") == "complete"
            how = ["choose another --name", "or pass --overwrite to replace it"]
            if ckpt_path.exists() and not finished:
                how.insert(0, "continue it with --resume")
            raise ConfigError(
                f"{existing[0]} already holds run {name!r}{status}; nothing was "
                f"changed: {', '.join(how)}"
            )
        if cfg.overwrite:  # every other check came first
            for path in existing:
                os.replace(path, _aside(path))
        # Temporary files of this name (.NAME.json.PID.tmp) can only be left over
        # from a killed run: we hold its lock.
        tmp = re.compile(rf"\.{re.escape(name)}\.(json|ckpt)\.[0-9]+\.tmp")
        for stale in out.iterdir():
            if tmp.fullmatch(stale.name):
                stale.unlink()
        yield
    finally:
        if lock is not None:
            with contextlib.suppress(OSError):
                _settle_replaced(out, name)
            lock.release()
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty: a run that wrote nothing leaves nothing


PREDICTIONS_MARKER = ".ampbook-predictions"


def check_predictions_folder(cfg: TrainConfig, name: str | None = None) -> None:
    """``--save-predictions`` names a folder that can be written and holds no other
    run's predictions (PNGs without this run's marker) unless ``--overwrite``; the
    marker naming the run is written here."""
    if not cfg.save_predictions:
        return
    folder = Path(cfg.save_predictions)
    owner = f"{Path(cfg.out).resolve() if cfg.out else '-'}/{name or ''}\n"
    marker = folder / PREDICTIONS_MARKER
    if folder.is_dir() and not cfg.overwrite:
        try:
            mine = marker.is_file() and marker.read_text() == owner
        except OSError:
            mine = False
        if not mine and next(folder.rglob("*.png"), None) is not None:
            raise ConfigError(
                f"save_predictions {folder} already holds predictions of another "
                "run; choose another folder, or pass --overwrite to replace them"
            )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        marker.write_text(owner)
    except OSError as err:
        raise ConfigError(
            f"save_predictions {folder} cannot be written ({err.strerror or err}); "
            "choose a writable folder"
        ) from None
