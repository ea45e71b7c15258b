"""Hypothesis: the fast path and ``EngineCore`` stay in the same pool state after every step.

Stronger than comparing final per-request results: two replicas (lazy-decode fast path and
explicit stepping) get the same arrivals at the same times and are compared after each step on
the step duration, the free queue in order (so eviction order), the eviction count, the
prefix-cache counters and the finished requests with their reasons. Shared prefixes, client
cancellations (``cancel_after_tokens``) that coincide with completions, cache salts and small
pools (preemptions, evictions) are all drawn.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.fastpath import fast_path_ok
from kvbudget.sim.replica import Replica, ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming


def _state(replica: Replica) -> tuple[object, ...]:
    core = replica.core
    st_ = core.stats()
    done = sorted(
        (r.spec.request_id, r.finish_reason or "", r.num_output_tokens, r.finish_s)
        for r in replica.finished()
    )
    return (
        core.pool.free_block_ids(),
        core.pool.num_evictions,
        st_.prefix_cache_queries_tokens,
        st_.prefix_cache_hits_tokens,
        st_.num_preemptions,
        done,
    )


@settings(max_examples=60, deadline=None)
@given(
    reqs=st.lists(
        st.tuples(
            st.integers(0, 2),  # shared prefix id
            st.integers(1, 20),  # own prompt tokens
            st.integers(1, 12),  # output tokens
            st.integers(0, 3),  # arrival step
            st.one_of(st.none(), st.integers(1, 6)),  # client cancellation
            st.booleans(),  # cache salt
        ),
        min_size=1,
        max_size=16,
    ),
    num_blocks=st.integers(12, 40),  # for block_size 4; scaled to the same tokens
    block_size=st.sampled_from([1, 2, 4]),
    caching=st.booleans(),
)
def test_fast_path_in_lockstep_with_engine(
    reqs: list[tuple[int, int, int, int, int | None, bool]],
    num_blocks: int,
    block_size: int,
    caching: bool,
) -> None:
    cfg = ReplicaConfig(
        num_gpu_blocks=num_blocks * 4 // block_size,  # every request fits (<= 40 tokens)
        block_size=block_size,
        max_num_seqs=4,
        max_num_batched_tokens=24,
        max_model_len=256,
        enable_prefix_caching=caching,
    )
    assert fast_path_ok(cfg)
    prefixes = [tuple(range(100 * p, 100 * p + 8)) for p in range(3)]
    work = [
        EngineRequest(
            f"r{i}",
            prefixes[p] + tuple(range(10_000 + 100 * i, 10_000 + 100 * i + own)),
            out,
            cancel_after_tokens=cancel,
            cache_salt="s" if salt else None,
        )
        for i, (p, own, out, _, cancel, salt) in enumerate(reqs)
    ]
    arrive_at_step = [r[3] for r in reqs]
    timing = FixedTiming(step_s=0.01, per_token_s=1e-4)
    fast = Replica("f", ReplicaSetup(cfg, timing), np.random.default_rng(3))
    slow = Replica("s", ReplicaSetup(cfg, timing, fast_path=False), np.random.default_rng(3))
    assert fast.fast is not None and slow.fast is None
    now_s = 0.0
    for step in range(2000):
        for req, at in zip(work, arrive_at_step, strict=True):
            if at == step:
                fast.add(req)
                slow.add(req)
        if not fast.has_work() and step > 3:
            break
        duration_s = fast.step(now_s)
        assert slow.step(now_s) == duration_s
        assert _state(fast) == _state(slow), f"step {step}"
        now_s += duration_s
    assert not fast.has_work() and not slow.has_work()
