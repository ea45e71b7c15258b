"""Lazy hashing/registration gives what eager hashing gives: same steps, same table.

The eager path (every full block hashed and entered in the table when it is computed) is the
reference; a no-op ``on_cache`` hook forces it (tiers need every hash). Both engines see the same
requests, including follow-up turns whose prompts carry the previous turn's generated tokens, so
the lazily hashed generated blocks must be hit as the eager ones are.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import pytest

from kvbudget.sim.blockpool import BlockPool
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming


def _core(cfg: ReplicaConfig, *, eager: bool) -> EngineCore:
    core = EngineCore(cfg, FixedTiming(step_s=0.01, per_token_s=1e-4), np.random.default_rng(3))
    if eager:
        core.kv.on_cache = lambda keys: None
    assert core.kv.lazy is not eager
    return core


def _drive(core: EngineCore, seed: int, seen_dups: list[int] | None = None) -> list[object]:
    """Step ``core`` over a seeded workload; follow-up turns extend finished conversations."""
    rng = np.random.default_rng(seed)
    prefixes = [
        tuple(rng.integers(1, 300, size=int(rng.integers(3, 60))).tolist()) for _ in range(3)
    ]
    transcript: dict[str, tuple[int, ...]] = {}
    log: list[object] = []
    now = 0.0
    n = 0
    for step in range(400):
        if step % 3 == 0 and n < 60:
            prompt = prefixes[int(rng.integers(0, 3))] + tuple(
                rng.integers(1, 300, size=int(rng.integers(1, 20))).tolist()
            )
            if transcript and rng.random() < 0.4:
                # a next turn: an earlier conversation (with its outputs) plus a new question
                earlier = transcript[sorted(transcript)[int(rng.integers(0, len(transcript)))]]
                if len(earlier) < 70:
                    prompt = earlier + tuple(rng.integers(1, 300, size=3).tolist())
            salt = "t1" if rng.random() < 0.2 else None
            req = EngineRequest(f"r{n}", prompt, int(rng.integers(1, 25)), cache_salt=salt)
            core.add_request(req)
            transcript.setdefault(f"r{n}", prompt)
            n += 1
            if rng.random() < 0.3:
                # the same prompt twice in one step: chunked prefills of identical content
                # register blocks with equal hashes (duplicates in the table)
                core.add_request(EngineRequest(f"r{n}", prompt, 3, cache_salt=salt))
                transcript[f"r{n}"] = prompt
                n += 1
        if step % 17 == 5 and core.requests:
            victim = sorted(core.requests)[0]
            log.append(("abort", victim, core.abort_request(victim)))
        if not core.has_work():
            continue
        res = core.step(now)
        now += res.duration_s
        for out in res.outputs:
            transcript[out.request_id] = transcript[out.request_id] + (out.token_id,)
        log.append(
            (
                res.duration_s,
                res.num_scheduled_tokens,
                res.num_preempted,
                [(o.request_id, o.token_index, o.num_cached_tokens) for o in res.outputs],
                # block ids: which of two equal blocks a hit took shows up here
                [(r.request_id, tuple(r.block_ids[0])) for r in core.scheduler.running],
            )
        )
        core.pool.check_invariants()
        if seen_dups is not None and core.pool._dups:
            seen_dups.append(step)
        if step % 50 == 0:
            log.append(core.reset_prefix_cache())
    log.append(core.stats())
    pool = core.pool
    pool.materialize_all()
    log.append((dict(pool._cached), dict(pool._dups), list(pool.block_key)))
    log.append((pool.free_block_ids(), list(pool.ref_cnt), pool.num_evictions))
    return log


@pytest.mark.parametrize("algo", ["builtin", "sha256"])
def test_lazy_equals_eager(algo: str) -> None:
    seen_dups: list[int] = []
    for seed in range(8):
        cfg = ReplicaConfig(
            num_gpu_blocks=40 + 4 * seed,  # small pools: evictions, duplicates, preemptions
            block_size=4,
            max_num_seqs=6,
            max_num_batched_tokens=20,  # chunked prefills
            max_model_len=512,
            hash_algo=algo,  # type: ignore[arg-type]
        )
        lazy = _drive(_core(cfg, eager=False), seed)
        eager = _drive(_core(cfg, eager=True), seed, seen_dups)
        assert lazy == eager, seed
        assert lazy[-3].prefix_cache_hits_tokens > 0  # type: ignore[attr-defined]
    assert seen_dups  # duplicates occurred (a key held by two blocks at once)


def test_unmatched_prompt_hashes_only_its_first_block() -> None:
    cfg = ReplicaConfig(num_gpu_blocks=64, block_size=4, max_num_batched_tokens=64)
    core = _core(cfg, eager=False)
    a = core.add_request(EngineRequest("a", tuple(range(1, 41)), 2))
    core.step(0.0)
    assert len(a.block_hashes) == 1  # 10 full blocks registered, one hashed (the root)
    b = core.add_request(EngineRequest("b", tuple(range(1, 33)) + (99,) * 8, 2))
    core.step(1.0)
    # b shares a's first 8 blocks: the lookup hashed both chains far enough to find them
    assert b.num_cached_tokens == 32
    assert len(a.block_hashes) == 10


def test_pending_runs_stay_bounded() -> None:
    cfg = ReplicaConfig(num_gpu_blocks=16, block_size=4, max_num_batched_tokens=64)
    core = _core(cfg, eager=False)
    for i in range(200):
        core.add_request(EngineRequest(f"r{i}", (i + 1,) * 8, 1))
        core.step(float(i))
        # runs whose blocks were all evicted are dropped by compaction
        assert core.pool._num_pending_runs <= 2 * cfg.num_gpu_blocks + 1
        core.pool.check_invariants()


class _Chain:
    """A HashSource with given hashes (block i of the chain has hash ``hashes[i]``)."""

    def __init__(self, hashes: list[str]) -> None:
        self._all: list[Hashable] = list(hashes)
        self.block_hashes: list[Hashable] = []

    def update_block_hashes(self, num_tokens: int) -> None:
        self.block_hashes = self._all[: max(len(self.block_hashes), num_tokens // 4)]


def test_materialize_keeps_registration_order_of_equal_blocks() -> None:
    """Two blocks with one hash: the table names the first registered, as cache_block does."""
    eager = BlockPool(16)
    lazy = BlockPool(16)
    a, b = eager.allocate(3), eager.allocate(3)
    assert lazy.allocate(3) == a and lazy.allocate(3) == b
    chain_b = _Chain(["h0", "h1", "h2"])
    chain_a = _Chain(["h0", "h1", "h2"])
    # b registers blocks 1..2 first, then a registers its blocks 1..2 (same content)
    for i in (1, 2):
        eager.cache_block(b[i], f"h{i}")
    for i in (1, 2):
        eager.cache_block(a[i], f"h{i}")
    lazy.register_lazy("h0", chain_b, 1, b[1:], 4)
    lazy.register_lazy("h0", chain_a, 1, a[1:], 4)
    lazy.materialize("h0")
    assert lazy.get_cached_block("h1") == eager.get_cached_block("h1") == b[1]
    assert lazy._dups == eager._dups == {"h1": [a[1]], "h2": [a[2]]}
    # evicting b's copies promotes a's, in both
    for pool in (eager, lazy):
        pool.free([b[2], b[1], b[0], a[2], a[1], a[0]])
        pool.allocate(15)  # pops the free queue, evicting every hashed block in order
        assert pool.num_evictions == 4 and not pool._cached and not pool._dups


def test_a_deferred_source_is_registered_before_another_source_under_its_root() -> None:
    """A decoder on the fast path holds its filled blocks unregistered (``BlockPool.defer``).
    Another request registering equal blocks under the same root must come after them, as it
    would had the decoder registered each block in the step that filled it; and a lookup of
    the root sees them."""
    pool = BlockPool(16)
    a, b = pool.allocate(3), pool.allocate(3)
    chain_a = _Chain(["h0", "h1", "h2"])
    chain_b = _Chain(["h0", "h1", "h2"])
    flushed: list[object] = []

    def flush(source: object) -> None:  # the owner's hook: its blocks as filled by now
        flushed.append(source)
        if source is chain_a:
            pool.register_lazy("h0", chain_a, 0, a, 4)

    pool.set_flush(flush)
    assert pool.defer("h0", chain_a)
    assert not pool.defer("h0", chain_b)  # one deferred source per root
    pool.register_lazy("h0", chain_b, 0, b, 4)  # b's registration flushes a's blocks first
    assert flushed == [chain_a]
    pool.materialize("h0")
    assert [pool.get_cached_block(h) for h in ("h0", "h1", "h2")] == a
    assert pool._dups == {"h0": [b[0]], "h1": [b[1]], "h2": [b[2]]}
    pool.undefer("h0")
    assert "h0" not in pool._deferred


def test_a_lookup_sees_a_deferred_sources_blocks() -> None:
    pool = BlockPool(8)
    a = pool.allocate(2)
    chain = _Chain(["h0", "h1"])
    pool.set_flush(lambda source: pool.register_lazy("h0", chain, 0, a, 4))
    assert pool.defer("h0", chain)
    assert pool.get_cached_block("h1") == a[1]  # a lookup without a root flushes them all
