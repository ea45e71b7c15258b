"""`kvbudget bench` against a real vLLM 0.32.0 (CPU build, tiny dummy-weight llama).

Checks, each against a source independent of kvbudget:

* every request accounted: ok == sent == records in the JSONL == the engine's own
  ``vllm:request_success_total`` delta, scraped by the test itself after the engine settled;
* prompt lengths mean what they say: every request's prompt, as the SERVER counted it
  (``usage.prompt_tokens``), is within ±1 % of ``--prompt-tokens`` (the target of issue 13; on
  this tokenizer it is exact), and the server's ``vllm:prompt_tokens_total`` delta equals their
  sum; with ``--tokenizer synthetic`` (words) the server counts far more, so the rewrite matters;
* the final metrics scrape came after the engine counted the last request: kvbudget's
  ``engine_e2e_seconds_count`` delta equals the number of requests;
* vLLM 0.32's metric names are parsed from the live server (raw names in ``metrics.jsonl``);
* the engine report read back: ``num_gpu_blocks`` x ``block_size`` equals the ``CPU KV cache
  size`` tokens the engine logged, and the concurrency equals the logged ``Maximum
  concurrency``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.engines import run_kvbudget_bench

# an engine start takes 30-90 s (minutes on a busy machine): generous per-test limits
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

NUM_REQUESTS = 12
CONCURRENCY = 4
PROMPT_TOKENS = 200
OUTPUT_TOKENS = 8


def run_bench(server: Any, out_dir: Path, *extra: str) -> dict[str, Any]:
    args = ["--concurrency", str(CONCURRENCY), "--output-tokens", str(OUTPUT_TOKENS), *extra]
    return run_kvbudget_bench(server, server.served_model_name, out_dir, *args)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_bench_accounts_every_request_with_exact_prompt_lengths(
    vllm_server: Any, tmp_path: Path
) -> None:
    server = vllm_server
    before = server.metrics()
    doc = run_bench(
        server,
        tmp_path / "bench",
        "--num-requests",
        str(NUM_REQUESTS),
        "--prompt-tokens",
        str(PROMPT_TOKENS),
        "--seed",
        "1301",
    )
    after = server.settled_metrics(
        "vllm:request_success_total", before.get("vllm:request_success_total", 0) + NUM_REQUESTS
    )

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    # Every request accounted, by kvbudget and by the engine.
    assert doc["requests_total"] == NUM_REQUESTS and doc["requests_ok"] == NUM_REQUESTS, doc
    records = read_jsonl(tmp_path / "bench" / "requests.jsonl")
    assert len(records) == NUM_REQUESTS == len({r["request_id"] for r in records})
    assert all(r["status"] == "ok" and r["output_tokens"] == OUTPUT_TOKENS for r in records)
    assert delta("vllm:request_success_total") == NUM_REQUESTS
    assert doc["accounting"]["sent_equals_recorded"] is True

    # Server-counted prompt lengths: within ±1 % of the request (issue 13's target).
    counted = [r["prompt_tokens"] for r in records]
    assert all(abs(n - PROMPT_TOKENS) <= 0.01 * PROMPT_TOKENS for n in counted), counted
    assert sum(counted) == delta("vllm:prompt_tokens_total")
    assert doc["prompts"]["tokenizer"].startswith("served model")
    assert doc["prompts"]["num_mismatched"] == 0

    # The final scrape came after the engine counted the last request.
    sm = doc["server_metrics"]
    assert sm["engine_e2e_seconds_count"]["delta"] == NUM_REQUESTS, sm
    assert sm["engine_ttft_seconds_count"]["delta"] == NUM_REQUESTS
    assert sm["prompt_tokens"]["delta"] == delta("vllm:prompt_tokens_total")
    assert sm["generation_tokens"]["delta"] == NUM_REQUESTS * OUTPUT_TOKENS
    assert sm["prefix_cache_queries_tokens"]["delta"] == delta("vllm:prefix_cache_queries_total")
    assert sm["prefix_cache_hits_tokens"]["delta"] == delta("vllm:prefix_cache_hits_total")

    # vLLM 0.32.0's names, parsed live (docs/metrics-mapping.md marks these verified).
    samples = read_jsonl(tmp_path / "bench" / "metrics.jsonl")
    raw = {s["name"]: s["raw_name"] for s in samples}
    assert raw["kv_usage_ratio"] == "vllm:kv_cache_usage_perc"
    assert raw["prefix_cache_queries_tokens"] == "vllm:prefix_cache_queries"
    assert raw["prefix_cache_hits_tokens"] == "vllm:prefix_cache_hits"
    assert raw["preemptions"] == "vllm:num_preemptions"
    assert raw["requests_running"] == "vllm:num_requests_running"
    assert raw["requests_waiting"] == "vllm:num_requests_waiting"
    assert raw["engine_ttft_seconds_count"] == "vllm:time_to_first_token_seconds"
    assert raw["engine_itl_seconds_count"] == "vllm:inter_token_latency_seconds"
    assert raw["engine_e2e_seconds_count"] == "vllm:e2e_request_latency_seconds"
    assert raw["engine_queue_seconds_count"] == "vllm:request_queue_time_seconds"

    # The engine's final resolved values, against its own start-up log.
    log = server.kv_log()
    assert log is not None and log.device == "CPU", server.log_path
    report = doc["engine_report"]
    assert report["engine"] == "vllm" and report["engine_version"] == "0.32.0"
    assert report["num_gpu_blocks"] * report["block_size"] == log.kv_cache_size_tokens
    assert report["kv_cache_size_tokens"] == log.kv_cache_size_tokens
    assert f"{report['kv_cache_max_concurrency']:.2f}" == log.max_concurrency_x
    assert report["max_model_len"] == log.max_concurrency_len == server.max_model_len
    assert report["model_root"] == str(server.model)
    assert report["enable_prefix_caching"] is True
    assert doc["provenance"]["kind"] == "measured" and doc["provenance"]["engine"] == "vllm"


def test_synthetic_words_are_not_server_tokens(vllm_server: Any, tmp_path: Path) -> None:
    """Without the served tokenizer, 200 synthetic words are far more than 200 server tokens:
    the reason prompts are rewritten (observed by hand: 256 words -> 668 tokens)."""
    doc = run_bench(
        vllm_server,
        tmp_path / "words",
        "--num-requests",
        "2",
        "--prompt-tokens",
        str(PROMPT_TOKENS),
        "--tokenizer",
        "synthetic",
        "--seed",
        "1302",
    )
    records = read_jsonl(tmp_path / "words" / "requests.jsonl")
    assert all(r["prompt_tokens"] > 1.5 * PROMPT_TOKENS for r in records), records
    assert any("synthetic tokenizer" in w for w in doc["warnings"])


def test_tokenizer_from_the_server_when_none_is_local(vllm_server: Any, tmp_path: Path) -> None:
    """No local tokenizer: the server's /tokenize + /detokenize build the prompts, and the
    server then counts each prompt within ±1 % of the request."""
    import asyncio

    from kvbudget.load.client import OpenAIClient
    from kvbudget.load.served_prompts import ServerTokenizer, served_prompts
    from kvbudget.workload.request import PlannedRequest

    server = vllm_server
    planned = [
        PlannedRequest(f"t{i}", 0.0, tuple(range(10 + i, 160 + i)), output_tokens=1)
        for i in range(3)
    ]

    async def build() -> list[PlannedRequest]:
        async with OpenAIClient(server.base_url, concurrency=1, timeout_s=60) as client:
            tok = ServerTokenizer(client, server.served_model_name)
            out, info = await served_prompts(
                planned, tok, client=client, model=server.served_model_name, seed=3
            )
            assert info.tokenizer == "server /tokenize and /detokenize"
            return out

    rewritten = asyncio.run(build())
    for req in rewritten:
        got = server.complete(req.text(), max_tokens=1)["usage"]["prompt_tokens"]
        assert abs(got - 150) <= 1.5, (got, req.request_id)


def test_a_tokenizer_path_without_tokenizer_json_is_refused(
    vllm_server: Any, tmp_path: Path
) -> None:
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvbudget",
            "bench",
            "--base-url",
            vllm_server.base_url,
            "--model",
            vllm_server.served_model_name,
            "--tokenizer",
            str(tmp_path),
            "--num-requests",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert bad.returncode != 0, bad.stdout
    assert "--tokenizer" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
