"""Regression: a request that completes and one the client cancels, ending in the same step.

vLLM frees a finished request's blocks inside the step (``update_from_output``, tail first)
and a client abort when it is processed, after that step; so the completed request's blocks
reach the free queue before the cancelled one's. The lazy-decode fast path once classified a
decoder as completed or cancelled from its *stale* lazy output count (every decoder looked
cancelled) and freed both in running order instead: a different free queue, hence different
evictions and prefix-cache hits than stepping ``EngineCore`` (seen as 364,000 vs 364,128
cached tokens on ``bench/sim_equivalence.py``'s shared-prefix scenario).
"""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.replica import Replica, ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming


def _drain(fast: bool) -> tuple[list[int], list[tuple[str, str, int]]]:
    cfg = ReplicaConfig(
        num_gpu_blocks=16,
        block_size=4,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        max_model_len=64,
    )
    replica = Replica(
        "r", ReplicaSetup(cfg, FixedTiming(step_s=0.01), fast_path=fast), np.random.default_rng(0)
    )
    assert (replica.fast is not None) == fast
    # A is admitted first (running order A, B); both emit their 3rd token in step 3:
    # A is cancelled by the client after 3 tokens, B completes (max_output_tokens=3)
    replica.add(EngineRequest("A", (1, 2, 3, 4), 10, cancel_after_tokens=3))
    replica.add(EngineRequest("B", (5, 6, 7, 8), 3))
    now_s = 0.0
    for _ in range(20):
        if not replica.has_work():
            break
        now_s += replica.step(now_s)
    assert not replica.has_work()
    done = [
        (r.spec.request_id, r.finish_reason or "", r.num_output_tokens) for r in replica.finished()
    ]
    return replica.core.pool.free_block_ids(), sorted(done)


@pytest.mark.parametrize("fast", [True, False])
def test_completed_request_freed_before_cancelled_one(fast: bool) -> None:
    free, done = _drain(fast)
    # Worked by hand (block_size 4, blocks 1..15 free in id order):
    # step 1 admits A -> block 1, B -> block 2 (4-token prompts, first token each);
    # step 2 decodes position 4 of each: A -> block 3, B -> block 4; step 3 emits token 3.
    # B completes inside step 3: frees [4, 2] (tail first); then A's abort frees [3, 1].
    # Blocks 1 and 2 are full (hashed): they join the tail, B's before A's; the partial
    # blocks 4 then 3 carry no hash and go to the head (vLLM 0.32 BlockPool.free_blocks), the
    # later-freed 3 in front of 4.
    assert free == [3, 4, *range(5, 16), 2, 1]
    assert done == [("A", "cancelled", 3), ("B", "length", 3)]


def test_fast_path_and_engine_agree_on_the_free_queue() -> None:
    assert _drain(True) == _drain(False)
