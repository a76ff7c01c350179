"""The files a command reads and writes, checked before any work; results written
whole, a lock one process holds, the open-file limit. Standard library only."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import shutil
import stat
from pathlib import Path

from ampbook.core.errors import NAME_MAX, PATH_MAX, Stopped, UserError, os_error


class LockBusy(UserError):
    """``hold_lock``: another process holds the lock; ``holder`` says which."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


def hold_lock(path: str | os.PathLike) -> int:
    """An exclusive ``fcntl.flock`` on ``path``, its holder written in: keep the
    descriptor open while the work runs (the kernel frees it if the process dies)."""
    import fcntl
    import socket
    from datetime import datetime, timezone

    path = Path(path)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 300).decode(errors="replace").strip()
            os.close(fd)
            raise LockBusy(holder or "unknown process") from None
        # the previous holder may have removed the file between open and flock
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        os.close(fd)
    os.ftruncate(fd, 0)
    since = datetime.now(timezone.utc).isoformat(timespec="seconds")
    holder = f"pid {os.getpid()} on {socket.gethostname()} since {since}\n"
    os.write(fd, holder.encode())
    return fd


def release_lock(path: str | os.PathLike, fd: int) -> None:
    with contextlib.suppress(OSError):
        Path(path).unlink()
    with contextlib.suppress(OSError):
        os.close(fd)


# --- the open-file limit --------------------------------------------------------------


def check_open_files(needed: int, what: str) -> None:
    """Before the work: raise the soft open-file limit toward the hard one for
    ``needed`` more files; a hard limit too low is ``UserError`` (not a crash later)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = 0
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            in_use = max(0, len(os.listdir(folder)) - 1)  # less the listing's own
            break
    total = needed + in_use
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or soft >= total:
        return
    if hard == unlimited or hard >= total:
        target = max(total, 1024) if hard == unlimited else min(hard, max(total, 1024))
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
    raise UserError(
        f"the open-file limit (ulimit -n) is {soft}, and {what} need about {total} "
        f"open files: raise it (ulimit -n {max(total, 1024)} in the shell that runs "
        "the command)"
    )


def too_many_open_files(err: BaseException) -> bool:
    """Whether ``err`` says the process ran out of file descriptors."""
    if isinstance(err, OSError) and err.errno in (errno.EMFILE, errno.ENFILE):
        return True
    return isinstance(err, RuntimeError) and "Too many open files" in str(err)


def open_files_advice() -> str:
    """What to do after running out of file descriptors, with the limit named."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return (
        f"the open-file limit (ulimit -n) is {soft}: raise it (ulimit -n "
        f"{max(2 * soft, 1024)}) or use fewer workers"
    )


# --- paths ----------------------------------------------------------------------------


_KINDS = (
    (stat.S_ISREG, "a file"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def mode_kind(mode: int) -> str:
    return next((k for is_kind, k in _KINDS if is_kind(mode)), "not a regular file")


def check_names(path: Path, what: str) -> None:
    raw = os.fsencode(str(path))
    if len(raw) >= PATH_MAX:
        raise UserError(
            f"{what}: the path is {len(raw)} bytes long, over the system's "
            f"{PATH_MAX}; choose a shorter one"
        )
    for part in Path(path).parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise UserError(
                f"{what}: the name {part[:40]}... is {size} bytes long, over the "
                f"{NAME_MAX} a file system allows; choose a shorter one"
            )


def _writable_folder(folder: Path, what: str, size: int | None) -> None:
    with contextlib.suppress(OSError):
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            raise UserError(
                f"{what}: {folder} is on a read-only file system; choose a writable "
                "folder"
            )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(
            f"{what}: {folder} cannot be written (permission denied); choose a "
            "writable folder"
        )
    if size:
        check_free_space(folder, size, what)


def _existing_ancestor(path: Path, what: str) -> Path:
    """The nearest existing folder of ``path`` (itself included); a file is refused."""
    path = Path(os.path.abspath(path))
    for folder in (path, *path.parents):
        try:
            mode = os.stat(folder).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as err:
            raise UserError(f"{what}: {folder}: {err.strerror}") from None
        if not stat.S_ISDIR(mode):
            raise UserError(
                f"{what}: {folder} is {mode_kind(mode)}, so {path} cannot be made "
                "below it; choose another path"
            )
        return folder
    return Path(path.anchor)


def check_free_space(folder: Path, size: int, what: str) -> None:
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free < size:
        raise UserError(
            f"{what}: {folder} has {free / 2**20:.1f} MiB free but {size / 2**20:.1f} "
            "MiB are needed; free some space or choose another folder"
        )


def file_kind(path: str | os.PathLike) -> str | None:
    """The ``schema`` a JSON file names (``"ampbook.train"``...), else None."""
    p = Path(path)
    try:
        if p.stat().st_size > 32 * 2**20:
            return None
        with open(p, "rb") as f:
            head = f.read(32 * 2**20)
        record = json.loads(head.decode("utf-8"), parse_int=_small_int)
    except (OSError, ValueError, RecursionError):
        return None
    schema = record.get("schema") if isinstance(record, dict) else None
    return schema if isinstance(schema, str) else None


def _small_int(digits: str) -> int:
    if len(digits) > 24:
        raise ValueError("an integer too long for a record")
    return int(digits)


def _output(path, what: str, noun: str) -> tuple[Path, int | None]:
    """An output's path and its mode (None: absent, or below a file in the way)."""
    if path is None or not str(path).strip():
        raise UserError(f"{what} is an empty path; give {noun}")
    p = Path(path).expanduser()
    check_names(p, what)
    try:
        return p, os.stat(p).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return p, None
    except OSError as err:
        raise UserError(f"{what}: {p}: {err.strerror}") from None


def check_output_file(
    path: str | os.PathLike,
    what: str,
    size: int | None = None,
    create_parents: bool = False,
    *,
    kind: str | None = None,
    overwrite: bool = False,
) -> Path:
    """A file a command will write. No command replaces what another wrote: a non-empty
    file is refused unless it is a ``kind`` record (its ``schema``) or ``overwrite``."""
    p, mode = _output(path, what, "a file name")
    if mode is not None and not stat.S_ISREG(mode):
        if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
            return p  # a FIFO or /dev/stdout is written into (write_text_atomic)
        raise UserError(
            f"{what}: {p} is {mode_kind(mode)}; give the name of a file to write"
        )
    if mode is not None and not overwrite:
        _check_replaceable(p, what, kind)
    folder = _existing_ancestor(p.parent, what)
    if folder != Path(os.path.abspath(p.parent)) and not create_parents:
        raise UserError(
            f"{what}: cannot write {p}: folder {p.parent} does not exist; create it or "
            "choose another path"
        )
    _writable_folder(folder, what, size)
    return p


def _check_replaceable(p: Path, what: str, kind: str | None) -> None:
    try:
        if p.stat().st_size == 0:
            return
    except OSError:
        return
    held = file_kind(p)
    if kind is not None and held == kind:
        return  # this command's own record, written by an earlier run
    holds = (
        f"a record of schema {held}" if held else "a file this command did not write"
    )
    wants = f" (this command writes {kind} records)" if kind else ""
    raise UserError(
        f"{what}: {p} exists and holds {holds}{wants}; choose another file, or "
        "pass --overwrite to replace it"
    )


def check_output_dir(
    path: str | os.PathLike, what: str, size: int | None = None
) -> Path:
    """A folder a command will write into, checked before any work."""
    p, mode = _output(path, what, "a folder")
    if mode is not None and not stat.S_ISDIR(mode):
        raise UserError(
            f"{what}: {p} is {mode_kind(mode)}, not a folder; give a folder"
        )
    folder = _existing_ancestor(p, what)
    _writable_folder(folder, what, size)
    return p


def check_input_file(path: str | os.PathLike, what: str) -> Path:
    """A file a command will read: an existing regular file (a FIFO or a device would
    block the read or never end)."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise UserError(f"{what}: {p} does not exist") from None
    except OSError as err:
        raise UserError(f"{what}: {p}: {err.strerror}") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"{what}: {p} is {mode_kind(mode)}, not a file; give a file")
    return p


def is_special(path: str | os.PathLike) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def read_text(path: str | os.PathLike, what: str) -> str:
    p = check_input_file(path, what)
    try:
        return p.read_text()
    except UnicodeDecodeError as err:
        raise UserError(f"{what}: {p} is not text ({err.reason})") from None
    except OSError as err:
        raise UserError(f"{what}: {p}: {err.strerror or err}") from None


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` beside ``path``, then rename: a full disk leaves no half file."""
    p = Path(path)
    if is_special(p):  # /dev/stdout, a FIFO someone reads: written into, not replaced
        with open(p, "w") as f:
            f.write(text)
        return p
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, p)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return p


def save_result(path: str | os.PathLike, result, what: str = "the numbers") -> Path:
    """Write a command's result as JSON at the end of its work; ``Stopped`` when the
    disk refuses, saying where the result is still to be read."""
    try:
        return write_text_atomic(path, json.dumps(result, indent=1) + "\n")
    except OSError as err:
        raise Stopped(
            f"could not write {path}: {os_error(err)[1]} ({what} are printed above)"
        ) from None
