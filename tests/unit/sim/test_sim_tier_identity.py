"""A shared remote tier never serves a block written under another cache identity.

Worked by hand: block size 4, a 33-token prompt whose first 32 tokens (8 full blocks) are
shared. Replica 0 computes the prompt and the write-through remote tier stores its 8 full
blocks. Replica 1 (round robin) has an empty GPU cache; with the same identity its 32 shared
tokens reload from the remote tier; with another identity (an upgraded deployment) the lookup
stops at the first block, which the tier holds only under replica 0's identity: 0 reloaded
tokens, one incompatible miss, and the prompt is computed in full.
"""

from __future__ import annotations

from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.tiers import Tier, TierConfig, TierStack
from kvbudget.sim.timing import FixedTiming

CFG = ReplicaConfig(
    num_gpu_blocks=64,
    block_size=4,
    max_num_seqs=4,
    max_num_batched_tokens=64,
    max_model_len=128,
    kv_bytes_per_token=1000,
)
REMOTE = TierConfig(
    name="remote",
    capacity_bytes=10**8,
    bandwidth_bytes_per_s=1e9,
    latency_s=0.001,
    policy="write_through",
)
TIMING = FixedTiming(step_s=0.01, per_token_s=0.01)  # prefill far slower than a reload
SHARED = tuple(range(1, 33))
REQS = [
    EngineRequest("first", (*SHARED, 90), 2, arrival_s=0.0),
    EngineRequest("second", (*SHARED, 91), 2, arrival_s=1.0),
]


def _run(first_identity: str, second_identity: str) -> tuple[dict[str, int], dict[str, object]]:
    spec = ClusterSpec(
        [
            ReplicaSetup(CFG, TIMING, identity=first_identity),
            ReplicaSetup(CFG, TIMING, identity=second_identity),
        ],
        router="round_robin",
        remote_tier=REMOTE,
    )
    res = simulate(REQS, spec, seed=0)
    by_id = {r.request_id: r for r in res.requests}
    assert by_id["first"].replica == "replica-0" and by_id["second"].replica == "replica-1"
    return by_id["second"].cached_tokens_by_tier, res.tier_stats["replica-1"]


def test_remote_tier_is_shared_between_replicas() -> None:
    # the default identity ("": one for all): replica-1 never computed the prefix, and its 32
    # shared tokens come from the remote tier replica-0 wrote through
    cached, stats = _run("", "")
    assert cached == {"remote": 32}
    assert stats["incompatible_misses"] == 0


def test_same_identity_reloads_the_shared_prefix() -> None:
    cached, stats = _run("deploy-a", "deploy-a")
    assert cached == {"remote": 32}
    assert stats["incompatible_misses"] == 0


def test_other_identity_is_a_miss_never_a_hit() -> None:
    cached, stats = _run("deploy-a", "deploy-b-upgraded")
    assert cached.get("remote", 0) == 0
    assert stats["incompatible_misses"] == 1
    assert stats["reloads"] == 0


def test_namespaced_entries_coexist_and_evict_cleanly() -> None:
    # capacity of 2 blocks of 4 tokens x 10 bytes: the third write evicts the oldest entry
    tier = Tier(TierConfig(name="cpu", capacity_bytes=80, bandwidth_bytes_per_s=1e9), 40)
    a = TierStack([tier], FixedTiming(), 4, identity="a")
    b = TierStack([tier], FixedTiming(), 4, identity="b")
    a.store([11], 0.0)
    b.store([11], 0.0)  # same hash, other identity: a second entry, not an overwrite
    assert a.holds(11) and b.holds(11)
    assert a.own_hashes(tier) == [11] and b.own_hashes(tier) == [11]
    a.store([12], 0.0)  # evicts ("a", 11), the least recently used
    assert not a.holds(11) and b.holds(11) and a.holds(12)
    assert tier.writers == {11: "b", 12: "a"}
