"""The output-directory lock: a second holder (another process) is refused in one line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kvbudget.errors import ConfigError
from kvbudget.safety.outlock import (
    LOCK_NAME,
    holds_lock,
    lock_out_dir,
    lock_out_file,
    release_out_dir,
)

_HOLD = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from kvbudget.safety.outlock import lock_out_dir, lock_out_file\n"
    "lock = lock_out_dir if sys.argv[1] == 'dir' else lock_out_file\n"
    "lock(Path(sys.argv[2]), flag='--records-out')\n"
    "print('locked', flush=True)\n"
    "time.sleep(120)\n"
)


@contextmanager
def _held(kind: str, path: Path) -> Iterator[int]:
    """Another process holding the ``kind`` ("dir" or "file") lock on ``path``; its pid. It is
    SIGKILLed on exit (the kernel drops the flock)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, kind, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_second_process_is_refused_and_lock_dies_with_holder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with _held("dir", out) as pid, pytest.raises(ConfigError) as err:
        lock_out_dir(out)
    assert f"pid {pid}" in str(err.value)
    assert "\n" not in err.value.one_line()
    lock_out_dir(out)  # a stale lock file never blocks the next run
    try:
        assert holds_lock(out)
        assert (out / LOCK_NAME).exists()
        lock_out_dir(out)  # twice in one process: a no-op
    finally:
        release_out_dir(out)
    assert not holds_lock(out)


def test_unwritable_parent_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot write to directory"):
        lock_out_dir(blocker / "sub")


def test_output_file_lock_refuses_a_second_process_and_an_unwritable_place(
    tmp_path: Path,
) -> None:
    target = tmp_path / "records.jsonl"
    with _held("file", target) as pid, pytest.raises(ConfigError) as err:
        lock_out_file(target, flag="--records-out")
    text = err.value.one_line()
    assert "--records-out" in text and "\n" not in text
    assert f"pid {pid}" in text and "is writing this file" in text
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot write in its directory"):
        lock_out_file(blocker / "records.jsonl", flag="--records-out")
