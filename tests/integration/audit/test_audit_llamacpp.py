"""Both audits against a real engine: llama.cpp's ``llama-server`` (CPU, tiny random GGUF).

Selected explicitly (``pytest -m llamacpp``; the binary comes from ``scripts/llama-server.sh``);
when the binary is missing the test FAILS with the command to build it.

Expectations come from llama.cpp's documented behaviour, not from this code: with one slot the
server keeps the last prompt's KV cells and reuses the longest common prefix for the next request
(``cache_prompt``, on by default) and reports it as ``usage.prompt_tokens_details.cached_tokens``
and ``llamacpp:prompt_tokens_cached_total``; its request options have no ``cache_salt`` (unknown
fields are ignored), so per-tenant salts cannot isolate tenants; it has no
``/reset_prefix_cache`` route. Nothing about timing is asserted (shared CPU).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.audit.isolation import IsolationConfig, run_isolation
from kvbudget.audit.probe_http import HttpProbe
from kvbudget.audit.reuse import ReuseConfig, run_reuse
from tests.integration.engines import find_or_fail, load_bench

pytestmark = pytest.mark.llamacpp


def test_llamacpp_leaks_across_tenants_despite_salts_and_reuse_is_correct(
    tmp_path: Path, record_property: Any
) -> None:
    launcher = load_bench("llamacpp_server")
    lc = find_or_fail(launcher, launcher.find_llamacpp)
    args = ["-c", "2048", "-np", "1", "-t", "2", "--metrics"]
    server = launcher.start_server(lc, lc.model("llama"), tmp_path / "llama.log", args)
    try:

        async def go() -> tuple[Any, Any]:
            url = server.base_url
            async with HttpProbe(url, model=None, metrics_url=url + "/metrics") as probe:
                iso = await run_isolation(
                    probe,
                    IsolationConfig(
                        trials=4, prefix_tokens=128, suffix_tokens=16, salt_mode="per-tenant"
                    ),
                )
                reuse = await run_reuse(
                    probe, ReuseConfig(num_prompts=2, prompt_tokens=96, max_tokens=6)
                )
                return iso, reuse

        iso, reuse = asyncio.run(go())
    finally:
        server.stop()

    assert iso.source == "measured" and iso.target["engine"] == "llama.cpp"
    hits = [r for r in iso.trial_records if r.arm == "hit"]
    controls = [r for r in iso.trial_records if r.arm == "control"]
    # the attacker reuses the victim's prefix (at least the 128 words' first token each)
    assert all((r.attacker_cached_tokens or 0) >= 128 for r in hits)
    assert all((r.attacker_cached_tokens or 0) <= 2 for r in controls)  # BOS-sized at most
    assert all((r.hit_counter_delta or 0) >= 128 for r in hits)
    assert iso.cross_tenant_cached_tokens is not None and iso.cross_tenant_cached_tokens > 0
    assert iso.verdict == "leak_detected"

    assert reuse.num_reuse_proven == 2
    assert all(p.hot_vs_cold.verdict in ("identical", "within_tolerance") for p in reuse.prompts)
    assert not reuse.reset_available
    assert reuse.verdict == "incomplete"  # the after-reset run is untested, never a pass
    assert reuse.token_basis == "token strings returned with the completion"

    record = {
        "engine": "llama.cpp",
        "version": iso.target["engine_version"],
        "isolation": iso.summary(),
        "hit_cached_tokens": [r.attacker_cached_tokens for r in hits],
        "reuse": reuse.summary(),
    }
    record_property("audit_llamacpp", json.dumps(record))
    print("measured audit on llama.cpp:", json.dumps(record))
