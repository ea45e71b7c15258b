"""``stop.search_highest_load`` with the rate (``search_highest_load_by: rate``, or ``auto`` with
an open-loop tier): kvbudget capacity's rate search per input tier, on the acceptance's simulated
target built as an M/D/1 queue whose answers are known in closed form.

The engine: one replica, ``max_num_seqs = 1``, a fixed step of ``D = 0.1 s`` (``FixedTiming``),
prompts of exactly 16 tokens and one output token, so each request is served in one step of
exactly ``D`` and the service rate is ``mu = 1 / D = 10 requests/s`` (as in
tests/unit/maxload/test_search.py):

* closed loop at ``c``: TTFT = ``c * D``; under ``ttft_p95 < 0.35 s`` the highest concurrency is
  ``floor(0.35 / 0.1) = 3``; every closed-loop probe completes ``mu = 10`` requests/s, where the
  rate search starts;
* Poisson arrivals at ``lambda`` (M/D/1, ``rho = lambda D``): the waiting time's distribution is
  Erlang's (1909) ``P(W <= t) = (1 - rho) sum_{k=0}^{floor(t/D)} (lambda (k D - t))^k / k!
  exp(-lambda (k D - t))``; TTFT = W + D, so ``ttft_p95 < 0.35 s`` holds while
  ``P(W <= 0.25 s) >= 0.95``: ``lambda* = 5.62 requests/s`` (solved below from that formula);
* with a loose SLO only the queue limits: the highest sustainable rate is ``mu``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kvbudget.accept.highest_load import highest_loads, searches_rate
from kvbudget.accept.plan.planfile import AcceptPlan, parse_plan
from kvbudget.accept.targets.base import TargetInfo
from kvbudget.accept.targets.sim import SimTarget
from kvbudget.maxload.point import QUEUE_GROWTH
from kvbudget.metrics.stability import MIN_SLOPE
from kvbudget.report.summary import highest_load_text
from kvbudget.sim.timing import FixedTiming
from tests.unit.md1 import md1_replica_config

REPO = Path(__file__).resolve().parents[3]
STEP_S = 0.1
MU_PER_S = 1 / STEP_S
REQUESTS = 1000


def _md1_wait_cdf(rate_per_s: float, t_s: float) -> float:
    """Erlang's M/D/1 waiting-time distribution (service time STEP_S)."""
    rho = rate_per_s * STEP_S
    return (1 - rho) * sum(
        (rate_per_s * (k * STEP_S - t_s)) ** k
        / math.factorial(k)
        * math.exp(-rate_per_s * (k * STEP_S - t_s))
        for k in range(math.floor(t_s / STEP_S + 1e-12) + 1)
    )


def _lambda_star(ttft_ceiling_s: float, q: float) -> float:
    lo, hi = 0.0, MU_PER_S * (1 - 1e-9)
    for _ in range(100):  # P(W <= t) falls as the rate rises
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _md1_wait_cdf(mid, ttft_ceiling_s - STEP_S) >= q else (lo, mid)
    return lo


def _plan(by: str = "rate", p95_s: float = 0.35, **concurrency: Any) -> AcceptPlan:
    data = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    data["load"]["max_requests_per_cell"] = REQUESTS
    data["load"]["shared_prefix"] = {"tokens": 0}
    data["load"]["tiers"] = {
        "short": {**data["load"]["tiers"]["short"], "min_tokens": 16, "max_tokens": 16}
    }
    data["load"]["tiers"]["short"]["output_tokens"] = 1
    data["load"]["concurrency"].update(concurrency)
    data["stop"] = {
        "ttft_s": {"p95": p95_s},
        "search_highest_load": True,
        "search_highest_load_by": by,
    }
    data["comparisons"] = []
    return parse_plan(data)


def _md1_target() -> SimTarget:
    config = md1_replica_config()
    return SimTarget(
        config,
        FixedTiming(step_s=STEP_S),
        np.random.default_rng(0),
        info=TargetInfo(kind="sim", source="simulated", label="M/D/1"),
        hash_prompts=False,
    )


def test_the_erlang_formula_gives_the_rate_by_hand() -> None:
    # lambda = 5, t = 0.25 s (rho = 0.5; k = 0, 1, 2 with lambda (k D - t) = -1.25, -0.75,
    # -0.25): (1 - 0.5) (e^1.25 - 0.75 e^0.75 + 0.25^2 / 2 e^0.25)
    # = 0.5 (3.49034 - 1.58775 + 0.04013) = 0.97136
    assert _md1_wait_cdf(5.0, 0.25) == pytest.approx(0.97136, abs=1e-5)
    # no wait at all below one step's worth of lateness: P(W <= 0) = 1 - rho
    assert _md1_wait_cdf(5.0, 0.0) == pytest.approx(0.5)
    assert _lambda_star(0.35, 0.95) == pytest.approx(5.62, abs=0.01)


def test_highest_rate_and_concurrency_of_an_md1_queue() -> None:
    found = highest_loads(_plan(), _md1_target(), [], figures="simulated")
    short = found["short"]
    assert set(found) == {"short"}  # the one declared input tier
    # concurrency: 3 x 0.1 s = 0.3 s holds, 4 x 0.1 s = 0.4 s fails
    assert (short["max_concurrency"], short["failing_concurrency"]) == (3, 4)
    assert short["highest_concurrency"] == 3
    # the rate search starts at what the closed-loop probes completed: mu
    assert short["rate_start_per_s"] == pytest.approx(MU_PER_S, rel=1e-6)
    # within 10 % of Erlang's answer (1000-request probes: a sampled p95; bisected to 5 %)
    expected = _lambda_star(0.35, 0.95)
    assert short["max_rate_per_s"] == pytest.approx(expected, rel=0.10)
    assert short["binding_constraint_rate"] == "ttft_p95"
    assert short["max_rate_confirmed"]
    # bisected until the bracket is within 5 % of its upper end
    lo, hi = short["max_rate_per_s"], short["failing_rate_per_s"]
    assert lo < hi and hi - lo <= 0.05 * hi
    # the answer was probed, confirmed by a run 4 x longer, and met the stop conditions there
    confirm = [
        p
        for p in short["rate_probes"]
        if p["rate_per_s"] == short["max_rate_per_s"] and p["requests"] == 4 * REQUESTS
    ]
    assert confirm and confirm[0]["meets"] and confirm[0]["stable"]
    assert highest_load_text(short).startswith(
        "highest load within the stop conditions (searched, simulated): 3 concurrent; "
        f"4 fails on ttft_p95; {short['max_rate_per_s']:.3g} req/s Poisson (confirmed over "
        f"{4 * REQUESTS} requests); {short['failing_rate_per_s']:.3g} req/s fails on ttft_p95"
    )


def test_a_loose_slo_is_bound_by_the_service_rate() -> None:
    # every TTFT is far under 1000 s: only the queue limits the rate, at mu; the queue check
    # tolerates a drift up to MIN_SLOPE above mu, and the answer passed, so it lies within
    # [mu (1 - tolerance), mu (1 + MIN_SLOPE)]
    found = highest_loads(_plan(p95_s=1000.0), _md1_target(), [], figures="simulated")
    short = found["short"]
    assert MU_PER_S * 0.95 <= short["max_rate_per_s"] <= MU_PER_S * (1 + MIN_SLOPE)
    assert short["binding_constraint_rate"] == QUEUE_GROWTH
    # a closed loop never queues beyond its clients: every concurrency up to the cap holds
    assert short["max_concurrency"] == REQUESTS and short["failing_concurrency"] is None


def test_which_plans_search_the_rate() -> None:
    closed = {"arrival": "closed", "concurrency": 16, "duration_s": 30}
    # the demo's normal tier is Poisson: auto asks for the rate
    assert searches_rate(_plan(by="auto"))
    assert not searches_rate(_plan(by="auto", normal=closed))
    assert not searches_rate(_plan(by="concurrency"))
    assert searches_rate(_plan(by="rate", normal=closed))
    concurrency_only = highest_loads(
        _plan(by="concurrency", p95_s=0.35), _md1_target(), [], figures="simulated"
    )
    assert "max_rate_per_s" not in concurrency_only["short"]
    assert concurrency_only["short"]["max_concurrency"] == 3


def test_a_bad_search_kind_is_one_line() -> None:
    from kvbudget.errors import KvbudgetError

    with pytest.raises(KvbudgetError) as info:
        _plan(by="throughput")
    line = str(info.value)
    assert "\n" not in line and "search_highest_load_by" in line and "'rate'" in line


def test_too_few_requests_per_probe_leave_the_rate_unsearched() -> None:
    plan = _plan()
    plan = plan.model_copy(
        update={"load": plan.load.model_copy(update={"max_requests_per_cell": 19})}
    )
    short = highest_loads(plan, _md1_target(), [], figures="simulated")["short"]
    assert short["max_rate_per_s"] is None and "rate_probes" not in short
    assert short["rate_not_searched"] == (
        "load.max_requests_per_cell 19 is under the 20 requests a probe needs to tell a "
        "growing queue; raise it to search the rate"
    )
    assert highest_load_text(short).endswith(
        "; rate not searched (load.max_requests_per_cell 19 is under the 20 requests a probe "
        "needs to tell a growing queue; raise it to search the rate)"
    )
