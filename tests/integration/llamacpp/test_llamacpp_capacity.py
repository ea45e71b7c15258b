"""``kvbudget capacity --base-url`` against a real llama.cpp ``llama-server`` (CPU, tiny random
GGUF) with one slot (``-np 1``: one request at a time), within a small budget.

The answers depend on this machine's speed, so the SLO is set from one request's service time
``s`` measured just before (one output token): one user waits about ``s``, two about ``2 s``,
both under ``2.5 s``; four queue about ``4 s``. The checks are the structural truths of
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

from tests.integration.maxload.live import check_search, run_capacity, single_request_s

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(600)]

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
    slo = f"ttft_p95<{2.5 * service_s * 1e3:.0f}ms"
    doc = run_capacity(
        server.base_url,
        "tiny-llama",
        *("--input-tokens", "16", "--output-tokens", "1", "--num-requests", "20"),
        *("--seeds", "1", "--rate-tolerance", "0.5", "--warmup-requests", str(WARMUP)),
        *("--max-duration-s", "400", "--slo", slo),
    )
    assert doc["figures"] == "measured" and doc["engine"] == "llama.cpp"
    check_search(doc, warmup=WARMUP, kv_usage=exports_kv)
    broke = [p for p in doc["concurrency_points"] if p.get("stopped_early")]
    assert broke and all(p["num_waiting_max"] >= 1 for p in broke)
