"""The decoders whose blocks change in a fast-path step (:class:`~kvbudget.sim.fastpath.FastEngine`).

``EngineCore`` calls ``allocate_slots(req, 1)`` for every decoder every step; the fast path
calls it (or takes its steps) only for the decoders for which it changes something, found by
their phase ``(g0 - c0) % block_size`` (see :mod:`kvbudget.sim.fastpath`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.sim.request import SimRequest

if TYPE_CHECKING:
    from kvbudget.sim.fastpath import FastEngine


def single_group_events(fe: FastEngine) -> None:
    """One full-attention group: the decoders that cross a block boundary or fill one."""
    kv = fe.kv
    # running decoders that cross a block boundary, in running order
    size = fe.block_size
    crossing = fe.phase[fe.g % size]
    if crossing:
        pool = fe.pool
        g = fe.g
        num_crossing = len(crossing)
        if size > 1 and num_crossing <= pool._num_free:
            # every one fits: one pop of their blocks, handed out in running order (the same
            # blocks, evictions and free queue as one pop each; a bucket holds only running
            # decoders, in running order)
            # (indexed, not zip(strict=True): a keyword call to zip costs more than the loop)
            new_ids = pool.allocate(num_crossing)
            for i, dec in enumerate(crossing.values()):
                block_id = new_ids[i]
                d = g - dec.lazy_g0
                dec.num_computed_tokens = dec.lazy_c0 + d
                dec.num_output_tokens = dec.lazy_o0 + d
                dec.block_ids[0].append(block_id)
            crossing = {}
        for seq in list(crossing):
            req = crossing.get(seq)
            if req is None or seq not in fe.running:
                continue
            c = req.lazy_c0 + g - req.lazy_g0
            req.num_computed_tokens = c
            req.num_output_tokens = req.lazy_o0 + g - req.lazy_g0
            if pool._num_free:
                # exactly one new block (c is a multiple of block_size): the same steps
                # as allocate_slots, without its general bookkeeping
                req.block_ids[0].extend(pool.allocate(1))
                if kv.caching and (c + 1) // size > req.num_cached_blocks:
                    # block_size 1: the block taken now is full once this step computes it
                    kv._cache_full_blocks(req, c + 1)
                continue
            if not fe._allocate_or_preempt(req, 1):
                break  # it was the last running request
    # 1b. decoders whose token this step fills a block: the block is registered for the
    # prefix cache now, when that token is scheduled (vLLM's allocate_slots ->
    # cache_blocks(num_computed + num_new), as EngineCore), so a request admitted in this
    # step can hit it. After the crossing loop, same order of registrations as running
    # order: registering keys a referenced block, allocation pops free ones (independent),
    # and a decoder preempted above has already left its bucket (as EngineCore, which
    # never schedules it). Block size 1: the crossing loop registered it already.
    # With deferral (FastEngine._defer) only the decoders in ``fill_phase`` register now; the
    # others' blocks count as registered from here on (``reg_g``) and are registered when the
    # pool first needs them.
    if size > 1 and kv.caching:
        g1 = fe.g + 1
        completing = fe.fill_phase[g1 % size]
        if completing:
            cache = kv._cache_full_blocks
            deferred = fe.pool._deferred
            filling = fe.phase[g1 % size]
            for req in completing.values():
                if deferred and req.block_hashes:
                    owner = deferred.get(req.block_hashes[0])
                    if (
                        isinstance(owner, SimRequest)
                        and owner is not req
                        and owner.running_seq < req.running_seq
                        and filling.get(owner.running_seq) is owner
                    ):
                        # the root's deferred owner is ahead of req in running order and
                        # fills a block in this step too: its block is registered first
                        # (the flush req's registration calls counts up to ``g`` only)
                        cache(owner, owner.lazy_c0 + g1 - owner.lazy_g0)
                cache(req, req.lazy_c0 + g1 - req.lazy_g0)
        fe.reg_g = g1


def group_events(fe: FastEngine) -> None:
    """Several groups (sliding window, state, more than one full group): ``allocate_slots``.

    ``EngineCore`` calls ``allocate_slots(req, 1)`` for every decoder every step; it
    changes something only when the decoder's computed tokens ``c`` (before this step)
    cross a block boundary (``c % block_size == 0``: a new block per full/sliding group),
    when its token fills a block (``(c + 1) % block_size == 0``: registered for the prefix
    cache) or when a sliding window of ``w`` tokens leaves a block behind
    (``(c - w + 1) % block_size == 0``: ``remove_skipped`` frees it, the null block takes
    its slot), plus once on a decoder's first step (``remove_skipped`` catches up on the
    blocks its last prefill chunk left behind). Every other call is a no-op. Those
    decoders are the phase buckets at fixed offsets from ``G`` (:attr:`FastEngine._offsets`) and
    :attr:`FastEngine.fresh`; they take ``allocate_slots``'s steps in running order (a free and an
    allocation of two decoders do not commute: an unhashed freed block is reused first),
    and a decoder that finds too few free blocks calls ``allocate_slots`` itself and
    preempts as ``EngineCore`` does.
    """
    size = fe.block_size
    g = fe.g
    phase = fe.phase
    events: dict[int, SimRequest] = {}
    for offset in fe._offsets:
        bucket = phase[(g - offset) % size]
        if bucket:
            events.update(bucket)
    fresh: set[int] = set()
    if fe.fresh:
        for req in fe.fresh:
            if req.lazy_g0 >= 0:
                events[req.running_seq] = req
                fresh.add(req.running_seq)
        fe.fresh.clear()
    if not events:
        return
    kv = fe.kv
    pool = fe.pool
    running = fe.running
    paged = fe._paged
    num_paged = len(paged)
    skip_phases = fe._skip_phases
    caching = kv.caching
    for seq in sorted(events):
        req = events[seq]
        if running.get(seq) is not req or req.lazy_g0 < 0:
            continue  # preempted above in this step
        d = g - req.lazy_g0
        c = req.lazy_c0 + d
        req.num_computed_tokens = c
        req.num_output_tokens = req.lazy_o0 + d
        # allocate_slots(req, 1), step by step: remove_skipped, one block per paged group
        # at a boundary (one pop of num_paged blocks: the same blocks, in group order, as
        # one pop per group), registration of the block this token fills
        pos = c % size
        if pos in skip_phases or seq in fresh:
            kv._remove_skipped(req, c)
        if pos == 0:
            if pool._num_free < num_paged:
                if not fe._allocate_or_preempt(req, 1):
                    return  # it was the last running request
                continue
            tables = req.block_ids
            new_ids = pool.allocate(num_paged)
            for i in range(num_paged):
                tables[paged[i]].append(new_ids[i])
        if caching:
            kv._cache_full_blocks(req, c + 1)
