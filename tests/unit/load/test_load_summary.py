"""Summary arithmetic and client-side event parsing, checked against hand-worked numbers."""

from __future__ import annotations

import pytest

from kvbudget.load.outcome import StreamOutcome, looks_like_oom
from kvbudget.load.outcome import parse_events as _parse_events
from kvbudget.load.summary import bottleneck_warnings, summarize_records
from kvbudget.metrics.latency import collect_latencies, record_latencies
from kvbudget.records import RequestRecord


def _ok(i: int, ttft: float, *, warmup: bool = False) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        source="measured",
        status="ok",
        warmup=warmup,
        sent_s=float(i),
        first_token_s=i + ttft,
        done_s=i + ttft + 1.0,
        ttft_s=ttft,
        e2e_s=ttft + 1.0,
        tpot_s=0.5,
        output_tokens=3,
        token_times_s=[i + ttft, i + ttft + 0.5, i + ttft + 1.0],
    )


def test_counts_percentiles_and_throughput() -> None:
    recs = [_ok(i, ttft) for i, ttft in enumerate([0.1, 0.2, 0.3, 0.4, 0.5])]
    recs.append(_ok(9, 99.0, warmup=True))  # excluded from the summary
    recs.append(
        RequestRecord(request_id="e", source="measured", status="error", error_kind="timeout")
    )
    recs.append(
        RequestRecord(request_id="c", source="measured", status="cancelled", error_kind="cancelled")
    )
    s = summarize_records(recs)
    assert (s["requests_total"], s["requests_ok"], s["requests_error"]) == (7, 5, 1)
    assert s["requests_cancelled"] == 1
    assert s["requests_warmup"] == 1
    assert s["errors_by_kind"] == {"cancelled": 1, "timeout": 1}
    # linear interpolation: p50 of 0.1..0.5 is 0.3; p99 = 0.1 + 0.99 * 4 * 0.1 = 0.496
    assert s["ttft_p50_s"] == pytest.approx(0.3)
    assert s["ttft_p99_s"] == pytest.approx(0.496)
    # every gap is 0.5 s
    assert s["itl_p99_s"] == pytest.approx(0.5)
    # window: first send at 0, last done at 4 + 0.5 + 1 = 5.5 s; 15 tokens, 5 ok requests
    assert s["window_s"] == pytest.approx(5.5)
    assert s["output_tokens_per_s"] == pytest.approx(15 / 5.5)
    assert s["requests_per_s"] == pytest.approx(5 / 5.5)


def test_lag_warning_only_for_open_loop() -> None:
    s = {"schedule_lag_p99_s": 0.05}
    assert bottleneck_warnings(s, open_loop=True, cpu_busy_fraction=0.1, not_sent=0)
    assert not bottleneck_warnings(s, open_loop=False, cpu_busy_fraction=0.1, not_sent=0)
    assert bottleneck_warnings({}, open_loop=False, cpu_busy_fraction=0.95, not_sent=0)
    assert bottleneck_warnings({}, open_loop=True, cpu_busy_fraction=None, not_sent=3)


def test_parse_chat_events_role_usage_and_cached_tokens() -> None:
    events = [
        (1.0, b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'),
        (2.0, b'{"choices":[{"index":0,"delta":{"content":"ab"}}]}'),
        (3.0, b'{"choices":[{"index":0,"delta":{"content":" cd"},"finish_reason":"length"}]}'),
        (
            3.5,
            b'{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,'
            b'"prompt_tokens_details":{"cached_tokens":4}}}',
        ),
    ]
    out = StreamOutcome(request_id="x")
    assert _parse_events(events, "chat", out) is None
    assert out.first_token_s == 2.0  # the role chunk carries no content
    assert out.chunk_times_s == [2.0, 3.0]
    assert out.text == "ab cd"
    assert out.finish_reason == "length"
    assert (out.usage_prompt_tokens, out.usage_completion_tokens, out.cached_tokens) == (7, 2, 4)


def test_a_token_whose_text_is_empty_still_counts() -> None:
    """vLLM streams one chunk per token; a special token (or bytes its detokenizer holds back)
    comes with ``"text": ""``. Seen on vLLM 0.32 CPU: 8 events for 8 tokens, some empty."""
    events = [
        (1.0, b'{"choices":[{"index":0,"text":"","finish_reason":null}]}'),
        (2.0, b'{"choices":[{"index":0,"text":"a","finish_reason":null}]}'),
        (3.0, b'{"choices":[{"index":0,"text":"","finish_reason":null}]}'),
        (4.0, b'{"choices":[{"index":0,"text":"b","finish_reason":"length"}]}'),
        (5.0, b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}'),
    ]
    out = StreamOutcome(request_id="x")
    assert _parse_events(events, "completions", out) is None
    assert out.first_token_s == 1.0
    assert out.chunk_times_s == [1.0, 2.0, 3.0, 4.0]
    assert out.text == "ab" and out.token_times_s() == [1.0, 2.0, 3.0, 4.0]


def test_an_empty_closing_chunk_is_not_a_token() -> None:
    """llama.cpp closes a stream with an empty choice that only gives the finish reason (no
    ``stop_reason`` key); a chat chunk that only announces the role is no token either."""
    chat = [
        (1.0, b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'),
        (2.0, b'{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}'),
        (3.0, b'{"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}'),
        (4.0, b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'),
    ]
    out = StreamOutcome(request_id="x")
    assert _parse_events(chat, "chat", out) is None
    assert out.chunk_times_s == [2.0, 3.0] and out.finish_reason == "stop"
    completions = [
        (1.0, b'{"choices":[{"index":0,"text":"a","finish_reason":null}]}'),
        (2.0, b'{"choices":[{"index":0,"text":"","finish_reason":"length"}]}'),
    ]
    out = StreamOutcome(request_id="y")
    assert _parse_events(completions, "completions", out) is None
    assert out.chunk_times_s == [1.0] and out.finish_reason == "length"


def test_vllm_closing_chunk_carries_the_stop_token() -> None:
    """vLLM's closing chunk carries the last token (its text left out when it is the stop
    token) and has a ``stop_reason`` key: it counts."""
    events = [
        (1.0, b'{"choices":[{"index":0,"text":"a","finish_reason":null,"stop_reason":null}]}'),
        (2.0, b'{"choices":[{"index":0,"text":"","finish_reason":"stop","stop_reason":7}]}'),
    ]
    out = StreamOutcome(request_id="x")
    assert _parse_events(events, "completions", out) is None
    assert out.chunk_times_s == [1.0, 2.0] and out.text == "a"


def test_token_times_when_chunks_carry_several_tokens() -> None:
    out = StreamOutcome(request_id="x", chunk_times_s=[1.0, 2.0, 3.0], usage_completion_tokens=5)
    # 5 tokens over 3 chunks: shares floor(5k/3) differences = 1, 2, 2
    assert out.token_times_s() == [1.0, 2.0, 2.0, 3.0, 3.0]


def test_error_event_and_malformed_json() -> None:
    out = StreamOutcome(request_id="x")
    kind, text = _parse_events([(1.0, b'{"error":{"message":"boom"}}')], "completions", out) or (
        None,
        "",
    )
    assert kind == "other" and "boom" in text
    out = StreamOutcome(request_id="y")
    bad = _parse_events([(1.0, b"{not json")], "completions", out)
    assert bad is not None and bad[0] == "broken_stream"


def test_oom_detection() -> None:
    assert looks_like_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert looks_like_oom("engine OOM while allocating blocks")
    assert not looks_like_oom("Internal Server Error")
    assert not looks_like_oom("bigscience/bloom-560m is not served here")


def test_a_request_seen_at_one_instant_has_no_tpot() -> None:
    """Every token read at one instant (a starved client): no TPOT rather than about 0 s; the
    summary counts it and warns."""
    burst = _ok(7, 0.2)
    burst.token_times_s = [7.2, 7.2, 7.2]
    burst.tpot_s = None
    recs = [_ok(i, 0.1) for i in range(3)] + [burst]
    s = summarize_records(recs)
    assert s["tpot_unobserved_requests"] == 1
    assert s["tpot_p50_s"] == pytest.approx(0.5)  # the three observed requests' TPOT
    (warning,) = bottleneck_warnings(s, open_loop=False, cpu_busy_fraction=None, not_sent=0)
    assert warning.startswith("1 request(s) delivered every token to the client at one instant")
    assert record_latencies(burst)[1] is None
    assert collect_latencies(recs).tpot_s.tolist() == pytest.approx([0.5, 0.5, 0.5])


def test_vllm_bench_serve_latency_set_by_hand() -> None:
    """mean, median, p90, p95, p99 of TTFT, TPOT, ITL and E2E (vLLM bench serve's set), on
    0.1..0.5 s TTFTs: mean 0.3; p90 = 0.1 + 0.9 * 4 * 0.1 = 0.46; p95 = 0.48 (linear)."""
    recs = [_ok(i, ttft) for i, ttft in enumerate([0.1, 0.2, 0.3, 0.4, 0.5])]
    s = summarize_records(recs)
    assert s["ttft_mean_s"] == pytest.approx(0.3)
    assert s["ttft_median_s"] == pytest.approx(0.3)
    assert s["ttft_p90_s"] == pytest.approx(0.46)
    assert s["ttft_p95_s"] == pytest.approx(0.48)
    # E2E = TTFT + 1 s; TPOT and every ITL gap 0.5 s
    assert s["e2e_mean_s"] == pytest.approx(1.3)
    assert s["e2e_p95_s"] == pytest.approx(1.48)
    assert (s["tpot_mean_s"], s["tpot_p95_s"]) == (pytest.approx(0.5), pytest.approx(0.5))
    assert (s["itl_mean_s"], s["itl_p90_s"]) == (pytest.approx(0.5), pytest.approx(0.5))
    assert s["metric_percentiles"] == [50.0, 90.0, 95.0, 99.0]
    chosen = summarize_records(recs, (25.0,))
    assert chosen["ttft_p25_s"] == pytest.approx(0.2)
    assert "ttft_p95_s" not in chosen and chosen["ttft_p99_s"] == pytest.approx(0.496)
