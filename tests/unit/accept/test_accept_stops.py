"""Stop conditions from audits and cells; a leak blocks the overall verdict."""

from __future__ import annotations

from pathlib import Path

from kvbudget.accept.acceptance import stop_statuses
from kvbudget.accept.audit_sections import AuditsSection
from kvbudget.accept.judge.verdicts import overall_verdict
from kvbudget.accept.plan.planfile import load_plan
from kvbudget.accept.result import CellResult, Check

DEMO = Path(__file__).resolve().parents[3] / "examples" / "acceptance-demo.yaml"


def cell(*checks: Check) -> CellResult:
    return CellResult(
        cell_id="short/single",
        input_tier="short",
        concurrency_tier="single",
        order=0,
        verdict="pass",
        reasons=[],
        checks=list(checks),
    )


def test_cross_tenant_leak_triggers_and_fails_the_run() -> None:
    plan = load_plan(DEMO)
    ok = cell(Check(name="ttft_s p95 <= 2", stop="ttft_s p95", verdict="pass", reason=""))
    stops = stop_statuses(
        plan, [ok], AuditsSection(leak_detected=True, cross_tenant_cached_tokens=512)
    )
    by = {s.name: s for s in stops}
    assert by["cross-tenant cache hit"].status == "triggered"
    verdict, reasons = overall_verdict(stops, [], ["pass"], simulated=False)
    assert verdict == "fail" and any("cross-tenant" in r for r in reasons)


def test_no_audit_leaves_isolation_untested() -> None:
    plan = load_plan(DEMO)
    stops = {s.name: s for s in stop_statuses(plan, [cell()], AuditsSection())}
    assert stops["cross-tenant cache hit"].status == "untested"
    assert stops["ttft_s p95"].status == "untested"  # no cell check made it


def test_reuse_divergence_triggers() -> None:
    plan = load_plan(DEMO)
    audits = {"reuse": {"status": "fail", "verdict": "diverged", "reason": "token 3"}}
    stops = {s.name: s for s in stop_statuses(plan, [cell()], AuditsSection.model_validate(audits))}
    assert stops["reused KV correctness"].status == "triggered"


def test_failed_cell_check_triggers_its_stop_condition() -> None:
    plan = load_plan(DEMO)
    bad = cell(Check(name="ttft_s p95 <= 2", stop="ttft_s p95", verdict="fail", reason="3 > 2"))
    stops = {s.name: s for s in stop_statuses(plan, [bad], AuditsSection())}
    assert stops["ttft_s p95"].status == "triggered"
    assert stops["ttft_s p95"].cells == ["short/single"]


def test_capacity_stop_is_tested_when_cells_ran_without_error() -> None:
    plan = load_plan(DEMO)
    ran = cell(Check(name="capacity", stop="capacity error", verdict="pass", reason="admitted"))
    stops = {s.name: s for s in stop_statuses(plan, [ran], AuditsSection())}
    assert stops["capacity error"].status == "not_triggered"


def test_checks_carry_the_stop_key_their_status_counts() -> None:
    """A display name that reads like another condition does not count toward it: only the key."""
    plan = load_plan(DEMO)
    look_alike = cell(Check(name="ttft_s p95 <= 2", verdict="fail", reason="x", stop=None))
    stops = {s.name: s for s in stop_statuses(plan, [look_alike], AuditsSection())}
    assert stops["ttft_s p95"].status == "untested"


def test_report_from_before_stop_keys_reads_them_from_the_names() -> None:
    """report.json written before checks had ``stop``: the names those versions wrote (copied
    from a demo report.json of that version) map to the stop conditions by hand."""
    from kvbudget.accept.result import AcceptResult

    old = {
        "ran": None,
        "capacity": "capacity error",
        "ttft_s p95 <= 2": "ttft_s p95",
        "tpot_s p50 <= 0.03": "tpot_s p50",
        "error rate <= 0.01": "error rate",
        "no OOM": "OOM",
        "quality capital-exact": "quality failure",
        "host memory peak bytes": "host memory",
        "transfer reload wait p95": "transfer",
    }
    doc = {
        "kind": "accept",
        "provenance": {"kind": "simulated", "timing_model": "roofline"},
        "name": "n",
        "seed": 1,
        "plan": {},
        "plan_sha256": "0",
        "target": {},
        "lock": [],
        "blocking": [],
        "ledger": {},
        "cells": [
            {
                "cell_id": "short/single",
                "input_tier": "short",
                "concurrency_tier": "single",
                "order": 0,
                "verdict": "pass",
                "reasons": [],
                "checks": [{"name": n, "verdict": "pass", "reason": ""} for n in old],
            }
        ],
        "stop_conditions": [],
        "verdict": "pass",
        "verdict_reasons": [],
    }
    result = AcceptResult.model_validate(doc)
    assert {c.name: c.stop for c in result.cells[0].checks} == old
