"""Prefix reuse observed in a real engine: llama.cpp's prompt cache.

A long prompt sent twice: the second time the server reuses the first one's KV cells, so
``llamacpp:prompt_tokens_cached_total`` grows by about the prompt length, the response reports the
cached tokens, and the server evaluates about one prompt token instead of all of them. A cold prompt
of the same length (different tokens) gets no such reuse. The counters are asserted; the TTFT
ratio (warm vs cold) is recorded in the test output, never asserted (wall-clock time on a shared CPU).
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from .conftest import launcher

pytestmark = pytest.mark.llamacpp

PROMPT_TOKENS = 1200


def random_prompt(seed: int) -> list[int]:
    return cast(list[int], launcher.random_token_ids(seed, PROMPT_TOKENS))


def stream_completion(server: Any, prompt: list[int]) -> dict[str, Any]:
    """Streamed /v1/completions; TTFT (client clock), usage and the server's timings."""
    return cast(dict[str, Any], launcher.stream_completion(server.port, prompt))


def test_repeated_long_prompt_is_served_from_the_prompt_cache(
    shared_llama_server: Any, record_property: Any
) -> None:
    server = shared_llama_server
    prompt_a, prompt_b = random_prompt(1), random_prompt(2)

    m0 = server.metrics()
    cold = stream_completion(server, prompt_a)
    m1 = server.metrics()
    warm = stream_completion(server, prompt_a)
    m2 = server.metrics()
    cold_b = stream_completion(server, prompt_b)
    m3 = server.metrics()

    key = "llamacpp:prompt_tokens_cached_total"
    n_prompt = warm["usage"]["prompt_tokens"]
    assert n_prompt >= PROMPT_TOKENS  # our tokens, plus BOS if the server added one
    # Cold: at most a BOS-sized match with an older slot.
    assert m1[key] - m0[key] <= 2
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] <= 2
    # Warm: everything but the last token comes from the cache (llama.cpp re-evaluates one token
    # so the slot has logits to sample from).
    assert m2[key] - m1[key] >= n_prompt - 2
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] >= n_prompt - 2
    assert warm["timings"]["prompt_n"] <= 2
    # Prompt tokens evaluated: the whole cold prompt, ~1 token for the warm one.
    assert (
        m1["llamacpp:prompt_tokens_total"] - m0["llamacpp:prompt_tokens_total"] >= PROMPT_TOKENS - 2
    )
    assert m2["llamacpp:prompt_tokens_total"] - m1["llamacpp:prompt_tokens_total"] <= 2
    # A different prompt of the same length: no reuse.
    assert m3[key] - m2[key] <= 2
    assert cold_b["timings"]["prompt_n"] >= PROMPT_TOKENS - 2

    # Recorded, not asserted: the measured TTFT ratio (engine, version and CPU in the record).
    record = {
        "engine": "llama.cpp llama-server",
        "version": server.version,
        "prompt_tokens": n_prompt,
        "ttft_cold_s": round(cold["ttft_s"], 4),
        "ttft_warm_s": round(warm["ttft_s"], 4),
        "ttft_cold_other_prompt_s": round(cold_b["ttft_s"], 4),
        "warm_over_cold": round(warm["ttft_s"] / cold["ttft_s"], 4),
        "prompt_ms_cold": cold["timings"].get("prompt_ms"),
        "prompt_ms_warm": warm["timings"].get("prompt_ms"),
    }
    record_property("prefix_cache_ttft", json.dumps(record))
    print("measured prefix-cache TTFT:", json.dumps(record))
