"""After ``[DONE]`` the client reads the body's end so the connection is reused; a server that
never ends the body after ``[DONE]`` still yields an ok request."""

from __future__ import annotations

import asyncio
import json

import pytest

from kvbudget.load.client import ClientRequest, OpenAIClient


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class SlowEndServer:
    """Streams 2 tokens and [DONE], then ends the chunked body after ``end_delay_s`` (or never)."""

    def __init__(self, end_delay_s: float | None) -> None:
        self.end_delay_s = end_delay_s
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                for i, reason in ((0, None), (1, "length")):
                    ev = {"choices": [{"index": 0, "text": f" t{i}", "finish_reason": reason}]}
                    writer.write(_chunk(b"data: " + json.dumps(ev).encode() + b"\n\n"))
                writer.write(_chunk(b"data: [DONE]\n\n"))
                await writer.drain()
                if self.end_delay_s is None:
                    await asyncio.sleep(3600)
                await asyncio.sleep(self.end_delay_s)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def _run(end_delay_s: float | None, n: int) -> tuple[list[str], int]:
    async def go() -> tuple[list[str], int]:
        srv = SlowEndServer(end_delay_s)
        server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with OpenAIClient(f"http://127.0.0.1:{port}", concurrency=1, timeout_s=10) as c:
                outs = [await c.stream(ClientRequest(f"r{i}", "hi", 2, "m")) for i in range(n)]
        finally:
            server.close()
        return [o.status for o in outs], srv.connections

    return asyncio.run(go())


@pytest.mark.timeout(30)
def test_connection_reused_when_body_ends_after_done() -> None:
    statuses, connections = _run(0.05, 3)
    assert statuses == ["ok", "ok", "ok"]
    assert connections == 1


@pytest.mark.timeout(30)
def test_body_never_ending_after_done_is_still_ok() -> None:
    statuses, connections = _run(None, 2)
    assert statuses == ["ok", "ok"]
    assert connections == 2  # the unfinished connection was dropped, not reused
