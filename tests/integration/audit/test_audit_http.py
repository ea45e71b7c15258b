"""Both audits over HTTP (HttpProbe): against ``kvbudget serve``'s app in-process on 127.0.0.1
and against fake aiohttp servers (one corrupts the output after a cache hit, one never hits).

Expected cached-token counts are worked by hand from the block rule (full 16-token blocks of a
shared prefix); no test asserts on timing (the machine is shared): verdicts asserted here follow
from the cached-token counts alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from aiohttp import web

from kvbudget.audit.isolation import IsolationConfig, IsolationResult, run_isolation
from kvbudget.audit.probe_http import HttpProbe
from kvbudget.audit.reuse import ReuseConfig, ReuseResult, run_reuse
from kvbudget.serve.app import ServeApp
from kvbudget.serve.build import ServeEngineOptions, build_engine
from kvbudget.workload.tokenizer import get_tokenizer


def _with_serve(
    work: Callable[[HttpProbe], Awaitable[Any]], *, metrics: bool = True, chat: bool = False
) -> Any:
    async def go() -> Any:
        built = build_engine(
            ServeEngineOptions(
                model="m", num_gpu_blocks=1024, step_s=0.0005, per_token_s=5e-6, max_model_len=2048
            )
        )
        async with ServeApp(
            built.replica, model_name="m", max_model_len=2048, timing_name=built.timing_name
        ) as app:
            murl = app.base_url + "/metrics" if metrics else None
            endpoint: Literal["completions", "chat"] = "chat" if chat else "completions"
            async with HttpProbe(
                app.base_url, model=None, metrics_url=murl, endpoint=endpoint
            ) as probe:
                return await work(probe)

    return asyncio.run(go())


def test_isolation_over_http_without_salts_detects_the_leak_in_cached_tokens() -> None:
    cfg = IsolationConfig(trials=6, prefix_tokens=64, suffix_tokens=16, salt_mode="none")
    res: IsolationResult = _with_serve(lambda p: run_isolation(p, cfg))
    hits = [r for r in res.trial_records if r.arm == "hit"]
    assert [r.attacker_cached_tokens for r in hits] == [64] * 6  # 4 full blocks of 16
    assert [r.hit_counter_delta for r in hits] == [64.0] * 6  # vLLM-named /metrics moved
    assert [r.attacker_prompt_tokens for r in hits] == [80] * 6
    assert res.cross_tenant_cached_tokens == 6 * 64
    assert res.verdict == "leak_detected"
    # kvbudget serve is the simulator behind HTTP: its figures are simulated, timing model named
    assert res.source == "simulated" and res.provenance.kind == "simulated"
    assert res.provenance.timing_model == "fixed(step=0.0005s, per_token=5e-06s)"
    assert res.target["engine"] == "kvbudget-serve" and res.target["model"] == "m"


def test_isolation_over_http_with_per_tenant_salts_shows_no_cross_tenant_tokens() -> None:
    cfg = IsolationConfig(trials=6, prefix_tokens=64, suffix_tokens=16, salt_mode="per-tenant")
    res: IsolationResult = _with_serve(lambda p: run_isolation(p, cfg))
    assert res.cross_tenant_cached_tokens == 0
    assert res.positive_control.passed and res.positive_control.evidence == "cached_tokens"
    pos = [r for r in res.trial_records if r.arm == "positive"]
    assert [r.attacker_cached_tokens for r in pos] == [64] * 6


def test_reuse_over_http_against_the_embedded_server_passes() -> None:
    cfg = ReuseConfig(num_prompts=2, prompt_tokens=48, max_tokens=5)
    res: ReuseResult = _with_serve(lambda p: run_reuse(p, cfg))
    assert res.verdict == "pass", res.reason
    assert res.reset_available
    assert [p.hot.cached_tokens for p in res.prompts] == [32, 32]  # 47 tokens -> 2 full blocks
    assert all(p.hot_vs_cold.verdict == "identical" for p in res.prompts)


def test_isolation_over_the_chat_endpoint_counts_the_template_token_in_blocks() -> None:
    # "<|user|> prefix suffix <|assistant|>": 1 + 64 shared tokens -> floor(65 / 16) = 4 blocks
    cfg = IsolationConfig(trials=4, prefix_tokens=64, suffix_tokens=16, salt_mode="none")
    res: IsolationResult = _with_serve(lambda p: run_isolation(p, cfg), chat=True)
    hits = [r for r in res.trial_records if r.arm == "hit"]
    assert [r.attacker_cached_tokens for r in hits] == [64] * 4
    assert [r.attacker_prompt_tokens for r in hits] == [82] * 4
    assert res.control_cached_tokens_max == 0
    assert res.verdict == "leak_detected"


def test_reuse_over_the_chat_endpoint_passes() -> None:
    cfg = ReuseConfig(num_prompts=1, prompt_tokens=40, max_tokens=4)
    res: ReuseResult = _with_serve(lambda p: run_reuse(p, cfg), chat=True)
    assert res.verdict == "pass", res.reason
    assert res.prompts[0].hot.cached_tokens == 32  # 42 chat tokens -> 2 full blocks
    assert res.prompts[0].cold.prompt_tokens == 42


# ------------------------------------------------------------------ fake servers
def _fake_app(
    *,
    corrupt_after_hit: bool = False,
    can_reset: bool = False,
    reset_route: str = "/reset_prefix_cache",
    reset_body: dict[str, Any] | None = None,
    tier: bool = False,
    corrupt_reload: bool = False,
) -> web.Application:
    """A tiny OpenAI-like server: the output is the tokenizer's rule-4 text of the prompt.

    ``corrupt_after_hit``: a prompt seen before is a full-prompt GPU hit
    (``cached_tokens = len - 1``) and its output token ``max_tokens // 2`` is changed.
    ``tier``: a reset moves cached prompts to a "CPU tier"; a prompt found there is reloaded
    (reported as cached), and with ``corrupt_reload`` its output is changed the same way.
    """
    tok = get_tokenizer()
    gpu: set[str] = set()
    cpu: set[str] = set()

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        prompt = body["prompt"]
        ids = tok.encode(prompt)
        n = int(body["max_tokens"])
        out = tok.output_ids(ids, n)
        cached = 0
        corrupt = False
        if prompt in gpu and (corrupt_after_hit or tier):
            cached = len(ids) - 1
            corrupt = corrupt_after_hit
        elif prompt in cpu and tier:
            cached = len(ids) - 1
            corrupt = corrupt_reload
        if corrupt:
            out[n // 2] = out[n // 2] + 1 if out[n // 2] + 1 < tok.vocab_size else 5
        gpu.add(prompt)
        return web.json_response(
            {
                "choices": [
                    {
                        "index": 0,
                        "text": tok.decode(out),
                        "logprobs": None,
                        "finish_reason": "length",
                    }
                ],
                "usage": {
                    "prompt_tokens": len(ids),
                    "completion_tokens": n,
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
            }
        )

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake", "owned_by": "fake"}]})

    async def reset(request: web.Request) -> web.Response:
        if reset_body is not None and reset_body.get("reset") is False:
            return web.json_response(reset_body)
        if tier:
            cpu.update(gpu)
        gpu.clear()
        return web.json_response(reset_body or {"reset": True})

    app = web.Application()
    app.add_routes([web.post("/v1/completions", completions), web.get("/v1/models", models)])
    if can_reset:
        app.add_routes([web.post(reset_route, reset)])
    return app


def _with_fake(app: web.Application, work: Callable[[HttpProbe], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        try:
            async with HttpProbe(f"http://{host}:{port}", model=None) as probe:
                return await work(probe)
        finally:
            await runner.cleanup()

    return asyncio.run(go())


def test_fake_server_that_corrupts_output_after_a_hit_is_caught() -> None:
    cfg = ReuseConfig(num_prompts=3, prompt_tokens=40, max_tokens=6)
    app = _fake_app(corrupt_after_hit=True, can_reset=True)
    res: ReuseResult = _with_fake(app, lambda p: run_reuse(p, cfg))
    assert res.verdict == "diverged" and res.status == "fail"
    assert [p.hot.cached_tokens for p in res.prompts] == [39, 39, 39]
    # whitespace words: the corrupted token is number max_tokens // 2 = 3
    assert [p.hot_vs_cold.verdict for p in res.prompts] == ["diverged_at_token_3"] * 3
    # after the reset the fake recomputes: identical to the cold run
    assert [p.after_reset_vs_cold.verdict for p in res.prompts] == ["identical"] * 3


def test_fake_server_that_never_hits_is_reuse_not_exercised() -> None:
    cfg = ReuseConfig(num_prompts=2, prompt_tokens=40, max_tokens=4)
    app = _fake_app(corrupt_after_hit=False, can_reset=False)
    res: ReuseResult = _with_fake(app, lambda p: run_reuse(p, cfg))
    assert res.verdict == "reuse_not_exercised" and res.status == "inconclusive"
    assert not res.reset_available
    assert all(p.after_reset_path == "untested" for p in res.prompts)
    assert "did not run" in res.reason
    assert json.loads(res.model_dump_json())["status"] == "inconclusive"


def test_fake_sglang_like_flush_cache_is_used_for_the_reset() -> None:
    cfg = ReuseConfig(num_prompts=2, prompt_tokens=30, max_tokens=4)
    app = _fake_app(corrupt_after_hit=False, tier=True, can_reset=True, reset_route="/flush_cache")
    res: ReuseResult = _with_fake(app, lambda p: run_reuse(p, cfg))
    assert res.reset_available
    assert res.verdict == "pass"
    assert [p.after_reset_path for p in res.prompts] == ["cached_after_reset"] * 2


def test_fake_refused_reset_leaves_the_after_reset_run_untested() -> None:
    cfg = ReuseConfig(num_prompts=1, prompt_tokens=30, max_tokens=4)
    app = _fake_app(tier=True, can_reset=True, reset_body={"reset": False})
    res: ReuseResult = _with_fake(app, lambda p: run_reuse(p, cfg))
    assert not res.reset_available
    assert res.verdict == "incomplete" and res.status == "inconclusive"


def test_fake_tier_that_corrupts_on_reload_is_caught_after_the_reset() -> None:
    # the seed's counterexample: the reload is counted as a hit and the output is wrong
    cfg = ReuseConfig(num_prompts=2, prompt_tokens=30, max_tokens=6)
    app = _fake_app(tier=True, corrupt_reload=True, can_reset=True)
    res: ReuseResult = _with_fake(app, lambda p: run_reuse(p, cfg))
    assert [p.hot_vs_cold.verdict for p in res.prompts] == ["identical"] * 2
    assert [p.after_reset_path for p in res.prompts] == ["cached_after_reset"] * 2
    assert [p.after_reset.cached_tokens for p in res.prompts if p.after_reset] == [29, 29]
    assert [p.after_reset_vs_cold.verdict for p in res.prompts] == ["diverged_at_token_3"] * 2
    assert res.verdict == "diverged" and res.status == "fail"


# ------------------------------------------------------------------ a salting gateway
def _gateway_app(upstream: str) -> web.Application:
    """A gateway in front of kvbudget serve that salts each request by its API key, as a
    multi-tenant proxy would (requests without a key are forwarded unsalted)."""
    import aiohttp

    async def forward(request: web.Request) -> web.Response:
        body = await request.json()
        auth = request.headers.get("Authorization")
        if auth:
            body["cache_salt"] = "gw-" + auth.removeprefix("Bearer ")
        async with (
            aiohttp.ClientSession() as s,
            s.post(upstream + request.path, json=body) as r,
        ):
            payload = await r.read()
            return web.Response(
                body=payload, status=r.status, content_type=r.content_type or "application/json"
            )

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m", "owned_by": "gateway"}]})

    app = web.Application()
    app.add_routes([web.post("/v1/completions", forward), web.get("/v1/models", models)])
    return app


def _through_gateway(keys: dict[str, str] | None, api_key: str) -> IsolationResult:
    cfg = IsolationConfig(trials=4, prefix_tokens=64, suffix_tokens=16, salt_mode="none")

    async def go() -> IsolationResult:
        built = build_engine(ServeEngineOptions(model="m", num_gpu_blocks=512, step_s=0.0005))
        async with ServeApp(built.replica, model_name="m", max_model_len=8192) as app:
            runner = web.AppRunner(_gateway_app(app.base_url), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            try:
                async with HttpProbe(
                    f"http://{host}:{port}", model="m", api_key=api_key, tenant_api_keys=keys
                ) as probe:
                    return await run_isolation(probe, cfg)
            finally:
                await runner.cleanup()

    return asyncio.run(go())


def test_gateway_salting_by_api_key_isolates_two_keys_but_not_one() -> None:
    shared = _through_gateway(None, api_key="key-of-a")
    assert shared.cross_tenant_cached_tokens == 4 * 64  # both tenants used key-of-a
    assert shared.verdict == "leak_detected"
    split = _through_gateway({"tenant-b": "key-of-b"}, api_key="key-of-a")
    assert split.cross_tenant_cached_tokens == 0
    assert split.positive_control.passed  # tenant-a's second request still hits
    dumped = split.model_dump_json() + split.to_markdown()
    assert "key-of-a" not in dumped and "key-of-b" not in dumped
