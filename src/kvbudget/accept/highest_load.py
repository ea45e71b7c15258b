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

When the plan asks for the rate (``stop.search_highest_load_by: rate``, or ``auto`` with an
open-loop concurrency tier), each tier then gets ``kvbudget capacity``'s rate search too (the
same :func:`~kvbudget.maxload.search.search` on ``"rate"``): Poisson arrivals of
``max_requests_per_cell`` of the tier's requests per probe, bracketed (x2) from the highest
requests/s any concurrency probe completed (about the service rate), bisected to
:data:`RATE_TOLERANCE`, a rate whose queue grows with the arrivals refused whatever its
percentiles, and the answer confirmed by a run :data:`CONFIRM_FACTOR` times longer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvbudget.accept.plan.load import INPUT_TIERS, ConcurrencyTier
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.targets.base import CellRun, Target
from kvbudget.accept.workloads import cell_requests
from kvbudget.maxload.early_stop import EarlyStop
from kvbudget.maxload.point import LoadKind, Point
from kvbudget.maxload.probe import TargetProbe
from kvbudget.maxload.search import Search, search
from kvbudget.maxload.slo import Slo, parse_slo
from kvbudget.metrics.stability import MIN_REQUESTS
from kvbudget.safety.limits import MAX_DURATION_S
from kvbudget.workload.request import PlannedRequest

#: the failing term when more requests failed than ``stop.error_rate_max`` allows
ERROR_RATE = "error_rate"
#: the rate search's bisection tolerance (``kvbudget capacity --rate-tolerance``'s default)
RATE_TOLERANCE = 0.05
#: the rate's answer is confirmed by a run this many times longer (kvbudget capacity's
#: CONFIRM_FACTOR)
CONFIRM_FACTOR = 4


def searches_rate(plan: AcceptPlan) -> bool:
    """Whether the plan asks for the highest rate (``stop.search_highest_load_by``)."""
    by = plan.stop.search_highest_load_by
    if by == "auto":
        return any(t.arrival in ("poisson", "constant") for t in plan.load.concurrency.values())
    return by == "rate"


def stop_slo(plan: AcceptPlan) -> Slo:
    """The stop conditions' latency ceilings as an SLO (``ttft_p95<2s,tpot_p99<0.05s``)."""
    terms = [
        f"{metric}_{pct}<{value:g}s"
        for metric, ceilings in (("ttft", plan.stop.ttft_s), ("tpot", plan.stop.tpot_s))
        for pct, value in ceilings.items()
    ]
    return parse_slo(",".join(terms))


class TierProbe(TargetProbe):
    """A probe with one input tier's cell requests: a closed loop at concurrency ``c``, or
    Poisson arrivals at a rate."""

    def __init__(self, plan: AcceptPlan, target: Target, tier: str, cell_index: int) -> None:
        def same_target(_seed: int) -> Target:
            return target

        super().__init__(
            same_target, {}, stop_slo(plan), num_requests=plan.load.max_requests_per_cell
        )
        self.plan = plan
        self.tier = tier
        self.cell_index = cell_index
        #: the last probe's (failed, judged) requests
        self._errors = (0, 0)

    def _requests(
        self, arrivals: dict[str, Any], num: int, seed: int, cell_id: str
    ) -> tuple[list[PlannedRequest], int | None]:
        load = self.plan.load
        if arrivals["kind"] == "poisson":
            rate = float(arrivals["rate_per_s"])
            # the count ends the probe, never the duration; the in-flight cap is the plan's
            # widest (open-loop targets do not enforce it)
            tier = ConcurrencyTier(
                concurrency=max(t.concurrency for t in load.concurrency.values()),
                duration_s=MAX_DURATION_S,
                arrival="poisson",
                rate_per_s=rate,
            )
            cell_id, concurrency = f"{self.tier}/highest-load-r{rate:.6g}", None
        else:
            concurrency = int(arrivals["concurrency"])
            longest = max(t.duration_s for t in load.concurrency.values())
            tier = ConcurrencyTier(concurrency=concurrency, duration_s=longest, arrival="closed")
            cell_id = f"{self.tier}/highest-load-c{concurrency}"
        requests = cell_requests(
            load.model_copy(update={"max_requests_per_cell": num}),
            load.tiers[self.tier],  # type: ignore[index]
            tier,
            cell_id=cell_id,
            seed=seed,
            cell_index=self.cell_index,
            repetition=0,
        )
        return requests, concurrency

    def _run(
        self,
        target: Target,
        requests: list[PlannedRequest],
        cell_id: str,
        concurrency: int | None,
        stop: EarlyStop | None,
    ) -> CellRun:
        run = super()._run(target, requests, cell_id, concurrency, stop)
        # errors as a cell counts them (kvbudget.accept.judge.verdicts): failed requests, not the
        # ones the plan's cancel_fraction cancelled on purpose
        judged = [r for r in run.records if not r.warmup]
        self._errors = (sum(1 for r in judged if r.status == "error"), len(judged))
        return run

    def __call__(self, kind: LoadKind, load: float, seed: int) -> Point:
        self._errors = (0, 0)
        point = super().__call__(kind, load, seed)
        errors, done = self._errors
        if done and errors / done > self.plan.stop.error_rate_max:
            return replace(point, failing=(*point.failing, ERROR_RATE))
        return point


def _start(row: dict[str, Any] | None, plan: AcceptPlan) -> float:
    last = (row or {}).get("last_passing")
    if last and last in plan.load.concurrency:
        return float(plan.load.concurrency[last].concurrency)  # type: ignore[index]
    return 1.0


def _rate_answer(probe: TierProbe, conc: Search, seed: int) -> dict[str, Any]:
    """The tier's rate search (``kvbudget capacity``'s), started from the highest requests/s
    any concurrency probe completed."""
    start = max((p.requests_per_s or 0.0 for p in conc.points), default=0.0) or 1.0
    found = search(
        probe,
        "rate",
        start=start,
        seed=seed,
        tolerance=RATE_TOLERANCE,
        confirm=probe.longer(CONFIRM_FACTOR),
    )
    return {
        "max_rate_per_s": found.answer,
        "failing_rate_per_s": None if found.failing is None else found.failing.load,
        "binding_constraint_rate": found.binding_constraint,
        "max_rate_confirmed": found.confirmed,
        "rate_start_per_s": start,
        "rate_tolerance": RATE_TOLERANCE,
        "rate_probes": [
            {
                "rate_per_s": p.load,
                "requests": p.num_requests,
                "meets": p.meets_slo,
                "failing": list(p.failing),
                "stable": p.queue is None,
                "requests_per_s": p.requests_per_s,
                **{k: v for k, v in p.values.items()},
            }
            for p in sorted(found.points, key=lambda p: (p.load, p.num_requests))
        ],
    }


def highest_loads(
    plan: AcceptPlan, target: Target, rows: list[dict[str, Any]], *, figures: str
) -> dict[str, dict[str, Any]]:
    """Per declared input tier: the highest closed-loop concurrency meeting the stop
    conditions, the lowest above it that failed and why (``figures``: simulated/measured);
    with :func:`searches_rate`, the highest Poisson rate likewise (``max_rate_per_s``)."""
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
        best = None if found.answer is None else int(found.answer)
        out[tier] = {
            "figures": figures,
            "slo": probe.slo.text,
            "error_rate_max": plan.stop.error_rate_max,
            "highest_concurrency": best,
            "max_concurrency": best,  # kvbudget capacity's name for the same answer
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
        if searches_rate(plan) and probe.num_requests < MIN_REQUESTS:
            out[tier].update(
                max_rate_per_s=None,
                rate_not_searched=f"load.max_requests_per_cell {probe.num_requests} is under "
                f"the {MIN_REQUESTS} requests a probe needs to tell a growing queue; raise it "
                "to search the rate",
            )
        elif searches_rate(plan):
            out[tier].update(_rate_answer(probe, found, plan.seed))
    return out
