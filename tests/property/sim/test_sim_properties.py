"""Hypothesis properties of the engine: pool accounting, ownership, refcounts, outcomes."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.sim.blockpool import NULL_BLOCK_ID
from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.config import KVGroupConfig, ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming

request_st = st.tuples(
    st.integers(0, 3),  # shared prefix id
    st.integers(1, 40),  # own prompt tokens
    st.integers(1, 30),  # output tokens
    st.integers(0, 3),  # priority
)


def _check(core: EngineCore) -> None:
    pool = core.pool
    pool.check_invariants()  # free + referenced == total, refcounts >= 0, queue consistent
    owners: Counter[int] = Counter()
    for req in core.requests.values():
        for table in req.block_ids:
            real = [b for b in table if b != NULL_BLOCK_ID]
            assert len(real) == len(set(real)), "a request holds a block twice"
            owners.update(real)
    free = set(pool.free_block_ids())
    for block_id in range(1, pool.num_blocks):
        assert pool.ref_cnt[block_id] == owners[block_id], f"block {block_id} refcount"
        assert (block_id in free) == (owners[block_id] == 0)
    # the free count against the requests' own block tables (a cached block nobody holds is
    # free, as in vLLM's free queue; the null block is never free)
    assert pool.num_free_blocks == sum(1 for b in range(1, pool.num_blocks) if owners[b] == 0)
    assert NULL_BLOCK_ID not in free


@settings(max_examples=40, deadline=None)
@given(
    reqs=st.lists(request_st, min_size=1, max_size=25),
    num_blocks=st.integers(16, 60),
    block_size=st.sampled_from([1, 2, 4, 16]),
    policy=st.sampled_from(["fcfs", "priority"]),
    sliding=st.booleans(),
    caching=st.booleans(),
)
def test_pool_invariants_hold_after_every_step(
    reqs: list[tuple[int, int, int, int]],
    num_blocks: int,
    block_size: int,
    policy: str,
    sliding: bool,
    caching: bool,
) -> None:
    groups: tuple[KVGroupConfig, ...] = (KVGroupConfig(),)
    if sliding:
        groups = (KVGroupConfig(), KVGroupConfig(kind="sliding", sliding_window_tokens=8))
    cfg = ReplicaConfig.model_validate(
        {
            "num_gpu_blocks": num_blocks,
            "block_size": block_size,
            "kv_groups": groups,
            "max_num_seqs": 6,
            "max_num_batched_tokens": 32,
            "max_model_len": 4096,
            "policy": policy,
            "enable_prefix_caching": caching,
        }
    )
    core = EngineCore(cfg, FixedTiming(), np.random.default_rng(0))
    prefixes = [tuple(range(100 * p, 100 * p + 12)) for p in range(4)]
    added = []
    for i, (p, own, out, prio) in enumerate(reqs):
        prompt = prefixes[p] + tuple(range(10_000 + 100 * i, 10_000 + 100 * i + own))
        if cfg.blocks_for_tokens(len(prompt) + out) > cfg.num_usable_blocks:
            continue
        core.add_request(EngineRequest(f"r{i}", prompt, out, priority=prio))
        added.append(f"r{i}")
    now = 0.0
    for _ in range(3000):
        if not core.has_work():
            break
        now += core.step(now).duration_s
        _check(core)
    assert not core.has_work()
    assert core.num_finished == len(added)


@settings(max_examples=40, deadline=None)
@given(
    reqs=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 20)), min_size=1, max_size=30),
    horizon=st.one_of(st.none(), st.floats(0.0, 0.5)),
    num_blocks=st.integers(4, 40),
)
def test_every_request_finishes_or_has_a_reason(
    reqs: list[tuple[int, int]], horizon: float | None, num_blocks: int
) -> None:
    cfg = ReplicaConfig(
        num_gpu_blocks=num_blocks, block_size=4, max_num_seqs=4, max_num_batched_tokens=64
    )
    work = [
        EngineRequest(f"r{i}", tuple(range(p)), o, arrival_s=0.01 * i)
        for i, (p, o) in enumerate(reqs)
    ]
    res = simulate(
        work, ClusterSpec([ReplicaSetup(cfg, FixedTiming())], max_simulated_s=horizon), seed=0
    )
    assert sorted(r.request_id for r in res.requests) == sorted(r.request_id for r in work)
    for r in res.requests:
        assert r.finished or r.reason.startswith(("horizon", "rejected"))
        if r.finished:
            assert r.output_tokens == work[int(r.request_id[1:])].max_output_tokens


@settings(max_examples=30, deadline=None)
@given(
    reqs=st.lists(
        st.tuples(
            st.integers(0, 2),  # shared prefix id
            st.integers(1, 30),  # own prompt tokens
            st.integers(1, 25),  # output tokens
            st.floats(0.0, 0.05),  # gap to the previous arrival
            st.one_of(st.none(), st.integers(1, 10)),  # client cancellation
        ),
        min_size=1,
        max_size=30,
    ),
    num_blocks=st.integers(12, 50),
    block_size=st.sampled_from([1, 2, 4, 8]),
    caching=st.booleans(),
    with_state=st.booleans(),
)
def test_fast_path_equals_explicit_engine(
    reqs: list[tuple[int, int, int, float, int | None]],
    num_blocks: int,
    block_size: int,
    caching: bool,
    with_state: bool,
) -> None:
    groups = (KVGroupConfig(), KVGroupConfig(kind="state")) if with_state else (KVGroupConfig(),)
    cfg = ReplicaConfig(
        num_gpu_blocks=num_blocks,
        block_size=block_size,
        kv_groups=groups,
        max_num_seqs=5,
        max_num_batched_tokens=24,
        max_model_len=4096,
        enable_prefix_caching=caching,
    )
    prefixes = [tuple(range(100 * p, 100 * p + 10)) for p in range(3)]
    work = []
    t = 0.0
    for i, (p, own, out, gap, cancel) in enumerate(reqs):
        t += gap
        prompt = prefixes[p] + tuple(range(10_000 + 100 * i, 10_000 + 100 * i + own))
        work.append(EngineRequest(f"r{i}", prompt, out, arrival_s=t, cancel_after_tokens=cancel))
    runs = []
    for fast in (True, False):
        res = simulate(
            work, ClusterSpec([ReplicaSetup(cfg, FixedTiming(), fast_path=fast)]), seed=1
        )
        runs.append(
            (
                [
                    (
                        r.request_id,
                        r.status,
                        r.first_token_s,
                        r.finish_s,
                        r.cached_tokens,
                        r.preemptions,
                    )
                    for r in res.requests
                ],
                res.replica_stats,
            )
        )
    assert runs[0] == runs[1]
