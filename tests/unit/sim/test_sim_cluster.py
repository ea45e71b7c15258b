"""Cluster runs: hit rate by hand, determinism, unfinished reasons, scale-out, records."""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.driver import ScaleOut
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming

CFG = ReplicaConfig(
    num_gpu_blocks=512,
    block_size=16,
    max_num_seqs=16,
    max_num_batched_tokens=2048,
    max_model_len=4096,
)


def test_scripted_prefix_workload_hit_rate_by_hand() -> None:
    # 10 requests, one at a time: a 64-token system prompt + 10 own tokens, 4 output tokens.
    # Request 1 finds nothing; each later one finds the 4 full system-prompt blocks
    # (64 tokens); its 5th block (tokens 64..73) is partial and never cached.
    # hit rate (tokens) = 9 * 64 / (10 * 74) = 576 / 740; (blocks) = 36 / (10 * 4) = 0.9;
    # (requests) = 9 / 10.
    system = tuple(range(1, 65))
    reqs = [
        EngineRequest(f"r{i}", (*system, *range(1000 + 10 * i, 1010 + 10 * i)), 4, arrival_s=i)
        for i in range(10)
    ]
    res = simulate(reqs, ClusterSpec([ReplicaSetup(CFG, FixedTiming())]), seed=0)
    rates = res.hit_rates()
    assert rates["tokens"]["hits"] == 576 and rates["tokens"]["queries"] == 740
    assert res.summary()["prefix_hit_rate_tokens"] == pytest.approx(576 / 740)
    assert rates["blocks"]["rate"] == pytest.approx(36 / 40)
    assert rates["requests"]["rate"] == pytest.approx(0.9)


def test_salted_tenants_do_not_share() -> None:
    system = tuple(range(1, 65))
    reqs = [
        EngineRequest(f"r{i}", (*system, 5000 + i), 2, arrival_s=i, cache_salt=f"tenant{i % 2}")
        for i in range(4)
    ]
    res = simulate(reqs, ClusterSpec([ReplicaSetup(CFG, FixedTiming())]), seed=0)
    cached = [r.cached_tokens for r in res.requests]
    assert cached == [0, 0, 64, 64]  # only the same tenant's earlier request helps


def _poisson(n: int, seed: int) -> list[EngineRequest]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.02, size=n))
    return [
        EngineRequest(
            f"r{i}", tuple(rng.integers(0, 100, size=40).tolist()), 8, arrival_s=float(t[i])
        )
        for i in range(n)
    ]


def test_same_seed_same_output_and_different_seed_differs() -> None:
    spec = ClusterSpec([ReplicaSetup(CFG, FixedTiming(per_token_s=1e-4))] * 2, router="cost")
    a = simulate(_poisson(80, 1), spec, seed=3)
    b = simulate(_poisson(80, 1), spec, seed=3)
    assert [r.to_record() for r in a.requests] == [r.to_record() for r in b.requests]
    assert a.summary() | {"wall_s": 0} == b.summary() | {"wall_s": 0}


def test_horizon_reports_unfinished_with_reason() -> None:
    reqs = _poisson(40, 2)
    res = simulate(
        reqs, ClusterSpec([ReplicaSetup(CFG, FixedTiming())], max_simulated_s=0.2), seed=0
    )
    assert len(res.requests) == 40
    unfinished = [r for r in res.requests if not r.finished]
    assert unfinished and all(r.reason.startswith("horizon") for r in unfinished)
    assert any(r.reason == "horizon: not arrived" for r in unfinished)
    recs = res.records()
    assert all(r.source == "simulated" for r in recs)
    assert {r.status for r in recs} == {"ok", "error"}


def test_rejected_request_reported_not_dropped() -> None:
    small = CFG.model_copy(update={"num_gpu_blocks": 4})
    reqs = [EngineRequest("big", tuple(range(200)), 2), EngineRequest("ok", (1, 2, 3), 2)]
    res = simulate(reqs, ClusterSpec([ReplicaSetup(small, FixedTiming())]), seed=0)
    by_id = {r.request_id: r for r in res.requests}
    assert by_id["ok"].finished
    assert by_id["big"].reason.startswith("rejected:") and "KV blocks" in by_id["big"].reason


def test_scale_out_replica_is_cold_until_ready() -> None:
    # 300 output tokens at 10 ms a step: every request stays 3 s, so replica-0 stays loaded
    reqs = [EngineRequest(f"r{i}", (1, 2, 3, i), 300, arrival_s=i * 0.5) for i in range(8)]
    setup = ReplicaSetup(CFG, FixedTiming())
    spec = ClusterSpec([setup], router="least_outstanding", scale_out=[ScaleOut(1.0, setup, 1.2)])
    res = simulate(reqs, spec, seed=0)
    placed = {r.request_id: r.replica for r in res.requests}
    # replica-1 is added at 1.0 s and serves from 2.2 s: r0..r4 (arrivals <= 2.0 s) stay on 0
    assert all(placed[f"r{i}"] == "replica-0" for i in range(5))
    assert "replica-1" in set(placed.values())


def test_samples_and_trace() -> None:
    spec = ClusterSpec([ReplicaSetup(CFG, FixedTiming())], sample_every_s=0.05, trace=True)
    res = simulate(_poisson(20, 4), spec, seed=0)
    assert res.samples and all(0.0 <= s.kv_usage <= 1.0 for s in res.samples)
    assert res.trace_events and res.trace_events[0]["ph"] == "X"
    spans = [e for e in res.trace_events if e.get("cat") == "request"]
    assert sorted(e["ph"] for e in spans if e["id"] == 0) == ["b", "e", "n"]
    assert sum(1 for e in spans if e["ph"] == "b") == 20


def test_client_cancellation_after_n_tokens() -> None:
    reqs = [
        EngineRequest("keep", (1, 2, 3), 10, arrival_s=0.0),
        EngineRequest("cancel", (4, 5, 6), 10, arrival_s=0.0, cancel_after_tokens=3),
    ]
    for fast in (True, False):
        setup = ReplicaSetup(CFG, FixedTiming(step_s=0.01), fast_path=fast)
        res = simulate(reqs, ClusterSpec([setup]), seed=0)
        by_id = {r.request_id: r for r in res.requests}
        assert by_id["keep"].finished and by_id["keep"].output_tokens == 10
        cancelled = by_id["cancel"]
        assert cancelled.status == "cancelled" and cancelled.output_tokens == 3
        # prefill step emits token 1, two decode steps emit tokens 2 and 3: cancelled at 30 ms
        assert cancelled.finish_s == pytest.approx(0.03)
        record = cancelled.to_record()
        assert record.status == "cancelled" and record.error_kind == "cancelled"
        summary = res.summary()
        assert summary["requests_cancelled"] == 1 and summary["requests_unfinished"] == 0
