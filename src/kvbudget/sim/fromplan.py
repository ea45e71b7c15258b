"""The one builder of simulated replicas, from ``plan``'s ``PlanResult`` (one source of truth).

:func:`build_replica` is used by every simulated path: ``kvbudget sim`` (each replica of a
scenario), accept's ``sim`` target, ``kvbudget serve --gpu`` and the audit's simulated probe
(which also takes :func:`build_manual_replica`'s hand-given pool).

The replica gets exactly the pool ``kvbudget plan`` computes for the same model, GPU and flags:
``num_blocks`` (block 0 is the null block), ``block_size``, the KV cache groups, the scheduler
limits; the roofline timing reads the GPU catalog entry and the weights estimate of the same
plan. Group kinds map as: ``full``/``mla`` -> full, ``sliding`` -> sliding (window),
``chunked`` -> sliding with the chunk as window (an approximation: chunked-local attention
resets at chunk boundaries, which holds at most as many blocks), ``mamba`` -> state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvbudget.capacity.model_dtype import modelopt_algo
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.versions import AsyncScheduling, parse_version, vllm_async_scheduling
from kvbudget.capacity.weights import WeightsEstimate, compute_weights
from kvbudget.engine_name import VLLM
from kvbudget.errors import CapacityError, ConfigError, SpecError
from kvbudget.sim.config import KVGroupConfig, ReplicaConfig, SchedulingPolicy
from kvbudget.sim.replica import Replica, ReplicaSetup
from kvbudget.sim.tiers import TierConfig
from kvbudget.sim.timing import (
    CalibrationProfile,
    FixedTiming,
    GpuPerf,
    ModelCost,
    RooflineParams,
    RooflineTiming,
    StepTimeModel,
)
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import ResolvedModel, resolve_model


def _group(kind: str, num_layers: int, window: int | None, chunk: int | None, page: int) -> Any:
    if kind in ("full", "mla"):
        return KVGroupConfig(kind="full", num_layers=num_layers, page_size_bytes=page)
    if kind == "sliding":
        return KVGroupConfig(
            kind="sliding",
            num_layers=num_layers,
            sliding_window_tokens=window,
            page_size_bytes=page,
        )
    if kind == "chunked":
        return KVGroupConfig(
            kind="sliding", num_layers=num_layers, sliding_window_tokens=chunk, page_size_bytes=page
        )
    return KVGroupConfig(kind="state", num_layers=num_layers, page_size_bytes=page)


def replica_config_from_plan(
    plan: PlanResult,
    *,
    name: str = "replica-0",
    enable_prefix_caching: bool = True,
    policy: SchedulingPolicy = "fcfs",
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> ReplicaConfig:
    """The replica ``plan`` describes; refuses a plan that does not fit (its own error)."""
    if plan.engine != VLLM:
        raise ConfigError(
            f"engine: the simulator models vLLM V1's block pool, not {plan.engine}; "
            "plan with --engine vllm",
            field="engine",
        )
    if not plan.fits or plan.num_blocks < 2:
        raise CapacityError(
            plan.error
            or f"the plan has {plan.num_blocks} KV blocks; give the replica more memory or a "
            "shorter max_model_len"
        )
    groups = tuple(
        _group(g.kind, g.num_layers, g.sliding_window, g.attention_chunk_size, g.page_size_bytes)
        for g in plan.groups
    )
    return ReplicaConfig(
        name=name,
        num_gpu_blocks=plan.num_blocks,
        block_size=plan.block_size,
        kv_groups=groups or (KVGroupConfig(),),
        max_num_seqs=max_num_seqs or plan.max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens or plan.max_num_batched_tokens,
        max_model_len=plan.max_model_len,
        enable_prefix_caching=enable_prefix_caching,
        kv_bytes_per_token=plan.kv_bytes_per_token_replica,
        policy=policy,
    )


def model_cost(spec: ModelSpec, plan: PlanResult) -> ModelCost:
    """Roofline inputs from the spec (shape) and the plan (weights, KV bytes)."""
    hidden = spec.hidden_size or 0
    heads = spec.num_attention_heads or 1
    head_dim = next((int(getattr(layer, "head_dim", 0)) for layer, _ in spec.layer_runs()), 0) or (
        hidden // heads if heads else 0
    )
    weights = plan.weights
    if weights.num_params is None:  # --weights-bytes: the counts and shares from the architecture
        try:
            counted: WeightsEstimate | None = compute_weights(spec)
        except ConfigError:
            counted = None
    else:
        counted = weights
    num_params = float(
        counted.num_params if counted and counted.num_params else weights.total_bytes / 2
    )
    expert_params = float(counted.num_expert_params) if counted else 0.0
    expert_bytes = 0.0
    if counted and counted.total_bytes:
        expert_bytes = weights.total_bytes * counted.expert_bytes / counted.total_bytes
    num_experts = spec.num_experts or 0
    per_tok = min(spec.num_experts_per_tok or 0, num_experts)
    active = num_params
    # modules left unquantized by a ModelOpt exclude_modules: their GEMMs run in bf16
    bf16_params = float(counted.excluded_params) if counted else 0.0
    excluded_experts = float(counted.excluded_expert_params) if counted else 0.0
    if expert_params and num_experts and per_tok:
        # each token runs k of the E routed experts (gpt-oss: 4 of 128; the rest idle)
        active = num_params - expert_params * (1.0 - per_tok / num_experts)
        bf16_params += excluded_experts * per_tok / num_experts
    else:
        expert_bytes = 0.0
        bf16_params += excluded_experts
    return ModelCost(
        model_id=spec.model_id,
        num_layers=spec.num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        head_dim=head_dim,
        num_active_params=active,
        # a VLM's vision tower is loaded but no decode step reads it
        weights_bytes=float(plan.weights.total_bytes - (counted.vision_bytes if counted else 0)),
        kv_bytes_per_token=float(plan.kv_bytes_per_token_replica),
        expert_weights_bytes=expert_bytes,
        num_experts=num_experts if expert_bytes else 0,
        num_experts_per_tok=per_tok if expert_bytes else 0,
        num_bf16_gemm_params=bf16_params,
    )


def gemm_dtype(plan: PlanResult, spec: ModelSpec) -> str:
    """The dtype the model's GEMMs run in: ``fp8`` for 8-bit weights with 8-bit activations,
    ``fp4`` for NVFP4 weights and activations on a GPU with FP4 tensor cores, else ``bf16``.

    vLLM's ``fp8`` method (``Fp8LinearMethod``) quantizes activations dynamically and runs fp8 x
    fp8 GEMMs (cutlass ``scaled_mm``) on GPUs with fp8 tensor cores (compute capability >= 8.9),
    a weight-only fp8 Marlin kernel (bf16 math) below; ``compressed-tensors`` W8A8 (fp8 or
    int8 weights and input activations, both 8 bits) likewise. AWQ/GPTQ (4-bit weights,
    16-bit activations), and mxfp4 on Hopper (Marlin / triton W4A16 MoE), dequantize in the
    kernel and compute in bf16: their weights are read at their stored bytes (the weights
    estimate), their math at the bf16 peak. ModelOpt ``NVFP4`` (``modelopt_fp4``) runs W4A4
    cutlass / FlashInfer FP4 GEMMs on Blackwell (``kernels/linear/nvfp4``: compute capability
    100 and up, the catalog GPUs with an fp4 peak), the FP4 Marlin W4A16 kernel (bf16 math)
    elsewhere and for ``W4A16_NVFP4`` checkpoints (``ModelOptNvFp4Config``).
    """
    method = plan.weights.quantization.lower()
    if method in ("fp8", "modelopt"):
        return "fp8"
    if method == "modelopt_fp4":
        algo = modelopt_algo(spec.quantization_config or {}) or ""
        if algo != "W4A16_NVFP4" and plan.gpu.fp4_dense_tflops:
            return "fp4"
        return "bf16"
    if method == "compressed-tensors":
        groups = (spec.quantization_config or {}).get("config_groups") or {}
        first: Any = next(iter(groups.values()), {}) if isinstance(groups, dict) else {}
        if isinstance(first, dict):
            weights = first.get("weights") or {}
            acts = first.get("input_activations") or {}
            if (
                isinstance(weights, dict)
                and isinstance(acts, dict)
                and weights.get("num_bits") == 8
                and acts.get("num_bits") == 8
            ):
                return "fp8"
    return "bf16"


def gpu_perf(plan: PlanResult, gemm: str = "bf16") -> GpuPerf:
    """Roofline inputs from the plan's GPU catalog entry (dense peaks, HBM bandwidth); ``gemm``
    ``fp8`` / ``fp4`` prices the GEMMs at the catalog's dense fp8 / fp4 peak where the GPU has
    one."""
    gpu = plan.gpu
    if gpu.bf16_dense_tflops is None or gpu.hbm_bandwidth_gb_s is None:
        raise ConfigError(
            f"gpu: catalog entry {gpu.id!r} lacks bf16 TFLOPS or HBM bandwidth, which the "
            "roofline timing needs; pick a catalog GPU (kvbudget gpus) or use a calibrated "
            "timing profile",
            field="gpu",
        )
    peaks = {"fp8": gpu.fp8_dense_tflops, "fp4": gpu.fp4_dense_tflops}
    low = peaks.get(gemm)
    return GpuPerf(
        name=gpu.id,
        memory_bytes=float(gpu.memory_bytes),
        bandwidth_bytes_per_s=gpu.hbm_bandwidth_gb_s * 1e9,
        peak_flops=gpu.bf16_dense_tflops * 1e12,
        link_bytes_per_s=(gpu.interconnect_gb_s or 0.0) * 1e9,
        gemm_peak_flops=low * 1e12 if low else 0.0,
        gemm_dtype=gemm if low else "",
    )


def roofline_from_plan(
    plan: PlanResult, spec: ModelSpec, params: RooflineParams | None = None
) -> RooflineTiming:
    """Roofline step-time model for the plan's replica (TP ranks), GEMMs in their own dtype."""
    gpu = gpu_perf(plan, gemm_dtype(plan, spec))
    return RooflineTiming(model_cost(spec, plan), gpu, tp=plan.tp, params=params)


@dataclass(frozen=True, slots=True)
class BuiltReplica:
    """A replica ready to run: its setup (config, timing, tiers) and where it came from."""

    setup: ReplicaSetup
    timing_name: str
    description: str
    #: the plan it was sized from (``None`` for a manual pool)
    plan: PlanResult | None = None
    model: ResolvedModel | None = None
    #: vLLM ``--async-scheduling`` as resolved for the planned version, and why (``None`` for a
    #: manual pool: ``ReplicaConfig.async_scheduling`` as given)
    async_scheduling: AsyncScheduling | None = None

    @property
    def config(self) -> ReplicaConfig:
        return self.setup.config

    @property
    def timing(self) -> StepTimeModel:
        return self.setup.timing

    def replica(self, rng: np.random.Generator, *, name: str = "replica-0") -> Replica:
        """A fresh replica (empty cache) of this setup."""
        return Replica(name, self.setup, rng)


def resolve_for_sim(ref: str) -> ResolvedModel:
    """The model spec the simulator needs; refuses a model it cannot resolve."""
    resolved = resolve_model(ref)
    if resolved.spec is None:
        raise SpecError(
            f"model {ref!r}: cannot simulate it ({resolved.reason or resolved.status}); "
            f"missing fields: {', '.join(resolved.missing) or 'none listed'}"
        )
    return resolved


def build_replica(
    request: PlanRequest,
    *,
    enable_prefix_caching: bool = True,
    policy: SchedulingPolicy = "fcfs",
    params: RooflineParams | None = None,
    profile: CalibrationProfile | None = None,
    tiers: Sequence[TierConfig] = (),
    fast_path: bool = True,
    model: ResolvedModel | None = None,
    expert_parallel: bool = False,
    timing_model: str | None = None,
    async_scheduling: bool | None = None,
) -> BuiltReplica:
    """The one builder of a planned replica: ``make_plan``, pool, timing and tiers.

    ``expert_parallel`` (vLLM ``--enable-expert-parallel``): the measured model prices the
    experts split whole over the ranks with the tables' expert-parallel kernels
    (:func:`kvbudget.sim.timing_select.measured_for`); the roofline prices it as tensor
    parallel: on uniform routing each rank reads and multiplies the same expert bytes either
    way (``E/tp`` whole experts, or ``1/tp`` of each), and the dispatch/combine is priced as
    the all-reduce; the replica's description says so. The timing model is looked up in the
    registry of :mod:`kvbudget.sim.timing_select` by ``timing_model`` (``None``: the
    ``KVBUDGET_TIMING_MODEL`` environment variable, else ``auto``); ``profile`` replaces that
    choice by the registered ``calibrated`` model, except with ``timing_model="measured"``:
    then it corrects the measured model (:mod:`kvbudget.sim.measured_correction`, labelled
    ``<measured label> corrected by <profile>``); ``tiers`` are sized
    with the replica's KV bytes per token (all ranks: vLLM's CPU offload allocates
    ``cpu_bytes_to_use`` for every worker's copy, see docs/engine-facts.md).
    ``async_scheduling`` (vLLM ``--async-scheduling`` / ``--no-async-scheduling``; ``None``:
    ``request.async_scheduling``, the same flag as the plan reads it, and when that is ``None``
    too the planned vLLM version's default) sets ``ReplicaConfig.async_scheduling`` through
    :func:`kvbudget.capacity.versions.vllm_async_scheduling`, which refuses the combinations
    the planned version refuses (``--async-scheduling`` with pipeline parallel before 0.32.0).
    """
    resolved = model or resolve_for_sim(request.model)
    spec = resolved.spec
    if spec is None:
        raise SpecError(f"model {request.model!r}: no spec resolved; cannot simulate it")
    plan = make_plan(request, spec)
    config = replica_config_from_plan(
        plan, enable_prefix_caching=enable_prefix_caching, policy=policy
    )
    flag = request.async_scheduling if async_scheduling is None else async_scheduling
    asynchronous = vllm_async_scheduling(parse_version(plan.engine_version), plan.pp, flag)
    if asynchronous.enabled:
        config = config.model_copy(update={"async_scheduling": True})
    timing: StepTimeModel
    notes: list[str] = []
    if profile is not None and timing_model == "measured" and request.gpu is not None:
        # the measured model corrected by the profile's points (sim/measured_correction.py)
        from kvbudget.sim.measured_correction import corrected
        from kvbudget.sim.timing_select import choose_timing

        roofline = roofline_from_plan(plan, spec, params)
        measured, _ = choose_timing(
            "measured", request, plan, resolved, roofline, expert_parallel=expert_parallel
        )
        timing, notes = corrected(measured, profile)
        timing_name = timing.name
    elif profile is not None:
        from kvbudget.sim.timing_select import BuiltTiming, TimingContext, build_timing

        calibrated = build_timing(
            "calibrated", TimingContext(request, plan, resolved, profile=profile)
        )
        assert isinstance(calibrated, BuiltTiming)  # a profile is given
        timing, timing_name = calibrated.timing, calibrated.label
    elif request.gpu is None:
        # no GPU (vLLM's CPU build behind target http, pool from kv_cache_memory_bytes): no
        # roofline to price steps with; nothing is simulated on this replica's clock
        timing = FixedTiming(name="none (no GPU in the lock)")
        timing_name = "none (no GPU in the lock)"
    else:
        from kvbudget.sim.timing_select import choose_timing

        roofline = roofline_from_plan(plan, spec, params)
        timing, timing_name = choose_timing(
            timing_model, request, plan, resolved, roofline, expert_parallel=expert_parallel
        )
    desc = (
        f"planned: {plan.model_id} on {plan.gpu.id} (tp {plan.tp}): {config.num_gpu_blocks} "
        f"blocks x {config.block_size} tokens, max_model_len {config.max_model_len}, "
        f"timing {timing_name}"
    )
    desc += f"; async scheduling {'on' if asynchronous.enabled else 'off'} ({asynchronous.reason})"
    for note in notes:
        desc += f"; {note}"
    if expert_parallel and not timing_name.startswith("measured"):
        desc += (
            "; expert parallel priced as tensor parallel (same per-rank expert bytes on uniform "
            "routing, all-to-all priced as the all-reduce)"
        )
    setup = ReplicaSetup(config=config, timing=timing, tiers=tuple(tiers), fast_path=fast_path)
    return BuiltReplica(
        setup, timing_name, desc, plan=plan, model=resolved, async_scheduling=asynchronous
    )


def build_manual_replica(
    config: ReplicaConfig, *, step_s: float, per_token_s: float, fast_path: bool = True
) -> BuiltReplica:
    """A replica with a hand-given pool and a fixed step time (tests, demos, the audit)."""
    timing = FixedTiming(step_s=step_s, per_token_s=per_token_s)
    name = f"fixed(step={step_s:g}s, per_token={per_token_s:g}s)"
    desc = (
        f"manual pool: {config.num_gpu_blocks} blocks x {config.block_size} tokens, "
        f"max_model_len {config.max_model_len}, timing {name}"
    )
    return BuiltReplica(ReplicaSetup(config, timing, fast_path=fast_path), name, desc)


def plan_replica(
    request: PlanRequest,
    *,
    enable_prefix_caching: bool = True,
    policy: SchedulingPolicy = "fcfs",
    params: RooflineParams | None = None,
) -> tuple[PlanResult, ReplicaConfig, RooflineTiming]:
    """make_plan + replica config + roofline, from one ``PlanRequest`` (:func:`build_replica`)."""
    built = build_replica(
        request,
        enable_prefix_caching=enable_prefix_caching,
        policy=policy,
        params=params,
        timing_model="roofline",
    )
    assert built.plan is not None and isinstance(built.timing, RooflineTiming)
    return built.plan, built.config, built.timing
