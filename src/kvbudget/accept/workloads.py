"""Planned requests for warm-up and for each cell, from the plan's load section.

Built on :mod:`kvbudget.workload` (``WorkloadSpec`` + ``generate``). Seeds are common random
numbers: cell ``k``, repetition ``r`` always draws from ``default_rng([seed, k, r])``, so a
baseline and its single-factor variant see exactly the same requests.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kvbudget.accept.plan.load import ConcurrencyTier, InputTier, LoadPlan
from kvbudget.accept.request_keys import WARMUP_CELL, RequestKey
from kvbudget.workload.arrival_specs import (
    ArrivalSpec,
    BurstArrivals,
    ClosedLoopArrivals,
    ConstantArrivals,
    PoissonArrivals,
)
from kvbudget.workload.lengths import FixedLength, UniformLength
from kvbudget.workload.prefixes import PrefixSpec, TenantSpec
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.spec import WorkloadSpec, generate


def cell_seed(seed: int, cell_index: int, repetition: int) -> np.random.Generator:
    return np.random.default_rng([seed, cell_index, repetition])


def _arrivals(tier: ConcurrencyTier) -> ArrivalSpec:
    if tier.arrival == "closed":
        return ClosedLoopArrivals(concurrency=tier.concurrency)
    if tier.arrival == "burst":
        return BurstArrivals()
    assert tier.rate_per_s is not None
    if tier.arrival == "constant":
        return ConstantArrivals(rate_per_s=tier.rate_per_s)
    return PoissonArrivals(rate_per_s=tier.rate_per_s)


def planned_count(tier: ConcurrencyTier, cap: int) -> int | None:
    """How many requests a cell plans (the duration may cut open-loop cells shorter)."""
    if tier.arrival == "closed":
        return cap
    if tier.arrival == "burst":
        return min(cap, tier.concurrency)
    return cap


def _prefix(load: LoadPlan) -> tuple[PrefixSpec, TenantSpec]:
    shared = load.shared_prefix
    prefix = PrefixSpec(
        num_groups=shared.num_groups if shared.tokens else 0,
        group_prefix_tokens=shared.tokens,
        scope="tenant" if shared.num_tenants > 1 else "global",
    )
    names = [f"tenant-{i}" for i in range(shared.num_tenants)]
    tenants = TenantSpec(names=names, salt="per_tenant" if shared.num_tenants > 1 else "none")
    return prefix, tenants


def cell_requests(
    load: LoadPlan,
    input_tier: InputTier,
    concurrency_tier: ConcurrencyTier,
    *,
    cell_id: str,
    seed: int,
    cell_index: int,
    repetition: int,
    salt_tenants: bool = True,
) -> list[PlannedRequest]:
    """The planned requests of one repetition of one cell (ids unique across the run)."""
    prefix, tenants = _prefix(load)
    if not salt_tenants:
        tenants = tenants.model_copy(update={"salt": "none"})
    spec = WorkloadSpec(
        name=cell_id,
        cell_id=cell_id,
        num_requests=planned_count(concurrency_tier, load.max_requests_per_cell),
        duration_s=concurrency_tier.duration_s,
        arrivals=_arrivals(concurrency_tier),
        input_tokens=UniformLength(low=input_tier.min_tokens, high=input_tier.max_tokens),
        output_tokens=FixedLength(value=input_tier.output_tokens),
        prefix=prefix,
        tenants=tenants,
        cancel_fraction=load.cancel_fraction,
        cancel_after_tokens=load.cancel_after_tokens,
    )
    requests = generate(spec, cell_seed(seed, cell_index, repetition))
    return [
        replace(r, request_id=RequestKey(cell_id, repetition, r.request_id).encode())
        for r in requests
    ]


def warmup_requests(load: LoadPlan, *, seed: int) -> list[PlannedRequest]:
    """Uniform warm-up requests (not scored), run before the cells."""
    w = load.warmup
    if w.requests == 0:
        return []
    spec = WorkloadSpec(
        name=WARMUP_CELL,
        cell_id=WARMUP_CELL,
        num_requests=w.requests,
        arrivals=BurstArrivals(),
        input_tokens=FixedLength(value=w.input_tokens),
        output_tokens=FixedLength(value=w.output_tokens),
    )
    requests = generate(spec, np.random.default_rng([seed, 10_000]))
    return [
        replace(r, request_id=RequestKey(WARMUP_CELL, None, r.request_id).encode())
        for r in requests
    ]
