"""``kvbudget capacity --base-url`` against a live ``kvbudget serve`` (manual timing: one request
at a time, a fixed 20 ms step), driven over HTTP by kvbudget bench's load runner.

Real time on a shared machine, so the checks are structural and about the budget, not the
exact answer: the engine reports itself (its figures stay simulated), every probe carries the
engine's figures read from /metrics, warm-up requests are sent and not judged, and a request
budget stops the search with what it found.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from kvbudget.accept.http_target import ServeTarget
from kvbudget.accept.targets import TargetInfo
from kvbudget.cli.capacity import capacity
from kvbudget.cli.main import run_async
from kvbudget.errors import ConfigError

pytestmark = pytest.mark.slow  # a live kvbudget serve in real time


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    target = ServeTarget(
        serve_args=["--step-ms", "20", "--max-num-seqs", "1"],
        model="md1",
        run_async=run_async,
        info=TargetInfo(kind="serve", source="simulated", label="test"),
    )
    try:
        yield target.base_url
    finally:
        target.close()


def test_search_on_kvbudget_serve_within_a_request_budget(served: str) -> None:
    args = [
        "--base-url",
        served,
        "--metrics-url",
        f"{served}/metrics",
        "--model",
        "md1",
        "--input-tokens",
        "16",
        "--output-tokens",
        "1",
        "--num-requests",
        "20",
        "--seeds",
        "1",
        "--rate-tolerance",
        "0.5",
        "--warmup-requests",
        "2",
        "--max-total-requests",
        "200",
        "--slo",
        "ttft_p95<250ms",
        "--json",
    ]
    result = CliRunner().invoke(capacity, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["engine"] == "kvbudget-serve"
    assert doc["figures"] == "simulated"  # kvbudget serve is the simulator behind HTTP
    # 2 warm-up requests, then probes of 20 (and 80 for the confirmation) within 200; a probe
    # stopped early (its SLO already broken) sent fewer and was charged only those
    points = doc["concurrency_points"] + doc["rate_points"]
    assert points
    assert doc["num_requests_sent"] <= 200
    assert doc["num_requests_sent"] == 2 + sum(p["num_sent"] for p in points)
    for p in points:
        assert p["num_sent"] == p["num_requests"] or "stopped_early" in p, p
    assert all("num_waiting_max" in p and "kv_usage_max" in p for p in points)
    assert all(p["num_requests"] in (20, 80) for p in points)
    if doc["stopped"] is not None:
        assert "request budget spent" in doc["stopped"]
    # an answer the longer run did not confirm only when the budget stopped the search
    assert doc["max_rate_confirmed"] or doc["stopped"] is not None
    # one request at a time in a 20 ms step: a closed loop of c users waits about c steps, so
    # a TTFT p95 under 250 ms cannot hold 13 or more users (13 x 20 ms = 260 ms)
    if doc["max_concurrency"] is not None:
        assert doc["max_concurrency"] <= 12


def test_simulator_flags_are_refused_with_base_url(served: str) -> None:
    result = CliRunner().invoke(
        capacity,
        ["--base-url", served, "--model", "md1", "--gpu", "H100-SXM", "--slo", "ttft_p95<1s"],
    )
    assert isinstance(result.exception, ConfigError)
    assert "--gpu with --base-url" in str(result.exception)
