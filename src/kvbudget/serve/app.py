"""The OpenAI-compatible HTTP server of ``kvbudget serve`` (aiohttp.web).

Routes: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions`` (stream or
not), ``POST /tokenize``, ``GET /health``, ``GET /version``, ``GET /metrics`` (vLLM names),
``POST /reset_prefix_cache``. Prompts are tokenized with the shared synthetic tokenizer
(:mod:`kvbudget.workload.tokenizer`); the output of a prompt is its deterministic synthetic
text (tokenizer rule 4). A client that disconnects aborts its request: the handler is
cancelled (``handler_cancellation``) or its next write fails, and the engine frees the
request's blocks at once. Binds 127.0.0.1 unless told otherwise.

Hostile clients (issue 30): a connection idle or half-open (no request, or a request's head
never finished) is closed after :data:`KEEPALIVE_TIMEOUT_S`, vLLM's own keep-alive default; a
body must arrive within :data:`BODY_READ_TIMEOUT_S`; a body is at most
:func:`max_body_bytes` (what a prompt of ``max_model_len`` tokens can take, at most 64 MiB); a
body that is not JSON, or nests deeper than Python's parser goes, is a 400; a prompt longer than
vLLM's character bound is refused before it is tokenized.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping

from aiohttp import web

from kvbudget import __version__
from kvbudget.engine_name import KVBUDGET_SERVE
from kvbudget.errors import KvbudgetError
from kvbudget.serve.engine import RealTimeEngine, TokenQueue
from kvbudget.serve.metrics import ServeMetrics
from kvbudget.serve.protocol import (
    ParsedRequest,
    RequestInvalid,
    TokenizeBody,
    chat_text,
    check_text_length,
    max_chars_per_token,
    parse_body,
    validate,
)
from kvbudget.serve.responses import ChunkMaker, ErrorBody, TokenizeResult, usage
from kvbudget.sim.replica import Replica
from kvbudget.sim.request import EngineRequest
from kvbudget.workload.tokenizer import get_tokenizer

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
#: an idle or half-open connection is closed after this long: vLLM 0.32's
#: ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` default (5 s, vllm/envs.py); aiohttp's own is 3,630 s
KEEPALIVE_TIMEOUT_S = 5.0
#: a request body must arrive within this long once its head has (a trickled body is a 408)
BODY_READ_TIMEOUT_S = 30.0
#: largest body whatever ``max_model_len``
MAX_BODY_BYTES = 64 * 1024 * 1024
#: JSON bytes one prompt character can take (``\uXXXX``), for the body bound
_JSON_BYTES_PER_CHAR = 6


def max_body_bytes(max_model_len: int, chars_per_token: int) -> int:
    """Largest request body: a prompt at vLLM's character bound (``max_model_len x
    max_chars_per_token``), every character JSON-escaped, plus 1 MiB for the rest; at most
    :data:`MAX_BODY_BYTES`. A body beyond it cannot hold a prompt that fits, so it is refused
    before it is read (memory stays bounded whatever the client sends)."""
    need = max_model_len * chars_per_token * _JSON_BYTES_PER_CHAR + 1024 * 1024
    return min(MAX_BODY_BYTES, need)


async def read_json(request: web.Request, *, limit_bytes: int) -> object:
    """The request's JSON body; :class:`RequestInvalid` (one line, OpenAI's error shape) when it
    is too large (413), too slow (408), not JSON or nested too deep for the parser (400)."""
    try:
        async with asyncio.timeout(BODY_READ_TIMEOUT_S):
            raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RequestInvalid(
            413,
            f"the request body is larger than {limit_bytes} bytes, the most a prompt of this "
            "model's maximum context length can take; send a shorter prompt",
        ) from None
    except TimeoutError:
        raise RequestInvalid(
            408, f"the request body did not arrive within {BODY_READ_TIMEOUT_S:g} s; send it whole"
        ) from None
    try:
        return json.loads(raw)
    except RecursionError:
        raise RequestInvalid(
            400, "the request body nests too deeply to parse; send a JSON object"
        ) from None
    except ValueError:  # not UTF-8 (UnicodeDecodeError) or not JSON
        raise RequestInvalid(400, "request body is not valid JSON") from None


def _dumps(obj: Mapping[str, object]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _sse(obj: Mapping[str, object]) -> bytes:
    return b"data: " + _dumps(obj).encode() + b"\n\n"


def _error(exc: RequestInvalid) -> web.Response:
    return web.json_response(exc.body(), status=exc.status)


class ServeApp:
    """A simulated replica behind HTTP, driven by :class:`RealTimeEngine` (the simulator's
    driver on the wall clock); ``await start()`` then use :attr:`base_url`."""

    def __init__(
        self,
        replica: Replica,
        *,
        model_name: str,
        max_model_len: int,
        vocab_size: int = 32000,
        speedup: float = 1.0,
        timing_name: str = "unknown",
        output_seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.engine = RealTimeEngine(replica, speedup=speedup, timing_name=timing_name)
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.tokenizer = get_tokenizer(vocab_size)
        self.output_seed = output_seed
        self.host = host
        self.port = port
        self.metrics = ServeMetrics(replica.core.stats, model_name)
        self.created = int(time.time())
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self.max_body_bytes = max_body_bytes(max_model_len, max_chars_per_token(self.tokenizer))
        self.app = web.Application(client_max_size=self.max_body_bytes)
        self.app.add_routes(
            [
                web.get("/v1/models", self.models),
                web.post("/v1/completions", self.completions),
                web.post("/v1/chat/completions", self.chat_completions),
                web.post("/tokenize", self.tokenize),
                web.get("/health", self.health),
                web.get("/version", self.version),
                web.get("/metrics", self.prometheus),
                web.post("/reset_prefix_cache", self.reset_prefix_cache),
            ]
        )

    async def start(self) -> str:
        await self.engine.start()
        self._runner = web.AppRunner(
            self.app,
            handler_cancellation=True,
            access_log=None,
            keepalive_timeout=KEEPALIVE_TIMEOUT_S,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.port = int(port)
        self.base_url = f"http://{host}:{port}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.engine.stop()

    async def __aenter__(self) -> ServeApp:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---------------------------------------------------------------- simple routes
    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "kvbudget",
                        "root": self.model_name,
                        "max_model_len": self.max_model_len,
                    }
                ],
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "version": __version__,
                "engine": KVBUDGET_SERVE,
                "timing_model": self.engine.timing_name,
                "speedup": self.engine.speedup,
            }
        )

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.exposition(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        return web.json_response({"reset": self.engine.core.reset_prefix_cache()})

    async def tokenize(self, request: web.Request) -> web.Response:
        tok = self.tokenizer
        try:
            req = validate(TokenizeBody, await read_json(request, limit_bytes=self.max_body_bytes))
            text = None
            if req.messages is not None:
                text = chat_text(req.messages, tok)
            elif req.prompt is not None:
                text = req.prompt
            if text is not None:
                check_text_length(text, max_model_len=self.max_model_len, tokenizer=tok)
                ids = tok.encode(text)
            else:
                raise RequestInvalid(400, "give 'prompt' (string) or 'messages'", "prompt")
        except RequestInvalid as exc:
            return _error(exc)
        result: TokenizeResult = {
            "count": len(ids),
            "max_model_len": self.max_model_len,
            "tokens": ids,
        }
        return web.json_response(result)

    # ---------------------------------------------------------------- generation
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        received = time.perf_counter()
        try:
            parsed = parse_body(
                await read_json(request, limit_bytes=self.max_body_bytes),
                chat=chat,
                model_name=self.model_name,
                tokenizer=self.tokenizer,
                max_model_len=self.max_model_len,
            )
        except RequestInvalid as exc:
            return _error(exc)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        engine_req = EngineRequest(
            request_id=rid,
            prompt_token_ids=parsed.prompt_token_ids,
            max_output_tokens=parsed.max_tokens,
            arrival_s=self.engine.sim_now_s(),
            cache_salt=parsed.cache_salt,
        )
        try:
            queue = self.engine.submit(engine_req)
        except KvbudgetError as exc:
            return _error(RequestInvalid(400, str(exc), "prompt"))
        finished = False
        try:
            resp, finished = await self._respond(request, rid, parsed, queue, received)
            return resp
        except ConnectionResetError:  # the client went away mid-stream: abort quietly
            return web.Response(status=499)
        finally:
            if not finished:
                self.engine.abort(rid)

    async def _respond(
        self,
        request: web.Request,
        rid: str,
        parsed: ParsedRequest,
        queue: TokenQueue,
        received: float,
    ) -> tuple[web.StreamResponse, bool]:
        tok = self.tokenizer
        out_ids = tok.output_ids(parsed.prompt_token_ids, parsed.max_tokens, seed=self.output_seed)
        maker = ChunkMaker(rid, self.model_name, parsed.chat)
        stream: web.StreamResponse | None = None
        if parsed.stream:
            stream = web.StreamResponse(headers={**_SSE_HEADERS, "X-Request-Id": rid})
            await stream.prepare(request)
            if parsed.chat:
                await stream.write(_sse(maker.role()))
        pieces: list[str] = []
        cached = 0
        reason: str | None = None
        last_t = received
        n = 0
        while True:
            item = await queue.get()
            if item is None:  # aborted: server stopping or an engine failure
                message = (
                    f"the engine aborted the request ({self.engine.error or 'server stopping'})"
                )
                if stream is None:
                    err: ErrorBody = {
                        "error": {"message": message, "type": "InternalServerError", "code": 500}
                    }
                    return web.json_response(err, status=500), False
                in_stream: ErrorBody = {"error": {"message": message, "code": 500}}
                await stream.write(_sse(in_stream))
                await stream.write(b"data: [DONE]\n\n")
                await stream.write_eof()
                return stream, False
            now = time.perf_counter()
            if n == 0:
                cached = item.num_cached_tokens
                self.metrics.ttft.observe(now - received)
            else:
                self.metrics.itl.observe(now - last_t)
            last_t = now
            piece = tok.piece(out_ids[item.token_index], item.token_index)
            n += 1
            reason = item.finish_reason if item.finished else None
            if stream is not None:
                await stream.write(_sse(maker.token(piece, reason)))
            else:
                pieces.append(piece)
            if item.finished:
                break
        done = reason is not None
        if done:
            self.metrics.e2e.observe(time.perf_counter() - received)
        use = usage(len(parsed.prompt_token_ids), n, cached)
        if stream is None:
            return web.json_response(maker.full("".join(pieces), reason, use)), done
        if parsed.include_usage:
            await stream.write(_sse(maker.usage_chunk(use)))
        await stream.write(b"data: [DONE]\n\n")
        await stream.write_eof()
        return stream, done
