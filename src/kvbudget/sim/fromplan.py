"""Build a simulated replica from ``plan``'s ``PlanResult`` (one source of truth).

The replica gets exactly the pool ``kvbudget plan`` computes for the same model, GPU and flags:
``num_blocks`` (block 0 is the null block), ``block_size``, the KV cache groups, the scheduler
limits; the roofline timing reads the GPU catalog entry and the weights estimate of the same
plan. Group kinds map as: ``full``/``mla`` -> full, ``sliding`` -> sliding (window),
``chunked`` -> sliding with the chunk as window (an approximation: chunked-local attention
resets at chunk boundaries, which holds at most as many blocks), ``mamba`` -> state.
"""

from __future__ import annotations

from typing import Any

from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import CapacityError, ConfigError, SpecError
from kvbudget.sim.config import KVGroupConfig, ReplicaConfig, SchedulingPolicy
from kvbudget.sim.timing import GpuPerf, ModelCost, RooflineParams, RooflineTiming
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model


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
    if plan.engine != "vllm":
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
    head_dim = next((int(getattr(layer, "head_dim", 0)) for layer in spec.layers), 0) or (
        hidden // heads if heads else 0
    )
    num_params = float(plan.weights.num_params or plan.weights.total_bytes / 2)
    active = num_params
    if spec.num_experts and spec.num_experts_per_tok and spec.moe_intermediate_size and hidden:
        expert_params = 3.0 * hidden * spec.moe_intermediate_size * spec.num_experts
        expert_params *= spec.num_layers
        idle = expert_params * (1.0 - spec.num_experts_per_tok / spec.num_experts)
        active = max(num_params * 0.05, num_params - idle)
    return ModelCost(
        model_id=spec.model_id,
        num_layers=spec.num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        head_dim=head_dim,
        num_active_params=active,
        weights_bytes=float(plan.weights.total_bytes),
        kv_bytes_per_token=float(plan.kv_bytes_per_token_replica),
    )


def gpu_perf(plan: PlanResult) -> GpuPerf:
    """Roofline inputs from the plan's GPU catalog entry (bf16 dense peak, HBM bandwidth)."""
    gpu = plan.gpu
    if gpu.bf16_dense_tflops is None or gpu.hbm_bandwidth_gb_s is None:
        raise ConfigError(
            f"gpu: catalog entry {gpu.id!r} lacks bf16 TFLOPS or HBM bandwidth, which the "
            "roofline timing needs; pick a catalog GPU (kvbudget gpus) or use a calibrated "
            "timing profile",
            field="gpu",
        )
    return GpuPerf(
        name=gpu.id,
        memory_bytes=float(gpu.memory_bytes),
        bandwidth_bytes_per_s=gpu.hbm_bandwidth_gb_s * 1e9,
        peak_flops=gpu.bf16_dense_tflops * 1e12,
        link_bytes_per_s=(gpu.interconnect_gb_s or 0.0) * 1e9,
    )


def roofline_from_plan(
    plan: PlanResult, spec: ModelSpec, params: RooflineParams | None = None
) -> RooflineTiming:
    """Roofline step-time model for the plan's replica (TP ranks)."""
    return RooflineTiming(model_cost(spec, plan), gpu_perf(plan), tp=plan.tp, params=params)


def plan_replica(
    request: PlanRequest,
    *,
    enable_prefix_caching: bool = True,
    policy: SchedulingPolicy = "fcfs",
    params: RooflineParams | None = None,
) -> tuple[PlanResult, ReplicaConfig, RooflineTiming]:
    """make_plan + replica config + roofline, from one ``PlanRequest``."""
    resolved = resolve_model(request.model)
    if resolved.spec is None:
        raise SpecError(
            f"model {request.model!r}: cannot simulate it ({resolved.reason or resolved.status}); "
            f"missing fields: {', '.join(resolved.missing) or 'none listed'}"
        )
    plan = make_plan(request, resolved.spec)
    config = replica_config_from_plan(
        plan, enable_prefix_caching=enable_prefix_caching, policy=policy
    )
    return plan, config, roofline_from_plan(plan, resolved.spec, params)
