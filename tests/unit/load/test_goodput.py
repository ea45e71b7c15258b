"""``--goodput``: vllm bench serve's definition, checked on latencies written here by hand.

vLLM ``vllm/benchmarks/serve.py`` ``calculate_metrics``: a completed request is good when
``slo >= value`` for every given key; TPOT = (E2EL - TTFT) / (output tokens - 1), 0 for a
single output token; goodput = good / duration.
"""

from __future__ import annotations

import pytest

from kvbudget.errors import ConfigError
from kvbudget.load.goodput import goodput_summary, parse_goodput
from kvbudget.load.summary import summarize_records
from kvbudget.records import RequestRecord


def _rec(i: int, ttft_s: float, e2e_s: float, n: int, status: str = "ok") -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        source="measured",
        status=status,  # type: ignore[arg-type]
        sent_s=0.0,
        first_token_s=ttft_s,
        done_s=e2e_s,
        ttft_s=ttft_s if status == "ok" else None,
        e2e_s=e2e_s if status == "ok" else None,
        output_tokens=n,
        error_kind=None if status == "ok" else "timeout",
    )


RECORDS = [
    # TTFT 0.5 s, TPOT (1.5 - 0.5) / 20 = 50 ms, E2E 1.5 s: meets ttft:1000,tpot:50 (equal = ok)
    _rec(0, 0.5, 1.5, 21),
    # TTFT 0.9 s, TPOT (2.9 - 0.9) / 10 = 200 ms: fails tpot:50
    _rec(1, 0.9, 2.9, 11),
    # TTFT 1.2 s: fails ttft:1000 (TPOT (1.4 - 1.2) / 4 = 50 ms)
    _rec(2, 1.2, 1.4, 5),
    # one output token: TPOT counts as 0; TTFT 0.3 s, E2E 0.3 s: meets both
    _rec(3, 0.3, 0.3, 1),
    # failed: never good
    _rec(4, 0.1, 0.2, 0, status="error"),
]


def test_goodput_equals_the_hand_count() -> None:
    got = goodput_summary(RECORDS, {"ttft": 1000.0, "tpot": 50.0}, window_s=2.0)
    assert got["goodput_requests"] == 2  # r0 and r3
    assert got["goodput_fraction"] == pytest.approx(2 / 5)
    assert got["goodput_fraction_of_completed"] == pytest.approx(2 / 4)
    assert got["goodput_requests_per_s"] == pytest.approx(2 / 2.0)


def test_e2el_alone() -> None:
    # E2E: 1.5, 2.9, 1.4, 0.3 s; e2el:1500 keeps r0 (1.5 <= 1.5), r2 and r3
    got = goodput_summary(RECORDS, {"e2el": 1500.0}, window_s=3.0)
    assert got["goodput_requests"] == 3


def test_summary_carries_goodput_only_when_asked() -> None:
    assert "goodput_requests" not in summarize_records(RECORDS)
    summary = summarize_records(RECORDS, goodput_slo_ms={"ttft": 1000.0, "tpot": 50.0})
    assert summary["goodput_requests"] == 2


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("ttft:1000,tpot:50", {"ttft": 1000.0, "tpot": 50.0}),
        (["ttft:1000", "tpot:50 e2el:3000"], {"ttft": 1000.0, "tpot": 50.0, "e2el": 3000.0}),
        ((), {}),
    ],
)
def test_parse(given: str | list[str], expected: dict[str, float]) -> None:
    assert parse_goodput(given) == expected


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ("itl:5", "'itl' is not an SLO key"),
        ("ttft", "milliseconds >= 0"),
        ("ttft:-1", "milliseconds >= 0"),
        ("ttft:1,ttft:2", "given twice"),
    ],
)
def test_bad_input_is_one_line(given: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_goodput(given)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)
