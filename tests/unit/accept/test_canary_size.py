"""The canary's default size and its per-cell gate (issue #32 item 8)."""

from __future__ import annotations

from math import comb

from kvbudget.accept.canary import _cell_gate, default_num_requests
from kvbudget.accept.result import CellResult, Check
from tests.unit.deploy.conftest import small_plan_data


def _shortfall(n: int, keep: float, need: int = 20) -> float:
    """P(fewer than ``need`` of ``n`` requests are kept), by the binomial sum."""
    return sum(comb(n, k) * keep**k * (1 - keep) ** (n - k) for k in range(need))


def _plan(cancel: float, cap: int = 200):  # type: ignore[no-untyped-def]
    from kvbudget.accept.plan.planfile import AcceptPlan

    data = small_plan_data()
    data["load"]["cancel_fraction"] = cancel
    data["load"]["max_requests_per_cell"] = cap
    return AcceptPlan.model_validate(data)


def test_default_size_leaves_a_median_after_cancellations() -> None:
    # 5 % cancelled: 20 requests leave fewer than 20 samples 64 % of the time; 25 still 0.12 %;
    # 26 is the first with at most 0.1 % (0.022 %)
    assert _shortfall(20, 0.95) > 0.64 and _shortfall(25, 0.95) > 1e-3
    assert _shortfall(26, 0.95) <= 1e-3
    assert default_num_requests(_plan(0.05)) == 26
    assert default_num_requests(_plan(0.0)) == 20
    assert default_num_requests(_plan(0.05, cap=22)) == 22


def _cell(*checks: Check) -> CellResult:
    return CellResult.model_construct(
        cell_id="short/single", verdict="untested", reasons=["r"], checks=list(checks)
    )


def test_a_ceiling_beyond_the_sample_is_skipped_but_a_breach_fails() -> None:
    ran = Check(name="ran", verdict="pass", reason="ok")
    unclaimed = Check(
        name="ttft_s p95 <= 2", verdict="untested", reason="26 < 200", observed=0.1, limit=2.0
    )
    breach = Check(
        name="tpot_s p95 <= 0.05", verdict="fail", reason="0.2 > 0.05", observed=0.2, limit=0.05
    )
    assert _cell_gate(_cell(ran, unclaimed)) == ("pass", ["r"], ["ttft_s p95 <= 2"])
    verdict, why, skipped = _cell_gate(_cell(ran, unclaimed, breach))
    assert verdict == "fail" and skipped == ["ttft_s p95 <= 2"]
    assert why == ["tpot_s p95 <= 0.05: 0.2 > 0.05"]
    no_samples = Check(name="ttft_s p50 <= 1", verdict="untested", reason="no ttft_s samples")
    assert _cell_gate(_cell(ran, no_samples))[0] == "untested"
