"""Build the target a plan asks for: ``sim``, ``serve`` or ``http``."""

from __future__ import annotations

from typing import Any

import numpy as np

from kvbudget.accept.plan.engine_config import (
    DEFAULT_ROUTER,
    engine_config,
    serve_flags,
    sim_engine_config,
    sim_lock_values,
    sim_router,
    sim_tiers,
)
from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.result import Ledger
from kvbudget.accept.targets.base import PreparedTarget, TargetFactory, TargetInfo
from kvbudget.accept.targets.capacity import build_capacity
from kvbudget.accept.targets.http import HttpTarget, RunAsync, ServeTarget
from kvbudget.accept.targets.sim import SimTarget
from kvbudget.errors import ConfigError, KvbudgetError, TargetError
from kvbudget.safety.redact import secret_from_env


def sim_info(
    lock: ObjectLock,
    timing_name: str,
    *,
    kind: str = "sim",
    num_replicas: int = 1,
    router: str | None = None,
    async_scheduling: str | None = None,
) -> TargetInfo:
    gpu = lock.gpu.type.value or "unknown GPU"
    how = "virtual time" if kind == "sim" else "real time behind kvbudget serve (HTTP)"
    cluster = f"{num_replicas} replicas of " if num_replicas > 1 else ""
    behind = f", {router} router" if num_replicas > 1 and router else ""
    if async_scheduling:
        behind += f", {async_scheduling}"
    return TargetInfo(
        kind=kind,
        source="simulated",
        label=f"simulated {cluster}{gpu} ({timing_name} step-time model, vLLM-style scheduler"
        f"{behind}, {how})",
        timing_model=timing_name if kind == "sim" else f"{timing_name} via kvbudget serve",
        hardware=f"simulated {cluster}{gpu}",
        not_applicable={
            "gpu.driver": "a simulated GPU has no driver; confirm on the real host",
            "engine.container": "no container runs in a simulation; pin the image for real runs",
            "model.revision": "the simulator reads the model's config (pinned by config_sha256), "
            "no weights; pin the HF revision for real runs",
            "engine.flags": "the simulator is configured from the lock's fields, not launch "
            "flags; check the flags on the real engine",
        },
        synthetic_text=True,
    )


def sim_factory(plan: AcceptPlan) -> TargetFactory:
    """A factory of fresh simulated replicas, one per lock (baseline, variants).

    The lock decides the engine: ``lock.offload`` sets the cpu tier of the tier model
    (:func:`kvbudget.accept.plan.engine_config.sim_tiers`), the other factors reach the replica
    through the capacity plan; the engine configuration is read back from the built replica.
    """

    def make(lock: ObjectLock) -> PreparedTarget:
        tiers = sim_tiers(plan.target, lock)
        lock_plan = plan.model_copy(
            update={"target": plan.target.model_copy(update={"kv_tiers": list(tiers)})}
        )
        ctx = build_capacity(lock_plan, lock)
        router = sim_router(plan.target, lock)
        asynchronous = ctx.built.async_scheduling
        info = sim_info(
            lock,
            ctx.timing_name,
            num_replicas=plan.target.replicas,
            router=router,
            async_scheduling=None
            if asynchronous is None
            else f"async scheduling {'on' if asynchronous.enabled else 'off'} "
            f"({asynchronous.reason})",
        )
        target = SimTarget(
            ctx.replica,
            ctx.timing,
            np.random.default_rng([plan.seed, 99]),
            info=info,
            tiers=tiers,
            num_replicas=plan.target.replicas,
            router=router or DEFAULT_ROUTER,
        )
        engine = sim_engine_config(
            plan.target,
            lock,
            ctx.replica,
            ctx.plan,
            tiers,
            router_policy=target.router,
            num_replicas=len(target.replicas),
        )
        computed = {**ctx.computed_lock, **sim_lock_values(engine, ctx.plan, lock)}
        if asynchronous is not None and lock.async_scheduling is not None:
            computed["async_scheduling"] = (
                asynchronous.enabled,
                f"the simulated replica's scheduler ({asynchronous.reason})",
            )
        return PreparedTarget(
            target=target, ledger=ctx.ledger, computed_lock=computed, engine=engine
        )

    return make


def _serve_args(plan: AcceptPlan, lock: ObjectLock) -> list[str]:
    kv_dtype = lock.kv_dtype.value
    if kv_dtype not in (None, "auto"):
        raise ConfigError(
            f"lock.kv_dtype: kvbudget serve plans with kv_dtype auto only (got {kv_dtype!r}); "
            "use target kind sim for a KV dtype comparison"
        )
    if lock.gpu.type.value is None:
        raise ConfigError("lock.gpu.type: target kind serve needs a catalog GPU (kvbudget gpus)")
    args = [
        "--gpu",
        str(lock.gpu.type.value),
        "--seed",
        str(plan.seed),
        "--speedup",
        f"{plan.target.speedup:g}",
    ]
    return args + serve_flags(engine_config(plan.target, lock))


def _declared_hardware(lock: ObjectLock) -> str:
    gpu = lock.gpu.type.value or "GPU not declared"
    count = lock.gpu.count.value
    return f"{gpu}{f' x{count}' if count else ''} (declared in the lock, not read over HTTP)"


def _ledger_or_warning(plan: AcceptPlan, lock: ObjectLock) -> tuple[Ledger, dict[str, Any]]:
    try:
        ctx = build_capacity(plan, lock)
    except KvbudgetError as exc:
        return Ledger(warnings=[f"capacity plan not computed: {exc.one_line()}"]), {}
    return ctx.ledger, ctx.computed_lock


def factory_for(
    plan: AcceptPlan, *, run_async: RunAsync | None = None, keep_prompts: bool = False
) -> TargetFactory:
    kind = plan.target.kind
    if kind == "sim":
        return sim_factory(plan)
    if run_async is None:
        raise TargetError(f"target.kind {kind}: needs an event-loop runner (run from the CLI)")
    runner: RunAsync = run_async
    key_env = plan.target.api_key_env
    if kind == "http" and key_env:
        # checked before any request (the audits would otherwise run without the key); the
        # value is never echoed (it may be a key written in place of the variable's name)
        secret_from_env(key_env, flag="target.api_key_env")

    def make_http(lock: ObjectLock) -> PreparedTarget:
        if lock != plan.lock:
            raise TargetError(
                "target.kind http: kvbudget cannot reconfigure a remote engine for a variant; "
                "restart it with the variant's setting, run the plan again with that lock, and "
                "compare the two report.json files"
            )
        ledger, computed = _ledger_or_warning(plan, lock)
        t = plan.target
        assert t.base_url is not None
        target = HttpTarget(
            base_url=t.base_url,
            model=t.served_model or lock.model.id,
            run_async=runner,
            metrics_url=t.metrics_url,
            api_key_env=t.api_key_env,
            timeout_s=t.request_timeout_s,
            keep_prompts=keep_prompts,
            seed=plan.seed,
            hardware=_declared_hardware(lock),
        )
        return PreparedTarget(target=target, ledger=ledger, computed_lock=computed)

    def make_serve(lock: ObjectLock) -> PreparedTarget:
        args = _serve_args(plan, lock)
        ledger, computed = _ledger_or_warning(plan, lock)
        target = ServeTarget(
            serve_args=args,
            model=lock.model.id,
            run_async=runner,
            info=sim_info(lock, "roofline", kind="serve"),
            timeout_s=plan.target.request_timeout_s,
            keep_prompts=keep_prompts,
        )
        return PreparedTarget(
            target=target,
            ledger=ledger,
            computed_lock=computed,
            engine=engine_config(plan.target, lock),
        )

    return make_http if kind == "http" else make_serve
