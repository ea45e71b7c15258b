"""Is the queue stable? An open loop whose arrivals outrun the service grows without bound.

When requests arrive at ``lambda`` per second and are served at ``mu < lambda``, the queue grows
by ``lambda - mu`` per second and each request waits ``(lambda / mu - 1) * t`` behind it, so TTFT
rises linearly with the arrival time ``t`` (slope ``lambda / mu - 1``). Percentiles of such a run
depend on how long it ran, not on the deployment: they must not be read as its latency.

:func:`queue_growth` fits TTFT against arrival time (least squares) and flags a run whose slope
is above :data:`MIN_SLOPE` and whose last quarter's median TTFT is more than
:data:`MIN_RATIO` times the first quarter's. The service rate is estimated as
``offered / (1 + slope)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from kvbudget.metrics.spilled import Chunks, SpilledColumns, median_of, select

#: TTFT seconds gained per second of arrivals above which the queue counts as growing
MIN_SLOPE = 0.05
#: last-quarter median TTFT over first-quarter median TTFT above which the growth is real
MIN_RATIO = 2.0
#: fewer completed requests than this say nothing about a trend
MIN_REQUESTS = 20


@dataclass(frozen=True)
class QueueGrowth:
    """Evidence that an open-loop run's queue grew throughout."""

    num_requests: int
    ttft_growth_s_per_s: float
    offered_per_s: float
    served_per_s: float
    first_quarter_ttft_s: float
    last_quarter_ttft_s: float

    def line(self) -> str:
        return (
            f"unstable queue: arrivals ({self.offered_per_s:.3g}/s offered) outrun the service "
            f"(about {self.served_per_s:.3g}/s); TTFT grows {self.ttft_growth_s_per_s:.3g} s per "
            f"second of arrivals (median {self.first_quarter_ttft_s:.3g} s in the first quarter "
            f"of {self.num_requests} requests, {self.last_quarter_ttft_s:.3g} s in the last), so "
            "its percentiles depend on the run's length; lower the rate or add capacity"
        )

    def to_dict(self) -> dict[str, float | int]:
        return {
            "num_requests": self.num_requests,
            "ttft_growth_s_per_s": self.ttft_growth_s_per_s,
            "offered_per_s": self.offered_per_s,
            "served_per_s": self.served_per_s,
            "first_quarter_ttft_s": self.first_quarter_ttft_s,
            "last_quarter_ttft_s": self.last_quarter_ttft_s,
        }


def queue_growth(
    arrivals_s: Sequence[float] | np.ndarray,
    ttfts_s: Sequence[float] | np.ndarray,
    *,
    min_requests: int = MIN_REQUESTS,
) -> QueueGrowth | None:
    """:class:`QueueGrowth` when TTFT rises with arrival time, else ``None`` (stable or too few)."""
    if len(arrivals_s) != len(ttfts_s):
        raise ValueError("arrivals_s and ttfts_s must have one entry per request")
    n = len(arrivals_s)
    if n < max(min_requests, 4):
        return None
    order = np.argsort(np.asarray(arrivals_s, dtype=float), kind="stable")
    t = np.asarray(arrivals_s, dtype=float)[order]
    y = np.asarray(ttfts_s, dtype=float)[order]
    span = float(t[-1] - t[0])
    if span <= 0:
        return None
    slope = float(np.polyfit(t - t[0], y, 1)[0])
    q = n // 4
    first = float(np.median(y[:q]))
    last = float(np.median(y[-q:]))
    if slope <= MIN_SLOPE or last <= MIN_RATIO * first:
        return None
    offered = (n - 1) / span
    return QueueGrowth(
        num_requests=n,
        ttft_growth_s_per_s=slope,
        offered_per_s=offered,
        served_per_s=offered / (1.0 + slope),
        first_quarter_ttft_s=first,
        last_quarter_ttft_s=last,
    )


def queue_growth_spilled(
    rows: SpilledColumns, *, min_requests: int = MIN_REQUESTS
) -> QueueGrowth | None:
    """:func:`queue_growth` of (arrival, TTFT) rows kept in a :class:`SpilledColumns`.

    The same answer bit for bit. Rows still all in memory go to :func:`queue_growth`. Past the
    buffer, the quarters' medians come first (exact order statistics over the file, ties in
    arrival broken by the order appended, as the stable sort does): a run whose last quarter's
    median is not above ``MIN_RATIO`` times the first's is stable whatever the slope, without
    holding the rows. Only a run that may be growing reads its rows back to fit the slope with
    numpy as before (16 bytes a request, at the end, only then).
    """
    if not rows.spilled:
        block = rows.in_memory()
        return queue_growth(block[:, 0], block[:, 1], min_requests=min_requests)
    n = len(rows)
    if n < max(min_requests, 4):
        return None
    lo = min(float(c[:, 0].min()) for c in rows.chunks() if c.size)
    hi = max(float(c[:, 0].max()) for c in rows.chunks() if c.size)
    if hi - lo <= 0:
        return None
    q = n // 4
    first = median_of(_by_arrival_rank(rows, 0, q), q)
    last = median_of(_by_arrival_rank(rows, n - q, n), q)
    if last <= MIN_RATIO * first:
        return None
    block = rows.read_all()
    return queue_growth(block[:, 0], block[:, 1], min_requests=min_requests)


def _by_arrival_rank(rows: SpilledColumns, start: int, stop: int) -> Chunks:
    """TTFTs of the rows whose rank by (arrival, order appended) is in ``[start, stop)``."""
    arrivals = rows.column(0)
    lo, hi = (select(arrivals, sorted({start, stop - 1}))[r] for r in (start, stop - 1))
    below_lo = sum(int(np.count_nonzero(c < lo)) for c in arrivals())
    below_hi = sum(int(np.count_nonzero(c < hi)) for c in arrivals())
    # of the rows tied at lo, skip the first ones (ranks below start); at hi keep the first ones
    skip_lo = start - below_lo
    keep_hi = stop - below_hi

    def chunks() -> Iterator[np.ndarray]:
        seen_lo = seen_hi = 0
        for block in rows.chunks():
            t = block[:, 0]
            keep = (t > lo) & (t < hi)
            at_lo = np.flatnonzero(t == lo)
            at_hi = np.flatnonzero(t == hi) if hi != lo else at_lo
            if hi == lo:
                # one tie run holds the whole range: its ranks skip_lo .. keep_hi - 1
                pos = np.arange(seen_lo, seen_lo + at_lo.size)
                keep[at_lo[(pos >= skip_lo) & (pos < keep_hi)]] = True
            else:
                keep[at_lo[np.arange(seen_lo, seen_lo + at_lo.size) >= skip_lo]] = True
                keep[at_hi[np.arange(seen_hi, seen_hi + at_hi.size) < keep_hi]] = True
            seen_lo += at_lo.size
            seen_hi += at_hi.size
            yield block[keep, 1]

    return chunks
