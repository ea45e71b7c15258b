"""Predict a cell on the vLLM-style paged engine (:class:`kvbudget.sim.engine.EngineCore`).

Used for a profile measured on vLLM (its ``engine`` starts with ``vllm``): the cell's requests
(same prompt token ids and output lengths) run closed-loop with the cell's concurrency through
the driver (:mod:`kvbudget.sim.driver`), on one simulated replica (the explicit engine) built from what the engine reported during calibration
(``vllm:cache_config_info`` ``num_gpu_blocks``, ``block_size``, ``enable_prefix_caching``;
``/v1/models`` ``max_model_len``) and the step budget (``max_num_batched_tokens``,
``max_num_seqs``: vLLM's CPU defaults unless ``--max-num-batched-tokens`` was given), priced by
:class:`~kvbudget.sim.timing.CalibratedTiming`. As with the slot engine, the profile's
``request_overhead_s`` is added to every TTFT and is the closed-loop turnaround, and the
clients' first requests are ``CLIENT_STAGGER_S`` apart.
"""

from __future__ import annotations

import numpy as np

from kvbudget.calibrate.predict import (
    CLIENT_STAGGER_S,
    CellFigures,
    CellLoad,
    cell_warnings,
    figures,
)
from kvbudget.engine_name import VLLM, is_engine
from kvbudget.errors import KvbudgetError
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.driver import DriveOptions, Driver
from kvbudget.sim.replica import Replica, ReplicaSetup
from kvbudget.sim.request import EngineRequest, SimRequest
from kvbudget.sim.router import Router
from kvbudget.sim.timing import CalibratedTiming, CalibrationProfile
from kvbudget.workload.request import PlannedRequest

#: used when the profile does not say (vLLM 0.32.0's CPU OpenAI-server defaults)
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
DEFAULT_MAX_NUM_SEQS = 128


def is_paged_profile(profile: CalibrationProfile) -> bool:
    """Whether a profile was measured on vLLM (predict on the paged engine)."""
    return is_engine(profile.engine, VLLM)


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
    setup = ReplicaSetup(config, timing, fast_path=False, record_token_times=True)
    replica = Replica("vllm-0", setup, np.random.default_rng(0))
    overhead = profile.request_overhead_s
    sent: dict[str, float] = {}
    tokens: dict[str, list[float]] = {}
    peak_kv = [0.0]

    def on_finish(req: SimRequest, rep: Replica) -> None:
        sent[req.request_id] = req.spec.arrival_s
        tokens[req.request_id] = rep.token_times.pop(req.request_id, []) if rep.token_times else []

    def on_step(rep: Replica, index: int, now_s: float, duration_s: float) -> None:
        peak_kv[0] = max(peak_kv[0], rep.core.stats().kv_usage)

    def on_reject(req: EngineRequest, rep: Replica, exc: KvbudgetError) -> None:
        raise exc

    driver: Driver[Replica, SimRequest] = Driver(
        [replica], Router("round_robin"), on_finish=on_finish, on_reject=on_reject, on_step=on_step
    )
    driver.run(
        [
            PlannedRequest(
                f"{load.cell_id}-{i}", 0.0, tuple(prompt), output_tokens=load.output_tokens
            )
            for i, prompt in enumerate(load.prompts)
        ],
        DriveOptions(
            concurrency=load.concurrency, turnaround_s=overhead, stagger_s=CLIENT_STAGGER_S
        ),
    )
    ttfts = [t[0] - sent[rid] + overhead for rid, t in tokens.items() if t]
    tpots = [(t[-1] - t[0]) / (len(t) - 1) for t in tokens.values() if len(t) >= 2]
    span = max((t[-1] for t in tokens.values() if t), default=0.0)
    out = figures(
        f"simulated ({timing.name}, vLLM-style paged blocks)",
        ttfts,
        tpots,
        sum(len(t) for t in tokens.values()),
        span,
        peak_kv[0],
    )
    return out, cell_warnings(profile, load, config.max_num_seqs)
