"""The output folder: one run per name, nothing overwritten by accident. A run holds
``OUT/NAME.lock`` (``RunLock``) while it works; ``output_folder`` refuses an earlier
run's files unless resuming or overwriting, and removes temporary files a killed run
left."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path

from ampbook.train.config import ConfigError, TrainConfig
from ampbook.train.record import earlier_record, now


class RunLock:
    """An exclusive lock on ``OUT/NAME.lock`` for one run name. ``fcntl.flock`` is
    released by the kernel when the process dies, so a killed run never leaves a stale
    lock behind."""

    def __init__(self, path: Path, name: str):
        self.path = Path(path)
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise ConfigError(
                    f"cannot write in {self.path.parent}: {err.strerror}; choose "
                    "a writable folder for --out"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = (
                    os.read(fd, 300).decode(errors="replace").strip()
                    or "unknown process"
                )
                os.close(fd)
                raise ConfigError(
                    f"run {name!r} in {self.path.parent} is in use by another "
                    f"process ({holder}); wait for it to end, or choose another "
                    "--name"
                ) from None
            try:  # the previous holder may have removed the file between open and flock
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(
            fd, f"pid {os.getpid()} on {socket.gethostname()} since {now()}\n".encode()
        )
        self.fd = fd

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)


@contextlib.contextmanager
def output_folder(cfg: TrainConfig, out: Path, name: str):
    """Lock ``out`` for ``name`` and check it before any work: a folder that can be
    written, no earlier run of that name unless resuming or overwriting, no stale
    temporary files."""
    if out.exists() and not out.is_dir():
        raise ConfigError(
            f"out {out} is a file, not a folder; give a folder for {name}.json "
            f"and {name}.ckpt"
        )
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
        json_path, ckpt_path = out / f"{name}.json", out / f"{name}.ckpt"
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
            how = (
                ["continue it with --resume"]
                if ckpt_path.exists() and not finished
                else []
            )
            how += ["choose another --name", "or pass --overwrite to replace it"]
            raise ConfigError(
                f"{existing[0]} already holds run {name!r}{status}; nothing was "
                f"changed: {', '.join(how)}"
            )
        if cfg.overwrite:
            for path in existing:
                path.unlink()
        # Temporary files of this name can only be left over from a killed run: we hold
        # its lock.
        for stale in out.iterdir():
            parts = stale.name.rsplit(
                ".", 2
            )  # .NAME.json.PID.tmp -> .NAME.json, PID, tmp
            if (
                len(parts) == 3
                and parts[0] in (f".{name}.json", f".{name}.ckpt")
                and parts[1].isdigit()
                and parts[2] == "tmp"
            ):
                stale.unlink()
        yield
    finally:
        if lock is not None:
            lock.release()
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty: a run that wrote nothing leaves nothing


def check_predictions_folder(cfg: TrainConfig) -> None:
    if not cfg.save_predictions:
        return
    folder = Path(cfg.save_predictions)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"save_predictions {folder} cannot be written ({err.strerror or err}); "
            "choose a writable folder"
        ) from None
