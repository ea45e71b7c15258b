"""Each anomaly hint is raised with its evidence, and only then."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbudget.accept.judge.anomalies import find_anomalies
from kvbudget.accept.plan.planfile import load_plan
from kvbudget.accept.result import (
    Budget,
    CellResult,
    ComparisonResult,
    Ledger,
    MetricDelta,
    TimeSeries,
)

DEMO = Path(__file__).resolve().parents[3] / "examples" / "acceptance-demo.yaml"


def cell(cell_id: str = "medium/normal", **kw: Any) -> CellResult:
    it, ct = cell_id.split("/")
    base: dict[str, Any] = {
        "cell_id": cell_id,
        "input_tier": it,
        "concurrency_tier": ct,
        "order": 0,
        "verdict": "pass",
        "reasons": [],
    }
    base.update(kw)
    return CellResult(**base)


def ledger() -> Ledger:
    budgets = [
        Budget(name="structural", bytes=8 * 2**30, kind="computed", what=""),
        Budget(name="engine_pool", bytes=50 * 2**30, kind="computed", what=""),
        Budget(name="device_peak", bytes=70 * 2**30, kind="computed", what=""),
    ]
    return Ledger(budgets=budgets, pool={"kv_cache_tokens": 1000})


def codes(
    plan: Any,
    cells: list[CellResult],
    comps: list[ComparisonResult] | None = None,
    baseline: dict[str, float] | None = None,
    led: Ledger | None = None,
) -> list[str]:
    return [
        a.code for a in find_anomalies(plan, led or ledger(), baseline or {}, cells, comps or [])
    ]


def test_nothing_without_evidence() -> None:
    plan = load_plan(DEMO)
    quiet = cell(
        timeseries=TimeSeries(t_s=[0, 1, 2], kv_usage=[0.1, 0.2, 0.1], num_waiting=[0, 0, 0]),
        prefix_hit_rate_tokens=0.5,
        prompt_tokens_mean=1000.0,
    )
    assert codes(plan, [quiet]) == []


def test_free_pool_but_queueing() -> None:
    plan = load_plan(DEMO)
    ts = TimeSeries(t_s=list(range(10)), kv_usage=[0.3] * 10, num_waiting=[4] * 5 + [0] * 5)
    assert "free_pool_but_queueing" in codes(plan, [cell(timeseries=ts)])
    full = TimeSeries(t_s=list(range(10)), kv_usage=[0.95] * 10, num_waiting=[4] * 10)
    assert "free_pool_but_queueing" not in codes(plan, [cell(timeseries=full)])


def test_low_prefix_hit_needs_a_declared_shared_prefix() -> None:
    plan = load_plan(DEMO)  # 96 shared tokens declared, prefix caching on
    low = cell(prefix_hit_rate_tokens=0.01, prompt_tokens_mean=200.0)  # shared share 48 %
    assert "low_prefix_hit" in codes(plan, [low])
    ok = cell(prefix_hit_rate_tokens=0.40, prompt_tokens_mean=200.0)
    assert "low_prefix_hit" not in codes(plan, [ok])
    no_prefix = plan.model_copy(
        update={
            "load": plan.load.model_copy(
                update={"shared_prefix": plan.load.shared_prefix.model_copy(update={"tokens": 0})}
            )
        }
    )
    assert "low_prefix_hit" not in codes(no_prefix, [low])


def delta(shift: float, significant: bool) -> MetricDelta:
    return MetricDelta(
        cell_id="medium/normal",
        metric="tpot_s",
        n_baseline=100,
        n_variant=100,
        baseline_pct=0.02,
        variant_pct=0.02 + shift,
        pct_diff=shift,
        pct_diff_low=None,
        pct_diff_high=None,
        hl_shift=shift,
        p_value=0.01 if significant else 0.5,
        p_holm=0.02 if significant else 0.9,
        significant=significant,
    )


def comp(ratio: float | None, *deltas: MetricDelta) -> ComparisonResult:
    return ComparisonResult(
        name="fp8",
        factor="kv_dtype",
        verdict="pass",
        reasons=[],
        deltas=list(deltas),
        capacity_ratio=ratio,
        conclusions={"capacity": "x"},
    )


def test_memory_down_no_speedup() -> None:
    plan = load_plan(DEMO)
    assert "memory_down_no_speedup" in codes(plan, [], [comp(2.0, delta(0.0, False))])
    assert "memory_down_no_speedup" not in codes(plan, [], [comp(2.0, delta(-0.005, True))])
    assert "memory_down_no_speedup" not in codes(plan, [], [comp(1.0, delta(0.0, False))])


def test_long_input_quality_drop() -> None:
    plan = load_plan(DEMO)
    short = cell(
        "short/normal", quality=[{"checkpoint": "needle", "verdict": "pass", "reason": ""}]
    )
    long_ = cell("long/normal", quality=[{"checkpoint": "needle", "verdict": "fail", "reason": ""}])
    assert "long_input_quality_drop" in codes(plan, [short, long_])
    untested = cell(
        "long/normal", quality=[{"checkpoint": "needle", "verdict": "untested", "reason": ""}]
    )
    assert "long_input_quality_drop" not in codes(plan, [short, untested])


def test_memory_not_released_after_cancel() -> None:
    plan = load_plan(DEMO)
    assert "memory_not_released_after_cancel" in codes(
        plan, [cell(num_cancelled=3, kv_usage_after_drain=0.2)]
    )
    assert "memory_not_released_after_cancel" not in codes(
        plan, [cell(num_cancelled=3, kv_usage_after_drain=0.0)]
    )
    assert "memory_not_released_after_cancel" not in codes(
        plan, [cell(num_cancelled=0, kv_usage_after_drain=0.2)]
    )


def test_structural_below_runtime_needs_a_runtime_figure() -> None:
    plan = load_plan(DEMO)
    assert "structural_below_runtime" not in codes(plan, [])
    measured = {"device_memory_used_bytes": float(72 * 2**30)}
    (hint,) = find_anomalies(plan, ledger(), measured, [], [])
    assert hint.code == "structural_below_runtime"
    # 72 GiB measured - 70 GiB planned device peak = 2 GiB unexplained
    assert f"unexplained beyond the planned device peak: {2 * 2**30} bytes" in hint.evidence
    assert f"non-KV {20 * 2**30} bytes" in hint.evidence
    small = {"device_memory_used_bytes": float(4 * 2**30)}
    assert "structural_below_runtime" not in codes(plan, [], baseline=small)
