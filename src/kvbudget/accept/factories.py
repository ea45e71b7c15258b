"""Build the target a plan asks for (``sim`` here; ``serve``/``http`` need the load runner)."""

from __future__ import annotations

import numpy as np

from kvbudget.accept.capacity import build_capacity
from kvbudget.accept.plan_lock import ObjectLock
from kvbudget.accept.planfile import AcceptPlan
from kvbudget.accept.run import PreparedTarget, TargetFactory
from kvbudget.accept.sim_target import SimTarget
from kvbudget.accept.targets import TargetInfo
from kvbudget.errors import TargetError


def sim_info(lock: ObjectLock, timing_name: str) -> TargetInfo:
    gpu = lock.gpu.type.value or "unknown GPU"
    return TargetInfo(
        kind="sim",
        source="simulated",
        label=f"simulated {gpu} ({timing_name} step-time model, vLLM-style scheduler)",
        timing_model=timing_name,
        hardware=f"simulated {gpu}",
        not_applicable={
            "gpu.driver": "a simulated GPU has no driver; confirm on the real host",
            "engine.container": "no container runs in a simulation; pin the image for real runs",
        },
        synthetic_text=True,
    )


def sim_factory(plan: AcceptPlan) -> TargetFactory:
    """A factory of fresh simulated replicas, one per lock (baseline, variants)."""

    def make(lock: ObjectLock) -> PreparedTarget:
        ctx = build_capacity(plan, lock)
        info = sim_info(lock, ctx.timing_name)
        target = SimTarget(
            ctx.replica, ctx.timing, np.random.default_rng([plan.seed, 99]), info=info
        )
        return PreparedTarget(target=target, ledger=ctx.ledger, computed_lock=ctx.computed_lock)

    return make


def factory_for(plan: AcceptPlan) -> TargetFactory:
    kind = plan.target.kind
    if kind == "sim":
        return sim_factory(plan)
    raise TargetError(
        f"target.kind: '{kind}' is not wired into accept in this build yet; use target kind "
        "'sim', or measure with `kvbudget bench` and compare by hand"
    )
