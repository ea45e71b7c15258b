"""Child processes that die with their parent.

On Linux a child asks the kernel for SIGKILL when its parent dies
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``, through ctypes), so a bench worker or a ``kvbudget
serve`` started by accept never outlives a run killed with SIGKILL. Elsewhere (no prctl) a
watchdog thread polls the parent's pid. Call :func:`die_with_parent` first thing in a spawned
child, or pass :func:`child_preexec` as ``preexec_fn`` to :mod:`subprocess`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1

#: how often the fallback watchdog checks that the parent is alive
WATCHDOG_INTERVAL_S = 0.5


def _prctl_pdeathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def child_preexec() -> None:
    """``preexec_fn`` for subprocesses: SIGKILL when the parent dies (Linux)."""
    _prctl_pdeathsig()


def die_with_parent(parent_pid: int | None = None) -> None:
    """Make this process exit when its parent (``parent_pid``, default: the current parent)
    dies, also when the parent died before this call (the race prctl alone leaves open)."""
    expected = parent_pid if parent_pid is not None else os.getppid()
    armed = _prctl_pdeathsig()
    if os.getppid() != expected:  # the parent is already gone: we were re-parented
        os._exit(1)
    if armed:
        return

    def watch() -> None:
        while True:
            time.sleep(WATCHDOG_INTERVAL_S)
            if os.getppid() != expected:
                os._exit(1)

    threading.Thread(target=watch, name="kvbudget-parent-watchdog", daemon=True).start()
