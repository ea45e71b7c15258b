"""Per-request block tables over the KV cache groups, on top of the shared block pool.

vLLM V1 keeps one pool of ``num_gpu_blocks`` blocks; every KV cache group takes its blocks from
it (a block id covers one page of every layer of its group). Per group kind:

* ``full``: ``cdiv(tokens, block_size)`` blocks;
* ``sliding``: blocks wholly before ``num_computed_tokens - window + 1`` are released to the
  pool and their slots replaced by the null block (vLLM ``remove_skipped_blocks``);
* ``state``: one block per sequence (a fixed state page), whatever its length.

Prefix caching (hash lookup and registration of full blocks) applies to full and sliding
groups (vLLM's hybrid rule for the window); models with state groups run without it
(documented in docs/simulator.md).
"""

from __future__ import annotations

from collections.abc import Callable

from kvbudget.sim.blockpool import NULL_BLOCK_ID, BlockPool
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.prefix import BlockHash, max_cache_hit_tokens
from kvbudget.sim.request import SimRequest


class KVCacheManager:
    """Allocates, caches and frees a request's blocks in every group."""

    __slots__ = (
        "block_size",
        "caching",
        "kinds",
        "max_model_len",
        "num_groups",
        "on_cache",
        "pool",
        "single_full",
        "windows",
    )

    def __init__(self, config: ReplicaConfig, pool: BlockPool) -> None:
        self.pool = pool
        self.block_size = config.block_size
        self.kinds = tuple(g.kind for g in config.kv_groups)
        self.windows = tuple(g.sliding_window_tokens or 0 for g in config.kv_groups)
        self.num_groups = len(self.kinds)
        self.caching = config.prefix_caching_effective
        self.max_model_len = config.max_model_len
        #: called with the group-0 hashes of newly cached full blocks (write-through tiers)
        self.on_cache: Callable[[list[BlockHash]], None] | None = None
        #: one full-attention group (dense models): a shorter path, same result
        self.single_full = self.kinds == ("full",)

    def init_request(self, req: SimRequest) -> None:
        """Give a new or preempted request empty block tables."""
        if self.num_groups == 1:
            req.block_ids = [[]]
            req.num_skipped_blocks = [0]
        else:
            req.block_ids = [[] for _ in range(self.num_groups)]
            req.num_skipped_blocks = [0] * self.num_groups
        req.num_cached_blocks = 0

    @property
    def lazy(self) -> bool:
        """Lazy hashing and registration (single full-attention group, no tier hooks).

        A request's blocks are registered without hashing (:meth:`BlockPool.register_lazy`);
        their hashes are computed when a later lookup's block 0 has the same root hash. A
        lookup hashes block 0, and the rest of its prompt only if block 0 is cached. Same
        hits, same block ids, same eviction order as hashing eagerly (the table's content is
        only materialized later); tiers read every hash, so they keep the eager path.
        """
        return self.single_full and self.on_cache is None and self.pool.on_evict is None

    @staticmethod
    def key(group: int, block_hash: BlockHash) -> BlockHash:
        """Hash-table key of a block hash in ``group`` (group 0 uses the bare hash)."""
        return block_hash if group == 0 else (group, block_hash)

    def find_cache_hit(self, req: SimRequest) -> tuple[list[list[int]], int]:
        """Cached blocks per group for the longest cached prefix, and its length in tokens."""
        if not self.caching:
            return [], 0
        pool = self.pool
        if self.single_full and self.lazy:
            # hash block 0 only; the rest of the chain only if block 0 is cached
            req.update_block_hashes(self.block_size)
            if not req.block_hashes:
                return [[]], 0
            root = req.block_hashes[0]
            if root in pool._pending or root in pool._deferred:
                pool.materialize(root)
            if root not in pool._cached:
                return [[]], 0
        req.update_block_hashes(req.num_tokens)
        if self.single_full:
            get = pool._cached.get
            found: list[int] = []
            for block_hash in req.block_hashes:
                block_id = get(block_hash)
                if block_id is None:
                    break
                found.append(block_id)
            num_hit = max_cache_hit_tokens(len(found), self.block_size, req.num_tokens)
            return [found[: num_hit // self.block_size]], num_hit
        return self._find_hybrid_hit(req)

    def _find_hybrid_hit(self, req: SimRequest) -> tuple[list[list[int]], int]:
        """Full groups: longest cached prefix; sliding groups: the window before it cached.

        As vLLM's hybrid coordinator: the full-attention hit ``n`` blocks is shortened until
        every sliding group has its last ``cdiv(window - 1, block_size)`` blocks before the hit
        point cached; earlier sliding slots are the null block.
        """
        pool = self.pool
        size = self.block_size
        hashes = req.block_hashes
        full = [g for g, k in enumerate(self.kinds) if k == "full"]
        sliding = [g for g, k in enumerate(self.kinds) if k == "sliding"]
        n = 0
        while n < len(hashes) and all(
            pool.get_cached_block(self.key(g, hashes[n])) is not None for g in full
        ):
            n += 1
        n = max_cache_hit_tokens(n, size, req.num_tokens) // size
        for g in sliding:
            need = -(-(self.windows[g] - 1) // size)
            m = n
            while m > 0:
                lo = max(0, m - need)
                missing = [
                    i for i in range(lo, m) if pool.get_cached_block(self.key(g, hashes[i])) is None
                ]
                if not missing:
                    break
                m = missing[-1]  # the hit must end before the last missing block
            n = min(n, m)
        hits: list[list[int]] = []
        for g, kind in enumerate(self.kinds):
            if kind == "sliding":
                lo = max(0, n - -(-(self.windows[g] - 1) // size))
                ids = [NULL_BLOCK_ID] * lo
            else:
                lo = 0
                ids = []
            for i in range(lo, n):
                block_id = pool.get_cached_block(self.key(g, hashes[i]))
                assert block_id is not None
                ids.append(block_id)
            hits.append(ids)
        return hits, n * size

    def _remove_skipped(self, req: SimRequest, num_computed_tokens: int) -> None:
        size = self.block_size
        releases: list[list[int]] = []  # per sliding group, tail first
        for g, kind in enumerate(self.kinds):
            if kind != "sliding":
                continue
            first_useful = max(0, num_computed_tokens - self.windows[g] + 1)
            target = min(first_useful // size, len(req.block_ids[g]))
            start = req.num_skipped_blocks[g]
            if target <= start:
                continue
            table = req.block_ids[g]
            releases.append(table[start:target][::-1])
            for i in range(start, target):
                table[i] = NULL_BLOCK_ID
            req.num_skipped_blocks[g] = target
        if releases:
            self._free_groups(releases)

    def _free_groups(self, releases: list[list[int]]) -> None:
        """``pool.free(r) for r in releases``, in one call where that is the same.

        Hashed blocks join the free queue's tail in the order given, unhashed ones its head
        (the last freed first): one call over the groups in order, or in reverse order, when
        every block is hashed, or none is; otherwise one call per group.
        """
        pool = self.pool
        if len(releases) == 1:
            pool.free(releases[0])
            return
        flat = [b for r in releases for b in r]
        keys = list(map(pool.block_key.__getitem__, flat))
        num_unhashed = keys.count(None)
        if num_unhashed == 0:
            pool.free(flat)
        elif num_unhashed == len(flat):
            pool.free([b for r in reversed(releases) for b in r])
        else:
            for r in releases:
                pool.free(r)

    def allocate_slots(
        self,
        req: SimRequest,
        num_new_tokens: int,
        hit_blocks: list[list[int]] | None = None,
        num_hit_tokens: int = 0,
    ) -> bool:
        """Make room for ``num_new_tokens`` more tokens; ``False`` (nothing taken) if no room."""
        pool = self.pool
        num_computed = req.num_computed_tokens + num_hit_tokens
        need = min(num_computed + num_new_tokens, self.max_model_len)
        if self.single_full:
            return self._allocate_single(req, need, hit_blocks[0] if hit_blocks else None)
        self._remove_skipped(req, num_computed)
        hits = hit_blocks or []
        num_new = 0
        size = self.block_size
        for g, kind in enumerate(self.kinds):
            have = len(req.block_ids[g]) + (len(hits[g]) if hits else 0)
            if kind == "state":
                num_new += 0 if have else 1
            else:
                num_new += max(0, -(-need // size) - have)
        ref = pool.ref_cnt
        num_evictable_hits = sum(1 for group in hits for b in group if ref[b] == 0)
        if num_new + num_evictable_hits > pool.num_free_blocks:
            return False
        for g in range(self.num_groups):
            table = req.block_ids[g]
            if hits and hits[g]:
                pool.touch(b for b in hits[g] if b != NULL_BLOCK_ID)
                table.extend(hits[g])
                lead = 0
                while lead < len(table) and table[lead] == NULL_BLOCK_ID:
                    lead += 1
                req.num_skipped_blocks[g] = max(req.num_skipped_blocks[g], lead)
        for g, kind in enumerate(self.kinds):
            table = req.block_ids[g]
            if kind == "state":
                if not table:
                    table.extend(pool.allocate(1))
            else:
                extra = -(-need // size) - len(table)
                if extra > 0:
                    table.extend(pool.allocate(extra))
        if self.caching:
            self._cache_full_blocks(req, min(need, req.num_tokens))
        return True

    def _allocate_single(self, req: SimRequest, need: int, hits: list[int] | None) -> bool:
        """``allocate_slots`` for one full-attention group (same rules, fewer loops)."""
        pool = self.pool
        table = req.block_ids[0]
        num_new = -(-need // self.block_size) - len(table)
        evictable = 0
        if hits:
            num_new -= len(hits)
            ref = pool.ref_cnt
            for b in hits:
                if ref[b] == 0:
                    evictable += 1
        if num_new < 0:
            num_new = 0
        if num_new + evictable > pool._num_free:
            return False
        if hits:
            pool.touch(hits)
            table.extend(hits)
        if num_new:
            table.extend(pool.allocate(num_new))
        if self.caching:
            num_tokens = req.num_tokens
            self._cache_full_blocks(req, need if need < num_tokens else num_tokens)
        return True

    def _cache_full_blocks(self, req: SimRequest, num_tokens: int) -> None:
        num_full = num_tokens // self.block_size
        if not self.caching or num_full <= req.num_cached_blocks:
            return
        pool = self.pool
        if self.lazy and pool.enable_caching:
            start = req.num_cached_blocks
            req.update_block_hashes(self.block_size)  # the root hash (block 0)
            pool.register_lazy(
                req.block_hashes[0], req, start, req.block_ids[0][start:num_full], self.block_size
            )
            req.num_cached_blocks = num_full
            return
        req.update_block_hashes(num_tokens)
        hashes = req.block_hashes
        start = req.num_cached_blocks
        if pool.enable_caching:  # pool.cache_block on each new full block, inlined
            keys = pool.block_key
            cached = pool._cached
            for g, table in enumerate(req.block_ids):
                for i in range(start, num_full):
                    block_id = table[i]
                    if block_id == NULL_BLOCK_ID or keys[block_id] is not None:
                        continue
                    key = hashes[i] if g == 0 else (g, hashes[i])
                    keys[block_id] = key
                    if key in cached:
                        pool._dups.setdefault(key, []).append(block_id)
                    else:
                        cached[key] = block_id
        if self.on_cache is not None:
            self.on_cache(hashes[req.num_cached_blocks : num_full])
        req.num_cached_blocks = num_full

    def free(self, req: SimRequest) -> None:
        """Release every block of ``req`` (tail first, group by group)."""
        if self.single_full:  # its registered blocks are its table's first ones, no null
            self.pool.free_table(req.block_ids[0], req.num_cached_blocks)
        elif self.num_groups == 1:
            self.pool.free(reversed(req.block_ids[0]))
        else:  # the null block (released sliding slots) is never freed: left out
            self._free_groups(
                [[b for b in reversed(t) if b != NULL_BLOCK_ID] for t in req.block_ids]
            )
        self.init_request(req)
