"""An exclusive lock on an output directory (``fcntl.flock`` on ``DIR/.kvbudget.lock``).

Two runs writing one ``--out`` mix or delete each other's records, so every command that writes
a directory takes this lock first; a second run refuses in one line naming the holder. The lock
lives as long as the process (the kernel drops it when the process dies, even by SIGKILL), and
spawned workers that inherit the descriptor keep it until they exit too. Taking the lock twice
in one process is a no-op.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from kvbudget.errors import ConfigError

LOCK_NAME = ".kvbudget.lock"

#: resolved directory -> open descriptor holding the lock (for the life of the process)
_HELD: dict[str, int] = {}


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "another kvbudget run"
    return f"another kvbudget run ({text[:80]})" if text else "another kvbudget run"


def _take(
    lock_path: Path,
    key: str,
    *,
    field: str,
    cannot_open: Callable[[str], str],
    busy: Callable[[str], str],
) -> int:
    """Open ``lock_path``, take its exclusive lock without waiting, write this pid into it and
    hold it under ``key``; the descriptor. A ConfigError with ``cannot_open(the OS reason)``
    when it cannot be opened, ``busy(the holder)`` when another process holds it."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ConfigError(cannot_open(str(exc.strerror or exc)), field=field) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise ConfigError(busy(_holder(lock_path)), field=field) from exc
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}\n".encode())
    _HELD[key] = fd
    return fd


def lock_out_dir(out_dir: Path, *, flag: str = "--out") -> Path:
    """Create ``out_dir`` if needed and hold its exclusive lock; return the lock file's path.

    :raises ConfigError: the directory is not writable, or another process holds the lock."""
    field = flag.strip("-").replace("-", "_")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        key = str(out_dir.resolve())
    except OSError as exc:
        raise ConfigError(
            f"{flag}: cannot write to directory {str(out_dir)!r} ({exc.strerror or exc}); "
            "give a writable directory",
            field=field,
        ) from exc
    lock_path = Path(key) / LOCK_NAME
    if key in _HELD:
        return lock_path
    _take(
        lock_path,
        key,
        field=field,
        cannot_open=lambda reason: (
            f"{flag}: cannot write to directory {str(out_dir)!r} ({reason}); "
            "give a writable directory"
        ),
        busy=lambda holder: (
            f"{flag} {str(out_dir)!r}: {holder} is writing to this directory; "
            "wait for it to finish or choose another directory"
        ),
    )
    return lock_path


def lock_out_file(path: Path, *, flag: str) -> None:
    """Hold an exclusive lock for an output *file* (``sim --records-out`` ...) for the life of
    the process: a sidecar ``.NAME.kvbudget.lock`` beside it (the output itself is not created
    before the command writes it), removed again when the process exits normally."""
    field = flag.strip("-").replace("-", "_")
    if path.exists() and not path.is_file():
        return  # a device or a pipe (/dev/null, /dev/stdout): nothing to protect
    sidecar = path.with_name(f".{path.name}.kvbudget.lock")
    try:
        key = "file:" + str(sidecar.resolve())
    except OSError:
        key = "file:" + str(sidecar)
    if key in _HELD:
        return
    fd = _take(
        sidecar,
        key,
        field=field,
        cannot_open=lambda reason: (
            f"{flag} {str(path)!r}: cannot write in its directory ({reason}); give a writable path"
        ),
        busy=lambda holder: (
            f"{flag} {str(path)!r}: {holder} is writing this file; wait for it to "
            "finish or choose another path"
        ),
    )
    atexit.register(_drop_sidecar, sidecar, fd)


def _drop_sidecar(sidecar: Path, fd: int) -> None:
    with contextlib.suppress(OSError):
        sidecar.unlink()
    with contextlib.suppress(OSError):
        os.close(fd)


def release_out_dir(out_dir: Path) -> None:
    """Drop the lock on ``out_dir`` if this process holds it (tests; long-lived servers)."""
    try:
        key = str(out_dir.resolve())
    except OSError:
        return
    fd = _HELD.pop(key, None)
    if fd is not None:
        os.close(fd)


def holds_lock(out_dir: Path) -> bool:
    """Whether this process holds the lock on ``out_dir``."""
    try:
        return str(out_dir.resolve()) in _HELD
    except OSError:
        return False
