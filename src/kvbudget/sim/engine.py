"""``EngineCore``: one simulated engine replica, stepped by its caller.

The contract (team brief, interface 7) used by the embedded HTTP server (``serve``) and by the
simulator's own replica driver::

    core = EngineCore(config, timing, rng)
    core.add_request(planned_request)          # PlannedRequest or EngineRequest
    while core.has_work():
        result = core.step(now_s)              # StepResult(duration_s, outputs)
        now_s += result.duration_s             # tokens in result.outputs exist at now_s
    core.abort_request(request_id)             # frees its blocks now
    core.reset_prefix_cache() -> bool
    core.stats() -> EngineStats

``step`` schedules one batch (see :mod:`kvbudget.sim.scheduler`), prices it with the step-time
model and applies it: computed tokens advance, each request whose prompt is fully computed emits
one token, finished requests free their blocks (tail first). A step with nothing to compute
returns ``duration_s == 0`` and no outputs (e.g. every running request is reloading KV from a
tier; :meth:`EngineCore.next_ready_s` says when to call again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from kvbudget.errors import ConfigError, SimulationError
from kvbudget.sim.blockpool import BlockPool, EvictHook
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.kvcache import KVCacheManager
from kvbudget.sim.prefix import ChainHasher
from kvbudget.sim.request import RequestIn, SimRequest, as_engine_request, generated_token_id
from kvbudget.sim.scheduler import Scheduler, SchedulerOutput
from kvbudget.sim.timing import BatchShape, StepTimeModel


@dataclass(frozen=True, slots=True)
class TokenOutput:
    """One generated token."""

    request_id: str
    token_index: int
    token_id: int
    num_cached_tokens: int
    finished: bool
    finish_reason: str | None


@dataclass(frozen=True, slots=True)
class StepResult:
    """One engine step: how long it took (simulated) and the tokens it produced."""

    duration_s: float
    outputs: list[TokenOutput] = field(default_factory=list)
    num_scheduled_tokens: int = 0
    num_preempted: int = 0


@dataclass(slots=True, init=False, unsafe_hash=True)
class EngineStats:
    """A snapshot, named like vLLM's metrics (tokens for prefix-cache counters)."""

    num_running: Final[int]
    num_waiting: Final[int]
    kv_usage: Final[float]
    prefix_cache_queries_tokens: Final[int]
    prefix_cache_hits_tokens: Final[int]
    num_preemptions: Final[int]
    prompt_tokens: Final[int]
    generation_tokens: Final[int]
    num_free_blocks: Final[int]
    num_total_blocks: Final[int]
    prefix_cache_queries_blocks: Final[int]
    prefix_cache_hits_blocks: Final[int]
    num_evicted_blocks: Final[int]
    num_finished: Final[int]

    def __init__(
        self,
        num_running: int,
        num_waiting: int,
        kv_usage: float,
        prefix_cache_queries_tokens: int,
        prefix_cache_hits_tokens: int,
        num_preemptions: int,
        prompt_tokens: int,
        generation_tokens: int,
        num_free_blocks: int,
        num_total_blocks: int,
        prefix_cache_queries_blocks: int = 0,
        prefix_cache_hits_blocks: int = 0,
        num_evicted_blocks: int = 0,
        num_finished: int = 0,
    ) -> None:
        self.num_running = num_running
        self.num_waiting = num_waiting
        self.kv_usage = kv_usage
        self.prefix_cache_queries_tokens = prefix_cache_queries_tokens
        self.prefix_cache_hits_tokens = prefix_cache_hits_tokens
        self.num_preemptions = num_preemptions
        self.prompt_tokens = prompt_tokens
        self.generation_tokens = generation_tokens
        self.num_free_blocks = num_free_blocks
        self.num_total_blocks = num_total_blocks
        self.prefix_cache_queries_blocks = prefix_cache_queries_blocks
        self.prefix_cache_hits_blocks = prefix_cache_hits_blocks
        self.num_evicted_blocks = num_evicted_blocks
        self.num_finished = num_finished


class EngineCore:
    """A vLLM-V1-like engine: block pool, prefix cache, scheduler and a step-time model."""

    def __init__(
        self,
        config: ReplicaConfig,
        timing: StepTimeModel,
        rng: np.random.Generator,
        *,
        vocab_size: int = 32000,
        on_evict: EvictHook | None = None,
        keep_finished: bool = False,
    ) -> None:
        self.config = config
        self.timing = timing
        self.rng = rng
        self.vocab_size = vocab_size
        self.pool = BlockPool(
            config.num_gpu_blocks,
            enable_caching=config.prefix_caching_effective,
            on_evict=on_evict,
        )
        self.kv = KVCacheManager(config, self.pool)
        self._caching = config.prefix_caching_effective
        self._plain_hasher = ChainHasher(config.block_size, algo=config.hash_algo)
        self.scheduler = Scheduler(config, self.kv)
        self.requests: dict[str, SimRequest] = {}
        self._arrivals = 0
        self._seeds: list[int] = []
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.num_finished = 0
        self.num_steps = 0
        #: finished/aborted requests, kept only when ``keep_finished`` (the offline simulator)
        self.keep_finished = keep_finished
        self.finished: list[SimRequest] = []

    # ------------------------------------------------------------------ requests
    def add_request(self, req: RequestIn) -> SimRequest:
        """Queue a ``PlannedRequest`` / ``EngineRequest``; refuses one that can never fit."""
        spec = as_engine_request(req)
        cfg = self.config
        num_prompt = spec.num_prompt_tokens
        if spec.request_id in self.requests:
            raise ConfigError(
                f"request_id {spec.request_id!r} is already in the engine; ids must be unique",
                field="request_id",
            )
        if num_prompt < 1 or spec.max_output_tokens < 1:
            raise ConfigError(
                f"request {spec.request_id}: prompt ({num_prompt}) and output "
                f"({spec.max_output_tokens}) tokens must both be >= 1",
                field="request",
            )
        total = num_prompt + spec.max_output_tokens
        if total > cfg.max_model_len:
            raise ConfigError(
                f"request {spec.request_id}: {num_prompt} prompt + "
                f"{spec.max_output_tokens} output tokens exceed max_model_len "
                f"{cfg.max_model_len}; shorten it or raise max_model_len",
                field="request",
            )
        need = cfg.blocks_for_tokens(total - 1)
        if need > cfg.num_usable_blocks:
            raise ConfigError(
                f"request {spec.request_id}: {total} tokens need {need} KV blocks; the replica "
                f"has {cfg.num_usable_blocks} (block_size {cfg.block_size}); shorten the "
                "request or give the replica more KV memory",
                field="request",
            )
        hasher = None
        if not self._caching:
            pass
        elif spec.adapter_id is None and not spec.mm_hashes and spec.cache_salt is None:
            hasher = self._plain_hasher  # no extra keys: one stateless hasher serves all
        else:
            hasher = ChainHasher(
                cfg.block_size,
                algo=cfg.hash_algo,
                adapter_id=spec.adapter_id,
                mm_hashes=spec.mm_hashes,
                cache_salt=spec.cache_salt,
            )
        sim_req = SimRequest(
            spec=spec,
            seed=self._next_seed(),
            vocab_size=self.vocab_size,
            hasher=hasher,
            arrival_order=self._arrivals,
        )
        self._arrivals += 1
        self.requests[spec.request_id] = sim_req
        self.scheduler.add(sim_req)
        return sim_req

    def _next_seed(self) -> int:
        """Per-request seeds, drawn from the engine's generator 1024 at a time."""
        if not self._seeds:
            self._seeds = self.rng.integers(0, 2**31 - 1, size=1024).tolist()[::-1]
        return int(self._seeds.pop())

    def abort_request(self, request_id: str) -> bool:
        """Drop a request now, freeing its blocks; ``False`` if unknown or already done."""
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        self.scheduler.remove(req)
        self.kv.free(req)
        req.status = "aborted"
        req.finish_reason = "abort"
        if self.keep_finished:
            self.finished.append(req)
        return True

    def has_work(self) -> bool:
        """Anything waiting or running."""
        return bool(self.scheduler.running) or bool(len(self.scheduler.waiting))

    def next_ready_s(self) -> float | None:
        """Earliest end of a tier reload among running requests (``None`` if none)."""
        times = [r.loading_until_s for r in self.scheduler.running if r.status == "loading"]
        return min(times) if times else None

    # ------------------------------------------------------------------ stepping
    def batch_shape(self, out: SchedulerOutput) -> BatchShape:
        """Aggregate a schedule for the step-time model."""
        num_prefill = 0
        pairs = 0.0
        prefill_ctx = 0
        num_decode = 0
        decode_ctx = 0
        for req, n in out.scheduled:
            c = req.num_computed_tokens
            if n == 1 and req.num_output_tokens > 0 and c == req.num_tokens - 1:
                num_decode += 1
                decode_ctx += c + 1
            else:
                num_prefill += n
                pairs += n * (c + (n + 1) / 2)
                prefill_ctx += c + n
        return BatchShape(num_prefill, pairs, prefill_ctx, num_decode, decode_ctx)

    def step(self, now_s: float) -> StepResult:
        """Schedule, price and apply one step starting at ``now_s``."""
        out = self.scheduler.schedule(now_s)
        if not out.scheduled:
            sched = self.scheduler
            if not sched.running and len(sched.waiting):
                head = sched.waiting.peek()
                raise SimulationError(
                    f"request {head.request_id} cannot be scheduled on an idle replica: it "
                    f"needs {self.config.blocks_for_tokens(head.num_tokens)} KV blocks, "
                    f"{self.pool.num_free_blocks} are free; give the replica more blocks"
                )
            return StepResult(0.0, [], 0, len(out.preempted))
        duration = self.timing.step_time_s(self.batch_shape(out))
        end_s = now_s + duration
        self.num_steps += 1
        outputs: list[TokenOutput] = []
        finished: list[SimRequest] = []
        for req, n in out.scheduled:
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now_s
            req.num_computed_tokens += n
            if req.num_computed_tokens < req.num_tokens:
                continue  # chunked prefill not done yet
            index = req.num_output_tokens
            req.num_output_tokens += 1
            self.generation_tokens += 1
            if req.first_token_s is None:
                req.first_token_s = end_s
                self.prompt_tokens += req.num_prompt_tokens
            reason = None
            if req.num_output_tokens >= req.spec.max_output_tokens:
                reason = "length"
            outputs.append(
                TokenOutput(
                    req.spec.request_id,
                    index,
                    generated_token_id(req.seed, index, self.vocab_size),
                    req.num_cached_tokens,
                    reason is not None,
                    reason,
                )
            )
            if reason is not None:
                req.finish_reason = reason
                req.finish_s = end_s
                finished.append(req)
        if finished:
            for req in finished:
                self._finish(req)
        return StepResult(duration, outputs, out.num_scheduled_tokens, len(out.preempted))

    def _finish(self, req: SimRequest) -> None:
        self.scheduler.running.remove(req)
        self.kv.free(req)
        req.status = "finished"
        self.requests.pop(req.spec.request_id, None)
        self.num_finished += 1
        if self.keep_finished:
            self.finished.append(req)

    # ------------------------------------------------------------------ cache and stats
    def reset_prefix_cache(self) -> bool:
        """Clear the hash table; refused (``False``) while any request holds blocks."""
        return self.pool.reset_prefix_cache()

    def stats(self) -> EngineStats:
        s = self.scheduler
        return EngineStats(
            num_running=len(s.running),
            num_waiting=len(s.waiting),
            kv_usage=self.pool.usage(),
            prefix_cache_queries_tokens=s.prefix_queries_tokens,
            prefix_cache_hits_tokens=s.prefix_hits_tokens,
            num_preemptions=s.num_preemptions,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
            num_free_blocks=self.pool.num_free_blocks,
            num_total_blocks=self.pool.num_blocks,
            prefix_cache_queries_blocks=s.prefix_queries_blocks,
            prefix_cache_hits_blocks=s.prefix_hits_blocks,
            num_evicted_blocks=self.pool.num_evictions,
            num_finished=self.num_finished,
        )
