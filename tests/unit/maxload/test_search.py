"""The search, proved on engines whose answer is known in closed form.

1. A synthetic probe that passes exactly up to a threshold: the bracket and bisection end with
   the threshold between the last passing and the first failing load, within the tolerance.
2. A simulated M/D/1 queue: one replica, ``max_num_seqs = 1``, a fixed step of ``D = 0.1 s``
   (``FixedTiming``, no per-token cost), requests of 16 prompt tokens and one output token, so
   each request is served in one step of exactly ``D`` (its first token is its last) and the
   service rate is ``mu = 1 / D = 10 requests/s``:

   * closed loop at concurrency ``c``: every request waits for the ``c - 1`` ahead of it and
     its own step, TTFT = ``c * D``; under ``ttft_p95 < 0.35 s`` the highest concurrency is
     ``floor(0.35 / 0.1) = 3``;
   * Poisson arrivals at rate ``lambda`` (M/D/1, ``rho = lambda * D``): mean wait
     ``W_q = rho * D / (2 * (1 - rho))`` (Pollaczek-Khinchine), so mean TTFT
     ``D + W_q <= 0.15 s`` holds up to ``rho = 0.5``: ``lambda = 5 requests/s``;
   * with a loose SLO only the queue limits: the highest sustainable rate is ``mu = 10``;
     a rate of ``2 * mu`` is refused for queue growth although its p95 is within the SLO.
"""

from __future__ import annotations

import pytest

from kvbudget.maxload.point import QUEUE_GROWTH, LoadKind, Point
from kvbudget.maxload.probe import Budget, BudgetSpent
from kvbudget.maxload.run import find_capacity
from kvbudget.maxload.search import Probe, search
from kvbudget.maxload.sim_probe import SimProbe
from kvbudget.maxload.slo import parse_slo
from kvbudget.metrics.stability import MIN_SLOPE
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.timing import FixedTiming
from tests.unit.md1 import md1_replica_config

STEP_S = 0.1
MU_PER_S = 1 / STEP_S


def _threshold_probe(threshold: float, calls: list[float]) -> Probe:
    def probe(kind: LoadKind, load: float, seed: int) -> Point:
        calls.append(load)
        over = load > threshold
        return Point(
            kind=kind,
            load=load,
            seed=seed,
            values={"ttft_p95_s": 2.0 if over else 0.5},
            goodput_fraction=None,
            num_requests=100,
            num_ok=100,
            num_preemptions=0,
            requests_per_s=load,
            failing=("ttft_p95",) if over else (),
        )

    return probe


@pytest.mark.parametrize("start", [0.3, 7.3, 50.0])
def test_rate_search_brackets_then_bisects_to_the_tolerance(start: float) -> None:
    calls: list[float] = []
    out = search(_threshold_probe(7.3, calls), "rate", start=start, seed=0, tolerance=0.05)
    assert out.passing is not None and out.failing is not None
    lo, hi = out.passing.load, out.failing.load
    assert lo <= 7.3 < hi
    assert hi - lo <= 0.05 * hi
    assert out.binding_constraint == "ttft_p95"
    assert len(calls) == len(set(calls)) <= 14  # no load probed twice; bracket + bisection


def test_concurrency_search_ends_on_adjacent_integers() -> None:
    calls: list[float] = []
    out = search(_threshold_probe(37, calls), "concurrency", start=1, seed=0)
    assert out.answer == 37
    assert out.failing is not None and out.failing.load == 38
    assert all(c == int(c) for c in calls)


def test_a_spent_budget_stops_the_search_and_keeps_what_it_found() -> None:
    calls: list[float] = []
    budget = Budget(max_requests=500)
    inner = _threshold_probe(7.3, calls)

    def probe(kind: LoadKind, load: float, seed: int) -> Point:
        budget.charge(100)
        return inner(kind, load, seed)

    out = search(probe, "rate", start=1.0, seed=0, tolerance=0.05)
    assert len(calls) == 5  # 1, 2, 4, 8 fails, 6 passes; the sixth probe would pass 500
    assert out.stopped is not None and "request budget spent" in out.stopped
    assert out.answer == 6.0 and out.failing is not None and out.failing.load == 8.0


def test_nothing_passes_and_everything_passes() -> None:
    none = search(_threshold_probe(0.5, []), "concurrency", start=1, seed=0)
    assert none.answer is None and none.failing is not None and none.failing.load == 1
    capped = search(_threshold_probe(1e9, []), "concurrency", start=1, seed=0, ceiling=50)
    assert capped.answer == 50 and capped.failing is None and capped.binding_constraint is None


def _md1(slo: str, num_requests: int) -> SimProbe:
    config = md1_replica_config()
    setup = ReplicaSetup(config=config, timing=FixedTiming(step_s=STEP_S))
    workload = {
        "input_tokens": {"kind": "fixed", "value": 16},
        "output_tokens": {"kind": "fixed", "value": 1},
    }
    return SimProbe(setup, workload, parse_slo(slo), num_requests=num_requests)


def test_md1_closed_loop_ttft_is_c_steps_and_max_concurrency_is_3() -> None:
    probe = _md1("ttft_p95<350ms", 200)
    for c in (1, 2, 3, 4):
        assert probe("concurrency", c, 0).values["ttft_p95_s"] == pytest.approx(c * STEP_S)
    out = search(probe, "concurrency", start=1, seed=0, ceiling=200)
    assert out.answer == 3
    assert out.binding_constraint == "ttft_p95"


def test_md1_mean_ttft_slo_gives_half_the_service_rate() -> None:
    # D + rho * D / (2 (1 - rho)) = 0.15 s  <=>  rho = 0.5  <=>  lambda = 5 requests/s
    probe = _md1("ttft_mean<150ms", 3000)
    out = search(probe, "rate", start=MU_PER_S, seed=0, tolerance=0.05)
    assert out.answer is not None
    assert 0.9 * 5.0 <= out.answer <= 1.1 * 5.0
    assert out.binding_constraint == "ttft_mean"


def test_md1_rate_over_the_service_rate_is_refused_for_queue_growth() -> None:
    probe = _md1("ttft_p95<1000s", 200)
    point = probe("rate", 2 * MU_PER_S, 0)
    assert point.failing == ()  # every percentile is within the (loose) SLO ...
    assert not point.meets_slo  # ... but the queue grows: not sustainable
    assert point.queue is not None
    # the service rate the growth implies is mu (offered / (1 + slope))
    assert point.queue.served_per_s == pytest.approx(MU_PER_S, rel=0.1)


def test_md1_loose_slo_is_bound_by_the_service_rate() -> None:
    # the queue check tolerates a drift up to MIN_SLOPE (5 %) above mu; the answer is a rate
    # that passed, so within [mu (1 - tolerance), mu (1 + MIN_SLOPE)]
    probe = _md1("ttft_p95<1000s", 200)
    out = search(probe, "rate", start=MU_PER_S, seed=0, tolerance=0.05, confirm=probe.longer(10))
    assert out.answer is not None
    assert MU_PER_S * 0.95 <= out.answer <= MU_PER_S * (1 + MIN_SLOPE)
    assert out.binding_constraint == QUEUE_GROWTH
    assert out.confirmed


def test_find_capacity_states_both_answers_and_the_spread_over_seeds() -> None:
    probe = _md1("ttft_p95<350ms", 200)
    cap = find_capacity(
        probe,
        probe.slo,
        saturation_concurrency=1,
        num_requests=200,
        seeds=(0, 1, 2),
        confirm=probe.longer(4),
    )
    doc = cap.to_dict()
    assert doc["max_concurrency"] == 3  # deterministic service: every seed gives 3
    assert doc["max_concurrency_across_seeds"]["values"] == [3.0, 3.0, 3.0]
    spread = doc["max_rate_per_s_across_seeds"]
    assert spread["min"] <= doc["max_rate_per_s"] <= spread["max"]
    assert spread["seeds"] == [0, 1, 2]
    # a TTFT p95 of 0.35 s = 3.5 steps is an M/D/1 waiting-time bound below mu
    assert doc["max_rate_per_s"] < MU_PER_S
    assert doc["estimate"]["requests_per_s"] == pytest.approx(MU_PER_S)


def test_a_probe_whose_arrivals_outlast_the_time_left_is_not_started() -> None:
    import time

    budget = Budget(max_duration_s=100.0, started_s=time.monotonic() - 90.0)  # 10 s left
    budget.charge(20, arrivals_s=5.0)  # 20 requests at 4/s: 5 s, fits
    with pytest.raises(BudgetSpent, match=r"arrivals last about 20 s, more than the 10 s left"):
        budget.charge(20, arrivals_s=20.0)  # 20 requests at 1/s: 20 s
    assert budget.num_requests == 20  # the refused probe was not charged
