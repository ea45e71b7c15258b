"""Predict a cell on the vLLM-style paged engine (:class:`kvbudget.sim.engine.EngineCore`).

Used for a profile measured on vLLM (its ``engine`` starts with ``vllm``): the cell's requests
(same prompt token ids and output lengths) run closed-loop with the cell's concurrency through
one simulated replica built from what the engine reported during calibration
(``vllm:cache_config_info`` ``num_gpu_blocks``, ``block_size``, ``enable_prefix_caching``;
``/v1/models`` ``max_model_len``) and the step budget (``max_num_batched_tokens``,
``max_num_seqs``: vLLM's CPU defaults unless ``--max-num-batched-tokens`` was given), priced by
:class:`~kvbudget.sim.timing.CalibratedTiming`. As with the slot engine, the profile's
``request_overhead_s`` is added to every TTFT and is the closed-loop turnaround, and the
clients' first requests are ``CLIENT_STAGGER_S`` apart.
"""

from __future__ import annotations

import heapq

import numpy as np

from kvbudget.calibrate.predict import (
    CLIENT_STAGGER_S,
    CellFigures,
    CellLoad,
    cell_warnings,
    figures,
)
from kvbudget.engine_name import is_engine
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.timing import CalibratedTiming, CalibrationProfile
from kvbudget.workload.request import PlannedRequest

#: used when the profile does not say (vLLM 0.32.0's CPU OpenAI-server defaults)
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
DEFAULT_MAX_NUM_SEQS = 128


def is_paged_profile(profile: CalibrationProfile) -> bool:
    """Whether a profile was measured on vLLM (predict on the paged engine)."""
    return is_engine(profile.engine, "vllm")


def _int(value: object, default: int) -> int:
    return int(value) if isinstance(value, int | float) and value and value > 0 else default


def paged_config(profile: CalibrationProfile) -> ReplicaConfig:
    """The replica the profile's engine reported (vLLM defaults where it did not)."""
    s = profile.engine_settings
    max_model_len = _int(s.get("max_model_len"), 4096)
    block_size = _int(s.get("block_size"), 16)
    blocks = _int(s.get("num_gpu_blocks"), max(2, -(-max_model_len // block_size) * 4 + 1))
    caching = s.get("enable_prefix_caching")
    return ReplicaConfig(
        num_gpu_blocks=blocks,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_batched_tokens=_int(
            s.get("max_num_batched_tokens"), DEFAULT_MAX_NUM_BATCHED_TOKENS
        ),
        max_num_seqs=_int(s.get("max_num_seqs"), DEFAULT_MAX_NUM_SEQS),
        enable_prefix_caching=bool(caching) if isinstance(caching, bool) else True,
    )


def predict_paged_cell(
    profile: CalibrationProfile, load: CellLoad
) -> tuple[CellFigures, list[str]]:
    """Simulated figures of one cell on the paged engine, and the profile's range warnings."""
    timing = CalibratedTiming(profile)
    config = paged_config(profile)
    core = EngineCore(config, timing, np.random.default_rng(0))
    overhead = profile.request_overhead_s
    todo = list(enumerate(load.prompts))
    # (arrival time, order, request index)
    arrivals: list[tuple[float, int, int]] = []
    for w in range(min(load.concurrency, len(todo))):
        i, _ = todo[w]
        heapq.heappush(arrivals, (w * CLIENT_STAGGER_S, i, i))
    todo = todo[len(arrivals) :]
    sent: dict[str, float] = {}
    tokens: dict[str, list[float]] = {}
    now, peak_kv = 0.0, 0.0
    while arrivals or core.has_work():
        while arrivals and arrivals[0][0] <= now:
            at, _, i = heapq.heappop(arrivals)
            rid = f"{load.cell_id}-{i}"
            sent[rid] = at
            tokens[rid] = []
            core.add_request(
                PlannedRequest(rid, at, tuple(load.prompts[i]), output_tokens=load.output_tokens)
            )
        if not core.has_work():
            now = max(now, arrivals[0][0])
            continue
        step = core.step(now)
        now += step.duration_s or 1e-6
        peak_kv = max(peak_kv, core.stats().kv_usage)
        for token in step.outputs:
            tokens[token.request_id].append(now)
            if token.finished and todo:
                i, _ = todo.pop(0)
                heapq.heappush(arrivals, (now + overhead, i, i))
    ttfts = [t[0] - sent[rid] + overhead for rid, t in tokens.items() if t]
    tpots = [(t[-1] - t[0]) / (len(t) - 1) for t in tokens.values() if len(t) >= 2]
    span = max((t[-1] for t in tokens.values() if t), default=0.0)
    out = figures(
        f"simulated ({timing.name}, vLLM-style paged blocks)",
        ttfts,
        tpots,
        sum(len(t) for t in tokens.values()),
        span,
        peak_kv,
    )
    return out, cell_warnings(profile, load, config.max_num_seqs)
