"""The deque free queue (lazy removal) behaves as an ordered dict free queue, op by op.

Reference: vLLM's ``FreeKVCacheBlockQueue`` semantics written out with an ``OrderedDict``
(pop from the head, freed blocks with a hash appended at the tail and freed blocks without one
prepended at the head in the order given, as vLLM 0.32 ``BlockPool.free_blocks``; remove a
touched block from anywhere).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from kvbudget.sim.blockpool import BlockPool


class _Reference:
    def __init__(self, num_blocks: int) -> None:
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        self.ref = [0] * num_blocks
        self.ref[0] = 1

    def allocate(self, n: int) -> list[int]:
        out = [self.free.popitem(last=False)[0] for _ in range(n)]
        for b in out:
            self.ref[b] = 1
        return out

    def touch(self, ids: list[int]) -> None:
        for b in ids:
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1

    def release(self, ids: list[int], hashed: set[int]) -> None:
        first: list[int] = []
        for b in ids:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if b in hashed:
                    self.free[b] = None
                else:
                    first.append(b)
        rest = list(self.free)
        self.free = OrderedDict.fromkeys([*first, *rest])


@pytest.mark.parametrize("seed", range(6))
def test_free_queue_matches_ordered_dict_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    num_blocks = 12
    pool, ref = BlockPool(num_blocks), _Reference(num_blocks)
    held: list[int] = []  # one entry per reference held
    hashed: set[int] = set()  # blocks carrying a hash (half of those allocated)
    num_keys = 0
    for _ in range(3000):  # long enough for several compactions (> 2 x num_blocks stale)
        op = rng.integers(0, 3)
        if op == 0 and ref.free:
            n = int(rng.integers(1, len(ref.free) + 1))
            got = pool.allocate(n)
            assert got == ref.allocate(n)
            held.extend(got)
            hashed.difference_update(got)  # a popped block loses its hash (lazy eviction)
            for b in got:
                if rng.random() < 0.5:
                    num_keys += 1
                    pool.cache_block(b, ("key", num_keys))
                    hashed.add(b)
        elif op == 1 and held:
            # release some references, in a random order
            k = int(rng.integers(1, len(held) + 1))
            idx = sorted(rng.choice(len(held), size=k, replace=False).tolist(), reverse=True)
            ids = [held.pop(i) for i in idx]
            pool.free(ids)
            ref.release(ids, hashed)
        else:
            # touch blocks whether free (cache hit on an unused block) or held
            ids = sorted(set(rng.integers(1, num_blocks, size=3).tolist()))
            pool.touch(ids)
            ref.touch(ids)
            held.extend(ids)
        assert pool.free_block_ids() == list(ref.free)
        assert pool.num_free_blocks == len(ref.free)
        assert pool.ref_cnt == ref.ref
        pool.check_invariants()
    assert len(pool._queue) <= 2 * num_blocks + num_blocks  # compacted, not growing
    assert len(pool._front) <= 2 * num_blocks + num_blocks


@pytest.mark.parametrize("seed", range(6))
def test_free_table_matches_freeing_the_table_tail_first(seed: int) -> None:
    """``free_table(table, num_keyed)`` (one gather, unkeyed blocks to the front in the order
    freed, keyed ones to the tail) against the reference freeing ``reversed(table)`` block by
    block, as vLLM frees a request's blocks (``reversed(req_blocks)``); some tables share a
    block with another holder (the fallback path), some are wholly keyed or wholly unkeyed."""
    rng = np.random.default_rng(100 + seed)
    num_blocks = 16
    pool, ref = BlockPool(num_blocks), _Reference(num_blocks)
    tables: list[list[int]] = []
    hashed: set[int] = set()
    extra: list[int] = []  # second references held on shared blocks
    num_keys = 0
    for _ in range(3000):
        op = rng.integers(0, 3)
        if op == 0 and len(ref.free) >= 2:
            n = int(rng.integers(2, min(6, len(ref.free)) + 1))
            table = pool.allocate(n)
            assert table == ref.allocate(n)
            hashed.difference_update(table)
            # a registered prefix: the table's first num_keyed blocks carry a key
            for b in table[: int(rng.integers(0, n + 1))]:
                num_keys += 1
                pool.cache_block(b, ("key", num_keys))
                hashed.add(b)
            tables.append(table)
        elif op == 1 and tables:
            table = tables.pop(int(rng.integers(0, len(tables))))
            num_keyed = sum(1 for b in table if b in hashed)
            assert all(b in hashed for b in table[:num_keyed])
            pool.free_table(table, num_keyed)
            ref.release(list(reversed(table)), hashed)
        elif op == 2 and tables and rng.random() < 0.5:
            b = tables[int(rng.integers(0, len(tables)))][0]
            pool.touch([b])
            ref.touch([b])
            extra.append(b)
        elif extra:
            b = extra.pop()
            pool.free([b])
            ref.release([b], hashed)
        assert pool.free_block_ids() == list(ref.free)
        assert pool.ref_cnt == ref.ref
        pool.check_invariants()
