"""What a simulation returns: per-request results, samples, hit rates, a summary.

Every figure is *simulated*; the summary names the step-time model. Hit rates carry explicit
denominators: requests (share of requests with any cached prompt token), tokens (cached prompt
tokens / prompt tokens looked up) and blocks (cached full blocks / full prompt blocks looked up).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvbudget.records.request import RequestRecord, derive_latencies
from kvbudget.sim.engine import EngineStats
from kvbudget.sim.replica import KVSample
from kvbudget.sim.request import SimRequest


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One simulated request."""

    request_id: str
    replica: str
    arrival_s: float
    first_scheduled_s: float | None
    first_token_s: float | None
    finish_s: float | None
    prompt_tokens: int
    output_tokens: int
    cached_tokens_by_tier: dict[str, int]
    preemptions: int
    status: str
    #: "length" when finished; why not, otherwise ("horizon: waiting", "rejected: ...")
    reason: str
    tenant: str = "default"
    session_id: str | None = None
    cell_id: str | None = None

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def cached_tokens(self) -> int:
        return sum(self.cached_tokens_by_tier.values())

    @classmethod
    def from_sim(cls, req: SimRequest, replica: str, reason: str | None = None) -> RequestResult:
        spec = req.spec
        return cls(
            request_id=spec.request_id,
            replica=replica,
            arrival_s=spec.arrival_s,
            first_scheduled_s=req.first_scheduled_s,
            first_token_s=req.first_token_s,
            finish_s=req.finish_s,
            prompt_tokens=spec.num_prompt_tokens,
            output_tokens=req.num_output_tokens,
            cached_tokens_by_tier=dict(req.cached_tokens_by_tier),
            preemptions=req.num_preemptions,
            status=(
                "finished"
                if req.status == "finished"
                else "cancelled"
                if req.finish_reason == "cancelled"
                else "unfinished"
            ),
            reason=reason or (req.finish_reason or req.status),
            tenant=spec.tenant,
            session_id=spec.session_id,
            cell_id=spec.cell_id,
        )

    def to_record(self) -> RequestRecord:
        ttft, tpot, e2e = derive_latencies(
            sent_s=self.arrival_s,
            first_token_s=self.first_token_s,
            done_s=self.finish_s,
            output_tokens=self.output_tokens,
        )
        ok = self.finished
        cancelled = self.status == "cancelled"
        return RequestRecord(
            request_id=self.request_id,
            source="simulated",
            status="ok" if ok else "cancelled" if cancelled else "error",
            error_kind=None if ok else "cancelled" if cancelled else "other",
            error_excerpt=None if ok or cancelled else self.reason,
            finish_reason=self.reason if ok else None,
            cell_id=self.cell_id,
            tenant=self.tenant,
            replica=self.replica,
            session_id=self.session_id,
            scheduled_s=self.arrival_s,
            sent_s=self.arrival_s,
            first_token_s=self.first_token_s,
            done_s=self.finish_s,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            cached_tokens_by_tier=dict(self.cached_tokens_by_tier),
            token_count_source="simulated",
            preemptions=self.preemptions,
            queue_s=(
                self.first_scheduled_s - self.arrival_s
                if self.first_scheduled_s is not None
                else None
            ),
            ttft_s=ttft,
            tpot_s=tpot,
            e2e_s=e2e,
        )


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

    def records(self) -> list[RequestRecord]:
        """One ``RequestRecord`` (source ``simulated``) per request."""
        return [r.to_record() for r in self.requests]

    def hit_rates(self) -> dict[str, dict[str, float | int]]:
        """Prefix-cache hit rates with their numerators and denominators."""
        done = [r for r in self.requests if r.first_scheduled_s is not None]
        n_hit_req = sum(1 for r in done if r.cached_tokens > 0)
        q_tokens = sum(s.prefix_cache_queries_tokens for s in self.replica_stats.values())
        h_tokens = sum(s.prefix_cache_hits_tokens for s in self.replica_stats.values())
        q_blocks = sum(s.prefix_cache_queries_blocks for s in self.replica_stats.values())
        h_blocks = sum(s.prefix_cache_hits_blocks for s in self.replica_stats.values())

        def rate(num: int, den: int) -> dict[str, float | int]:
            return {"hits": num, "queries": den, "rate": num / den if den else 0.0}

        return {
            "requests": rate(n_hit_req, len(done)),
            "tokens": rate(h_tokens, q_tokens),
            "blocks": rate(h_blocks, q_blocks),
        }

    def unfinished_reasons(self) -> dict[str, int]:
        """Why requests did not finish: reason -> count."""
        out: dict[str, int] = {}
        for r in self.requests:
            if r.status == "unfinished":
                out[r.reason] = out.get(r.reason, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def summary(self) -> dict[str, Any]:
        """The ``--json`` summary (all figures simulated with ``timing_model``)."""
        done = [r for r in self.requests if r.finished]
        ttft = np.array([r.first_token_s - r.arrival_s for r in done if r.first_token_s])
        tpot = np.array(
            [
                (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
                for r in done
                if r.finish_s is not None and r.first_token_s is not None and r.output_tokens > 1
            ]
        )

        def pct(values: np.ndarray, q: float) -> float | None:
            return float(np.percentile(values, q)) if values.size else None

        hits = self.hit_rates()
        out_tokens = sum(r.output_tokens for r in done)
        return {
            "figures": "simulated",
            "timing_model": self.timing_model,
            "router": self.router,
            "requests_total": len(self.requests),
            "requests_completed": len(done),
            "requests_cancelled": sum(1 for r in self.requests if r.status == "cancelled"),
            "requests_unfinished": sum(
                1 for r in self.requests if r.status not in ("finished", "cancelled")
            ),
            "ttft_p50_s": pct(ttft, 50),
            "ttft_p99_s": pct(ttft, 99),
            "tpot_p50_s": pct(tpot, 50),
            "tpot_p99_s": pct(tpot, 99),
            "prefix_hit_rate_tokens": hits["tokens"]["rate"],
            "prefix_hit_rate_blocks": hits["blocks"]["rate"],
            "prefix_hit_rate_requests": hits["requests"]["rate"],
            "prefix_cache_hits_tokens": hits["tokens"]["hits"],
            "prefix_cache_queries_tokens": hits["tokens"]["queries"],
            "prefix_hit_rates": hits,
            "num_preemptions": sum(s.num_preemptions for s in self.replica_stats.values()),
            "num_gpu_blocks": sum(self.num_gpu_blocks.values()),
            "num_gpu_blocks_by_replica": dict(self.num_gpu_blocks),
            "output_tokens_per_s": out_tokens / self.simulated_s if self.simulated_s else 0.0,
            "simulated_s": self.simulated_s,
            "wall_s": self.wall_s,
            "num_steps": self.num_steps,
            "kv_usage_peak": max((x.kv_usage for x in self.samples), default=None),
            "kv_usage_mean": (
                sum(x.kv_usage for x in self.samples) / len(self.samples) if self.samples else None
            ),
            "num_samples": len(self.samples),
            "tiers": self.tier_stats,
            "notes": list(self.notes),
            "unfinished_reasons": self.unfinished_reasons(),
            **({"lifecycle": dict(self.lifecycle)} if self.lifecycle else {}),
        }
