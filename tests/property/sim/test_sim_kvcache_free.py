"""Freeing several groups' blocks in one pool call leaves the pool as one call per group does.

``KVCacheManager`` frees a request's block tables, and the blocks a sliding window leaves
behind, over all groups at once where that is the same as ``pool.free`` per group in group order
(vLLM frees group by group). The reference here is the per-group loop on a second pool with the
same history: hashed blocks (tail of the free queue), unhashed ones (head, last freed first),
shared blocks (reference count above 1) and mixtures are drawn.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.sim.blockpool import BlockPool
from kvbudget.sim.config import KVGroupConfig, ReplicaConfig
from kvbudget.sim.kvcache import KVCacheManager


def _pool(num_blocks: int, taken: list[int], hashed: list[bool], shared: list[bool]) -> BlockPool:
    pool = BlockPool(num_blocks)
    ids = pool.allocate(len(taken))
    for i, block_id in enumerate(ids):
        if hashed[i]:
            pool.cache_block(block_id, ("h", i % 5))  # some keys repeat: duplicates
        if shared[i]:
            pool.touch([block_id])  # a second holder: freeing only drops a reference
    return pool


@settings(max_examples=200, deadline=None)
@given(
    groups=st.lists(st.integers(0, 4), min_size=1, max_size=6),  # blocks freed per group
    hashed=st.lists(st.booleans(), min_size=24, max_size=24),
    shared=st.lists(st.booleans(), min_size=24, max_size=24),
    pre_freed=st.integers(0, 3),  # blocks freed before, so the queue has both ends in use
)
def test_one_call_over_groups_equals_one_call_per_group(
    groups: list[int], hashed: list[bool], shared: list[bool], pre_freed: int
) -> None:
    taken = list(range(sum(groups) + pre_freed))
    num_blocks = 32
    pools = [_pool(num_blocks, taken, hashed, shared) for _ in range(2)]
    ids = [b for b in range(1, num_blocks) if pools[0].ref_cnt[b]]
    assert ids == [b for b in range(1, num_blocks) if pools[1].ref_cnt[b]]
    for pool in pools:
        pool.free(reversed(ids[:pre_freed]))
    releases: list[list[int]] = []
    at = pre_freed
    for n in groups:
        releases.append(ids[at : at + n][::-1])
        at += n
    cfg = ReplicaConfig(
        num_gpu_blocks=num_blocks,
        kv_groups=(KVGroupConfig(),) * len(groups),
        enable_prefix_caching=True,
    )
    for r in releases:
        pools[0].free(r)
    KVCacheManager(cfg, pools[1])._free_groups(releases)
    for pool in pools:
        pool.check_invariants()
    assert pools[1].free_block_ids() == pools[0].free_block_ids()
    assert pools[1].ref_cnt == pools[0].ref_cnt
    # what is allocated next (and evicted) is the same too
    n = pools[0].num_free_blocks
    assert pools[1].allocate(n) == pools[0].allocate(n)
    assert pools[1].num_evictions == pools[0].num_evictions
