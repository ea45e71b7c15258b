"""How much can it hold: the highest Poisson rate and closed-loop concurrency meeting an SLO.

1. Estimate: one closed-loop probe at ``saturation_concurrency`` (every batch slot full); its
   completed requests/s is about the most the replicas serve, where the rate search starts.
   When the batch size is unknown (a real engine), the concurrency search runs first and the
   highest requests/s any of its probes completed is the estimate.
2. Rate: :func:`kvbudget.maxload.search.search` (factor 2, then bisection to ``tolerance``).
3. Concurrency: the same on integers, from 1.
   The rate's answer is confirmed by a run with ``confirm`` (the same probe, more requests: a
   short run cannot tell a rate just above the service rate from one just below; see
   :mod:`kvbudget.maxload.search`).
4. Variance: each search again with the other seeds, bracketed from the first answer (factor
   1.25); the answer's min / mean / max over all seeds is stated beside the first seed's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from kvbudget.maxload.point import Point
from kvbudget.maxload.search import Probe, Search, search
from kvbudget.maxload.slo import Slo

#: bracketing factor of the reruns with other seeds, around the first seed's answer
RERUN_FACTOR = 1.25


@dataclass(frozen=True, slots=True)
class LoadAnswer:
    """One kind of load (rate or concurrency): the first seed's search and the reruns."""

    main: Search
    reruns: tuple[Search, ...]

    def across_seeds(self) -> dict[str, object]:
        values = [s.answer for s in (self.main, *self.reruns)]
        found = [v for v in values if v is not None]
        return {
            "seeds": [s.seed for s in (self.main, *self.reruns)],
            "values": values,
            "min": min(found) if found else None,
            "mean": sum(found) / len(found) if found else None,
            "max": max(found) if found else None,
        }

    def points(self) -> list[Point]:
        return sorted(self.main.points, key=lambda p: p.load)


@dataclass(frozen=True, slots=True)
class Capacity:
    """The answer of ``kvbudget capacity``."""

    slo: Slo
    rate: LoadAnswer
    concurrency: LoadAnswer
    estimate: Point | None
    tolerance: float
    num_requests: int
    wall_s: float

    def to_dict(self) -> dict[str, object]:
        return {
            "slo": self.slo.to_dict(),
            "max_rate_per_s": self.rate.main.answer,
            "max_concurrency": (
                None if self.concurrency.main.answer is None else int(self.concurrency.main.answer)
            ),
            "binding_constraint": self.rate.main.binding_constraint,
            "max_rate_confirmed": self.rate.main.confirmed,
            "binding_constraint_concurrency": self.concurrency.main.binding_constraint,
            "max_rate_per_s_across_seeds": self.rate.across_seeds(),
            "max_concurrency_across_seeds": self.concurrency.across_seeds(),
            "rate_points": [p.to_dict() for p in self.rate.points()],
            "concurrency_points": [p.to_dict() for p in self.concurrency.points()],
            "estimate": None if self.estimate is None else self.estimate.to_dict(),
            "stopped": self.rate.main.stopped or self.concurrency.main.stopped,
            "tolerance": self.tolerance,
            "num_requests": self.num_requests,
            "wall_s": self.wall_s,
        }


def _reruns(
    probe: Probe,
    first: Search,
    seeds: Sequence[int],
    *,
    start: float,
    tolerance: float,
    ceiling: float | None = None,
    confirm: Probe | None = None,
) -> tuple[Search, ...]:
    guess = first.answer if first.answer is not None else start
    return tuple(
        search(
            probe,
            first.kind,
            start=guess,
            seed=s,
            factor=RERUN_FACTOR,
            tolerance=tolerance,
            ceiling=ceiling,
            confirm=confirm,
        )
        for s in seeds
    )


def find_capacity(
    probe: Probe,
    slo: Slo,
    *,
    saturation_concurrency: int | None,
    num_requests: int,
    seeds: Sequence[int] = (0, 1, 2),
    tolerance: float = 0.05,
    confirm: Probe | None = None,
) -> Capacity:
    """Search rate and concurrency with ``seeds[0]``; rerun both with the other seeds."""
    wall0 = time.perf_counter()
    first, *others = seeds
    estimate = None
    if saturation_concurrency is not None:
        full = float(min(saturation_concurrency, num_requests))
        estimate = probe("concurrency", full, first)
        start = estimate.requests_per_s or 1.0
        rate = search(probe, "rate", start=start, seed=first, tolerance=tolerance, confirm=confirm)
        conc = search(probe, "concurrency", start=1, seed=first, ceiling=float(num_requests))
    else:
        conc = search(probe, "concurrency", start=1, seed=first, ceiling=float(num_requests))
        start = max((p.requests_per_s or 0.0 for p in conc.points), default=0.0) or 1.0
        rate = search(probe, "rate", start=start, seed=first, tolerance=tolerance, confirm=confirm)
    return Capacity(
        slo=slo,
        rate=LoadAnswer(
            rate,
            _reruns(probe, rate, others, start=start, tolerance=tolerance, confirm=confirm),
        ),
        concurrency=LoadAnswer(
            conc,
            _reruns(
                probe, conc, others, start=1.0, tolerance=tolerance, ceiling=float(num_requests)
            ),
        ),
        estimate=estimate,
        tolerance=tolerance,
        num_requests=num_requests,
        wall_s=time.perf_counter() - wall0,
    )
