"""`kvbudget bench` against a real engine (llama.cpp server, CPU, tiny random model).

Checks: every request accounted (ok + error + cancelled == sent == records in the JSONL), TTFT,
TPOT and ITL measured for every request, and the ``llamacpp:*`` series scraped and mapped to
kvbudget's unified names. Independent sources: the server's own counters, scraped directly by the
test before and after the run, and the request count / token budget the test asked for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.engines import run_kvbudget_bench

pytestmark = pytest.mark.llamacpp

NUM_REQUESTS = 12
CONCURRENCY = 6  # more than the server's 4 slots: 2 requests wait ("deferred") most of the run
NUM_SLOTS = 4
PROMPT_TOKENS = 64
OUTPUT_TOKENS = 32
#: the scrape interval of this test's runs: the run lasts about a second on a tiny model, and the
#: runner's default 0.25 s took 5 samples, which could all miss the deferred requests
SCRAPE_INTERVAL_S = "0.05"


def run_bench(server: Any, out_dir: Path, *extra: str) -> dict[str, Any]:
    args = ["--concurrency", str(CONCURRENCY), "--num-requests", str(NUM_REQUESTS)]
    args += ["--prompt-tokens", str(PROMPT_TOKENS), "--output-tokens", str(OUTPUT_TOKENS)]
    args += ["--scrape-interval", SCRAPE_INTERVAL_S]  # the last one given wins (click)
    return run_kvbudget_bench(server, "tiny-llama", out_dir, *args, *extra)


def test_bench_accounts_every_request_and_maps_llamacpp_metrics(
    shared_llama_server: Any, tmp_path: Path
) -> None:
    server = shared_llama_server
    before = server.metrics()
    doc = run_bench(server, tmp_path / "bench")
    after = server.metrics()

    # Every request accounted.
    assert doc["requests_total"] == NUM_REQUESTS
    assert doc["requests_ok"] == NUM_REQUESTS, doc
    assert doc["requests_error"] == 0 and doc["requests_cancelled"] == 0
    lines = (tmp_path / "bench" / "requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    assert len(records) == NUM_REQUESTS
    assert len({r["request_id"] for r in records}) == NUM_REQUESTS
    for r in records:
        assert r["status"] == "ok"
        assert r["source"] == "measured"
        assert r["output_tokens"] == OUTPUT_TOKENS  # ignore_eos: the full budget every time
        assert r["ttft_s"] is not None and r["ttft_s"] > 0
        assert r["tpot_s"] is not None and r["tpot_s"] > 0
        assert len(r["token_times_s"]) >= 2  # ITL needs at least two token times

    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "itl_p99_s", "output_tokens_per_s"):
        assert doc[key] is not None and doc[key] > 0, key

    # The engine saw exactly what the client sent (the test's own scrapes, no other traffic).
    served = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert served == NUM_REQUESTS * OUTPUT_TOKENS
    evaluated = after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"]
    cached = (
        after["llamacpp:prompt_tokens_cached_total"] - before["llamacpp:prompt_tokens_cached_total"]
    )
    assert sum(r["prompt_tokens"] for r in records) == evaluated + cached

    # llamacpp:* series scraped and mapped to the unified vocabulary.
    sm = doc["server_metrics"]
    for name in (
        "prompt_tokens",
        "prefix_cache_hits_tokens",
        "generation_tokens",
        "requests_running",
        "requests_waiting",
    ):
        assert name in sm, f"{name} missing from server_metrics: {sorted(sm)}"
        assert sm[name]["samples"] >= 1
    # llama.cpp adds a request's generated tokens to its counter when the slot is released, just
    # AFTER the final chunk went out, so the runner's last scrape may precede the last (at most
    # CONCURRENCY) requests' updates. What the runner recorded must still be a value the engine's
    # counter really took: whole requests of OUTPUT_TOKENS each.
    gen_delta = sm["generation_tokens"]["delta"]
    assert gen_delta % OUTPUT_TOKENS == 0, gen_delta
    assert (NUM_REQUESTS - CONCURRENCY) * OUTPUT_TOKENS <= gen_delta <= served
    assert sm["prompt_tokens"]["delta"] == evaluated
    assert sm["prefix_cache_hits_tokens"]["delta"] == cached
    # requests_processing / requests_deferred: never more running than slots; with 6 in flight
    # on 4 slots the 0.05 s scrapes see requests waiting.
    assert sm["requests_running"]["max"] == NUM_SLOTS
    assert sm["requests_waiting"]["min"] >= 0
    assert sm["requests_waiting"]["max"] >= 1
