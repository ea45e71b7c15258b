"""The block pool: sole owner of the free list, the reference counts and the hash table.

Follows vLLM V1's ``BlockPool`` / ``FreeKVCacheBlockQueue`` as documented in the reference
(engines-kv-accounting.md §2.2 and §5.2):

* block ids ``0 .. num_blocks-1``; block 0 is the null block, taken from the head of the free
  queue at start and never freed (used for sliding-window slots outside the window);
* the free queue starts in block-id order; allocation pops from the head; a popped block that
  still carries a hash is evicted from the hash table at that moment (lazy eviction);
* freed blocks go to the tail; callers free a request's blocks in reverse order so its tail
  blocks are evicted before its head;
* a cache hit on a block with reference count 0 removes it from the free queue ("touch");
* identical blocks are not de-duplicated: two blocks may carry the same hash; lookup returns
  the first one cached that is still present.

The free queue is an ``OrderedDict`` (O(1) pop-head, append-tail and remove-by-id).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable

from kvbudget.errors import SimulationError

NULL_BLOCK_ID = 0

BlockKey = Hashable
EvictHook = Callable[[int, Hashable], None]


class BlockPool:
    """Free queue (LRU), reference counts and ``key -> block id`` table for one replica."""

    __slots__ = (
        "_cached",
        "_dups",
        "_free",
        "block_key",
        "enable_caching",
        "num_blocks",
        "num_evictions",
        "on_evict",
        "ref_cnt",
    )

    def __init__(
        self, num_blocks: int, *, enable_caching: bool = True, on_evict: EvictHook | None = None
    ) -> None:
        if num_blocks < 2:
            raise SimulationError(
                f"num_blocks={num_blocks}: a pool needs at least 2 blocks (null block + 1)"
            )
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.ref_cnt: list[int] = [0] * num_blocks
        self.block_key: list[BlockKey | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._cached: dict[BlockKey, int] = {}
        self._dups: dict[BlockKey, list[int]] = {}
        self.num_evictions = 0
        self.on_evict = on_evict
        null_id, _ = self._free.popitem(last=False)
        assert null_id == NULL_BLOCK_ID
        self.ref_cnt[NULL_BLOCK_ID] = 1  # pinned for the pool's lifetime

    # ------------------------------------------------------------------ queries
    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue (cached-but-unused blocks count as free)."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        """Blocks with a reference (including the null block)."""
        return self.num_blocks - len(self._free)

    def usage(self) -> float:
        """KV usage as newer vLLM reports it: ``1 - free / (num_blocks - 1)``."""
        return 1.0 - len(self._free) / (self.num_blocks - 1)

    def free_block_ids(self) -> list[int]:
        """The free queue from head (next to allocate) to tail."""
        return list(self._free)

    def get_cached_block(self, key: BlockKey) -> int | None:
        """Block id cached under ``key`` or ``None``."""
        return self._cached.get(key)

    def num_cached_blocks(self) -> int:
        """Blocks currently carrying a hash."""
        return len(self._cached) + sum(len(v) for v in self._dups.values())

    # ------------------------------------------------------------------ mutations
    def allocate(self, num_blocks: int) -> list[int]:
        """Pop ``num_blocks`` from the head of the free queue (evicting cached hashes)."""
        if num_blocks > len(self._free):
            raise SimulationError(
                f"asked for {num_blocks} blocks with {len(self._free)} free; the scheduler "
                "must check can_allocate first"
            )
        popitem = self._free.popitem
        ref = self.ref_cnt
        keys = self.block_key
        out = [popitem(False)[0] for _ in range(num_blocks)]
        setref = ref.__setitem__
        for block_id in out:
            setref(block_id, 1)
        if self.enable_caching:
            hashed = [b for b in out if keys[b] is not None]
            if hashed:
                cached = self._cached
                simple = self.on_evict is None and not self._dups
                for block_id in hashed:
                    key = keys[block_id]
                    if simple and cached.get(key) == block_id:
                        # the common case of _evict, inline
                        keys[block_id] = None
                        del cached[key]
                        self.num_evictions += 1
                    else:
                        self._evict(block_id)
        return out

    def touch(self, block_ids: Iterable[int]) -> None:
        """Take a reference on cache-hit blocks; unreferenced ones leave the free queue."""
        ref = self.ref_cnt
        free = self._free
        for block_id in block_ids:
            if ref[block_id] == 0:
                del free[block_id]
            ref[block_id] += 1

    def free(self, ordered_block_ids: Iterable[int]) -> None:
        """Drop one reference each; blocks reaching 0 join the tail in the order given.

        Pass a request's blocks in reverse (tail first) to get vLLM's eviction order.
        """
        ref = self.ref_cnt
        free = self._free
        for block_id in ordered_block_ids:
            count = ref[block_id] - 1
            if count > 0:
                ref[block_id] = count
            elif count == 0 and block_id != NULL_BLOCK_ID:
                ref[block_id] = 0
                free[block_id] = None
            elif count < 0:
                raise SimulationError(f"block {block_id} freed more often than referenced")

    def cache_block(self, block_id: int, key: BlockKey) -> None:
        """Record that ``block_id`` (full, referenced) holds the content named ``key``."""
        if (
            not self.enable_caching
            or block_id == NULL_BLOCK_ID
            or self.block_key[block_id] is not None
        ):
            return
        self.block_key[block_id] = key
        if key in self._cached:
            self._dups.setdefault(key, []).append(block_id)
        else:
            self._cached[key] = block_id

    def reset_prefix_cache(self) -> bool:
        """Forget every hash; only allowed when no block but the null block is in use."""
        if self.num_used_blocks != 1:
            return False
        self._cached.clear()
        self._dups.clear()
        self.block_key = [None] * self.num_blocks
        return True

    def _evict(self, block_id: int) -> None:
        key = self.block_key[block_id]
        self.block_key[block_id] = None
        self.num_evictions += 1
        if self._cached.get(key) == block_id:
            dups = self._dups.get(key)
            if dups:
                self._cached[key] = dups.pop(0)
                if not dups:
                    del self._dups[key]
            else:
                del self._cached[key]
        else:
            dups = self._dups[key]
            dups.remove(block_id)
            if not dups:
                del self._dups[key]
        if self.on_evict is not None:
            self.on_evict(block_id, key)

    # ------------------------------------------------------------------ checks
    def check_invariants(self) -> None:
        """Raise if the pool is inconsistent (used by property tests)."""
        free_ids = set(self._free)
        if len(free_ids) != len(self._free):
            raise SimulationError("a block appears twice in the free queue")
        for block_id, count in enumerate(self.ref_cnt):
            if count < 0:
                raise SimulationError(f"block {block_id} has reference count {count}")
            if (count == 0) != (block_id in free_ids):
                raise SimulationError(
                    f"block {block_id}: ref_cnt {count} but in free queue={block_id in free_ids}"
                )
        num_referenced = sum(1 for count in self.ref_cnt if count > 0)
        if len(self._free) + num_referenced != self.num_blocks:
            raise SimulationError(
                f"free {len(self._free)} + referenced {num_referenced} != total {self.num_blocks}"
            )
