"""Stop a probe as soon as its SLO is clearly broken: no request still to come can mend it.

A probe of ``N`` planned requests is judged on at most ``N`` samples per metric (errors and
cancellations give none). Checked as each request finishes, against the records so far:

- ``<metric>_pQ <= L`` (numpy's linear percentile, as :func:`kvbudget.maxload.point.statistic`
  computes it): over ``n`` samples it interpolates between the sorted samples at ``floor(h)``
  and ``floor(h) + 1``, ``h = (n - 1) * Q / 100``; once ``k`` samples exceed ``L`` with
  ``k >= n - floor(h)``, both are over ``L`` and so is the percentile. The bound
  ``n - floor((n - 1) * Q / 100)`` never falls as ``n`` grows, so reaching it for ``n = N``
  settles it for whatever number of samples the probe ends with (requests still to come, fast
  or failing, cannot pull it back). ``median`` is ``p50``. ITL pools every token gap of every
  request, whose number is not fixed in advance: it is never stopped early.
- ``<metric>_mean <= L``: latencies are non-negative, so once the samples' sum exceeds
  ``L * N``, the mean of at most ``N`` samples exceeds ``L``.
- ``goodput >= g``: once ``bad`` requests failed their thresholds (or did not finish ok) with
  ``(N - bad) / N < g``, the fraction cannot reach ``g`` (every probe records all ``N``).

E.g. ``ttft_p95<1s`` over 20 requests: ``h = 19 * 0.95 = 18.05``, so 2 requests over 1 s
(``20 - 18``) settle it.
"""

from __future__ import annotations

import math

from kvbudget.maxload.slo import Slo
from kvbudget.metrics.latency import record_latencies
from kvbudget.metrics.slo import meets_slo
from kvbudget.records import RequestRecord

#: the latency metrics known per request when it finishes (ITL is per token: not judged early)
_PER_REQUEST = ("ttft", "tpot", "e2e")


def over_needed(num_planned: int, q_percent: float) -> int:
    """Samples over the ceiling that put the ``q_percent`` percentile of up to ``num_planned``
    samples over it (numpy's linear interpolation; the same float arithmetic)."""
    return num_planned - math.floor((num_planned - 1) * (q_percent / 100))


class EarlyStop:
    """Called with each finished record of a probe of ``num_planned`` requests; returns why
    the SLO can no longer be met (the first broken term, e.g. ``"ttft_p95: 2 of 20 planned
    requests over 1000 ms"``), else None. ``term`` is that term's name once it returned."""

    def __init__(self, slo: Slo, num_planned: int) -> None:
        self.slo = slo
        self.num_planned = num_planned
        self.term: str | None = None
        self._over: dict[str, int] = {}
        self._sum: dict[str, float] = {}
        self._bad = 0
        self._per_request = slo.per_request()

    def __call__(self, rec: RequestRecord) -> str | None:
        if rec.warmup:
            return None
        n = self.num_planned
        values = dict(zip(_PER_REQUEST, record_latencies(rec), strict=True))
        for term in self.slo.statistic_terms:
            if term.metric not in _PER_REQUEST or rec.status != "ok":
                continue
            value = values[term.metric]
            if value is None:
                continue
            limit = f"{term.ceiling_s * 1e3:g} ms"
            if term.statistic == "mean":
                total = self._sum[term.name] = self._sum.get(term.name, 0.0) + value
                if total > term.ceiling_s * n:
                    return self._stop(
                        term.name,
                        f"{term.name}: the finished requests' {term.metric} sum to "
                        f"{total:.3g} s > {limit} x {n} planned requests",
                    )
                continue
            q = 50.0 if term.statistic == "median" else float(str(term.statistic)[1:])
            if value > term.ceiling_s:
                k = self._over[term.name] = self._over.get(term.name, 0) + 1
                if k >= over_needed(n, q):
                    return self._stop(
                        term.name, f"{term.name}: {k} of {n} planned requests over {limit}"
                    )
        if self.slo.goodput_min is not None and not meets_slo(rec, self._per_request):
            self._bad += 1
            # the fraction judge() computes, with every request still to come meeting them
            if (n - self._bad) / n < self.slo.goodput_min:
                return self._stop(
                    "goodput",
                    f"goodput: {self._bad} of {n} planned requests missed the thresholds "
                    f"(at most {(n - self._bad) / n:.3g} can meet them < {self.slo.goodput_min:g})",
                )
        return None

    def _stop(self, term: str, reason: str) -> str:
        self.term = term
        return reason
