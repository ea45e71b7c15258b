"""Simulate one grid point: the only place ``sweep`` calls the simulator.

It goes through the simulator's public scenario entry points (the same ones ``kvbudget sim``
uses: validate the scenario, build the cluster and the workload, simulate), so a point of a
sweep is exactly ``kvbudget sim --scenario`` of the same scenario. A point that cannot run
(the model does not fit the GPU, a request longer than max_model_len, ...) is a row with
``status: not-run`` and the one-line reason, never a failed sweep.

Every figure in a row is *simulated*; the row names the step-time model. An open-loop point
says whether its queue was stable, as ``kvbudget sim`` does (:func:`kvbudget.metrics.stability.
queue_growth_spilled` on the same rows): ``stable: false`` marks a rate past what the point
serves (near or past saturation), whose percentiles depend on the run's length.

A row's latency figures are the simulator's own summary (``kvbudget sim --json``'s fields,
:mod:`kvbudget.metrics.percentile_set`): for TTFT, TPOT, ITL and E2E the mean, the median and
each of the point's percentiles (``ttft_mean_s``, ``ttft_median_s``, ``ttft_p95_s`` ...), with
``metric_percentiles`` naming them. Token times are recorded (as ``kvbudget sim`` does by
default) so that ITL is there.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from kvbudget import __version__
from kvbudget.errors import KvbudgetError
from kvbudget.metrics.percentile_set import DEFAULT_METRIC_PERCENTILES, LATENCY_METRICS
from kvbudget.sweep.grid import SweepPoint

#: fields of a row copied from the simulator's summary
_SUMMARY_FIELDS = (
    "timing_model",
    "async_scheduling_enabled",
    "async_scheduling_reason",
    "requests_total",
    "requests_completed",
    "requests_cancelled",
    "requests_unfinished",
    "output_tokens_per_s",
    "prefix_hit_rate_tokens",
    "num_preemptions",
    "num_gpu_blocks",
    "kv_usage_peak",
    "simulated_s",
)


def _simulate(
    scenario_data: dict[str, Any], percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES
) -> dict[str, Any]:
    """The simulator's summary (with ``queue`` for an open loop, as ``kvbudget sim`` adds it)
    of one scenario, its latency figures at ``percentiles``."""
    from kvbudget.metrics.stability import queue_growth_spilled
    from kvbudget.sim.cluster import simulate
    from kvbudget.sim.scenario import (
        build_cluster,
        build_workload,
        scenario_async_scheduling,
        scenario_from_dict,
    )

    scenario = scenario_from_dict(dict(scenario_data), origin="the sweep point")
    cluster = build_cluster(scenario)
    requests, concurrency = build_workload(scenario)
    cluster.concurrency = concurrency
    cluster.record_token_times = True  # ITL, as kvbudget sim records it by default
    result = simulate(requests, cluster, seed=scenario.seed)
    summary = result.summary(percentiles)
    asynchronous = scenario_async_scheduling(scenario)
    summary["async_scheduling_enabled"] = asynchronous.enabled
    summary["async_scheduling_reason"] = asynchronous.reason
    if concurrency is None:  # open loop: did the queue keep growing? (kvbudget sim's check)
        growth = queue_growth_spilled(result.run_stats().first_token_rows)
        summary["queue"] = {"stable": growth is None} | ({} if growth is None else growth.to_dict())
    return summary


def warm_worker() -> int:
    """Import the simulator in a Ray worker before any point is sent (the worker's pid).

    Ray starts its worker processes lazily; without this, the first point on every worker also
    pays the simulator's imports, which is a fixed cost per worker, not per point.
    """
    import kvbudget.sim.cluster
    import kvbudget.sim.scenario  # noqa: F401

    return os.getpid()


def latency_keys(percentiles: Sequence[float]) -> list[str]:
    """The row's latency fields at ``percentiles``, in order: per metric the mean, the median
    and each percentile (p50 and p99 always; :func:`kvbudget.metrics.percentile_set.
    latency_fields` names them)."""
    from kvbudget.metrics.percentile_set import latency_fields

    keys: list[str] = []
    for metric in LATENCY_METRICS:
        fields = latency_fields(
            metric, count=0, total=0.0, percentile=lambda _q: None, chosen=percentiles
        )
        keys.extend(fields)
    return keys


def run_point(
    point: SweepPoint, percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES
) -> dict[str, Any]:
    """One result row (JSON-ready) for ``point``, its latency figures at ``percentiles``."""
    wall0 = time.perf_counter()
    cpu0 = time.process_time()
    row: dict[str, Any] = {
        "key": point.key,
        "figures": "simulated",
        **point.axes,
        "num_gpus": int(point.axes["tp"]) * int(point.axes["replicas"]),
        "seed": point.scenario.get("seed", 0),
        "kvbudget_version": __version__,
        "worker_pid": os.getpid(),
    }
    try:
        summary = _simulate(point.scenario, percentiles)
    except KvbudgetError as exc:
        row.update(status="not-run", reason=exc.one_line(), timing_model=None)
        row["wall_s"] = time.perf_counter() - wall0
        row["cpu_s"] = time.process_time() - cpu0
        return row
    row["status"] = "simulated"
    reasons = summary.get("unfinished_reasons") or {}
    row["reason"] = next(iter(reasons), None)
    row.update({k: summary.get(k) for k in _SUMMARY_FIELDS})
    queue = summary.get("queue")
    row["stable"] = None if queue is None else queue["stable"]
    row["queue_ttft_growth_s_per_s"] = (queue or {}).get("ttft_growth_s_per_s")
    row.update({k: summary.get(k) for k in latency_keys(percentiles)})
    row["metric_percentiles"] = list(summary["metric_percentiles"])
    row["wall_s"] = time.perf_counter() - wall0
    row["cpu_s"] = time.process_time() - cpu0
    return row
