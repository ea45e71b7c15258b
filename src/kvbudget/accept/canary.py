"""``run_canary``: the short, low-concurrency cells against a candidate, gated on the plan's stop
conditions and on a baseline report (seed: 变更后先跑短低并发 canary … 任何关键质量、安全或
恢复条件失败都立即停止).

The candidate is the plan's target (its lock is the new configuration). The gate, per cell:

1. the cell's own verdict under the plan's stop conditions (TTFT/TPOT ceilings, error rate,
   OOM, capacity errors, quality checkpoints), exactly as ``accept`` judges it;
2. no regression against the baseline report's same cell: TTFT and TPOT p95 (p50 when either
   side has fewer than 200 samples; untested under 20, accept's sample rule) at most
   ``(1 + tolerance)`` x the baseline's, error rate at most the larger of the baseline's and the
   plan's ceiling; figures of different kinds (simulated vs measured) are ``not_comparable``;
3. optionally the plan's rollback drill (``accept.drill``).

Any ``fail`` fails the canary; it passes only when every check passed. Anything else is
``untested``: the canary could not judge the candidate, and that blocks a rollout as a failure
does (``kvbudget canary`` exits 1 unless the verdict is ``pass``, and its textfile counts it in
``kvbudget_canary_untested_total``, which deploy's ``CanaryUntested`` alert reads). The default
number of requests per cell is sized so the plan's cancellations still leave a median
(:func:`default_num_requests`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from kvbudget.accept.acceptance import _provenance
from kvbudget.accept.drill import drill_for
from kvbudget.accept.judge.verdicts import min_samples_for
from kvbudget.accept.plan.lock import flatten_lock, lock_value
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.result import AcceptResult, CellResult, Check, Verdict
from kvbudget.accept.run import check_quality_files, run_matrix
from kvbudget.accept.targets.base import TargetFactory
from kvbudget.errors import ConfigError
from kvbudget.records import ResultDocument

DEFAULT_CELLS = ("short/single", "medium/single")
DEFAULT_TOLERANCE = 0.20
REGRESSION_METRICS = ("ttft_s", "tpot_s")


class CanaryResult(ResultDocument):
    """``OUT/canary.json``."""

    kind: Literal["canary"] = "canary"
    name: str
    plan_sha256: str
    baseline_path: str
    baseline_plan_sha256: str
    baseline_provenance: str
    tolerance: float
    num_requests_per_cell: int
    lock_differences: list[str] = Field(default_factory=list)
    cells: list[CellResult]
    regression: list[Check] = Field(default_factory=list)
    rollback_drill: dict[str, Any] = Field(default_factory=dict)
    verdict: Verdict
    verdict_reasons: list[str]


#: the chance that a default-sized canary cell ends with fewer completed requests than a median
#: needs, when the client cancels each request with probability ``load.cancel_fraction``
_SHORTFALL_PROBABILITY = 1e-3


def default_num_requests(plan: AcceptPlan) -> int:
    """Requests per cell so that a median (``min_samples_for("p50")`` = 20 samples) survives the
    plan's cancellations: the smallest ``n`` with ``P(Binomial(n, 1 - cancel_fraction) < 20) <=
    0.001``. Each request is cancelled independently with probability ``cancel_fraction``
    (``kvbudget.load.requests``), so 20 requests and 5 % cancelled leave fewer than 20 samples 64 %
    of the time: the canary would end ``untested``. Capped by the plan's
    ``max_requests_per_cell``."""
    from scipy.stats import binom

    need = min_samples_for("p50")
    keep = 1.0 - plan.load.cancel_fraction
    n = need
    while n < plan.load.max_requests_per_cell and binom.cdf(need - 1, n, keep) > (
        _SHORTFALL_PROBABILITY
    ):
        n += 1
    return min(n, plan.load.max_requests_per_cell)


def canary_plan(plan: AcceptPlan, num_requests: int) -> AcceptPlan:
    """The plan with one repetition of at most ``num_requests`` requests per cell."""
    load = plan.load.model_copy(
        update={
            "repetitions": 1,
            "max_requests_per_cell": min(plan.load.max_requests_per_cell, num_requests),
        }
    )
    return plan.model_copy(update={"load": load})


def _lock_differences(plan: AcceptPlan, baseline: AcceptResult) -> list[str]:
    base = {e.field: e.value for e in baseline.lock}
    out: list[str] = []
    for name, locked in flatten_lock(plan.lock).items():
        value = lock_value(locked.value)
        if name in base and base[name] != value and value != "auto":
            out.append(f"{name}: {base[name]!r} -> {value!r}")
    return out


def _regression(
    cell: CellResult, base: CellResult | None, plan: AcceptPlan, tolerance: float, comparable: bool
) -> list[Check]:
    checks: list[Check] = []
    if base is None or base.num_ok == 0:
        return [
            Check(
                name=f"{cell.cell_id} vs baseline",
                verdict="untested",
                reason="the baseline report has no served requests in this cell",
            )
        ]
    if not comparable:
        return [
            Check(
                name=f"{cell.cell_id} vs baseline",
                verdict="not_comparable",
                reason="baseline and candidate figures are of different kinds "
                "(simulated vs measured); re-run both on the same kind of target",
            )
        ]
    for metric in REGRESSION_METRICS:
        mine = cell.summaries.get(metric)
        theirs = base.summaries.get(metric)
        name = f"{cell.cell_id} {metric} vs baseline"
        n = min(mine.n if mine else 0, theirs.n if theirs else 0)
        pct = next((p for p in ("p95", "p50") if n >= min_samples_for(p)), None)
        got = None if mine is None or pct is None else mine.pct(pct)
        ref = None if theirs is None or pct is None else theirs.pct(pct)
        if got is None or ref is None:
            checks.append(
                Check(
                    name=name,
                    verdict="untested",
                    reason=f"{n} samples on the smaller side: a median needs >= "
                    f"{min_samples_for('p50')} (raise --num-requests)",
                )
            )
            continue
        limit = ref * (1 + tolerance)
        ok = got <= limit
        checks.append(
            Check(
                name=name,
                verdict="pass" if ok else "fail",
                reason=f"{pct} {got:.4g} s {'<=' if ok else '>'} {limit:.4g} s = baseline "
                f"{ref:.4g} s x (1 + {tolerance:g}); n = {mine.n if mine else 0} vs "
                f"{theirs.n if theirs else 0}",
                observed=got,
                limit=limit,
                kind=cell.kind,
            )
        )
    err = cell.error_rate or 0.0
    ceiling = max(base.error_rate or 0.0, plan.stop.error_rate_max)
    checks.append(
        Check(
            name=f"{cell.cell_id} error rate vs baseline",
            verdict="pass" if err <= ceiling else "fail",
            reason=f"{err:.3g} vs max(baseline {base.error_rate or 0.0:.3g}, plan "
            f"{plan.stop.error_rate_max:g})",
            observed=err,
            limit=ceiling,
            kind=cell.kind,
        )
    )
    return checks


def _beyond_sample(check: Check) -> bool:
    """A ceiling the canary's few requests cannot claim (``ttft_s p95 <= 2`` from 26 samples)
    although no sample breached it: not a finding either way. A breach is a ``fail`` whatever
    the sample (``accept.judge.verdicts``), and is never skipped."""
    return (
        check.verdict == "untested"
        and check.observed is not None
        and check.limit is not None
        and check.observed <= check.limit
    )


def _cell_gate(cell: CellResult) -> tuple[Verdict, list[str], list[str]]:
    """The cell's verdict for the canary: its checks less those beyond the canary's sample;
    the reasons; and the names of the checks skipped so."""
    if not cell.checks:
        return cell.verdict, cell.reasons, []
    kept = [c for c in cell.checks if not _beyond_sample(c)]
    skipped = [c.name for c in cell.checks if _beyond_sample(c)]
    verdict = _verdict([c.verdict for c in kept]) if kept else "untested"
    why = [f"{c.name}: {c.reason}" for c in kept if c.verdict != "pass"] or cell.reasons
    return verdict, why, skipped


def _verdict(verdicts: list[Verdict]) -> Verdict:
    if any(v == "fail" for v in verdicts):
        return "fail"
    if verdicts and all(v == "pass" for v in verdicts):
        return "pass"
    return "untested"


def run_canary(
    plan: AcceptPlan,
    factory: TargetFactory,
    baseline: AcceptResult,
    *,
    baseline_path: Path,
    cells: list[str] | None = None,
    num_requests: int | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    drill: bool = False,
    out_dir: Path | None = None,
) -> CanaryResult:
    wanted = list(cells or DEFAULT_CELLS)
    valid = {f"{i}/{c}" for i, c in plan.load.cell_order()}
    for cell_id in wanted:
        if cell_id not in valid:
            raise ConfigError(
                f"--cells: unknown cell {cell_id!r}; write 'input/concurrency' such as 'short/single'",
                field="--cells",
            )
    if drill and plan.rollback.drill is None:
        raise ConfigError(
            "--drill: the plan declares no rollback.drill; add rollback.drill.command "
            "(see docs/plan-file.md)",
            field="rollback.drill",
        )
    check_quality_files(plan)
    small = canary_plan(plan, default_num_requests(plan) if num_requests is None else num_requests)
    rng = np.random.default_rng([plan.seed, 11])
    prepared = factory(plan.lock)
    target = prepared.target
    try:
        outcome = run_matrix(small, target, out_dir=out_dir, cells_subset=wanted, rng=rng)
    finally:
        target.close()
    provenance = _provenance(target.info)
    comparable = provenance.kind == baseline.provenance.kind
    base_cells = {c.cell_id: c for c in baseline.cells}
    regression: list[Check] = []
    for cell in outcome.cells:
        regression += _regression(cell, base_cells.get(cell.cell_id), plan, tolerance, comparable)
    drill_result = drill_for(plan) if drill else {}
    verdicts: list[Verdict] = [c.verdict for c in regression]
    reasons: list[str] = []
    beyond: list[str] = []
    for cell in outcome.cells:
        verdict, why, skipped = _cell_gate(cell)
        verdicts.append(verdict)
        beyond += [f"{cell.cell_id} {name}" for name in skipped]
        if verdict != "pass":
            reasons.append(f"cell {cell.cell_id}: {verdict} ({'; '.join(why[:2])})")
    reasons += [f"{c.name}: {c.verdict} ({c.reason})" for c in regression if c.verdict != "pass"]
    if drill_result:
        verdicts.append("pass" if drill_result.get("verdict") == "pass" else "fail")
        reasons.append(
            f"rollback drill: {drill_result.get('verdict')} ({drill_result.get('reason')})"
        )
    verdict = _verdict(verdicts)
    if verdict == "pass":
        reasons = ["every canary cell, regression check and drill passed"]
    if beyond:
        reasons.append(
            "not judged by the canary (its sample is too small for these percentiles and "
            f"nothing breached them; accept judges them): {', '.join(beyond)}"
        )
    if provenance.kind == "simulated":
        reasons.append("simulated candidate: a canary on the simulator is not a go-live signal")
    return CanaryResult(
        provenance=provenance,
        name=plan.name,
        plan_sha256=plan.canonical_sha256(),
        baseline_path=str(baseline_path),
        baseline_plan_sha256=baseline.plan_sha256,
        baseline_provenance=baseline.provenance.label(),
        tolerance=tolerance,
        num_requests_per_cell=small.load.max_requests_per_cell,
        lock_differences=_lock_differences(plan, baseline),
        cells=outcome.cells,
        regression=regression,
        rollback_drill=drill_result,
        verdict=verdict,
        verdict_reasons=reasons,
    )


def canary_markdown(doc: CanaryResult) -> str:
    out = [f"# Canary: {doc.name}", ""]
    out.append(f"- Verdict: **{doc.verdict}**")
    out += [f"  - {r}" for r in doc.verdict_reasons]
    out.append(
        f"- Candidate figures: {doc.provenance.label()}; baseline: {doc.baseline_provenance} "
        f"(`{doc.baseline_path}`)."
    )
    out.append(
        f"- {doc.num_requests_per_cell} requests per cell, one repetition; regression "
        f"tolerance {doc.tolerance:g} on p95."
    )
    if doc.lock_differences:
        out += ["- Lock changes against the baseline:"] + [
            f"  - `{d}`" for d in doc.lock_differences
        ]
    out += [
        "",
        "| cell | verdict | n ok | TTFT p95 s | TPOT p95 s | error rate |",
        "|---|---|---|---|---|---|",
    ]
    for cell in doc.cells:
        ttft = cell.summaries.get("ttft_s")
        tpot = cell.summaries.get("tpot_s")
        t1 = ttft.pct("p95") if ttft else None
        t2 = tpot.pct("p95") if tpot else None
        out.append(
            f"| {cell.cell_id} | {cell.verdict} | {cell.num_ok} | "
            f"{'—' if t1 is None else f'{t1:.4g}'} | {'—' if t2 is None else f'{t2:.4g}'} | "
            f"{cell.error_rate if cell.error_rate is not None else '—'} |"
        )
    out += ["", "| check | verdict | reason |", "|---|---|---|"]
    out += [f"| {c.name} | {c.verdict} | {c.reason} |" for c in doc.regression]
    if doc.rollback_drill:
        d = doc.rollback_drill
        out += [
            "",
            f"Rollback drill ({d.get('kind')}, {d.get('target')}): {d.get('verdict')} — "
            f"ready {d.get('time_to_ready_s')} s, first ok {d.get('time_to_first_ok_s')} s "
            f"(limit {d.get('max_restore_s')} s).",
        ]
    out += ["", "A canary proves technical behaviour under its recorded conditions only.", ""]
    return "\n".join(out)
