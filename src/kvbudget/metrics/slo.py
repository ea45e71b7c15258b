"""Service-level objectives and goodput.

A request *meets the SLO* when it finished ok and each per-request ceiling that is set holds:
``ttft_s <= ttft_s_max``, ``tpot_s <= tpot_s_max`` (requests with one output token have no
TPOT and pass that ceiling), ``e2e_s <= e2e_s_max``. A latency the record lacks fails the
ceiling (it cannot be shown to hold).

- ``goodput_requests_per_s = num_meeting_slo / window_s`` (the throughput window).
- ``goodput_fraction = num_meeting_slo / num_requests`` (all counted requests — errors and
  cancellations count against it).

Percentile ceilings ("p99 TTFT <= 2 s") are checked with :func:`check_percentile_ceiling`
against a :class:`~kvbudget.metrics.summary.DistributionSummary`; it reports whether the
point estimate and whether the whole confidence interval are under the ceiling.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from pydantic import BaseModel, ConfigDict, Field

from kvbudget.metrics.latency import record_latencies
from kvbudget.metrics.summary import DistributionSummary, percentile_key
from kvbudget.metrics.throughput import throughput
from kvbudget.records import RequestRecord


class SloSpec(BaseModel):
    """Per-request latency ceilings (seconds); unset ceilings are not checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_s_max: float | None = Field(None, gt=0)
    tpot_s_max: float | None = Field(None, gt=0)
    e2e_s_max: float | None = Field(None, gt=0)


def meets_slo(rec: RequestRecord, slo: SloSpec) -> bool:
    """Whether one record finished ok within every set ceiling."""
    if rec.status != "ok":
        return False
    ttft, tpot, e2e = record_latencies(rec)
    if slo.ttft_s_max is not None and (ttft is None or ttft > slo.ttft_s_max):
        return False
    tpot_checked = slo.tpot_s_max is not None and rec.output_tokens >= 2
    if tpot_checked and (tpot is None or tpot > (slo.tpot_s_max or 0.0)):
        return False
    return not (slo.e2e_s_max is not None and (e2e is None or e2e > slo.e2e_s_max))


@dataclass(frozen=True, slots=True)
class Goodput:
    num_requests: int
    num_meeting_slo: int
    window_s: float
    goodput_requests_per_s: float | None
    goodput_fraction: float | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def goodput(
    records: Iterable[RequestRecord], slo: SloSpec, *, include_warmup: bool = False
) -> Goodput:
    """Requests meeting ``slo`` per second and as a fraction of all counted requests."""
    recs = [r for r in records if include_warmup or not r.warmup]
    good = sum(1 for r in recs if meets_slo(r, slo))
    tp = throughput(recs, include_warmup=True)
    return Goodput(
        num_requests=len(recs),
        num_meeting_slo=good,
        window_s=tp.window_s,
        goodput_requests_per_s=good / tp.window_s if tp.window_s > 0 else None,
        goodput_fraction=good / len(recs) if recs else None,
    )


@dataclass(frozen=True, slots=True)
class CeilingCheck:
    metric: str
    percentile: float
    ceiling: float
    value: float | None
    ci_high: float | None
    point_within: bool | None
    interval_within: bool | None
    n: int


def check_percentile_ceiling(
    summary: DistributionSummary, percentile: float, ceiling: float
) -> CeilingCheck:
    """Is the ``percentile`` of ``summary`` at or under ``ceiling`` (point, and CI upper end)?"""
    est = summary.percentiles.get(percentile_key(percentile))
    value = None if est is None else est.value
    ci_high = None if est is None else est.ci_high
    return CeilingCheck(
        metric=summary.metric,
        percentile=percentile,
        ceiling=ceiling,
        value=value,
        ci_high=ci_high,
        point_within=None if value is None else value <= ceiling,
        interval_within=None if ci_high is None else ci_high <= ceiling,
        n=summary.n,
    )
