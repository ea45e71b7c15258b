"""Seed step 2 ("建立容量台账"): the capacity ledger, the three budgets and the simulated replica.

One source of truth: the simulated replica gets exactly the blocks, page sizes and scheduler
limits that ``plan`` (``capacity.planner.make_plan``) computes for the locked model, GPU and
flags; the roofline timing model reads the same GPU catalog entry and weights estimate.

The three budgets, side by side (all ``computed``):

* structural — ``kv_bytes_per_token x (longest prompt + output) x peak concurrency`` of the
  declared load (the plain formula, no blocks, no padding);
* engine pool — the KV pool the engine allocates (``num_blocks x page bytes x layers``);
* device peak — weights + activation peak + non-torch + CUDA graphs + the KV pool, against the
  device's memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbudget.accept.plan_lock import ObjectLock
from kvbudget.accept.planfile import AcceptPlan
from kvbudget.accept.result import Budget, Ledger, LedgerEntry
from kvbudget.capacity.budget import structural_budget, three_budgets
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import CapacityError, ConfigError, SpecError
from kvbudget.sim.config import KVGroupConfig, ReplicaConfig
from kvbudget.sim.timing import (
    CalibratedTiming,
    CalibrationProfile,
    FixedTiming,
    GpuPerf,
    ModelCost,
    RooflineTiming,
    StepTimeModel,
)
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import format_bytes


@dataclass(frozen=True, slots=True)
class CapacityContext:
    plan: PlanResult
    ledger: Ledger
    replica: ReplicaConfig
    timing: StepTimeModel
    timing_name: str
    computed_lock: dict[str, tuple[Any, str]]


def _value(lock: ObjectLock, name: str, default: Any = None) -> Any:
    value = getattr(lock, name).value
    return default if value is None else value


def plan_request(lock: ObjectLock) -> PlanRequest:
    gpu = lock.gpu.type.value
    kv_bytes = lock.kv_cache_memory_bytes.value if lock.kv_cache_memory_bytes else None
    override = lock.num_gpu_blocks_override.value if lock.num_gpu_blocks_override else None
    device_bytes = None
    if gpu is None and kv_bytes is not None:
        # no GPU (vLLM's CPU build): the pool is the given KV memory; the device is a
        # placeholder with room for it, so the device-peak budget says nothing
        device_bytes = kv_bytes + (64 << 30)
    elif gpu is None:
        raise ConfigError("lock.gpu.type: not set; name a GPU from `kvbudget gpus` (e.g. H100)")
    engine_version = lock.engine.version.value
    return PlanRequest(
        model=lock.model.id,
        gpu=gpu,
        gpu_memory_bytes=device_bytes,
        kv_cache_memory_bytes=kv_bytes,
        num_gpu_blocks_override=override,
        tp=_value(lock, "tensor_parallel", 1),
        pp=_value(lock, "pipeline_parallel", 1),
        engine="vllm",
        engine_version=engine_version,
        gpu_memory_utilization=_value(lock, "gpu_memory_utilization"),
        max_model_len=_value(lock, "max_model_len"),
        max_num_batched_tokens=_value(lock, "max_num_batched_tokens"),
        max_num_seqs=_value(lock, "max_num_seqs"),
        kv_dtype=_value(lock, "kv_dtype", "auto"),
        block_size=_value(lock, "block_size"),
    )


def _head_dim(spec: ModelSpec) -> int:
    for layer in spec.layers:
        value = getattr(layer, "head_dim", None)
        if isinstance(value, int) and value > 0:
            return value
    if spec.hidden_size and spec.num_attention_heads:
        return spec.hidden_size // spec.num_attention_heads
    raise SpecError(f"{spec.model_id}: head_dim unknown; the roofline timing model needs it")


def replica_from_plan(result: PlanResult, *, prefix_caching: bool) -> ReplicaConfig:
    """The simulated replica of a plan: same blocks, block size, groups and limits."""
    groups = []
    for group in result.groups:
        if group.kind == "full" or group.kind == "mla":
            kind = "full"
        elif group.kind in ("sliding", "chunked"):
            kind = "sliding"
        elif group.kind == "mamba":
            kind = "state"
        else:
            continue
        window = group.sliding_window or group.attention_chunk_size
        groups.append(
            KVGroupConfig(
                kind=kind,
                num_layers=max(1, group.num_layers),
                sliding_window_tokens=window if kind == "sliding" else None,
                page_size_bytes=group.page_size_bytes,
            )
        )
    return ReplicaConfig(
        name="replica-0",
        num_gpu_blocks=result.num_blocks,
        block_size=result.block_size,
        kv_groups=tuple(groups) or (KVGroupConfig(),),
        max_num_seqs=result.max_num_seqs,
        max_num_batched_tokens=result.max_num_batched_tokens,
        max_model_len=result.max_model_len,
        enable_prefix_caching=prefix_caching,
        kv_bytes_per_token=result.kv_bytes_per_token_per_rank,
    )


def roofline_from_plan(result: PlanResult, spec: ModelSpec) -> RooflineTiming:
    gpu = result.gpu
    if gpu.bf16_dense_tflops is None or gpu.hbm_bandwidth_bytes_per_s is None:
        raise ConfigError(
            f"lock.gpu.type: GPU {gpu.id!r} has no bf16 TFLOPS or HBM bandwidth in the catalog; "
            "the roofline timing model needs both (pick a catalog GPU or use a calibrated profile)"
        )
    model = ModelCost(
        model_id=result.model_id,
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size or 0,
        num_attention_heads=spec.num_attention_heads or 0,
        head_dim=_head_dim(spec),
        num_active_params=float(result.weights.num_params or 0),
        weights_bytes=float(result.weights.total_bytes),
        kv_bytes_per_token=float(result.kv_bytes_per_token_replica),
    )
    perf = GpuPerf(
        name=gpu.id,
        memory_bytes=float(gpu.memory_bytes),
        bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s,
        peak_flops=gpu.bf16_dense_tflops * 1e12,
        link_bytes_per_s=gpu.interconnect_bytes_per_s or 0.0,
    )
    return RooflineTiming(model, perf, tp=result.tp)


def build_ledger(plan: AcceptPlan, result: PlanResult, spec: ModelSpec) -> Ledger:
    entries = [
        LedgerEntry(name=i.name, value=i.value, source=i.source, kind="computed", note=i.note)
        for i in plan.ledger.inputs
    ]
    for item in spec.ledger:
        if item.field in ("num_hidden_layers", "num_key_value_heads", "head_dim", "torch_dtype"):
            entries.append(
                LedgerEntry(
                    name=f"config.{item.field}",
                    value=item.value,
                    source=f"{item.source} {item.location}".strip(),
                    note=item.note or None,
                )
            )
    entries += [
        LedgerEntry(
            name="kv_bytes_per_token", value=result.kv_bytes_per_token_replica, source="plan"
        ),
        LedgerEntry(name="num_blocks", value=result.num_blocks, source="plan (vLLM pool rule)"),
        LedgerEntry(name="kv_cache_tokens", value=result.kv_cache_tokens, source="plan"),
        LedgerEntry(name="max_concurrency", value=round(result.max_concurrency, 2), source="plan"),
        LedgerEntry(
            name="weights_bytes", value=result.weights.total_bytes, source=result.weights.method
        ),
    ]
    load = plan.load
    longest = max(t.max_tokens + t.output_tokens for t in load.tiers.values())
    peak = max(c.concurrency for c in load.concurrency.values())
    structural = structural_budget(
        spec, kv_dtype=result.kv_dtype, engine=result.engine, num_tokens=longest, num_sequences=peak
    )
    three = three_budgets(result, spec)
    device = max(three.device_peak, key=lambda d: d.peak_bytes)
    budgets = [
        Budget(
            name="structural",
            bytes=structural.total_bytes,
            kind="computed",
            what=f"{peak} sequences x {longest} tokens (longest prompt + output at peak "
            f"concurrency): {structural.method}",
        ),
        Budget(
            name="engine_pool",
            bytes=three.engine_pool_bytes_replica,
            kind="computed",
            what=f"{result.num_blocks} blocks of {result.block_size} tokens "
            f"({three.engine_pool_tokens} tokens) per replica",
        ),
        Budget(
            name="device_peak",
            bytes=device.peak_bytes,
            kind="computed",
            what=f"CUDA context + weights + activation + non-torch + CUDA graphs + KV pool on "
            f"the most loaded GPU of {format_bytes(device.device_bytes)} (headroom "
            f"{format_bytes(device.headroom_bytes)}, safety margin "
            f"{format_bytes(device.margin_bytes)})",
        ),
    ]
    warnings: list[str] = list(result.notes)
    if plan.lock.gpu.type.value is None:
        warnings.append(
            "no GPU in the lock: the pool is lock.kv_cache_memory_bytes; the device-peak "
            "budget is for a placeholder device and says nothing"
        )
    if structural.total_bytes > three.engine_pool_bytes_replica:
        warnings.append(
            "the structural peak of the declared load exceeds the engine pool: the peak cells "
            "must queue or preempt (see their verdicts)"
        )
    if not device.ok:
        warnings.append(
            f"device peak leaves {device.headroom_bytes} bytes, below the margin "
            f"{device.margin_bytes} bytes (fragmentation and workspace)"
        )
    if not result.fits and result.error:
        warnings.append(result.error)
    pool = {k: v for k, v in result.to_dict().items() if k not in ("breakdown", "groups")}
    return Ledger(entries=entries, budgets=budgets, pool=pool, warnings=warnings)


def build_capacity(plan: AcceptPlan, lock: ObjectLock) -> CapacityContext:
    """Plan the pool for ``lock`` and build the simulated replica and timing model."""
    resolved = resolve_model(lock.model.id)
    if resolved.spec is None:
        raise SpecError(
            f"lock.model.id: {lock.model.id!r} could not be resolved: {resolved.reason}"
        )
    result = make_plan(plan_request(lock), resolved.spec)
    if not result.fits:
        raise CapacityError(f"lock: the deployment does not fit: {result.error}")
    policy = lock.prefix_caching.value
    replica = replica_from_plan(result, prefix_caching=bool(policy is None or policy.enabled))
    timing: StepTimeModel
    timing_name = "roofline"
    if plan.target.timing_model == "calibrated" and plan.target.profile is not None:
        profile = CalibrationProfile.load(plan.target.profile)
        timing = CalibratedTiming(profile)
        timing_name = f"calibrated ({profile.name}: {profile.engine} on {profile.gpu})"
    elif lock.gpu.type.value is None:
        # no GPU (vLLM's CPU build behind target http): no roofline; nothing is simulated
        timing = FixedTiming(name="none (no GPU in the lock)")
        timing_name = "none (no GPU in the lock)"
    else:
        timing = roofline_from_plan(result, resolved.spec)
    computed: dict[str, tuple[Any, str]] = {}
    if resolved.source is not None:
        computed["model.id"] = (
            lock.model.id,
            f"resolved from the {resolved.source.origin} config of {resolved.source.model_id}",
        )
        computed["model.config_sha256"] = (
            resolved.source.sha256,
            f"sha256 of {resolved.source.origin} config ({resolved.source.model_id})",
        )
    return CapacityContext(
        plan=result,
        ledger=build_ledger(plan, result, resolved.spec),
        replica=replica,
        timing=timing,
        timing_name=timing_name,
        computed_lock=computed,
    )
