"""Hypothesis: the fast path and ``EngineCore`` stay in the same pool state after every step.

Stronger than comparing final per-request results: two replicas (lazy-decode fast path and
explicit stepping) get the same arrivals at the same times and are compared after each step on
the step duration, the free queue in order (so eviction order), the eviction count, the
prefix-cache counters and the finished requests with their reasons. Shared prefixes, client
cancellations (``cancel_after_tokens``) that coincide with completions, cache salts and small
pools (preemptions, evictions) and follow-up turns whose prompts repeat an earlier request's
generated tokens (while it may still be computing them) are all drawn, on KV group layouts from
one full-attention group to Gemma-2 (1 sliding : 1 full) and Gemma-3 (5 sliding : 1 full)
styles, a sliding-only (Mistral-style) model, two windows, and a state (Mamba-style) group, with
windows from 1 token to more than the longest request. With several groups the per-request
block tables (null blocks where the window released a block) and the hash table are compared too.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.sim.config import GroupKind, KVGroupConfig, ReplicaConfig
from kvbudget.sim.fastpath import fast_path_ok
from kvbudget.sim.replica import Replica, ReplicaSetup
from kvbudget.sim.request import EngineRequest, generated_token_id
from kvbudget.sim.timing import FixedTiming

#: KV group layouts: kind per group ("s" sliding with the drawn window, "t" a second window
#: of half of it, "f" full, "m" a state page)
LAYOUTS = ("f", "sf", "sssssf", "s", "stf", "fm")


def _groups(layout: str, window: int) -> tuple[KVGroupConfig, ...]:
    kinds: dict[str, GroupKind] = {"f": "full", "s": "sliding", "t": "sliding", "m": "state"}
    return tuple(
        KVGroupConfig(
            kind=kinds[c],
            sliding_window_tokens={"s": window, "t": max(1, window // 2)}.get(c),
        )
        for c in layout
    )


def _state(replica: Replica) -> tuple[object, ...]:
    core = replica.core
    done = sorted(
        (r.spec.request_id, r.finish_reason or "", r.num_output_tokens, r.finish_s)
        for r in replica.finished()
    )
    if not core.kv.single_full:  # eager hashing: the table and every block table compare
        tables = sorted(
            (rid, r.block_ids, r.num_skipped_blocks, r.num_cached_blocks)
            for rid, r in core.requests.items()
        )
        return (*_pool_state(replica), done, tables, dict(core.pool._cached), core.pool._dups)
    return (*_pool_state(replica), done)


def _pool_state(replica: Replica) -> tuple[object, ...]:
    core = replica.core
    st_ = core.stats()
    return (
        core.pool.free_block_ids(),
        core.pool.num_evictions,
        st_.prefix_cache_queries_tokens,
        st_.prefix_cache_hits_tokens,
        st_.num_preemptions,
    )


@settings(max_examples=60, deadline=None)
@given(
    reqs=st.lists(
        st.tuples(
            st.integers(0, 2),  # shared prefix id
            st.integers(1, 20),  # own prompt tokens (prompts cut at 60)
            st.integers(1, 12),  # output tokens
            st.integers(0, 12),  # arrival step
            st.one_of(st.none(), st.integers(1, 6)),  # client cancellation
            st.booleans(),  # cache salt
            st.one_of(st.none(), st.integers(0, 15)),  # follow-up of an earlier request
            st.integers(0, 12),  # generated tokens of that request the follow-up repeats
        ),
        min_size=1,
        max_size=16,
    ),
    num_blocks=st.integers(20, 50),  # for block_size 4; scaled to the same tokens
    block_size=st.sampled_from([1, 2, 4]),
    caching=st.booleans(),
    layout=st.sampled_from(LAYOUTS),
    window=st.integers(1, 80),  # tokens; prompts are up to 60, requests up to 72
)
def test_fast_path_in_lockstep_with_engine(
    reqs: list[tuple[int, int, int, int, int | None, bool, int | None, int]],
    num_blocks: int,
    block_size: int,
    caching: bool,
    layout: str,
    window: int,
) -> None:
    groups = _groups(layout, window)
    base = ReplicaConfig(
        num_gpu_blocks=2,
        block_size=block_size,
        kv_groups=groups,
        max_num_seqs=4,
        max_num_batched_tokens=24,
        max_model_len=256,
    )
    cfg = base.model_copy(
        update={
            # every request fits (<= 72 tokens); per group as many blocks as one full group
            # would get, so the pool is as tight for a hybrid model as for a dense one
            "num_gpu_blocks": max(
                num_blocks * 4 // block_size * len(groups), base.blocks_for_tokens(72) + 1
            ),
            "enable_prefix_caching": caching,
        }
    )
    assert fast_path_ok(cfg)
    prefixes = [tuple(range(100 * p, 100 * p + 8)) for p in range(3)]
    timing = FixedTiming(step_s=0.01, per_token_s=1e-4)
    fast = Replica("f", ReplicaSetup(cfg, timing), np.random.default_rng(3))
    slow = Replica("s", ReplicaSetup(cfg, timing, fast_path=False), np.random.default_rng(3))
    assert fast.fast is not None and slow.fast is None
    added: dict[int, tuple[tuple[int, ...], int]] = {}  # index -> (prompt, seed)

    def make(i: int) -> EngineRequest:
        p, own, out, _, cancel, salt, parent, num_gen = reqs[i]
        prompt = prefixes[p]
        if parent is not None and parent in added:
            # a follow-up turn: the parent's prompt and some of its generated tokens (which
            # it may still be computing: blocks of generated tokens are cache hits)
            parent_prompt, seed = added[parent]
            prompt = parent_prompt + tuple(
                generated_token_id(seed, j, 32000) for j in range(num_gen)
            )
        prompt = (prompt + tuple(range(10_000 + 100 * i, 10_000 + 100 * i + own)))[:60]
        return EngineRequest(
            f"r{i}", prompt, out, cancel_after_tokens=cancel, cache_salt="s" if salt else None
        )

    now_s = 0.0
    for step in range(2000):
        for i, r in enumerate(reqs):
            if r[3] == step:
                req = make(i)
                a = fast.add(req)
                b = slow.add(req)
                assert a.seed == b.seed
                added[i] = (req.prompt_token_ids, a.seed)
        if not fast.has_work() and step > 12:
            break
        duration_s = fast.step(now_s)
        assert slow.step(now_s) == duration_s
        assert _state(fast) == _state(slow), f"step {step}"
        now_s += duration_s
    assert not fast.has_work() and not slow.has_work()
