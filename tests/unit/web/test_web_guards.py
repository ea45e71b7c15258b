"""``kvbudget web`` against DNS rebinding and parallel large bodies (issue 30 item 7)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kvbudget.safety.servers import free_port
from kvbudget.web.app import create_app

MODELS = "/api/meta"
MIB = 1024 * 1024


def _get(app_client: TestClient, host: str | None) -> tuple[int, dict[str, object]]:
    headers = {} if host is None else {"Host": host}
    response = app_client.get(MODELS, headers=headers)
    return response.status_code, response.json()


@pytest.mark.parametrize(
    "host",
    ["evil.example.com", "evil.example.com:8765", "127.0.0.1.evil.example", "10.0.0.7:8765", "0"],
)
def test_a_foreign_host_header_gets_no_data(host: str) -> None:
    status, body = _get(TestClient(create_app()), host)
    assert status == 421
    assert set(body) == {"error"} and str(body["error"]).startswith("ConfigError: Host ")


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.1:8765", "localhost:8765", "LOCALHOST", "[::1]:8765", "[::1]"]
)
def test_loopback_host_headers_are_answered(host: str) -> None:
    status, body = _get(TestClient(create_app()), host)
    assert status == 200, body


def test_the_bound_address_and_allowed_hosts_are_answered() -> None:
    client = TestClient(create_app("10.0.0.7", ["kv.internal"]))
    assert _get(client, "10.0.0.7:8765")[0] == 200
    assert _get(client, "kv.internal")[0] == 200
    assert _get(client, "other.internal")[0] == 421


def _raw(port: int, head: str, body: bytes = b"") -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(head.encode() + body)
    return conn


def _status(conn: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1])


def _post_head(port: int, length: int) -> str:
    return (
        f"POST /api/document HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )


@pytest.mark.timeout(60)
def test_bodies_in_flight_are_bounded_in_total() -> None:
    from kvbudget.web.guards import MAX_BODIES_IN_FLIGHT_BYTES, MAX_BODY_BYTES
    from kvbudget.web.server import BackgroundServer

    assert (MAX_BODY_BYTES, MAX_BODIES_IN_FLIGHT_BYTES) == (16 * MIB, 32 * MIB)
    size = 15 * MIB  # under the per-request bound; three of them pass the total
    with BackgroundServer() as url:
        port = int(url.rsplit(":", 1)[1])
        # two requests whose bodies are still arriving hold 30 MiB between them
        held = [_raw(port, _post_head(port, size), b"{") for _ in range(2)]
        time.sleep(0.5)
        third = _raw(port, _post_head(port, size), b"{")
        assert _status(third) == 503
        third.close()
        small = _raw(port, _post_head(port, 2), b"{}")
        assert _status(small) != 503  # a small body still fits beside them
        small.close()
        for conn in held:
            conn.close()
        time.sleep(0.5)
        # released: a large body is read again (and refused as not a result document)
        again = _raw(port, _post_head(port, size), b"[" + b" " * (size - 1))
        assert _status(again) == 400
        again.close()


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.timeout(120)
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_four_parallel_30_mb_bodies_leave_memory_flat() -> None:
    port = free_port("127.0.0.1")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbudget", "web", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.2)
        before = _peak_rss_kib(proc.pid)
        size = 30 * 1000 * 1000
        body = b"[" + b"1," * ((size - 2) // 2) + b"1]"
        statuses: list[int] = []

        def send() -> None:
            try:
                conn = _raw(port, _post_head(port, len(body)))
                with contextlib.suppress(OSError):  # refused unread: the server closed
                    conn.sendall(body)
                statuses.append(_status(conn))
                conn.close()
            except OSError:
                statuses.append(-1)

        threads = [threading.Thread(target=send) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        growth_mib = (_peak_rss_kib(proc.pid) - before) / 1024
        # the run: 52 MB -> 1 GB; a body over 16 MiB is now refused by its length
        assert growth_mib < 64, f"peak RSS grew {growth_mib:.0f} MiB"
        assert statuses and all(s in (413, -1) for s in statuses), statuses
    finally:
        proc.terminate()
        proc.wait(20)
