"""Golden: which request is preempted, FCFS vs priority (worked by hand).

Pool of 7 blocks (6 usable), block_size 4, prefix caching off. B (priority 5) arrives first and
is prefilled alone (1 block); then A (priority 0) and C (priority 1) arrive, so the running
order is B, A, C. Each has a 4-token prompt and 8 output tokens (11 tokens at most: 3 blocks).

step 2: B decodes (2nd block), A and C are prefilled (1 block each)    free 2
step 3: A and C take their 2nd block                                   free 0
step 6: B has computed 8 tokens and needs a 3rd block: none is free.
  * FCFS preempts the last running request, C (frees 2); B and A go on.
  * priority preempts the largest (priority, arrival): B itself; the step then stops.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming


@pytest.mark.parametrize(("policy", "victim"), [("fcfs", "C"), ("priority", "B")])
def test_preemption_victim(policy: str, victim: str) -> None:
    cfg = ReplicaConfig.model_validate(
        {
            "num_gpu_blocks": 7,
            "block_size": 4,
            "max_num_seqs": 4,
            "max_num_batched_tokens": 64,
            "max_model_len": 64,
            "enable_prefix_caching": False,
            "policy": policy,
        }
    )
    core = EngineCore(cfg, FixedTiming(), np.random.default_rng(0))
    reqs = {"B": core.add_request(EngineRequest("B", (1, 2, 3, 4), 8, priority=5))}
    now = core.step(0.0).duration_s
    reqs["A"] = core.add_request(EngineRequest("A", (5, 6, 7, 8), 8, priority=0))
    reqs["C"] = core.add_request(EngineRequest("C", (9, 10, 11, 12), 8, priority=1))
    for _ in range(4):  # steps 2..5: no preemption yet
        now += core.step(now).duration_s
    assert core.stats().num_preemptions == 0
    assert core.stats().num_free_blocks == 0
    result = core.step(now)  # step 6
    assert result.num_preempted == 1
    assert {name: r.num_preemptions for name, r in reqs.items()} == {
        "A": 0,
        "B": 1 if victim == "B" else 0,
        "C": 1 if victim == "C" else 0,
    }
    if policy == "priority":
        assert result.num_scheduled_tokens == 0  # the victim was the request being scheduled
    for _ in range(200):
        if not core.has_work():
            break
        now += core.step(now).duration_s
    assert not core.has_work()
    assert all(r.num_output_tokens == 8 for r in reqs.values())
