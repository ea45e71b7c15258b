"""Continuous batching in the style of vLLM V1's scheduler.

Each step (``schedule``) has a token budget of ``max_num_batched_tokens``:

1. Running requests first, in order: each gets ``num_tokens - num_computed_tokens`` new tokens
   (1 for a decoding request; the rest of the prompt, chunked to the remaining budget, for a
   prefilling one). If its blocks cannot be allocated, a victim is preempted by recompute
   (FCFS: the last running request; priority: the largest ``(priority, arrival)``), its blocks
   are freed and it goes back to the front of the waiting queue; repeat until it fits or the
   victim is the request itself.
2. Only if nothing was preempted this step: waiting requests in order (FCFS queue, or a heap on
   ``(priority, arrival)``) while ``len(running) < max_num_seqs`` and budget remains; a request
   not yet computed first looks up the prefix cache (GPU, then lower tiers through
   ``tier_lookup``), then gets the rest of its prompt (chunked). Stop at the first that does not
   fit.

Preemption by swap (when the replica has a CPU tier) is done by the engine's ``on_preempt``
hook, which writes the victim's full blocks to the CPU tier before they are freed; on
rescheduling they come back through the tier lookup.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.kvcache import KVCacheManager
from kvbudget.sim.request import SimRequest

#: (request, GPU-hit tokens, now) -> (extra tokens reloaded from a tier, ready time, tier name)
TierLookup = Callable[[SimRequest, int, float], tuple[int, float, str]]
PreemptHook = Callable[[SimRequest, float], None]


@dataclass(slots=True)
class SchedulerOutput:
    """What one step computes."""

    scheduled: list[tuple[SimRequest, int]] = field(default_factory=list)
    preempted: list[SimRequest] = field(default_factory=list)
    num_scheduled_tokens: int = 0


class WaitingQueue:
    """FCFS deque or priority heap on ``(priority, arrival_order)``."""

    __slots__ = ("_deque", "_heap", "priority")

    def __init__(self, priority: bool) -> None:
        self.priority = priority
        self._deque: deque[SimRequest] = deque()
        self._heap: list[tuple[int, int, SimRequest]] = []

    def __len__(self) -> int:
        return len(self._heap) if self.priority else len(self._deque)

    def add(self, req: SimRequest) -> None:
        if self.priority:
            heapq.heappush(self._heap, (req.spec.priority, req.arrival_order, req))
        else:
            self._deque.append(req)

    def prepend(self, req: SimRequest) -> None:
        if self.priority:
            self.add(req)
        else:
            self._deque.appendleft(req)

    def peek(self) -> SimRequest:
        return self._heap[0][2] if self.priority else self._deque[0]

    def pop(self) -> SimRequest:
        return heapq.heappop(self._heap)[2] if self.priority else self._deque.popleft()

    def remove(self, req: SimRequest) -> bool:
        if self.priority:
            for i, item in enumerate(self._heap):
                if item[2] is req:
                    self._heap.pop(i)
                    heapq.heapify(self._heap)
                    return True
            return False
        try:
            self._deque.remove(req)
        except ValueError:
            return False
        return True

    def items(self) -> list[SimRequest]:
        if self.priority:
            return [item[2] for item in sorted(self._heap, key=lambda x: (x[0], x[1]))]
        return list(self._deque)


class Scheduler:
    """Waiting queue, running list, token budget and preemption."""

    def __init__(self, config: ReplicaConfig, kv: KVCacheManager) -> None:
        self.config = config
        self.kv = kv
        self.waiting = WaitingQueue(config.policy == "priority")
        self.running: list[SimRequest] = []
        self.tier_lookup: TierLookup | None = None
        self.on_preempt: PreemptHook | None = None
        self.num_preemptions = 0
        self.prefix_queries_tokens = 0
        self.prefix_hits_tokens = 0
        self.prefix_queries_blocks = 0
        self.prefix_hits_blocks = 0

    def add(self, req: SimRequest) -> None:
        self.kv.init_request(req)
        self.waiting.add(req)

    def _pick_victim(self) -> SimRequest:
        if self.config.policy == "priority":
            return max(self.running, key=lambda r: (r.spec.priority, r.arrival_order))
        return self.running[-1]

    def _preempt(self, victim: SimRequest, now_s: float) -> None:
        self.running.remove(victim)
        if self.on_preempt is not None:
            self.on_preempt(victim, now_s)
        self.kv.free(victim)
        victim.status = "waiting"
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.prepend(victim)

    def schedule(self, now_s: float) -> SchedulerOutput:
        cfg = self.config
        out = SchedulerOutput()
        budget = cfg.max_num_batched_tokens
        threshold = cfg.long_prefill_token_threshold
        scheduled_tokens: dict[int, int] = {}
        index = 0
        while index < len(self.running) and budget > 0:
            req = self.running[index]
            if req.status == "loading":
                if req.loading_until_s > now_s:
                    index += 1
                    continue
                req.status = "running"
            num_new = req.num_tokens - req.num_computed_tokens
            if threshold and num_new > threshold:
                num_new = threshold
            num_new = min(num_new, budget, cfg.max_model_len - req.num_computed_tokens)
            if num_new <= 0:
                index += 1
                continue
            scheduled_self = True
            while not self.kv.allocate_slots(req, num_new):
                victim = self._pick_victim()
                if id(victim) in scheduled_tokens:
                    budget += scheduled_tokens.pop(id(victim))
                    out.scheduled = [(r, n) for r, n in out.scheduled if r is not victim]
                if self.running.index(victim) < index:
                    index -= 1
                self._preempt(victim, now_s)
                out.preempted.append(victim)
                if victim is req:
                    scheduled_self = False
                    break
            if not scheduled_self:
                break
            out.scheduled.append((req, num_new))
            scheduled_tokens[id(req)] = num_new
            budget -= num_new
            index += 1

        if not out.preempted:
            self._schedule_waiting(now_s, out, budget)
        out.num_scheduled_tokens = sum(n for _, n in out.scheduled)
        return out

    def _schedule_waiting(self, now_s: float, out: SchedulerOutput, budget: int) -> None:
        cfg = self.config
        kv = self.kv
        threshold = cfg.long_prefill_token_threshold
        while len(self.waiting) and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self.waiting.peek()
            hits: list[list[int]] = []
            num_hit = 0
            if req.num_computed_tokens == 0 and kv.caching:
                hits, num_hit = kv.find_cache_hit(req)
            num_tier = 0
            ready_s = now_s
            tier = ""
            if self.tier_lookup is not None and req.num_computed_tokens == 0:
                num_tier, ready_s, tier = self.tier_lookup(req, num_hit, now_s)
            if num_tier > 0:
                # blocks for the reloaded span are allocated now; compute resumes once loaded
                num_new = req.num_tokens - num_hit - num_tier
                if not kv.allocate_slots(req, num_tier, hits, num_hit):
                    break
                self._admit(req, num_hit, num_tier, tier)
                req.num_computed_tokens = num_hit + num_tier
                req.status = "loading"
                req.loading_until_s = ready_s
                continue
            num_new = req.num_tokens - num_hit
            if threshold and num_new > threshold:
                num_new = threshold
            if not cfg.enable_chunked_prefill and num_new > budget:
                break
            num_new = min(num_new, budget)
            if not kv.allocate_slots(req, num_new, hits, num_hit):
                break
            self._admit(req, num_hit, 0, "")
            req.num_computed_tokens = num_hit
            req.status = "running"
            out.scheduled.append((req, num_new))
            budget -= num_new

    def _admit(self, req: SimRequest, num_hit: int, num_tier: int, tier: str) -> None:
        self.waiting.pop()
        self.running.append(req)
        size = self.kv.block_size
        if req.num_preemptions == 0:
            # as vLLM 0.32 (v1/metrics/stats.py PrefixCacheStats.record): the re-admission of
            # a preempted request goes to separate "preempted" stats, not to the counters
            # behind vllm:prefix_cache_queries / _hits (checked live against vLLM in
            # tests/integration/vllm/test_vllm_sim_counters.py)
            self.prefix_queries_tokens += req.num_tokens
            self.prefix_hits_tokens += num_hit + num_tier
            self.prefix_queries_blocks += req.num_tokens // size
            self.prefix_hits_blocks += (num_hit + num_tier) // size
        if not req.has_been_scheduled:
            req.has_been_scheduled = True
            if num_hit:
                req.cached_tokens_by_tier["gpu"] = num_hit
            if num_tier:
                req.cached_tokens_by_tier[tier] = num_tier

    def remove(self, req: SimRequest) -> bool:
        """Take ``req`` out of the running list or waiting queue (abort)."""
        if req in self.running:
            self.running.remove(req)
            return True
        return self.waiting.remove(req)
