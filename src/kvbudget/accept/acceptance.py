"""``run_acceptance``: a plan in, an :class:`AcceptResult` out (seed steps 1-7)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget import __version__
from kvbudget.accept.ab_runs import run_comparisons
from kvbudget.accept.audit_sections import AuditsSection
from kvbudget.accept.drill import drill_for, drill_stop_status
from kvbudget.accept.judge.anomalies import find_anomalies
from kvbudget.accept.judge.audits import run_audits
from kvbudget.accept.judge.plan_warnings import plan_warnings
from kvbudget.accept.judge.record_checks import run_failure, unstable_queues
from kvbudget.accept.judge.tier_checks import tier_stop_statuses
from kvbudget.accept.judge.verdicts import overall_verdict, row_summaries
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.predict import attach_predictions
from kvbudget.accept.result import (
    STOP_CAPACITY,
    STOP_ERROR_RATE,
    STOP_OOM,
    STOP_QUALITY,
    AcceptResult,
    CellResult,
    StopStatus,
    latency_stop,
)
from kvbudget.accept.resume_files import check_resume
from kvbudget.accept.run import (
    Progress,
    check_quality_files,
    run_matrix,
)
from kvbudget.accept.targets.base import CellRun, TargetFactory, TargetInfo
from kvbudget.accept.targets.engine_pool import pool_side_by_side
from kvbudget.accept.targets.http import RunAsync
from kvbudget.accept.targets.lock_resolve import resolve_lock
from kvbudget.metrics.percentile_set import DEFAULT_METRIC_PERCENTILES, reported_percentiles
from kvbudget.records import Provenance


def _failed(cells: Sequence[CellResult], stop: str) -> tuple[list[str], int]:
    failed, tested = [], 0
    for cell in cells:
        for check in cell.checks:
            if check.stop == stop:
                if check.verdict != "untested":
                    tested += 1
                if check.verdict == "fail":
                    failed.append(cell.cell_id)
    return sorted(set(failed)), tested


def stop_statuses(
    plan: AcceptPlan, cells: Sequence[CellResult], audits: AuditsSection
) -> list[StopStatus]:
    """Each declared stop condition: triggered, not triggered, or untested (no evidence)."""
    stop = plan.stop
    out: list[StopStatus] = []

    def add(name: str, declared: str) -> None:
        failed, tested = _failed(cells, name)
        status = "triggered" if failed else ("not_triggered" if tested else "untested")
        detail = (
            f"failed in {len(failed)} cell(s)" if failed else f"checked in {tested} cell check(s)"
        )
        out.append(
            StopStatus(name=name, declared=declared, status=status, cells=failed, detail=detail)
        )

    for metric, ceilings in (("ttft_s", stop.ttft_s), ("tpot_s", stop.tpot_s)):
        for pct, limit in ceilings.items():
            add(latency_stop(metric, pct), f"<= {limit:g} s")
    add(STOP_ERROR_RATE, f"<= {stop.error_rate_max:g}")
    add(STOP_CAPACITY, "none (engine refuses or runs out of KV)")
    if stop.any_oom:
        add(STOP_OOM, "none")
    if stop.any_quality_failure:
        add(STOP_QUALITY, "none")
    if stop.any_cross_tenant_hit:
        leak = audits.cross_tenant_cached_tokens
        if audits.leak_detected:
            out.append(
                StopStatus(
                    name="cross-tenant cache hit",
                    declared="none",
                    status="triggered",
                    detail=f"isolation audit: leak detected ({leak} cross-tenant cached tokens)",
                )
            )
        elif leak is None:
            iso = audits.isolation
            out.append(
                StopStatus(
                    name="cross-tenant cache hit",
                    declared="none",
                    status="untested",
                    detail=(
                        f"the isolation audit failed: {iso.reason}"
                        if iso is not None and iso.status == "failed"
                        else (iso.reason if iso is not None else "")
                        or "the isolation audit did not run (audits.isolation: true runs it)"
                    ),
                )
            )
        else:
            out.append(
                StopStatus(
                    name="cross-tenant cache hit",
                    declared="none",
                    status="triggered" if leak > 0 else "not_triggered",
                    detail=f"{leak} cross-tenant cached tokens",
                )
            )
    reuse = audits.reuse
    if reuse is not None:
        status = {"fail": "triggered", "pass": "not_triggered"}.get(str(reuse.status), "untested")
        out.append(
            StopStatus(
                name="reused KV correctness",
                declared="cold, hot and reloaded outputs agree",
                status=status,  # type: ignore[arg-type]
                detail=f"reuse audit: {reuse.verdict} — {reuse.reason}",
            )
        )
    out.extend(tier_stop_statuses(plan, cells))
    return out


def rollback_steps(plan: AcceptPlan, drill: dict[str, Any] | None = None) -> list[str]:
    rb = plan.rollback
    steps = [
        f"Keep the previous release ready: {rb.previous_release or 'NOT DECLARED (blocking)'}.",
        "Previous launch flags: " + (" ".join(rb.previous_flags) or "NOT DECLARED"),
        f"Previous KV dtype: {rb.previous_kv_dtype or 'NOT DECLARED'}; block size and max length "
        "limits as in the previous flags.",
        "Switch traffic back step by step; health-check each replica (/health) before it gets "
        "traffic.",
        "Reset the prefix cache on every replica that changed KV dtype, block size or model "
        "revision: cached KV must not cross incompatible versions.",
        f"Target restore time: {rb.max_restore_s:g} s; weights "
        + (
            "available offline (no re-download)."
            if rb.weights_offline_copy
            else "NOT confirmed offline: include the download time in the restore time."
        ),
        "Rollback drill: "
        + (
            f"{drill.get('verdict')} (measured: {drill.get('reason')})."
            if drill
            else ("done." if rb.drill_done else "NOT done yet — run it before go-live.")
        ),
    ]
    return steps


def canary_steps(plan: AcceptPlan) -> list[str]:
    c = plan.canary
    return [
        f"Send {c.traffic_fraction:.0%} of traffic ({c.sample_source}) to the new configuration.",
        f"Observe for {c.observation_window_s:g} s: TTFT/TPOT percentiles against the stop "
        "ceilings, error rate, OOM, KV usage, preemptions, prefix hit rate and quality canaries.",
        "Stop immediately on any quality, isolation, OOM or recovery failure; widen only after "
        "the window passes.",
        "A canary proves technical behaviour under its recorded conditions only.",
    ]


def _provenance(info: TargetInfo) -> Provenance:
    if info.source == "simulated":
        return Provenance(kind="simulated", timing_model=info.timing_model or "unknown")
    return Provenance(
        kind="measured",
        engine=info.engine or "unknown",
        engine_version=info.engine_version,
        hardware=info.hardware,
    )


def _predict(
    plan: AcceptPlan,
    cells: list[CellResult],
    runs: dict[str, list[CellRun]],
    rng: np.random.Generator,
) -> list[CellResult]:
    """Run the same requests on the simulator with the plan's calibrated profile: on the
    llama.cpp slot engine when the profile was measured on llama.cpp, else on the vLLM-style
    paged engine. The label names the engine behaviour used."""
    from kvbudget.accept.targets.factories import sim_factory
    from kvbudget.accept.targets.slots import SlotsPredictionTarget, is_llamacpp_profile
    from kvbudget.sim.timing import CalibrationProfile

    assert plan.target.profile is not None
    profile = CalibrationProfile.load(plan.target.profile)
    sim_plan = plan.model_copy(
        update={
            "target": plan.target.model_copy(update={"kind": "sim", "timing_model": "calibrated"})
        }
    )
    if is_llamacpp_profile(profile):
        measured = {r.request_id: r for rs in runs.values() for run in rs for r in run.records}
        slots = SlotsPredictionTarget(profile, measured)
        predicted = run_matrix(sim_plan, slots, out_dir=None, rng=rng)
        return attach_predictions(
            plan,
            cells,
            predicted.cells,
            slots.info.timing_model or "calibrated",
            engine_behaviour=slots.behaviour,
            warnings=slots.warnings,
        )
    prepared = sim_factory(sim_plan)(plan.lock)
    try:
        predicted = run_matrix(sim_plan, prepared.target, out_dir=None, rng=rng)
    finally:
        prepared.target.close()
    behaviour = "vLLM-style paged blocks (kvbudget.sim.engine)"
    label = f"{prepared.target.info.timing_model or 'calibrated'}; engine behaviour: {behaviour}"
    return attach_predictions(plan, cells, predicted.cells, label, engine_behaviour=behaviour)


def run_acceptance(
    plan: AcceptPlan,
    factory: TargetFactory,
    *,
    out_dir: Path | None,
    resume: bool = False,
    progress: Progress | None = None,
    run_async: RunAsync | None = None,
    metric_percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
) -> AcceptResult:
    """The whole acceptance run. ``metric_percentiles`` (``--metric-percentiles``, vLLM bench
    serve's flag): the percentiles each cell's TTFT, TPOT, ITL and E2E are reported at beside
    the mean and median; the stop conditions are judged at their own percentiles regardless."""
    rng = np.random.default_rng([plan.seed, 7])
    check_quality_files(plan)
    if out_dir is not None:
        check_resume(plan, out_dir, resume=resume)
    prepared = factory(plan.lock)
    target = prepared.target
    info = target.info
    try:
        lock_entries, blocking = resolve_lock(plan.lock, info, computed=prepared.computed_lock)
        pool_rows, pool_blocking = pool_side_by_side(prepared.ledger.pool, info.engine_report)
        blocking += pool_blocking
        outcome = run_matrix(
            plan,
            target,
            out_dir=out_dir,
            resume=resume,
            progress=progress,
            rng=rng,
            percentiles=metric_percentiles,
        )
        found: dict[str, Any] = {}
        if plan.stop.search_highest_load:
            from kvbudget.accept.highest_load import highest_loads

            measured_rows = row_summaries(outcome.cells, plan.load.input_tiers)
            found = highest_loads(plan, target, measured_rows, figures=info.source)
    finally:
        target.close()
    cells = outcome.cells
    if info.source == "measured" and plan.target.profile is not None:
        cells = _predict(plan, cells, outcome.runs, rng)
    rows = [
        {**r, "highest_load": found[r["input_tier"]]} if r["input_tier"] in found else r
        for r in row_summaries(cells, plan.load.input_tiers)
    ]
    comparisons = run_comparisons(plan, factory, rng)
    audits = run_audits(plan, run_async)
    drill = drill_for(plan)
    stops = stop_statuses(plan, cells, audits) + drill_stop_status(plan, drill)
    verdict, reasons = overall_verdict(
        stops,
        blocking,
        [c.verdict for c in cells],
        simulated=info.source == "simulated",
        comparison_verdicts=[c.verdict for c in comparisons],
    )
    records = [r for runs in outcome.runs.values() for run in runs for r in run.records]
    anomalies = find_anomalies(plan, prepared.ledger, outcome.baseline, cells, comparisons)
    anomalies += unstable_queues(records)
    failure = run_failure(plan, records)
    if failure is not None:
        reasons = [f"the run failed: {failure}", *reasons]
    return AcceptResult(
        provenance=_provenance(info),
        name=plan.name,
        seed=plan.seed,
        plan=plan.model_dump(mode="json"),
        plan_sha256=plan.canonical_sha256(),
        target={
            "kind": info.kind,
            "source": info.source,
            "label": info.label,
            "timing_model": info.timing_model,
            "engine": info.engine,
            "engine_version": info.engine_version,
            "hardware": info.hardware,
            "synthetic_text": info.synthetic_text,
            "tool_version": __version__,
        },
        lock=lock_entries,
        blocking=blocking,
        ledger=prepared.ledger,
        engine_report=info.engine_report,
        pool=pool_rows,
        baseline=outcome.baseline,
        warmup=outcome.warmup,
        cells=cells,
        rows=rows,
        stop_conditions=stops,
        comparisons=comparisons,
        anomalies=anomalies,
        audits=audits,
        verdict=verdict,
        verdict_reasons=reasons + outcome.notes,
        run_failure=failure,
        plan_warnings=plan_warnings(plan),
        rollback=rollback_steps(plan, drill),
        rollback_drill=drill,
        canary=canary_steps(plan),
        metric_percentiles=list(reported_percentiles(metric_percentiles)),
    )
