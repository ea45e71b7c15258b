"""Seed step 2 ("建立容量台账"): the capacity ledger, the three budgets and the simulated replica.

One source of truth: the simulated replica is built by ``sim.fromplan.build_replica`` (the
builder ``kvbudget sim`` and ``kvbudget serve --gpu`` use) from the lock's ``PlanRequest``, so it
gets exactly the blocks, page sizes and scheduler limits ``plan`` computes, KV bytes per token
per replica, MoE active parameters for the roofline and the target's KV tiers.

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

from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.result import Budget, Ledger, LedgerEntry
from kvbudget.capacity.budget import structural_budget, three_budgets
from kvbudget.capacity.plan_types import Engine, PlanRequest, PlanResult, planned_engine
from kvbudget.capacity.window_charge import window_charges
from kvbudget.engine_name import REPORTED, VLLM, engine_of
from kvbudget.errors import CapacityError, ConfigError, SpecError, shown_value
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.fromplan import BuiltReplica, build_replica
from kvbudget.sim.timing import CalibrationProfile, StepTimeModel
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import format_bytes


@dataclass(frozen=True, slots=True)
class CapacityContext:
    plan: PlanResult
    ledger: Ledger
    #: the simulated replica (``sim.fromplan.build_replica``: the same one sim and serve build)
    built: BuiltReplica
    computed_lock: dict[str, tuple[Any, str]]

    @property
    def replica(self) -> ReplicaConfig:
        return self.built.config

    @property
    def timing(self) -> StepTimeModel:
        return self.built.timing

    @property
    def timing_name(self) -> str:
        return self.built.timing_name


def _value(lock: ObjectLock, name: str, default: Any = None) -> Any:
    value = getattr(lock, name).value
    return default if value is None else value


def _planned_engine(lock: ObjectLock, *, weights_only: bool) -> Engine:
    """The engine whose pool arithmetic the lock's plan uses: the lock's ``engine.name`` (vLLM
    when it names none, or ``kvbudget-serve``, which simulates vLLM); llama.cpp has no pool plan
    (its cache is ``kvbudget calc --engine llamacpp``), so it is refused, not planned as vLLM,
    unless only the checkpoint's weights are asked (``weights_only``: engine-independent)."""
    name = lock.engine.name.value
    engine = engine_of(name)
    if engine is None:
        return VLLM
    if planned_engine(engine) is not None:
        return engine
    if weights_only:
        return VLLM
    raise ConfigError(
        f"lock.engine.name: {shown_value(name)}: kvbudget plans vLLM and SGLang pools, not "
        f"{REPORTED.get(engine, engine)}'s; size its cache with `kvbudget calc --engine {engine}`",
        field="lock.engine.name",
    )


def plan_request(lock: ObjectLock, *, weights_only: bool = False) -> PlanRequest:
    """The plan request of ``lock``'s deployment. ``weights_only``: the caller reads only the
    checkpoint's weight bytes (deploy's memory budget), so a llama.cpp lock is planned too, with
    no engine version (its build number is no vLLM version)."""
    engine = _planned_engine(lock, weights_only=weights_only)
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
    # an engine planned in another's stead (llama.cpp's weights as vLLM's): its version is not
    named = engine_of(lock.engine.name.value) or VLLM
    engine_version = lock.engine.version.value if engine == named else None
    return PlanRequest(
        model=lock.model.id,
        gpu=gpu,
        gpu_memory_bytes=device_bytes,
        kv_cache_memory_bytes=kv_bytes,
        num_gpu_blocks_override=override,
        tp=_value(lock, "tensor_parallel", 1),
        pp=_value(lock, "pipeline_parallel", 1),
        engine=engine,
        engine_version=engine_version,
        gpu_memory_utilization=_value(lock, "gpu_memory_utilization"),
        max_model_len=_value(lock, "max_model_len"),
        max_num_batched_tokens=_value(lock, "max_num_batched_tokens"),
        max_num_seqs=_value(lock, "max_num_seqs"),
        kv_dtype=_value(lock, "kv_dtype", "auto"),
        block_size=_value(lock, "block_size"),
        quantization=lock.quantization.value if lock.quantization else None,
    )


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
    charges = window_charges(result)
    entries += [
        LedgerEntry(
            name="kv_bytes_per_token", value=result.kv_bytes_per_token_replica, source="plan"
        ),
        LedgerEntry(name="num_blocks", value=result.num_blocks, source="plan (vLLM pool rule)"),
        LedgerEntry(name="kv_cache_tokens", value=result.kv_cache_tokens, source="plan"),
        LedgerEntry(
            name="max_concurrency",
            value=round(result.max_concurrency, 2),
            source="plan",
            note="; ".join(charges.lines()) if charges else None,
        ),
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
            f"the most loaded GPU of {format_bytes(device.device_bytes)} "
            f"({device.headroom_text()})",
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
    """Plan the pool for ``lock`` and build the simulated replica (``sim.fromplan``'s builder)."""
    resolved = resolve_model(lock.model.id)
    if resolved.spec is None:
        raise SpecError(
            f"lock.model.id: {lock.model.id!r} could not be resolved: {resolved.reason}"
        )
    request = plan_request(lock)
    policy = lock.prefix_caching.value
    profile = None
    if plan.target.timing_model == "calibrated" and plan.target.profile is not None:
        profile = CalibrationProfile.load(plan.target.profile)
    try:
        built = build_replica(
            request,
            enable_prefix_caching=bool(policy is None or policy.enabled),
            profile=profile,
            tiers=plan.target.kv_tiers,
            model=resolved,
            async_scheduling=lock.async_scheduling.value if lock.async_scheduling else None,
        )
    except CapacityError as exc:
        raise CapacityError(f"lock: the deployment does not fit: {exc}") from None
    except ConfigError as exc:
        if exc.field == "gpu":
            raise ConfigError(f"lock.gpu.type: {exc}", field="lock.gpu.type") from None
        raise
    result = built.plan
    assert result is not None
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
        built=built,
        computed_lock=computed,
    )
