"""One probe of the search: a load (a Poisson rate or a closed-loop concurrency), its requests'
records judged against the SLO.

A point *meets the SLO* when every statistic term is at or under its ceiling, goodput (when the
SLO sets a floor) is at or above it, no request was refused for KV capacity, and, for an open
loop, the queue did not grow with the arrivals (:func:`kvbudget.metrics.stability.queue_growth`:
TTFT rising with arrival time means the percentiles of a short run say nothing about a long one,
so such a rate is not sustainable whatever its percentiles). A point stopped early
(:mod:`kvbudget.maxload.early_stop`: the SLO could no longer be met) fails on the term that broke.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from kvbudget.maxload.slo import Slo
from kvbudget.metrics.latency import collect_latencies
from kvbudget.metrics.slo import goodput
from kvbudget.metrics.stability import QueueGrowth, queue_growth
from kvbudget.records import RequestRecord

LoadKind = Literal["rate", "concurrency"]
#: the binding constraint when the open loop's queue grows
QUEUE_GROWTH = "queue_growth"
#: the binding constraint when requests were preempted or refused for KV blocks
KV_POOL = "kv_pool"


@dataclass(frozen=True, slots=True)
class Point:
    """The SLO's figures at one load (one seed)."""

    kind: LoadKind
    load: float
    seed: int
    #: term key (``ttft_p95_s``) -> value in seconds (None: no sample)
    values: dict[str, float | None]
    goodput_fraction: float | None
    num_requests: int
    num_ok: int
    num_preemptions: int
    #: requests/s completed over the run (the achieved load)
    requests_per_s: float | None
    #: the term names (``ttft_p95``, ``goodput``) over their limits
    failing: tuple[str, ...]
    queue: QueueGrowth | None = None
    capacity_error: str | None = None
    #: the engine's own figures over the probe (kv_usage_max, num_waiting_max), when sampled
    engine: dict[str, float] = field(default_factory=dict)
    #: why the probe stopped before sending all its requests (the SLO was clearly broken)
    stopped_early: str | None = None
    #: requests sent (fewer than num_requests planned when stopped early)
    num_sent: int | None = None

    @property
    def meets_slo(self) -> bool:
        return (
            not self.failing
            and self.queue is None
            and self.capacity_error is None
            and self.stopped_early is None
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "load": self.load,
            "seed": self.seed,
            "meets_slo": self.meets_slo,
            **self.values,
            "goodput_fraction": self.goodput_fraction,
            "requests_per_s": self.requests_per_s,
            "num_requests": self.num_requests,
            "num_ok": self.num_ok,
            "num_preemptions": self.num_preemptions,
            "failing": list(self.failing),
            "stable": self.queue is None,
        }
        if self.queue is not None:
            out["queue"] = self.queue.to_dict()
        if self.capacity_error is not None:
            out["capacity_error"] = self.capacity_error
        if self.stopped_early is not None:
            out["stopped_early"] = self.stopped_early
        if self.num_sent is not None:
            out["num_sent"] = self.num_sent
        out.update(self.engine)
        return out


def binding_constraint(passing: Point | None, failing: Point) -> str:
    """Why the load stops at ``failing`` (the lowest failing load above ``passing``).

    ``queue_growth`` when the open loop's queue grew there (the rate is past what the replicas
    serve); ``kv_pool`` when requests were refused for KV blocks, or preempted there and not at
    the passing load (the pool ran out before a latency did); else the SLO term furthest over
    its limit (``ttft_p95``, ``goodput``...).
    """
    if failing.queue is not None:
        return QUEUE_GROWTH
    before = passing.num_preemptions if passing is not None else 0
    if failing.capacity_error is not None or failing.num_preemptions > before:
        return KV_POOL
    return failing.failing[0] if failing.failing else "unknown"


def statistic(samples: np.ndarray, name: str) -> float | None:
    """``p95`` / ``mean`` / ``median`` of ``samples`` (numpy, linear percentiles)."""
    if samples.size == 0:
        return None
    if name == "mean":
        return float(np.mean(samples))
    if name == "median":
        return float(np.median(samples))
    m = re.fullmatch(r"p([0-9.]+)", name)
    if m is None:
        raise ValueError(f"unknown statistic {name!r}")
    return float(np.percentile(samples, float(m.group(1))))


def judge(
    records: Sequence[RequestRecord],
    slo: Slo,
    *,
    kind: LoadKind,
    load: float,
    seed: int,
    duration_s: float,
    num_preemptions: int,
    capacity_error: str | None = None,
) -> Point:
    """The point of one run: each term's value, goodput, stability; what fails."""
    recs = [r for r in records if not r.warmup]
    lat = collect_latencies(recs)
    values: dict[str, float | None] = {}
    failing: list[tuple[float, str]] = []
    for term in slo.statistic_terms:
        assert term.statistic is not None
        value = statistic(lat.get(f"{term.metric}_s"), term.statistic)
        values[term.key] = value
        if value is None or value > term.ceiling_s:
            ratio = float("inf") if value is None else value / term.ceiling_s
            failing.append((ratio, term.name))
    fraction = goodput(recs, slo.per_request()).goodput_fraction if slo.goodput_min else None
    if slo.goodput_min is not None and (fraction is None or fraction < slo.goodput_min):
        short = 1.0 if fraction is None else (1 - fraction) / max(1 - slo.goodput_min, 1e-9)
        failing.append((short, "goodput"))
    queue = None
    if kind == "rate":
        rows = [
            (r.sent_s, r.first_token_s - r.sent_s)
            for r in recs
            if r.sent_s is not None and r.first_token_s is not None
        ]
        queue = queue_growth([a for a, _ in rows], [t for _, t in rows])
    num_ok = lat.num_ok
    return Point(
        kind=kind,
        load=load,
        seed=seed,
        values=values,
        goodput_fraction=fraction,
        num_requests=len(recs),
        num_ok=num_ok,
        num_preemptions=num_preemptions,
        requests_per_s=num_ok / duration_s if duration_s > 0 else None,
        failing=tuple(name for _, name in sorted(failing, key=lambda x: -x[0])),
        queue=queue,
        capacity_error=capacity_error,
    )
