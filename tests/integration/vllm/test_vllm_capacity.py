"""``kvbudget capacity --base-url`` against a real vLLM 0.32.0 (CPU build, tiny dummy-weight
llama) that serves one request at a time (``--max-num-seqs 1``), within a small budget.

The answers depend on this machine's speed, so the checks are the structural truths of
tests/integration/maxload/live.py (both bracket bounds probed, the binding constraint named,
vLLM's /metrics read at each step: ``vllm:kv_cache_usage_perc`` and
``vllm:num_requests_waiting``, a broken step stopped early, every request accounted), plus:
the figures are measured and name vLLM and its version as the server reports them, and with one
sequence at a time vLLM queued requests (``num_requests_waiting >= 1``) at the step that broke.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.maxload.live import check_search, run_capacity

# an engine start takes 30-90 s (minutes on a busy machine); the search itself is bounded
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

WARMUP = 2


@pytest.fixture(scope="module")
def one_at_a_time(module_server_factory: Any, tiny_llama: Path) -> Any:
    return module_server_factory(tiny_llama, ["--max-num-seqs", "1"])


def test_capacity_search_on_vllm(one_at_a_time: Any) -> None:
    server = one_at_a_time
    doc = run_capacity(
        server.base_url,
        server.served_model_name,
        *("--input-tokens", "64", "--output-tokens", "4", "--num-requests", "20"),
        *("--seeds", "1", "--rate-tolerance", "0.5", "--warmup-requests", str(WARMUP)),
        *("--max-duration-s", "150", "--slo", "ttft_p95<1s"),
    )
    assert doc["figures"] == "measured"
    assert doc["engine"] == "vllm" and doc["engine_version"] == server.version
    check_search(doc, warmup=WARMUP, kv_usage=True)
    broke = [p for p in doc["concurrency_points"] if p.get("stopped_early")]
    assert broke and all(p["num_waiting_max"] >= 1 for p in broke)
    # the engine counted every request that reached it: the ones kvbudget says finished ok at
    # least (cancelled ones may have been aborted before or after vLLM counted them)
    ok = sum(p["num_ok"] for p in doc["concurrency_points"] + doc["rate_points"])
    after = server.settled_metrics("vllm:request_success_total", ok + WARMUP)
    assert after.get("vllm:request_success_total", 0.0) >= ok + WARMUP
