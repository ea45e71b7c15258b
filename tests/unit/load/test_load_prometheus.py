"""Metric mapping on exposition texts written from the reference names (fixtures/*.prom).

Expected values are read off the fixture files by hand (sums over label sets, max for the
KV usage ratio; llama.cpp's numbers are the capture in llamacpp.md §7).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.load.prometheus import (
    detect_engine,
    parse_exposition,
    sample_values,
    summarize_series,
)
from kvbudget.records import MetricSample

FIXTURES = Path(__file__).parent / "fixtures"


def _values(name: str) -> dict[str, float]:
    text = (FIXTURES / name).read_text()
    return {s.name: s.value for s in parse_exposition(text, 1.0) if not s.labels}


def test_vllm_current_names() -> None:
    v = _values("vllm_v1.prom")
    assert v["kv_usage_ratio"] == 0.625  # max of 0.25 and 0.625 (two DP engines)
    assert v["requests_running"] == 5  # 3 + 2
    assert v["requests_waiting"] == 1
    assert v["prefix_cache_queries_tokens"] == 5120  # 4096 + 1024
    assert v["prefix_cache_hits_tokens"] == 2560  # 2048 + 512
    assert v["preemptions"] == 7
    assert v["prompt_tokens"] == 6120
    assert v["generation_tokens"] == 1000
    assert v["engine_ttft_seconds_sum"] == 3.5
    assert v["engine_ttft_seconds_count"] == 10
    assert v["engine_itl_seconds_count"] == 630
    assert "vllm:request_success" not in v


def test_vllm_histogram_buckets_kept_per_le() -> None:
    text = (FIXTURES / "vllm_v1.prom").read_text()
    buckets = {
        s.labels["le"]: s.value
        for s in parse_exposition(text, 0.0)
        if s.name == "engine_ttft_seconds_bucket"
    }
    assert buckets == {"0.1": 4.0, "1.0": 9.0, "+Inf": 10.0}


def test_vllm_older_names_map_to_the_same_vocabulary() -> None:
    v = _values("vllm_v0_10_old_names.prom")
    assert v["kv_usage_ratio"] == 0.5
    assert v["prefix_cache_queries_tokens"] == 300
    assert v["prefix_cache_hits_tokens"] == 100
    assert v["engine_itl_seconds_count"] == 40
    assert v["engine_itl_seconds_sum"] == pytest.approx(1.2)
    assert v["requests_running"] == 4
    assert v["requests_waiting"] == 2


def test_sglang_names_and_derived_queries() -> None:
    v = _values("sglang.prom")
    assert v["kv_usage_ratio"] == 0.3
    assert v["requests_running"] == 6
    assert v["requests_waiting"] == 3
    assert v["prompt_tokens"] == 20000
    assert v["generation_tokens"] == 4000
    assert v["prefix_cache_hits_tokens"] == 8000
    # SGLang's prompt tokens count every input token: they are the queries
    assert v["prefix_cache_queries_tokens"] == 20000
    assert v["engine_ttft_seconds_count"] == 50


def test_llamacpp_capture_from_reference() -> None:
    v = _values("llamacpp.prom")
    assert v["prompt_tokens"] == 1626
    assert v["prefix_cache_hits_tokens"] == 1574
    # llama.cpp's prompt_tokens exclude cached ones: queries = 1626 + 1574
    assert v["prefix_cache_queries_tokens"] == 3200
    assert v["generation_tokens"] == 176
    assert v["requests_running"] == 0
    assert v["requests_waiting"] == 0
    assert "kv_usage_ratio" not in v


@pytest.mark.parametrize(
    ("name", "engine"),
    [
        ("vllm_v1.prom", "vllm"),
        ("sglang.prom", "sglang"),
        ("llamacpp.prom", "llamacpp"),
    ],
)
def test_detect_engine(name: str, engine: str) -> None:
    assert detect_engine((FIXTURES / name).read_text()) == engine


def test_garbage_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_exposition("this is { not prometheus", 0.0)


def _s(t: float, name: str, v: float) -> MetricSample:
    return MetricSample(timestamp_s=t, name=name, value=v)


def test_counter_delta_handles_reset_and_baseline() -> None:
    samples = [
        _s(-1.0, "prompt_tokens", 10),  # idle baseline before the load
        _s(1.0, "prompt_tokens", 15),
        _s(2.0, "prompt_tokens", 3),  # engine restarted: counter reset
        _s(3.0, "prompt_tokens", 8),
    ]
    out = summarize_series(samples, window=(0.0, 3.0))["prompt_tokens"]
    # 15-10 = 5, reset -> +3, 8-3 = 5: 13 tokens over 4 s (from the baseline at -1 to 3)
    assert out["delta"] == 13
    assert out["rate_per_s"] == pytest.approx(13 / 4)
    assert out["baseline"] == 10
    assert out["samples"] == 3
    assert (out["min"], out["max"], out["last"]) == (3, 15, 8)


def test_gauge_has_no_delta() -> None:
    samples = [_s(0.5, "kv_usage_ratio", 0.2), _s(1.5, "kv_usage_ratio", 0.7)]
    out = summarize_series(samples, window=(0.0, 2.0))["kv_usage_ratio"]
    assert "delta" not in out
    assert out["max"] == 0.7
    assert out["baseline"] is None


def test_sample_values_keep_exposed_names_and_sum_label_sets() -> None:
    text = (
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
        "# TYPE llamacpp:prompt_tokens_total counter\n"
        "llamacpp:prompt_tokens_total 1626\n"
        "# HELP llamacpp:requests_processing Number of requests processing.\n"
        "# TYPE llamacpp:requests_processing gauge\n"
        "llamacpp:requests_processing 0\n"
    )
    assert sample_values(text) == {
        "llamacpp:prompt_tokens_total": 1626.0,
        "llamacpp:requests_processing": 0.0,
    }
    vllm = sample_values((FIXTURES / "vllm_v1.prom").read_text())
    assert vllm["vllm:num_requests_running"] == 5  # 3 + 2, the two DP engines of the fixture
    assert vllm["vllm:prefix_cache_queries_total"] == 5120  # 4096 + 1024
