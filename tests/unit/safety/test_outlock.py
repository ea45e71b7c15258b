"""The output-directory lock: a second holder (another process) is refused in one line."""

from __future__ import annotations

import subprocess
import sys
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
    "from kvbudget.safety.outlock import lock_out_dir\n"
    "lock_out_dir(Path(sys.argv[1]))\n"
    "print('locked', flush=True)\n"
    "time.sleep(120)\n"
)


def test_second_process_is_refused_and_lock_dies_with_holder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError) as err:
            lock_out_dir(out)
        assert f"pid {holder.pid}" in str(err.value)
        assert "\n" not in err.value.one_line()
    finally:
        holder.kill()  # SIGKILL: the kernel drops the flock
        holder.wait(timeout=30)
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


_HOLD_FILE = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from kvbudget.safety.outlock import lock_out_file\n"
    "lock_out_file(Path(sys.argv[1]), flag='--records-out')\n"
    "print('locked', flush=True)\n"
    "time.sleep(120)\n"
)


def test_output_file_lock_refuses_a_second_process_and_an_unwritable_place(
    tmp_path: Path,
) -> None:
    target = tmp_path / "records.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_FILE, str(target)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError) as err:
            lock_out_file(target, flag="--records-out")
        text = err.value.one_line()
        assert "--records-out" in text and "\n" not in text
        assert f"pid {holder.pid}" in text and "is writing this file" in text
    finally:
        holder.kill()
        holder.wait(timeout=30)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot write in its directory"):
        lock_out_file(blocker / "records.jsonl", flag="--records-out")
