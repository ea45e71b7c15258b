"""Async streaming client for OpenAI-compatible servers (``/v1/completions``, chat).

Hot path: one :class:`aiohttp.ClientSession` whose connection pool is sized to the concurrency;
the body is read with ``readany()`` and split into SSE events by :class:`SseSplitter`; each
event is stamped with ``time.perf_counter()`` (CLOCK_MONOTONIC) at the read that carried its
first byte and kept as raw bytes. JSON is parsed after the stream ends (only a byte search for
``"content"``/``"text"`` runs per event, to count tokens for cancellation injection), so the
per-event cost stays a few microseconds.

Outcome taxonomy (``error_kind``): ``connect`` (no connection), ``timeout`` (per-request limit
hit), ``http_status`` (non-200; short body excerpt kept), ``oom`` (an error whose text says out
of memory), ``broken_stream`` (connection dropped or malformed event mid-stream),
``truncated_stream`` (the body ended without ``[DONE]`` or a finish reason), ``cancelled``
(the client aborted after N tokens on purpose), ``other``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from kvbudget.load.outcome import (
    Endpoint,
    StreamOutcome,
    carries_token,
    failed_outcome,
    looks_like_oom,
    parse_events,
)
from kvbudget.load.sse import SseSplitter
from kvbudget.load.urls import ENDPOINT_PATHS, api_root, url_query
from kvbudget.records import ErrorKind, excerpt

__all__ = [
    "ClientRequest",
    "Endpoint",
    "OpenAIClient",
    "StreamOutcome",
    "looks_like_oom",
]


#: seconds to wait for the end of the body after ``[DONE]`` (connection reuse only)
DONE_GRACE_S = 1.0


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """One request to send (prompt text is sent as-is; only its hash is ever stored)."""

    request_id: str
    prompt: str
    max_tokens: int
    model: str
    endpoint: Endpoint = "completions"
    ignore_eos: bool = True
    cache_salt: str | None = None
    cancel_after_tokens: int | None = None
    extra_body: dict[str, Any] | None = None
    #: chat: the whole conversation (a multi-turn session's earlier turns, then ``prompt``)
    messages: tuple[tuple[str, str], ...] | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": self.ignore_eos,
        }
        if self.endpoint == "chat":
            turns = self.messages or (("user", self.prompt),)
            body["messages"] = [{"role": role, "content": text} for role, text in turns]
        else:
            body["prompt"] = self.prompt
        if self.cache_salt is not None:
            body["cache_salt"] = self.cache_salt
        if self.extra_body:
            body.update(self.extra_body)
        return body


@dataclass
class Abort:
    """Set ``event`` to abort the requests in flight; ``reason`` is their records' excerpt."""

    event: asyncio.Event
    reason: str | None = None


#: sends retried when a pooled connection turns out to be closed by the server before it answered
STALE_CONNECTION_RETRIES = 2


class OpenAIClient:
    """Streaming client bound to one base URL (use as ``async with``)."""

    def __init__(
        self,
        base_url: str,
        *,
        concurrency: int,
        timeout_s: float,
        connect_timeout_s: float = 10.0,
        api_key: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
        force_close: bool = False,
    ) -> None:
        self.base_url = api_root(base_url)
        self._query = url_query(base_url)
        #: one connection per request (for servers that close every connection anyway)
        self.force_close = force_close
        self.concurrency = max(1, concurrency)
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._headers = {"Content-Type": "application/json"}
        self._api_key = api_key
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self.first_headers: dict[str, str] | None = None

    async def __aenter__(self) -> OpenAIClient:
        connector = aiohttp.TCPConnector(
            limit=self.concurrency,
            limit_per_host=self.concurrency,
            force_close=self.force_close,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s),
            headers=self._headers,
            auto_decompress=False,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def route(self, path: str) -> str:
        """``path`` on the server root, with the base URL's query (if any) kept after it."""
        url = self.base_url + path
        return f"{url}?{self._query}" if self._query else url

    def _fail(self, out: StreamOutcome, kind: ErrorKind, text: str, now_s: float) -> StreamOutcome:
        """Record a failure; a key echoed in an error body (some gateways do) never reaches it."""
        if self._api_key:
            text = text.replace(self._api_key, "[api key redacted]")
        return failed_outcome(out, kind, text, now_s)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("OpenAIClient used outside 'async with'")
        return self._session

    async def stream(self, req: ClientRequest, abort: Abort | None = None) -> StreamOutcome:
        """Send one streaming request; never raises for server or network faults.

        ``abort``: when its event is set while the request is in flight, the connection is
        dropped (the server sees a disconnect) and the outcome is ``cancelled``, with the
        tokens that had arrived and ``abort.reason`` as its excerpt.
        """
        out = StreamOutcome(request_id=req.request_id)
        try:
            async with asyncio.timeout(self.timeout_s):
                if abort is None:
                    out = await self._stream(req, out)
                else:
                    out = await self._abortable(req, out, abort)
        except TimeoutError:
            out = self._fail(
                out, "timeout", f"no completion within {self.timeout_s:g} s", self._clock()
            )
        return out

    async def _abortable(
        self, req: ClientRequest, out: StreamOutcome, abort: Abort
    ) -> StreamOutcome:
        task = asyncio.ensure_future(self._stream(req, out))
        waiter = asyncio.ensure_future(abort.event.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not task.cancelled():
            return task.result()
        # _read_events filled ``out`` with what had arrived before it was cancelled
        out.status = "cancelled"
        out.error_kind = "cancelled"
        out.error_excerpt = excerpt(abort.reason or "stopped early")
        out.done_s = self._clock()
        return out

    async def _stream(self, req: ClientRequest, out: StreamOutcome) -> StreamOutcome:
        clock = self._clock
        payload = json.dumps(req.body()).encode()
        url = self.route(ENDPOINT_PATHS[req.endpoint])
        resp: aiohttp.ClientResponse | None = None
        for attempt in range(STALE_CONNECTION_RETRIES + 1):
            out.sent_s = clock()
            try:
                resp = await self.session.post(url, data=payload)
                break
            except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
                return self._fail(out, "connect", str(exc), clock())
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # A pooled keep-alive connection the server had already closed: the request
                # never reached it (llama.cpp's server closes the connection after every
                # streamed response although it answers "Keep-Alive"). Send it again on another
                # connection; sent_s is the time of the send that got an answer.
                if attempt < STALE_CONNECTION_RETRIES:
                    continue
                return self._fail(out, "connect", f"{type(exc).__name__}: {exc}", clock())
            except (aiohttp.ClientError, OSError) as exc:
                return self._fail(out, "connect", f"{type(exc).__name__}: {exc}", clock())
        assert resp is not None
        try:
            out.http_status = resp.status
            if self.first_headers is None:
                self.first_headers = dict(resp.headers)
            if resp.status != 200:
                try:
                    body = (await resp.content.read(4096)).decode("utf-8", "replace")
                except (aiohttp.ClientError, OSError):
                    body = ""
                return self._fail(out, "http_status", f"HTTP {resp.status}: {body}", clock())
            return await self._read_events(req, resp, out)
        finally:
            resp.release()

    async def _read_events(
        self, req: ClientRequest, resp: aiohttp.ClientResponse, out: StreamOutcome
    ) -> StreamOutcome:
        clock = self._clock
        splitter = SseSplitter()
        events: list[tuple[float, bytes]] = []
        cancel_after = req.cancel_after_tokens
        num_content = 0
        saw_done = False
        reader = resp.content
        try:
            while True:
                chunk = await reader.readany()
                if not chunk:
                    break
                now = clock()
                for ev in splitter.feed(chunk, now):
                    data = ev[1]
                    if data == b"[DONE]":
                        saw_done = True
                        continue
                    events.append(ev)
                    if cancel_after is not None and carries_token(data, req.endpoint):
                        num_content += 1
                if saw_done:
                    if not reader.at_eof():
                        await _drain_to_eof(reader)
                    break
                if cancel_after is not None and num_content >= cancel_after:
                    resp.close()  # drop the connection: the server sees a disconnect
                    parse_events(events, req.endpoint, out)
                    out.status = "cancelled"
                    out.error_kind = "cancelled"
                    out.done_s = now
                    return out
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError) as exc:
            parse_events(events, req.endpoint, out)
            return self._fail(out, "broken_stream", f"{type(exc).__name__}: {exc}", clock())
        except asyncio.CancelledError:  # aborted (stream's ``abort``): keep what had arrived
            resp.close()  # drop the connection: the server sees a disconnect
            parse_events(events, req.endpoint, out)
            raise
        done_s = clock()
        # Hand the connection back and let tasks whose data has arrived take their timestamps
        # before this stream's parsing and record work (which is the heavy part per request):
        # when many streams end together, reads are not stamped late behind their processing.
        resp.release()
        await asyncio.sleep(0)
        problem = parse_events(events, req.endpoint, out)
        if problem is not None:
            kind, text = problem
            return self._fail(out, kind, text, done_s)
        if not saw_done and out.finish_reason is None:
            tail = splitter.pending.decode("utf-8", "replace")
            return self._fail(
                out,
                "truncated_stream",
                f"stream ended after {len(events)} events without [DONE] or finish_reason"
                + (f"; partial event {tail!r}" if tail else ""),
                done_s,
            )
        out.done_s = done_s
        return out

    async def get_json(self, path: str) -> tuple[int, Any, dict[str, str]]:
        """GET a JSON endpoint: (status, parsed body or None, headers); never raises."""
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                async with self.session.get(self.route(path)) as resp:
                    text = await resp.text()
                    try:
                        body = json.loads(text)
                    except ValueError:
                        body = None
                    return resp.status, body, dict(resp.headers)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return 0, None, {}

    async def get_text(self, path_or_url: str) -> str | None:
        """GET a text endpoint (a path on this server or an absolute URL); None on failure."""
        url = path_or_url if "://" in path_or_url else self.route(path_or_url)
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                async with self.session.get(url) as resp:
                    text = await resp.text()
                    return text if resp.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """POST a JSON body to a path on this server: (status, parsed body or None)."""
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                async with self.session.post(self.route(path), json=body) as resp:
                    text = await resp.text()
                    try:
                        return resp.status, json.loads(text)
                    except ValueError:
                        return resp.status, None
        except (TimeoutError, aiohttp.ClientError, OSError):
            return 0, None

    async def tokenize_count(
        self, model: str, text: str, *, chat: bool = False, add_special_tokens: bool = True
    ) -> int | None:
        """Token count from the server's ``POST /tokenize`` (vLLM, SGLang, serve), or None.

        ``chat=True`` sends the text as one user message so the server applies its chat
        template, as it did for the request itself. Output text is counted with
        ``add_special_tokens=False`` (no BOS), as the server counted the generated tokens.
        """
        body: dict[str, Any] = {"model": model}
        if not add_special_tokens:
            body["add_special_tokens"] = False
        if chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                async with self.session.post(self.route("/tokenize"), json=body) as resp:
                    if resp.status != 200:
                        return None
                    body = await resp.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
            return None
        if isinstance(body, dict):
            if isinstance(body.get("count"), int):
                return int(body["count"])
            if isinstance(body.get("tokens"), list):
                return len(body["tokens"])
        return None


async def _drain_to_eof(reader: aiohttp.StreamReader) -> None:
    """Read the body's end after ``[DONE]`` so the connection goes back to the pool.

    aiohttp closes a connection whose body was not read to the end; the terminating chunk
    usually follows ``[DONE]`` at once. A server that keeps the stream open gets
    ``DONE_GRACE_S`` and then loses the connection, not the request (it is complete).
    """
    with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
        async with asyncio.timeout(DONE_GRACE_S):
            while await reader.readany():
                pass
