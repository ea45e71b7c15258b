"""What a simulation returns: per-request results, samples, hit rates, a summary.

The per-request row is :class:`~kvbudget.sim.request_result.RequestResult`.

Every figure is *simulated*; the summary names the step-time model. Hit rates carry explicit
denominators: requests (share of requests with any cached prompt token), tokens (cached prompt
tokens / prompt tokens looked up) and blocks (cached full blocks / full prompt blocks looked up).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvbudget.metrics.percentile_set import (
    DEFAULT_METRIC_PERCENTILES,
    LATENCY_METRICS,
    latency_fields,
    reported_percentiles,
)
from kvbudget.metrics.spilled import ExactSum, SpilledColumns
from kvbudget.metrics.spilled import percentiles as spilled_percentiles
from kvbudget.records.request import RequestRecord
from kvbudget.sim.engine import EngineStats
from kvbudget.sim.replica import KVSample
from kvbudget.sim.request_result import RequestResult


@dataclass(slots=True)
class SimResult:
    """Everything one simulation run produced."""

    timing_model: str
    requests: list[RequestResult]
    replica_stats: dict[str, EngineStats]
    samples: list[KVSample] = field(default_factory=list)
    tier_stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    num_gpu_blocks: dict[str, int] = field(default_factory=dict)
    simulated_s: float = 0.0
    wall_s: float = 0.0
    num_steps: int = 0
    num_events: int = 0
    router: str = "round_robin"
    router_fallbacks: int = 0
    trace_events: list[dict[str, Any]] = field(default_factory=list)
    #: caveats that change how to read the figures (e.g. a feature not modelled)
    notes: list[str] = field(default_factory=list)
    #: scale-in / migration / crash costs (kvbudget.sim.lifecycle); empty without such events
    lifecycle: dict[str, Any] = field(default_factory=dict)
    #: data-parallel lockstep groups' steps (kvbudget.sim.lockstep); empty without groups
    lockstep: dict[str, Any] = field(default_factory=dict)

    def records(self) -> list[RequestRecord]:
        """One ``RequestRecord`` (source ``simulated``) per request."""
        return [r.to_record() for r in self.requests]

    def run_stats(self) -> RunStats:
        """The summary's accumulator over this result's requests and samples."""
        stats = RunStats()
        for r in self.requests:
            stats.add(r)
        for x in self.samples:
            stats.add_sample(x)
        return stats

    def hit_rates(self) -> dict[str, dict[str, float | int]]:
        """Prefix-cache hit rates with their numerators and denominators."""
        return hit_rates(self.run_stats(), self.replica_stats)

    def unfinished_reasons(self) -> dict[str, int]:
        """Why requests did not finish: reason -> count."""
        return self.run_stats().unfinished_reasons()

    def summary(self, percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES) -> dict[str, Any]:
        """The ``--json`` summary (all figures simulated with ``timing_model``)."""
        return summarize(
            self.run_stats(),
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


#: token times held before their gaps go to the ITL store (:meth:`RunStats._flush_itl`)
ITL_BATCH_VALUES = 1 << 15


class RunStats:
    """What the summary needs, accumulated one request at a time (streamed runs keep only this).

    Per request it keeps five floats (TTFT, TPOT and E2E for exact percentiles, arrival and TTFT
    for the queue check), and one per output-token gap when the run recorded token times (ITL),
    in :class:`~kvbudget.metrics.spilled.SpilledColumns`: a fixed buffer in memory, the rest in
    an anonymous temporary file; everything else is counts, exact sums and maxima, so memory
    stays flat in the number of requests.
    """

    def __init__(self) -> None:
        #: exact percentiles' values: a fixed buffer, the rest in a temporary file
        self.ttft_s = SpilledColumns()
        self.tpot_s = SpilledColumns()
        self.e2e_s = SpilledColumns()
        #: gaps between consecutive output tokens of finished requests (recorded token times),
        #: read through :attr:`itl_s` (which adds the pending requests' gaps first)
        self._itl_store = SpilledColumns()
        #: token times of finished requests whose gaps are not in the store yet, one request
        #: after another (each request's times packed as native doubles, one ``bytes`` a
        #: request: ``struct.Struct(f"{n}d").pack`` converts them in one C call, where
        #: ``array.extend`` of a tuple converts them one by one through its generic setter and
        #: regrows the array as it goes), how many times they hold, and where each request's
        #: times end in them: the gaps are taken a batch of requests at a time (one numpy
        #: subtraction, the same bits as per request)
        self._itl_times: list[bytes] = []
        self._itl_num_times = 0
        self._itl_ends: list[int] = []
        #: token count -> its packer (``struct.Struct(f"{n}d").pack``), made once a run
        self._itl_packers: dict[int, Callable[..., bytes]] = {}
        #: ITL's exact sum, of each request's last minus first token time (its gaps' sum, for
        #: the mean; the other metrics' sums are their stores' :meth:`SpilledColumns.exact_sum`)
        self.itl_sum = ExactSum()
        #: (arrival, TTFT) of every request with a first token, for the queue-growth check
        self.first_token_rows = SpilledColumns(2)
        self.num_requests = 0
        self.num_completed = 0
        self.num_cancelled = 0
        self.num_scheduled = 0
        self.num_hit_requests = 0
        self.output_tokens_completed = 0
        self.reasons: dict[str, int] = {}
        #: replica -> (max prompt tokens, max context tokens) of its requests
        self.max_tokens: dict[str, tuple[int, int]] = {}
        #: every sampled KV usage, summed exactly as it comes (math.fsum of all of them)
        self.kv_usage_sum = ExactSum()
        self.kv_usage_peak: float | None = None
        #: replica -> largest running batch sampled
        self.max_running: dict[str, int] = {}

    @property
    def itl_s(self) -> SpilledColumns:
        """Gaps between consecutive output tokens of finished requests, in request order."""
        self._flush_itl()
        return self._itl_store

    def _flush_itl(self) -> None:
        """Add the pending requests' gaps to the store, in order: each request's gaps are the
        differences of its consecutive token times (the differences across two requests'
        times are dropped)."""
        ends = self._itl_ends
        if not ends:
            return
        times = np.frombuffer(b"".join(self._itl_times), dtype=np.float64)
        gaps = times[1:] - times[:-1]
        if len(ends) > 1:
            # a request ending at index e: gaps[e - 1] spans it and the next request
            gaps = np.delete(gaps, np.asarray(ends[:-1], dtype=np.intp) - 1)
        self._itl_store.extend_array(gaps)
        self._itl_times = []
        self._itl_num_times = 0
        self._itl_ends = []

    @property
    def num_samples(self) -> int:
        return self.kv_usage_sum.count

    def add(self, r: RequestResult) -> None:
        self.num_requests += 1
        if r.first_token_s is not None:
            self.first_token_rows.append2(r.arrival_s, r.first_token_s - r.arrival_s)
        if r.first_scheduled_s is not None:
            self.num_scheduled += 1
            if r.cached_tokens > 0:
                self.num_hit_requests += 1
        if r.status == "finished":
            self.num_completed += 1
            self.output_tokens_completed += r.output_tokens
            if r.first_token_s:
                self.ttft_s.append(r.first_token_s - r.arrival_s)
            if r.finish_s is not None:
                self.e2e_s.append(r.finish_s - r.arrival_s)
            if r.finish_s is not None and r.first_token_s is not None and r.output_tokens > 1:
                self.tpot_s.append((r.finish_s - r.first_token_s) / (r.output_tokens - 1))
            times = r.token_times_s
            if len(times) > 1:
                # the gaps are taken later, a batch of requests at a time (_flush_itl)
                num_times = len(times)
                pack = self._itl_packers.get(num_times)
                if pack is None:
                    pack = self._itl_packers[num_times] = struct.Struct(f"{num_times}d").pack
                self._itl_times.append(pack(*times))
                num_pending = self._itl_num_times + num_times
                self._itl_num_times = num_pending
                self._itl_ends.append(num_pending)
                if num_pending >= ITL_BATCH_VALUES:
                    self._flush_itl()
                # the gaps' sum, telescoped (one addition a request, not one a token)
                self.itl_sum.add(times[-1] - times[0])
        elif r.status == "cancelled":
            self.num_cancelled += 1
        else:
            self.reasons[r.reason] = self.reasons.get(r.reason, 0) + 1
        prompt, context = self.max_tokens.get(r.replica, (0, 0))
        self.max_tokens[r.replica] = (
            max(prompt, r.prompt_tokens),
            max(context, r.prompt_tokens + max(r.output_tokens - 1, 0)),
        )

    def add_sample(self, x: KVSample) -> None:
        self.kv_usage_sum.add(x.kv_usage)
        if self.kv_usage_peak is None or x.kv_usage > self.kv_usage_peak:
            self.kv_usage_peak = x.kv_usage
        self.max_running[x.replica] = max(self.max_running.get(x.replica, 0), x.num_running)

    def unfinished_reasons(self) -> dict[str, int]:
        return dict(sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0])))


def hit_rates(
    stats: RunStats, replica_stats: dict[str, EngineStats]
) -> dict[str, dict[str, float | int]]:
    """Prefix-cache hit rates (requests, tokens, blocks) with numerators and denominators."""
    q_tokens = sum(s.prefix_cache_queries_tokens for s in replica_stats.values())
    h_tokens = sum(s.prefix_cache_hits_tokens for s in replica_stats.values())
    q_blocks = sum(s.prefix_cache_queries_blocks for s in replica_stats.values())
    h_blocks = sum(s.prefix_cache_hits_blocks for s in replica_stats.values())

    def rate(num: int, den: int) -> dict[str, float | int]:
        return {"hits": num, "queries": den, "rate": num / den if den else 0.0}

    return {
        "requests": rate(stats.num_hit_requests, stats.num_scheduled),
        "tokens": rate(h_tokens, q_tokens),
        "blocks": rate(h_blocks, q_blocks),
    }


def summarize(
    stats: RunStats,
    *,
    timing_model: str,
    router: str,
    replica_stats: dict[str, EngineStats],
    num_gpu_blocks: dict[str, int],
    simulated_s: float,
    wall_s: float,
    num_steps: int,
    tier_stats: dict[str, dict[str, Any]],
    notes: list[str],
    lifecycle: dict[str, Any] | None = None,
    lockstep: dict[str, Any] | None = None,
    percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
) -> dict[str, Any]:
    """The ``--json`` summary of a run (one definition for collected and streamed runs).

    Latency figures: mean, median and ``percentiles`` (p50 and p99 always) of TTFT, TPOT, E2E
    and, when the run recorded token times, ITL (:mod:`kvbudget.metrics.percentile_set`)."""
    hits = hit_rates(stats, replica_stats)
    out_tokens = stats.output_tokens_completed
    stores = {"ttft": stats.ttft_s, "tpot": stats.tpot_s, "itl": stats.itl_s, "e2e": stats.e2e_s}
    latency: dict[str, float | None] = {}
    for metric in LATENCY_METRICS:
        store = stores[metric]
        total = stats.itl_sum.value() if metric == "itl" else store.exact_sum()
        latency.update(
            latency_fields(
                metric,
                count=len(store),
                total=total,
                percentile=spilled_percentiles(
                    store, reported_percentiles(percentiles)
                ).__getitem__,
                chosen=percentiles,
            )
        )
    return {
        "figures": "simulated",
        "timing_model": timing_model,
        "router": router,
        "requests_total": stats.num_requests,
        "requests_completed": stats.num_completed,
        "requests_cancelled": stats.num_cancelled,
        "requests_unfinished": stats.num_requests - stats.num_completed - stats.num_cancelled,
        **latency,
        "metric_percentiles": list(percentiles),
        "prefix_hit_rate_tokens": hits["tokens"]["rate"],
        "prefix_hit_rate_blocks": hits["blocks"]["rate"],
        "prefix_hit_rate_requests": hits["requests"]["rate"],
        "prefix_cache_hits_tokens": hits["tokens"]["hits"],
        "prefix_cache_queries_tokens": hits["tokens"]["queries"],
        "prefix_hit_rates": hits,
        "num_preemptions": sum(s.num_preemptions for s in replica_stats.values()),
        "num_gpu_blocks": sum(num_gpu_blocks.values()),
        "num_gpu_blocks_by_replica": dict(num_gpu_blocks),
        "output_tokens_per_s": out_tokens / simulated_s if simulated_s else 0.0,
        "simulated_s": simulated_s,
        "wall_s": wall_s,
        "num_steps": num_steps,
        "kv_usage_peak": stats.kv_usage_peak,
        "kv_usage_mean": (
            stats.kv_usage_sum.value() / stats.num_samples if stats.num_samples else None
        ),
        "num_samples": stats.num_samples,
        "tiers": tier_stats,
        "notes": list(notes),
        "unfinished_reasons": stats.unfinished_reasons(),
        **({"lifecycle": dict(lifecycle)} if lifecycle else {}),
        **({"lockstep": dict(lockstep)} if lockstep else {}),
    }
