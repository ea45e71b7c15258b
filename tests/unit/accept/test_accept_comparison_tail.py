"""A single-factor comparison fails when the declared percentile got slower, even where the
whole-distribution test (Mann-Whitney, Holm) sees no shift: the tail is what the stop
conditions judge."""

from __future__ import annotations

import numpy as np

from kvbudget.accept.judge.comparisons import judge_comparison
from kvbudget.accept.plan.checks import Comparison
from kvbudget.accept.result import ComparisonResult, Ledger
from kvbudget.accept.targets.base import CellRun
from kvbudget.records import RequestRecord


def _run(tpot_values: list[float]) -> CellRun:
    records = [
        RequestRecord(request_id=f"r{i}", source="simulated", status="ok", tpot_s=v)
        for i, v in enumerate(tpot_values)
    ]
    return CellRun(records=records, duration_s=1.0)


def _judge(baseline: list[float], variant: list[float]) -> tuple[str, list[str]]:
    result = _result(baseline, variant)
    return result.verdict, result.reasons


def _result(baseline: list[float], variant: list[float]) -> ComparisonResult:
    comparison = Comparison(
        name="fp8", factor="kv_dtype", set={"kv_dtype": "fp8"}, metrics=["tpot_s"]
    )
    result = judge_comparison(
        comparison,
        baseline_runs={"long/peak": [_run(baseline)]},
        variant_runs={"long/peak": [_run(variant)]},
        baseline_ledger=Ledger(),
        variant_ledger=Ledger(),
        differences=[],
        baseline_value="auto",
        variant_value="fp8",
        rng=np.random.default_rng(0),
    )
    return result


# 400 evenly spread values in [10 ms, 20 ms): the worked-by-hand p95 is ~19.5 ms.
BASE = [0.010 + 0.010 * i / 400 for i in range(400)]


def test_tail_only_slowdown_fails() -> None:
    # Only the top 10 % doubles (p95 19.5 ms -> ~39 ms); 90 % of the samples are unchanged, so
    # Mann-Whitney (a location test) cannot call the distribution shifted.
    variant = [v * 2 if i >= 360 else v for i, v in enumerate(BASE)]
    verdict, reasons = _judge(BASE, variant)
    assert verdict == "fail"
    text = " ".join(reasons)
    assert "slower (corrected over 1 tests): tpot_s in long/peak: p95 +" in text
    assert "p(Holm)" not in text  # the location test did not move


def test_identical_runs_pass() -> None:
    verdict, reasons = _judge(BASE, list(BASE))
    assert verdict == "pass", reasons


def test_unequal_completions_are_stated() -> None:
    # 400 vs 300 finished requests (25 % fewer): percentiles compare survivors, say so
    text = _result(BASE, BASE[:300]).conclusions.get("sample_counts", "")
    assert "long/peak (400 vs 300)" in text
    assert "sample_counts" not in _result(BASE, BASE[:380]).conclusions  # 5 %: not flagged


def _six(variant_metric_scale: float) -> ComparisonResult:
    """Two cells x three metrics (m = 6); only tpot_s of long/peak changes, in its top 10 %."""

    def run(scale: float) -> CellRun:
        records = [
            RequestRecord(
                request_id=f"r{i}",
                source="simulated",
                status="ok",
                ttft_s=v,
                e2e_s=v * 10,
                tpot_s=v * scale if i >= 360 else v,
            )
            for i, v in enumerate(BASE)
        ]
        return CellRun(records=records, duration_s=1.0)

    comparison = Comparison(name="fp8", factor="kv_dtype", set={"kv_dtype": "fp8"})
    return judge_comparison(
        comparison,
        baseline_runs={"long/peak": [run(1.0)], "medium/peak": [run(1.0)]},
        variant_runs={"long/peak": [run(variant_metric_scale)], "medium/peak": [run(1.0)]},
        baseline_ledger=Ledger(),
        variant_ledger=Ledger(),
        differences=[],
        baseline_value="auto",
        variant_value="fp8",
        rng=np.random.default_rng(0),
    )


def test_the_headline_reads_the_corrected_interval() -> None:
    result = _six(2.0)
    assert result.verdict == "fail"
    # 1 - 0.05 / 6 = 99.17 %: the interval the headline quotes is the Bonferroni one
    assert "corrected over 6 tests" in result.reasons[0]
    assert "99.2% CI" in result.reasons[0]
    assert all(d.ci_confidence == 1 - 0.05 / 6 for d in result.deltas)
    # the unchanged metrics are not listed as slower or faster
    assert "ttft_s" not in result.reasons[0] and "medium/peak" not in result.reasons[0]


def test_identical_six_tests_pass_and_say_the_correction() -> None:
    result = _six(1.0)
    assert result.verdict == "pass", result.reasons
    assert "correction over 6 tests" in result.reasons[0]
