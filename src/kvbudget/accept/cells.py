"""Turn the repetitions of one cell into its summary and verdict (``CellResult``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from kvbudget.accept.judge.quality import evaluate_checkpoint
from kvbudget.accept.judge.stats import PERCENTILES, summarize
from kvbudget.accept.judge.tier_checks import summarize_tiers, tier_checks
from kvbudget.accept.judge.verdicts import CellEvidence, cell_checks, cell_verdict
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.request_keys import RequestKey
from kvbudget.accept.result import CellResult, MetricSummary, TimeSeries
from kvbudget.accept.targets.base import CellRun
from kvbudget.metrics.throughput import throughput_of_runs
from kvbudget.records import FigureKind, RequestRecord

#: points kept per time series in the result document
MAX_SERIES_POINTS = 240
#: raw TTFT/TPOT samples kept per cell for the distribution charts
MAX_RAW_SAMPLES = 400
#: characters of a quality output shown in the report (only with --keep-prompts)
MAX_EXCERPT_CHARS = 300
METRICS: tuple[str, ...] = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s")


def goodput_bounds(plan: AcceptPlan) -> dict[str, float]:
    """Per-request SLO bounds for goodput: the loosest declared ceiling per metric (``vllm bench
    serve --goodput`` takes one bound per metric; a percentile ceiling is a bound on most
    requests)."""
    out: dict[str, float] = {}
    for metric, ceilings in (("ttft_s", plan.stop.ttft_s), ("tpot_s", plan.stop.tpot_s)):
        values = [v for _, v in ceilings.items()]
        if values:
            out[metric] = max(values)
    return out


def _meets(rec: RequestRecord, bounds: dict[str, float]) -> bool:
    for metric, bound in bounds.items():
        value = getattr(rec, metric)
        if value is None or value > bound:
            return False
    return True


def _values(records: Sequence[RequestRecord], metric: str) -> list[float]:
    out: list[float] = []
    for rec in records:
        if rec.status != "ok":
            continue
        if metric == "itl_s":  # inter-token latencies from the token times, where recorded
            times = rec.token_times_s
            out.extend(float(b - a) for a, b in itertools.pairwise(times))
            continue
        value = getattr(rec, metric)
        if value is not None:
            out.append(float(value))
    return out


def _series(runs: Sequence[CellRun]) -> TimeSeries:
    """The first repetition's KV usage and queue over time, thinned to MAX_SERIES_POINTS."""
    if not runs:
        return TimeSeries()
    by_name: dict[str, list[tuple[float, float]]] = {}
    for sample in runs[0].samples:
        by_name.setdefault(sample.name, []).append((sample.timestamp_s, sample.value))
    kv = by_name.get("kv_usage", [])
    step = max(1, int(np.ceil(len(kv) / MAX_SERIES_POINTS)))

    def thin(name: str) -> list[float]:
        return [round(v, 6) for _, v in by_name.get(name, [])[::step]]

    return TimeSeries(
        t_s=[round(t, 6) for t, _ in kv[::step]],
        kv_usage=thin("kv_usage"),
        num_running=thin("num_running"),
        num_waiting=thin("num_waiting"),
    )


def _thin(values: list[float]) -> list[float]:
    if len(values) <= MAX_RAW_SAMPLES:
        return [round(v, 6) for v in values]
    idx = np.linspace(0, len(values) - 1, MAX_RAW_SAMPLES).astype(int)
    return [round(values[i], 6) for i in idx]


def _per_repetition(runs: Sequence[CellRun]) -> list[dict[str, float | None]]:
    out: list[dict[str, float | None]] = []
    for run in runs:
        recs = [r for r in run.records if not r.warmup]
        row: dict[str, float | None] = {"n": float(sum(1 for r in recs if r.status == "ok"))}
        for metric in ("ttft_s", "tpot_s"):
            values = _values(recs, metric)
            for q in (50, 95):
                key = f"{metric.split('_')[0]}_p{q}_s"
                row[key] = float(np.percentile(values, q)) if values else None
        out.append(row)
    return out


#: a repetition that ended before this share of its declared duration was cut short
CUT_SHORT_SHARE = 0.9


def cut_short_note(plan: AcceptPlan, concurrency_tier: str, runs: Sequence[CellRun]) -> str | None:
    """Says when ``load.max_requests_per_cell`` ended the cell before its declared duration."""
    tier = plan.load.concurrency.get(concurrency_tier)  # type: ignore[call-overload]
    cap = plan.load.max_requests_per_cell
    if tier is None or not runs:
        return None
    ran = [run.duration_s for run in runs]
    sent = [sum(1 for r in run.records if not r.warmup) for run in runs]
    if max(ran) >= CUT_SHORT_SHARE * tier.duration_s or max(sent) < cap:
        return None
    return (
        f"cut short by load.max_requests_per_cell ({cap} per repetition): ran "
        f"{min(ran):.3g}-{max(ran):.3g} s of the declared {tier.duration_s:g} s"
        if len(ran) > 1 and min(ran) != max(ran)
        else f"cut short by load.max_requests_per_cell ({cap} per repetition): ran "
        f"{max(ran):.3g} s of the declared {tier.duration_s:g} s"
    )


def prompt_lengths_in_tier(
    plan: AcceptPlan, input_tier: str, records: Sequence[RequestRecord]
) -> dict[str, Any]:
    """Do the prompts, as the target counted them (``usage.prompt_tokens``), fall inside the
    input tier's ``[min_tokens, max_tokens]``? Quality-checkpoint prompts are not tier prompts."""
    tier = next((t for name, t in plan.load.tiers.items() if name == input_tier), None)
    counted = [
        r.prompt_tokens
        for r in records
        if r.prompt_tokens is not None and RequestKey.decode(r.request_id).checkpoint is None
    ]
    if tier is None or not counted:
        return {}
    inside = [tier.min_tokens <= n <= tier.max_tokens for n in counted]
    return {
        "min_tokens": tier.min_tokens,
        "max_tokens": tier.max_tokens,
        "num_counted": len(counted),
        "num_in_bounds": sum(inside),
        "min_counted": min(counted),
        "max_counted": max(counted),
        "within": all(inside),
        "source": records[0].token_count_source or records[0].source,
    }


def cell_summaries(
    runs: Sequence[CellRun],
    rng: np.random.Generator,
    percentiles: Sequence[float] = PERCENTILES,
) -> dict[str, MetricSummary]:
    """Each metric's summary over a cell's repetitions (warm-up records left out), holding
    ``percentiles`` beside p50/p90/p95/p99: what :func:`summarize_cell` reports and what
    ``kvbudget report --metric-percentiles`` recomputes from ``records.jsonl``. ``rng`` feeds
    the bootstrap CIs (one draw per metric with samples, whatever the percentiles)."""
    records = [r for run in runs for r in run.records if not r.warmup]
    return {
        m: summarize(_values(records, m), rng, metric=m, percentiles=percentiles) for m in METRICS
    }


def summarize_cell(
    plan: AcceptPlan,
    *,
    cell_id: str,
    order: int,
    runs: Sequence[CellRun],
    kind: FigureKind,
    synthetic_text: bool,
    rng: np.random.Generator,
    skipped_reason: str | None = None,
    percentiles: Sequence[float] = PERCENTILES,
) -> tuple[CellResult, CellEvidence]:
    """Summaries, checks and verdict of one cell over its repetitions; each metric's summary
    holds ``percentiles`` (``--metric-percentiles``) beside p50/p90/p95/p99."""
    input_tier, concurrency_tier = cell_id.split("/", 1)
    records = [r for run in runs for r in run.records if not r.warmup]
    summaries = cell_summaries(runs, rng, percentiles)
    capacity_error = next((run.capacity_error for run in runs if run.capacity_error), None)
    num_oom = sum(1 for r in records if r.error_kind == "oom")
    num_error = sum(1 for r in records if r.status == "error")
    outcomes = []
    for checkpoint in plan.quality:
        if input_tier not in checkpoint.tiers or skipped_reason is not None or not records:
            continue
        outputs: list[str | None] = [
            text
            for run in runs
            for rid, text in run.outputs.items()
            if RequestKey.decode(rid).checkpoint == checkpoint.id
        ]
        outcomes.append(evaluate_checkpoint(checkpoint, outputs, simulated=synthetic_text))
    evidence = CellEvidence(
        cell_id=cell_id,
        kind=kind,
        num_requests=len(records),
        num_error=num_error,
        num_oom=num_oom,
        capacity_error=capacity_error,
        skipped_reason=skipped_reason,
        summaries=summaries,
        quality=tuple(outcomes),
    )
    tier_summary = summarize_tiers(runs)
    checks = cell_checks(plan.stop, evidence) + tier_checks(
        plan, tier_summary, kind if records else None
    )
    verdict, reasons = cell_verdict(checks)
    notes = [n for n in (cut_short_note(plan, concurrency_tier, runs),) if n is not None]
    duration = sum(run.duration_s for run in runs)
    ok = [r for r in records if r.status == "ok"]
    throughput: dict[str, float] = {}
    bounds = goodput_bounds(plan)
    num_good = sum(1 for r in ok if _meets(r, bounds))
    # the one definition (kvbudget.metrics.throughput): each repetition's first send to last
    # finish, windows added over the repetitions
    pooled = throughput_of_runs([run.records for run in runs])
    if pooled.requests_per_s is not None and pooled.output_tokens_per_s is not None:
        throughput = {
            "requests_per_s": pooled.requests_per_s,
            "output_tokens_per_s": pooled.output_tokens_per_s,
            "goodput_requests_per_s": num_good / pooled.window_s,
        }
    cached = [r for r in ok if r.cached_tokens is not None]
    output_counts = [r.output_tokens for r in ok]
    queries = sum(run.counters.get("prefix_queries_tokens", 0.0) for run in runs)
    hits = sum(run.counters.get("prefix_hits_tokens", 0.0) for run in runs)
    kv_peaks = [s.value for run in runs for s in run.samples if s.name == "kv_usage"]
    after = [run.kv_usage_after_drain for run in runs if run.kv_usage_after_drain is not None]
    prompt_tokens = [r.prompt_tokens for r in records if r.prompt_tokens is not None]
    excerpts = [
        f"{rid}: {text[:MAX_EXCERPT_CHARS]}"
        for run in runs
        if run.show_outputs
        for rid, text in sorted(run.outputs.items())
    ]
    result = CellResult(
        cell_id=cell_id,
        input_tier=input_tier,
        concurrency_tier=concurrency_tier,
        order=order,
        verdict=verdict,
        reasons=reasons,
        checks=checks,
        kind=kind if records else None,
        repetitions=len(runs),
        num_requests=len(records),
        num_ok=len(ok),
        num_error=num_error,
        num_cancelled=sum(1 for r in records if r.status == "cancelled"),
        num_oom=num_oom,
        num_preemptions=int(sum(run.counters.get("preemptions", 0.0) for run in runs)),
        error_rate=(num_error / len(records)) if records else None,
        prompt_tokens_mean=float(np.mean(prompt_tokens)) if prompt_tokens else None,
        prompt_tokens_in_tier=prompt_lengths_in_tier(plan, input_tier, records),
        summaries=summaries if records else {},
        throughput=throughput,
        prefix_hit_rate_tokens=(hits / queries) if queries > 0 else None,
        peak_kv_usage=max(kv_peaks) if kv_peaks else None,
        kv_tier=tier_summary,
        kv_usage_after_drain=max(after) if after else None,
        timeseries=_series(runs),
        samples_ttft_s=_thin(_values(records, "ttft_s")),
        samples_tpot_s=_thin(_values(records, "tpot_s")),
        quality=[
            {"checkpoint": o.checkpoint_id, "verdict": o.verdict, "reason": o.reason}
            for o in outcomes
        ],
        output_excerpts=excerpts,
        per_repetition=_per_repetition(runs),
        notes=notes,
        duration_s=duration,
        num_good=num_good,
        goodput_bounds=bounds,
        prefix_queries_tokens=queries,
        prefix_hits_tokens=hits,
        num_prefix_hit_requests=sum(1 for r in cached if (r.cached_tokens or 0) > 0),
        num_prefix_requests=len(cached),
        prompt_tokens_min=min(prompt_tokens) if prompt_tokens else None,
        prompt_tokens_max=max(prompt_tokens) if prompt_tokens else None,
        output_tokens_mean=float(np.mean(output_counts)) if output_counts else None,
    )
    return result, evidence
