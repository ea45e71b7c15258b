"""A simulation scenario (YAML or CLI flags) and how it becomes replicas and requests.

Schema (``extra="forbid"``; every field optional except what the defaults cover)::

    model: meta-llama/Llama-3.1-8B     # catalog id / config.json path
    gpu: H100-SXM                      # catalog GPU (kvbudget gpus)
    tp: 1
    pp: 1                              # pipeline stages (pool per stage; steps not overlapped)
    engine_version: null               # vLLM version (defaults by version and GPU, as plan)
    quantization: null                 # vLLM --quantization (fp8, awq, gptq, mxfp4, ...)
    enable_expert_parallel: false
    data_parallel_size: 1              # vLLM --data-parallel-size: engines, each its own pool,
                                       #   routed by vLLM's DP load balancer (least_outstanding)
    async_scheduling: null             # vLLM --async-scheduling (true) / --no-async-scheduling
                                       #   (false); null: the vLLM version's default
    kv_dtype: auto
    replicas: 1                        # identical replicas ...
    replica_overrides: []              # ... or one entry per replica (heterogeneous):
                                       #   {gpu: A100-80GB, tp: 2, max_num_seqs: 128}
    router: round_robin                # see kvbudget.sim.router
    stale_index_s: 0.0
    prefix_caching: true
    policy: fcfs                       # or priority
    timing_model: auto                 # auto, measured or roofline [default: $KVBUDGET_TIMING_MODEL, else auto]
    timing_profile: null               # JSON calibration profile (replaces timing_model)
    roofline: {compute_efficiency: 0.55, ...}
    tiers: []                          # [{name: cpu, capacity_bytes: ..., bandwidth_bytes_per_s: ...}]
    remote_tier: null                  # one tier shared by every replica
    scale_out: []                      # [{at_s: 60, cold_start_s: 90, warmup_s: 30}]
    scale_in: []                       # [{at_s: 120, replica: 0, grace_s: 30, on_deadline: cancel_retry}]
    crashes: []                        # [{at_s: 200, replica: 1, restart_s: 120}]
    disaggregation: null               # P/D: {prefill_replicas: 1, decode_replicas: 1,
                                       #   prefill_tp: 1, decode_tp: 1,
                                       #   link: {bandwidth_bytes_per_s: 5.0e10, latency_s: ...}}
                                       #   (kvbudget.sim.pd_scenario; docs/disaggregation.md)
    max_simulated_s: null
    sample_every_s: 1.0
    seed: 0
    workload: {num_requests: 1000, arrivals: {kind: poisson, rate_per_s: 10}, ...}
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.versions import (
    DEFAULT_VLLM_VERSION,
    AsyncScheduling,
    parse_version,
    vllm_async_scheduling,
)
from kvbudget.errors import ConfigError
from kvbudget.sim.cluster import ClusterSpec
from kvbudget.sim.config import SchedulingPolicy
from kvbudget.sim.disagg import KVLinkConfig
from kvbudget.sim.driver import ScaleOut
from kvbudget.sim.fromplan import BuiltReplica, build_replica
from kvbudget.sim.lifecycle import Crash, ScaleIn
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest, engine_request
from kvbudget.sim.router import ROUTERS
from kvbudget.sim.tiers import TierConfig
from kvbudget.sim.timing import CalibrationProfile, RooflineParams
from kvbudget.sim.timing_select import resolve_timing_choice
from kvbudget.validation import first_problem, problem_line
from kvbudget.workload.lengths import FixedLength
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.spec import WorkloadSpec, generate, generate_stream, workload_from_dict


class ReplicaOverride(BaseModel):
    """Per-replica differences (heterogeneous clusters)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str | None = None
    tp: int | None = Field(default=None, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)


class ScaleOutSpec(BaseModel):
    """Add one replica (like the first) at ``at_s``, serving after ``cold_start_s``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(ge=0)
    cold_start_s: float = Field(default=60.0, ge=0)
    warmup_s: float = Field(default=0.0, ge=0)


class ScaleInSpec(BaseModel):
    """Stop routing to ``replica`` at ``at_s``; after ``grace_s`` act on what is left."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(ge=0)
    replica: int = Field(ge=0)
    grace_s: float = Field(default=30.0, ge=0)
    on_deadline: Literal["cancel_retry", "reprefill", "transfer"] = "cancel_retry"
    transfer_bandwidth_bytes_per_s: float = Field(default=25e9, gt=0)


class CrashSpec(BaseModel):
    """``replica`` dies at ``at_s``; a cold replacement serves from ``at_s + restart_s``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(ge=0)
    replica: int = Field(ge=0)
    restart_s: float = Field(default=120.0, ge=0)


class DisaggregationSpec(BaseModel):
    """A prefill pool, a decode pool and their KV link (``kvbudget.sim.disagg``); ``sim`` runs
    the same requests co-located on the same number of GPUs beside it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill_replicas: int = Field(default=1, ge=1, le=1024)
    decode_replicas: int = Field(default=1, ge=1, le=1024)
    prefill_tp: int | None = Field(default=None, ge=1, description="default: the scenario's tp")
    decode_tp: int | None = Field(default=None, ge=1, description="default: the scenario's tp")
    link: KVLinkConfig


class SimScenario(BaseModel):
    """Everything ``kvbudget sim`` needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = "meta-llama/Llama-3.1-8B"
    gpu: str = "H100-SXM"
    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    #: vLLM version whose defaults and arithmetic the plan uses (None: plan's default)
    engine_version: str | None = None
    #: vLLM --quantization of the weights (None: the config's quantization_config)
    quantization: str | None = None
    enable_expert_parallel: bool = False
    #: vLLM --data-parallel-size: this many engines (each tp x pp GPUs, its own scheduler and
    #: KV pool; a MoE model's experts span all of them), one deployment
    #: (at most 256 engines: each simulated engine holds its own block pool in memory)
    data_parallel_size: int = Field(default=1, ge=1, le=256)
    #: vLLM --async-scheduling (True) / --no-async-scheduling (False); None: the version's
    #: default (kvbudget.capacity.versions.vllm_async_scheduling)
    async_scheduling: bool | None = None
    kv_dtype: str = "auto"
    max_model_len: int | None = Field(default=None, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    replicas: int = Field(default=1, ge=1)
    replica_overrides: list[ReplicaOverride] = Field(default_factory=list)
    router: str = "round_robin"
    stale_index_s: float = Field(default=0.0, ge=0)
    prefix_caching: bool = True
    policy: SchedulingPolicy = "fcfs"
    #: auto or a registered timing model's name (kvbudget.sim.timing_select); None:
    #: $KVBUDGET_TIMING_MODEL, else auto
    timing_model: str | None = None
    timing_profile: str | None = None
    roofline: RooflineParams = Field(default_factory=RooflineParams)
    tiers: list[TierConfig] = Field(default_factory=list)
    remote_tier: TierConfig | None = None
    scale_out: list[ScaleOutSpec] = Field(default_factory=list)
    scale_in: list[ScaleInSpec] = Field(default_factory=list)
    crashes: list[CrashSpec] = Field(default_factory=list)
    disaggregation: DisaggregationSpec | None = None
    max_simulated_s: float | None = Field(default=None, gt=0)
    sample_every_s: float | None = Field(default=1.0, gt=0)
    seed: int = 0
    workload: dict[str, Any] = Field(
        default_factory=lambda: {
            "num_requests": 1000,
            "arrivals": {"kind": "poisson", "rate_per_s": 10.0},
        }
    )


_DOCS = "docs/simulator.md"


def load_scenario(path: str | Path) -> dict[str, Any]:
    """Read a YAML scenario into a plain mapping (validated by :func:`scenario_from_dict`)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            f"scenario {path}: file not found; give the path of a YAML scenario (see {_DOCS})",
            field="scenario",
        )
    # YAML only for a scenario file: the flag-built run (``kvbudget sim`` without
    # ``--scenario``) never pays for importing it
    import yaml

    from kvbudget.safety.yamlload import load_yaml_text, read_text_file

    try:
        text = read_text_file(file, what="scenario")
    except OSError as exc:
        raise ConfigError(
            f"scenario {path}: cannot read it ({exc}); check the file's permissions and encoding",
            field="scenario",
        ) from None
    try:
        data = load_yaml_text(text, source=f"scenario {file.name}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(
            f"scenario {file.name}{where}: {problem}; fix the YAML syntax", field="scenario"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"scenario {file.name}: expected a mapping of fields at the top, got "
            f"{type(data).__name__}; start from the example in {_DOCS}",
            field="scenario",
        )
    return data


def _validation_text(exc: ValidationError, origin: str, prefix: str, docs: str) -> tuple[str, str]:
    """The first pydantic error as one line naming field path, value and fix; and the path."""
    problem = first_problem(exc, prefix)
    text = problem_line(problem, what="scenario", origin=origin, docs=docs)
    return text, problem.where or "scenario"


def _check_workload(workload: dict[str, Any], origin: str) -> None:
    """Validate the workload here so its errors name the file; token counts must be >= 1."""
    try:
        spec = WorkloadSpec.model_validate(workload)
    except ValidationError as exc:
        text, where = _validation_text(exc, origin, "workload", "docs/workloads.md")
        raise ConfigError(text, field=where) from None
    for name in ("input_tokens", "output_tokens"):
        length = getattr(spec, name)
        if isinstance(length, FixedLength) and length.value < 1:
            raise ConfigError(
                f"scenario field workload.{name}.value={length.value} in {origin}: must be >= 1 "
                "token (vLLM requires max_tokens >= 1 and a non-empty prompt); give e.g. 128",
                field=f"workload.{name}.value",
            )


def scenario_from_dict(data: dict[str, Any], *, origin: str = "the scenario") -> SimScenario:
    """Validate; the first problem becomes a one-line ConfigError naming the field.

    ``origin`` names where the fields came from (a file name, or the flags) in the message.
    """
    try:
        scenario = SimScenario.model_validate(data)
    except ValidationError as exc:
        text, where = _validation_text(exc, origin, "", _DOCS)
        raise ConfigError(text, field=where) from None
    if scenario.data_parallel_size > 1:
        scenario = _data_parallel(scenario, data)
    if scenario.router not in ROUTERS:
        raise ConfigError(
            f"router: unknown policy {scenario.router!r}; choose one of {', '.join(ROUTERS)}",
            field="router",
        )
    if scenario.timing_model is not None:
        resolve_timing_choice(scenario.timing_model)
    _check_workload(scenario.workload, origin)
    return scenario


def _data_parallel(scenario: SimScenario, data: dict[str, Any]) -> SimScenario:
    """``data_parallel_size`` > 1: one deployment of that many engines. vLLM's API server
    routes each request to the engine with the fewest requests in flight (vLLM 0.32.0
    ``v1/engine/core_client.py`` ``DPLBAsyncMPClient.get_core_engine_for_request``: score
    ``max(in-flight, waiting + running)``), which is ``least_outstanding`` unless a router is
    given."""
    dp = scenario.data_parallel_size
    for name, given in (
        ("replicas", scenario.replicas > 1),
        ("replica_overrides", bool(scenario.replica_overrides)),
        ("disaggregation", scenario.disaggregation is not None),
    ):
        if given:
            raise ConfigError(
                f"{name}: data_parallel_size {dp} simulates one deployment of {dp} engines; "
                f"drop {name}, or data_parallel_size",
                field=name,
            )
    if "router" in data:
        return scenario
    return scenario.model_copy(update={"router": "least_outstanding"})


def scenario_async_scheduling(scenario: SimScenario) -> AsyncScheduling:
    """vLLM ``--async-scheduling`` of the scenario's replicas and why (the flag, else the vLLM
    version's default): what :func:`kvbudget.sim.fromplan.build_replica` applies to each."""
    version = parse_version(scenario.engine_version or DEFAULT_VLLM_VERSION)
    return vllm_async_scheduling(version, scenario.pp, scenario.async_scheduling)


def replica_setup(scenario: SimScenario, override: ReplicaOverride | None) -> ReplicaSetup:
    """One replica built from its own plan: the scenario's fields with ``override``'s on top."""
    return replica_built(scenario, override).setup


def replica_built(scenario: SimScenario, override: ReplicaOverride | None) -> BuiltReplica:
    """:func:`replica_setup` with what else the build resolved (the model)."""
    o = override or ReplicaOverride()
    request = PlanRequest(
        model=scenario.model,
        gpu=o.gpu or scenario.gpu,
        tp=o.tp or scenario.tp,
        pp=scenario.pp,
        data_parallel_size=scenario.data_parallel_size,
        async_scheduling=scenario.async_scheduling,
        engine_version=scenario.engine_version,
        quantization=scenario.quantization,
        kv_dtype=scenario.kv_dtype,
        max_model_len=scenario.max_model_len,
        max_num_seqs=o.max_num_seqs or scenario.max_num_seqs,
        max_num_batched_tokens=o.max_num_batched_tokens or scenario.max_num_batched_tokens,
        gpu_memory_utilization=o.gpu_memory_utilization or scenario.gpu_memory_utilization,
    )
    profile = None
    if scenario.timing_profile is not None:
        profile = CalibrationProfile.load(scenario.timing_profile)
    return build_replica(
        request,
        enable_prefix_caching=scenario.prefix_caching,
        policy=scenario.policy,
        params=scenario.roofline,
        profile=profile,
        tiers=tuple(t for t in scenario.tiers if t.name != "remote"),
        expert_parallel=scenario.enable_expert_parallel,
        timing_model=scenario.timing_model,
        async_scheduling=scenario.async_scheduling,
    )


def build_cluster(scenario: SimScenario, *, trace: bool = False) -> ClusterSpec:
    """Replicas (each from its own plan), router, tiers, scale-out."""
    lockstep = 1
    if scenario.replica_overrides:
        setups = [replica_setup(scenario, o) for o in scenario.replica_overrides]
    else:
        built = replica_built(scenario, None)
        one = built.setup
        setups = [one] * (scenario.replicas * scenario.data_parallel_size)
        lockstep = lockstep_size(scenario, built)
    return ClusterSpec(
        setups=setups,
        router=scenario.router,
        stale_s=scenario.stale_index_s,
        scale_out=[
            ScaleOut(s.at_s, setups[0], s.cold_start_s, s.warmup_s) for s in scenario.scale_out
        ],
        scale_in=[ScaleIn(**s.model_dump()) for s in scenario.scale_in],
        crashes=[Crash(**c.model_dump()) for c in scenario.crashes],
        sample_every_s=scenario.sample_every_s,
        remote_tier=scenario.remote_tier,
        max_simulated_s=scenario.max_simulated_s,
        trace=trace,
        lockstep_size=lockstep,
    )


def lockstep_size(scenario: SimScenario, built: BuiltReplica) -> int:
    """How many of the scenario's engines step in lockstep: ``data_parallel_size`` for a MoE
    model (:func:`is_moe`), else 1 (each engine on its own)."""
    dp = scenario.data_parallel_size
    return dp if dp > 1 and is_moe(built) else 1


def is_moe(built: BuiltReplica) -> bool:
    """A MoE model: vLLM 0.32.0 runs its data-parallel ranks in lockstep (``DPEngineCoreProc``
    only ``if data_parallel and vllm_config.model_config.is_moe``, ``v1/engine/core.py`` line
    1473; :mod:`kvbudget.sim.lockstep`), a dense model's as independent engines."""
    spec = built.model.spec if built.model is not None else None
    return spec is not None and bool(spec.num_experts)


def build_workload(scenario: SimScenario) -> tuple[list[PlannedRequest], int | None]:
    """The planned requests and the closed-loop concurrency (``None`` for open loop)."""
    spec: WorkloadSpec = workload_from_dict(scenario.workload)
    rng = np.random.default_rng(scenario.seed)
    return generate(spec, rng), spec.closed_loop_concurrency


def stream_workload(scenario: SimScenario) -> tuple[Iterator[EngineRequest], int | None]:
    """:func:`build_workload`'s requests as a stream, in arrival order (trace scale), built
    as the engine's requests directly (one object a request)."""
    spec: WorkloadSpec = workload_from_dict(scenario.workload)
    rng = np.random.default_rng(scenario.seed)
    stream = generate_stream(spec, rng, compact_ids=True, make=engine_request)
    return stream, spec.closed_loop_concurrency
