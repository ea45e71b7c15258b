"""kvbudget.ray_support: an unreachable --ray-address is one line, before Ray waits minutes."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kvbudget.errors import ConfigError, TargetError
from kvbudget.ray_support import check_reachable


def _closed_port() -> int:
    with socket.socket() as sock:  # bound then closed: nothing listens there now
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_address_is_one_line() -> None:
    port = _closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(TargetError, match=f"Ray cluster at {address} does not answer"):
            check_reachable("kvbudget sweep", address, timeout_s=2.0)


def test_listening_address_and_auto_pass() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_reachable("x", f"127.0.0.1:{server.getsockname()[1]}", timeout_s=2.0)
    check_reachable("x", "auto")  # left to Ray


@pytest.mark.parametrize("address", ["nonsense", "host:", ":80", "ray://host:port"])
def test_malformed_address(address: str) -> None:
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        check_reachable("x", address)


@pytest.mark.timeout(120)
def test_sweep_cli_bad_address_exits_in_one_line(tmp_path: Path) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text("grid: {tp: [1]}\n")
    address = f"127.0.0.1:{_closed_port()}"
    cmd = [sys.executable, "-m", "kvbudget", "sweep", str(grid), "--out", str(tmp_path / "o")]
    cmd.extend(["--ray-address", address])
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("TargetError:"), proc.stderr
