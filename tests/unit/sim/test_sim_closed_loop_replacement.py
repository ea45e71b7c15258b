"""A closed-loop replacement reaches the engine after the engine's next step has begun.

vLLM 0.32.0 ``vllm/v1/engine/core.py`` ``EngineCore.run_busy_loop`` (line 1547): each pass
drains the input queue (``_process_input_queue``, line 1573) and then runs one step; a step's
outputs go to the client through the output thread after the step, so the request the client
sends because one finished arrives while the next step runs and is scheduled in the step after
it. An engine with no work blocks on its input queue (``_process_input_queue``, lines
1576-1591) and takes the request at once. Expected values by hand, steps of 1 s
(``FixedTiming(step_s=1.0)``).
"""

from __future__ import annotations

import pytest

from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming

CFG = ReplicaConfig(
    num_gpu_blocks=64,
    block_size=4,
    max_num_seqs=8,
    max_num_batched_tokens=64,
    max_model_len=64,
    enable_prefix_caching=False,
)


def _req(i: int, out: int) -> EngineRequest:
    return EngineRequest(f"r{i}", tuple(range(10 * i, 10 * i + 4)), out)


def test_replacement_waits_for_the_step_already_running() -> None:
    """Concurrency 2. Step [0, 1]: r0 and r1 prefilled, first tokens at 1 s; r0 (1 output token)
    finishes. Its replacement r2 is sent at 1 s, but the step [1, 2] (r1's decode) has begun:
    r2 is prefilled in [2, 3], first token at 3 s, TTFT 2 s (1 s when it joined at once)."""
    requests = [_req(0, 1), _req(1, 3), _req(2, 1)]
    spec = ClusterSpec([ReplicaSetup(CFG, FixedTiming(step_s=1.0))], concurrency=2)
    done = {r.request_id: r for r in simulate(requests, spec).requests}
    assert done["r1"].finish_s == pytest.approx(3.0)
    assert (done["r2"].arrival_s, done["r2"].first_token_s) == pytest.approx((1.0, 3.0))
    assert done["r2"].finish_s == pytest.approx(3.0)


def test_an_idle_engine_takes_the_replacement_at_once() -> None:
    """Concurrency 1: r0 finishes at 1 s and the engine has nothing else: r1 (sent at 1 s) is
    prefilled in [1, 2] at once, TTFT 1 s."""
    requests = [_req(0, 1), _req(1, 1)]
    spec = ClusterSpec([ReplicaSetup(CFG, FixedTiming(step_s=1.0))], concurrency=1)
    done = {r.request_id: r for r in simulate(requests, spec).requests}
    assert (done["r1"].arrival_s, done["r1"].first_token_s) == pytest.approx((1.0, 2.0))


ASYNC = CFG.model_copy(update={"async_scheduling": True})


def test_async_scheduling_holds_an_arrival_for_one_more_step() -> None:
    """vLLM 0.14.0 and 0.32.0 ``EngineCore.step_with_batch_queue`` (batch queue of 2 with
    ``--async-scheduling``, ``MultiprocExecutor.max_concurrent_batches``): step k+1 is
    scheduled while step k runs. Open loop, steps of 1 s: r0 arrives at 0 (idle engine: at
    once) and decodes 4 tokens in [0, 4]; r1 arrives at 1.5 s during step [1, 2]. Step [2, 3]
    was scheduled at 1 s without it; r1 is scheduled at 3 s into [3, 4]: first token at 4 s
    (3 s without async scheduling)."""
    requests = [
        EngineRequest("r0", tuple(range(4)), 4, arrival_s=0.0),
        EngineRequest("r1", tuple(range(10, 14)), 1, arrival_s=1.5),
    ]
    for cfg, first in ((CFG, 3.0), (ASYNC, 4.0)):
        spec = ClusterSpec([ReplicaSetup(cfg, FixedTiming(step_s=1.0))])
        done = {r.request_id: r for r in simulate(requests, spec).requests}
        assert done["r0"].first_token_s == pytest.approx(1.0)
        assert done["r1"].first_token_s == pytest.approx(first)


def test_async_scheduling_closed_loop_replacement_waits_two_steps() -> None:
    """The first test's closed loop with async scheduling: r2, sent at 1 s when r0 finished,
    reaches the engine after the step [1, 2] began, whose successor [2, 3] is then scheduled
    without it; r2 is prefilled in [3, 4], first token at 4 s. r1's 3 tokens end at 3 s."""
    requests = [_req(0, 1), _req(1, 3), _req(2, 1)]
    spec = ClusterSpec([ReplicaSetup(ASYNC, FixedTiming(step_s=1.0))], concurrency=2)
    done = {r.request_id: r for r in simulate(requests, spec).requests}
    assert done["r1"].finish_s == pytest.approx(3.0)
    assert (done["r2"].arrival_s, done["r2"].first_token_s) == pytest.approx((1.0, 4.0))


def test_async_scheduling_idle_engine_takes_the_request_at_once() -> None:
    requests = [_req(0, 1), _req(1, 1)]
    spec = ClusterSpec([ReplicaSetup(ASYNC, FixedTiming(step_s=1.0))], concurrency=1)
    done = {r.request_id: r for r in simulate(requests, spec).requests}
    assert (done["r1"].arrival_s, done["r1"].first_token_s) == pytest.approx((1.0, 2.0))


def test_the_planned_vllm_version_gives_the_async_scheduling_default() -> None:
    """vLLM 0.13.0 ``config/scheduler.py``: ``async_scheduling: bool = False``; 0.14.0:
    ``Field(default=None)``, turned on by ``VllmConfig.__post_init__`` unless
    ``pipeline_parallel_size > 1``; 0.32.0 keeps it on with pipeline parallel on the V2 model
    runner (``config/vllm.py``: only ``not self.use_v2_model_runner`` turns it off)."""
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.capacity.versions import vllm_async_scheduling_default
    from kvbudget.sim.fromplan import build_replica

    assert not vllm_async_scheduling_default((0, 13, 0), 1)
    assert vllm_async_scheduling_default((0, 14, 0), 1)
    assert not vllm_async_scheduling_default((0, 14, 0), 2)
    assert vllm_async_scheduling_default((0, 32, 0), 2)
    base = {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM", "max_model_len": 4096}
    old = build_replica(PlanRequest(**base, engine_version="0.13.0"), timing_model="roofline")
    new = build_replica(PlanRequest(**base, engine_version="0.14.0"), timing_model="roofline")
    off = build_replica(
        PlanRequest(**base, engine_version="0.14.0"),
        timing_model="roofline",
        async_scheduling=False,
    )
    assert (old.config.async_scheduling, new.config.async_scheduling) == (False, True)
    assert not off.config.async_scheduling
    assert "; async scheduling on (vLLM 0.14.0's default: on from 0.14.0" in new.description
    assert "; async scheduling off (vLLM 0.13.0's default: off up to 0.13.0" in old.description
    assert "; async scheduling off (--no-async-scheduling given" in off.description
