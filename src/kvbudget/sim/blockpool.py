"""The block pool: sole owner of the free list, the reference counts and the hash table.

Follows vLLM V1's ``BlockPool`` / ``FreeKVCacheBlockQueue`` as documented in the reference
(engines-kv-accounting.md §2.2 and §5.2):

* block ids ``0 .. num_blocks-1``; block 0 is the null block, taken from the head of the free
  queue at start and never freed (used for sliding-window slots outside the window);
* the free queue starts in block-id order; allocation pops from the head; a popped block that
  still carries a hash is evicted from the hash table at that moment (lazy eviction);
* freed blocks with a hash go to the tail, freed blocks without one to the head (reused first,
  vLLM 0.32 `BlockPool.free_blocks`); callers free a request's blocks in reverse order so its tail
  blocks are evicted before its head;
* a cache hit on a block with reference count 0 removes it from the free queue ("touch");
* identical blocks are not de-duplicated: two blocks may carry the same hash; lookup returns
  the first one cached that is still present.

The free queue is a list of block ids (consumed from a head index) with lazy removal: a block
leaves the queue logically when it is touched (its reference count rises above 0), and the stale
entry is skipped when it reaches the head; a block freed again gets a new entry at the tail, and
``_inq[b]`` (entries of ``b`` in the queue) tells the stale older one from it. Only the latest
entry of a block with reference count 0 is live, so the live entries, in queue order, are exactly
vLLM's free queue. ``_num_tail_live`` counts the live entries: when it equals the queue's length
(no stale entry, as in a trace without cache hits) an allocation takes its blocks as one slice.
The queue is compacted when stale entries outnumber the pool. Per-block loops use plain
subscripts only and eviction is inlined in the common case (no duplicate hashes, no eviction
hook): with prefix caching on these loops were most of the simulator's cost (an
``OrderedDict`` free queue cost about twice as much; docs/benchmarks.md, "Simulator speed").

Deferred sources (:meth:`BlockPool.defer`): a source may hold full blocks it has not registered
yet (a decoder on the fast path registers its filled blocks when it leaves). At most one
deferred source per root. Before the pool registers another source's blocks under that root,
or materializes it, it calls the flush hook, which registers the deferred source's blocks as
they would have been registered by then; so the registration order under every root, and every
lookup, is the same as without deferral.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from itertools import islice
from operator import itemgetter
from typing import Protocol

from kvbudget.errors import SimulationError

NULL_BLOCK_ID = 0

BlockKey = Hashable
EvictHook = Callable[[int, Hashable], None]


class HashSource(Protocol):
    """What a pending run needs from its request: its hash chain, extended on demand."""

    block_hashes: list[BlockKey]

    def update_block_hashes(self, num_tokens: int) -> None: ...


class PendingRun:
    """Blocks registered for the prefix cache whose hashes are not computed yet (lazy mode).

    ``block_ids[k]`` holds block ``start + k`` of ``source``'s chain; a block still carries
    the run as its key (``block_key[b] is run``) until it is evicted or the run materializes;
    ``num_live`` counts those blocks (0: the run is dead and compaction drops it).
    """

    __slots__ = ("block_ids", "block_size", "num_live", "source", "start")

    def __init__(self, source: HashSource, start: int, block_ids: list[int], block_size: int):
        self.source = source
        self.start = start
        self.block_ids = block_ids
        self.block_size = block_size
        self.num_live = 0


class BlockPool:
    """Free queue (LRU), reference counts and ``key -> block id`` table for one replica."""

    __slots__ = (
        "_cached",
        "_compact_at",
        "_deferred",
        "_dups",
        "_fgen",
        "_flush",
        "_front",
        "_inq",
        "_min_compact_at",
        "_num_free",
        "_num_pending_runs",
        "_num_tail_live",
        "_pending",
        "_phantom",
        "_qhead",
        "_queue",
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
        # the free queue starts in block-id order, without the null block
        self._queue: list[int] = list(range(1, num_blocks))
        #: entries before this index are consumed
        self._qhead = 0
        #: free blocks whose live entry is in ``_queue`` (not in ``_front``)
        self._num_tail_live = num_blocks - 1
        #: freed blocks without a hash, reused first (vLLM 0.32 ``BlockPool.free_blocks``
        #: prepends them to the free queue: "LIFO reuse of non-cached blocks"), as
        #: (block, generation); an entry is live while its generation is the block's latest
        #: and the block is unreferenced. While a block's latest free put it at the front,
        #: ``_phantom[b]`` holds one extra count in ``_inq`` so its older tail entries read
        #: as stale.
        self._front: deque[tuple[int, int]] = deque()
        self._fgen: list[int] = [0] * num_blocks
        self._phantom: list[bool] = [False] * num_blocks
        self._inq: list[int] = [1] * num_blocks
        self._inq[NULL_BLOCK_ID] = 0
        self._num_free = num_blocks - 1
        self._cached: dict[BlockKey, int] = {}
        self._dups: dict[BlockKey, list[int]] = {}
        #: lazy registration: root hash (block 0 of the chain) -> runs in registration order
        self._pending: dict[BlockKey, list[PendingRun]] = {}
        self._num_pending_runs = 0
        #: root -> the one source holding unregistered full blocks under it (:meth:`defer`),
        #: and the hook that registers them (its owner's)
        self._deferred: dict[BlockKey, HashSource] = {}
        self._flush: Callable[[HashSource], None] | None = None
        #: compact the pending runs when there are more than this (twice the live ones after
        #: the last compaction, at least min(2 x blocks, 1024)): a dead run holds its request's
        #: prompt, so memory stays proportional to the cache, not to the requests served
        self._min_compact_at = min(2 * num_blocks, 1024)
        self._compact_at = self._min_compact_at
        self.num_evictions = 0
        self.on_evict = on_evict
        self.ref_cnt[NULL_BLOCK_ID] = 1  # pinned for the pool's lifetime

    # ------------------------------------------------------------------ queries
    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue (cached-but-unused blocks count as free)."""
        return self._num_free

    @property
    def num_used_blocks(self) -> int:
        """Blocks with a reference (including the null block)."""
        return self.num_blocks - self._num_free

    def usage(self) -> float:
        """KV usage as newer vLLM reports it: ``1 - free / (num_blocks - 1)``."""
        return 1.0 - self._num_free / (self.num_blocks - 1)

    def free_block_ids(self) -> list[int]:
        """The free queue from head (next to allocate) to tail."""
        return self._live_entries()

    def _live_entries(self) -> list[int]:
        """The free queue in order: unhashed freed blocks first, then the live tail entries."""
        return self._live_front_entries() + self._live_tail_entries()

    def _live_front_entries(self) -> list[int]:
        gen, ref = self._fgen, self.ref_cnt
        return [b for b, g in self._front if g == gen[b] and ref[b] == 0]

    def _live_tail_entries(self) -> list[int]:
        """Live deque entries in order: the latest entry of each block with no reference."""
        remaining = list(self._inq)
        ref = self.ref_cnt
        out = []
        for block_id in islice(self._queue, self._qhead, None):
            remaining[block_id] -= 1
            if remaining[block_id] == 0 and ref[block_id] == 0:
                out.append(block_id)
        return out

    def get_cached_block(self, key: BlockKey) -> int | None:
        """Block id cached under ``key`` or ``None``."""
        if self._pending or self._deferred:
            self.materialize_all()
        return self._cached.get(key)

    def num_cached_blocks(self) -> int:
        """Blocks currently carrying a hash (deferred blocks registered first)."""
        self.flush_deferred()
        return self.num_blocks - self.block_key.count(None)

    # ------------------------------------------------------------------ mutations
    def allocate(self, num_blocks: int) -> list[int]:
        """Pop ``num_blocks`` from the head of the free queue (evicting cached hashes)."""
        if num_blocks > self._num_free:
            raise SimulationError(
                f"asked for {num_blocks} blocks with {self._num_free} free; the scheduler "
                "must check can_allocate first"
            )
        if num_blocks == 1 and self.on_evict is None and not self._dups:
            return [self._allocate_one()]
        self._num_free -= num_blocks
        queue = self._queue
        head = self._qhead
        inq = self._inq
        ref = self.ref_cnt
        out: list[int] = []
        append = out.append
        keys = self.block_key
        simple = self.on_evict is None and not self._dups
        cached = self._cached
        num_evicted = 0
        left = num_blocks
        front = self._front
        fgen = self._fgen
        phantom = self._phantom
        while left and front:
            block_id, gen = front.popleft()
            if gen != fgen[block_id] or ref[block_id]:
                continue  # stale: freed again since, or touched
            if phantom[block_id]:
                phantom[block_id] = False
                inq[block_id] -= 1
            ref[block_id] = 1
            append(block_id)
            left -= 1
        if left and len(queue) - head == self._num_tail_live:
            # no stale entry: the next ``left`` entries are live, one per block
            taken = queue[head : head + left]
            head += left
            self._num_tail_live -= left
            if out:
                out.extend(taken)
            else:
                out = taken  # nothing came from the front: the slice is the answer
            if simple and left > 1:
                # one pass; a dead request's blocks are usually consecutive in the queue and
                # carry the same pending run: its counter drops once a stretch (``run``, ``m``)
                run: PendingRun | None = None
                m = 0
                for block_id in taken:
                    inq[block_id] = 0
                    ref[block_id] = 1
                    key = keys[block_id]
                    if key is not None:
                        keys[block_id] = None
                        if key is run:
                            m += 1
                        elif isinstance(key, PendingRun):
                            if run is not None:
                                run.num_live -= m
                                num_evicted += m
                            run = key
                            m = 1
                        else:
                            del cached[key]
                            num_evicted += 1
                if run is not None:
                    run.num_live -= m
                    num_evicted += m
            elif simple:
                for block_id in taken:
                    inq[block_id] = 0
                    ref[block_id] = 1
                    key = keys[block_id]
                    if key is not None:
                        if isinstance(key, PendingRun):
                            key.num_live -= 1
                        else:
                            del cached[key]
                        keys[block_id] = None
                        num_evicted += 1
            else:
                for block_id in taken:
                    inq[block_id] = 0
                    ref[block_id] = 1
            left = 0
        while left:
            block_id = queue[head]
            head += 1
            count = inq[block_id]
            inq[block_id] = count - 1
            if count != 1 or ref[block_id]:
                continue  # stale: a later entry exists, or the block was touched
            ref[block_id] = 1
            append(block_id)
            left -= 1
            self._num_tail_live -= 1
            if simple:
                # every keyed block is the table's only entry for its key: evict inline
                key = keys[block_id]
                if key is not None:
                    if isinstance(key, PendingRun):
                        key.num_live -= 1
                    else:
                        del cached[key]
                    keys[block_id] = None
                    num_evicted += 1
        if head > self.num_blocks:
            del queue[:head]  # drop consumed entries (amortized O(1) per entry)
            head = 0
        self._qhead = head
        self.num_evictions += num_evicted
        if not simple and self.enable_caching:
            for block_id in out:
                if keys[block_id] is not None:
                    self._evict(block_id)
        return out

    def _allocate_one(self) -> int:
        """:meth:`allocate` of one block without an eviction hook or duplicate hashes (a
        decoder crossing a block boundary): the same steps, fewer locals."""
        self._num_free -= 1
        ref = self.ref_cnt
        inq = self._inq
        front = self._front
        if front:
            fgen = self._fgen
            phantom = self._phantom
            while front:
                block_id, gen = front.popleft()
                if gen != fgen[block_id] or ref[block_id]:
                    continue  # stale: freed again since, or touched
                if phantom[block_id]:
                    phantom[block_id] = False
                    inq[block_id] -= 1
                ref[block_id] = 1
                return block_id  # freed unhashed, and only referenced blocks get a key
        queue = self._queue
        head = self._qhead
        while True:
            block_id = queue[head]
            head += 1
            count = inq[block_id]
            inq[block_id] = count - 1
            if count == 1 and not ref[block_id]:
                break  # else stale: a later entry exists, or the block was touched
        ref[block_id] = 1
        self._num_tail_live -= 1
        keys = self.block_key
        key = keys[block_id]
        if key is not None:
            if isinstance(key, PendingRun):
                key.num_live -= 1
            else:
                del self._cached[key]
            keys[block_id] = None
            self.num_evictions += 1
        if head > self.num_blocks:
            del queue[:head]  # drop consumed entries (amortized O(1) per entry)
            head = 0
        self._qhead = head
        return block_id

    def touch(self, block_ids: Iterable[int]) -> None:
        """Take a reference on cache-hit blocks; unreferenced ones leave the free queue."""
        ref = self.ref_cnt
        phantom = self._phantom
        for block_id in block_ids:
            if ref[block_id] == 0:
                self._num_free -= 1  # its queue entry turns stale
                if phantom[block_id]:
                    self._fgen[block_id] += 1  # its front entry turns stale
                else:
                    self._num_tail_live -= 1
            ref[block_id] += 1

    def free(self, ordered_block_ids: Iterable[int]) -> None:
        """Drop one reference each; blocks reaching 0 join the free queue in the order given:
        hashed ones at the tail (LRU), unhashed ones at the head (reused first), as vLLM 0.32
        ``BlockPool.free_blocks`` does.

        Pass a request's blocks in reverse (tail first) to get vLLM's eviction order.
        """
        ref = self.ref_cnt
        inq = self._inq
        queue = self._queue
        keys = self.block_key
        fgen = self._fgen
        phantom = self._phantom
        ids = list(ordered_block_ids)
        n = len(ids)
        bulk = False
        inq_counts: tuple[int, ...] = ()
        if n > 1:
            # one C-level gather per array (itemgetter of 2+ ids gives a tuple)
            get = itemgetter(*ids)
            if (
                get(ref).count(1) == n and True not in get(phantom) and NULL_BLOCK_ID not in ids
            ):  # (a block listed twice would hold two references: count(1) rules it out)
                block_keys = get(keys)
                inq_counts = get(inq)  # before any store below (the ids are distinct)
                first = ids[0]
                if block_keys[0] is None and None not in block_keys[1:]:
                    # a request's partial last block (freed first) is unhashed: to the front
                    ref[first] = 0
                    fgen[first] += 1
                    phantom[first] = True
                    inq[first] += 1
                    self._front.appendleft((first, fgen[first]))
                    self._num_free += 1
                    ids = ids[1:]
                    inq_counts = inq_counts[1:]
                    n -= 1
                    bulk = True
                else:
                    bulk = None not in block_keys
        if bulk:
            # the common case: each block's last reference, every block hashed, none at the
            # front: all join the tail in the order given
            if n > 1 and inq_counts.count(0) == n:
                for block_id in ids:  # no stale entry of these blocks: plain stores
                    ref[block_id] = 0
                    inq[block_id] = 1
            else:
                for block_id in ids:
                    ref[block_id] = 0
                    inq[block_id] += 1
            queue.extend(ids)
            self._num_free += n
            self._num_tail_live += n
            if len(queue) - self._qhead > 2 * self.num_blocks:
                self._compact()
            return
        append = queue.append
        num_freed = 0
        num_tail = 0
        unhashed: list[int] = []
        for block_id in ids:
            count = ref[block_id] - 1
            if count == 0 and block_id:  # block 0 is the null block (never freed)
                ref[block_id] = 0
                if keys[block_id] is None:
                    fgen[block_id] += 1  # a new front entry: any older one is stale
                    unhashed.append(block_id)  # to the front, in the order given
                    if not phantom[block_id]:
                        phantom[block_id] = True
                        inq[block_id] += 1
                else:
                    if phantom[block_id]:
                        phantom[block_id] = False
                        inq[block_id] -= 1
                    append(block_id)
                    inq[block_id] += 1
                    num_tail += 1
                num_freed += 1
            elif count > 0:
                ref[block_id] = count
            elif count < 0:
                self._num_free += num_freed
                self._num_tail_live += num_tail
                raise SimulationError(f"block {block_id} freed more often than referenced")
        self._num_free += num_freed
        self._num_tail_live += num_tail
        if unhashed:
            self._front.extendleft((b, fgen[b]) for b in reversed(unhashed))
        if len(queue) - self._qhead > 2 * self.num_blocks or len(self._front) > 2 * self.num_blocks:
            self._compact()

    def free_table(self, table: list[int], num_keyed: int) -> None:
        """:meth:`free` of a request's whole block table, tail first, when the caller knows
        that its first ``num_keyed`` blocks carry a key and the rest do not (a request's
        registered blocks are a prefix of its table: registration goes in table order, and
        only a referenced block gets a key). No null block in ``table``.

        The common case, every block's last reference, takes one check and one store a
        block: a block with a reference is never at the front (``_phantom``), so the checks
        :meth:`free` makes on every block (its key, the null block, the front) are known here. A block
        shared with another request (reference count above 1) falls back to :meth:`free`.
        """
        n = len(table)
        ref = self.ref_cnt
        last_ref = n >= 2
        if last_ref:
            for block_id in table:
                if ref[block_id] != 1:
                    last_ref = False
                    break
        if not last_ref:
            self.free(reversed(table))
            return
        if not self.enable_caching:
            num_keyed = 0
        inq = self._inq
        if num_keyed < n:
            # unkeyed: to the front, in the order freed (the table's last block first)
            fgen = self._fgen
            phantom = self._phantom
            front = self._front
            for block_id in reversed(table[num_keyed:]):
                ref[block_id] = 0
                fgen[block_id] += 1
                phantom[block_id] = True
                inq[block_id] += 1
            if n - num_keyed == 1:
                block_id = table[-1]
                front.appendleft((block_id, fgen[block_id]))
            else:
                front.extendleft((b, fgen[b]) for b in table[num_keyed:])
        if num_keyed:
            keyed = table[num_keyed - 1 :: -1]
            for block_id in keyed:
                ref[block_id] = 0
                inq[block_id] += 1
            self._queue.extend(keyed)
            self._num_tail_live += num_keyed
        self._num_free += n
        if (
            len(self._queue) - self._qhead > 2 * self.num_blocks
            or len(self._front) > 2 * self.num_blocks
        ):
            self._compact()

    def _compact(self) -> None:
        """Drop stale deque entries (bounded memory; order of live entries unchanged)."""
        live = self._live_tail_entries()
        self._queue = live
        self._qhead = 0
        inq = [0] * self.num_blocks
        for block_id in live:
            inq[block_id] = 1
        for block_id, has_phantom in enumerate(self._phantom):
            inq[block_id] += has_phantom
        self._inq = inq
        if len(self._front) > 2 * self.num_blocks:
            fgen, ref = self._fgen, self.ref_cnt
            self._front = deque((b, g) for b, g in self._front if g == fgen[b] and ref[b] == 0)

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
        self._pending.clear()
        self._num_pending_runs = 0
        self.block_key = [None] * self.num_blocks
        return True

    # ------------------------------------------------------------------ lazy registration
    def register_lazy(
        self, root: BlockKey, source: HashSource, start: int, block_ids: list[int], size: int
    ) -> None:
        """Register blocks ``start ..`` of ``source``'s chain without hashing them yet.

        Same effect as :meth:`cache_block` on each block in order, deferred: the hashes are
        computed (and the blocks enter the table, in registration order) only when a lookup
        for a chain with the same root hash needs them (:meth:`materialize`). Blocks already
        carrying a key and the null block are skipped, as :meth:`cache_block` does. Only for
        pools without an eviction hook.
        """
        deferred = self._deferred
        if deferred:
            owner = deferred.get(root)
            if owner is not None and owner is not source:
                self._flush_owner(owner)
        keys = self.block_key
        runs = self._pending.get(root)
        if runs is None:
            runs = self._pending[root] = []
        last = runs[-1] if runs else None
        if last is not None and last.source is source and last.start + len(last.block_ids) == start:
            run = last  # the same request's next blocks, nothing registered in between
            run.block_ids.extend(block_ids)
        else:
            run = PendingRun(source, start, list(block_ids), size)
            runs.append(run)
            self._num_pending_runs += 1
        num_set = 0
        for block_id in block_ids:
            if keys[block_id] is None and block_id != NULL_BLOCK_ID:
                keys[block_id] = run
                num_set += 1
        run.num_live += num_set
        if self._num_pending_runs > self._compact_at:
            self._compact_pending()

    def materialize(self, root: BlockKey) -> None:
        """Hash and enter the pending runs of chains starting with ``root``, in order (a
        deferred source's blocks under ``root`` registered first)."""
        if self._deferred:
            owner = self._deferred.get(root)
            if owner is not None:
                self._flush_owner(owner)
        runs = self._pending.pop(root, None)
        if runs is None:
            return
        self._num_pending_runs -= len(runs)
        keys = self.block_key
        cached = self._cached
        for run in runs:
            source = run.source
            ids = run.block_ids
            source.update_block_hashes((run.start + len(ids)) * run.block_size)
            hashes = source.block_hashes
            for i, block_id in enumerate(ids, run.start):
                if keys[block_id] is run:
                    h = hashes[i]
                    keys[block_id] = h
                    if h in cached:
                        self._dups.setdefault(h, []).append(block_id)
                    else:
                        cached[h] = block_id

    def materialize_all(self) -> None:
        """Hash every pending run (for callers that look keys up without a root)."""
        self.flush_deferred()
        for root in list(self._pending):
            self.materialize(root)

    # ------------------------------------------------------------------ deferred sources
    def set_flush(self, flush: Callable[[HashSource], None]) -> None:
        """The hook that registers a deferred source's blocks (owned by whoever defers)."""
        self._flush = flush

    def defer(self, root: BlockKey, source: HashSource) -> bool:
        """Let ``source`` hold unregistered full blocks under ``root``; ``False`` (nothing
        changed) when another source is deferred there already or no flush hook is set."""
        if self._flush is None or root in self._deferred:
            return False
        self._deferred[root] = source
        return True

    def undefer(self, root: BlockKey) -> None:
        """The source deferred under ``root`` registers its own blocks from now on (call
        before it registers them)."""
        del self._deferred[root]

    def flush_deferred(self) -> None:
        """Register every deferred source's blocks (they stay deferred)."""
        for source in list(self._deferred.values()):
            self._flush_owner(source)

    def _flush_owner(self, source: HashSource) -> None:
        assert self._flush is not None  # defer() needs the hook
        self._flush(source)

    def _compact_pending(self) -> None:
        """Drop pending runs none of whose blocks still carries them (bounded memory)."""
        for root in list(self._pending):
            live = [r for r in self._pending[root] if r.num_live]
            if live:
                self._pending[root] = live
            else:
                del self._pending[root]
        self._num_pending_runs = sum(len(v) for v in self._pending.values())
        self._compact_at = max(self._min_compact_at, 2 * self._num_pending_runs)

    def _evict(self, block_id: int) -> None:
        key = self.block_key[block_id]
        self.block_key[block_id] = None
        self.num_evictions += 1
        if isinstance(key, PendingRun):
            key.num_live -= 1
            return  # never hashed: nothing in the table (lazy mode has no eviction hook)
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
        live = self._live_entries()
        free_ids = set(live)
        if len(free_ids) != len(live) or len(live) != self._num_free:
            raise SimulationError(
                f"free queue: {len(live)} live entries, {len(free_ids)} distinct, "
                f"counter {self._num_free}"
            )
        for block_id, count in enumerate(self.ref_cnt):
            if count < 0:
                raise SimulationError(f"block {block_id} has reference count {count}")
            if (count == 0) != (block_id in free_ids):
                raise SimulationError(
                    f"block {block_id}: ref_cnt {count} but in free queue={block_id in free_ids}"
                )
        num_tail_live = len(self._live_tail_entries())
        if num_tail_live != self._num_tail_live:
            raise SimulationError(
                f"free queue: {num_tail_live} live tail entries, counter {self._num_tail_live}"
            )
        runs = [r for rs in self._pending.values() for r in rs]
        for r in runs:
            carried = sum(1 for b in set(r.block_ids) if self.block_key[b] is r)
            if carried != r.num_live:
                raise SimulationError(
                    f"pending run: {carried} blocks carry it, counter {r.num_live}"
                )
        if len(runs) != self._num_pending_runs:
            raise SimulationError(f"{len(runs)} pending runs, counter {self._num_pending_runs}")
        num_referenced = sum(1 for count in self.ref_cnt if count > 0)
        if len(live) + num_referenced != self.num_blocks:
            raise SimulationError(
                f"free {len(live)} + referenced {num_referenced} != total {self.num_blocks}"
            )
