"""The ``sim`` target: the simulated engine (``sim.engine.EngineCore``) in virtual time.

One engine instance serves the whole acceptance run (warm-up, then the cells in order), so the
prefix cache carries over between cells as it would on a real server. Each cell is driven on
its own timeline starting at 0:

* closed loop (``closed_loop_concurrency`` given): that many requests in flight; a finished
  request is replaced by the next one until ``duration_s`` has passed or the list is used up;
* open loop: each request enters at its planned ``arrival_s``.

A request the engine can never fit (longer than ``max_model_len`` or than the whole KV pool)
is recorded as an error and reported as the cell's capacity error.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kvbudget.accept.targets import CellRun, TargetInfo
from kvbudget.accept.tier_checks import TierMeter
from kvbudget.errors import ConfigError, SimulationError
from kvbudget.records import MetricSample, RequestRecord, derive_latencies
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.tiers import Tier, TierConfig, TierStack
from kvbudget.sim.timing import StepTimeModel
from kvbudget.workload.request import PlannedRequest

#: hard bound on engine steps per cell (a runaway guard, far above any planned cell)
MAX_STEPS_PER_CELL = 2_000_000
#: keep a KV/queue sample at most this often (virtual seconds)
SAMPLE_EVERY_S = 0.2


@dataclass(slots=True)
class _Live:
    req: PlannedRequest
    sent_s: float
    first_token_s: float | None = None
    num_tokens: int = 0
    cached_tokens: int = 0
    token_ids: list[int] = field(default_factory=list)


def _prompt_sha256(req: PlannedRequest) -> str:
    """sha256 of the prompt's token ids as little-endian uint32 (``"ids:"`` prefixed).

    Simulated prompts are synthetic token sequences; hashing the ids instead of the decoded text
    saves decoding every prompt (a fifth of a run's CPU). HTTP records hash the text instead.
    """
    ids = np.asarray(req.prompt_token_ids, dtype="<u4").tobytes()
    return hashlib.sha256(b"ids:" + ids).hexdigest()


class SimTarget:
    """Drives one simulated replica; every record is ``source="simulated"``."""

    def __init__(
        self,
        config: ReplicaConfig,
        timing: StepTimeModel,
        rng: np.random.Generator,
        *,
        info: TargetInfo,
        hash_prompts: bool = True,
        tiers: Sequence[TierConfig] = (),
    ) -> None:
        self.config = config
        self.tier_stack: TierStack | None = None
        if tiers:
            block_bytes = config.kv_bytes_per_token * config.block_size
            if block_bytes <= 0:
                raise ConfigError(
                    "target.kv_tiers: the replica's KV bytes per token is unknown (0); tiers "
                    "need it to size blocks; remove kv_tiers or plan from a catalog model",
                    field="target.kv_tiers",
                )
            self.tier_stack = TierStack(
                [Tier(t, block_bytes) for t in tiers], timing, config.block_size
            )
        stack = self.tier_stack
        self.engine = EngineCore(
            config, timing, rng, on_evict=stack.on_gpu_evict if stack is not None else None
        )
        if stack is not None:
            # the same wiring as sim.replica.Replica
            self.engine.scheduler.tier_lookup = stack.lookup
            if stack.has_cpu:
                self.engine.scheduler.on_preempt = stack.on_preempt
            self.engine.kv.on_cache = lambda keys: stack.on_cache(keys, stack.now_s)
        self._info = info
        self._hash_prompts = hash_prompts
        self._clock_s = 0.0

    @property
    def info(self) -> TargetInfo:
        return self._info

    def idle_baseline(self) -> dict[str, float]:
        stats = self.engine.stats()
        return {
            "kv_usage": stats.kv_usage,
            "num_running": float(stats.num_running),
            "num_waiting": float(stats.num_waiting),
            "num_free_blocks": float(stats.num_free_blocks),
            "num_total_blocks": float(stats.num_total_blocks),
        }

    def close(self) -> None:
        return None

    def run_cell(
        self,
        requests: Sequence[PlannedRequest],
        *,
        cell_id: str,
        closed_loop_concurrency: int | None,
        duration_s: float | None,
        warmup: bool = False,
    ) -> CellRun:
        engine = self.engine
        base = self._clock_s
        start_stats = engine.stats()
        meter = TierMeter(self.tier_stack) if self.tier_stack is not None else None
        queue = deque(sorted(requests, key=lambda r: r.arrival_s))
        live: dict[str, _Live] = {}
        records: list[RequestRecord] = []
        capacity_error: str | None = None
        samples: list[MetricSample] = []
        last_sample = -1.0
        now = 0.0

        def finish(rid: str, status: str, reason: str | None, error: str | None = None) -> None:
            item = live.pop(rid)
            done = now
            ttft, tpot, e2e = derive_latencies(
                sent_s=item.sent_s,
                first_token_s=item.first_token_s,
                done_s=done,
                output_tokens=item.num_tokens,
            )
            records.append(
                RequestRecord(
                    request_id=rid,
                    source="simulated",
                    status="cancelled" if status == "cancelled" else "ok",
                    error_kind="cancelled" if status == "cancelled" else None,
                    cell_id=cell_id,
                    tenant=item.req.tenant,
                    warmup=warmup,
                    finish_reason=reason,
                    scheduled_s=item.req.arrival_s,
                    sent_s=item.sent_s,
                    first_token_s=item.first_token_s,
                    done_s=done,
                    prompt_tokens=item.req.prompt_tokens,
                    output_tokens=item.num_tokens,
                    cached_tokens=item.cached_tokens,
                    token_count_source="simulated",
                    preemptions=_preemptions.pop(rid, 0),
                    queue_s=_queue.pop(rid, None),
                    ttft_s=ttft,
                    tpot_s=tpot,
                    e2e_s=e2e,
                    prompt_sha256=_prompt_sha256(item.req) if self._hash_prompts else None,
                )
            )

        _preemptions: dict[str, int] = {}
        _queue: dict[str, float] = {}

        def admit(req: PlannedRequest) -> None:
            nonlocal capacity_error
            try:
                sim_req = engine.add_request(req)
            except ConfigError as exc:
                message = str(exc)
                capacity_error = capacity_error or message
                records.append(
                    RequestRecord(
                        request_id=req.request_id,
                        source="simulated",
                        status="error",
                        error_kind="other",
                        error_excerpt=message[:200],
                        cell_id=cell_id,
                        tenant=req.tenant,
                        warmup=warmup,
                        scheduled_s=req.arrival_s,
                        sent_s=now,
                        done_s=now,
                        prompt_tokens=req.prompt_tokens,
                        token_count_source="simulated",
                    )
                )
                return
            live[req.request_id] = _Live(req=req, sent_s=now)
            _sims[req.request_id] = sim_req

        _sims: dict[str, object] = {}
        closed = closed_loop_concurrency is not None
        limit_s = duration_s if duration_s is not None else float("inf")
        if closed:
            assert closed_loop_concurrency is not None
            while queue and len(live) < closed_loop_concurrency:
                admit(queue.popleft())
        steps = 0
        while True:
            if not closed:
                while queue and queue[0].arrival_s <= now + 1e-12:
                    admit(queue.popleft())
            if not engine.has_work():
                if closed:
                    if queue and now < limit_s:
                        admit(queue.popleft())
                        continue
                    break
                if queue:
                    now = max(now, queue[0].arrival_s)
                    continue
                break
            if self.tier_stack is not None:
                self.tier_stack.now_s = base + now
            result = engine.step(base + now)
            if meter is not None:
                meter.observe()
            steps += 1
            if steps > MAX_STEPS_PER_CELL:
                raise SimulationError(
                    f"cell {cell_id}: more than {MAX_STEPS_PER_CELL} engine steps; "
                    "reduce max_requests_per_cell or the tier durations"
                )
            if result.duration_s == 0.0:
                ready = engine.next_ready_s()
                nxt = [t - base for t in (ready,) if t is not None]
                if not closed and queue:
                    nxt.append(queue[0].arrival_s)
                if not nxt:
                    raise SimulationError(f"cell {cell_id}: the engine stalled with work queued")
                now = max(now, min(nxt))
                continue
            now += result.duration_s
            for out in result.outputs:
                item = live.get(out.request_id)
                if item is None:
                    continue
                if item.first_token_s is None:
                    item.first_token_s = now
                    item.cached_tokens = out.num_cached_tokens
                    sim_req = _sims.get(out.request_id)
                    first = getattr(sim_req, "first_scheduled_s", None)
                    if first is not None:
                        _queue[out.request_id] = max(0.0, float(first) - base - item.sent_s)
                item.num_tokens += 1
                cancel_at = item.req.cancel_after_tokens
                if out.finished:
                    sim_req = _sims.pop(out.request_id, None)
                    _preemptions[out.request_id] = int(getattr(sim_req, "num_preemptions", 0))
                    finish(out.request_id, "ok", out.finish_reason)
                elif cancel_at is not None and item.num_tokens >= cancel_at:
                    sim_req = _sims.pop(out.request_id, None)
                    _preemptions[out.request_id] = int(getattr(sim_req, "num_preemptions", 0))
                    engine.abort_request(out.request_id)
                    finish(out.request_id, "cancelled", "abort")
                if closed and out.request_id not in live and queue and now < limit_s:
                    assert closed_loop_concurrency is not None
                    while queue and len(live) < closed_loop_concurrency:
                        admit(queue.popleft())
            if now - last_sample >= SAMPLE_EVERY_S:
                last_sample = now
                stats = engine.stats()
                samples.extend(
                    (
                        MetricSample(timestamp_s=now, name="kv_usage", value=stats.kv_usage),
                        MetricSample(
                            timestamp_s=now, name="num_running", value=float(stats.num_running)
                        ),
                        MetricSample(
                            timestamp_s=now, name="num_waiting", value=float(stats.num_waiting)
                        ),
                    )
                )
        # anything left in the queue of a closed loop after the duration is simply not sent
        self._clock_s = base + now
        end_stats = engine.stats()
        counters = {
            "prefix_queries_tokens": float(
                end_stats.prefix_cache_queries_tokens - start_stats.prefix_cache_queries_tokens
            ),
            "prefix_hits_tokens": float(
                end_stats.prefix_cache_hits_tokens - start_stats.prefix_cache_hits_tokens
            ),
            "preemptions": float(end_stats.num_preemptions - start_stats.num_preemptions),
            "prompt_tokens": float(end_stats.prompt_tokens - start_stats.prompt_tokens),
            "generation_tokens": float(end_stats.generation_tokens - start_stats.generation_tokens),
        }
        if meter is not None:
            counters.update(meter.counters(now))
        return CellRun(
            records=records,
            duration_s=now,
            samples=samples,
            capacity_error=capacity_error,
            counters=counters,
            kv_usage_after_drain=end_stats.kv_usage,
        )
