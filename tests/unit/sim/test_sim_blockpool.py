"""Block pool rules from the reference (engines-kv-accounting.md §2.2, §5.2)."""

from __future__ import annotations

import pytest

from kvbudget.errors import SimulationError
from kvbudget.sim.blockpool import NULL_BLOCK_ID, BlockPool


def test_null_block_taken_at_start_and_queue_in_id_order() -> None:
    pool = BlockPool(6)
    assert pool.free_block_ids() == [1, 2, 3, 4, 5]
    assert pool.ref_cnt[NULL_BLOCK_ID] == 1
    assert pool.num_free_blocks == 5
    assert pool.usage() == 0.0  # newer vLLM: 1 - free / (num_blocks - 1)


def test_allocate_pops_head_and_free_appends_in_given_order() -> None:
    pool = BlockPool(6)
    assert pool.allocate(3) == [1, 2, 3]
    pool.cache_block(1, "h-1")
    pool.cache_block(2, "h-2")
    pool.free(reversed([1, 2, 3]))  # a request frees tail first
    # vLLM 0.32 BlockPool.free_blocks: the unhashed (partial) block 3 goes to the head, to be
    # reused first; the hashed ones join the tail in the order given
    assert pool.free_block_ids() == [3, 4, 5, 2, 1]
    assert pool.usage() == 0.0


def test_unhashed_blocks_freed_together_keep_their_order_at_the_head() -> None:
    pool = BlockPool(6)
    assert pool.allocate(3) == [1, 2, 3]
    pool.free(reversed([1, 2, 3]))
    assert pool.free_block_ids() == [3, 2, 1, 4, 5]
    assert pool.allocate(2) == [3, 2]


def test_lazy_eviction_and_touch() -> None:
    evicted: list[tuple[int, object]] = []
    pool = BlockPool(4, on_evict=lambda b, k: evicted.append((b, k)))
    a, b = pool.allocate(2)
    pool.cache_block(a, "h-a")
    pool.cache_block(b, "h-b")
    pool.free([b, a])  # queue: 3, b=2, a=1
    assert pool.get_cached_block("h-a") == 1
    pool.touch([1])  # a hit on an unreferenced block takes it out of the free queue
    assert pool.free_block_ids() == [3, 2]
    assert pool.ref_cnt[1] == 1
    got = pool.allocate(2)  # 3 (no hash), then 2 (evicts "h-b" lazily)
    assert got == [3, 2]
    assert evicted == [(2, "h-b")]
    assert pool.get_cached_block("h-b") is None
    assert pool.get_cached_block("h-a") == 1


def test_duplicate_hashes_are_kept_and_survive_one_eviction() -> None:
    pool = BlockPool(5)
    x, y = pool.allocate(2)
    pool.cache_block(x, "same")
    pool.cache_block(y, "same")
    assert pool.num_cached_blocks() == 2
    pool.free([x, y])  # queue: 3, 4, x=1, y=2
    pool.allocate(3)  # 3, 4, then 1: evicts the first holder
    assert pool.get_cached_block("same") == 2


def test_refcounts_never_negative_and_reset_rules() -> None:
    pool = BlockPool(4)
    (blk,) = pool.allocate(1)
    pool.cache_block(blk, "k")
    assert pool.reset_prefix_cache() is False  # a block is in use
    pool.free([blk])
    with pytest.raises(SimulationError):
        pool.free([blk])
    assert pool.reset_prefix_cache() is True
    assert pool.get_cached_block("k") is None
    pool.check_invariants()


def test_cannot_allocate_more_than_free() -> None:
    pool = BlockPool(3)
    with pytest.raises(SimulationError, match="asked for 3 blocks with 2 free"):
        pool.allocate(3)


def test_allocation_after_a_hit_skips_the_touched_block_in_queue_order() -> None:
    """The slice path (no stale entry) and the per-entry path give vLLM's FIFO order."""
    pool = BlockPool(7)
    assert pool.allocate(3) == [1, 2, 3]
    for b in (1, 2, 3):
        pool.cache_block(b, f"h-{b}")
    pool.free(reversed([1, 2, 3]))  # all hashed: the tail gets 3, 2, 1
    assert pool.free_block_ids() == [4, 5, 6, 3, 2, 1]
    # no stale entry yet: the next three come off the head as one slice
    assert pool.allocate(3) == [4, 5, 6]
    pool.check_invariants()
    # a hit on block 2 takes it out of the queue (its entry goes stale) ...
    pool.touch([2])
    assert pool.free_block_ids() == [3, 1]
    # ... so the next allocation walks the entries and skips it; 3 and 1 lose their hashes
    assert pool.allocate(2) == [3, 1]
    assert pool.get_cached_block("h-3") is None
    assert pool.get_cached_block("h-1") is None
    assert pool.get_cached_block("h-2") == 2
    assert pool.num_evictions == 2
    pool.check_invariants()
    # freeing 2 again (still hashed) puts it back at the tail: the only free block
    pool.free([2])
    assert pool.free_block_ids() == [2]
    pool.check_invariants()
