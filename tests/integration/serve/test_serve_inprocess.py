"""``kvbudget serve`` in-process: the OpenAI surface, usage, prefix cache, metrics, and the
load runner end to end. Expected texts come from the tokenizer's documented rules."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kvbudget.load.config import RunConfig
from kvbudget.load.prometheus import parse_exposition
from kvbudget.load.run import run_load
from kvbudget.serve.app import ServeApp
from kvbudget.serve.build import ServeEngineOptions, build_engine
from kvbudget.workload.tokenizer import get_tokenizer


def _serve(coro: Callable[[ServeApp], Awaitable[Any]], **opts: Any) -> Any:
    async def go() -> Any:
        built = build_engine(
            ServeEngineOptions(
                model="m", num_gpu_blocks=opts.pop("blocks", 512), step_s=0.001, max_model_len=2048
            )
        )
        async with ServeApp(
            built.replica, model_name="m", max_model_len=2048, timing_name=built.timing_name
        ) as app:
            return await coro(app)

    return asyncio.run(go())


async def _post(app: ServeApp, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(app.base_url + path, json=body) as r:
        text = await r.text()
        return r.status, text


def _events(text: str) -> list[Any]:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            payload = block[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_streamed_completion_matches_the_tokenizer_rules() -> None:
    tok = get_tokenizer()
    prompt_ids = [100, 200, 300, 400]
    prompt = tok.decode(prompt_ids)

    async def go(app: ServeApp) -> tuple[int, str]:
        return await _post(
            app,
            "/v1/completions",
            {
                "model": "m",
                "prompt": prompt,
                "max_tokens": 5,
                "stream": True,
                "stream_options": {"include_usage": True},
                "ignore_eos": True,
            },
        )

    status, text = _serve(go)
    assert status == 200
    ev = _events(text)
    assert ev[-1] == "[DONE]"
    pieces = [e["choices"][0]["text"] for e in ev[:-1] if e["choices"]]
    assert "".join(pieces) == tok.output_text(prompt_ids, 5)  # rule 4: deterministic text
    assert [e["choices"][0]["finish_reason"] for e in ev[:5]] == [None] * 4 + ["length"]
    assert ev[-2]["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 5,
        "total_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def test_chat_non_stream_tokenize_and_errors() -> None:
    tok = get_tokenizer()
    messages = [{"role": "system", "content": "ba be"}, {"role": "user", "content": "bi bo bu"}]

    async def go(app: ServeApp) -> list[tuple[int, Any]]:
        return [
            await _post(
                app, "/v1/chat/completions", {"model": "m", "messages": messages, "max_tokens": 3}
            ),
            await _post(app, "/tokenize", {"model": "m", "messages": messages}),
            await _post(app, "/v1/completions", {"model": "other", "prompt": "ba"}),
            await _post(app, "/v1/completions", {"model": "m", "prompt": "ba", "max_tokens": 5000}),
            await _post(app, "/v1/completions", {"model": "m", "prompt": "ba", "cache_salt": ""}),
        ]

    chat, tokenized, wrong_model, too_long, bad_salt = _serve(go)
    body = json.loads(chat[1])
    # "<|system|> ba be <|user|> bi bo bu <|assistant|>" = 8 tokens
    assert body["usage"]["prompt_tokens"] == 8
    assert body["usage"]["completion_tokens"] == 3
    ids = tok.encode(tok.render_chat(messages))
    assert body["choices"][0]["message"]["content"] == tok.output_text(ids, 3)
    assert json.loads(tokenized[1])["count"] == 8
    assert wrong_model[0] == 404
    assert too_long[0] == 400 and "maximum context length is 2048" in too_long[1]
    assert bad_salt[0] == 400 and "cache_salt" in bad_salt[1]


def test_prefix_cache_hit_reported_and_salt_isolates() -> None:
    tok = get_tokenizer()
    prompt = tok.decode(list(range(10, 74)))  # 64 tokens = 4 blocks of 16

    async def go(app: ServeApp) -> list[int]:
        cached = []
        for salt in (None, None, "tenant-b"):
            body: dict[str, Any] = {"model": "m", "prompt": prompt, "max_tokens": 2}
            if salt:
                body["cache_salt"] = salt
            _, text = await _post(app, "/v1/completions", body)
            cached.append(json.loads(text)["usage"]["prompt_tokens_details"]["cached_tokens"])
        return cached

    first, second, salted = _serve(go)
    assert first == 0
    # vLLM never caches the last token of a prompt: 63 tokens -> 3 full blocks = 48 tokens
    assert second == 48
    assert salted == 0


def test_metrics_use_vllm_names_and_count_tokens() -> None:
    async def go(app: ServeApp) -> str:
        await _post(app, "/v1/completions", {"model": "m", "prompt": "ba be bi", "max_tokens": 4})
        async with aiohttp.ClientSession() as s, s.get(app.base_url + "/metrics") as r:
            return await r.text()

    text = _serve(go)
    assert "vllm:kv_cache_usage_perc" in text
    values = {s.name: s.value for s in parse_exposition(text, 0.0) if not s.labels}
    assert values["prompt_tokens"] == 3
    assert values["generation_tokens"] == 4
    assert values["requests_running"] == 0
    assert values["engine_ttft_seconds_count"] == 1


@pytest.mark.timeout(60)
def test_bench_against_serve_end_to_end(tmp_path: Path) -> None:
    async def go(app: ServeApp) -> Any:
        cfg = RunConfig(
            base_url=app.base_url,
            model="m",
            concurrency=4,
            num_requests=24,
            prompt_tokens=20,
            output_tokens=6,
            metrics_url=app.base_url + "/metrics",
            scrape_interval_s=0.05,
            check_tokens="server",
            cancel_after_tokens=2,
            cancel_fraction=0.25,
            warmup_requests=2,
            endpoint="chat",
        )
        doc = await run_load(cfg, out_dir=tmp_path)
        return doc, app.engine.core.stats()

    doc, stats = _serve(go)
    s = doc.summary
    assert s["requests_total"] + s["requests_warmup"] == 24
    assert s["requests_error"] == 0
    assert s["requests_ok"] + s["requests_cancelled"] == s["requests_total"]
    # the chat template adds "<|user|>" and "<|assistant|>": 20 words + 2 = 22 prompt tokens
    check = s["token_count_check"]
    assert check["prompt_mismatches"] == 0 and check["output_mismatches"] == 0
    assert doc.server["engine"] == "kvbudget-serve"
    ttft = doc.statistics["ttft_s"]
    assert ttft["n"] == s["requests_ok"]
    p50 = ttft["percentiles"]["p50"]
    assert p50["ci_low"] <= p50["value"] <= p50["ci_high"]
    assert p50["value"] == pytest.approx(s["ttft_p50_s"])
    assert "kv_usage_ratio" in doc.server_metrics
    # every block is back: only the null block is not free
    assert stats.num_free_blocks == stats.num_total_blocks - 1
    assert stats.num_running == 0 and stats.num_waiting == 0


def test_bad_bodies_are_one_line_400s_and_the_server_keeps_serving() -> None:
    async def raw(app: ServeApp, path: str, data: bytes) -> tuple[int, str]:
        headers = {"Content-Type": "application/json"}
        async with (
            aiohttp.ClientSession() as s,
            s.post(app.base_url + path, data=data, headers=headers) as r,
        ):
            return r.status, await r.text()

    async def go(app: ServeApp) -> list[tuple[int, Any]]:
        return [
            await raw(app, "/v1/completions", b"{not json"),
            await _post(app, "/v1/completions", {"model": "m", "prompt": "ba", "max_tokens": "3"}),
            await _post(app, "/v1/chat/completions", {"model": "m", "messages": [{"x": 1}]}),
            await _post(app, "/tokenize", {"model": "m", "prompt": 5}),
            await _post(app, "/v1/completions", {"model": "m", "prompt": "ba", "max_tokens": 2}),
        ]

    not_json, bad_max, bad_message, bad_tokenize, ok = _serve(go)
    assert not_json[0] == 400 and json.loads(not_json[1])["error"]["code"] == 400
    assert bad_max[0] == 400
    assert json.loads(bad_max[1])["error"] == {
        "message": "max_tokens='3' is not valid (input should be a valid integer); "
        "give an integer >= 1 (default 16)",
        "type": "BadRequestError",
        "param": "max_tokens",
        "code": 400,
    }
    err = json.loads(bad_message[1])["error"]
    assert bad_message[0] == 400 and err["param"] == "messages.0.role"
    assert err["message"].startswith("messages[0].role is required; ")
    err = json.loads(bad_tokenize[1])["error"]
    assert bad_tokenize[0] == 400 and err["param"] == "prompt"
    assert err["message"].startswith(
        "prompt=an integer is not valid (input should be a valid string)"
    )
    assert ok[0] == 200 and json.loads(ok[1])["usage"]["completion_tokens"] == 2
