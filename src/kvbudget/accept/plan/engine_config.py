"""From a lock to the engine configuration a target is started with, per comparison factor.

A single-factor comparison is only worth its verdict when the variant's engine really differs
from the baseline's in the declared factor. This module is the one place that says, for each
target kind, how each lock field reaches the engine:

======================  ==========================  ==========================  ===========
factor (lock field)     sim (virtual time)          serve (kvbudget serve)      http
======================  ==========================  ==========================  ===========
``kv_dtype``            KV pool and bytes per token  refused (no KV dtype flag)  refused
``block_size``          replica block size           ``--block-size``            refused
``prefix_caching``      ``enabled`` -> prefix cache  ``--no-prefix-caching``     refused
``max_model_len``       replica max_model_len        ``--max-model-len``         refused
``offload``             the cpu tier of the tier     refused (no tier model)     refused
                        model (``target.kv_tiers``)
``router_policy``       the router over              refused (one replica)       refused
                        ``target.replicas`` (>= 2)
======================  ==========================  ==========================  ===========

On the sim target with ``target.replicas`` of 2 or more, the replicas run behind the
simulator's router (:mod:`kvbudget.sim.router`) with the policy ``lock.router_policy``
(kvbudget's default ``round_robin`` when the lock gives none); with one replica no router
chooses, so a ``router_policy`` comparison is refused there.

A refused factor stops the plan before anything runs (:func:`factor_refusal`, called by the
plan validator) with one line naming the comparison, the factor and what to do instead; a
remote engine (``http``) cannot be restarted by kvbudget, so its variants are compared as two
runs with ``kvbudget report BASE.json --compare VARIANT.json --factor F``.

The engine configuration (:class:`EngineConfig`) uses vLLM's engine-argument names
(``kv_cache_dtype``, ``enable_prefix_caching``, ...); :func:`engine_differences` is what the
comparison records, and what the tests pin: exactly the factor's field changes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvbudget.accept.plan.checks import Comparison, TargetPlan
from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.accept.plan.lockcheck import Difference, apply_overrides
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.errors import ConfigError
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.router import ROUTERS
from kvbudget.sim.tiers import TierConfig
from kvbudget.units import format_bytes, parse_bytes

#: the engine-configuration field each comparison factor changes
FACTOR_ENGINE_FIELD: dict[str, str] = {
    "kv_dtype": "kv_cache_dtype",
    "block_size": "block_size",
    "prefix_caching": "enable_prefix_caching",
    "max_model_len": "max_model_len",
    "offload": "kv_offload",
    "router_policy": "router_policy",
}

_HTTP_FIX = (
    "kvbudget cannot restart a remote engine with the variant's setting; run the plan once per "
    "setting and compare the two runs with kvbudget report BASE/report.json --compare "
    "VARIANT/report.json --factor {factor}"
)


def parse_offload(value: str | None, *, field: str = "lock.offload") -> int | None:
    """``none`` -> 0 bytes, ``cpu:64GiB`` -> the cpu tier's bytes, not given -> ``None``."""
    if value is None:
        return None
    text = value.strip()
    if text.lower() == "none":
        return 0
    kind, sep, size = text.partition(":")
    if kind.strip().lower() != "cpu" or not sep:
        raise ConfigError(
            f"{field}: cannot read {value!r}; write none or cpu:SIZE (e.g. cpu:64GiB)",
            field=field,
        )
    num_bytes = parse_bytes(size.strip(), field=field)
    if num_bytes <= 0:
        raise ConfigError(
            f"{field}: the cpu tier needs a size above 0 (got {value!r})", field=field
        )
    return num_bytes


def sim_tiers(target: TargetPlan, lock: ObjectLock) -> tuple[TierConfig, ...]:
    """The simulator's tier model for ``lock``: ``target.kv_tiers`` with the cpu tier's capacity
    set by ``lock.offload`` when the lock gives it (``none`` removes the cpu tier)."""
    tiers = tuple(target.kv_tiers)
    offload = parse_offload(lock.offload.value)
    if offload is None:
        return tiers
    rest = tuple(t for t in tiers if t.name != "cpu")
    if offload == 0:
        return rest
    cpu = next((t for t in tiers if t.name == "cpu"), None)
    if cpu is None:
        raise ConfigError(
            f"lock.offload: {lock.offload.value!r} needs the host link of the cpu tier on the sim "
            "target; declare target.kv_tiers: [{name: cpu, capacity_bytes: ..., "
            "bandwidth_bytes_per_s: ...}]",
            field="lock.offload",
        )
    return (cpu.model_copy(update={"capacity_bytes": offload}), *rest)


def offload_text(tiers: tuple[TierConfig, ...]) -> str:
    """The lock's spelling of a tier model's cpu tier (``none`` or ``cpu:64.00 GiB``)."""
    cpu = next((t for t in tiers if t.name == "cpu"), None)
    return "none" if cpu is None else f"cpu:{format_bytes(cpu.capacity_bytes).replace(' ', '')}"


#: the sim target's router when ``target.replicas`` > 1 and the lock names none
DEFAULT_ROUTER = "round_robin"


def sim_router(target: TargetPlan, lock: ObjectLock) -> str | None:
    """The router policy of the sim target's replicas (``None``: one replica, no router)."""
    if target.replicas <= 1:
        return None
    value = lock.router_policy.value
    if value is None:
        return DEFAULT_ROUTER
    if value not in ROUTERS:
        raise ConfigError(
            f"lock.router_policy: {value!r} is not a simulated router; use one of "
            f"{', '.join(ROUTERS)}",
            field="lock.router_policy",
        )
    return value


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the engine of one arm is started with (vLLM's engine-argument names)."""

    target_kind: str
    kv_cache_dtype: str
    block_size: int | None
    enable_prefix_caching: bool
    max_model_len: int | None
    #: the tiers below the GPU pool (sim: the tier model; elsewhere: none applied)
    kv_offload: tuple[TierConfig, ...]
    #: ``None``: one replica, no router
    router_policy: str | None
    #: identical replicas behind the router (sim: ``target.replicas``)
    num_replicas: int
    tensor_parallel_size: int
    gpu_memory_utilization: float | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    #: vLLM --async-scheduling (sim: as the replica resolved it; elsewhere: the lock's, None
    #: for the engine version's default)
    async_scheduling: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kv_offload"] = offload_text(self.kv_offload)
        return data


def engine_config(target: TargetPlan, lock: ObjectLock) -> EngineConfig:
    """The engine configuration ``lock`` gives a target of kind ``target.kind``."""
    policy = lock.prefix_caching.value
    return EngineConfig(
        target_kind=target.kind,
        kv_cache_dtype=lock.kv_dtype.value or "auto",
        block_size=lock.block_size.value,
        enable_prefix_caching=bool(policy is None or policy.enabled),
        max_model_len=lock.max_model_len.value,
        kv_offload=sim_tiers(target, lock) if target.kind == "sim" else (),
        router_policy=sim_router(target, lock) if target.kind == "sim" else None,
        num_replicas=target.replicas,
        tensor_parallel_size=lock.tensor_parallel.value or 1,
        gpu_memory_utilization=lock.gpu_memory_utilization.value,
        max_num_seqs=lock.max_num_seqs.value,
        max_num_batched_tokens=lock.max_num_batched_tokens.value,
        async_scheduling=lock.async_scheduling.value if lock.async_scheduling else None,
    )


def sim_engine_config(
    target: TargetPlan,
    lock: ObjectLock,
    replica: ReplicaConfig,
    plan: PlanResult,
    tiers: tuple[TierConfig, ...],
    *,
    router_policy: str | None,
    num_replicas: int,
) -> EngineConfig:
    """What the simulated replicas were really built with (read back from the target)."""
    return EngineConfig(
        target_kind=target.kind,
        kv_cache_dtype=plan.kv_dtype,
        block_size=replica.block_size,
        enable_prefix_caching=replica.enable_prefix_caching,
        max_model_len=replica.max_model_len,
        kv_offload=tiers,
        router_policy=router_policy,
        num_replicas=num_replicas,
        tensor_parallel_size=plan.tp,
        gpu_memory_utilization=lock.gpu_memory_utilization.value,
        max_num_seqs=replica.max_num_seqs,
        max_num_batched_tokens=replica.max_num_batched_tokens,
        async_scheduling=replica.async_scheduling,
    )


def serve_flags(config: EngineConfig) -> list[str]:
    """``kvbudget serve`` flags of an engine configuration (vLLM's flag names)."""
    args: list[str] = ["--tp", str(config.tensor_parallel_size)]
    for flag, value in (
        ("--block-size", config.block_size),
        ("--max-model-len", config.max_model_len),
        ("--max-num-seqs", config.max_num_seqs),
        ("--max-num-batched-tokens", config.max_num_batched_tokens),
    ):
        if value is not None:
            args += [flag, str(value)]
    if not config.enable_prefix_caching:
        args.append("--no-prefix-caching")
    if config.async_scheduling is not None:
        args.append("--async-scheduling" if config.async_scheduling else "--no-async-scheduling")
    return args


def engine_differences(baseline: EngineConfig, variant: EngineConfig) -> list[Difference]:
    """Every engine-configuration field that differs."""
    a, b = baseline.as_dict(), variant.as_dict()
    return [Difference(k, a[k], b[k]) for k in a if a[k] != b[k]]


def factor_refusal(target: TargetPlan, comparison: Comparison, lock: ObjectLock) -> str | None:
    """Why ``comparison``'s factor cannot change the variant's engine on this target, or
    ``None`` when it can (then the variant's engine differs in exactly that factor)."""
    factor, kind = comparison.factor, target.kind
    if kind == "http":
        return f"factor {factor} on target kind http: " + _HTTP_FIX.format(factor=factor)
    if factor == "router_policy" and kind == "serve":
        return (
            "factor router_policy on target kind serve: kvbudget serve is one replica, so no "
            "router chooses between replicas; use target kind sim with target.replicas: 2 or more"
        )
    if factor == "router_policy" and target.replicas <= 1:
        return (
            "factor router_policy on target kind sim: target.replicas is 1, so no router "
            "chooses between replicas; set target.replicas: 2 or more"
        )
    if factor == "kv_dtype" and kind == "serve":
        return (
            "factor kv_dtype on target kind serve: kvbudget serve has no KV dtype flag (it plans "
            "kv_dtype auto); use target kind sim for a KV dtype comparison"
        )
    if factor == "offload" and kind == "serve":
        return (
            "factor offload on target kind serve: kvbudget serve has no KV tier model; use "
            "target kind sim with target.kv_tiers for an offload comparison"
        )
    try:
        variant_lock = apply_overrides(lock, comparison.set)
        base_cfg = engine_config(target, lock)
        var_cfg = engine_config(target, variant_lock)
    except ConfigError as exc:
        return " ".join(str(exc).split())
    changed = [name for name, _, _ in engine_differences(base_cfg, var_cfg)]
    wanted = FACTOR_ENGINE_FIELD[factor]
    if factor == "prefix_caching" and wanted not in changed:
        return (
            "factor prefix_caching: the variant keeps enable_prefix_caching "
            f"{str(var_cfg.enable_prefix_caching).lower()}; the engine only switches the prefix "
            "cache on or off (the salt policy is the requests' cache_salt: judge it with "
            "audits.isolation)"
        )
    if wanted not in changed and not changed:
        return (
            f"factor {factor}: the variant's engine configuration equals the baseline's "
            f"({wanted} {var_cfg.as_dict()[wanted]!r} on target kind {kind}); set a different value"
        )
    return None


def sim_lock_values(
    engine: EngineConfig, plan: PlanResult, lock: ObjectLock
) -> dict[str, tuple[Any, str]]:
    """Lock fields the simulated target sets itself, with where each was read: they are
    confirmed for that target (the replica it built, the capacity plan it applied)."""
    replica = "the simulated replica's configuration"
    policy = lock.prefix_caching.value
    salt = policy.salt if policy is not None else "per-tenant"
    out: dict[str, tuple[Any, str]] = {
        "prefix_caching": (
            {"enabled": engine.enable_prefix_caching, "salt": salt},
            "the simulated replica's prefix cache (on/off); cache_salt per tenant of the load",
        )
    }
    pool = f"the simulated replica's KV pool ({plan.num_blocks} blocks, the capacity plan)"
    for name in ("kv_cache_memory_bytes", "num_gpu_blocks_override"):
        given = getattr(lock, name)
        if given is not None and given.value is not None:
            out[name] = (given.value, pool)  # the pool was planned from this value
    return out | {
        "engine.name": (plan.engine, "the simulator applies this engine's pool rule and scheduler"),
        "engine.version": (plan.engine_version, "the pool rule kvbudget plan applied"),
        "gpu.type": (
            lock.gpu.type.value or plan.gpu.id,
            f"GPU catalog entry {plan.gpu.id} (the simulator's timing model and memory)",
        ),
        "gpu.count": (
            plan.num_gpus * engine.num_replicas,
            "tensor_parallel x pipeline_parallel of the capacity plan"
            + (f" x {engine.num_replicas} simulated replicas" if engine.num_replicas > 1 else ""),
        ),
        "tensor_parallel": (plan.tp, "the capacity plan"),
        "pipeline_parallel": (plan.pp, "the capacity plan"),
        "kv_dtype": (engine.kv_cache_dtype, "the capacity plan (resolved KV dtype)"),
        "max_model_len": (engine.max_model_len, replica),
        "block_size": (engine.block_size, replica),
        "gpu_memory_utilization": (engine.gpu_memory_utilization, "the capacity plan"),
        "max_num_seqs": (engine.max_num_seqs, replica),
        "max_num_batched_tokens": (engine.max_num_batched_tokens, replica),
        "offload": (offload_text(engine.kv_offload), "the simulator's tier model"),
        "router_policy": (
            (engine.router_policy, f"the simulated router over {engine.num_replicas} replicas")
            if engine.router_policy is not None
            else ("none", "one simulated replica: no router")
        ),
    }
