"""Private temporary directories and children outlive no killed parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvbudget.safety.tempdir import private_tempdir

_PARENT = (
    "import sys, time, subprocess\n"
    "from kvbudget.safety.tempdir import private_tempdir\n"
    "from kvbudget.safety.procs import child_preexec\n"
    "with private_tempdir('kvbudget-test-') as d:\n"
    "    (d / 'prompt.txt').write_text('private')\n"
    "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],\n"
    "                             preexec_fn=child_preexec)\n"
    "    print(d, child.pid, flush=True)\n"
    "    time.sleep(300)\n"
)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie not yet reaped by init counts as gone
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1].startswith("Z")


def _wait(cond: object, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_normal_exit_removes_the_directory() -> None:
    with private_tempdir("kvbudget-test-") as d:
        assert oct(d.stat().st_mode & 0o777) == "0o700"
        (d / "x").write_text("y")
    assert not d.exists()


def test_sigkill_leaves_no_directory_and_no_child() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    line = parent.stdout.readline().split()
    tmp, child_pid = Path(line[0]), int(line[1])
    assert (tmp / "prompt.txt").exists()
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    assert _wait(lambda: not tmp.exists()), f"{tmp} outlived the killed parent"
    assert _wait(lambda: _gone(child_pid)), f"child {child_pid} outlived the killed parent"
