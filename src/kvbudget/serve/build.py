"""Build the replica that ``kvbudget serve`` puts behind HTTP.

Two ways:

* **planned** (``--gpu`` given): ``make_plan`` sizes the replica for the model on that GPU
  (blocks, block size, limits) and the simulator's roofline model times the steps
  (``kvbudget.sim.fromplan.build_replica``, the builder every simulated path uses); the
  figures served are *simulated* with that timing model;
* **manual**: a pool of ``num_gpu_blocks`` blocks and a fixed step time
  (``step_s + per_token_s * tokens``), for tests, demos and load-client checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.errors import ConfigError
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.fromplan import BuiltReplica, build_manual_replica, build_replica
from kvbudget.sim.replica import Replica


@dataclass(frozen=True)
class ServeEngineOptions:
    model: str
    gpu: str | None = None
    tp: int = 1
    pp: int = 1
    engine_version: str | None = None
    quantization: str | None = None
    kv_dtype: str = "auto"
    enable_expert_parallel: bool = False
    #: vLLM --async-scheduling / --no-async-scheduling (None: the version's default; --gpu only)
    async_scheduling: bool | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    step_s: float = 0.01
    per_token_s: float = 0.0
    enable_prefix_caching: bool = True
    vocab_size: int = 32000
    seed: int = 0


@dataclass
class BuiltEngine:
    #: the replica ``ServeApp`` serves (stepped by the simulator's driver, ``serve.engine``)
    replica: Replica
    config: ReplicaConfig
    timing_name: str
    description: str

    @property
    def core(self) -> EngineCore:
        """The replica's engine core (stats, prefix cache)."""
        return self.replica.core


def _engine(built: BuiltReplica, opts: ServeEngineOptions) -> BuiltEngine:
    """The replica, stepped on the wall clock by the driver (``serve.engine``)."""
    replica = Replica(
        built.config.name, built.setup, np.random.default_rng(opts.seed), vocab_size=opts.vocab_size
    )
    return BuiltEngine(replica, built.config, built.timing_name, built.description)


def _manual(opts: ServeEngineOptions) -> BuiltEngine:
    config = ReplicaConfig(
        name="serve-0",
        num_gpu_blocks=opts.num_gpu_blocks or 8192,
        block_size=opts.block_size or 16,
        max_model_len=opts.max_model_len or 8192,
        max_num_seqs=opts.max_num_seqs or 256,
        max_num_batched_tokens=opts.max_num_batched_tokens or 8192,
        enable_prefix_caching=opts.enable_prefix_caching,
    )
    built = build_manual_replica(
        config, step_s=opts.step_s, per_token_s=opts.per_token_s, fast_path=False
    )
    return _engine(built, opts)


def _planned(opts: ServeEngineOptions) -> BuiltEngine:
    built = build_replica(
        PlanRequest(
            model=opts.model,
            gpu=opts.gpu,
            tp=opts.tp,
            pp=opts.pp,
            engine_version=opts.engine_version,
            quantization=opts.quantization,
            kv_dtype=opts.kv_dtype,
            max_model_len=opts.max_model_len,
            max_num_seqs=opts.max_num_seqs,
            max_num_batched_tokens=opts.max_num_batched_tokens,
            block_size=opts.block_size,
            num_gpu_blocks_override=opts.num_gpu_blocks,
        ),
        enable_prefix_caching=opts.enable_prefix_caching,
        fast_path=False,
        expert_parallel=opts.enable_expert_parallel,
        async_scheduling=opts.async_scheduling,
    )
    return _engine(built, opts)


def build_engine(opts: ServeEngineOptions) -> BuiltEngine:
    """The engine core for ``opts`` (planned when ``gpu`` is set, else manual)."""
    if opts.step_s < 0 or opts.per_token_s < 0:
        raise ConfigError(
            f"--step-ms/--per-token-us must be >= 0 (got {opts.step_s * 1e3:g} ms, "
            f"{opts.per_token_s * 1e6:g} us)",
            field="step_ms",
        )
    return _planned(opts) if opts.gpu else _manual(opts)
