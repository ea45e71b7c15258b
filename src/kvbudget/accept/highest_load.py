"""The highest load each input tier holds within the stop conditions (plan
``stop.search_highest_load: true``).

The nine cells say whether the declared tiers hold; between the last passing concurrency tier
and the first failing one the answer is unknown. When the plan asks, each declared input tier
gets ``kvbudget capacity``'s concurrency search (:func:`kvbudget.maxload.search.search`:
bracket by doubling from the tier's highest passing concurrency, then bisect on integers) on
the same target, with the tier's own requests (lengths, shared prefix, tenants:
:func:`kvbudget.accept.workloads.cell_requests`, one repetition of ``max_requests_per_cell``
requests a probe, closed loop) judged against the stop conditions' latency ceilings (each at its
own percentile), any OOM or request refused for its length, and ``error_rate_max``. The probes
are not cells and change no verdict; the report states the answer per tier, with what bound it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvbudget.accept.plan_load import INPUT_TIERS, ConcurrencyTier
from kvbudget.accept.planfile import AcceptPlan
from kvbudget.accept.targets import Target
from kvbudget.accept.workloads import cell_requests
from kvbudget.maxload.point import LoadKind, Point
from kvbudget.maxload.probe import TargetProbe
from kvbudget.maxload.search import search
from kvbudget.maxload.slo import Slo, parse_slo
from kvbudget.workload.request import PlannedRequest

#: the failing term when more requests failed than ``stop.error_rate_max`` allows
ERROR_RATE = "error_rate"


def stop_slo(plan: AcceptPlan) -> Slo:
    """The stop conditions' latency ceilings as an SLO (``ttft_p95<2s,tpot_p99<0.05s``)."""
    terms = [
        f"{metric}_{pct}<{value:g}s"
        for metric, ceilings in (("ttft", plan.stop.ttft_s), ("tpot", plan.stop.tpot_s))
        for pct, value in ceilings.items()
    ]
    return parse_slo(",".join(terms))


class TierProbe(TargetProbe):
    """A closed-loop probe at concurrency ``c`` with one input tier's cell requests."""

    def __init__(self, plan: AcceptPlan, target: Target, tier: str, cell_index: int) -> None:
        def same_target(_seed: int) -> Target:
            return target

        super().__init__(
            same_target, {}, stop_slo(plan), num_requests=plan.load.max_requests_per_cell
        )
        self.plan = plan
        self.tier = tier
        self.cell_index = cell_index

    def _requests(
        self, arrivals: dict[str, Any], num: int, seed: int, cell_id: str
    ) -> tuple[list[PlannedRequest], int | None]:
        load = self.plan.load
        concurrency = int(arrivals["concurrency"])
        longest = max(t.duration_s for t in load.concurrency.values())
        tier = ConcurrencyTier(concurrency=concurrency, duration_s=longest, arrival="closed")
        requests = cell_requests(
            load.model_copy(update={"max_requests_per_cell": num}),
            load.tiers[self.tier],  # type: ignore[index]
            tier,
            cell_id=f"{self.tier}/highest-load-c{concurrency}",
            seed=seed,
            cell_index=self.cell_index,
            repetition=0,
        )
        return requests, concurrency

    def __call__(self, kind: LoadKind, load: float, seed: int) -> Point:
        point = super().__call__(kind, load, seed)
        done = point.num_sent or point.num_requests
        errors = done - point.num_ok
        if done and errors / done > self.plan.stop.error_rate_max:
            return replace(point, failing=(*point.failing, ERROR_RATE))
        return point


def _start(row: dict[str, Any] | None, plan: AcceptPlan) -> float:
    last = (row or {}).get("last_passing")
    if last and last in plan.load.concurrency:
        return float(plan.load.concurrency[last].concurrency)  # type: ignore[index]
    return 1.0


def highest_loads(
    plan: AcceptPlan, target: Target, rows: list[dict[str, Any]], *, figures: str
) -> dict[str, dict[str, Any]]:
    """Per declared input tier: the highest closed-loop concurrency meeting the stop
    conditions, the lowest above it that failed and why (``figures``: simulated/measured)."""
    by_tier = {r["input_tier"]: r for r in rows}
    out: dict[str, dict[str, Any]] = {}
    cap = float(plan.load.max_requests_per_cell)
    for index, tier in enumerate(t for t in INPUT_TIERS if t in plan.load.tiers):
        probe = TierProbe(plan, target, tier, 1000 + index)
        found = search(
            probe,
            "concurrency",
            start=min(_start(by_tier.get(tier), plan), cap),
            seed=plan.seed,
            ceiling=cap,
        )
        out[tier] = {
            "figures": figures,
            "slo": probe.slo.text,
            "error_rate_max": plan.stop.error_rate_max,
            "highest_concurrency": None if found.answer is None else int(found.answer),
            "failing_concurrency": None if found.failing is None else int(found.failing.load),
            "binding_constraint": found.binding_constraint,
            "requests_per_probe": probe.num_requests,
            "probes": [
                {
                    "concurrency": int(p.load),
                    "meets": p.meets_slo,
                    "failing": list(p.failing),
                    **{k: v for k, v in p.values.items()},
                }
                for p in sorted(found.points, key=lambda p: p.load)
            ],
        }
    return out
