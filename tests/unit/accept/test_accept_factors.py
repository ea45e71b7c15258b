"""Every comparison factor changes the variant's engine in exactly that factor, or the plan is
refused before the run with one line.

Expected engine values are the plan's own inputs and hand arithmetic (Llama-3.1-8B: 32 layers x
8 KV heads x 128 dims x K and V = 65,536 values per token; 2 bytes each in bf16, 1 in fp8).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.accept.plan.engine_config import engine_differences
from kvbudget.accept.plan.lockcheck import apply_overrides
from kvbudget.accept.plan.planfile import AcceptPlan, parse_plan
from kvbudget.accept.targets.base import PreparedTarget
from kvbudget.accept.targets.factories import _serve_args, sim_factory
from kvbudget.accept.targets.sim import SimTarget
from kvbudget.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
GIB = 1 << 30
CPU_TIER = {"name": "cpu", "capacity_bytes": 64 * GIB, "bandwidth_bytes_per_s": 25e9}


def _plan(comparison: dict[str, Any] | None = None, **target: Any) -> AcceptPlan:
    data = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    data["target"] = {"kind": "sim", **target}
    data["comparisons"] = [comparison] if comparison else []
    return parse_plan(data)


def _arms(plan: AcceptPlan, overrides: dict[str, Any]) -> tuple[PreparedTarget, PreparedTarget]:
    make = sim_factory(plan)
    return make(plan.lock), make(apply_overrides(plan.lock, overrides))


def _changed(base: PreparedTarget, variant: PreparedTarget) -> list[str]:
    assert base.engine is not None and variant.engine is not None
    return [name for name, _, _ in engine_differences(base.engine, variant.engine)]


def _sim(prepared: PreparedTarget) -> SimTarget:
    assert isinstance(prepared.target, SimTarget)
    return prepared.target


def test_kv_dtype_changes_only_the_kv_cache_dtype() -> None:
    base, variant = _arms(_plan(), {"kv_dtype": "fp8"})
    assert _changed(base, variant) == ["kv_cache_dtype"]
    assert _sim(base).config.kv_bytes_per_token == 65_536 * 2
    assert _sim(variant).config.kv_bytes_per_token == 65_536 * 1
    # the same memory holds twice the blocks (within the pool rule's rounding)
    ratio = _sim(variant).config.num_gpu_blocks / _sim(base).config.num_gpu_blocks
    assert ratio == pytest.approx(2.0, rel=0.01)


def test_block_size_changes_only_the_block_size() -> None:
    base, variant = _arms(_plan(), {"block_size": 32})
    assert _changed(base, variant) == ["block_size"]
    assert (_sim(base).config.block_size, _sim(variant).config.block_size) == (16, 32)


def test_prefix_caching_changes_only_enable_prefix_caching() -> None:
    overrides = {"prefix_caching": {"value": {"enabled": False, "salt": "per-tenant"}}}
    base, variant = _arms(_plan(), overrides)
    assert _changed(base, variant) == ["enable_prefix_caching"]
    assert _sim(base).config.enable_prefix_caching is True
    assert _sim(variant).config.enable_prefix_caching is False


def test_max_model_len_changes_only_max_model_len() -> None:
    base, variant = _arms(_plan(), {"max_model_len": 8192})
    assert _changed(base, variant) == ["max_model_len"]
    assert (_sim(base).config.max_model_len, _sim(variant).config.max_model_len) == (16384, 8192)


def test_offload_changes_only_the_cpu_tier() -> None:
    plan = _plan(kv_tiers=[CPU_TIER])
    base, variant = _arms(plan, {"offload": "cpu:32GiB"})
    assert _changed(base, variant) == ["kv_offload"]
    base_stack, variant_stack = _sim(base).tier_stack, _sim(variant).tier_stack
    assert base_stack is not None and variant_stack is not None
    assert base_stack.tiers[0].config.capacity_bytes == 64 * GIB
    assert variant_stack.tiers[0].config.capacity_bytes == 32 * GIB
    # and offload none removes the tier the plan declared
    base, none = _arms(plan, {"offload": "none"})
    assert _changed(base, none) == ["kv_offload"]
    assert _sim(none).tier_stack is None


def test_offload_the_baseline_already_has_is_refused() -> None:
    comparison = {"name": "same", "factor": "offload", "set": {"offload": "cpu:64GiB"}}
    with pytest.raises(ConfigError, match=r"^comparisons\.0\.factor: refused before the run"):
        _plan(comparison, kv_tiers=[CPU_TIER])


def test_offload_without_a_host_link_is_refused() -> None:
    comparison = {"name": "cpu", "factor": "offload", "set": {"offload": "cpu:32GiB"}}
    with pytest.raises(ConfigError, match=r"comparisons\.0\.factor: .*target\.kv_tiers"):
        _plan(comparison)


def test_router_policy_is_refused_on_every_target() -> None:
    comparison = {"name": "rr", "factor": "router_policy", "set": {"router_policy": "cost"}}
    for target in ({}, {"kind": "serve"}, {"kind": "http", "base_url": "http://127.0.0.1:1"}):
        with pytest.raises(ConfigError) as info:
            _plan(comparison, **target)
        text = str(info.value)
        assert text.startswith("comparisons.0.factor: refused before the run")
        assert "\n" not in text


def test_http_refuses_every_factor_before_the_run() -> None:
    for factor, value in (("kv_dtype", "fp8"), ("block_size", 32), ("max_model_len", 8192)):
        comparison = {"name": "x", "factor": factor, "set": {factor: value}}
        with pytest.raises(ConfigError, match=r"kvbudget report .* --compare"):
            _plan(comparison, kind="http", base_url="http://127.0.0.1:1")


def test_salt_only_prefix_caching_change_is_refused() -> None:
    comparison = {
        "name": "salt",
        "factor": "prefix_caching",
        "set": {"prefix_caching": {"value": {"enabled": True, "salt": "none"}}},
    }
    with pytest.raises(ConfigError, match=r"audits\.isolation"):
        _plan(comparison)


def _flags(args: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            out[arg] = nxt if nxt is not None and not nxt.startswith("--") else None
    return out


@pytest.mark.parametrize(
    ("overrides", "flag"),
    [
        ({"block_size": 32}, "--block-size"),
        ({"max_model_len": 8192}, "--max-model-len"),
        (
            {"prefix_caching": {"value": {"enabled": False, "salt": "per-tenant"}}},
            "--no-prefix-caching",
        ),
    ],
)
def test_serve_flags_differ_in_exactly_the_factor(overrides: dict[str, Any], flag: str) -> None:
    plan = _plan(kind="serve")
    base = _flags(_serve_args(plan, plan.lock))
    variant = _flags(_serve_args(plan, apply_overrides(plan.lock, overrides)))
    changed = sorted(k for k in set(base) | set(variant) if base.get(k, "?") != variant.get(k, "?"))
    assert changed == [flag]


@pytest.mark.parametrize("factor", ["kv_dtype", "offload"])
def test_serve_refuses_what_it_cannot_set(factor: str) -> None:
    value = {"kv_dtype": "fp8", "offload": "cpu:32GiB"}[factor]
    comparison = {"name": "x", "factor": factor, "set": {factor: value}}
    with pytest.raises(ConfigError, match=r"^comparisons\.0\.factor: refused before the run"):
        _plan(comparison, kind="serve")
