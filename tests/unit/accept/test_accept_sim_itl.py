"""ITL on the simulated target: every output token's time is the end of the step that made it.

Worked by hand with a fixed step-time model, step = 10 ms + 1 ms per scheduled token (prefill
tokens + decoding sequences), prefix caching off, closed loop of 2:

* A (20 prompt tokens, 2 outputs) and B (20, 4) start at 0. Step 1 prefills both (40 tokens):
  10 + 40 = 50 ms, so A1 and B1 at 0.050 s.
* Step 2 decodes A and B: 10 + 2 = 12 ms, A2 and B2 at 0.062 s; A is done, so the client sends
  C (30, 2) at 0.062 s; it reaches the engine after step 3 has begun (vLLM's
  ``EngineCore.run_busy_loop``, kvbudget.sim.events).
* Step 3 decodes B alone: 10 + 1 = 11 ms, B3 at 0.073 s.
* Step 4 decodes B and prefills C: 10 + 1 + 30 = 41 ms, B4 and C1 at 0.114 s (C's TTFT 52 ms).
* Step 5 decodes C: 11 ms, C2 at 0.125 s.

ITLs: A [12 ms], B [12, 11, 41 ms], C [11 ms]: five gaps (11, 11, 12, 12, 41 ms).
Type-7 percentiles: p50 12 ms; p95 at rank 0.95 x 4 = 3.8, 12 + 0.8 x 29 = 35.2 ms; p99 at
3.96, 12 + 0.96 x 29 = 39.84 ms.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from kvbudget.accept.cells import summarize_cell
from kvbudget.accept.plan.planfile import parse_plan
from kvbudget.accept.request_keys import RequestKey
from kvbudget.accept.targets.base import TargetInfo
from kvbudget.accept.targets.sim import SimTarget
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.timing import FixedTiming
from kvbudget.workload.request import PlannedRequest

DEMO = Path(__file__).resolve().parents[3] / "examples" / "acceptance-demo.yaml"


def _id(name: str) -> str:
    return RequestKey("short/normal", 0, name).encode()


def _request(name: str, first_token: int, prompt: int, output: int) -> PlannedRequest:
    return PlannedRequest(
        request_id=_id(name),
        arrival_s=0.0,
        prompt_token_ids=tuple(range(first_token, first_token + prompt)),
        output_tokens=output,
    )


def _target(fast: bool) -> SimTarget:
    config = ReplicaConfig(num_gpu_blocks=64, enable_prefix_caching=False)
    target = SimTarget(
        config,
        FixedTiming(step_s=0.010, per_token_s=0.001),
        np.random.default_rng(0),
        info=TargetInfo(kind="sim", source="simulated", label="fixed"),
    )
    if not fast:
        target.replica.fast = None  # the replica steps EngineCore itself (the explicit engine)
    return target


@pytest.mark.parametrize("fast", [True, False])
def test_token_times_are_the_step_ends(fast: bool) -> None:
    target = _target(fast)
    assert (target.replica.fast is not None) == fast
    requests = [_request("A", 100, 20, 2), _request("B", 200, 20, 4), _request("C", 300, 30, 2)]
    run = target.run_cell(
        requests, cell_id="short/normal", closed_loop_concurrency=2, duration_s=None
    )
    times = {r.request_id: r.token_times_s for r in run.records}
    assert times[_id("A")] == pytest.approx([0.050, 0.062])
    assert times[_id("B")] == pytest.approx([0.050, 0.062, 0.073, 0.114])
    assert times[_id("C")] == pytest.approx([0.114, 0.125])
    by_id = {r.request_id: r for r in run.records}
    assert by_id[_id("C")].sent_s == pytest.approx(0.062)
    assert by_id[_id("C")].ttft_s == pytest.approx(0.052)
    # TPOT is the mean of a request's ITLs: B (114 - 50) / 3 ms
    assert by_id[_id("B")].tpot_s == pytest.approx(0.064 / 3)

    plan = parse_plan(yaml.safe_load(DEMO.read_text(encoding="utf-8")))
    cell, _ = summarize_cell(
        plan,
        cell_id="short/normal",
        order=0,
        runs=[run],
        kind="simulated",
        synthetic_text=True,
        rng=np.random.default_rng(0),
    )
    itl = cell.summaries["itl_s"]
    assert itl.n == 5
    assert itl.pct("p50") == pytest.approx(0.012)
    assert itl.pct("p95") == pytest.approx(0.0352)
    assert itl.pct("p99") == pytest.approx(0.03984)
