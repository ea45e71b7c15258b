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
  chunk left behind. With several groups (sliding, state, or more than one full group) or KV
  tiers, the decoders of those buckets take ``allocate_slots(req, 1)``'s steps exactly as the
  explicit engine does, in running order (a free and another decoder's allocation do not
  commute: an unhashed freed block is reused first; a tier sees evictions and registrations in
  the order they happen); :mod:`kvbudget.sim.fastpath_events`;
* prefills, admissions (with a tier lookup) and preemptions (with a swap to the CPU tier):
  done exactly as the explicit engine does them;
* KV tier reloads: a reloading request stays in the running list unscheduled and, once loaded,
  prefills ahead of later decoders with the budget first, so from the step that admits it
  until no request reloads and none prefills ahead of a decoder, ``EngineCore`` itself steps
  the replica (:mod:`kvbudget.sim.fastpath_modes`); the same when ``long_prefill_token_threshold``
  caps a prefill chunk and a later, shorter prompt starts decoding behind it.

The step-time model sees the same batch (decode count and summed context are kept as running
sums). The result is identical to stepping :class:`EngineCore` (same block ids, eviction order,
tier contents, times); ``tests/unit/sim/test_sim_fastpath.py`` checks that on random workloads
and ``tests/property/sim/test_sim_fastpath_lockstep.py`` after every step, on dense, Gemma-2
(1 sliding : 1 full), Gemma-3 (5 sliding : 1 full), sliding-only, two-window and state-group
layouts, with and without CPU/disk tiers, a ``long_prefill_token_threshold``, chunked prefill
off, requests that end at ``max_model_len`` and ``max_num_seqs`` above
``max_num_batched_tokens``, FCFS and priority scheduling (a priority step that could
preempt runs on ``EngineCore``: :meth:`FastEngine.may_preempt`): every replica configuration.
``max_num_seqs`` above ``max_num_batched_tokens`` holds because the decoders never outnumber a
step's tokens (a request starts decoding in a step that computed at least one of its tokens,
beside one token per earlier decoder), so every decoder is scheduled in every step, as the lazy
step assumes. With one full group the
registration of a decoder's filled blocks is deferred (``BlockPool.defer``: registered when it
leaves or when another request uses its root, in the order it would have had). The replica
keeps P/D decode replicas and KV transfers on the explicit engine.
"""

from __future__ import annotations

import heapq

from kvbudget.errors import SimulationError
from kvbudget.sim.blockpool import HashSource
from kvbudget.sim.engine import EngineCore, StepResult
from kvbudget.sim.fastpath_events import group_events, single_group_events
from kvbudget.sim.fastpath_modes import explicit_step, lazy_ok, to_explicit, to_lazy
from kvbudget.sim.fastpath_step import admit_waiting, apply_step
from kvbudget.sim.request import RequestIn, SimRequest


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
        sched = core.scheduler
        #: KV tiers (the replica set the hooks): evictions, registrations and swaps write to
        #: a tier, so every decoder event is taken in running order, and a reload is stepped
        #: on the explicit engine (:meth:`_to_explicit`)
        self.tiered = (
            core.pool.on_evict is not None
            or core.kv.on_cache is not None
            or sched.tier_lookup is not None
            or sched.on_preempt is not None
        )
        self._events = (
            single_group_events if core.kv.single_full and not self.tiered else group_events
        )
        #: one full group, lazy registration, block size > 1: a decoder's filled blocks are
        #: registered when it leaves or when another request uses its root (the pool's flush
        #: hook), not in each step that fills one; ``fill_phase`` holds the decoders that
        #: still register in the step their token fills a block (another decoder holds the
        #: deferral of their root), else it is ``phase`` itself
        self._defer = (
            self._events is single_group_events
            and core.kv.lazy
            and core.kv.caching
            and core.pool.enable_caching
            and self.block_size > 1
        )
        self.fill_phase: list[dict[int, SimRequest]] = (
            [{} for _ in range(self.block_size)] if self._defer else self.phase
        )
        #: the decode step up to which filled blocks count as registered: ``g + 1`` once a
        #: step's fill registrations are due (:func:`single_group_events`), ``g`` before
        self.reg_g = 0
        if self._defer:
            core.pool.set_flush(self._flush_deferred)
        #: priority scheduling: a preemption's victim is the running request with the largest
        #: ``(priority, arrival)``, and when it is the request being scheduled the rest of the
        #: running list waits a step (vLLM's scheduler breaks out of its loop); the lazy step
        #: advances every decoder, so a step that could preempt runs on ``EngineCore``
        self.priority = core.config.policy == "priority"
        #: stepping ``EngineCore`` itself (a request is reloading, or a reloaded one prefills
        #: ahead of decoders); the running requests are then in ``scheduler.running``
        self.explicit_mode = False
        #: a request was admitted to reload from a tier in this step
        self._loading = False
        #: a running request was preempted in this step (no admissions then, as Scheduler)
        self.preempted = False
        #: a request started decoding behind one still prefilling (a prefill chunk capped by
        #: ``long_prefill_token_threshold`` left budget for a later, shorter prompt)
        self._disorder = False
        self._now_s = 0.0
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
        #: the last step's explicit result (``None``: it was a lazy step) and a lazy step's
        #: prefill chunks: which requests it stamped (:meth:`Replica.retime_last_step`)
        self.last_explicit: StepResult | None = None
        self.last_scheduled: list[tuple[SimRequest, int]] = []

    # ------------------------------------------------------------------ lazy bookkeeping
    def _materialize(self, req: SimRequest) -> None:
        if req.lazy_g0 >= 0:
            d = self.g - req.lazy_g0
            req.num_computed_tokens = req.lazy_c0 + d
            req.num_output_tokens = req.lazy_o0 + d

    def _flush_deferred(self, source: HashSource) -> None:
        """Register a deferred decoder's filled blocks, as registering each in the step its
        token filled it would have by now (the pool's flush hook)."""
        assert isinstance(source, SimRequest)
        self.kv._cache_full_blocks(source, source.lazy_c0 + self.reg_g - source.lazy_g0)

    def _add_decoder(self, req: SimRequest) -> None:
        req.lazy_g0 = self.g
        req.lazy_c0 = req.num_computed_tokens
        req.lazy_o0 = req.num_output_tokens
        phase = (self.g - req.lazy_c0) % self.block_size
        self.phase[phase][req.running_seq] = req
        if self._defer:
            hashes = req.block_hashes
            if not (hashes and self.pool.defer(hashes[0], req)):
                self.fill_phase[phase][req.running_seq] = req
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
        phase = (req.lazy_g0 - req.lazy_c0) % self.block_size
        if self._defer:
            hashes = req.block_hashes
            pool = self.pool
            if hashes and pool._deferred.get(hashes[0]) is req:
                pool.undefer(hashes[0])  # its blocks filled so far, registered now
                self.kv._cache_full_blocks(req, req.lazy_c0 + self.reg_g - req.lazy_g0)
            else:
                del self.fill_phase[phase][req.running_seq]
        del self.phase[phase][req.running_seq]
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

    def _allocate_or_preempt(self, req: SimRequest, num_tokens: int) -> bool:
        """``allocate_slots(req, num_tokens)``, preempting the last running request until it
        fits (as ``Scheduler`` does); False when ``req`` itself was preempted. A preemption
        sets :attr:`preempted` (no admissions in this step)."""
        while not self.kv.allocate_slots(req, num_tokens):
            self.preempted = True
            if self._preempt_last() is req:
                return False
        return True

    def _preempt_last(self) -> SimRequest:
        if self.priority:  # may_preempt() sends every step that could get here to EngineCore
            raise SimulationError("fast path: a priority replica preempted in a lazy step")
        victim = self.running[next(reversed(self.running))]
        self._drop_running(victim)
        if self.sched.on_preempt is not None:
            self.sched.on_preempt(victim, self._now_s)  # swap to the CPU tier, then free
        self.kv.free(victim)
        victim.status = "waiting"
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        self.sched.num_preemptions += 1
        self.waiting.prepend(victim)
        return victim

    def has_work(self) -> bool:
        return bool(self.running) or bool(self.sched.running) or bool(len(self.waiting))

    def num_running(self) -> int:
        """Running requests (lazy or, in explicit mode, the scheduler's)."""
        return len(self.running) + len(self.sched.running)

    def add_request(self, req: RequestIn) -> SimRequest:
        return self.core.add_request(req)

    # ------------------------------------------------------------------ one step
    def may_preempt(self) -> bool:
        """Whether the next lazy step could run out of blocks before its admissions (which
        stop, not preempt, at a full pool): every decoder at a block boundary takes a block
        per paged group, and every prefilling request at most the blocks for all its tokens
        so far (a bound: its chunk may be shorter; sliding frees only add room)."""
        size = self.block_size
        paged = self._paged
        need = len(self.phase[self.g % size]) * len(paged)
        if self.explicit:
            num_state = self.kv.num_groups - len(paged)
            max_len = self.config.max_model_len
            for req in self.explicit.values():
                tables = req.block_ids
                num_blocks = -(-min(req.num_tokens, max_len) // size)
                for group in paged:
                    need += max(0, num_blocks - len(tables[group]))
                if num_state:
                    need += sum(1 for g, t in enumerate(tables) if g not in paged and not t)
        return need > self.pool.num_free_blocks

    def step(self, now_s: float) -> float:
        """Schedule and apply one step at ``now_s``; returns its duration (0 = nothing ran)."""
        if self.priority and not self.explicit_mode and self.may_preempt():
            to_explicit(self)  # this step on EngineCore (its victim rule), then back
        if self.explicit_mode:
            result = explicit_step(self.core, now_s, self.token_times)
            self.last_explicit = result
            if lazy_ok(self):
                to_lazy(self)
            return result.duration_s
        self.last_explicit = None
        self._now_s = now_s
        duration = self._lazy_step(now_s)
        if self._loading or self._disorder:
            to_explicit(self)
        return duration

    def _lazy_step(self, now_s: float) -> float:
        cfg = self.config
        # 1. the running decoders whose blocks change in this step, in running order
        self.preempted = False
        self._events(self)
        # 2. the explicit (prefilling) running requests, in running order
        budget = cfg.max_num_batched_tokens - self.num_decoders
        threshold = cfg.long_prefill_token_threshold
        scheduled: list[tuple[SimRequest, int]] = []
        for seq in list(self.explicit):
            req = self.explicit.get(seq)
            if req is None or budget <= 0:
                continue
            num_new = req.num_tokens - req.num_computed_tokens
            if threshold and num_new > threshold:
                num_new = threshold
            num_new = min(num_new, budget, cfg.max_model_len - req.num_computed_tokens)
            if num_new <= 0:
                continue
            if not self._allocate_or_preempt(req, num_new):
                break
            scheduled.append((req, num_new))
            budget -= num_new
        # 3. waiting requests (only if nothing was preempted)
        if not self.preempted:
            budget = admit_waiting(self, now_s, scheduled, budget)
        self.last_scheduled = scheduled
        if not scheduled and self.num_decoders == 0:
            self.reg_g = self.g  # no step: no decoder token was scheduled
            return 0.0
        return apply_step(self, now_s, scheduled)
