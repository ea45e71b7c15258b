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
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from kvbudget import __version__
from kvbudget.errors import KvbudgetError
from kvbudget.sweep.grid import PERCENTILES, SweepPoint

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


def _simulate(scenario_data: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """The simulator's summary (with ``queue`` for an open loop, as ``kvbudget sim`` adds it)
    and per-request results for one scenario."""
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
    result = simulate(requests, cluster, seed=scenario.seed)
    summary = result.summary()
    asynchronous = scenario_async_scheduling(scenario)
    summary["async_scheduling_enabled"] = asynchronous.enabled
    summary["async_scheduling_reason"] = asynchronous.reason
    if concurrency is None:  # open loop: did the queue keep growing? (kvbudget sim's check)
        growth = queue_growth_spilled(result.run_stats().first_token_rows)
        summary["queue"] = {"stable": growth is None} | ({} if growth is None else growth.to_dict())
    return summary, list(result.requests)


def warm_worker() -> int:
    """Import the simulator in a Ray worker before any point is sent (the worker's pid).

    Ray starts its worker processes lazily; without this, the first point on every worker also
    pays the simulator's imports, which is a fixed cost per worker, not per point.
    """
    import kvbudget.sim.cluster
    import kvbudget.sim.scenario  # noqa: F401

    return os.getpid()


def _percentiles(values: list[float], prefix: str) -> dict[str, float | None]:
    arr = np.asarray(values, dtype=float)
    return {
        f"{prefix}_{p}_s": (float(np.percentile(arr, float(p[1:]))) if arr.size else None)
        for p in PERCENTILES
    }


def run_point(point: SweepPoint) -> dict[str, Any]:
    """One result row (JSON-ready) for ``point``."""
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
        summary, requests = _simulate(point.scenario)
    except KvbudgetError as exc:
        row.update(status="not-run", reason=exc.one_line(), timing_model=None)
        row["wall_s"] = time.perf_counter() - wall0
        row["cpu_s"] = time.process_time() - cpu0
        return row
    done = [r for r in requests if r.finished and r.first_token_s is not None]
    ttft = [r.first_token_s - r.arrival_s for r in done]
    tpot = [
        (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
        for r in done
        if r.finish_s is not None and r.output_tokens > 1
    ]
    row["status"] = "simulated"
    reasons = summary.get("unfinished_reasons") or {}
    row["reason"] = next(iter(reasons), None)
    row.update({k: summary.get(k) for k in _SUMMARY_FIELDS})
    queue = summary.get("queue")
    row["stable"] = None if queue is None else queue["stable"]
    row["queue_ttft_growth_s_per_s"] = (queue or {}).get("ttft_growth_s_per_s")
    row.update(_percentiles(ttft, "ttft"))
    row.update(_percentiles(tpot, "tpot"))
    row["wall_s"] = time.perf_counter() - wall0
    row["cpu_s"] = time.process_time() - cpu0
    return row
