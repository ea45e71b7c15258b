"""The latency figures ``sim --json`` and ``bench --json`` report: vLLM bench serve's set.

For each of TTFT, TPOT, ITL and E2E: the mean, the median and the percentiles chosen with
``--metric-percentiles`` (vLLM bench serve's flag and format: comma-separated numbers, e.g.
``"50,90,95,99"``), as ``<metric>_mean_s``, ``<metric>_median_s`` and ``<metric>_p<q>_s``
(``ttft_p95_s``, ``itl_p99.9_s``), in seconds. p50 and p99 are always included (the summary
lines and older readers use them).

vLLM bench serve's own default is ``"99"`` (``vllm/benchmarks/serve.py`` of vLLM 0.32.0,
``--metric-percentiles``, ``default="99"``, lines 1811-1818); it always prints the mean and the
median beside them. kvbudget's default is ``50,90,95,99``: the median, p90, p95 and p99 that
SLOs are written against (a p95 SLO needs p95).

Percentiles are numpy's default (linear interpolation); means are the exact mean of the
values (``math.fsum`` / count), as vLLM's ``np.mean`` up to rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from kvbudget.errors import ConfigError

#: kvbudget's default ``--metric-percentiles`` (vLLM bench serve's is "99")
DEFAULT_METRIC_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
#: the latency metrics every summary reports (vLLM bench serve's ttft, tpot, itl, e2el)
LATENCY_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2e")
#: always reported, whatever was chosen
_ALWAYS = (50.0, 99.0)


def parse_metric_percentiles(text: str, *, flag: str = "--metric-percentiles") -> tuple[float, ...]:
    """``"50,90,95,99"`` -> ``(50.0, 90.0, 95.0, 99.0)``; a bad entry is a one-line error."""
    out: list[float] = []
    for part in str(text).split(","):
        item = part.strip()
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not 0 < value < 100:
            raise ConfigError(
                f"{flag} {text!r}: {item!r} is not a percentile between 0 and 100 (exclusive); "
                'give comma-separated numbers, e.g. "50,90,95,99"',
                field=flag.removeprefix("--").replace("-", "_"),
            )
        out.append(value)
    return tuple(sorted(set(out)))


def percentile_name(q: float) -> str:
    """``95.0 -> "p95"``, ``99.9 -> "p99.9"``."""
    return f"p{q:g}"


def reported_percentiles(chosen: Sequence[float]) -> tuple[float, ...]:
    """The chosen percentiles with p50 and p99 added, in order."""
    return tuple(sorted({*chosen, *_ALWAYS}))


def latency_fields(
    metric: str,
    *,
    count: int,
    total: float,
    percentile: Callable[[float], float | None],
    chosen: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
) -> dict[str, float | None]:
    """``<metric>_mean_s``, ``<metric>_median_s`` and ``<metric>_p<q>_s`` of one metric.

    ``total`` is the exact sum of the ``count`` values; ``percentile(q)`` gives numpy's
    ``percentile`` of them (``None`` when there are none).
    """
    # each percentile once (the median is p50, which is always reported)
    values = {q: percentile(q) if count else None for q in reported_percentiles(chosen)}
    out: dict[str, float | None] = {
        f"{metric}_mean_s": total / count if count else None,
        f"{metric}_median_s": values[50.0],
    }
    for q, value in values.items():
        out[f"{metric}_{percentile_name(q)}_s"] = value
    return out
