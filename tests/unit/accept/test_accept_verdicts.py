"""Verdict logic for every outcome; a blank is never a pass."""

from __future__ import annotations

import math

import pytest

from kvbudget.accept.judge.verdicts import (
    CellEvidence,
    QualityOutcome,
    cell_checks,
    cell_verdict,
    min_samples_for,
    overall_verdict,
    percentile_check,
    row_stopped,
    worst,
)
from kvbudget.accept.plan.checks import PercentileCeilings, StopConditions
from kvbudget.accept.result import Check, MetricSummary, PercentileCI, StopStatus


def summary(n: int, **pcts: float) -> MetricSummary:
    return MetricSummary(n=n, percentiles={k: PercentileCI(value=v) for k, v in pcts.items()})


STOP = StopConditions(ttft_s=PercentileCeilings(p95=2.0), tpot_s=PercentileCeilings(p50=0.05))


def evidence(**kw: object) -> CellEvidence:
    base: dict[str, object] = {
        "cell_id": "short/single",
        "kind": "measured",
        "num_requests": 300,
        "num_error": 0,
        "num_oom": 0,
        "summaries": {"ttft_s": summary(300, p95=1.0), "tpot_s": summary(300, p50=0.02)},
    }
    base.update(kw)
    return CellEvidence(**base)  # type: ignore[arg-type]


def test_min_samples_is_ten_expected_beyond_the_percentile() -> None:
    # worked by hand: 10 / (1 - q)
    assert min_samples_for("p50") == 20
    assert min_samples_for("p90") == 100
    assert min_samples_for("p95") == 200
    assert min_samples_for("p99") == 1000


def test_percentile_check_outcomes() -> None:
    assert (
        percentile_check("ttft_s", "p95", 2.0, summary(200, p95=1.5), "measured").verdict == "pass"
    )
    fail = percentile_check("ttft_s", "p95", 2.0, summary(200, p95=2.5), "measured")
    assert fail.verdict == "fail" and fail.observed == 2.5 and fail.limit == 2.0
    small = percentile_check("ttft_s", "p95", 2.0, summary(199, p95=1.5), "measured")
    assert small.verdict == "untested" and "too few" in small.reason
    small_fail = percentile_check("ttft_s", "p95", 2.0, summary(5, p95=3.0), "measured")
    assert small_fail.verdict == "fail" and "only 5 samples" in small_fail.reason
    assert percentile_check("ttft_s", "p95", 2.0, None, None).verdict == "untested"
    assert percentile_check("ttft_s", "p95", 2.0, summary(0), None).verdict == "untested"


def test_all_checks_pass_gives_pass_with_numbers() -> None:
    checks = cell_checks(STOP, evidence())
    verdict, reasons = cell_verdict(checks)
    assert verdict == "pass"
    assert [c.verdict for c in checks] == ["pass"] * len(checks)
    assert any(c.observed == 1.0 and c.limit == 2.0 for c in checks)
    assert reasons == [f"all {len(checks)} checks passed"]
    assert checks[0].name == "capacity" and "admitted all 300" in checks[0].reason


def test_latency_ceiling_crossed_fails() -> None:
    ev = evidence(summaries={"ttft_s": summary(300, p95=3.0), "tpot_s": summary(300, p50=0.02)})
    verdict, reasons = cell_verdict(cell_checks(STOP, ev))
    assert verdict == "fail"
    assert "3 > ceiling 2" in reasons[0]


def test_error_rate_and_oom() -> None:
    verdict, reasons = cell_verdict(cell_checks(STOP, evidence(num_error=6)))
    assert verdict == "fail" and "6 errors in 300 requests (2.00%)" in reasons[0]
    verdict, reasons = cell_verdict(cell_checks(STOP, evidence(num_oom=1, num_error=1)))
    assert verdict == "fail" and any("out-of-memory" in r for r in reasons)


def test_quality_untested_keeps_cell_untested_never_pass() -> None:
    ev = evidence(quality=(QualityOutcome("needle", "untested", "simulator text"),))
    verdict, reasons = cell_verdict(cell_checks(STOP, ev))
    assert verdict == "untested"
    assert reasons == ["quality needle: simulator text"]


def test_quality_fail_fails() -> None:
    ev = evidence(quality=(QualityOutcome("json", "fail", "1 of 2 failed", 2, 1),))
    assert cell_verdict(cell_checks(STOP, ev))[0] == "fail"


def test_capacity_error_fails_and_skipped_cell_is_untested() -> None:
    verdict, reasons = cell_verdict(cell_checks(STOP, evidence(capacity_error="no KV blocks")))
    assert verdict == "fail" and "capacity error: no KV blocks" in reasons[0]
    checks = cell_checks(STOP, evidence(skipped_reason="row stopped"))
    assert cell_verdict(checks) == ("untested", ["ran: row stopped"])


def test_no_requests_is_untested_and_blank_is_never_pass() -> None:
    assert cell_verdict(cell_checks(STOP, evidence(num_requests=0)))[0] == "untested"
    assert cell_verdict([])[0] == "untested"
    assert worst([]) == "untested"


def test_not_comparable_ranks_between_untested_and_fail() -> None:
    checks = [
        Check(name="a", verdict="pass", reason=""),
        Check(name="b", verdict="untested", reason=""),
        Check(name="c", verdict="not_comparable", reason="locks differ"),
    ]
    assert cell_verdict(checks)[0] == "not_comparable"
    assert worst(["not_comparable", "fail"]) == "fail"


def test_row_stop_rule_keeps_last_passing_tier() -> None:
    assert row_stopped([("single", "pass", None)]) == (False, None)
    stop, why = row_stopped([("single", "pass", None), ("normal", "fail", "pool exhausted")])
    assert stop
    assert why is not None
    assert "'normal'" in why and "last passing tier kept: single" in why and "not retried" in why
    stop, why = row_stopped([("single", "fail", "too long")])
    assert stop and why is not None and "kept: none" in why
    # a latency failure without a capacity error does not stop the row
    assert row_stopped([("single", "fail", None)]) == (False, None)


def stop(status: str) -> StopStatus:
    return StopStatus(name="ttft_s p95", declared="<= 2 s", status=status, cells=["long/peak"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("stops", "blocking", "cells", "simulated", "expected"),
    [
        ([stop("triggered")], [], ["pass"], False, "fail"),
        ([stop("triggered")], ["model.revision"], ["pass"], True, "fail"),
        ([stop("not_triggered")], ["model.revision"], ["pass"], False, "blocked"),
        ([stop("not_triggered")], [], ["pass", "untested"], False, "untested"),
        ([stop("untested")], [], ["pass"], False, "untested"),
        ([stop("not_triggered")], [], ["pass"], True, "untested"),
        ([stop("not_triggered")], [], [], False, "untested"),
        ([stop("not_triggered")], [], ["pass"] * 9, False, "pass"),
    ],
)
def test_overall_verdict(
    stops: list[StopStatus], blocking: list[str], cells: list[str], simulated: bool, expected: str
) -> None:
    verdict, reasons = overall_verdict(stops, blocking, cells, simulated=simulated)  # type: ignore[arg-type]
    assert verdict == expected
    assert reasons


def test_failed_comparison_keeps_overall_from_pass() -> None:
    verdict, _ = overall_verdict(
        [stop("not_triggered")], [], ["pass"], simulated=False, comparison_verdicts=["fail"]
    )
    assert verdict == "untested"
    assert not math.isnan(0.0)


def test_row_summaries_stop_at_the_first_tier_that_is_not_pass() -> None:
    from kvbudget.accept.judge.verdicts import row_summaries
    from kvbudget.accept.result import CellResult

    def cell(it: str, ct: str, perf: str, quality: str = "untested") -> CellResult:
        checks = [
            Check(name="ttft_s p95 <= 2", stop="ttft_s p95", verdict=perf, reason=""),  # type: ignore[arg-type]
            Check(name="quality q", stop="quality failure", verdict=quality, reason=""),  # type: ignore[arg-type]
        ]
        return CellResult(
            cell_id=f"{it}/{ct}",
            input_tier=it,
            concurrency_tier=ct,
            order=0,
            verdict="untested",
            reasons=[],
            checks=checks,
        )

    cells = [
        cell("short", "single", "pass"),
        cell("short", "normal", "pass"),
        cell("short", "peak", "pass"),
        cell("medium", "single", "pass"),
        cell("medium", "normal", "fail"),
        cell("medium", "peak", "pass"),
        cell("long", "single", "untested"),
        cell("long", "normal", "pass"),
        cell("long", "peak", "pass"),
    ]
    rows = {r["input_tier"]: r for r in row_summaries(cells)}
    assert rows["short"] == {
        "input_tier": "short",
        "last_passing": "peak",
        "stopped_at": None,
        "capacity_error": False,
        "untested": [],
    }
    # medium/peak passing after a failure does not count: the walk stops at the failure
    assert rows["medium"] == {
        "input_tier": "medium",
        "last_passing": "single",
        "stopped_at": "normal",
        "capacity_error": False,
        "untested": [],
    }
    # an untested tier never counts as passing, but does not hide later passes
    assert rows["long"] == {
        "input_tier": "long",
        "last_passing": "peak",
        "stopped_at": None,
        "capacity_error": False,
        "untested": ["single"],
    }
