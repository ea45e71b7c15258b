"""Secrets and prompts: the API key is sent but never written; prompts are hashes by default."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kvbudget.load.config import RunConfig
from kvbudget.load.run import run_load
from kvbudget.records import RequestRecord, read_jsonl

SECRET = "sk-test-3f9a1c-never-on-disk"


async def _echo_server(seen: list[str]) -> tuple[web.AppRunner, str]:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "owned_by": "x"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization", ""))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(2):
            chunk = {
                "choices": [
                    {"index": 0, "text": f" t{i}", "finish_reason": "length" if i else None}
                ]
            }
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.add_routes([web.get("/v1/models", models), web.post("/v1/completions", completions)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


def _run(tmp: Path, seen: list[str], **kw: Any) -> None:
    async def go() -> None:
        runner, url = await _echo_server(seen)
        try:
            cfg = RunConfig(base_url=url, model="m", num_requests=3, output_tokens=2, **kw)
            await run_load(cfg, out_dir=tmp)
        finally:
            await runner.cleanup()

    asyncio.run(go())


@pytest.mark.timeout(60)
def test_api_key_sent_but_never_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVB_TEST_API_KEY", SECRET)
    seen: list[str] = []
    _run(tmp_path, seen, api_key_env="KVB_TEST_API_KEY")
    assert seen == [f"Bearer {SECRET}"] * 3
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert SECRET not in f.read_text(errors="replace"), f
    assert "KVB_TEST_API_KEY" in (tmp_path / "run.json").read_text()


def test_missing_api_key_env_is_one_line_config_error(tmp_path: Path) -> None:
    from kvbudget.errors import ConfigError

    with pytest.raises(ConfigError, match="--api-key-env: the environment variable it names"):
        _run(tmp_path, [], api_key_env="KVB_SURELY_UNSET")


@pytest.mark.timeout(60)
def test_prompts_are_hashes_unless_kept(tmp_path: Path) -> None:
    _run(tmp_path / "a", [])
    recs = read_jsonl(tmp_path / "a" / "requests.jsonl", RequestRecord).items
    assert all(r.prompt_text is None and r.output_text is None for r in recs)
    assert all(r.prompt_sha256 and len(r.prompt_sha256) == 64 for r in recs)
    assert all(r.output_sha256 == hashlib.sha256(b" t0 t1").hexdigest() for r in recs)
    _run(tmp_path / "b", [], keep_prompts=True)
    kept = read_jsonl(tmp_path / "b" / "requests.jsonl", RequestRecord).items
    for r in kept:
        assert r.prompt_text is not None
        assert hashlib.sha256(r.prompt_text.encode()).hexdigest() == r.prompt_sha256
        assert r.output_text == " t0 t1"


@pytest.mark.timeout(60)
def test_api_key_echoed_by_a_gateway_error_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some gateways answer 401 with the key they were given; the excerpt must not keep it."""

    async def go() -> None:
        async def models(request: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [{"id": "m"}]})

        async def completions(request: web.Request) -> web.Response:
            given = request.headers.get("Authorization", "").removeprefix("Bearer ")
            return web.json_response({"error": f"Incorrect API key provided: {given}"}, status=401)

        app = web.Application()
        app.add_routes([web.get("/v1/models", models), web.post("/v1/completions", completions)])
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        try:
            cfg = RunConfig(
                base_url=f"http://{host}:{port}",
                model="m",
                num_requests=2,
                output_tokens=2,
                api_key_env="KVB_TEST_API_KEY",
            )
            await run_load(cfg, out_dir=tmp_path)
        finally:
            await runner.cleanup()

    monkeypatch.setenv("KVB_TEST_API_KEY", SECRET)
    asyncio.run(go())
    recs = read_jsonl(tmp_path / "requests.jsonl", RequestRecord).items
    assert [r.http_status for r in recs] == [401, 401]
    assert all(r.error_excerpt and "[api key redacted]" in r.error_excerpt for r in recs)
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert SECRET not in f.read_text(errors="replace"), f
