"""`kvbudget audit isolation` and `audit reuse` against a real vLLM 0.32.0 (CPU build).

Independent sources: the engine's own prefix-cache hit counter (``vllm:prefix_cache_hits_total``),
scraped by the test around requests the test sends itself, and the engine's outputs.

* isolation without ``cache_salt``: a second tenant's identical prompt is served from cache
  (the test sees the hit counter move for tenant B's request), and the audit says
  ``leak_detected`` with exactly 12 x 256 cross-tenant cached tokens (its prompts are the served
  model's token ids, so a 256-token shared prefix is two full 128-token blocks);
* isolation with per-tenant salts: the test sees no hit for tenant B's identical prompt under
  another salt, and the audit says ``no_leak_detected`` with 0 cross-tenant cached tokens while
  its same-tenant positive control proves reuse;
* reuse: cold, hot and after ``/reset_prefix_cache`` runs give the same greedy tokens; the hot
  run was really served from cache (hit counter) and after the reset the test's own request
  gets no hit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

# an engine start takes 30-90 s (minutes on a busy machine): generous per-test limits
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

HITS = "vllm:prefix_cache_hits_total"
PROMPT = " ".join(f"tok{i} w{i * 7 % 13}" for i in range(200))  # several 128-token blocks


def audit(server: Any, *args: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "kvbudget",
        "audit",
        *args,
        "--base-url",
        server.base_url,
        "--metrics-url",
        server.base_url + "/metrics",
        "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, f"audit failed ({done.returncode}):\n{done.stderr[-3000:]}"
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def hits_of(server: Any, prompt: str, **extra: Any) -> float:
    """Prefix-cache hit tokens the engine counted for one request the test sends."""
    before = server.metrics()
    server.complete(prompt, max_tokens=1, **extra)
    want = before.get("vllm:request_success_total", 0.0) + 1
    after = server.settled_metrics("vllm:request_success_total", want)
    return after.get(HITS, 0.0) - before.get(HITS, 0.0)


def test_isolation_leak_without_salt_none_with_per_tenant_salt(vllm_server: Any) -> None:
    server = vllm_server
    # The engine itself, by hand: same prompt, tenant A then tenant B.
    hits_of(server, "unsalted " + PROMPT)
    assert hits_of(server, "unsalted " + PROMPT) > 0  # no salt: B reuses A's blocks
    hits_of(server, "salted " + PROMPT, cache_salt="tenant-a-1301")
    assert hits_of(server, "salted " + PROMPT, cache_salt="tenant-b-1301") == 0

    common = ["--trials", "12", "--prefix-tokens", "256", "--suffix-tokens", "16"]
    leak = audit(server, "isolation", "--salt", "none", "--seed", "11", *common)
    assert leak["verdict"] == "leak_detected", leak["reason"]
    # prompts are sent as the served model's token ids: 256 + 16 = 272 tokens on the server,
    # and each of the 12 cross-tenant trials hits the shared prefix's two full 128-token
    # blocks, no more (the 16-token tail never fills a block): 12 x 256 by hand
    assert leak["target"]["details"]["prompts"].startswith("served token ids")
    assert {r["attacker_prompt_tokens"] for r in leak["trial_records"]} == {272}
    assert leak["cross_tenant_hit_counter_tokens"] == 12 * 256
    assert leak["cross_tenant_cached_tokens"] == 12 * 256
    assert leak["control_cached_tokens_max"] in (None, 0)
    assert leak["provenance"]["kind"] == "measured" and leak["provenance"]["engine"] == "vllm"
    assert leak["provenance"]["engine_version"] == "0.32.0"

    safe = audit(server, "isolation", "--salt", "per-tenant", "--seed", "12", *common)
    assert safe["verdict"] == "no_leak_detected", safe["reason"]
    assert safe["cross_tenant_cached_tokens"] == 0
    assert safe["cross_tenant_hit_counter_tokens"] == 0
    assert safe["positive_control"]["passed"] is True


def test_reuse_cold_hot_and_after_reset(vllm_server: Any) -> None:
    server = vllm_server
    doc = audit(
        server,
        "reuse",
        "--prompts",
        "3",
        "--prompt-tokens",
        "200",
        "--max-tokens",
        "8",
        "--logprobs",
        "1",
        "--seed",
        "13",
    )
    assert doc["reset_available"] is True, doc["reason"]
    assert doc["verdict"] == "pass", doc["reason"]
    assert doc["num_reuse_proven"] == 3 and doc["num_diverged"] == 0
    for p in doc["prompts"]:
        # served token ids: the server counts the 200 requested tokens, and the hot run reuses
        # exactly the one full 128-token block of the cold run's prompt (by hand)
        assert p["cold"]["prompt_tokens"] == 200 and p["hot"]["prompt_tokens"] == 200
        assert p["cold"]["hit_counter_delta"] == 0
        assert p["hot"]["hit_counter_delta"] == 128  # the hot run really came from the cache
        assert p["after_reset"]["hit_counter_delta"] == 0 and p["after_reset_path"] == "recomputed"
        assert p["hot"]["output_sha256"] == p["cold"]["output_sha256"]
        assert p["after_reset"]["output_sha256"] == p["cold"]["output_sha256"]

    # The reset the audit relies on, by hand: after it, a cached prompt is computed again.
    hits_of(server, "reset " + PROMPT)
    assert hits_of(server, "reset " + PROMPT) > 0
    got = server.post_json("/reset_prefix_cache", {})
    assert not (isinstance(got, dict) and got.get("success") is False), got
    assert hits_of(server, "reset " + PROMPT) == 0
