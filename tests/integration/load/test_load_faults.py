"""The load runner against a deliberately faulty server: every request is accounted for.

The fake server is a raw asyncio HTTP/1.1 server (so it can reset connections, send malformed
events and stall at will). POSTs cycle through ``BEHAVIOURS``; the expected outcome of each is
the error taxonomy's definition, so the expected counts are worked out here, not read from
the code under test.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from pathlib import Path

import pytest

from kvbudget.load.client import ClientRequest, OpenAIClient
from kvbudget.load.config import RunConfig
from kvbudget.load.run import run_load
from kvbudget.records import RequestRecord, read_jsonl

TIMEOUT_S = 1.0

# behaviour -> (status, error_kind, http_status)
BEHAVIOURS: dict[str, tuple[str, str | None, int | None]] = {
    "ok": ("ok", None, 200),
    "reset_mid_stream": ("error", "broken_stream", 200),
    "http_500": ("error", "http_status", 500),
    "http_429": ("error", "http_status", 429),
    "oom_500": ("error", "oom", 500),
    "stall": ("error", "timeout", 200),
    "slow_headers": ("error", "timeout", None),
    "malformed_sse": ("error", "broken_stream", 200),
    "truncated": ("error", "truncated_stream", 200),
    "error_event": ("error", "other", 200),
}


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _token(text: str, finish: str | None = None) -> bytes:
    return _event({"choices": [{"index": 0, "text": text, "finish_reason": finish}]})


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class FaultyServer:
    def __init__(self) -> None:
        self.count = 0
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            if head.startswith(b"GET /v1/models"):
                body = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": "fake"}]})
                writer.write(
                    f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    f"{len(body)}\r\nConnection: close\r\n\r\n{body}".encode()
                )
            elif head.startswith(b"GET"):
                writer.write(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
            else:
                name = list(BEHAVIOURS)[self.count % len(BEHAVIOURS)]
                self.count += 1
                await self.respond(name, writer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def respond(self, name: str, writer: asyncio.StreamWriter) -> None:
        sse_head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        if name in ("http_500", "http_429", "oom_500"):
            status = {"http_500": "500 Internal Server Error", "http_429": "429 Too Many Requests"}
            text = "CUDA out of memory. Tried to allocate 2.00 GiB" if name == "oom_500" else "busy"
            body = json.dumps({"error": {"message": text}})
            writer.write(
                f"HTTP/1.1 {status.get(name, '500 Internal Server Error')}\r\nContent-Length: "
                f"{len(body)}\r\nConnection: close\r\n\r\n{body}".encode()
            )
            return
        if name == "slow_headers":
            await asyncio.sleep(TIMEOUT_S * 3)
            return
        writer.write(sse_head)
        if name == "ok":
            for i in range(3):
                writer.write(_chunk(_token(f" w{i}", "length" if i == 2 else None)))
            writer.write(
                _chunk(
                    _event({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3}})
                )
            )
            writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        elif name == "reset_mid_stream":
            writer.write(_chunk(_token(" a")) + _chunk(_token(" b")))
            await writer.drain()
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        elif name == "stall":
            writer.write(_chunk(_token(" a")))
            await writer.drain()
            await asyncio.sleep(TIMEOUT_S * 3)
        elif name == "malformed_sse":
            writer.write(_chunk(_token(" a")) + _chunk(b"data: {not json\n\n"))
            writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        elif name == "truncated":
            writer.write(_chunk(_token(" a")) + _chunk(_token(" b")) + b"0\r\n\r\n")
        elif name == "error_event":
            writer.write(
                _chunk(_token(" a")) + _chunk(_event({"error": {"message": "engine died"}}))
            )
            writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


@pytest.mark.timeout(60)
def test_every_faulty_request_is_accounted(tmp_path: Path) -> None:
    cycles = 2
    n = cycles * len(BEHAVIOURS)

    async def go() -> tuple[object, float]:
        server = FaultyServer()
        url = await server.start()
        try:
            cfg = RunConfig(
                base_url=url,
                model="m",
                concurrency=5,
                num_requests=n,
                timeout_s=TIMEOUT_S,
                output_tokens=3,
            )
            t = time.perf_counter()
            doc = await run_load(cfg, out_dir=tmp_path)
            return doc, time.perf_counter() - t
        finally:
            await server.stop()

    doc, elapsed = asyncio.run(go())
    records = read_jsonl(tmp_path / "requests.jsonl", RequestRecord).items
    assert len(records) == n
    assert len({r.request_id for r in records}) == n
    got: dict[tuple[str, str | None], int] = {}
    for r in records:
        got[(r.status, r.error_kind)] = got.get((r.status, r.error_kind), 0) + 1
    expected: dict[tuple[str, str | None], int] = {}
    for status, kind, _ in BEHAVIOURS.values():
        expected[(status, kind)] = expected.get((status, kind), 0) + cycles
    assert got == expected
    summary = doc.summary  # type: ignore[attr-defined]
    assert summary["requests_total"] == n
    assert summary["requests_ok"] + summary["requests_error"] + summary["requests_cancelled"] == n
    assert doc.accounting["sent"] == n  # type: ignore[attr-defined]
    statuses = sorted(r.http_status for r in records if r.error_kind in ("http_status", "oom"))
    assert statuses == [429] * cycles + [500] * (2 * cycles)
    assert all(r.error_excerpt for r in records if r.status == "error")
    # 4 timeouts of at most 1 s each over 5 streams: far below this bound
    assert elapsed < n * TIMEOUT_S


def test_connection_refused_is_connect_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now

    async def go() -> object:
        async with OpenAIClient(f"http://127.0.0.1:{port}", concurrency=1, timeout_s=5) as c:
            return await c.stream(ClientRequest("r", "hello", 3, "m"))

    out = asyncio.run(go())
    assert out.status == "error"  # type: ignore[attr-defined]
    assert out.error_kind == "connect"  # type: ignore[attr-defined]


@pytest.mark.timeout(60)
def test_failed_scrapes_are_recorded_not_fatal(tmp_path: Path) -> None:
    async def go() -> object:
        server = FaultyServer()
        url = await server.start()
        try:
            cfg = RunConfig(
                base_url=url,
                model="m",
                concurrency=1,
                num_requests=2,
                timeout_s=TIMEOUT_S,
                metrics_url=url + "/metrics",
                scrape_interval_s=0.05,
                baseline_s=0.1,
            )
            return await run_load(cfg, out_dir=tmp_path)
        finally:
            await server.stop()

    doc = asyncio.run(go())
    scrape = doc.scrape  # type: ignore[attr-defined]
    assert scrape["scrapes"] >= 2  # baseline + at least the final scrape
    assert scrape["failures"] == scrape["scrapes"]  # the fake server answers 404
    assert "HTTP 404" in scrape["first_failures"][0][1]
    assert doc.summary["requests_total"] == 2  # type: ignore[attr-defined]
    assert any("metric scrapes failed" in w for w in doc.warnings)  # type: ignore[attr-defined]
