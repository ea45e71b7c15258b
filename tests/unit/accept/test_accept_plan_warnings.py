"""Plan warnings: a gated percentile a cell cannot reach, quality a target cannot judge, and a
cell cut short by max_requests_per_cell saying so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvbudget.accept.cells import cut_short_note
from kvbudget.accept.judge.plan_warnings import max_samples, plan_warnings
from kvbudget.accept.plan.planfile import AcceptPlan, parse_plan
from kvbudget.accept.targets.base import CellRun
from kvbudget.records import RequestRecord

REPO = Path(__file__).resolve().parents[3]


def _plan(**load: Any) -> AcceptPlan:
    data = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    data["load"].update(load)
    data["quality"] = []
    return parse_plan(data)


def test_sample_bound_by_hand() -> None:
    plan = _plan(repetitions=2, max_requests_per_cell=120, cancel_fraction=0.05)
    # closed loop: 2 x 120 x 0.95 = 228
    assert max_samples(plan, "peak") == 228
    plan = _plan(repetitions=1, max_requests_per_cell=500, cancel_fraction=0.0)
    # poisson 4/s for 30 s: at most 120 arrivals, whatever the cap
    assert max_samples(plan, "normal") == 120


def test_p95_out_of_reach_is_warned_per_concurrency_tier() -> None:
    lines = plan_warnings(_plan(repetitions=1, max_requests_per_cell=100, cancel_fraction=0.0))
    assert len(lines) == 3
    assert lines[0].startswith("load.concurrency.single: at most 100 samples per cell")
    assert "ttft_s p95, tpot_s p95 needs >= 200" in lines[0]
    assert "ttft_s p50" not in lines[0]  # p50 needs 20: reachable
    assert plan_warnings(_plan(repetitions=2, max_requests_per_cell=120)) == []


def test_quality_on_the_simulator_is_warned() -> None:
    data = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    data["quality"] = [{"id": "cap", "kind": "exact", "expected": "Paris"}]
    lines = plan_warnings(parse_plan(data))
    assert any(line.startswith("quality: checkpoints (cap) cannot be judged") for line in lines)


def _run(num: int, duration_s: float) -> CellRun:
    recs = [RequestRecord(request_id=f"r{i}", source="simulated", status="ok") for i in range(num)]
    return CellRun(records=recs, duration_s=duration_s)


def test_a_cell_cut_short_says_so() -> None:
    plan = _plan(max_requests_per_cell=120)
    note = cut_short_note(plan, "peak", [_run(120, 3.6)])
    assert note == (
        "cut short by load.max_requests_per_cell (120 per repetition): ran 3.6 s of the "
        "declared 15 s"
    )
    assert cut_short_note(plan, "peak", [_run(120, 14.0)]) is None  # ran its duration
    assert cut_short_note(plan, "peak", [_run(80, 3.6)]) is None  # the cap did not end it
