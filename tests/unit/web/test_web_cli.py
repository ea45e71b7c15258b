"""``kvbudget web``: help text, loopback default, one-line error for a busy port."""

from __future__ import annotations

import socket
import subprocess
import sys

from click.testing import CliRunner

from kvbudget.cli.web import web
from kvbudget.web.server import DEFAULT_HOST, is_loopback


def test_help_names_host_and_port() -> None:
    result = CliRunner().invoke(web, ["--help"])
    assert result.exit_code == 0
    assert "--host" in result.output and "--port" in result.output
    assert "127.0.0.1" in result.output


def test_default_host_is_loopback() -> None:
    assert DEFAULT_HOST == "127.0.0.1"
    assert is_loopback(DEFAULT_HOST)
    assert is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0")


def test_busy_port_is_a_one_line_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "kvbudget", "web", "--port", str(port)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ConfigError: port:")
    assert str(port) in lines[0]


def test_bad_port_value_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kvbudget", "web", "--port", "99999"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("UsageError:")
    assert "Traceback" not in proc.stderr
