"""run_acceptance judges the unstable-queue anomalies and the all-failed line from the run's
own records, with no OUT directory to re-read (issue 33 step 5).

The fake target's numbers are the D/D/1 queue of test_accept_unstable_queue.py: arrivals every
0.1 s (10/s offered) served one per 0.2 s (5/s), so request i's TTFT is 0.2 (i + 1) - 0.1 i.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import yaml

from kvbudget.accept.acceptance import run_acceptance
from kvbudget.accept.plan.planfile import AcceptPlan, parse_plan
from kvbudget.accept.result import Ledger
from kvbudget.accept.targets.base import CellRun, PreparedTarget, TargetInfo
from kvbudget.records import RequestRecord
from kvbudget.workload.request import PlannedRequest

REPO = Path(__file__).resolve().parents[3]


class QueueTarget:
    """``ok``: open-loop cells queue up (TTFT grows), closed-loop ones keep up;
    ``error``: every request answers HTTP 500."""

    def __init__(self, mode: Literal["ok", "error"]) -> None:
        self.mode = mode
        self.num_timed = 0

    @property
    def info(self) -> TargetInfo:
        return TargetInfo(kind="fake", source="measured", label="fake", engine="fake")

    def idle_baseline(self) -> dict[str, float]:
        return {"kv_usage": 0.0, "num_running": 0.0}

    def close(self) -> None:
        return None

    def run_cell(
        self,
        requests: Sequence[PlannedRequest],
        *,
        cell_id: str,
        closed_loop_concurrency: int | None,
        duration_s: float | None,
        warmup: bool = False,
    ) -> CellRun:
        open_loop = closed_loop_concurrency is None and not warmup
        records = []
        for i, r in enumerate(requests):
            t = i / 10.0
            ttft = 0.2 * (i + 1) - t if open_loop else 0.05
            failed = self.mode == "error"
            records.append(
                RequestRecord(
                    request_id=r.request_id, source="measured", cell_id=cell_id, warmup=warmup,
                    status="error" if failed else "ok",
                    error_kind="http_status" if failed else None,
                    http_status=500 if failed else None,
                    error_excerpt="boom" if failed else None,
                    scheduled_s=t if open_loop else None, sent_s=t,
                    first_token_s=None if failed else t + ttft,
                    ttft_s=None if failed else ttft, done_s=t + ttft + 0.3,
                    output_tokens=0 if failed else 4, tpot_s=None if failed else 0.1,
                    e2e_s=ttft + 0.3, prompt_tokens=r.prompt_tokens,
                )
            )  # fmt: skip
        self.num_timed += 0 if warmup else len(records)
        return CellRun(records=records, duration_s=1.0)


def _plan() -> AcceptPlan:
    data = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    data["load"].update(repetitions=1, max_requests_per_cell=60, shared_prefix={"tokens": 0})
    data["load"]["cancel_fraction"] = 0.0
    data["load"]["warmup"] = {"requests": 1, "input_tokens": 8, "output_tokens": 2}
    for tier in data["load"]["tiers"].values():
        tier.update(min_tokens=8, max_tokens=16, output_tokens=4)
    data.update(comparisons=[], audits={"isolation": False, "reuse": False})
    return parse_plan(data)


def test_open_loop_queues_are_flagged_without_an_out_directory() -> None:
    plan = _plan()
    # the demo's one open-loop tier is 'normal' (poisson); 'single' and 'peak' are closed
    assert [n for n, t in plan.load.concurrency.items() if t.arrival != "closed"] == ["normal"]
    target = QueueTarget("ok")
    doc = run_acceptance(
        plan, lambda lock: PreparedTarget(target=target, ledger=Ledger()), out_dir=None
    )
    queues = [a for a in doc.anomalies if a.code == "unstable_queue"]
    assert [a.cells for a in queues] == [["long/normal"], ["medium/normal"], ["short/normal"]]
    assert queues[0].title == "Unstable queue in long/normal#0"
    assert all("about 5/s" in a.evidence for a in queues)
    assert doc.run_failure is None
    assert not any(r.startswith("the run failed") for r in doc.verdict_reasons)


def test_a_run_whose_every_request_failed_says_so_first() -> None:
    target = QueueTarget("error")
    doc = run_acceptance(
        _plan(), lambda lock: PreparedTarget(target=target, ledger=Ledger()), out_dir=None
    )
    n = target.num_timed
    assert n > 0
    line = (
        f"all {n} requests failed (HTTP 500 x{n}); first HTTP 500 from the simulator "
        "(target.kind sim): boom; see the server's message"
    )
    assert doc.run_failure == line
    assert doc.verdict_reasons[0] == f"the run failed: {line}"
    assert "run_failure" not in doc.model_dump_json()
