"""A finished cluster run and what is read off it: summary inputs, notes, Chrome-trace spans.

:func:`kvbudget.sim.cluster.simulate` and :func:`~kvbudget.sim.cluster.simulate_stream` drive
the replicas and get a :class:`ClusterRun`; a streamed run returns a :class:`StreamedRun` (the
summary without the per-request results). Tier statistics, a calibrated profile's range
warnings and the Chrome trace's spans are built here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvbudget.metrics.percentile_set import DEFAULT_METRIC_PERCENTILES
from kvbudget.sim.driver import DriveOutcome
from kvbudget.sim.lockstep import LockstepGroup
from kvbudget.sim.replica import Replica
from kvbudget.sim.request_result import RequestResult
from kvbudget.sim.results import RunStats, summarize
from kvbudget.sim.router import Router
from kvbudget.sim.tiers import TierStack
from kvbudget.sim.timing import CalibrationProfile


@dataclass(slots=True)
class ClusterRun:
    """A finished cluster run, its requests already handed out."""

    replicas: list[Replica]
    router: Router
    outcome: DriveOutcome
    wall0: float
    max_simulated_s: float | None
    last_finish_s: float = 0.0
    lifecycle: dict[str, Any] = field(default_factory=dict)
    #: the data-parallel lockstep groups the replicas step in (none: each on its own)
    groups: list[LockstepGroup] = field(default_factory=list)

    @property
    def simulated_s(self) -> float:
        horizon = self.max_simulated_s
        if horizon is not None and self.outcome.now_s >= horizon:
            return self.outcome.now_s
        return self.last_finish_s

    @property
    def router_fallbacks(self) -> int:
        return self.router.num_fallbacks + sum(g.router.num_fallbacks for g in self.groups)

    def lockstep_stats(self) -> dict[str, Any]:
        """What the lockstep groups did (empty without groups)."""
        if not self.groups:
            return {}
        return {
            "groups": len(self.groups),
            "engines_per_group": len(self.groups[0].members),
            "sync_interval_steps": self.groups[0].sync_interval,
            "group_steps": sum(g.num_group_steps for g in self.groups),
            "dummy_engine_steps": sum(g.num_dummy_steps for g in self.groups),
        }

    def tier_stats(self) -> dict[str, dict[str, Any]]:
        return {
            rep.name: tier_stack_stats(rep.tier_stack)
            for rep in self.replicas
            if rep.tier_stack is not None
        }

    def notes(self, stats: RunStats) -> list[str]:
        notes: list[str] = []
        for rep in self.replicas:
            cfg = rep.config
            if cfg.enable_prefix_caching and not cfg.prefix_caching_effective:
                notes.append(
                    f"{rep.name}: prefix caching is not modelled for state (mamba / linear "
                    "attention) KV groups; this replica ran without it (hit rate 0)"
                )
            notes.extend(profile_range_notes(rep, stats))
        return notes


class StreamedRun:
    """What :func:`~kvbudget.sim.cluster.simulate_stream` returns: the summary, without the per-request results."""

    def __init__(self, run: ClusterRun, stats: RunStats, router: str) -> None:
        self.stats = stats
        self.replica_stats = {rep.name: rep.core.stats() for rep in run.replicas}
        self.num_gpu_blocks = {rep.name: rep.config.num_gpu_blocks for rep in run.replicas}
        self.timing_model = "+".join(sorted({rep.timing.name for rep in run.replicas}))
        self.simulated_s = run.simulated_s
        self.wall_s = time.perf_counter() - run.wall0
        self.num_steps = sum(rep.core.num_steps for rep in run.replicas)
        self.num_events = run.outcome.num_events
        self.tier_stats = run.tier_stats()
        self.notes = run.notes(stats)
        self.router = router
        self.lifecycle = run.lifecycle
        self.lockstep = run.lockstep_stats()

    def summary(self, percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES) -> dict[str, Any]:
        return summarize(
            self.stats,
            percentiles=percentiles,
            timing_model=self.timing_model,
            router=self.router,
            replica_stats=self.replica_stats,
            num_gpu_blocks=self.num_gpu_blocks,
            simulated_s=self.simulated_s,
            wall_s=self.wall_s,
            num_steps=self.num_steps,
            tier_stats=self.tier_stats,
            notes=self.notes,
            lifecycle=self.lifecycle,
            lockstep=self.lockstep,
        )


def tier_stack_stats(st: TierStack) -> dict[str, Any]:
    return {
        "reloads": st.num_reloads,
        "declined_reloads": st.num_declined_reloads,
        "reload_s_total": st.reload_s_total,
        "incompatible_misses": st.num_incompatible_misses,
        "tiers": {
            t.config.name: {
                "writes_blocks": t.num_writes,
                "reads_blocks": t.num_reads,
                "evictions_blocks": t.num_evictions,
                "resident_blocks": len(t.blocks),
                "bytes_written": t.bytes_written,
                "bytes_read": t.bytes_read,
            }
            for t in st.tiers
        },
        "reuse_histogram": st.reuse_histogram(),
    }


def trace_requests(results: list[RequestResult], pids: dict[str, int]) -> list[dict[str, Any]]:
    """Async Chrome-trace spans per request: arrival -> finish, first token as an instant."""
    events: list[dict[str, Any]] = []
    for i, r in enumerate(results):
        if r.finish_s is None:
            continue
        pid = pids.get(r.replica, 0)
        common = {"cat": "request", "id": i, "pid": pid, "tid": 1, "name": r.request_id}
        events.append(
            {
                **common,
                "ph": "b",
                "ts": r.arrival_s * 1e6,
                "args": {"prompt_tokens": r.prompt_tokens, "cached": r.cached_tokens},
            }
        )
        if r.first_token_s is not None:
            events.append(
                {**common, "ph": "n", "ts": r.first_token_s * 1e6, "args": {"event": "first token"}}
            )
        events.append({**common, "ph": "e", "ts": r.finish_s * 1e6})
    return events


def trace_step(rep: Replica, index: int, now: float, duration: float) -> dict[str, Any]:
    """One Chrome-trace complete event ("X") for a step (microseconds)."""
    st = rep.core.stats()
    return {
        "name": "step",
        "ph": "X",
        "pid": index,
        "tid": 0,
        "ts": now * 1e6,
        "dur": duration * 1e6,
        "args": {"kv_usage": round(st.kv_usage, 4), "waiting": st.num_waiting},
    }


def profile_range_notes(rep: Replica, stats: RunStats) -> list[str]:
    """A calibrated profile used outside the ranges it was measured on says so."""
    profile = getattr(rep.timing, "profile", None)
    if not isinstance(profile, CalibrationProfile) or not profile.valid_ranges:
        return []
    seen = stats.max_tokens.get(rep.name)
    if seen is None:
        return []
    observed = {
        "prompt_tokens": float(seen[0]),
        "context_tokens": float(seen[1]),
        "batch_size": float(stats.max_running.get(rep.name, 1)),
    }
    return [f"{rep.name}: {w}" for w in profile.range_warnings(observed)]
