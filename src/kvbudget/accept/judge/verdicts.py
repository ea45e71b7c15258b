"""Verdicts: every cell ``pass``/``fail``/``untested``/``not_comparable`` with its numbers.

Rules (seed: "最终结论逐格注明通过、失败、未测和不可比，空白不得解释为通过"):

* a cell is ``pass`` only when it has at least one check and every check passed;
  a check that could not be made is ``untested`` and a cell with no checks is ``untested``
  — a blank is never a pass;
* the cell's verdict is its worst check: ``fail`` > ``not_comparable`` > ``untested`` > ``pass``;
* a percentile claimed on too few samples (fewer than ``10 / (1 - q)``) is ``untested`` (unless even that sample is over the
  ceiling, which is a ``fail``);
* a capacity error (OOM, a request the engine cannot fit) fails the cell and stops its row: the
  later concurrency tiers of the same input tier are ``untested``, the last passing tier is kept,
  nothing is retried until it passes;
* any triggered stop condition blocks the overall verdict (``fail``); unconfirmed lock fields
  make it ``blocked``; anything untested (or a simulated target) keeps it ``untested``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvbudget.accept.plan.checks import StopConditions
from kvbudget.accept.plan.load import CONCURRENCY_TIERS, INPUT_TIERS
from kvbudget.accept.result import (
    STOP_CAPACITY,
    STOP_ERROR_RATE,
    STOP_OOM,
    STOP_QUALITY,
    VERDICT_ORDER,
    CellResult,
    Check,
    MetricSummary,
    OverallVerdict,
    StopStatus,
    Verdict,
    latency_stop,
)
from kvbudget.metrics.summary import required_samples
from kvbudget.records import FigureKind


def min_samples_for(percentile_name: str) -> int:
    """Smallest sample that supports a claim about ``pNN``: ``ceil(10 / (1 - q))``.

    The same rule as the metric summaries' small-sample warning
    (:func:`kvbudget.metrics.summary.required_samples`): about ten samples beyond the
    percentile — p50 -> 20, p90 -> 100, p95 -> 200, p99 -> 1000.
    """
    return required_samples(float(percentile_name.lstrip("p")))


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """The worst verdict; ``untested`` for an empty list (a blank is never a pass)."""
    if not verdicts:
        return "untested"
    return max(verdicts, key=lambda v: VERDICT_ORDER[v])


@dataclass(frozen=True, slots=True)
class QualityOutcome:
    """Result of one quality checkpoint on one cell's timed requests."""

    checkpoint_id: str
    verdict: Verdict
    reason: str
    num_checked: int = 0
    num_failed: int = 0


@dataclass(frozen=True, slots=True)
class CellEvidence:
    """What a cell's run produced, as the verdict logic needs it."""

    cell_id: str
    kind: FigureKind | None
    num_requests: int
    num_error: int
    num_oom: int
    capacity_error: str | None = None
    skipped_reason: str | None = None
    summaries: dict[str, MetricSummary] = field(default_factory=dict)
    quality: tuple[QualityOutcome, ...] = ()


def percentile_check(
    metric: str, pct: str, limit: float, summary: MetricSummary | None, kind: FigureKind | None
) -> Check:
    """One ceiling ``metric pct <= limit``."""
    name = f"{metric} {pct} <= {limit:g}"
    stop = latency_stop(metric, pct)
    if summary is None or summary.n == 0:
        return Check(
            name=name, stop=stop, verdict="untested", reason=f"no {metric} samples", limit=limit
        )
    observed = summary.pct(pct)
    if observed is None:
        return Check(
            name=name, stop=stop, verdict="untested", reason=f"{pct} not computed", limit=limit
        )
    needed = min_samples_for(pct)
    if observed > limit:
        small = f"; only {summary.n} samples (< {needed})" if summary.n < needed else ""
        return Check(
            name=name,
            stop=stop,
            verdict="fail",
            reason=f"{metric} {pct} {observed:.4g} > ceiling {limit:g}{small}",
            observed=observed,
            limit=limit,
            kind=kind,
        )
    if summary.n < needed:
        return Check(
            name=name,
            stop=stop,
            verdict="untested",
            reason=f"{summary.n} samples are too few for {pct} (needs >= {needed}); "
            f"observed {observed:.4g} <= {limit:g} is not a claim",
            observed=observed,
            limit=limit,
            kind=kind,
        )
    return Check(
        name=name,
        stop=stop,
        verdict="pass",
        reason=f"{metric} {pct} {observed:.4g} <= {limit:g} (n={summary.n})",
        observed=observed,
        limit=limit,
        kind=kind,
    )


def cell_checks(stop: StopConditions, ev: CellEvidence) -> list[Check]:
    """Every check of one cell, in a fixed order."""
    if ev.skipped_reason is not None:
        return [Check(name="ran", verdict="untested", reason=ev.skipped_reason)]
    checks: list[Check] = []
    if ev.capacity_error is not None:
        checks.append(
            Check(
                name="capacity",
                stop=STOP_CAPACITY,
                verdict="fail",
                reason=f"capacity error: {ev.capacity_error}",
            )
        )
    if ev.num_requests == 0:
        checks.append(Check(name="ran", verdict="untested", reason="no request completed a run"))
        return checks
    if ev.capacity_error is None:
        checks.append(
            Check(
                name="capacity",
                stop=STOP_CAPACITY,
                verdict="pass",
                reason=f"no capacity error: the engine admitted all {ev.num_requests} requests",
                kind=ev.kind,
            )
        )
    for metric, ceilings in (("ttft_s", stop.ttft_s), ("tpot_s", stop.tpot_s)):
        for pct, limit in ceilings.items():
            checks.append(percentile_check(metric, pct, limit, ev.summaries.get(metric), ev.kind))
    rate = ev.num_error / ev.num_requests
    checks.append(
        Check(
            name=f"error rate <= {stop.error_rate_max:g}",
            stop=STOP_ERROR_RATE,
            verdict="fail" if rate > stop.error_rate_max else "pass",
            reason=f"{ev.num_error} errors in {ev.num_requests} requests ({rate:.2%})",
            observed=rate,
            limit=stop.error_rate_max,
            kind=ev.kind,
        )
    )
    if stop.any_oom:
        checks.append(
            Check(
                name="no OOM",
                stop=STOP_OOM,
                verdict="fail" if ev.num_oom > 0 else "pass",
                reason=f"{ev.num_oom} out-of-memory errors",
                observed=float(ev.num_oom),
                limit=0.0,
                kind=ev.kind,
            )
        )
    for outcome in ev.quality:
        checks.append(
            Check(
                name=f"quality {outcome.checkpoint_id}",
                stop=STOP_QUALITY,
                verdict=outcome.verdict,
                reason=outcome.reason,
                observed=float(outcome.num_failed) if outcome.num_checked else None,
                limit=0.0 if outcome.num_checked else None,
                kind=ev.kind if outcome.num_checked else None,
            )
        )
    return checks


def cell_verdict(checks: Sequence[Check]) -> tuple[Verdict, list[str]]:
    """The cell's verdict and its reasons (the checks that decided it, worst first)."""
    verdict = worst([c.verdict for c in checks])
    deciding = [c for c in checks if c.verdict == verdict]
    reasons = [f"{c.name}: {c.reason}" for c in deciding]
    if verdict == "pass":
        reasons = [f"all {len(checks)} checks passed"]
    return verdict, reasons


def row_stopped(
    row_results: Sequence[tuple[str, Verdict, str | None]],
) -> tuple[bool, str | None]:
    """Stop-on-capacity-error rule for one input tier's row.

    ``row_results`` are the concurrency cells of the row already run, in order, as
    ``(concurrency tier, verdict, capacity error or None)``. Returns (stop, reason for the cells
    left out): after a capacity error the rest of the row is not run; the reason names the tier
    that failed and the last passing tier kept.
    """
    last_pass: str | None = None
    for tier, verdict, capacity_error in row_results:
        if capacity_error is not None:
            kept = last_pass if last_pass is not None else "none"
            return True, (
                f"row stopped after a capacity error at concurrency '{tier}' "
                f"({capacity_error}); last passing tier kept: {kept}; not retried"
            )
        if verdict == "pass":
            last_pass = tier
    return False, None


def overall_verdict(
    stops: Sequence[StopStatus],
    blocking: Sequence[str],
    cell_verdicts: Sequence[Verdict],
    *,
    simulated: bool,
    comparison_verdicts: Sequence[Verdict] = (),
) -> tuple[OverallVerdict, list[str]]:
    """The run's verdict: any triggered stop condition blocks it; a blank never passes."""
    triggered = [s for s in stops if s.status == "triggered"]
    if triggered:
        return "fail", [
            f"stop condition '{s.name}' triggered in {', '.join(s.cells) or 'the run'}: {s.detail}"
            for s in triggered
        ]
    if blocking:
        return "blocked", [f"{len(blocking)} lock field(s) not confirmed: " + "; ".join(blocking)]
    reasons: list[str] = []
    not_pass = [v for v in cell_verdicts if v != "pass"]
    if not cell_verdicts:
        reasons.append("no cell was run")
    if not_pass:
        reasons.append(f"{len(not_pass)} of {len(cell_verdicts)} cells are not 'pass'")
    untested_stops = [s.name for s in stops if s.status == "untested"]
    if untested_stops:
        reasons.append("stop conditions not tested: " + ", ".join(untested_stops))
    bad_cmp = [v for v in comparison_verdicts if v != "pass"]
    if bad_cmp:
        reasons.append(f"{len(bad_cmp)} comparison(s) not 'pass'")
    if simulated:
        reasons.append(
            "simulated target: the figures are not measurements; re-run on the real engine, "
            "hardware and load before a purchase or go-live"
        )
    if reasons:
        return "untested", reasons
    return "pass", ["every cell passed and no stop condition triggered"]


def row_summaries(
    cells: Sequence[CellResult], input_tiers: Sequence[str] = INPUT_TIERS
) -> list[dict[str, Any]]:
    """Per input tier: the highest concurrency tier that passed on capacity and latency.

    Quality is left out here (it is judged per cell). The walk goes single -> normal -> peak and
    stops at the first tier that failed; tiers that could not be judged (too few samples, not
    run) are listed as untested and never count as passing. ``input_tiers``: the plan's
    declared input tiers (tiers it does not declare get no row).
    """
    out: list[dict[str, Any]] = []
    by_key = {(c.input_tier, c.concurrency_tier): c for c in cells}
    for tier in input_tiers:
        last: str | None = None
        stopped: str | None = None
        capacity = False
        untested: list[str] = []
        for conc in CONCURRENCY_TIERS:
            cell = by_key.get((tier, conc))
            if cell is None:
                continue
            perf = worst([c.verdict for c in cell.checks if not c.is_quality])
            if perf == "pass":
                last = conc
            elif perf == "fail":
                stopped = conc
                capacity = any(c.name == "capacity" and c.verdict == "fail" for c in cell.checks)
                break
            else:
                untested.append(conc)
        out.append(
            {
                "input_tier": tier,
                "last_passing": last,
                "stopped_at": stopped,
                "capacity_error": capacity,
                "untested": untested,
            }
        )
    return out
