"""A streamed run (``simulate_stream``) is the same simulation as a collected one (``simulate``).

The oracle is the collected run on the same workload and seed: every request's result (by id)
and the whole summary except the wall time must match; the streamed run hands each result out
once and keeps none.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvbudget.sim.cluster import ClusterSpec, simulate, simulate_stream
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.replica import KVSample, ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.request_result import RequestResult
from kvbudget.sim.timing import FixedTiming


def _work(n: int, seed: int) -> list[EngineRequest]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.02, size=n))
    prefix = tuple(range(40))
    return [
        EngineRequest(
            f"r{i}",
            prefix + tuple(rng.integers(0, 999, size=int(rng.integers(1, 80))).tolist()),
            int(rng.integers(1, 30)),
            arrival_s=float(arrivals[i]),
            cancel_after_tokens=3 if i % 5 == 0 else None,
        )
        for i in range(n)
    ]


def _spec(**kw: Any) -> ClusterSpec:
    cfg = ReplicaConfig(num_gpu_blocks=60, block_size=4, max_num_seqs=8, max_num_batched_tokens=64)
    setup = ReplicaSetup(cfg, FixedTiming(step_s=0.01, per_token_s=1e-4))
    return ClusterSpec([setup, setup], router="cost", sample_every_s=0.1, **kw)


def _same(kw: dict[str, Any]) -> None:
    work = _work(300, 3)
    collected = simulate(work, _spec(**kw), seed=4)
    out: list[RequestResult] = []
    samples: list[KVSample] = []
    streamed = simulate_stream(
        iter(work), _spec(**kw), seed=4, on_result=out.append, on_sample=samples.append
    )
    assert sorted(out, key=lambda r: r.request_id) == sorted(
        collected.requests, key=lambda r: r.request_id
    )
    assert len(samples) == len(collected.samples)
    a, b = collected.summary(), streamed.summary()
    a.pop("wall_s")
    b.pop("wall_s")
    assert a == b


def test_streamed_open_loop_matches_the_collected_run() -> None:
    _same({})


def test_streamed_run_with_a_horizon_matches() -> None:
    _same({"max_simulated_s": 2.0})


def test_streamed_closed_loop_matches() -> None:
    _same({"concurrency": 6})
