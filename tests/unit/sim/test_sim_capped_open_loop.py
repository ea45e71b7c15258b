"""``sim --rate R --max-concurrency C``: arrivals at their own times, at most ``C`` in flight,
as ``vllm bench serve`` sends them (vLLM 0.32.0 ``vllm/benchmarks/serve.py``: every request
waits for its arrival time in ``get_request``, then on ``asyncio.Semaphore(C)``, lines 969-978;
its ``start_time`` - what TTFT counts from - is taken after the semaphore)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvbudget.cli.sim import sim
from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming


def test_cap_of_one_by_hand() -> None:
    """Steps of 10 ms, 2 output tokens, at most one request in flight; arrivals 0, 1 ms, 500 ms.
    r0: steps [0, 10], [10, 20] ms. r1 arrived at 1 ms but waits for the slot: sent at 20 ms,
    done at 40 ms. r2 arrives at 500 ms, after the slot freed: sent then, done at 520 ms (a
    release that ignored arrival times would send it at 40 ms)."""
    cfg = ReplicaConfig(
        num_gpu_blocks=64,
        block_size=4,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        max_model_len=64,
        enable_prefix_caching=False,
    )
    requests = [
        EngineRequest(f"r{i}", tuple(range(10 * i, 10 * i + 4)), 2, arrival_s=t)
        for i, t in enumerate((0.0, 0.001, 0.5))
    ]
    spec = ClusterSpec([ReplicaSetup(cfg, FixedTiming(step_s=0.01))], concurrency=1)
    done = {r.request_id: r for r in simulate(requests, spec).requests}
    assert (done["r1"].arrival_s, done["r1"].finish_s) == pytest.approx((0.02, 0.04))
    assert (done["r2"].arrival_s, done["r2"].first_token_s) == pytest.approx((0.5, 0.51))
    assert done["r2"].finish_s == pytest.approx(0.52)


def test_cli_takes_rate_with_max_concurrency() -> None:
    args = ["--num-requests", "40", "--rate", "50", "--max-concurrency", "2", "--json"]
    out = CliRunner().invoke(sim, args)
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert summary["requests_completed"] == 40
    assert any("at most 2 in flight" in n for n in summary["notes"])
    assert "queue" not in summary  # the open-loop queue check is for uncapped arrivals
