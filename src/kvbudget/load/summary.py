"""The summary of a load run, computed from its request records (and server samples).

Percentiles are numpy's default (linear interpolation between order statistics). Warm-up
requests are recorded but excluded here. Throughput is :mod:`kvbudget.metrics.throughput`'s:
over the measurement window of each run segment (first send to last completion of the
non-warm-up requests), windows added over segments when a run was resumed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from kvbudget.load.goodput import goodput_summary
from kvbudget.metrics.percentile_set import DEFAULT_METRIC_PERCENTILES, latency_fields
from kvbudget.metrics.throughput import throughput_of_runs
from kvbudget.records import RequestRecord

#: open loop: p99 schedule lag above this many seconds means the client could not keep pace
LAG_WARN_S = 0.010
#: client CPU busy fraction above which the client, not the server, was the bottleneck
CPU_WARN_FRACTION = 0.9


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else None


def _latency(
    metric: str, values: Sequence[float], chosen: Sequence[float]
) -> dict[str, float | None]:
    return latency_fields(
        metric,
        count=len(values),
        total=math.fsum(values),
        percentile=partial(_pct, values),
        chosen=chosen,
    )


def summarize_records(
    records: Sequence[RequestRecord],
    percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
    goodput_slo_ms: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Counts, latency figures and throughput (the ``bench --json`` core fields).

    Latency: mean, median and ``percentiles`` (p50 and p99 always) of TTFT, TPOT, ITL and E2E
    (:mod:`kvbudget.metrics.percentile_set`, vLLM bench serve's set). With ``goodput_slo_ms``
    (``--goodput``): the requests that met every SLO (:mod:`kvbudget.load.goodput`)."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.status == "ok"]
    status = Counter(r.status for r in measured)
    kinds = Counter(r.error_kind for r in measured if r.error_kind is not None)
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpot = [r.tpot_s for r in ok if r.tpot_s is not None and not r.tokens_at_one_instant()]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    itl = [g for r in ok for g in r.itl_s()]
    chunk_itl = [g for r in ok for g in r.chunk_itl_s()]
    lag = [r.schedule_lag_s for r in measured if r.schedule_lag_s is not None]
    segments = sorted({r.run_segment for r in measured})
    tp = throughput_of_runs([r for r in measured if r.run_segment == seg] for seg in segments)
    out_tokens = sum(r.output_tokens for r in ok)
    summary: dict[str, Any] = {
        "requests_total": len(measured),
        "requests_ok": status.get("ok", 0),
        "requests_error": status.get("error", 0),
        "requests_cancelled": status.get("cancelled", 0),
        "requests_warmup": len(records) - len(measured),
        "errors_by_kind": dict(sorted(kinds.items())),
        **_latency("ttft", ttft, percentiles),
        **_latency("tpot", tpot, percentiles),
        #: ok requests whose tokens all reached the client at one instant (no TPOT)
        "tpot_unobserved_requests": sum(1 for r in ok if r.tokens_at_one_instant()),
        **_latency("itl", itl, percentiles),
        "chunk_itl_p99_s": _pct(chunk_itl, 99),
        **_latency("e2e", e2e, percentiles),
        "metric_percentiles": list(percentiles),
        "schedule_lag_p50_s": _pct(lag, 50),
        "schedule_lag_p99_s": _pct(lag, 99),
        "schedule_lag_max_s": max(lag) if lag else None,
        "output_tokens_total": out_tokens,
        "window_s": tp.window_s,
        "output_tokens_per_s": tp.output_tokens_per_s,
        "requests_per_s": tp.requests_per_s,
        "cached_tokens_total": sum(r.cached_tokens or 0 for r in ok),
    }
    summary["token_count_check"] = _token_check(ok)
    if goodput_slo_ms:
        summary.update(goodput_summary(measured, goodput_slo_ms, tp.window_s))
    return summary


def _token_check(ok: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """Server ``usage`` against an independent count (only for checked records)."""
    checked = [r for r in ok if r.prompt_tokens_check is not None]
    if not checked:
        return None
    prompt_diff = [
        (r.prompt_tokens or 0) - (r.prompt_tokens_check or 0)
        for r in checked
        if r.prompt_tokens is not None
    ]
    out_diff = [
        r.output_tokens - r.output_tokens_check
        for r in checked
        if r.output_tokens_check is not None
    ]
    return {
        "requests_checked": len(checked),
        "prompt_mismatches": sum(1 for d in prompt_diff if d != 0),
        "prompt_diff_max_tokens": max((abs(d) for d in prompt_diff), default=0),
        "output_mismatches": sum(1 for d in out_diff if d != 0),
        "output_diff_max_tokens": max((abs(d) for d in out_diff), default=0),
    }


def bottleneck_warnings(
    summary: dict[str, Any], *, open_loop: bool, cpu_busy_fraction: float | None, not_sent: int
) -> list[str]:
    """Warnings that the client, not the server, limited the run."""
    warnings: list[str] = []
    lag = summary.get("schedule_lag_p99_s")
    if open_loop and lag is not None and lag > LAG_WARN_S:
        warnings.append(
            f"open loop fell behind its schedule: p99 send lag {lag * 1e3:.1f} ms > "
            f"{LAG_WARN_S * 1e3:.0f} ms; the offered rate was not delivered (raise --workers "
            "or --max-inflight, or lower --rate)"
        )
    if cpu_busy_fraction is not None and cpu_busy_fraction > CPU_WARN_FRACTION:
        warnings.append(
            f"client CPU was {cpu_busy_fraction:.0%} busy: the client may be the bottleneck "
            "(add --workers)"
        )
    unobserved = summary.get("tpot_unobserved_requests") or 0
    if unobserved:
        warnings.append(
            f"{unobserved} request(s) delivered every token to the client at one instant: their "
            "TPOT is not observable and is left out (the client was not scheduled while the "
            "server streamed; add --workers, or run the client where the engine does not "
            "starve it of CPU)"
        )
    if not_sent:
        warnings.append(
            f"{not_sent} offered request(s) were never sent before the send window closed "
            "(client or max_inflight limit)"
        )
    return warnings
