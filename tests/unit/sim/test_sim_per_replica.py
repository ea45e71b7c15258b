"""Per-replica load rows and the routing comparison (numbers worked by hand)."""

from __future__ import annotations

import json
import subprocess
import sys

from kvbudget.sim.per_replica import imbalance, per_replica
from kvbudget.sim.replica import KVSample
from kvbudget.sim.request_result import RequestResult


def _r(
    rid: str, replica: str, prompt: int, *, preempt: int = 0, status: str = "finished"
) -> RequestResult:
    return RequestResult(
        request_id=rid,
        replica=replica,
        arrival_s=0.0,
        first_scheduled_s=0.0,
        first_token_s=0.1,
        finish_s=0.2,
        prompt_tokens=prompt,
        output_tokens=2,
        cached_tokens_by_tier={},
        preemptions=preempt,
        status=status,
        reason="length",
    )


def test_rows_by_hand() -> None:
    requests = [
        _r("a", "r0", 100),
        _r("b", "r0", 300, preempt=2),
        _r("c", "r1", 1000, status="unfinished"),
        _r("never-routed", "", 50, status="unfinished"),
    ]
    samples = [
        KVSample(0.0, "r0", 0.25, 1, 0),
        KVSample(1.0, "r0", 0.75, 2, 3),
        KVSample(0.0, "r1", 0.5, 1, 1),
    ]
    rows = {row.replica: row for row in per_replica(requests, samples)}
    assert set(rows) == {"r0", "r1"}
    r0 = rows["r0"]
    assert (r0.num_requests, r0.prompt_tokens_p50, r0.prompt_tokens_max) == (2, 200.0, 300)
    assert r0.prompt_tokens_p95 == 100 + 0.95 * 200  # numpy's linear interpolation: 290
    assert (r0.kv_usage_peak, r0.num_waiting_peak, r0.num_preemptions, r0.num_failed) == (
        0.75,
        3,
        2,
        0,
    )
    assert (rows["r1"].num_failed, rows["r1"].prompt_tokens_total) == (1, 1000)
    # totals 400 and 1000, mean 700: imbalance 1000 / 700
    assert imbalance(list(rows.values())) == 1000 / 700


def test_cli_compare_router_runs_both_policies_on_the_same_requests() -> None:
    proc = subprocess.run(
        [
            sys.executable, "-m", "kvbudget", "sim", "--replicas", "2", "--num-requests", "40",
            "--rate", "20", "--input-tokens", "256", "--output-tokens", "8",
            "--router", "least_outstanding", "--compare-router", "round_robin", "--json",
        ],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    section = json.loads(proc.stdout)["routing_comparison"]
    assert section["figures"] == "simulated"
    assert set(section["policies"]) == {"least_outstanding", "round_robin"}
    for data in section["policies"].values():
        assert sum(r["num_requests"] for r in data["replicas"]) == 40
    rr = section["policies"]["round_robin"]["replicas"]
    assert [r["num_requests"] for r in rr] == [20, 20]  # strict alternation


def test_cli_compare_router_refuses_an_unknown_or_same_policy() -> None:
    for other, needle in (("best", "not a router policy"), ("round_robin", "already --router")):
        proc = subprocess.run(
            [sys.executable, "-m", "kvbudget", "sim", "--num-requests", "5", "--compare-router", other],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 2
        assert needle in proc.stderr and proc.stderr.count("\n") == 1
