"""One-slot replica for the hand-worked M/D/1 tests of the highest-load search.

One sequence at a time, a 16-token prompt and one output token, no prefix cache: with a
fixed step time every request is served in exactly one step, so the replica is an M/D/1
queue under Poisson arrivals (and a D/D/1 one under a closed loop), whose answers the tests
work out by hand.
"""

from __future__ import annotations

from kvbudget.sim.config import ReplicaConfig


def md1_replica_config() -> ReplicaConfig:
    """A replica that serves one 16-token request per step, one at a time."""
    return ReplicaConfig(
        name="md1",
        num_gpu_blocks=1024,
        block_size=16,
        max_num_seqs=1,
        max_num_batched_tokens=2048,
        max_model_len=2048,
        enable_prefix_caching=False,
    )
