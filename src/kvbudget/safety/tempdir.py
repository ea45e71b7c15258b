"""Private temporary directories removed on every exit path, SIGKILL included.

:func:`private_tempdir` creates a ``0700`` directory and starts a tiny reaper process in its own
session that blocks on a pipe from this process: when this process ends for any reason (a
normal return, an exception, SIGTERM, SIGKILL) the pipe closes and the reaper deletes the
directory. A normal exit deletes it at once as well.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

_REAPER = (
    "import shutil,sys\n"
    "try:\n"
    "    sys.stdin.buffer.read()\n"
    "finally:\n"
    "    shutil.rmtree(sys.argv[1], ignore_errors=True)\n"
)


@contextlib.contextmanager
def private_tempdir(prefix: str) -> Iterator[Path]:
    """A fresh private directory for the ``with`` block, gone afterwards whatever happens."""
    path = Path(tempfile.mkdtemp(prefix=prefix))  # mode 0700
    reaper: subprocess.Popen[bytes] | None = None
    try:
        reaper = subprocess.Popen(
            [sys.executable, "-S", "-c", _REAPER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a kill of our process group leaves the reaper alive
            close_fds=True,
        )
    except OSError:
        reaper = None  # no reaper: the finally below still cleans every non-SIGKILL exit
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if reaper is not None:
            if reaper.stdin is not None:
                reaper.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                reaper.wait(timeout=10)
