"""``kvbudget capacity --base-url`` against a real llama.cpp ``llama-server`` (CPU, tiny random
GGUF) with one slot (``-np 1``: one request at a time), within a small budget.

The answers depend on this machine's speed, so the SLO is set from one request's service time
``s`` measured just before (live.live_slo: one to six users meet ``ttft_p95 < 6 s``, eight
cannot). The checks are the structural truths of
tests/integration/maxload/live.py (both bracket bounds probed, the binding constraint named,
llama.cpp's /metrics read at each step, a broken step stopped early, every request accounted),
plus: the figures are measured and name llama.cpp; with one slot the server deferred requests
(``llamacpp:requests_deferred >= 1``) at the step that broke. KV usage is checked on every step
exactly when this build exports ``llamacpp:kv_cache_usage_ratio`` (newer builds dropped it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.maxload.live import (
    SEARCH_ARGS,
    check_search,
    live_slo,
    run_capacity,
    single_request_s,
)

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(1800)]

WARMUP = 2


@pytest.fixture(scope="module")
def one_slot(
    llamacpp: Any, llamacpp_launcher: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("llama-capacity") / "llama-server.log"
    args = ["-c", "2048", "-np", "1", "-t", "2"]
    with llamacpp_launcher.start_server(llamacpp, llamacpp.model("llama"), log, args) as server:
        yield server


def test_capacity_search_on_llamacpp(one_slot: Any) -> None:
    server = one_slot
    exports_kv = "llamacpp:kv_cache_usage_ratio" in server.metrics_text()
    service_s = single_request_s(server.base_url, "tiny-llama")
    doc = run_capacity(
        server.base_url,
        "tiny-llama",
        *SEARCH_ARGS,
        *("--warmup-requests", str(WARMUP), "--max-duration-s", "600"),
        *("--slo", live_slo(service_s)),
        timeout_s=1200,
    )
    assert doc["figures"] == "measured" and doc["engine"] == "llama.cpp"
    check_search(doc, warmup=WARMUP, kv_usage=exports_kv)
    broke = [p for p in doc["concurrency_points"] if p.get("stopped_early")]
    assert broke and all(p["num_waiting_max"] >= 1 for p in broke)
