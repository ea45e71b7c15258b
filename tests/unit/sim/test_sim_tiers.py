"""Tier reload rule with the seed's worked example (32K tokens of KV = 4 GiB)."""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.prefix import ChainHasher
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest, SimRequest
from kvbudget.sim.tiers import Tier, TierConfig, TierStack
from kvbudget.sim.timing import FixedTiming
from kvbudget.units import GiB

BLOCK = 16
KV_PER_TOKEN = 4 * GiB // 32768  # the seed: 32K tokens of KV are 4 GiB


class FlatPrefill(FixedTiming):
    """Re-prefilling any span costs ``prefill_s`` (the seed's 0.1 s or 'seconds')."""

    def __init__(self, prefill_s: float) -> None:
        super().__init__()
        self.prefill_s = prefill_s

    def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float:
        return self.prefill_s


def _request(num_tokens: int) -> SimRequest:
    spec = EngineRequest("r", tuple(range(num_tokens)), 1)
    req = SimRequest(spec, seed=1, vocab_size=32000, hasher=ChainHasher(BLOCK), arrival_order=0)
    req.update_block_hashes(num_tokens)
    return req


def _stack(bandwidth_gib_s: float, prefill_s: float) -> tuple[TierStack, SimRequest]:
    cfg = TierConfig(
        name="cpu", capacity_bytes=8 * GiB, bandwidth_bytes_per_s=bandwidth_gib_s * GiB
    )
    tier = Tier(cfg, KV_PER_TOKEN * BLOCK)
    req = _request(32768 + BLOCK)
    for key in req.block_hashes[: 32768 // BLOCK]:
        tier.put(key)
    return TierStack([tier], FlatPrefill(prefill_s), BLOCK), req


@pytest.mark.parametrize(("bw", "load_s"), [(25.0, 0.16), (5.0, 0.8)])
def test_reload_not_worth_it_against_a_fast_prefill(bw: float, load_s: float) -> None:
    stack, req = _stack(bw, prefill_s=0.1)
    assert stack.lookup(req, 0, now_s=0.0) == (0, 0.0, "")
    assert stack.num_declined_reloads == 1


@pytest.mark.parametrize(("bw", "load_s"), [(25.0, 0.16), (5.0, 0.8)])
def test_reload_taken_when_prefill_takes_seconds(bw: float, load_s: float) -> None:
    stack, req = _stack(bw, prefill_s=3.0)
    tokens, ready_s, tier = stack.lookup(req, 0, now_s=0.0)
    assert (tokens, tier) == (32768, "cpu")
    assert ready_s == pytest.approx(load_s)  # 4 GiB / (bw GiB/s)


def test_concurrent_reloads_share_the_link() -> None:
    stack, req = _stack(25.0, prefill_s=3.0)
    first = stack.lookup(req, 0, now_s=0.0)[1]
    second = stack.lookup(req, 0, now_s=0.0)[1]
    assert first == pytest.approx(0.16)
    assert second == pytest.approx(0.32)  # queued behind the first transfer
    assert stack.reuse_histogram() == {"cpu": {2: 32768 // BLOCK}}


def test_lru_spills_to_next_tier() -> None:
    small = TierConfig(name="cpu", capacity_bytes=2 * 64, bandwidth_bytes_per_s=1e9)
    disk = TierConfig(name="disk", capacity_bytes=10 * 64, bandwidth_bytes_per_s=1e8)
    stack = TierStack([Tier(small, 64), Tier(disk, 64)], FixedTiming(), 4)
    stack.store(["a", "b", "c"], 0.0)
    assert list(stack.tiers[0].blocks) == ["b", "c"]
    assert list(stack.tiers[1].blocks) == ["a"]


def test_offloaded_prefix_comes_back_from_cpu_in_the_engine() -> None:
    cfg = ReplicaConfig(
        num_gpu_blocks=12,
        block_size=4,
        max_num_seqs=2,
        max_num_batched_tokens=64,
        max_model_len=64,
        kv_bytes_per_token=1000,
    )
    cpu = TierConfig(name="cpu", capacity_bytes=10**7, bandwidth_bytes_per_s=1e12)
    timing = FixedTiming(step_s=0.01, per_token_s=0.01)  # re-prefill is slow, reload cheap
    shared = tuple(range(1, 33))  # 8 blocks
    reqs = [
        EngineRequest("a", (*shared, 99), 1, arrival_s=0.0),
        EngineRequest("flush", tuple(range(500, 540)), 1, arrival_s=1.0),  # evicts a's blocks
        EngineRequest("a2", (*shared, 98), 1, arrival_s=2.0),
    ]
    res = simulate(reqs, ClusterSpec([ReplicaSetup(cfg, timing, tiers=(cpu,))]), seed=0)
    by_id = {r.request_id: r for r in res.requests}
    assert by_id["a2"].cached_tokens_by_tier.get("cpu", 0) > 0
    assert res.tier_stats["replica-0"]["reloads"] == 1
    assert all(r.finished for r in res.requests)
    assert np.isfinite(res.summary()["ttft_p99_s"])


def test_preemption_swaps_full_blocks_to_the_cpu_tier() -> None:
    cfg = ReplicaConfig(
        num_gpu_blocks=14,
        block_size=4,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        max_model_len=64,
        kv_bytes_per_token=100,
    )
    cpu = TierConfig(name="cpu", capacity_bytes=10**6, bandwidth_bytes_per_s=1e9)
    # two 16-token prompts that each grow to 16 + 28 - 1 = 43 tokens (11 blocks): they cannot
    # both fit 13 usable blocks, so the later one is preempted while holding full blocks
    reqs = [
        EngineRequest("a", tuple(range(16)), 28, arrival_s=0.0),
        EngineRequest("b", tuple(range(100, 116)), 28, arrival_s=0.0),
    ]
    res = simulate(reqs, ClusterSpec([ReplicaSetup(cfg, FixedTiming(), tiers=(cpu,))]), seed=0)
    assert res.summary()["num_preemptions"] >= 1
    assert res.tier_stats["replica-0"]["tiers"]["cpu"]["writes_blocks"] >= 4
    assert all(r.finished for r in res.requests)


def test_on_preempt_writes_the_victims_computed_full_blocks() -> None:
    cpu = TierConfig(name="cpu", capacity_bytes=10**6, bandwidth_bytes_per_s=1e9)
    stack = TierStack([Tier(cpu, 64)], FixedTiming(), BLOCK)
    req = _request(5 * BLOCK)
    req.num_computed_tokens = 3 * BLOCK + 5  # three full blocks computed, one partial
    stack.on_preempt(req, now_s=0.0)
    assert list(stack.tiers[0].blocks) == req.block_hashes[:3]
