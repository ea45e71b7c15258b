"""``kvbudget capacity --base-url`` against a live ``kvbudget serve`` (manual timing: one request
at a time, a fixed 50 ms step), driven over HTTP by kvbudget bench's load runner.

Real time on a shared machine, so the checks are structural (tests/integration/maxload/live.py:
both bracket bounds probed, the binding constraint named, /metrics read at each step, a broken
step stopped early, every request accounted) plus one bound by hand: one request at a time in a
50 ms step, so a closed loop of ``c`` users waits ``c`` steps in steady state, and
``ttft_p95<175ms`` cannot hold 4 users (4 x 50 ms = 200 ms). Also: the engine reports itself
(its figures stay simulated), and a request budget stops the search with what it found.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvbudget.accept.targets.base import TargetInfo
from kvbudget.accept.targets.http import ServeTarget
from kvbudget.cli.capacity import capacity
from kvbudget.cli.main import run_async
from kvbudget.errors import ConfigError
from tests.integration.maxload.live import check_search, run_capacity

pytestmark = pytest.mark.slow  # a live kvbudget serve in real time

WARMUP = 2
SEARCH = ["--input-tokens", "16", "--output-tokens", "1", "--num-requests", "20", "--seeds", "1"]
SEARCH += ["--rate-tolerance", "0.5", "--warmup-requests", str(WARMUP)]
# a probe stopped early lasts a fraction of a second here (50 ms steps): scrape fast enough to
# see the queue in it (the default 1 s suits real engines, which a fast scrape slows)
SEARCH += ["--scrape-interval", "0.05"]


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    target = ServeTarget(
        serve_args=["--step-ms", "50", "--max-num-seqs", "1"],
        model="md1",
        run_async=run_async,
        info=TargetInfo(kind="serve", source="simulated", label="test"),
    )
    try:
        yield target.base_url
    finally:
        target.close()


def test_search_on_kvbudget_serve(served: str) -> None:
    doc = run_capacity(served, "md1", *SEARCH, "--slo", "ttft_p95<175ms")
    assert doc["engine"] == "kvbudget-serve"
    assert doc["figures"] == "simulated"  # kvbudget serve is the simulator behind HTTP
    check_search(doc, warmup=WARMUP, kv_usage=True)
    assert doc["max_concurrency"] <= 3  # 4 users wait 4 x 50 ms = 200 ms > 175 ms
    # a step stopped early stopped at the request over 175 ms that settled its p95: the 2nd of a
    # 20-request probe (20 - floor(19 x 0.95) = 2), the 5th of an 80-request confirmation
    # (80 - floor(79 x 0.95) = 5), while the engine (one at a time) had others waiting
    need = {20: 2, 80: 5}
    for p in [p for p in doc["concurrency_points"] + doc["rate_points"] if p.get("stopped_early")]:
        n = p["num_requests"]
        assert p["stopped_early"] == f"ttft_p95: {need[n]} of {n} planned requests over 175 ms"
        assert p["num_waiting_max"] >= 1


def test_a_request_budget_stops_the_search_with_what_it_found(served: str) -> None:
    args = [*SEARCH, "--slo", "ttft_p95<175ms", "--max-total-requests", "60"]
    result = CliRunner().invoke(capacity, ["--base-url", served, "--model", "md1", *args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["stopped"] is not None and "request budget spent" in doc["stopped"]
    assert doc["num_requests_sent"] <= 60
    points = doc["concurrency_points"] + doc["rate_points"]
    assert doc["num_requests_sent"] == WARMUP + sum(p["num_sent"] for p in points)


def test_simulator_flags_are_refused_with_base_url(served: str) -> None:
    result = CliRunner().invoke(
        capacity,
        ["--base-url", served, "--model", "md1", "--gpu", "H100-SXM", "--slo", "ttft_p95<1s"],
    )
    assert isinstance(result.exception, ConfigError)
    assert "--gpu with --base-url" in str(result.exception)


def test_a_search_stopped_by_its_budget_resumes_from_its_probes(
    served: str, tmp_path: Path
) -> None:
    out = tmp_path / "cap"
    args = ["--base-url", served, "--model", "md1", "--metrics-url", served + "/metrics"]
    args += [*SEARCH, "--slo", "ttft_p95<175ms", "--json"]
    first = CliRunner().invoke(capacity, [*args, "--out", str(out), "--max-total-requests", "60"])
    assert first.exit_code == 0, first.output
    stopped = json.loads(first.output)
    assert stopped["stopped"] is not None and "request budget spent" in stopped["stopped"]
    kept = [json.loads(x) for x in (out / "probes.jsonl").read_text().splitlines()]
    assert len(kept) == len(stopped["concurrency_points"]) + len(stopped["rate_points"]) >= 1

    # the same search, a larger budget (budgets may change on resume): it goes on from there
    again = CliRunner().invoke(capacity, [*args, "--out", str(out), "--resume"])
    assert again.exit_code == 0, again.output
    doc = json.loads(again.output)
    assert doc["out"]["resumed"] is True and doc["out"]["probes_reused"] == len(kept)
    # the recorded probes are in the answer as they were measured, and the search finished
    reused = {(p["key"][0], p["key"][1]) for p in kept}
    for p in stopped["concurrency_points"]:
        assert ("concurrency", p["load"]) in reused and p in doc["concurrency_points"]
    check_search(doc, warmup=WARMUP, kv_usage=True)  # warm-up sent again, probes counted once
    assert doc["max_concurrency"] <= 3
    assert (
        json.loads((out / "capacity.json").read_text())["max_concurrency"] == doc["max_concurrency"]
    )
