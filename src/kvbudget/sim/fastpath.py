"""Fast path: the same scheduling as :class:`EngineCore`, with decode tokens advanced lazily.

A decoding request changes in a fully predictable way each step (one more computed token, one
more output token), so the fast path does not touch it per step. It keeps a global decode-step
counter ``G``; a decoding request stores ``(g0, c0, o0)`` (counter, computed tokens and outputs
when it started decoding) and its state at any step is ``c0 + G - g0``. Work is only done where
something can change:

* block boundaries: a decoder needs a new block when its computed tokens reach a multiple of
  ``block_size``, i.e. at steps with ``G % block_size == (g0 - c0) % block_size``; decoders are
  bucketed by that phase, so a step touches only the ~1/block_size of them that cross (and,
  with prefix caching, the ~1/block_size whose token fills a block, below);
* finishes: a heap on the step at which each decoder reaches its output length;
* blocks filled by a decoder's token: registered for the prefix cache in the step that
  schedules the token (the bucket of decoders one step before a boundary), as the explicit
  engine and vLLM's ``allocate_slots`` do;
* sliding-window groups (vLLM's ``SlidingWindowManager.remove_skipped_blocks``): a block
  falls out of a ``w``-token window when ``(c - w + 1) % block_size == 0``, one more phase
  bucket per window; a decoder's first step also catches up on the blocks its last prefill
  chunk left behind. With several groups (sliding, state, or more than one full group) the
  decoders of those buckets call ``allocate_slots(req, 1)`` exactly as the explicit engine
  does, in running order (a free and another decoder's allocation do not commute: an
  unhashed freed block is reused first);
* prefills, admissions and preemptions: done exactly as the explicit engine does them.

The step-time model sees the same batch (decode count and summed context are kept as running
sums). The result is identical to stepping :class:`EngineCore` (same block ids, eviction order,
times); ``tests/unit/sim/test_sim_fastpath.py`` checks that on random workloads and
``tests/property/sim/test_sim_fastpath_lockstep.py`` after every step, on dense, Gemma-2
(1 sliding : 1 full), Gemma-3 (5 sliding : 1 full), sliding-only, two-window and state-group
layouts. Used when the replica is FCFS with ``max_num_seqs < max_num_batched_tokens`` and no
``long_prefill_token_threshold`` (see :func:`fast_path_ok`), and has no KV tier (the replica
checks that: a reloading request stays in the running list unscheduled and, once loaded,
prefills ahead of later decoders, so decoders no longer come first in running order).
"""

from __future__ import annotations

import heapq

from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.request import SimRequest
from kvbudget.sim.timing import BatchShape


def fast_path_ok(config: ReplicaConfig) -> bool:
    """Whether :class:`FastEngine` reproduces :class:`EngineCore` for this configuration."""
    return (
        config.policy == "fcfs"
        and config.max_num_seqs < config.max_num_batched_tokens
        and config.long_prefill_token_threshold == 0
    )


class FastEngine:
    """Drives an :class:`EngineCore`'s pool, KV manager and waiting queue with lazy decode."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.config = core.config
        self.kv = core.kv
        self.pool = core.pool
        self.timing = core.timing
        self.waiting = core.scheduler.waiting
        self.sched = core.scheduler
        self.block_size = core.config.block_size
        self.running: dict[int, SimRequest] = {}
        self.explicit: dict[int, SimRequest] = {}
        self.phase: list[dict[int, SimRequest]] = [{} for _ in range(self.block_size)]
        #: decoders whose first decode step is next (multi-group: remove_skipped catches up)
        self.fresh: list[SimRequest] = []
        #: multi-group: phase offsets of the decoders whose blocks change in a step (block
        #: boundary 0, filled block -1 with prefix caching, each window's ``w - 1``)
        offsets = {0}
        if core.kv.caching:
            offsets.add(-1 % self.block_size)
        for kind, window in zip(core.kv.kinds, core.kv.windows, strict=True):
            if kind == "sliding":
                offsets.add((window - 1) % self.block_size)
        self._offsets = tuple(sorted(offsets))
        #: multi-group: ``c % block_size`` at which a window leaves a block behind
        self._skip_phases = frozenset(
            (w - 1) % self.block_size
            for k, w in zip(core.kv.kinds, core.kv.windows, strict=True)
            if k == "sliding"
        )
        #: multi-group: the groups that take a block per ``block_size`` tokens (not state)
        self._paged = tuple(g for g, k in enumerate(core.kv.kinds) if k != "state")
        self.num_decoders = 0
        self.decode_ctx = 0
        self.g = 0
        self._seq = 0
        self._finish_heap: list[tuple[int, int, int, SimRequest]] = []
        self.num_steps = 0
        #: per-token times (``Replica`` sets both when asked): request id -> output times, and
        #: the end time of every step (a lazy decoder's tokens are the ends of its steps)
        self.token_times: dict[str, list[float]] | None = None
        self.step_ends: list[float] = []

    # ------------------------------------------------------------------ lazy bookkeeping
    def _materialize(self, req: SimRequest) -> None:
        if req.lazy_g0 >= 0:
            d = self.g - req.lazy_g0
            req.num_computed_tokens = req.lazy_c0 + d
            req.num_output_tokens = req.lazy_o0 + d

    def _add_decoder(self, req: SimRequest) -> None:
        req.lazy_g0 = self.g
        req.lazy_c0 = req.num_computed_tokens
        req.lazy_o0 = req.num_output_tokens
        self.phase[(self.g - req.lazy_c0) % self.block_size][req.running_seq] = req
        self.num_decoders += 1
        self.decode_ctx += req.lazy_c0
        finish_at = self.g + req.output_limit - req.lazy_o0
        heapq.heappush(self._finish_heap, (finish_at, req.running_seq, self.g, req))

    def _remove_decoder(self, req: SimRequest) -> None:
        self._materialize(req)
        if self.token_times is not None:  # its lazy tokens: steps lazy_g0 + 1 .. g
            self.token_times.setdefault(req.spec.request_id, []).extend(
                self.step_ends[req.lazy_g0 : self.g]
            )
        del self.phase[(req.lazy_g0 - req.lazy_c0) % self.block_size][req.running_seq]
        self.num_decoders -= 1
        self.decode_ctx -= req.num_computed_tokens
        req.lazy_g0 = -1

    def _drop_running(self, req: SimRequest) -> None:
        if req.lazy_g0 >= 0:
            self._remove_decoder(req)
            self.kv._cache_full_blocks(req, req.num_computed_tokens)
        else:
            self.explicit.pop(req.running_seq, None)
        del self.running[req.running_seq]

    def _admit(self, req: SimRequest) -> None:
        req.running_seq = self._seq
        self._seq += 1
        self.running[req.running_seq] = req

    def _preempt_last(self) -> SimRequest:
        victim = self.running[next(reversed(self.running))]
        self._drop_running(victim)
        self.kv.free(victim)
        victim.status = "waiting"
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        self.sched.num_preemptions += 1
        self.waiting.prepend(victim)
        return victim

    def has_work(self) -> bool:
        return bool(self.running) or bool(len(self.waiting))

    def add_request(self, req: object) -> SimRequest:
        return self.core.add_request(req)

    # ------------------------------------------------------------------ one step
    def step(self, now_s: float) -> float:
        """Schedule and apply one step at ``now_s``; returns its duration (0 = nothing ran)."""
        cfg = self.config
        kv = self.kv
        # 1. the running decoders whose blocks change in this step, in running order
        preempted = self._single_group_events() if kv.single_full else self._group_events()
        # 2. the explicit (prefilling) running requests, in running order
        budget = cfg.max_num_batched_tokens - self.num_decoders
        scheduled: list[tuple[SimRequest, int]] = []
        for seq in list(self.explicit):
            req = self.explicit.get(seq)
            if req is None or budget <= 0:
                continue
            num_new = min(
                req.num_tokens - req.num_computed_tokens,
                budget,
                cfg.max_model_len - req.num_computed_tokens,
            )
            if num_new <= 0:
                continue
            ok = True
            while not kv.allocate_slots(req, num_new):
                victim = self._preempt_last()
                preempted = True
                if victim is req:
                    ok = False
                    break
            if not ok:
                break
            scheduled.append((req, num_new))
            budget -= num_new
        # 3. waiting requests (only if nothing was preempted)
        if not preempted:
            budget = self._admit_waiting(now_s, scheduled, budget)
        if not scheduled and self.num_decoders == 0:
            return 0.0
        return self._apply(now_s, scheduled)

    def _single_group_events(self) -> bool:
        """One full-attention group: the decoders that cross a block boundary or fill one."""
        kv = self.kv
        preempted = False
        # running decoders that cross a block boundary, in running order
        size = self.block_size
        crossing = self.phase[self.g % size]
        if crossing:
            pool = self.pool
            g = self.g
            for seq in list(crossing):
                req = crossing.get(seq)
                if req is None or seq not in self.running:
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
                ok = True
                while not kv.allocate_slots(req, 1):
                    victim = self._preempt_last()
                    preempted = True
                    if victim is req:
                        ok = False
                        break
                if not ok:
                    break
        # 1b. decoders whose token this step fills a block: the block is registered for the
        # prefix cache now, when that token is scheduled (vLLM's allocate_slots ->
        # cache_blocks(num_computed + num_new), as EngineCore), so a request admitted in this
        # step can hit it. After the crossing loop, same order of registrations as running
        # order: registering keys a referenced block, allocation pops free ones (independent),
        # and a decoder preempted above has already left its bucket (as EngineCore, which
        # never schedules it). Block size 1: the crossing loop registered it already.
        if size > 1 and kv.caching:
            completing = self.phase[(self.g + 1) % size]
            if completing:
                g1 = self.g + 1
                cache = kv._cache_full_blocks
                for req in completing.values():
                    cache(req, req.lazy_c0 + g1 - req.lazy_g0)
        return preempted

    def _group_events(self) -> bool:
        """Several groups (sliding window, state, more than one full group): ``allocate_slots``.

        ``EngineCore`` calls ``allocate_slots(req, 1)`` for every decoder every step; it
        changes something only when the decoder's computed tokens ``c`` (before this step)
        cross a block boundary (``c % block_size == 0``: a new block per full/sliding group),
        when its token fills a block (``(c + 1) % block_size == 0``: registered for the prefix
        cache) or when a sliding window of ``w`` tokens leaves a block behind
        (``(c - w + 1) % block_size == 0``: ``remove_skipped`` frees it, the null block takes
        its slot), plus once on a decoder's first step (``remove_skipped`` catches up on the
        blocks its last prefill chunk left behind). Every other call is a no-op. Those
        decoders are the phase buckets at fixed offsets from ``G`` (:attr:`_offsets`) and
        :attr:`fresh`; they take ``allocate_slots``'s steps in running order (a free and an
        allocation of two decoders do not commute: an unhashed freed block is reused first),
        and a decoder that finds too few free blocks calls ``allocate_slots`` itself and
        preempts as ``EngineCore`` does.
        """
        size = self.block_size
        g = self.g
        phase = self.phase
        events: dict[int, SimRequest] = {}
        for offset in self._offsets:
            bucket = phase[(g - offset) % size]
            if bucket:
                events.update(bucket)
        fresh: set[int] = set()
        if self.fresh:
            for req in self.fresh:
                if req.lazy_g0 >= 0:
                    events[req.running_seq] = req
                    fresh.add(req.running_seq)
            self.fresh.clear()
        if not events:
            return False
        kv = self.kv
        pool = self.pool
        running = self.running
        paged = self._paged
        num_paged = len(paged)
        skip_phases = self._skip_phases
        caching = kv.caching
        preempted = False
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
                    while not kv.allocate_slots(req, 1):  # preempt until it fits
                        victim = self._preempt_last()
                        preempted = True
                        if victim is req:
                            return True  # it was the last running request
                    continue
                tables = req.block_ids
                for group, block_id in zip(paged, pool.allocate(num_paged), strict=True):
                    tables[group].append(block_id)
            if caching:
                kv._cache_full_blocks(req, c + 1)
        return preempted

    def _admit_waiting(
        self, now_s: float, scheduled: list[tuple[SimRequest, int]], budget: int
    ) -> int:
        cfg = self.config
        kv = self.kv
        sched = self.sched
        while len(self.waiting) and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self.waiting.peek()
            hits: list[list[int]] = []
            num_hit = 0
            if req.num_computed_tokens == 0 and kv.caching:
                hits, num_hit = kv.find_cache_hit(req)
            num_new = req.num_tokens - num_hit
            if not cfg.enable_chunked_prefill and num_new > budget:
                break
            num_new = min(num_new, budget)
            if not kv.allocate_slots(req, num_new, hits, num_hit):
                break
            sched._admit(req, num_hit, 0, "")
            sched.running.pop()  # the fast path keeps its own running order
            self._admit(req)
            self.explicit[req.running_seq] = req
            req.num_computed_tokens = num_hit
            req.status = "running"
            scheduled.append((req, num_new))
            budget -= num_new
        return budget

    def _apply(self, now_s: float, scheduled: list[tuple[SimRequest, int]]) -> float:
        num_prefill = 0
        pairs = 0.0
        prefill_ctx = 0
        extra_decode = 0
        extra_ctx = 0
        for req, n in scheduled:
            c = req.num_computed_tokens
            if n == 1 and req.num_output_tokens > 0 and c == req.num_tokens - 1:
                extra_decode += 1
                extra_ctx += c + 1
            else:
                num_prefill += n
                pairs += n * (c + (n + 1) / 2)
                prefill_ctx += c + n
        num_dec = self.num_decoders
        shape = BatchShape(
            num_prefill,
            pairs,
            prefill_ctx,
            num_dec + extra_decode,
            self.decode_ctx + num_dec + extra_ctx,
        )
        duration = self.timing.step_time_s(shape)
        end_s = now_s + duration
        core = self.core
        times = self.token_times
        if times is not None:
            self.step_ends.append(end_s)  # step g + 1 ends at step_ends[g]
        self.num_steps += 1
        core.num_steps += 1
        self.g += 1
        self.decode_ctx += num_dec
        core.generation_tokens += num_dec
        finished: list[SimRequest] = []
        heap = self._finish_heap
        while heap and heap[0][0] <= self.g:
            _, seq, g0, req = heapq.heappop(heap)
            if req.lazy_g0 != g0 or self.running.get(seq) is not req:
                continue  # stale entry (the request was preempted)
            # bring its lazy counters up to date: the completed/cancelled split below reads
            # num_output_tokens (stale, it classed a completed decoder as cancelled and
            # freed it after the cancelled ones: a different free-queue order than EngineCore)
            self._materialize(req)
            finished.append(req)
        joined: list[SimRequest] = []
        for req, n in scheduled:
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now_s
            req.num_computed_tokens += n
            if req.num_computed_tokens < req.num_tokens:
                continue
            req.num_output_tokens += 1
            core.generation_tokens += 1
            if times is not None:
                times.setdefault(req.spec.request_id, []).append(end_s)
            if req.first_token_s is None:
                req.first_token_s = end_s
                core.prompt_tokens += req.num_prompt_tokens
            if req.num_output_tokens >= req.output_limit:
                finished.append(req)
            else:
                joined.append(req)
        # completed requests free their blocks first, then cancelled ones (as the explicit
        # path: the engine finishes inside its step, the client aborts after it)
        completed = [r for r in finished if r.num_output_tokens >= r.spec.max_output_tokens]
        cancelled = [r for r in finished if r.num_output_tokens < r.spec.max_output_tokens]
        for req in completed + cancelled:
            self._drop_running(req)
            self.kv.free(req)
            done = req.num_output_tokens >= req.spec.max_output_tokens
            req.status = "finished" if done else "aborted"
            req.finish_reason = "length" if done else "cancelled"
            req.finish_s = end_s
            core.requests.pop(req.spec.request_id, None)
            if done:
                core.num_finished += 1
            if core.keep_finished:
                core.finished.append(req)
        for req in joined:
            del self.explicit[req.running_seq]
            self._add_decoder(req)
        if joined and not self.kv.single_full:
            self.fresh.extend(joined)
        return duration
