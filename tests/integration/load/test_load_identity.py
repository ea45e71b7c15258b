"""Server identity: which engine answered, its version, and headers without secrets."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from kvbudget.load.client import OpenAIClient
from kvbudget.load.identity import safe_headers, server_identity


def test_safe_headers_drop_secrets_and_keep_server_and_x() -> None:
    got = safe_headers(
        {
            "Server": "uvicorn",
            "X-Request-Id": "abc",
            "Set-Cookie": "session=secret",
            "Authorization": "Bearer sk-1",
            "X-Api-Key": "sk-2",
            "Content-Type": "text/event-stream",
        }
    )
    assert got == {"server": "uvicorn", "x-request-id": "abc"}


def _identity(routes: dict[str, Any]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        app = web.Application()
        for path, body in routes.items():

            async def handler(request: web.Request, body: Any = body) -> web.Response:
                return web.json_response(body)

            app.router.add_get(path, handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        try:
            async with OpenAIClient(f"http://{host}:{port}", concurrency=1, timeout_s=5) as c:
                return await server_identity(c)
        finally:
            await runner.cleanup()

    return asyncio.run(go())


def test_vllm_identified_by_models_and_version() -> None:
    ident = _identity(
        {
            "/v1/models": {
                "data": [
                    {"id": "meta-llama/Llama-3.1-8B", "owned_by": "vllm", "max_model_len": 8192}
                ]
            },
            "/version": {"version": "0.11.0"},
        }
    )
    assert ident["engine"] == "vllm"
    assert ident["engine_version"] == "0.11.0"
    assert ident["models"][0]["max_model_len"] == 8192


def test_llamacpp_identified_by_props() -> None:
    ident = _identity(
        {
            "/v1/models": {"data": [{"id": "tiny.gguf", "owned_by": "llamacpp"}]},
            "/props": {
                "build_info": "b6000-abc",
                "total_slots": 4,
                "default_generation_settings": {"n_ctx": 4096},
                "chat_template": "{% very long %}",
            },
        }
    )
    assert ident["engine"] == "llama.cpp"
    assert ident["engine_version"] == "b6000-abc"
    assert ident["props"] == {"build_info": "b6000-abc", "total_slots": 4, "n_ctx": 4096}


def test_sglang_identified_by_server_info() -> None:
    ident = _identity(
        {
            "/v1/models": {"data": [{"id": "q", "owned_by": "sglang"}]},
            "/get_server_info": {"version": "0.5.2", "page_size": 1, "secret_field": "x"},
        }
    )
    assert ident["engine"] == "sglang"
    assert ident["engine_version"] == "0.5.2"
    assert ident["server_info"] == {"version": "0.5.2", "page_size": 1}
