"""The ``router_policy`` factor on the sim target: ``target.replicas`` replicas behind the
simulator's router, so the variant differs from the baseline in exactly the router.

Workload of ``examples/acceptance-router.yaml``, reasoned by hand:

* Llama-3.1-8B in bf16 keeps 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes = 131,072
  bytes per token; ``kv_cache_memory_bytes`` 805,306,368 gives each replica 6,144 tokens =
  384 blocks of 16.
* Four tenants (uniform), each prompt starts with its tenant's own 2,048-token prefix
  (128 full blocks, salted per tenant), then 256-384 random tokens and 32 outputs: beyond
  the prefix a request holds at most ceil((384 + 31) / 16) = 26 blocks, and only the prefix
  can hit.
* Closed loop of 4: even with all four running on one replica, two prefixes and the running
  requests fit (256 + 4 x 26 = 360 <= 384); all four prefixes never do (512 > 384).

``prefix_approx`` (affinity): a tenant's first request has no match and goes to the least
loaded replica; every later one follows its prefix (its imbalance limit, 8, is above the 4 in
flight). With two tenants per replica both prefixes fit; the pool is LRU, so a prefix that is
not in use loses blocks only after the other tenant allocates more than the 128 blocks left,
i.e. 5 requests in a row (each takes at most 26 new blocks): about once per 2^5 requests, so
one or two such misses per replica in a 30-request share. All requests but the 4 cold ones
and at most 4 of those hit their 2,048 tokens: at least (60 - 8) x 2,048 = 106,496 of the
60 x 2,048 = 122,880 shared tokens (86.7 %).

``round_robin``: requests alternate between the replicas, so each replica sees all four
tenants at random; an LRU cache holding C of N equally likely items hits C/N of the time
(independent reference model). Here C is 2 to 3 prefixes (384 blocks less the running
requests' 26-52), so at most 3/4 of the shared tokens hit, and at least 2/4 of the requests
after the up to 8 cold ones (one per tenant and replica): 0.5 x 52 / 60 = 43 %.

A hit computes ~400 prompt tokens, a miss ~2,400: the affinity router's median TTFT must be
lower, and the comparison must say so after its correction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kvbudget.accept.ab_runs import run_comparisons
from kvbudget.accept.plan.engine_config import engine_differences
from kvbudget.accept.plan.lockcheck import apply_overrides
from kvbudget.accept.plan.planfile import AcceptPlan, parse_plan
from kvbudget.accept.targets.factories import sim_factory
from kvbudget.accept.targets.sim import SimTarget
from kvbudget.accept.workloads import cell_requests
from kvbudget.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "acceptance-router.yaml"
PREFIX_TOKENS = 2048
NUM_TENANTS = 4
NUM_REQUESTS = 60
CPU_TIER = {"name": "cpu", "capacity_bytes": 1 << 30, "bandwidth_bytes_per_s": 25e9}


def _data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    return data


def _plan(**changes: Any) -> AcceptPlan:
    data = _data()
    for key, value in changes.items():
        data[key] = value
    return parse_plan(data)


def _arm(plan: AcceptPlan, router: str) -> SimTarget:
    target = sim_factory(plan)(apply_overrides(plan.lock, {"router_policy": router})).target
    assert isinstance(target, SimTarget)
    return target


def test_the_variant_differs_in_exactly_the_router() -> None:
    plan = _plan()
    make = sim_factory(plan)
    base = make(plan.lock)
    variant = make(apply_overrides(plan.lock, {"router_policy": "prefix_approx"}))
    assert base.engine is not None and variant.engine is not None
    assert engine_differences(base.engine, variant.engine) == [
        ("router_policy", "round_robin", "prefix_approx")
    ]
    assert base.engine.num_replicas == variant.engine.num_replicas == 2
    for prepared in (base, variant):
        assert isinstance(prepared.target, SimTarget)
        assert len(prepared.target.replicas) == 2
        # 6,144 tokens of KV per replica (805,306,368 / 131,072) in blocks of 16
        assert [r.config.num_gpu_blocks for r in prepared.target.replicas] == [384, 384]
    routers = [p.target.router for p in (base, variant) if isinstance(p.target, SimTarget)]
    assert routers == ["round_robin", "prefix_approx"]
    # the router and the cluster's GPU count are confirmed for the sim target
    assert base.computed_lock["router_policy"][0] == "round_robin"
    assert base.computed_lock["gpu.count"][0] == 2


def test_affinity_keeps_each_prefix_cached_round_robin_churns() -> None:
    plan = _plan()
    normal = plan.load.concurrency["normal"]
    requests = cell_requests(
        plan.load,
        plan.load.tiers["short"],
        normal,
        cell_id="short/normal",
        seed=plan.seed,
        cell_index=1,
        repetition=0,
    )
    assert len(requests) == NUM_REQUESTS
    assert {r.tenant for r in requests} == {f"tenant-{i}" for i in range(NUM_TENANTS)}
    shared = NUM_REQUESTS * PREFIX_TOKENS
    hits: dict[str, int] = {}
    for router in ("round_robin", "prefix_approx"):
        run = _arm(plan, router).run_cell(
            requests,
            cell_id="short/normal",
            closed_loop_concurrency=normal.concurrency,
            duration_s=normal.duration_s,
        )
        assert len(run.records) == NUM_REQUESTS and all(r.status == "ok" for r in run.records)
        hits[router] = sum(r.cached_tokens or 0 for r in run.records)
        replicas_of: dict[str, set[str]] = {}
        for r in run.records:
            assert r.replica is not None
            replicas_of.setdefault(str(r.tenant), set()).add(r.replica)
        if router == "prefix_approx":
            # affinity: each tenant on one replica, two tenants per replica
            assert all(len(v) == 1 for v in replicas_of.values())
            per_replica = sorted(
                sum(1 for v in replicas_of.values() if name in v)
                for name in ("replica-0", "replica-1")
            )
            assert per_replica == [2, 2]
        else:
            assert all(len(v) == 2 for v in replicas_of.values())
    # the 4 cold misses at least; at most 4 more (LRU runs, see the module docstring)
    assert hits["prefix_approx"] <= (NUM_REQUESTS - NUM_TENANTS) * PREFIX_TOKENS  # 114,688
    assert hits["prefix_approx"] >= (NUM_REQUESTS - 2 * NUM_TENANTS) * PREFIX_TOKENS  # 106,496
    assert 0.43 * shared <= hits["round_robin"] <= 0.75 * shared


def test_the_comparison_reports_affinity_faster() -> None:
    data = _data()
    data["load"]["repetitions"] = 1
    plan = parse_plan(data)
    [result] = run_comparisons(plan, sim_factory(plan), np.random.default_rng(0))
    assert result.factor == "router_policy"
    assert result.engine_changes == ["router_policy: 'round_robin' -> 'prefix_approx'"]
    ttft = next(d for d in result.deltas if d.metric == "ttft_s")
    assert ttft.cell_id == "short/normal"
    assert ttft.baseline_pct is not None and ttft.variant_pct is not None
    assert ttft.variant_pct < ttft.baseline_pct
    assert ttft.significant and ttft.hl_shift is not None and ttft.hl_shift < 0
    assert result.verdict == "pass"
    assert "faster: ttft_s in short/normal" in result.reasons[0]


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ({"kind": "sim"}, r"target\.replicas is 1.*set target\.replicas: 2 or more"),
        ({"kind": "serve"}, r"kvbudget serve is one replica"),
        ({"kind": "http", "base_url": "http://127.0.0.1:1"}, r"--compare"),
    ],
)
def test_router_factor_without_replicas_is_refused(target: dict[str, Any], match: str) -> None:
    data = _data()
    data["target"] = target
    data["lock"].pop("kv_cache_memory_bytes")
    with pytest.raises(ConfigError, match=match) as info:
        parse_plan(data)
    assert str(info.value).startswith("comparisons.0.factor: refused before the run")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ({"kind": "serve", "replicas": 2}, r"^target\.replicas: only target kind 'sim'"),
        (
            {"kind": "sim", "replicas": 2, "kv_tiers": [CPU_TIER]},
            r"^target\.replicas: KV tiers are metered on one replica",
        ),
    ],
)
def test_replicas_the_target_cannot_run_are_refused(target: dict[str, Any], match: str) -> None:
    data = _data()
    data["target"] = target
    data["comparisons"] = []
    with pytest.raises(ConfigError, match=match):
        parse_plan(data)


def test_an_unknown_router_is_one_line() -> None:
    data = _data()
    data["comparisons"][0]["set"] = {"router_policy": "fastest"}
    with pytest.raises(ConfigError, match=r"lock\.router_policy: 'fastest' is not a simulated "):
        parse_plan(data)
