"""The simulated probe: one replica in virtual time (see :mod:`kvbudget.audit.probes`).

Built by ``sim.fromplan`` (a manual pool with fixed step timing, or a plan) and run by the
simulator's driver (``sim.driver``), one request at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kvbudget.audit.probes import Completion, Observation, TargetIdentity
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.errors import TargetError
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.driver import DriveOptions, Driver
from kvbudget.sim.fromplan import build_manual_replica, build_replica
from kvbudget.sim.replica import Replica
from kvbudget.sim.request import EngineRequest, SimRequest
from kvbudget.sim.router import Router
from kvbudget.sim.tiers import Tier
from kvbudget.workload.tokenizer import get_tokenizer


@dataclass(frozen=True)
class SimProbeOptions:
    """The simulated target: manual pool and fixed step timing (``kvbudget serve`` manual)."""

    step_s: float = 0.001
    per_token_s: float = 20e-6
    num_gpu_blocks: int = 4096
    block_size: int = 16
    max_model_len: int = 16384
    enable_prefix_caching: bool = True
    #: median and log-sd of the lognormal simulated client/network jitter added to TTFT
    jitter_median_s: float = 0.002
    jitter_sigma: float = 0.5
    vocab_size: int = 32000
    model: str = "sim"
    #: size the pool and time the steps from a plan (the builder sim and accept use) instead
    plan: PlanRequest | None = None
    #: a KV store that outlives this probe's replica (restart/upgrade audits share it)
    store: Tier | None = None
    #: the deployment's cache identity (a CacheIdentity digest) for the store's keys
    identity: str = ""


class SimProbe:
    """The simulator in virtual time (see module doc); requests run one after another."""

    def __init__(self, opts: SimProbeOptions, rng: np.random.Generator) -> None:
        if opts.plan is not None:
            built = build_replica(opts.plan, enable_prefix_caching=opts.enable_prefix_caching)
        else:
            built = build_manual_replica(
                ReplicaConfig(
                    name="audit-0",
                    num_gpu_blocks=opts.num_gpu_blocks,
                    block_size=opts.block_size,
                    max_model_len=opts.max_model_len,
                    max_num_batched_tokens=opts.max_model_len,
                    enable_prefix_caching=opts.enable_prefix_caching,
                    # sizes the blocks of a persistent store (bf16, 8 KV heads x 128, 32 layers)
                    kv_bytes_per_token=131072 if opts.store is not None else 0,
                ),
                step_s=opts.step_s,
                per_token_s=opts.per_token_s,
            )
        self.opts = opts
        self.built = built
        setup = built.setup
        if opts.store is not None:
            setup = replace(setup, shared_tiers=(opts.store,), identity=opts.identity)
        self.replica = Replica(
            built.config.name,
            setup,
            np.random.default_rng(int(rng.integers(0, 2**31 - 1))),
            vocab_size=opts.vocab_size,
        )
        self.core = self.replica.core
        self._done: list[SimRequest] = []
        self._errors: list[str] = []
        self._driver: Driver[Replica, SimRequest] = Driver(
            [self.replica],
            Router("round_robin"),
            on_finish=lambda req, rep: self._done.append(req),
            on_reject=lambda req, rep, exc: self._errors.append(str(exc)),
        )
        self.timing_name = built.timing_name
        self.description = built.description
        self.rng = rng
        self.tokenizer = get_tokenizer(opts.vocab_size)
        self.now_s = 0.0
        self._n = 0

    async def identity(self) -> TargetIdentity:
        return TargetIdentity(
            kind="sim",
            source="simulated",
            engine="kvbudget-sim",
            engine_version=None,
            model=self.opts.model,
            timing_model=self.timing_name,
            details={
                "engine": self.description,
                "jitter": f"lognormal(median {self.opts.jitter_median_s * 1e3:g} ms, "
                f"sigma {self.opts.jitter_sigma:g})",
            },
        )

    def _run(
        self, prompt_ids: tuple[int, ...], salt: str | None, max_tokens: int
    ) -> tuple[float, int]:
        """Run one request alone to completion (the simulator's driver): (TTFT, cached tokens)."""
        self._n += 1
        rid = f"audit-{self._n}"
        arrival = self.now_s
        self._done.clear()
        self._errors.clear()
        req = EngineRequest(
            request_id=rid,
            prompt_token_ids=prompt_ids,
            max_output_tokens=max_tokens,
            arrival_s=arrival,
            cache_salt=salt,
        )
        outcome = self._driver.run([req], DriveOptions(start_s=arrival, max_steps=100_000))
        if self._errors:
            raise TargetError(f"simulated request {rid} was refused: {self._errors[0]}")
        done = next((r for r in self._done if r.request_id == rid), None)
        if done is None or done.first_token_s is None:
            raise TargetError(f"simulated request {rid} produced no token")
        ttft = round(done.first_token_s - arrival, 9)  # ns: drop float-sum noise
        self.now_s = outcome.last_activity_s + 0.01  # idle gap between sequential requests
        return ttft, done.num_cached_tokens

    async def send(
        self,
        prompt_ids: tuple[int, ...],
        prompt_text: str,
        *,
        tenant: str,
        cache_salt: str | None,
        request_id: str,
    ) -> Observation:
        ttft, cached = self._run(prompt_ids, cache_salt, 1)
        jitter = 0.0
        if self.opts.jitter_median_s > 0:
            median = np.log(self.opts.jitter_median_s)
            jitter = float(self.rng.lognormal(median, self.opts.jitter_sigma))
        return Observation(
            ttft_s=ttft + jitter, cached_tokens=cached, prompt_tokens=len(prompt_ids), ok=True
        )

    async def hit_counter(self) -> float | None:
        return float(self.core.stats().prefix_cache_hits_tokens)

    async def reset(self) -> bool:
        return bool(self.core.reset_prefix_cache())

    async def complete(
        self, prompt_ids: tuple[int, ...], prompt_text: str, *, max_tokens: int, logprobs: int
    ) -> Completion:
        _, cached = self._run(prompt_ids, None, max_tokens)
        out_ids = self.tokenizer.output_ids(prompt_ids, max_tokens)
        words = tuple(self.tokenizer.piece(t, j) for j, t in enumerate(out_ids))
        return Completion(
            text="".join(words),
            tokens=words,
            top_logprobs=None,
            cached_tokens=cached,
            prompt_tokens=len(prompt_ids),
        )
