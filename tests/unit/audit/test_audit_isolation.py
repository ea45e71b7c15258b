"""Isolation audit against the embedded engine in virtual time (SimProbe).

Expected cached-token counts are worked by hand from the block-hash rule (only full blocks of
``block_size`` tokens that match the cached chain are reused); expected null behaviour comes
from the binomial distribution (scipy) at the stated alpha.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from typing import Any

import numpy as np
from scipy import stats as sps

from kvbudget.audit.isolation import (
    ATTACKER,
    VICTIM,
    IsolationConfig,
    IsolationResult,
    declared_statistics,
    plan_trials,
    run_isolation,
)
from kvbudget.audit.probe_sim import SimProbe, SimProbeOptions
from kvbudget.audit.probes import Observation

BLOCK = 16


def _run(cfg: IsolationConfig, probe: Any | None = None, **sim: Any) -> IsolationResult:
    p = probe or SimProbe(SimProbeOptions(block_size=BLOCK, **sim), np.random.default_rng(cfg.seed))
    return asyncio.run(run_isolation(p, cfg))


def test_without_salts_the_leak_is_detected_with_the_hand_counted_cached_tokens() -> None:
    # prefix 128 tokens = 8 full blocks of 16; the attacker's suffix differs from token 128 on,
    # so exactly 128 tokens of its prompt are found in the victim's cached chain.
    cfg = IsolationConfig(trials=10, prefix_tokens=128, suffix_tokens=32, salt_mode="none")
    res = _run(cfg)
    hits = [r for r in res.trial_records if r.arm == "hit"]
    assert [r.attacker_cached_tokens for r in hits] == [128] * 10
    assert res.control_cached_tokens_max == 0
    assert res.cross_tenant_cached_tokens == 10 * 128
    assert res.cross_tenant_hit_counter_tokens == 10 * 128
    assert res.verdict == "leak_detected"
    # the timing channel alone also shows it: a hit skips 128 tokens of prefill
    assert res.timing is not None and res.timing["detected"] is True
    assert res.auc is not None and res.auc > 0.9


def test_prefix_not_block_aligned_counts_only_full_blocks() -> None:
    # prefix 100 tokens: 6 full blocks (96 tokens) are shared; block 7 mixes prefix and suffix
    cfg = IsolationConfig(trials=4, prefix_tokens=100, suffix_tokens=40, salt_mode="none")
    res = _run(cfg)
    assert {r.attacker_cached_tokens for r in res.trial_records if r.arm == "hit"} == {96}


def test_per_tenant_salts_isolate_and_the_positive_control_still_hits() -> None:
    cfg = IsolationConfig(trials=15, prefix_tokens=128, salt_mode="per-tenant", seed=3)
    res = _run(cfg)
    assert res.cross_tenant_cached_tokens == 0
    assert res.cross_tenant_cached_tokens_raw == 0
    pos = [r for r in res.trial_records if r.arm == "positive"]
    assert [r.attacker_cached_tokens for r in pos] == [128] * 15
    assert res.positive_control.passed and res.positive_control.evidence == "cached_tokens"
    assert res.verdict in ("no_leak_detected", "leak_detected")  # timing decides (null here)


def test_null_runs_false_positive_rate_is_within_alpha_plus_binomial_slack() -> None:
    alpha = 0.05
    num_runs = 100
    leaks = 0
    for seed in range(num_runs):
        cfg = IsolationConfig(
            trials=12, prefix_tokens=32, suffix_tokens=16, salt_mode="per-tenant", seed=seed
        )
        res = _run(cfg)
        assert res.cross_tenant_cached_tokens == 0
        leaks += res.verdict == "leak_detected"
    # under H0 each run errs with probability <= alpha (Holm keeps the family-wise level), so
    # the count is stochastically below Binomial(100, alpha); allow its 99th percentile
    slack = int(sps.binom.ppf(0.99, num_runs, alpha))
    assert leaks <= slack, f"{leaks} false leaks in {num_runs} null runs (slack {slack})"


def test_user_salts_equal_for_both_tenants_leak_and_distinct_ones_isolate() -> None:
    same = {VICTIM: "s3cret-shared", ATTACKER: "s3cret-shared"}
    res = _run(IsolationConfig(trials=5, prefix_tokens=64, salt_mode="user", user_salts=same))
    assert res.verdict == "leak_detected" and res.cross_tenant_cached_tokens == 5 * 64
    assert "does not isolate by it" in res.reason  # the salts were sent, yet tokens leaked
    distinct = {VICTIM: "salt-of-a", ATTACKER: "salt-of-b"}
    res = _run(IsolationConfig(trials=5, prefix_tokens=64, salt_mode="user", user_salts=distinct))
    assert res.cross_tenant_cached_tokens == 0
    dumped = res.model_dump_json() + res.to_markdown()
    assert "salt-of-a" not in dumped and "salt-of-b" not in dumped


def test_a_cache_that_never_hits_makes_the_verdict_inconclusive() -> None:
    cfg = IsolationConfig(trials=8, prefix_tokens=64, salt_mode="none", seed=2)
    res = _run(cfg, enable_prefix_caching=False)
    assert res.cross_tenant_cached_tokens == 0
    assert not res.positive_control.passed
    assert res.positive_control.num_trials_with_reuse == 0
    # with no cache both arms draw from one distribution: the timing test finds nothing here
    assert res.timing is not None and not res.timing["detected"]
    assert res.verdict == "inconclusive"
    assert "positive control" in res.reason


class _TemplateProbe(SimProbe):
    """Every prompt reports 16 extra cached tokens (a shared chat template / BOS block)."""

    async def send(self, *args: Any, **kwargs: Any) -> Observation:
        obs = await super().send(*args, **kwargs)
        return replace(obs, cached_tokens=(obs.cached_tokens or 0) + 16)


def test_shared_template_tokens_are_not_counted_as_cross_tenant() -> None:
    cfg = IsolationConfig(trials=6, prefix_tokens=64, salt_mode="per-tenant", seed=5)
    probe = _TemplateProbe(SimProbeOptions(block_size=BLOCK), np.random.default_rng(5))
    res = _run(cfg, probe)
    assert res.control_cached_tokens_max == 16
    assert res.cross_tenant_cached_tokens_raw == 6 * 16  # raw: reported as is
    assert res.cross_tenant_cached_tokens == 0  # excess over the control arm


def test_declared_mde_is_noether_worked_by_hand() -> None:
    cfg = IsolationConfig(trials=30, alpha=0.05, power=0.8)
    z = sps.norm.ppf(0.95) + sps.norm.ppf(0.8)
    expected = 0.5 + z * math.sqrt((30 + 30 + 1) / (12 * 30 * 30))
    assert abs(declared_statistics(cfg)["mde_auc"] - expected) < 1e-12


def test_trials_are_interleaved_in_a_seeded_order_with_fresh_prompts() -> None:
    cfg = IsolationConfig(trials=20, prefix_tokens=8, suffix_tokens=4)
    a = plan_trials(cfg, np.random.default_rng(7))
    b = plan_trials(cfg, np.random.default_rng(7))
    assert [t.arm for t in a] == [t.arm for t in b]
    arms = [t.arm for t in a]
    assert sorted(arms) == sorted(["hit", "control", "positive"] * 20)
    assert arms != sorted(arms)  # interleaved, not blocked
    prefixes = [t.attacker_ids[:8] for t in a]
    assert len(set(prefixes)) == len(prefixes)  # cache-breaking: a fresh prefix per trial
    for t in a:
        assert len(t.victim_ids) == len(t.attacker_ids) == 12
        shares = t.victim_ids[:8] == t.attacker_ids[:8]
        assert shares == (t.arm != "control")
        assert t.attacker_tenant == (VICTIM if t.arm == "positive" else ATTACKER)


class _BlindProbe(SimProbe):
    """A target that reports neither cached tokens nor a hit counter: timing is all there is."""

    async def send(self, *args: Any, **kwargs: Any) -> Observation:
        obs = await super().send(*args, **kwargs)
        return replace(obs, cached_tokens=None)

    async def hit_counter(self) -> float | None:
        return None


def test_without_counters_the_leak_is_found_by_timing_alone() -> None:
    # a hit skips 256 tokens x 20 us = 5.1 ms of prefill against 2 ms median jitter
    cfg = IsolationConfig(trials=15, prefix_tokens=256, salt_mode="none", seed=1)
    res = _run(cfg, _BlindProbe(SimProbeOptions(block_size=BLOCK), np.random.default_rng(1)))
    assert res.cross_tenant_cached_tokens is None
    assert res.verdict == "leak_detected"
    assert "TTFT" in res.reason
    assert res.positive_control.evidence == "timing" and res.positive_control.passed


def test_without_counters_and_with_salts_the_positive_control_rests_on_timing() -> None:
    cfg = IsolationConfig(trials=15, prefix_tokens=256, salt_mode="per-tenant", seed=1)
    res = _run(cfg, _BlindProbe(SimProbeOptions(block_size=BLOCK), np.random.default_rng(1)))
    assert res.cross_tenant_cached_tokens is None
    assert res.positive_control.evidence == "timing" and res.positive_control.passed
    # seeded null run: the timing test finds nothing, and the reason says what was not seen
    assert res.verdict == "no_leak_detected"
    assert "reports no cached tokens" in res.reason
    summary = res.summary()
    assert summary["cross_tenant_cached_tokens"] is None
    assert summary["verdict"] == res.verdict


def test_same_seed_same_result_on_the_simulator_despite_fresh_salts() -> None:
    cfg = IsolationConfig(trials=5, prefix_tokens=32, suffix_tokens=8, seed=11)
    a = _run(cfg).model_dump(exclude={"created"})
    b = _run(cfg).model_dump(exclude={"created"})
    assert a == b
    c = _run(replace(cfg, seed=12)).model_dump(exclude={"created"})
    assert c["trial_records"] != a["trial_records"]
