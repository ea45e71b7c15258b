"""The matrix runner with a scripted fake target: row stop on capacity error, baseline
recovery, JSONL written as it goes, resume."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kvbudget.accept.plan.planfile import AcceptPlan, parse_plan
from kvbudget.accept.run import run_matrix
from kvbudget.accept.targets.base import CellRun, TargetInfo
from kvbudget.records import RequestRecord, read_jsonl_dicts
from kvbudget.workload.request import PlannedRequest

REPO = Path(__file__).resolve().parents[3]


def small_plan(**load: Any) -> AcceptPlan:
    data = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    data["quality"] = [
        {"id": "capital-exact", "kind": "exact", "expected": "Paris", "tiers": ["short"]}
    ]
    data["load"]["repetitions"] = 2
    data["load"]["max_requests_per_cell"] = 6
    data["load"]["warmup"] = {"requests": 2, "input_tokens": 16, "output_tokens": 4}
    data["load"]["shared_prefix"] = {"tokens": 0}
    for tier in data["load"]["tiers"].values():
        tier.update(min_tokens=16, max_tokens=32, output_tokens=4)
    data["load"].update(load)
    data["comparisons"] = []
    return parse_plan(data)


class FakeTarget:
    """Every request takes 0.1 s TTFT; cells listed in ``capacity_fail`` hit a capacity error."""

    def __init__(
        self, capacity_fail: set[str] = frozenset(), stuck_after_fail: bool = False
    ) -> None:  # type: ignore[assignment]
        self.calls: list[str] = []
        self.capacity_fail = capacity_fail
        self.stuck = False
        self.stuck_after_fail = stuck_after_fail

    @property
    def info(self) -> TargetInfo:
        return TargetInfo(
            kind="fake",
            source="measured",
            label="fake",
            engine="fake",
            observed={"model.id": ("meta-llama/Llama-3.1-8B", "/v1/models root")},
        )

    def idle_baseline(self) -> dict[str, float]:
        return {"kv_usage": 0.5 if self.stuck else 0.0, "num_running": 0.0}

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
        self.calls.append(cell_id)
        records = [
            RequestRecord(
                request_id=r.request_id,
                source="measured",
                status="ok",
                cell_id=cell_id,
                warmup=warmup,
                sent_s=0.0,
                first_token_s=0.1,
                done_s=0.4,
                output_tokens=4,
                ttft_s=0.1,
                tpot_s=0.1,
                e2e_s=0.4,
                prompt_tokens=r.prompt_tokens,
            )
            for r in requests
        ]
        error = None
        if cell_id in self.capacity_fail:
            error = "request needs 900 blocks, pool has 800"
            if self.stuck_after_fail:
                self.stuck = True
        outputs = {r.request_id: "Paris" for r in requests if "/quality:" in r.request_id}
        return CellRun(records=records, duration_s=1.0, capacity_error=error, outputs=outputs)


def by_id(outcome: Any) -> dict[str, Any]:
    return {c.cell_id: c for c in outcome.cells}


def test_capacity_error_stops_the_row_without_retry(tmp_path: Path) -> None:
    plan = small_plan()
    target = FakeTarget(capacity_fail={"long/normal"})
    out = run_matrix(plan, target, out_dir=tmp_path, rng=np.random.default_rng(0))
    cells = by_id(out)
    assert len(out.cells) == 9
    # the failing cell ran once (no second repetition, no retry); the peak cell never ran
    assert target.calls.count("long/normal") == 1
    assert "long/peak" not in target.calls
    assert target.calls.count("long/single") == 2
    assert cells["long/normal"].verdict == "fail"
    assert "capacity error" in cells["long/normal"].reasons[0]
    peak = cells["long/peak"]
    assert peak.verdict == "untested"
    assert "'normal'" in peak.reasons[0] and "last passing tier kept" in peak.reasons[0]
    # other rows are untouched
    assert target.calls.count("short/peak") == 2
    reps = cells["short/peak"].per_repetition
    assert len(reps) == 2 and all(r["ttft_p95_s"] == pytest.approx(0.1) for r in reps)
    assert sum(r["n"] or 0 for r in reps) == cells["short/peak"].num_ok


def test_failed_cell_without_baseline_recovery_halts_the_run(tmp_path: Path) -> None:
    plan = small_plan()
    target = FakeTarget(capacity_fail={"short/single"}, stuck_after_fail=True)
    out = run_matrix(plan, target, out_dir=tmp_path, rng=np.random.default_rng(0))
    assert target.calls == ["warmup", "short/single"]
    later = [c for c in out.cells if c.cell_id != "short/single"]
    assert all(c.verdict == "untested" for c in later)
    assert all("did not recover" in c.reasons[0] for c in later)


def test_results_written_as_they_come_and_resume_skips_done_work(tmp_path: Path) -> None:
    plan = small_plan()
    first = FakeTarget()
    out1 = run_matrix(plan, first, out_dir=tmp_path, rng=np.random.default_rng(0))
    progress = read_jsonl_dicts(tmp_path / "progress.jsonl").items
    records = read_jsonl_dicts(tmp_path / "records.jsonl").items
    assert len(progress) == 18  # nine cells x two repetitions
    assert sum(1 for r in records if not r["warmup"]) == sum(c.num_requests for c in out1.cells)
    second = FakeTarget()
    out2 = run_matrix(plan, second, out_dir=tmp_path, resume=True, rng=np.random.default_rng(0))
    assert second.calls == ["warmup"]
    assert [c.num_requests for c in out2.cells] == [c.num_requests for c in out1.cells]
    assert [c.verdict for c in out2.cells] == [c.verdict for c in out1.cells]
    # a fresh run (no resume) into the same folder starts the files over
    run_matrix(plan, FakeTarget(), out_dir=tmp_path, rng=np.random.default_rng(0))
    assert len(read_jsonl_dicts(tmp_path / "progress.jsonl").items) == 18


def test_cells_run_in_declared_order(tmp_path: Path) -> None:
    plan = small_plan(order=["long/peak", "short/single"], repetitions=1)
    target = FakeTarget()
    run_matrix(plan, target, out_dir=None, rng=np.random.default_rng(0))
    assert target.calls[:3] == ["warmup", "long/peak", "short/single"]
    assert len(target.calls) == 10


def test_quality_outputs_shown_only_when_kept() -> None:
    from kvbudget.accept.cells import summarize_cell

    plan = small_plan()
    rec = RequestRecord(
        request_id="short/single#0/quality:capital-exact",
        source="measured",
        status="ok",
        cell_id="short/single",
        sent_s=0.0,
        first_token_s=0.1,
        done_s=0.3,
        output_tokens=3,
        ttft_s=0.1,
        tpot_s=0.1,
        e2e_s=0.3,
    )
    outputs = {rec.request_id: "<b>Paris</b>"}
    for shown in (False, True):
        run = CellRun(records=[rec], duration_s=1.0, outputs=outputs, show_outputs=shown)
        cell, _ = summarize_cell(
            plan,
            cell_id="short/single",
            order=0,
            runs=[run],
            kind="measured",
            synthetic_text=False,
            rng=np.random.default_rng(0),
        )
        assert cell.output_excerpts == ([f"{rec.request_id}: <b>Paris</b>"] if shown else [])
        capital = next(q for q in cell.quality if q["checkpoint"] == "capital-exact")
        assert capital["verdict"] == "fail"  # "<b>Paris</b>" is not the exact answer "Paris"


def _confirm(lock: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in lock.items():
        if key == "id":
            out[key] = value
        elif isinstance(value, dict) and "value" not in value and key != "prefix_caching":
            out[key] = _confirm(value)
        else:
            raw = value.get("value", "x") if isinstance(value, dict) else value
            out[key] = {
                "value": raw if raw is not None else "x",
                "status": "confirmed",
                "source": "test",
            }
    return out


def test_a_fully_confirmed_clean_measured_run_can_pass(tmp_path: Path) -> None:
    from kvbudget.accept.acceptance import run_acceptance
    from kvbudget.accept.result import Ledger
    from kvbudget.accept.targets.base import PreparedTarget

    data = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    data["lock"]["engine"]["container"] = "vllm/vllm-openai@sha256:abc"
    data["lock"].update(offload="none", router_policy="none")
    data["lock"] = _confirm(data["lock"])
    data["load"].update(repetitions=1, max_requests_per_cell=250, shared_prefix={"tokens": 0})
    data["load"]["warmup"] = {"requests": 1, "input_tokens": 8, "output_tokens": 2}
    for tier in data["load"]["tiers"].values():
        tier.update(min_tokens=8, max_tokens=16, output_tokens=4)
    for tier in data["load"]["concurrency"].values():
        tier.update(arrival="closed")
        tier.pop("rate_per_s", None)
    prompt = tmp_path / "capital.txt"
    prompt.write_text("Capital of France? One word.", encoding="utf-8")
    quality = [{"id": "capital", "kind": "exact", "expected": "Paris", "prompt_file": str(prompt)}]
    data.update(quality=quality, comparisons=[], audits={"isolation": False, "reuse": False})
    data["stop"]["any_cross_tenant_hit"] = False
    data["stop"]["tpot_s"] = {"p95": 0.2}  # the fake target answers at 0.1 s per token
    plan = parse_plan(data)
    doc = run_acceptance(
        plan,
        lambda lock: PreparedTarget(target=FakeTarget(), ledger=Ledger()),
        out_dir=tmp_path,
    )
    assert doc.blocking == [], doc.blocking
    assert [c.verdict for c in doc.cells] == ["pass"] * 9, [c.reasons for c in doc.cells][:2]
    assert {s.status for s in doc.stop_conditions} == {"not_triggered"}, doc.stop_conditions
    assert doc.verdict == "pass", doc.verdict_reasons
    assert all(c.quality[0]["verdict"] == "pass" for c in doc.cells)
    # the same run with one unconfirmed field is blocked, not passed
    data["lock"]["gpu"]["driver"] = {"value": None, "status": "unconfirmed"}
    blocked = run_acceptance(
        parse_plan(data),
        lambda lock: PreparedTarget(target=FakeTarget(), ledger=Ledger()),
        out_dir=tmp_path,
    )
    assert blocked.verdict == "blocked"
    assert blocked.blocking == ["gpu.driver: unconfirmed (not known)"]
