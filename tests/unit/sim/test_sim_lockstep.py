"""A MoE model's data-parallel engines step in lockstep (:mod:`kvbudget.sim.lockstep`).

vLLM 0.32.0: ``v1/engine/core.py`` line 1473 runs a rank as ``DPEngineCoreProc`` only when
data parallel and ``model_config.is_moe``; its ``run_busy_loop`` (line 2328) steps every rank
each iteration, an idle one with ``execute_dummy_batch()`` (one 1-token uniform decode,
``v1/worker/gpu_worker.py`` line 1431) while the wave runs; ``_has_global_unfinished_reqs``
(line 2410) ends the wave only at the first step and every ``dp_sync_interval`` (16,
``config/parallel.py`` line 162) steps. The expert all-to-all needs every rank in each forward,
so an iteration lasts as long as the slowest rank's step.

Every expected time below is hand arithmetic on ``FixedTiming(step_s=0.01, per_token_s=0.001)``:
a step of ``t`` tokens costs ``0.01 + 0.001 t`` seconds (the dummy batch: 1 token, 0.011 s).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget.errors import ConfigError
from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.lifecycle import Crash
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.scenario import build_cluster, scenario_from_dict
from kvbudget.sim.timing import FixedTiming

from .helpers_sim import make_config, make_request

STEP = 0.011  # one decode token, and the dummy batch


def _run(requests: list[Any], *, lockstep: int, fast_path: bool = True) -> Any:
    setup = ReplicaSetup(
        make_config(), FixedTiming(step_s=0.01, per_token_s=0.001), fast_path=fast_path
    )
    spec = ClusterSpec(
        setups=[setup, setup],
        router="least_outstanding",
        lockstep_size=lockstep,
        record_token_times=True,
    )
    return simulate(requests, spec)


def _tpot(r: Any) -> float:
    return float((r.finish_s - r.first_token_s) / (r.output_tokens - 1))


def _by_id(result: Any) -> dict[str, Any]:
    return {r.request_id: r for r in result.requests}


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_group_step_lasts_the_slowest_members_and_stamps_every_members_tokens(
    fast_path: bool,
) -> None:
    """A (40-token prompt) on engine 0, B (8 tokens) on engine 1, both at t=0 (least
    outstanding: A to the lowest index, B to the empty engine). Step 1: A's prefill 0.050 s,
    B's 0.018 s: both first tokens at 0.050. Two decode steps of 0.011 s: both end at 0.072.
    On their own clocks B's first token is at 0.018 and it ends at 0.040."""
    reqs = [make_request("A", 40, 3), make_request("B", 8, 3)]
    lock = _by_id(_run(reqs, lockstep=2, fast_path=fast_path))
    assert lock["A"].replica == "replica-0" and lock["B"].replica == "replica-1"
    for rid in ("A", "B"):
        assert lock[rid].first_token_s == pytest.approx(0.050)
        assert lock[rid].finish_s == pytest.approx(0.072)
        assert lock[rid].token_times_s == pytest.approx((0.050, 0.061, 0.072))
    free = _by_id(_run(reqs, lockstep=1, fast_path=fast_path))
    assert free["B"].first_token_s == pytest.approx(0.018)
    assert free["B"].finish_s == pytest.approx(0.040)


@pytest.mark.parametrize("fast_path", [True, False])
def test_an_idle_engine_pays_the_dummy_step_and_a_busy_ones_tpot_is_the_max_step(
    fast_path: bool,
) -> None:
    """A (4-token prompt, 3 outputs) at t=0 on engine 0; B (60-token prompt, 1 output) at
    0.02 s goes to the empty engine 1.

    Step 1 (0.000): A prefills 4 tokens (0.014 s), engine 1 idle: dummy (0.011): 0.014 s.
    Step 2 (0.014): A decodes (0.011), engine 1 dummy (0.011): ends 0.025 (B arrived at 0.02).
    Step 3 (0.025): A decodes (0.011), B prefills 60 tokens (0.070): ends 0.095.
    A: tokens at 0.014, 0.025, 0.095, TPOT (0.095 - 0.014) / 2 = 0.0405 (0.011 on its own);
    B: TTFT 0.095 - 0.020 = 0.075. The wave: A is done after step 3; the next sync is step 16,
    so 13 more group steps of two dummies: 1 + 1 + 13 x 2 = 28 dummy engine steps."""
    reqs = [make_request("A", 4, 3), make_request("B", 60, 1, arrival_s=0.02)]
    result = _run(reqs, lockstep=2, fast_path=fast_path)
    got = _by_id(result)
    assert got["A"].token_times_s == pytest.approx((0.014, 0.025, 0.095))
    assert _tpot(got["A"]) == pytest.approx(0.0405)
    assert got["B"].replica == "replica-1"
    assert got["B"].first_token_s - got["B"].arrival_s == pytest.approx(0.075)
    assert result.lockstep == {
        "groups": 1,
        "engines_per_group": 2,
        "sync_interval_steps": 16,
        "group_steps": 16,
        "dummy_engine_steps": 28,
    }
    assert result.num_steps == 4  # real engine steps: A's 3, B's 1
    free = _by_id(_run(reqs, lockstep=1, fast_path=fast_path))
    assert _tpot(free["A"]) == pytest.approx(STEP)
    assert free["A"].token_times_s == pytest.approx((0.014, 0.025, 0.036))


def test_a_request_arriving_in_the_waves_tail_waits_for_the_dummy_step() -> None:
    """A (4 tokens, 1 output) ends in step 1 (0.014 s): the wave's first-step sync ends the
    wave at once (no engine has work). C arrives at 0.02: an idle group, it starts at once:
    prefill 4 tokens, first token at 0.034."""
    reqs = [make_request("A", 4, 1), make_request("C", 4, 1, arrival_s=0.02)]
    result = _run(reqs, lockstep=2)
    assert _by_id(result)["C"].first_token_s == pytest.approx(0.034)
    assert result.lockstep["group_steps"] == 2


def test_lockstep_refuses_lifecycle_events() -> None:
    setup = ReplicaSetup(make_config(), FixedTiming(), fast_path=False)
    spec = ClusterSpec(setups=[setup, setup], lockstep_size=2, crashes=[Crash(1.0, 0)])
    with pytest.raises(ConfigError, match=r"^crashes: not modelled for data-parallel"):
        simulate([make_request("A", 4, 1)], spec)


def _scenario(model: str, dp: int) -> Any:
    return scenario_from_dict(
        {
            "model": model,
            "gpu": "H100-SXM",
            "tp": 2,
            "max_model_len": 4096,
            "data_parallel_size": dp,
            "timing_model": "roofline",
        }
    )


def test_only_a_moe_models_engines_step_in_lockstep() -> None:
    """vLLM uses DPEngineCoreProc only for MoE models; a dense model's ranks are independent."""
    assert build_cluster(_scenario("Qwen/Qwen3-30B-A3B", 2)).lockstep_size == 2
    assert build_cluster(_scenario("meta-llama/Llama-3.1-8B", 2)).lockstep_size == 1
    assert build_cluster(_scenario("Qwen/Qwen3-30B-A3B", 1)).lockstep_size == 1


@pytest.mark.parametrize(
    ("model", "lockstep"), [("Qwen/Qwen3-30B-A3B", True), ("meta-llama/Llama-3.1-8B", False)]
)
def test_the_summary_says_whether_the_engines_step_in_lockstep(model: str, lockstep: bool) -> None:
    import json

    from click.testing import CliRunner

    from kvbudget.cli.main import cli

    args = ["sim", "--model", model, "--tp", "2", "--dp", "2", "--requests", "20"]
    args += ["--timing-model", "roofline", "--max-model-len", "4096", "--json"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert summary["timing_model"] == "roofline"
    note = next(n for n in summary["notes"] if n.startswith("data parallel 2"))
    if lockstep:
        assert "the engines step in lockstep" in note
        assert summary["lockstep"]["engines_per_group"] == 2
    else:
        assert "each engine steps on its own clock" in note
        assert "lockstep" not in summary


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_random_workloads_every_token_is_at_a_group_step_end_on_either_engine(
    seed: int,
) -> None:
    """Three engines, random prompts and cancellations on a small pool (preemptions): every
    output token's time is the end of a group step (the trace's step spans), and the fast path
    gives exactly what the explicit engine gives."""
    from .helpers_sim import random_workload

    reqs = random_workload(seed, 120)
    runs = []
    for fast in (True, False):
        setup = ReplicaSetup(
            make_config(num_gpu_blocks=40),
            FixedTiming(step_s=0.01, per_token_s=0.001),
            fast_path=fast,
        )
        spec = ClusterSpec(
            setups=[setup] * 3,
            router="least_outstanding",
            lockstep_size=3,
            record_token_times=True,
            trace=True,
        )
        runs.append(simulate(reqs, spec))
    fast_run, explicit_run = runs
    ends = {
        round((e["ts"] + e["dur"]) / 1e6, 9) for e in fast_run.trace_events if e["name"] == "step"
    }
    times = [t for r in fast_run.requests for t in r.token_times_s]
    assert times and all(round(t, 9) in ends for t in times)

    def key(run: Any) -> list[Any]:
        return [
            (r.request_id, r.replica, r.first_token_s, r.finish_s, r.token_times_s)
            for r in run.requests
        ]

    assert key(fast_run) == key(explicit_run)
    assert fast_run.lockstep == explicit_run.lockstep


def test_the_acceptance_target_steps_a_moe_deployment_in_lockstep() -> None:
    """``SimTarget`` (accept's sim target, ``kvbudget capacity``'s probe) with
    ``lockstep_size=2``: the first case's hand arithmetic, both first tokens at 0.050 s."""
    import numpy as np

    from kvbudget.accept.targets.base import TargetInfo
    from kvbudget.accept.targets.sim import SimTarget
    from kvbudget.workload.request import PlannedRequest

    target = SimTarget(
        make_config(),
        FixedTiming(step_s=0.01, per_token_s=0.001),
        np.random.default_rng(0),
        info=TargetInfo(kind="sim", source="simulated", label="test"),
        num_replicas=2,
        router="least_outstanding",
        lockstep_size=2,
    )
    reqs = [
        PlannedRequest(
            request_id=rid, arrival_s=0.0, prompt_token_ids=tuple(range(n)), output_tokens=3
        )
        for rid, n in (("A", 40), ("B", 8))
    ]
    run = target.run_cell(reqs, cell_id="c", closed_loop_concurrency=None, duration_s=None)
    got = {r.request_id: r for r in run.records}
    for rid in ("A", "B"):
        assert got[rid].first_token_s == pytest.approx(0.050)
        assert got[rid].token_times_s == pytest.approx([0.050, 0.061, 0.072])
    assert {got["A"].replica, got["B"].replica} == {"replica-0", "replica-1"}


def test_capacity_builds_a_moe_deployment_in_lockstep() -> None:
    from kvbudget.maxload.sim_probe import SimProbe
    from kvbudget.maxload.slo import parse_slo

    slo = parse_slo("ttft_p99<1s")
    for model, size in (("Qwen/Qwen3-30B-A3B", 2), ("meta-llama/Llama-3.1-8B", 1)):
        probe = SimProbe.from_scenario(_scenario(model, 2), slo, num_requests=10)
        target = probe.make_target(0)
        assert len(getattr(target, "groups", [])) == (1 if size == 2 else 0)
