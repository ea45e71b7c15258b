"""Helpers for the hostile-condition tests: child processes, private TMPDIR, waiting."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    """Running and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(cond: Callable[[], bool], timeout_s: float = 120.0, every_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every_s)
    return False


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def env_with_tmp(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment with a private TMPDIR (what a killed run leaves there is visible)."""
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp), **extra}
