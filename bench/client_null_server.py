"""A null OpenAI-compatible streaming server for measuring load-client overhead.

It does no work: ``POST /v1/completions`` (or chat) streams ``--tokens`` SSE events (one token
per event, HTTP/1.1 chunked, keep-alive), then a usage event and ``[DONE]``. A single step
loop writes one event to every active stream per iteration, one ``send()`` per event (like an
engine emitting one token per running request per step), as fast as the core allows.

For each request it records, on ``time.perf_counter()``, when the request body was complete,
when the first event was written and when the last one was, keyed by the sha256 of the prompt,
so a client's TTFT can be compared with the server's own received-to-first-event time, and
every client's throughput and streams in flight are measured the same way, by the server
(``GET /stats``). It always streams ``--tokens`` events, whatever ``max_tokens`` says.
``GET /v1/models`` and ``GET /health`` answer for identity and peers' start-up checks; ``POST /reset_stats`` clears the log.

Run: ``python bench/client_null_server.py --port 0`` (prints the URL on stdout).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import time

_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _json_response(obj: object, status: str = "200 OK") -> bytes:
    body = json.dumps(obj).encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class Stream:
    __slots__ = ("chat", "key", "proto", "sent")

    def __init__(self, proto: NullProtocol, chat: bool) -> None:
        self.key = ""
        self.proto = proto
        self.chat = chat
        self.sent = 0


class NullServer:
    def __init__(self, num_tokens: int) -> None:
        self.num_tokens = num_tokens
        self.active: list[Stream] = []
        self.wake = asyncio.Event()
        self.log: dict[str, list[float]] = {}
        self.pending_first: dict[int, tuple[str, float]] = {}
        self.max_active = 0
        tok = b'{"id":"cmpl-null","object":"text_completion","created":0,"model":"null","choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}]}'
        last = tok.replace(b'"finish_reason":null', b'"finish_reason":"length"')
        ctok = b'{"id":"chatcmpl-null","object":"chat.completion.chunk","created":0,"model":"null","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]}'
        clast = ctok.replace(b'"finish_reason":null', b'"finish_reason":"length"')
        usage = json.dumps(
            {
                "id": "cmpl-null",
                "object": "text_completion",
                "created": 0,
                "model": "null",
                "choices": [],
                "usage": {
                    "prompt_tokens": 32,
                    "completion_tokens": num_tokens,
                    "total_tokens": 32 + num_tokens,
                    "prompt_tokens_details": {"cached_tokens": 0},
                },
            },
            separators=(",", ":"),
        ).encode()
        self.ev_tok = _chunk(b"data: " + tok + b"\n\n")
        self.ev_last = _chunk(b"data: " + last + b"\n\n")
        self.ev_ctok = _chunk(b"data: " + ctok + b"\n\n")
        self.ev_clast = _chunk(b"data: " + clast + b"\n\n")
        self.ev_end = (
            _chunk(b"data: " + usage + b"\n\n") + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        )

    async def step_loop(self) -> None:
        n = self.num_tokens
        while True:
            if not self.active:
                self.wake.clear()
                await self.wake.wait()
            still: list[Stream] = []
            self.max_active = max(self.max_active, len(self.active))
            for st in self.active:
                tr = st.proto.transport
                if tr is None or tr.is_closing():
                    continue
                if st.sent == 0:
                    key = self.pending_first.pop(id(st), None)
                    if key is not None:
                        st.key = key[0]
                        self.log[key[0]] = [key[1], time.perf_counter()]
                st.sent += 1
                if st.sent < n:
                    tr.write((st.chat and self.ev_ctok) or self.ev_tok)
                    still.append(st)
                else:
                    tr.write(((st.chat and self.ev_clast) or self.ev_last) + self.ev_end)
                    st.proto.busy = False
                    done = self.log.get(st.key)
                    if done is not None:
                        done.append(time.perf_counter())
            self.active = still
            await asyncio.sleep(0)


class NullProtocol(asyncio.Protocol):
    def __init__(self, server: NullServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            length = 0
            lower = head.lower()
            pos = lower.find(b"content-length:")
            if pos >= 0:
                length = int(
                    lower[
                        pos + 15 : lower.find(b"\r\n", pos)
                        if lower.find(b"\r\n", pos) > 0
                        else None
                    ]
                )
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self.handle(head, body, time.perf_counter())

    def handle(self, head: bytes, body: bytes, received: float) -> None:
        tr = self.transport
        assert tr is not None
        line = head.split(b"\r\n", 1)[0]
        srv = self.server
        if line.startswith(b"GET /v1/models"):
            tr.write(
                _json_response({"object": "list", "data": [{"id": "null", "owned_by": "null"}]})
            )
        elif line.startswith(b"GET /health"):
            tr.write(_json_response({}))
        elif line.startswith(b"GET /stats"):
            tr.write(_json_response({"requests": srv.log, "max_active": srv.max_active}))
        elif line.startswith(b"POST /reset_stats"):
            srv.log.clear()
            srv.max_active = 0
            tr.write(_json_response({"ok": True}))
        elif line.startswith(b"POST /v1/"):
            req = json.loads(body)
            chat = b"chat" in line
            prompt = req["messages"][0]["content"] if chat else req.get("prompt", "")
            if not isinstance(prompt, str):
                prompt = json.dumps(prompt)
            st = Stream(self, chat)
            srv.pending_first[id(st)] = (hashlib.sha256(prompt.encode()).hexdigest(), received)
            tr.write(_HEAD)
            self.busy = True
            srv.active.append(st)
            srv.wake.set()
        else:
            tr.write(_json_response({"error": "not found"}, "404 Not Found"))


async def main(port: int, num_tokens: int) -> None:
    server = NullServer(num_tokens)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: NullProtocol(server), "127.0.0.1", port, backlog=4096)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    print(url, flush=True)
    await server.step_loop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(args.port, args.tokens))
