"""The lazy-decode fast path gives exactly what stepping EngineCore one step at a time gives."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.config import KVGroupConfig, ReplicaConfig
from kvbudget.sim.replica import Replica, ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.tiers import TierConfig
from kvbudget.sim.timing import FixedTiming
from tests.unit.sim.helpers_sim import random_workload


def _gemma(num_sliding: int, window: int) -> tuple[KVGroupConfig, ...]:
    """Gemma-2 (1 sliding : 1 full) or Gemma-3 (5 sliding : 1 full) style groups."""
    sliding = KVGroupConfig(kind="sliding", sliding_window_tokens=window)
    return (sliding,) * num_sliding + (KVGroupConfig(kind="full"),)


def _cfg(seed: int, groups: tuple[KVGroupConfig, ...] = (KVGroupConfig(),)) -> ReplicaConfig:
    base = ReplicaConfig(
        num_gpu_blocks=2,
        block_size=4,
        kv_groups=groups,
        max_num_seqs=6,
        max_num_batched_tokens=48,
        max_model_len=256,
    )
    # small pools: many preemptions and evictions (the workload's requests are <= 109 tokens)
    per_group = 20 + 3 * seed
    num_blocks = max(per_group * len(groups), base.blocks_for_tokens(109) + 1)
    return base.model_copy(
        update={"num_gpu_blocks": num_blocks, "enable_prefix_caching": seed % 4 != 3}
    )


@pytest.mark.parametrize("seed", range(12))
def test_fast_path_equals_explicit_stepping(seed: int) -> None:
    _assert_same(seed, _cfg(seed))


@pytest.mark.parametrize("num_sliding", [1, 5])
@pytest.mark.parametrize("window", [3, 8, 33, 200])  # below, around and above the prompts
@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_explicit_stepping_with_sliding_windows(
    seed: int, window: int, num_sliding: int
) -> None:
    cfg = _cfg(seed, _gemma(num_sliding, window))
    _assert_same(seed, cfg)


@pytest.mark.parametrize("policy", ["offload", "write_through"])
@pytest.mark.parametrize("layout", ["dense", "gemma3"])
@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_explicit_stepping_with_kv_tiers(
    seed: int, layout: str, policy: str
) -> None:
    """A CPU tier (and a disk tier below it) small enough to evict, fast enough that reloads
    are taken: the fast path hands the replica to EngineCore while a request reloads."""
    groups = _gemma(5, 8) if layout == "gemma3" else (KVGroupConfig(),)
    cfg = _cfg(seed % 3, groups).model_copy(update={"kv_bytes_per_token": 1000})
    block_bytes = 1000 * cfg.block_size
    tiers = (
        TierConfig(
            name="cpu",
            capacity_bytes=30 * block_bytes,
            bandwidth_bytes_per_s=4e7,
            latency_s=0.002 * (seed % 2),
            policy=policy,  # type: ignore[arg-type]
        ),
        TierConfig(name="disk", capacity_bytes=90 * block_bytes, bandwidth_bytes_per_s=1e7),
    )
    tier_stats = _assert_same(seed, cfg, tiers)
    assert sum(t["reloads"] for t in tier_stats.values()) > 0  # the case under test happened


@pytest.mark.parametrize("seed", range(3))
def test_fast_path_equals_explicit_stepping_with_a_shared_remote_tier(seed: int) -> None:
    """Two replicas (round robin) write through one remote tier and reload from it: each
    replica's tier writes and reloads happen in the same steps and order on both engines."""
    cfg = _cfg(seed, _gemma(1, 8)).model_copy(update={"kv_bytes_per_token": 1000})
    remote = TierConfig(
        name="remote",
        capacity_bytes=60 * 1000 * cfg.block_size,
        bandwidth_bytes_per_s=4e7,
        policy="write_through",
    )
    runs = []
    for fast in (True, False):
        setup = ReplicaSetup(cfg, FixedTiming(step_s=0.01, per_token_s=1e-4), fast_path=fast)
        spec = ClusterSpec([setup, setup], remote_tier=remote)
        res = simulate(random_workload(seed, 80), spec, seed=7)
        runs.append(
            (
                [
                    (r.request_id, r.first_token_s, r.finish_s, r.cached_tokens)
                    for r in res.requests
                ],
                res.replica_stats,
                res.tier_stats,
            )
        )
    assert runs[0] == runs[1]
    assert sum(t["reloads"] for t in runs[0][2].values()) > 0


def _assert_same(
    seed: int,
    cfg: ReplicaConfig,
    tiers: tuple[TierConfig, ...] = (),
    workload: list[EngineRequest] | None = None,
) -> dict[str, Any]:
    timing = FixedTiming(step_s=0.01, per_token_s=1e-4)
    probe = Replica("probe", ReplicaSetup(cfg, timing, tiers=tiers), np.random.default_rng(0))
    assert probe.fast is not None  # the fast run really runs the fast path
    runs = []
    for fast in (True, False):
        setup = ReplicaSetup(cfg, timing, tiers=tiers, fast_path=fast)
        requests = random_workload(seed) if workload is None else workload
        res = simulate(requests, ClusterSpec([setup]), seed=7)
        runs.append(
            (
                [
                    (
                        r.request_id,
                        r.first_token_s,
                        r.finish_s,
                        r.preemptions,
                        r.cached_tokens,
                        r.status,
                        r.output_tokens,
                    )
                    for r in res.requests
                ],
                res.replica_stats,
                res.num_steps,
                res.tier_stats,
            )
        )
    assert runs[0] == runs[1]
    assert runs[0][1]  # the run did something (stats recorded)
    return res.tier_stats


@pytest.mark.parametrize("threshold", [4, 16])
@pytest.mark.parametrize("layout", ["dense", "gemma2"])
@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_explicit_stepping_with_a_long_prefill_threshold(
    seed: int, layout: str, threshold: int
) -> None:
    """vLLM's long_prefill_token_threshold caps each prefill chunk, so a later, shorter prompt
    can start decoding while an earlier one still prefills ahead of it in running order (the
    fast path then steps EngineCore until the order is decoders first again)."""
    groups = _gemma(1, 8) if layout == "gemma2" else (KVGroupConfig(),)
    cfg = _cfg(seed, groups).model_copy(update={"long_prefill_token_threshold": threshold})
    _assert_same(seed, cfg)


@pytest.mark.parametrize("layout", ["dense", "gemma2"])
@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_explicit_stepping_with_more_seqs_than_tokens(
    seed: int, layout: str
) -> None:
    """max_num_seqs 16 above max_num_batched_tokens 8, on a pool large enough that the
    running requests are limited by the token budget, not by blocks; a burst of short prompts
    with long outputs fills a step with decoders (8 of them, every token of the step)."""
    groups = _gemma(1, 8) if layout == "gemma2" else (KVGroupConfig(),)
    cfg = _cfg(seed, groups).model_copy(
        update={"max_num_seqs": 16, "max_num_batched_tokens": 8, "num_gpu_blocks": 2000}
    )
    rng = np.random.default_rng(seed)
    burst = [
        EngineRequest(
            f"b{i}",
            tuple(rng.integers(1, 500, size=int(rng.integers(1, 5))).tolist()),
            int(rng.integers(20, 60)),
            arrival_s=0.001 * i,
        )
        for i in range(40)
    ]
    _assert_same(seed, cfg, workload=burst)
    _assert_same(seed, cfg)


def _capped(requests: list[EngineRequest], max_model_len: int) -> list[EngineRequest]:
    """The requests cut to ``max_model_len``: the prompt to at most ``max_model_len - 1``
    tokens, the output to the rest, so a long request ends exactly at the cap."""
    out = []
    for r in requests:
        prompt = r.prompt_token_ids[: max_model_len - 1]
        num_out = min(r.max_output_tokens, max_model_len - len(prompt))
        out.append(replace(r, prompt_token_ids=prompt, max_output_tokens=num_out))
    return out


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("variant", ["dense", "gemma3", "tiers", "threshold"])
@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_explicit_stepping_at_max_model_len(
    seed: int, variant: str, chunked: bool
) -> None:
    """max_model_len 40 (the workload's requests cut to it, most of them end exactly at it),
    with chunked prefill on or off (off: max_num_batched_tokens 40, a prompt waits until the
    step has room for all of it), on a dense model, Gemma-3's groups, KV tiers and a
    long_prefill_token_threshold."""
    groups = _gemma(5, 8) if variant == "gemma3" else (KVGroupConfig(),)
    update: dict[str, object] = {
        "max_model_len": 40,
        "max_num_batched_tokens": 40 if not chunked else 16,
        "enable_chunked_prefill": chunked,
        "kv_bytes_per_token": 1000,
    }
    if variant == "threshold":
        update["long_prefill_token_threshold"] = 12
    cfg = ReplicaConfig.model_validate({**_cfg(seed, groups).model_dump(), **update})
    tiers: tuple[TierConfig, ...] = ()
    if variant == "tiers":
        block_bytes = 1000 * cfg.block_size
        tiers = (
            TierConfig(name="cpu", capacity_bytes=30 * block_bytes, bandwidth_bytes_per_s=4e7),
        )
    requests = _capped(random_workload(seed), 40)
    assert sum(r.num_prompt_tokens + r.max_output_tokens == 40 for r in requests) >= 10
    _assert_same(seed, cfg, tiers, workload=requests)


def test_which_replicas_run_the_fast_path() -> None:
    """Both policies; P/D decode replicas (KV transfers) and fast_path=False stay explicit."""
    base = {"num_gpu_blocks": 64, "max_num_seqs": 8, "max_num_batched_tokens": 64}
    timing = FixedTiming(step_s=0.01)
    for policy in ("fcfs", "priority"):
        cfg = ReplicaConfig.model_validate({**base, "policy": policy})
        rng = np.random.default_rng(0)
        assert Replica("a", ReplicaSetup(cfg, timing), rng).fast is not None
        assert Replica("b", ReplicaSetup(cfg, timing, fast_path=False), rng).fast is None
        transfers = ReplicaSetup(cfg, timing, accepts_transfers=True)
        assert Replica("c", transfers, rng).fast is None


@pytest.mark.parametrize("seed", range(8))
def test_fast_path_equals_explicit_stepping_with_priorities(seed: int) -> None:
    """Priority scheduling (three levels, lower first) on small pools: preemptions pick the
    largest (priority, arrival), and a request that preempts itself holds back the rest of the
    running list for that step; such steps run on EngineCore, the others lazily."""
    cfg = _cfg(seed).model_copy(update={"policy": "priority"})
    rng = np.random.default_rng(100 + seed)
    workload = [replace(r, priority=int(rng.integers(0, 3))) for r in random_workload(seed)]
    _assert_same(seed, cfg, workload=workload)
    setup = ReplicaSetup(cfg, FixedTiming(step_s=0.01, per_token_s=1e-4))
    res = simulate(workload, ClusterSpec([setup]), seed=7)
    assert sum(r.preemptions for r in res.requests) > 0  # the pools are small enough


@pytest.mark.parametrize("fast", [True, False])
def test_block_of_generated_tokens_is_hit_in_the_step_that_fills_it(fast: bool) -> None:
    """vLLM caches a block when the token that fills it is scheduled (``allocate_slots`` ->
    ``cache_blocks(num_computed + num_new)``), so a request admitted in that same step hits it.
    The fast path once registered it only at the next block boundary, one step late."""
    from kvbudget.sim.replica import Replica
    from kvbudget.sim.request import generated_token_id

    cfg = ReplicaConfig(
        num_gpu_blocks=32, block_size=4, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64
    )
    replica = Replica(
        "r", ReplicaSetup(cfg, FixedTiming(step_s=0.01), fast_path=fast), np.random.default_rng(0)
    )
    a = replica.add(EngineRequest("A", (1, 2, 3, 4), 10))
    generated = tuple(generated_token_id(a.seed, i, 32000) for i in range(4))
    now_s = 0.0
    b = None
    for step in range(1, 30):
        if step == 5:
            # step 1 computed A's prompt (positions 0-3) and emitted token 0; steps 2..5
            # compute positions 4..7 (tokens 0..3), so step 5 fills A's block 1. B's prompt is
            # A's prompt + those 4 tokens + 2 more: it hits blocks 0 and 1 = 8 tokens.
            b = replica.add(EngineRequest("B", (1, 2, 3, 4, *generated, 9, 9), 2))
        if not replica.has_work():
            break
        now_s += replica.step(now_s)
    assert b is not None and b.cached_tokens_by_tier == {"gpu": 8}


def test_equal_chains_filled_in_one_step_register_in_running_order() -> None:
    """Two decoders with one prompt and equal generated tokens (a vocabulary of one token)
    fill equal blocks in the same steps: the first holds the root's deferred registration,
    the second registers in each step. The explicit engine registers the first's block
    before the second's, so a later request hits the first's; the fast path must too (it
    once registered the second's first: found by review, reproduced here)."""
    cfg = ReplicaConfig(
        num_gpu_blocks=64, block_size=2, max_num_seqs=8, max_num_batched_tokens=64,
        max_model_len=256, kv_bytes_per_token=1000,
    )  # fmt: skip
    timing = FixedTiming(step_s=0.01, per_token_s=1e-4)
    fast = Replica("f", ReplicaSetup(cfg, timing), np.random.default_rng(3), vocab_size=1)
    slow = Replica(
        "s", ReplicaSetup(cfg, timing, fast_path=False), np.random.default_rng(3), vocab_size=1
    )
    assert fast.fast is not None and fast.fast._defer
    arrivals = {
        0: [EngineRequest("r0", (1, 2), 8), EngineRequest("r1", (1, 2), 8)],
        3: [EngineRequest("r2", (1, 2, 0, 0, 5), 2)],  # hits one of the two copies
    }
    now_s = 0.0
    for step in range(40):
        for req in arrivals.get(step, []):
            fast.add(req)
            slow.add(req)
        if not fast.has_work():
            break
        duration_s = fast.step(now_s)
        assert slow.step(now_s) == duration_s
        a, b = fast.core.requests.get("r2"), slow.core.requests.get("r2")
        if a is not None and b is not None:
            assert a.block_ids == b.block_ids, f"step {step}"
        assert fast.core.pool.free_block_ids() == slow.core.pool.free_block_ids(), f"step {step}"
        now_s += duration_s
    for rep in (fast, slow):
        rep.core.pool.materialize_all()
    assert dict(fast.core.pool._cached) == dict(slow.core.pool._cached)
    assert fast.core.pool._dups == slow.core.pool._dups
