"""Golden scenario: block ids and eviction order worked out by hand from the documented rules.

Pool of 8 blocks (0 = null), block_size 4, prefix caching on, one output token per request (so a
request is prefilled, finishes and frees its blocks in one step). Rules (reference §5.2): free
queue starts in id order; allocation pops the head and lazily evicts a cached hash; a finished
request frees its blocks tail first; a hit takes cached blocks out of the free queue first.

A: prompt 1..8   -> blocks [1, 2]; freed [2, 1]          queue 3 4 5 6 7 2 1
B: 1..8 + 9..12  -> hits 1, 2 (8 tokens), new block 3     queue 4 5 6 7 3 2 1
C: 20 new tokens -> 4 5 6 7 3 (3 loses B's third hash)    queue 2 1 3 7 6 5 4
D: same as B     -> hits 1, 2; 9..12 no longer cached; new block = head after the touch = 3
                    (evicts C's last hash)                 queue 7 6 5 4 3 2 1
E: same as A     -> 2 full cached blocks, but at least one prompt token is recomputed, so the hit
                    is floor((8 - 1) / 4) * 4 = 4 tokens (block 1); new block: head = 7
"""

from __future__ import annotations

import numpy as np

from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming

A = tuple(range(1, 9))
B = (*A, 9, 10, 11, 12)
C = tuple(range(100, 120))


def _engine() -> EngineCore:
    cfg = ReplicaConfig(
        num_gpu_blocks=8, block_size=4, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64
    )
    return EngineCore(cfg, FixedTiming(), np.random.default_rng(0))


def _run_one(core: EngineCore, rid: str, prompt: tuple[int, ...]) -> list[int]:
    req = core.add_request(EngineRequest(rid, prompt, 1))
    out = core.scheduler.schedule(0.0)
    (scheduled,) = out.scheduled
    assert scheduled[0] is req
    table = list(req.block_ids[0])
    # apply the step by hand through the public path: re-queue nothing, finish the request
    core.scheduler.running.remove(req)
    req.num_computed_tokens += scheduled[1]
    core.kv.free(req)
    core.requests.pop(rid)
    return table


def test_block_ids_and_eviction_order() -> None:
    core = _engine()
    pool = core.pool
    assert _run_one(core, "A", A) == [1, 2]
    assert pool.free_block_ids() == [3, 4, 5, 6, 7, 2, 1]
    assert _run_one(core, "B", B) == [1, 2, 3]
    assert pool.free_block_ids() == [4, 5, 6, 7, 3, 2, 1]
    assert _run_one(core, "C", C) == [4, 5, 6, 7, 3]
    assert pool.free_block_ids() == [2, 1, 3, 7, 6, 5, 4]
    assert pool.num_evictions == 1
    assert _run_one(core, "D", B) == [1, 2, 3]
    assert pool.free_block_ids() == [7, 6, 5, 4, 3, 2, 1]
    assert pool.num_evictions == 2
    assert _run_one(core, "E", A) == [1, 7]
    assert pool.free_block_ids() == [6, 5, 4, 3, 2, 7, 1]
    st = core.stats()
    assert st.prefix_cache_queries_tokens == 8 + 12 + 20 + 12 + 8
    assert st.prefix_cache_hits_tokens == 0 + 8 + 0 + 8 + 4


def test_same_scenario_through_step() -> None:
    """The engine's own ``step`` reproduces it (one request per step)."""
    core = _engine()
    cached = []
    for rid, prompt in (("A", A), ("B", B), ("C", C), ("D", B), ("E", A)):
        core.add_request(EngineRequest(rid, prompt, 1))
        result = core.step(0.0)
        (token,) = result.outputs
        assert token.finished
        cached.append(token.num_cached_tokens)
    assert cached == [0, 8, 0, 8, 4]
    # E: touch 1 (queue 7 6 5 4 3 2), pop 7, free [7, 1] -> 6 5 4 3 2 7 1
    assert core.pool.free_block_ids() == [6, 5, 4, 3, 2, 7, 1]
    # evictions: B's third hash (by C), C's fifth (by D), C's fourth on block 7 (by E)
    assert core.pool.num_evictions == 3
