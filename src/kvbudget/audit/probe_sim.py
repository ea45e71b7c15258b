"""The simulated probe: ``EngineCore`` in virtual time (see :mod:`kvbudget.audit.probes`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvbudget.audit.probes import Completion, Observation, TargetIdentity
from kvbudget.errors import TargetError
from kvbudget.serve.build import ServeEngineOptions, build_engine
from kvbudget.sim.request import EngineRequest
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


class SimProbe:
    """The simulator in virtual time (see module doc); requests run one after another."""

    def __init__(self, opts: SimProbeOptions, rng: np.random.Generator) -> None:
        built = build_engine(
            ServeEngineOptions(
                model=opts.model,
                num_gpu_blocks=opts.num_gpu_blocks,
                block_size=opts.block_size,
                max_model_len=opts.max_model_len,
                max_num_batched_tokens=opts.max_model_len,
                step_s=opts.step_s,
                per_token_s=opts.per_token_s,
                enable_prefix_caching=opts.enable_prefix_caching,
                vocab_size=opts.vocab_size,
                seed=int(rng.integers(0, 2**31 - 1)),
            )
        )
        self.opts = opts
        self.core = built.core
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
        """Run one request alone to completion: (virtual TTFT, cached tokens)."""
        self._n += 1
        rid = f"audit-{self._n}"
        arrival = self.now_s
        self.core.add_request(
            EngineRequest(
                request_id=rid,
                prompt_token_ids=prompt_ids,
                max_output_tokens=max_tokens,
                arrival_s=arrival,
                cache_salt=salt,
            )
        )
        ttft: float | None = None
        cached = 0
        for _ in range(100_000):  # bounded: one request, each step makes progress
            if not self.core.has_work():
                break
            res = self.core.step(self.now_s)
            self.now_s += res.duration_s
            for out in res.outputs:
                if out.request_id == rid and out.token_index == 0:
                    ttft = round(self.now_s - arrival, 9)  # ns: drop float-sum noise
                    cached = out.num_cached_tokens
        if ttft is None:
            raise TargetError(f"simulated request {rid} produced no token")
        self.now_s += 0.01  # idle gap between sequential requests
        return ttft, cached

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
