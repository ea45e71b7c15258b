"""Warnings about a valid plan that cannot reach a verdict it declares (shown before the run).

A plan can be valid and still unable to pass: a gated percentile needs ``ceil(10 / (1 - q))``
samples per cell (200 for p95) and a cell can never deliver more than ``repetitions x
max_requests_per_cell`` of them (fewer when the client cancels some, or when an open-loop
arrival rate brings fewer within the duration); quality checkpoints cannot be judged on a
target whose output text is synthetic (``sim``, ``serve``), so every cell they apply to stays
``untested``; a vLLM CPU build on this host refuses a quantized KV cache when the CPU has
neither AVX-512 nor AMX (:mod:`kvbudget.safety.cpu_features`). These are warnings, not errors:
the run still says exactly what it could judge.
"""

from __future__ import annotations

import math
from urllib.parse import urlparse

from kvbudget.accept.judge.verdicts import min_samples_for
from kvbudget.accept.plan.load import CONCURRENCY_TIERS
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.workloads import planned_count
from kvbudget.safety.cpu_features import host_cpu_features, vllm_cpu_fp8_refusal

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def max_samples(plan: AcceptPlan, concurrency_tier: str) -> int:
    """Upper bound on the completed (not cancelled) requests a cell can give one metric."""
    load = plan.load
    tier = load.concurrency[concurrency_tier]  # type: ignore[index]
    per_rep = planned_count(tier, load.max_requests_per_cell) or load.max_requests_per_cell
    if tier.arrival in ("poisson", "constant") and tier.rate_per_s is not None:
        per_rep = min(per_rep, math.ceil(tier.rate_per_s * tier.duration_s))
    return math.floor(load.repetitions * per_rep * (1.0 - load.cancel_fraction))


def plan_warnings(plan: AcceptPlan) -> list[str]:
    """One line per problem, naming the field and the fix."""
    out: list[str] = []
    gated = [
        (metric, pct)
        for metric, ceilings in (("ttft_s", plan.stop.ttft_s), ("tpot_s", plan.stop.tpot_s))
        for pct, _ in ceilings.items()
    ]
    for conc in CONCURRENCY_TIERS:
        most = max_samples(plan, conc)
        short = [(m, p) for m, p in gated if most < min_samples_for(p)]
        if short:
            needed = max(min_samples_for(p) for _, p in short)
            names = ", ".join(f"{m} {p}" for m, p in short)
            out.append(
                f"load.concurrency.{conc}: at most {most} samples per cell (repetitions "
                f"{plan.load.repetitions} x {plan.load.max_requests_per_cell} requests, less "
                f"cancelled{' and the arrival rate' if plan.load.concurrency[conc].arrival != 'closed' else ''}"  # type: ignore[index]
                f"), but {names} needs >= {needed}: those checks stay untested; raise "
                "load.max_requests_per_cell or load.repetitions (or gate a lower percentile)"
            )
    synthetic = plan.target.kind in ("sim", "serve")
    if synthetic and plan.quality:
        ids = ", ".join(q.id for q in plan.quality)
        out.append(
            f"quality: checkpoints ({ids}) cannot be judged on target kind {plan.target.kind} "
            "(synthetic output text), so every cell they apply to stays untested; run them on "
            "an http target, or leave them out of a simulated plan"
        )
    refusal = vllm_cpu_refusal(plan)
    if refusal is not None:
        out.append(f"lock.kv_dtype: {refusal}")
    return out


def vllm_cpu_refusal(plan: AcceptPlan) -> str | None:
    """The one line of :func:`vllm_cpu_fp8_refusal` for a vLLM CPU build (no GPU locked) served
    on this host (a loopback ``target.base_url``), whose CPU this process can read."""
    lock = plan.lock
    engine = str(lock.engine.name.value or "").lower()
    host = urlparse(plan.target.base_url or "").hostname
    if plan.target.kind != "http" or "vllm" not in engine or lock.gpu.type.value is not None:
        return None
    if host not in LOOPBACK_HOSTS:
        return None  # the engine's CPU is not this one
    return vllm_cpu_fp8_refusal(lock.kv_dtype.value, host_cpu_features())
