"""``kvbudget serve`` against hostile clients (issue 30 item 6): deep JSON, huge prompts, a
string where a boolean belongs, connections that never finish a request.

Bounds written by hand: the synthetic vocabulary's longest token is ``<|assistant|>``
(13 characters; the words of a 32,000-id vocabulary have at most 3 two-character syllables),
so vLLM's character bound for ``max_model_len`` 2048 is 2048 x 13 = 26,624 characters and the
body bound 26,624 x 6 + 1 MiB = 1,208,320 bytes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from kvbudget.serve import app as serve_app
from kvbudget.serve.app import ServeApp
from kvbudget.serve.build import ServeEngineOptions, build_engine

MAX_MODEL_LEN = 2048


def _serve(coro: Callable[[ServeApp], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        built = build_engine(
            ServeEngineOptions(
                model="m", num_gpu_blocks=256, step_s=0.001, max_model_len=MAX_MODEL_LEN
            )
        )
        async with ServeApp(
            built.replica, model_name="m", max_model_len=MAX_MODEL_LEN, timing_name="t"
        ) as app:
            return await coro(app)

    return asyncio.run(go())


async def _post_raw(app: ServeApp, path: str, data: bytes) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as s,
        s.post(app.base_url + path, data=data, headers=headers) as r,
    ):
        text = await r.text()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize"])
def test_deeply_nested_body_is_a_400_not_a_500(path: str) -> None:
    depth = 100_000  # 200 KB, deeper than Python's parser recursion
    body = ('{"prompt": ' + "[" * depth + "]" * depth + "}").encode()
    status, answer = _serve(lambda app: _post_raw(app, path, body))
    assert status == 400, answer
    assert answer["error"]["type"] == "BadRequestError"
    assert "nests too deeply" in answer["error"]["message"]


@pytest.mark.timeout(60)
def test_body_beyond_what_a_prompt_can_take_is_refused_unread() -> None:
    prompt = "ba " * 7_000_000  # 21 MB, far under the old 64 MiB limit
    body = json.dumps({"prompt": prompt, "max_tokens": 1}).encode()
    status, answer = _serve(lambda app: _post_raw(app, "/v1/completions", body))
    assert status == 413
    assert "1208320 bytes" in answer["error"]["message"]


@pytest.mark.timeout(60)
def test_prompt_over_vllms_character_bound_is_refused_before_tokenizing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvbudget.workload.tokenizer import SyntheticTokenizer

    def never(self: object, text: str) -> list[int]:
        raise AssertionError("the prompt was tokenized before its length was checked")

    monkeypatch.setattr(SyntheticTokenizer, "encode", never)
    prompt = "x" * (MAX_MODEL_LEN * 13 + 1)  # one character over: 26,625
    body = json.dumps({"prompt": prompt, "max_tokens": 1}).encode()
    status, answer = _serve(lambda app: _post_raw(app, "/v1/completions", body))
    assert status == 400
    assert answer["error"]["param"] == "input_text"
    assert answer["error"]["message"] == (
        "This model's maximum context length is 2048 tokens. However, your prompt contains "
        "26625 characters (more than 26624 characters, which is the upper bound for 2048 input "
        "tokens). Please reduce the length of the input prompt."
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", ["yes", "true", 1, "false"])
def test_stream_must_be_a_json_boolean(value: object) -> None:
    body = json.dumps({"prompt": "ba be", "max_tokens": 1, "stream": value}).encode()
    status, answer = _serve(lambda app: _post_raw(app, "/v1/completions", body))
    assert status == 400, answer
    assert answer["error"]["param"] == "stream"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"],
    ids=["nothing", "half-a-head"],
)
def test_idle_and_half_open_connections_are_closed(
    monkeypatch: pytest.MonkeyPatch, sent: bytes
) -> None:
    monkeypatch.setattr(serve_app, "KEEPALIVE_TIMEOUT_S", 0.5, raising=False)

    async def go(app: ServeApp) -> float:
        host, port = app.base_url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(sent)
        await writer.drain()
        started = time.monotonic()
        # the server closes the connection: EOF well before this test's own 10 s
        data = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
        assert data == b""
        return time.monotonic() - started

    assert _serve(go) < 5


@pytest.mark.timeout(60)
def test_a_body_that_never_arrives_is_a_408(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_app, "BODY_READ_TIMEOUT_S", 0.5)

    async def go(app: ServeApp) -> bytes:
        host, port = app.base_url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readline(), timeout=10)
        writer.close()
        return head

    assert _serve(go).startswith(b"HTTP/1.1 408")
