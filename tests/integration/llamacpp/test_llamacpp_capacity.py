"""``kvbudget capacity --base-url`` against llama.cpp's ``llama-server`` (CPU, tiny random llama)
with one slot (``-np 1``): a FIFO queue that serves one request at a time.

Why these server flags (measured on this repository's 2-core machine, shared with other jobs,
2026-12-02, 64-token streamed requests, by hand; see docs/commands/capacity.md):

* ``-t 1``: with ``-t 2`` (both cores) one request alone took 1.6 to 10 s (five in a row), and
  four concurrent ones a few seconds later 0.24 s each (our reading, not traced: ggml's two
  compute threads meet at a barrier after every op, so a core taken by another process stalls
  both). One compute thread has no barrier to wait at: 1.0 to 1.9 s alone under the same
  load, and concurrent requests were served strictly in turn (TTFT about 0, s, 2 s, 3 s).
* cancellation: kvbudget streams every request, and llama-server cancels a streamed request when
  its client disconnects, queued ones included (4 open streams dropped: the slot idle and
  ``requests_deferred`` 0 within 0.05 s; the next request took its usual time). A non-streamed
  request is not cancelled (the slot stayed busy 0.9 s after the disconnect, until done).

The closed form for one slot, ``s`` the service time of one request: a closed loop of ``c``
users sends each request when the same user's previous one ends, so ``c - 1`` requests are ahead
of it and its TTFT is ``(c - 1) s`` plus its prefill. The SLO is ``ttft_p95 < 2.5 s0``, ``s0``
the median of 5 requests sent alone just before the search, after 2 that warm the server up
(``live.one_slot_slo``). The machine's speed drifts between
probes (other jobs), so each whole concurrency probe is judged against its own ``s``: the
seconds per completed request it measured (one slot: ``1 / requests_per_s``). A probe whose
closed-form TTFT ``(c - 1) s`` is clearly under the ceiling (below 0.8x) must have met the SLO,
one clearly over it (above 1.25x) must not, and its TTFT p95 must be at least ``0.7 (c - 1) s``
(a server that batched the users instead of queueing them would show TTFTs near 0). The rate
cannot exceed what one slot serves: the answer is at most the fastest service rate any whole
probe measured, plus the queue check's 5 % (``MIN_SLOPE``) and the rate tolerance.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget.metrics.stability import MIN_SLOPE
from tests.integration.maxload.live import (
    INPUT_TOKENS,
    check_search,
    one_slot_slo,
    run_capacity,
    service_s,
)

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(300)]

WARMUP = 2
#: 16-token requests: s about 0.25 s here, 20 times the client's and the scrape's jitter (tens of
#: ms). Longer ones made the search outlast its budget: at 24 tokens (s 0.4 to 0.7 s) the rate's
#: 80-request confirmation at half the service rate alone takes 100 to 160 s
OUTPUT_TOKENS = 16
SERVER_ARGS = ("-np", "1", "-t", "1", "-c", "2048")


def test_capacity_search_on_llamacpp_one_slot(start_llama_server: Any, llamacpp: Any) -> None:
    server = start_llama_server(llamacpp.model("llama"), *SERVER_ARGS)
    service_s(server.base_url, "tiny-llama", repeats=2, output_tokens=OUTPUT_TOKENS)  # warm-up
    s0 = service_s(server.base_url, "tiny-llama", repeats=5, output_tokens=OUTPUT_TOKENS)
    slo = one_slot_slo(s0)
    ceiling_s = float(slo.removeprefix("ttft_p95<").removesuffix("ms")) / 1e3
    doc = run_capacity(
        server.base_url,
        "tiny-llama",
        *("--input-tokens", str(INPUT_TOKENS), "--output-tokens", str(OUTPUT_TOKENS)),
        *("--num-requests", "20", "--seeds", "1", "--rate-tolerance", "0.5"),
        *("--warmup-requests", str(WARMUP), "--max-duration-s", "240", "--slo", slo),
        timeout_s=280,
    )
    print(f"s0 = {s0:.3f} s, SLO {slo}, answer {doc['max_concurrency']} users, "
          f"{doc['max_rate_per_s']} requests/s, {doc['wall_s']:.0f} s")  # fmt: skip
    for p in doc["concurrency_points"] + doc["rate_points"]:
        print(f"  {p['load']:.3f}: {p.get('num_sent')}/{p['num_requests']} sent, ttft_p95 "
              f"{p['ttft_p95_s']}, {p['requests_per_s']} requests/s, meets {p['meets_slo']}")  # fmt: skip
    assert doc["figures"] == "measured"
    assert doc["engine"] == "llama.cpp", doc["engine"]
    check_search(doc, warmup=WARMUP, kv_usage=False)

    whole = [p for p in doc["concurrency_points"] if not p.get("stopped_early")]
    for p in whole:
        c, s = int(p["load"]), 1 / p["requests_per_s"]
        fifo_s = (c - 1) * s
        if fifo_s < 0.8 * ceiling_s:
            assert p["meets_slo"], (c, s, p)
        if fifo_s > 1.25 * ceiling_s:
            assert not p["meets_slo"], (c, s, p)
        assert p["ttft_p95_s"] >= 0.7 * fifo_s, (c, s, p)  # queued in turn, not batched
    fastest = max(p["requests_per_s"] for p in whole)
    assert doc["max_rate_per_s"] <= fastest * (1 + MIN_SLOPE) * (1 + doc["tolerance"])
