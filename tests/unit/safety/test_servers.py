"""kvbudget.safety.servers: start with a deadline, the early-exit message, stop by PID and group.

Expected values are the POSIX facts (SIGTERM ends a sleeping child with -15; a killed process
group leaves no member), not values computed by the module."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvbudget.safety.servers import LocalServer, StartupExitError, free_port, stop_process

HEALTH_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_launch_waits_for_health_and_stop_terminates_by_pid(tmp_path: Path) -> None:
    server = LocalServer(log_path=tmp_path / "s.log", args=[])
    server.port = free_port()
    cmd = [sys.executable, "-c", HEALTH_SERVER, str(server.port)]
    with server:
        server.launch(cmd, env=os.environ, name="toy", timeout_s=60, poll_s=0.1)
        assert server.get("/health") == (200, b"")
        assert server.get("/nope")[0] == 404
    assert server.proc is not None and server.proc.returncode == -15  # SIGTERM


def test_exit_before_ready_names_the_code_and_the_log_tail(tmp_path: Path) -> None:
    server = LocalServer(log_path=tmp_path / "s.log", args=["--flag"])
    server.port = free_port()
    cmd = [sys.executable, "-c", "print('bad flag: --flag'); raise SystemExit(3)"]
    with pytest.raises(RuntimeError, match=r"toy exited with 3 while starting \(--flag\)") as exc:
        server.launch(cmd, env=os.environ, name="toy", timeout_s=60, poll_s=0.1)
    assert "bad flag: --flag" in str(exc.value)


def test_exit_before_ready_hands_back_the_whole_log(tmp_path: Path) -> None:
    # an engine that logs its pool, then many lines, then refuses: the message keeps the tail,
    # the error carries every line (the first one is far outside the 30-line tail)
    server = LocalServer(log_path=tmp_path / "s.log", args=[])
    server.port = free_port()
    script = (
        "import sys\n"
        "print('CPU KV cache size: 6,400 tokens', flush=True)\n"
        "for i in range(100): print(f'line {i}')\n"
        "sys.stderr.write('NotImplementedError: refused\\n')\n"
        "raise SystemExit(1)\n"
    )
    with pytest.raises(StartupExitError) as exc:
        server.launch(
            [sys.executable, "-c", script], env=os.environ, name="toy", timeout_s=60, poll_s=0.1
        )
    err = exc.value
    assert isinstance(err, RuntimeError)  # callers catching RuntimeError still do
    assert err.returncode == 1 and err.log_path == tmp_path / "s.log"
    assert "CPU KV cache size: 6,400 tokens" not in str(err)  # outside the tail
    assert err.log_text.startswith("CPU KV cache size: 6,400 tokens\n")
    assert "line 99\nNotImplementedError: refused\n" in err.log_text


def test_kill_group_takes_the_children_of_a_session_leader() -> None:
    proc = subprocess.Popen(
        ["sh", "-c", "sleep 600 & echo $!; wait"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    stop_process(proc, 20.0, kill_group=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        # the killed child is a zombie until init reaps it; its state says so
        stat = Path(f"/proc/{child}/stat")
        if stat.exists() and stat.read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"child {child} of the stopped group is still running")
