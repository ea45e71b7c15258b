"""A simulated replica: an engine (fast path or explicit), optional KV tiers, its results.

The replica is stepped by the driver (:mod:`kvbudget.sim.driver`, for every path): ``step(now)``
runs one engine step and returns its duration; ``wake_s()`` says when a replica with only
reloading requests can continue. It also answers the router's questions from its real state:
outstanding requests, KV usage, queued prefill tokens, the prefix it has cached for a prompt.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.engine import EngineCore, TokenOutput
from kvbudget.sim.fastpath import FastEngine
from kvbudget.sim.fastpath_modes import explicit_step
from kvbudget.sim.prefix import BlockHash, block_hashes
from kvbudget.sim.request import EngineRequest, RequestIn, SimRequest
from kvbudget.sim.stepped import SteppedReplica
from kvbudget.sim.tiers import Tier, TierConfig, TierStack
from kvbudget.sim.timing import StepTimeModel


def preloaded_prompt(req: SimRequest, num_gpu_hit: int, now_s: float) -> tuple[int, float, str]:
    """P/D decode side: every prompt token but the last arrives with the request.

    As vLLM 0.32's scheduler after a remote KV load (``_update_waiting_for_remote_kv``: a fully
    loaded prompt recomputes its last token to sample the first output). Only on a request's
    first admission: a preempted request's KV is gone and is recomputed.
    """
    if req.has_been_scheduled:
        return 0, now_s, ""
    return max(0, req.num_prompt_tokens - 1 - num_gpu_hit), now_s, "transfer"


@dataclass(slots=True)
class KVSample:
    """One sample of a replica's state."""

    time_s: float
    replica: str
    kv_usage: float
    num_running: int
    num_waiting: int


@dataclass(slots=True)
class ReplicaSetup:
    """How to build one replica (the cluster may build more later: scale-out)."""

    config: ReplicaConfig
    timing: StepTimeModel
    tiers: tuple[TierConfig, ...] = ()
    #: a remote tier object shared between replicas (built by the cluster)
    shared_tiers: tuple[Tier, ...] = field(default_factory=tuple)
    fast_path: bool = True
    #: cache compatibility identity (a CacheIdentity digest); "" = one identity for all
    identity: str = ""
    #: P/D decode replica: a request arrives with its prompt's KV transferred (kvbudget.sim.disagg)
    kv_preloaded: bool = False
    #: requests flagged ``kv_transferred`` arrive with their KV (migration by transfer)
    accepts_transfers: bool = False
    #: keep every output token's time per request in ``Replica.token_times`` (ITL); off by
    #: default (plain ``kvbudget sim`` runs pay nothing)
    record_token_times: bool = False


class Replica(SteppedReplica[SimRequest]):
    """One engine replica inside the cluster (the driver's step protocol:
    :mod:`kvbudget.sim.stepped`)."""

    def __init__(
        self,
        name: str,
        setup: ReplicaSetup,
        rng: np.random.Generator,
        *,
        ready_s: float = 0.0,
        vocab_size: int = 32000,
    ) -> None:
        super().__init__(name, setup.timing, ready_s=ready_s)
        self.setup = setup
        cfg = setup.config.model_copy(update={"name": name})
        self.config = cfg
        self.tier_stack: TierStack | None = None
        if setup.tiers or setup.shared_tiers:
            block_bytes = cfg.kv_bytes_per_token * cfg.block_size
            if block_bytes <= 0:
                from kvbudget.errors import ConfigError

                raise ConfigError(
                    "tiers: the replica's kv_bytes_per_token is 0 (unknown); tiers need it to "
                    "size blocks; build the replica from a plan or set kv_bytes_per_token",
                    field="kv_bytes_per_token",
                )
            tiers = [Tier(t, block_bytes) for t in setup.tiers if t.name != "remote"]
            tiers.extend(setup.shared_tiers)
            self.tier_stack = TierStack(tiers, setup.timing, cfg.block_size, setup.identity)
        stack = self.tier_stack
        self.core = EngineCore(
            cfg,
            setup.timing,
            rng,
            vocab_size=vocab_size,
            on_evict=stack.on_gpu_evict if stack is not None else None,
            keep_finished=True,
        )
        if stack is not None:
            self.core.scheduler.tier_lookup = stack.lookup
            if stack.has_cpu:
                self.core.scheduler.on_preempt = stack.on_preempt
            self.core.kv.on_cache = lambda keys: stack.on_cache(keys, stack.now_s)
        if setup.kv_preloaded or setup.accepts_transfers:
            if setup.kv_preloaded and stack is not None:
                from kvbudget.errors import ConfigError

                raise ConfigError(
                    "disaggregation: a decode replica with KV tiers is not modelled; drop its tiers",
                    field="tiers",
                )
            inner = self.core.scheduler.tier_lookup
            everything = setup.kv_preloaded

            def lookup(req: SimRequest, num_gpu_hit: int, now_s: float) -> tuple[int, float, str]:
                if everything or req.spec.kv_transferred:
                    return preloaded_prompt(req, num_gpu_hit, now_s)
                return inner(req, num_gpu_hit, now_s) if inner is not None else (0, now_s, "")

            self.core.scheduler.tier_lookup = lookup
        # the fast path reproduces EngineCore for every replica configuration
        # (kvbudget.sim.fastpath); P/D decode replicas and KV transfers stay explicit
        use_fast = setup.fast_path and not setup.kv_preloaded and not setup.accepts_transfers
        self.fast: FastEngine | None = FastEngine(self.core) if use_fast else None
        #: async scheduling (``ReplicaConfig.async_scheduling``; the driver's fields:
        #: :class:`kvbudget.sim.stepped.SteppedReplica`)
        self.async_scheduling = setup.config.async_scheduling
        self.samples: list[KVSample] = []
        #: request id -> end time of each step that gave it an output token (when
        #: ``setup.record_token_times``); the caller pops a request's entry when it finishes
        self.token_times: dict[str, list[float]] | None = {} if setup.record_token_times else None
        if self.fast is not None and self.token_times is not None:
            self.fast.token_times = self.token_times

    # ------------------------------------------------------------------ driving
    def add(self, req: RequestIn) -> SimRequest:
        self.num_routed += 1
        if self.fast is not None:
            return self.fast.add_request(req)
        return self.core.add_request(req)

    def has_work(self) -> bool:
        return self.fast.has_work() if self.fast is not None else self.core.has_work()

    def step(self, now_s: float) -> float:
        """One engine step at ``now_s``; returns its duration (0 when nothing could run)."""
        if self.tier_stack is not None:
            self.tier_stack.now_s = now_s
        if self.fast is not None:
            return self.fast.step(now_s)
        result = explicit_step(self.core, now_s, self.token_times)
        self.last_outputs = result.outputs
        self.last_num_scheduled_tokens = result.num_scheduled_tokens
        return result.duration_s

    def retime_last_step(self, old_end_s: float, new_end_s: float) -> None:
        """Move what the last step stamped at its end ``old_end_s`` to ``new_end_s``.

        A data-parallel lockstep group (:mod:`kvbudget.sim.lockstep`) steps its members with
        their own prices, then ends every member's step when the slowest one ends. Stamped at a
        step's end: first tokens and finishes (``first_token_s``, ``finish_s``) of the requests
        that step scheduled or ended, their output times (``token_times``) and, on the fast
        path, the step's end that lazy decoders' tokens are read from (``step_ends``).
        ``old_end_s`` must be after the step's start (a positive duration): every earlier stamp
        is at or before the start, so only this step's equal it. The requests that ended are
        still in ``finished()`` (the caller drains them after this).
        """
        core = self.core
        stamped: list[SimRequest] = list(core.finished)
        outputs: list[TokenOutput] = self.last_outputs
        fast = self.fast
        if fast is not None:
            explicit = fast.last_explicit
            if explicit is None:  # a lazy step: its prefills, and the decoders' step end
                stamped.extend(req for req, _n in fast.last_scheduled)
                ends = fast.step_ends
                if ends and ends[-1] == old_end_s:
                    ends[-1] = new_end_s
                outputs = []
            else:
                outputs = explicit.outputs
        requests = core.requests
        for out in outputs:
            req = requests.get(out.request_id)
            if req is not None:
                stamped.append(req)
        times = self.token_times
        for req in stamped:
            if req.first_token_s == old_end_s:
                req.first_token_s = new_end_s
            if req.finish_s == old_end_s:
                req.finish_s = new_end_s
            if times is not None:
                kept = times.get(req.spec.request_id)
                if kept and kept[-1] == old_end_s:
                    kept[-1] = new_end_s

    def wake_s(self) -> float | None:
        """When a stalled replica (only reloading requests) can run again."""
        return self.core.next_ready_s()

    def snapshot(self, now_s: float) -> KVSample:
        """The replica's state now (KV usage, running, waiting)."""
        st = self.core.stats()
        running = self.fast.num_running() if self.fast is not None else st.num_running
        return KVSample(now_s, self.name, st.kv_usage, running, st.num_waiting)

    def sample(self, now_s: float) -> None:
        self.samples.append(self.snapshot(now_s))

    # ------------------------------------------------------------------ router views
    def num_outstanding(self) -> int:
        """Requests routed here and not finished."""
        return len(self.core.requests)

    def kv_usage(self) -> float:
        return self.core.pool.usage()

    def queued_prefill_tokens(self) -> int:
        """Prompt tokens still to compute over waiting and running requests."""
        return sum(
            max(0, r.num_prompt_tokens - r.num_computed_tokens) for r in self.core.requests.values()
        )

    def cached_prefix_tokens(self, block_hashes: list[Hashable]) -> tuple[int, int]:
        """(GPU-cached leading tokens, tier-cached tokens after them) for a hash chain."""
        pool = self.core.pool
        if not self.config.prefix_caching_effective:
            return 0, 0
        num_gpu = 0
        if block_hashes and (block_hashes[0] in pool._pending or block_hashes[0] in pool._deferred):
            pool.materialize(block_hashes[0])  # lazy registration: same root, same chain
        cached = pool._cached
        for h in block_hashes:
            if h not in cached:
                break
            num_gpu += 1
        num_tier = 0
        if self.tier_stack is not None:
            for h in block_hashes[num_gpu:]:
                if not self.tier_stack.holds(h):
                    break
                num_tier += 1
        size = self.config.block_size
        return num_gpu * size, num_tier * size

    @property
    def block_size(self) -> int:
        return self.config.block_size

    def cached_keys(self) -> set[Hashable]:
        """Every block key cached on the GPU or in a tier (for a stale router index)."""
        self.core.pool.materialize_all()
        keys: set[Hashable] = set(self.core.pool._cached)
        if self.tier_stack is not None:
            for tier in self.tier_stack.tiers:
                keys.update(self.tier_stack.own_hashes(tier))
        return keys

    def tier_reload_s(self, num_tokens: int) -> float:
        """Estimated reload time of ``num_tokens`` from the first tier (0 without tiers)."""
        if num_tokens <= 0 or self.tier_stack is None or not self.tier_stack.tiers:
            return 0.0
        tier = self.tier_stack.tiers[0]
        c = tier.config
        num_blocks = -(-num_tokens // self.config.block_size)
        return (
            c.latency_s
            + num_blocks * tier.block_bytes / c.bandwidth_bytes_per_s
            + c.format_s
            + c.sync_s
        )

    def finished(self) -> list[SimRequest]:
        return self.core.finished

    def prompt_hashes(self, req: EngineRequest) -> list[BlockHash]:
        """``req``'s prompt block hashes as this replica's cache keys them (for the router)."""
        cfg = self.config
        return block_hashes(
            req.prompt_token_ids,
            cfg.block_size,
            algo=cfg.hash_algo,
            adapter_id=req.adapter_id,
            mm_hashes=req.mm_hashes,
            cache_salt=req.cache_salt,
        )

    def unfinished(self) -> list[SimRequest]:
        return list(self.core.requests.values())
