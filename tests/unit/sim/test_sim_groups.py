"""KV cache groups: sliding windows release blocks, state layers hold one page, plan -> replica."""

from __future__ import annotations

import numpy as np

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.sim.config import KVGroupConfig, ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.fromplan import replica_config_from_plan
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming


def _core(groups: tuple[KVGroupConfig, ...]) -> EngineCore:
    cfg = ReplicaConfig(
        num_gpu_blocks=200,
        block_size=4,
        kv_groups=groups,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        max_model_len=512,
    )
    return EngineCore(cfg, FixedTiming(), np.random.default_rng(0))


def test_sliding_window_releases_blocks_outside_the_window() -> None:
    core = _core((KVGroupConfig(kind="sliding", sliding_window_tokens=8),))
    req = core.add_request(EngineRequest("a", tuple(range(40)), 30))
    core.step(0.0)  # prefill 40 tokens: 10 blocks allocated
    for i in range(20):
        core.step(0.01 * (i + 1))
    # the 21st step started with 59 computed tokens: the first useful token is 59 - 8 + 1 = 52,
    # so blocks before 52 // 4 = 13 are released (null block 0); after it 60 tokens are
    # computed, the table is cdiv(60, 4) = 15 long and only its last 2 blocks are real
    table = req.block_ids[0]
    assert req.num_computed_tokens == 60
    assert len(table) == 15
    assert table[:13] == [0] * 13
    assert all(b != 0 for b in table[13:])
    assert core.stats().num_free_blocks == 199 - 2


def test_state_group_costs_one_page_per_sequence() -> None:
    core = _core((KVGroupConfig(kind="full"), KVGroupConfig(kind="state")))
    a = core.add_request(EngineRequest("a", tuple(range(40)), 5))
    b = core.add_request(EngineRequest("b", tuple(range(100, 103)), 5))
    core.step(0.0)
    assert len(a.block_ids[1]) == 1 and len(b.block_ids[1]) == 1
    # full group: 10 + 1 blocks; state group: 1 + 1 pages
    assert core.stats().num_free_blocks == 199 - 13
    assert not core.config.prefix_caching_effective  # hybrid: documented as not modelled


def test_replica_from_plan_uses_the_plan_pool() -> None:
    plan = make_plan(PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM"))
    cfg = replica_config_from_plan(plan)
    assert cfg.num_gpu_blocks == plan.num_blocks
    assert cfg.block_size == plan.block_size
    assert cfg.max_num_seqs == plan.max_num_seqs
    assert cfg.max_num_batched_tokens == plan.max_num_batched_tokens
    assert cfg.blocks_for_tokens(1000) == plan.blocks_for_tokens(1000)
    # Llama-3.1-8B: 32 layers * 8 KV heads * 128 dims * 2 (K, V) * 2 bytes = 131072 B/token
    assert cfg.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2


def test_hybrid_plan_maps_sliding_groups() -> None:
    plan = make_plan(PlanRequest(model="google/gemma-3-27b-it", gpu="H100-SXM", tp=2))
    cfg = replica_config_from_plan(plan)
    kinds = {g.kind for g in cfg.kv_groups}
    assert kinds == {"full", "sliding"}
    assert all(
        g.sliding_window_tokens == 1024 for g in cfg.kv_groups if g.kind == "sliding"
    )  # gemma-3 sliding_window in its config.json


def test_sliding_window_prefix_hit_needs_only_the_window() -> None:
    # full + sliding(8) groups, block 4: the sliding group needs cdiv(8 - 1, 4) = 2 blocks
    # before the hit point; earlier sliding slots are the null block
    core = _core(
        (KVGroupConfig(kind="full"), KVGroupConfig(kind="sliding", sliding_window_tokens=8))
    )
    assert core.config.prefix_caching_effective
    core.add_request(EngineRequest("a", tuple(range(40)), 6))
    now = 0.0
    while core.has_work():
        now += core.step(now).duration_s
    b = core.add_request(EngineRequest("b", (*range(40), 77, 78, 79, 80), 2))
    core.step(now)
    # A cached 10 full blocks in both groups (its sliding blocks were released but stay
    # cached); B (44 tokens) hits all 40 shared tokens
    assert b.num_cached_tokens == 40
    assert b.block_ids[1][:8] == [0] * 8
    assert all(x != 0 for x in b.block_ids[1][8:10])
    assert core.pool.block_key[0] is None  # the null block never carries a hash
