"""Host-memory and transfer stop conditions from the sim target's KV offload tier.

Scripted scenario (worked by hand): block_size 4, 1000 KV bytes per token -> one block is
4000 bytes. A ``write_through`` cpu tier copies every newly cached full block. Each request has
a distinct 16-token prompt (4 full blocks) and 1 output token (no 5th block fills), so each
request writes 4 blocks to the tier.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kvbudget.accept.acceptance import stop_statuses
from kvbudget.accept.audit_sections import AuditsSection
from kvbudget.accept.judge.tier_checks import summarize_tiers, tier_checks
from kvbudget.accept.plan.planfile import AcceptPlan, parse_plan
from kvbudget.accept.result import CellResult
from kvbudget.accept.targets.base import TargetInfo
from kvbudget.accept.targets.sim import SimTarget
from kvbudget.accept.targets.tier_meter import TierMeter
from kvbudget.errors import ConfigError
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.tiers import Tier, TierConfig, TierStack
from kvbudget.sim.timing import FixedTiming
from kvbudget.workload.request import PlannedRequest

DEMO = Path(__file__).resolve().parents[3] / "examples" / "acceptance-demo.yaml"
BLOCK_TOKENS = 4
KV_PER_TOKEN = 1000
BLOCK_BYTES = BLOCK_TOKENS * KV_PER_TOKEN  # 4000
BANDWIDTH = 4_000_000.0  # one block moves in 4000 / 4e6 = 1 ms


def demo_plan(target: dict[str, Any] | None = None, **stop: Any) -> AcceptPlan:
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    if target is not None:
        data["target"] = {**data.get("target", {}), **target}
    data["stop"].update(stop)
    return parse_plan(data)


def cpu_tier(capacity_blocks: int) -> dict[str, Any]:
    return {
        "name": "cpu",
        "capacity_bytes": capacity_blocks * BLOCK_BYTES,
        "bandwidth_bytes_per_s": BANDWIDTH,
        "policy": "write_through",
    }


def run_scripted(capacity_blocks: int, num_requests: int) -> dict[str, float]:
    config = ReplicaConfig.model_validate(
        {
            "num_gpu_blocks": 64,
            "block_size": BLOCK_TOKENS,
            "max_num_batched_tokens": 64,
            "max_num_seqs": 8,
            "max_model_len": 256,
            "kv_bytes_per_token": KV_PER_TOKEN,
        }
    )
    info = TargetInfo(kind="sim", source="simulated", label="test")
    target = SimTarget(
        config,
        FixedTiming(step_s=0.01),
        np.random.default_rng(0),
        info=info,
        tiers=[TierConfig.model_validate(cpu_tier(capacity_blocks))],
    )
    requests = [
        PlannedRequest(
            request_id=f"r{i}",
            arrival_s=0.0,
            prompt_token_ids=tuple(range(100 * i, 100 * i + 16)),
            output_tokens=1,
        )
        for i in range(num_requests)
    ]
    run = target.run_cell(
        requests, cell_id="short/single", closed_loop_concurrency=None, duration_s=None
    )
    assert all(r.status == "ok" for r in run.records)
    return {**run.counters, "duration_s": run.duration_s}


def test_tier_filled_past_the_ceiling_fails_host_memory() -> None:
    # 5 requests x 4 blocks = 20 blocks written into a 10-block tier: it ends full.
    c = run_scripted(capacity_blocks=10, num_requests=5)
    assert c["tier_host_capacity_bytes"] == 10 * 4000
    assert c["tier_host_peak_bytes"] == 10 * 4000  # full: 10 blocks resident
    assert c["tier_bytes_written"] == 20 * 4000
    assert c["tier_host_evictions_blocks"] == 20 - 10
    assert c["tier_link_busy_s"] == pytest.approx(20 * 4000 / BANDWIDTH)  # 0.02 s
    assert c["tier_link_busy_fraction"] == pytest.approx(0.02 / c["duration_s"])
    plan = demo_plan(target={"kv_tiers": [cpu_tier(10)]})
    summary = summarize_tiers([_run(c)])
    assert summary["host_peak_fraction"] == pytest.approx(1.0)
    checks = tier_checks(plan, summary, "simulated")
    assert [(ch.name, ch.verdict) for ch in checks] == [("host memory peak/capacity", "fail")]
    assert checks[0].limit == 0.95  # the default when a cpu tier is configured
    assert checks[0].kind == "simulated" and "simulated" in checks[0].reason


def test_tier_below_the_ceiling_passes_host_memory() -> None:
    # one request: 4 blocks of a 100-block tier = 0.04 of capacity
    c = run_scripted(capacity_blocks=100, num_requests=1)
    assert c["tier_host_peak_bytes"] == 4 * 4000
    assert c["tier_bytes_written"] == 4 * 4000
    assert c["tier_host_evictions_blocks"] == 0
    plan = demo_plan(target={"kv_tiers": [cpu_tier(100)]}, host_memory_max_bytes=20_000)
    checks = tier_checks(plan, summarize_tiers([_run(c)]), "simulated")
    verdicts = {ch.name: (ch.verdict, ch.observed) for ch in checks}
    assert verdicts["host memory peak/capacity"] == ("pass", pytest.approx(0.04))
    assert verdicts["host memory peak bytes"] == ("pass", 16_000)
    # a declared byte ceiling below the 16 000-byte peak fails
    tight = demo_plan(target={"kv_tiers": [cpu_tier(100)]}, host_memory_max_bytes=15_999)
    checks = tier_checks(tight, summarize_tiers([_run(c)]), "simulated")
    assert {ch.name: ch.verdict for ch in checks}["host memory peak bytes"] == "fail"


def _run(counters: dict[str, float]) -> Any:
    from kvbudget.accept.targets.base import CellRun

    return CellRun(records=[], duration_s=counters["duration_s"], counters=counters)


def _cell(checks: list[Any]) -> CellResult:
    return CellResult(
        cell_id="short/single",
        input_tier="short",
        concurrency_tier="single",
        order=0,
        verdict="pass",
        reasons=[],
        checks=checks,
    )


def test_no_tier_leaves_host_and_transfer_untested_never_pass() -> None:
    plan = demo_plan(host_memory_max_bytes=1, transfer_stall_max_s=0.5)
    checks = tier_checks(plan, {}, "simulated")
    assert [(c.name, c.verdict) for c in checks] == [
        ("host memory", "untested"),
        ("transfer", "untested"),
    ]
    stops = {s.name: s for s in stop_statuses(plan, [_cell(checks)], AuditsSection())}
    assert stops["host memory"].status == "untested"
    assert "target.kv_tiers" in stops["host memory"].detail
    assert stops["transfer"].status == "untested"


def test_demo_plan_without_tier_has_no_tier_rows() -> None:
    plan = demo_plan()
    assert tier_checks(plan, {}, "simulated") == []
    names = {s.name for s in stop_statuses(plan, [_cell([])], AuditsSection())}
    assert "host memory" not in names and "transfer" not in names


def test_transfer_busy_and_reload_wait_ceilings() -> None:
    plan = demo_plan(
        target={"kv_tiers": [cpu_tier(10)]},
        transfer_busy_max_fraction=0.5,
        transfer_stall_max_s=0.1,
    )
    summary = {
        "host_capacity_bytes": 40_000.0,
        "host_peak_bytes": 4000.0,
        "host_peak_fraction": 0.1,
        "link_busy_fraction": 0.8,
        "reload_wait_p95_s": 0.05,
    }
    got = {c.name: c.verdict for c in tier_checks(plan, summary, "simulated")}
    assert got == {
        "host memory peak/capacity": "pass",
        "transfer link busy": "fail",
        "transfer reload wait p95": "pass",
    }
    stops = {
        s.name: s
        for s in stop_statuses(
            plan, [_cell(list(tier_checks(plan, summary, "simulated")))], AuditsSection()
        )
    }
    assert stops["transfer"].status == "triggered"
    assert stops["host memory"].status == "not_triggered"
    no_reloads = {**summary, "reload_wait_p95_s": None}
    got = {c.name: c.verdict for c in tier_checks(plan, no_reloads, "simulated")}
    assert got["transfer reload wait"] == "untested"


def test_meter_reload_wait_p95_and_busy_deltas() -> None:
    tier = Tier(TierConfig.model_validate(cpu_tier(10)), BLOCK_BYTES)
    stack = TierStack([tier], FixedTiming(), BLOCK_TOKENS)
    tier.transfer(2, 0.0)  # before the cell: not counted
    stack.reload_waits_s.append(9.0)
    meter = TierMeter(stack)
    stack.reload_waits_s.extend([0.0, 1.0, 2.0, 3.0, 4.0])
    tier.transfer(5, 10.0)  # 5 blocks x 1 ms on an idle link
    c = meter.counters(duration_s=1.0)
    # p95 of [0, 1, 2, 3, 4] by linear interpolation: rank 0.95 x 4 = 3.8 -> 3.8
    assert c["tier_reload_wait_p95_s"] == pytest.approx(3.8)
    assert c["tier_num_reloads"] == 5
    assert c["tier_link_busy_s"] == pytest.approx(0.005)
    assert c["tier_link_busy_fraction"] == pytest.approx(0.005)


def test_kv_tiers_only_for_the_sim_target() -> None:
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["target"] = {"kind": "http", "base_url": "http://127.0.0.1:1", "kv_tiers": [cpu_tier(1)]}
    with pytest.raises(ConfigError, match=r"^target.kv_tiers: only target kind 'sim'"):
        parse_plan(data)
    data["target"] = {"kv_tiers": [{**cpu_tier(1), "capacity_bytes": 0}]}
    with pytest.raises(ConfigError, match=r"target.kv_tiers.0.capacity_bytes"):
        parse_plan(data)
