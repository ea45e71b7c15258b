"""The requests of a load run: planned by the caller, or synthetic and deterministic.

A synthetic request ``i`` depends only on ``(seed, i)``: its prompt is ``prompt_tokens`` random
ids of the shared synthetic tokenizer (:mod:`kvbudget.workload.tokenizer`) drawn from
``numpy.random.default_rng([seed, i])``, so a resumed run regenerates exactly the same request
for the same id, and the prompt has exactly ``prompt_tokens`` tokens for ``kvbudget serve``.
"""

from __future__ import annotations

import numpy as np

from kvbudget.load.config import RunConfig
from kvbudget.workload.arrivals import (
    burst_arrivals,
    constant_arrivals,
    gamma_arrivals,
    poisson_arrivals,
    ramp_arrivals,
)
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.tokenizer import get_tokenizer


def request_id_for(index: int) -> str:
    return f"r{index:07d}"


def synthetic_request(cfg: RunConfig, index: int, arrival_s: float = 0.0) -> PlannedRequest:
    """Request number ``index`` of a synthetic run (deterministic in ``cfg.seed``)."""
    rng = np.random.default_rng([cfg.seed, index])
    tok = get_tokenizer(cfg.vocab_size)
    ids = tuple(int(i) for i in tok.random_ids(rng, cfg.prompt_tokens))
    cancel = None
    if cfg.cancel_after_tokens is not None and rng.random() < cfg.cancel_fraction:
        cancel = cfg.cancel_after_tokens
    return PlannedRequest(
        request_id=request_id_for(index),
        arrival_s=arrival_s,
        prompt_token_ids=ids,
        output_tokens=cfg.output_tokens,
        prompt_text=tok.decode(ids),
        cache_salt=cfg.cache_salt,
        cancel_after_tokens=cancel,
    )


def arrival_offsets(cfg: RunConfig) -> np.ndarray:
    """Offered arrival times (seconds from the start) for the open-loop shapes."""
    rng = np.random.default_rng([cfg.seed, 0xA441])
    n, dur = cfg.num_requests, cfg.duration_s
    if cfg.shape == "constant":
        assert cfg.rate_per_s is not None
        return constant_arrivals(cfg.rate_per_s, num_requests=n, duration_s=dur)
    if cfg.shape == "poisson":
        assert cfg.rate_per_s is not None
        return poisson_arrivals(rng, cfg.rate_per_s, num_requests=n, duration_s=dur)
    if cfg.shape == "gamma":
        assert cfg.rate_per_s is not None
        return gamma_arrivals(rng, cfg.rate_per_s, cfg.gamma_cv, num_requests=n, duration_s=dur)
    if cfg.shape == "burst":
        assert n is not None
        return burst_arrivals(n)
    if cfg.shape == "ramp":
        return ramp_arrivals(rng, cfg.ramp_stages, num_requests=n)
    raise ValueError(f"shape {cfg.shape!r} has no arrival process")


def planned_open_loop(cfg: RunConfig) -> list[PlannedRequest]:
    """All requests of an open-loop synthetic run, with their arrival times."""
    return [synthetic_request(cfg, i, float(t)) for i, t in enumerate(arrival_offsets(cfg))]
