"""A lazy fast-path step's admissions and its application (:class:`~kvbudget.sim.fastpath.FastEngine`).

``FastEngine._lazy_step`` schedules the decoders' events and the prefilling requests, then
:func:`admit_waiting` admits waiting requests as the explicit scheduler does, and :func:`apply_step` prices the batch, advances the decode counter
``G`` and finishes requests, exactly as ``EngineCore`` would (see :mod:`kvbudget.sim.fastpath`).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from kvbudget.sim.request import SimRequest
from kvbudget.sim.roofline import batch_shape

if TYPE_CHECKING:
    from kvbudget.sim.fastpath import FastEngine


def admit_waiting(
    fe: FastEngine, now_s: float, scheduled: list[tuple[SimRequest, int]], budget: int
) -> int:
    """Admit waiting requests into a lazy step, as ``Scheduler._schedule_waiting`` does (a
    request reloading from a tier sends the next steps to the explicit mode); returns the
    token budget left."""
    cfg = fe.config
    kv = fe.kv
    sched = fe.sched
    while len(fe.waiting) and budget > 0 and len(fe.running) < cfg.max_num_seqs:
        req = fe.waiting.peek()
        hits: list[list[int]] = []
        num_hit = 0
        if req.num_computed_tokens == 0 and kv.caching:
            hits, num_hit = kv.find_cache_hit(req)
        if sched.tier_lookup is not None and req.num_computed_tokens == 0:
            num_tier, ready_s, tier = sched.tier_lookup(req, num_hit, now_s)
            if num_tier > 0:  # as Scheduler._schedule_waiting: reload, compute later
                if not kv.allocate_slots(req, num_tier, hits, num_hit):
                    break
                sched._admit(req, num_hit, num_tier, tier)
                sched.running.pop()
                fe._admit(req)
                req.num_computed_tokens = num_hit + num_tier
                req.status = "loading"
                req.loading_until_s = ready_s
                fe._loading = True
                continue
        num_new = req.num_tokens - num_hit
        if cfg.long_prefill_token_threshold and num_new > cfg.long_prefill_token_threshold:
            num_new = cfg.long_prefill_token_threshold
        if not cfg.enable_chunked_prefill and num_new > budget:
            break
        num_new = min(num_new, budget)
        if not kv.allocate_slots(req, num_new, hits, num_hit):
            break
        sched._admit(req, num_hit, 0, "")
        sched.running.pop()  # the fast path keeps its own running order
        fe._admit(req)
        fe.explicit[req.running_seq] = req
        req.num_computed_tokens = num_hit
        req.status = "running"
        scheduled.append((req, num_new))
        budget -= num_new
    return budget


def apply_step(fe: FastEngine, now_s: float, scheduled: list[tuple[SimRequest, int]]) -> float:
    """Price a lazy step's batch, advance the decode counter, stamp the scheduled chunks' tokens
    and free the finished requests (completed first, then cancelled); returns its duration."""
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
    num_dec = fe.num_decoders
    shape = batch_shape(
        num_prefill,
        pairs,
        prefill_ctx,
        num_dec + extra_decode,
        fe.decode_ctx + num_dec + extra_ctx,
    )
    duration = fe.timing.step_time_s(shape)
    end_s = now_s + duration
    core = fe.core
    times = fe.token_times
    if times is not None:
        fe.step_ends.append(end_s)  # step g + 1 ends at step_ends[g]
    fe.num_steps += 1
    core.num_steps += 1
    fe.g += 1
    fe.decode_ctx += num_dec
    core.generation_tokens += num_dec
    finished: list[SimRequest] = []
    heap = fe._finish_heap
    while heap and heap[0][0] <= fe.g:
        _, seq, g0, req = heapq.heappop(heap)
        if req.lazy_g0 != g0 or fe.running.get(seq) is not req:
            continue  # stale entry (the request was preempted)
        # bring its lazy counters up to date: the completed/cancelled split below reads
        # num_output_tokens (stale, it classed a completed decoder as cancelled and
        # freed it after the cancelled ones: a different free-queue order than EngineCore)
        fe._materialize(req)
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
        fe._drop_running(req)
        fe.kv.free(req)
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
        del fe.explicit[req.running_seq]
        fe._add_decoder(req)
    if joined and fe.explicit and next(iter(fe.explicit)) < joined[-1].running_seq:
        fe._disorder = True  # (explicit is in running order: its first is the oldest)
    if joined and not fe.kv.single_full:
        fe.fresh.extend(joined)
    return duration
