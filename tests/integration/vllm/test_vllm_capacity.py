"""``kvbudget capacity --base-url`` against a real vLLM 0.32.0 (CPU build, tiny dummy-weight
llama) that serves one request at a time (``--max-num-seqs 1``), within a small budget.

The answers depend on this machine's speed, so the SLO is set from one request's service time
``s`` measured just before (``live.one_slot_slo``: TTFT p50 under ``2.5 s``, which one or two
users meet and four cannot; the median, not p95, because vLLM's CPU build serves a lone request's
first token in 19 ms or in 1.2 s on a busy host, and two such jumps in 20 requests fail a p95 at any
rate). The checks are the structural truths of
tests/integration/maxload/live.py (both bracket bounds probed, the binding constraint named,
vLLM's /metrics read at each step: ``vllm:kv_cache_usage_perc`` and
``vllm:num_requests_waiting``, a broken step stopped early, every request accounted), plus: the
figures are measured and name vLLM and its version as the server reports them, vLLM queued
requests (``num_requests_waiting >= 1``) at the steps that broke, and vLLM's own success counter
covers every request kvbudget recorded as ok.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.maxload.live import (
    ENGINE_SEARCH_ARGS,
    check_search,
    one_slot_slo,
    run_capacity,
    service_s,
)

# an engine start takes 30-90 s (minutes on a busy machine); the search itself is bounded
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

WARMUP = 2


@pytest.fixture(scope="module")
def one_at_a_time(module_server_factory: Any, tiny_llama: Path) -> Any:
    return module_server_factory(tiny_llama, ["--max-num-seqs", "1"])


def test_capacity_search_on_vllm(one_at_a_time: Any) -> None:
    server = one_at_a_time
    service = service_s(server.base_url, server.served_model_name)
    doc = run_capacity(
        server.base_url,
        server.served_model_name,
        *ENGINE_SEARCH_ARGS,
        *("--warmup-requests", str(WARMUP), "--max-duration-s", "900"),
        *("--slo", one_slot_slo(service, "p50")),
        timeout_s=1200,
    )
    assert doc["figures"] == "measured"
    assert doc["engine"] == "vllm" and doc["engine_version"] == server.version
    check_search(doc, warmup=WARMUP, kv_usage=True)
    broke = [p for p in doc["concurrency_points"] if p.get("stopped_early")]
    assert broke and all(p["num_waiting_max"] >= 1 for p in broke)
    ok = sum(p["num_ok"] for p in doc["concurrency_points"] + doc["rate_points"])
    after = server.settled_metrics("vllm:request_success_total", ok + WARMUP + 3)
    assert after.get("vllm:request_success_total", 0.0) >= ok + WARMUP + 3
