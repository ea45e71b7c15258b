"""``stop.search_highest_load``: each input tier's highest concurrency within the stop
conditions, on a fake target whose latency and errors at each concurrency the test defines
(so each answer is hand arithmetic, not the code under test's)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from kvbudget.accept.highest_load import highest_loads, stop_slo
from kvbudget.accept.plan.planfile import AcceptPlan, parse_plan
from kvbudget.accept.targets.base import CellRun, TargetInfo
from kvbudget.records import RequestRecord
from kvbudget.report.summary import highest_load_text
from kvbudget.workload.request import PlannedRequest

REPO = Path(__file__).resolve().parents[3]
STEP_S = 0.1


def _plan(**stop: Any) -> AcceptPlan:
    data = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    data["load"]["max_requests_per_cell"] = 40
    data["load"]["shared_prefix"] = {"tokens": 0}
    for tier in data["load"]["tiers"].values():
        tier.update(min_tokens=16, max_tokens=32, output_tokens=4)
    # the fake below models a closed loop only: the concurrency search alone (the demo's
    # Poisson tier would ask for the rate too: test_accept_highest_rate.py)
    data["stop"] = {
        "ttft_s": {"p95": 2.05},
        "search_highest_load": True,
        "search_highest_load_by": "concurrency",
        **stop,
    }
    data["comparisons"] = []
    return parse_plan(data)


class QueueTarget:
    """A closed loop of ``c`` clients on one request at a time, ``STEP_S`` each: every TTFT is
    ``c * STEP_S``; from concurrency ``errors_from`` on, every fourth request fails."""

    def __init__(self, errors_from: int = 10**9, cancel_every: int = 0) -> None:
        self.errors_from = errors_from
        self.cancel_every = cancel_every
        self.concurrencies: list[int] = []

    @property
    def info(self) -> TargetInfo:
        return TargetInfo(kind="fake", source="measured", label="fake")

    def idle_baseline(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        return None

    def run_cell(
        self,
        requests: Sequence[PlannedRequest],
        *,
        cell_id: str,
        closed_loop_concurrency: int | None,
        duration_s: float | None,
        warmup: bool = False,
    ) -> CellRun:
        c = closed_loop_concurrency or 1
        self.concurrencies.append(c)
        records = []
        for i, r in enumerate(requests):
            ttft = c * STEP_S
            if c >= self.errors_from and i % 4 == 0:
                rec = RequestRecord(
                    request_id=r.request_id,
                    source="measured",
                    status="error",
                    error_kind="http_status",
                    http_status=500,
                    sent_s=0.0,
                    done_s=0.01,
                )
            elif self.cancel_every and i % self.cancel_every == 0:
                rec = RequestRecord(
                    request_id=r.request_id,
                    source="measured",
                    status="cancelled",
                    sent_s=0.0,
                    done_s=0.01,
                )
            else:
                rec = RequestRecord(
                    request_id=r.request_id,
                    source="measured",
                    status="ok",
                    sent_s=0.0,
                    first_token_s=ttft,
                    done_s=ttft + 0.03,
                    output_tokens=4,
                )
            records.append(rec)
        return CellRun(records=records, duration_s=1.0)


def test_the_stop_conditions_are_the_slo() -> None:
    plan = _plan(tpot_s={"p99": 0.05})
    assert stop_slo(plan).text == "ttft_p95<2.05s,tpot_p99<0.05s"


def test_highest_concurrency_under_a_ttft_ceiling_by_hand() -> None:
    # TTFT = 0.1 s x c <= 2.05 s  <=>  c <= 20.5: 20 holds, 21 fails (2.1 s)
    plan = _plan()
    target = QueueTarget()
    rows = [{"input_tier": "short", "last_passing": "normal"}]  # normal: 16 in flight
    found = highest_loads(plan, target, rows, figures="measured")
    assert set(found) == set(plan.load.tiers)
    short = found["short"]
    assert (short["highest_concurrency"], short["failing_concurrency"]) == (20, 21)
    assert short["binding_constraint"] == "ttft_p95"
    # bracketed from the tier's passing concurrency: 16 holds, 32 fails; bisection: 24 fails,
    # 20 holds, 22 and 21 fail
    assert target.concurrencies[:6] == [16, 32, 24, 20, 22, 21]
    assert all(p["meets"] == (p["concurrency"] <= 20) for p in short["probes"])
    # a tier with no passing cell starts at 1
    assert found["medium"]["probes"][0]["concurrency"] == 1
    assert found["medium"]["highest_concurrency"] == 20
    assert highest_load_text(short) == (
        "highest load within the stop conditions (searched, measured): 20 concurrent; "
        "21 fails on ttft_p95"
    )


def test_the_error_rate_binds_when_requests_fail() -> None:
    # from 8 concurrent on, 10 of 40 requests fail (a quarter) > error_rate_max 0.01
    plan = _plan()
    found = highest_loads(plan, QueueTarget(errors_from=8), [], figures="measured")
    assert (found["long"]["highest_concurrency"], found["long"]["failing_concurrency"]) == (7, 8)
    assert found["long"]["binding_constraint"] == "error_rate"


def test_cancelled_requests_are_not_errors() -> None:
    # the plan's cancel_fraction cancels requests on purpose; a cell does not count them as
    # errors (kvbudget.accept.judge.verdicts) and neither does a probe: every tenth request of 40
    # cancelled (4 > error_rate_max 0.01 x 40) still leaves the TTFT ceiling binding at 20
    plan = _plan()
    found = highest_loads(plan, QueueTarget(cancel_every=10), [], figures="measured")
    assert (found["short"]["highest_concurrency"], found["short"]["binding_constraint"]) == (
        20,
        "ttft_p95",
    )


def test_off_by_default() -> None:
    data = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    assert parse_plan(data).stop.search_highest_load is False
