"""The acceptance result document (``OUT/report.json``), versioned and self-describing.

Every number in it says what it is: ``computed`` (arithmetic: ledger, budgets), ``simulated``
(the simulator, with its timing model named) or ``measured`` (a real engine named with its
version and hardware). ``kvbudget report report.json`` re-renders Markdown and HTML from it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvbudget.accept.audit_sections import AuditsSection
from kvbudget.accept.lifecycle import LifecycleRow, lifecycle_rows
from kvbudget.accept.result_views import (
    PlanView,
    RolesView,
    TargetView,
    TierRowView,
    plan_view,
    roles_view,
    target_view,
    tier_row_view,
)
from kvbudget.records import FigureKind, ResultDocument

Verdict = Literal["pass", "fail", "untested", "not_comparable"]
OverallVerdict = Literal["pass", "fail", "blocked", "untested"]
VERDICT_ORDER: dict[str, int] = {"pass": 0, "untested": 1, "not_comparable": 2, "fail": 3}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LockEntry(_Model):
    field: str
    value: Any = None
    #: ``default``: the plan did not give the field; the value is the schema's default (source)
    status: Literal[
        "confirmed", "requested", "unconfirmed", "not_applicable", "mismatch", "default"
    ]
    source: str | None = None
    note: str | None = None
    observed: Any = None


class Budget(_Model):
    """One of the three budgets (seed: 结构估算 / 引擎缓存池 / 整机峰值)."""

    name: Literal["structural", "engine_pool", "device_peak"]
    bytes: int | None
    kind: FigureKind
    what: str
    note: str | None = None


class LedgerEntry(_Model):
    name: str
    value: Any
    source: str
    kind: FigureKind = "computed"
    note: str | None = None


class Ledger(_Model):
    entries: list[LedgerEntry] = Field(default_factory=list)
    budgets: list[Budget] = Field(default_factory=list)
    pool: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


class PercentileCI(_Model):
    value: float
    low: float | None = None
    high: float | None = None


class MetricSummary(_Model):
    """Percentiles with bootstrap confidence intervals and the sample count."""

    n: int
    mean: float | None = None
    percentiles: dict[str, PercentileCI] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)

    def pct(self, name: str) -> float | None:
        item = self.percentiles.get(name)
        return None if item is None else item.value


#: stop-condition keys (:attr:`Check.stop`, :attr:`StopStatus.name`); latency ones are
#: :func:`latency_stop` (``ttft_s p95``)
STOP_CAPACITY = "capacity error"
STOP_ERROR_RATE = "error rate"
STOP_OOM = "OOM"
STOP_QUALITY = "quality failure"
STOP_HOST_MEMORY = "host memory"
STOP_TRANSFER = "transfer"


def latency_stop(metric: str, pct: str) -> str:
    """The key of a latency ceiling: ``ttft_s p95``."""
    return f"{metric} {pct}"


def _stop_of_old_check(name: str) -> str | None:
    """The stop key of a check in a document written before checks carried one (read once,
    here, from the display name those versions wrote)."""
    head = name.split(" ", 2)
    if head[0] in ("ttft_s", "tpot_s") and len(head) > 1:
        return latency_stop(head[0], head[1])
    for prefix, stop in (
        ("quality ", STOP_QUALITY),
        ("capacity", STOP_CAPACITY),
        ("error rate", STOP_ERROR_RATE),
        ("no OOM", STOP_OOM),
        ("host memory", STOP_HOST_MEMORY),
        ("transfer", STOP_TRANSFER),
    ):
        if name.startswith(prefix):
            return stop
    return None


class Check(_Model):
    """One judged condition of a cell, with the numbers behind it."""

    name: str
    verdict: Verdict
    reason: str
    observed: float | None = None
    limit: float | None = None
    kind: FigureKind | None = None
    #: the stop condition this check counts toward (a ``STOP_*`` key or :func:`latency_stop`);
    #: None for a check that judges none (``ran``, a canary's regression checks)
    stop: str | None = None

    @property
    def is_quality(self) -> bool:
        return self.stop == STOP_QUALITY


class TimeSeries(_Model):
    t_s: list[float] = Field(default_factory=list)
    kv_usage: list[float] = Field(default_factory=list)
    num_running: list[float] = Field(default_factory=list)
    num_waiting: list[float] = Field(default_factory=list)


class CellResult(_Model):
    cell_id: str
    input_tier: str
    concurrency_tier: str
    order: int
    verdict: Verdict
    reasons: list[str]
    checks: list[Check] = Field(default_factory=list)
    kind: FigureKind | None = None
    repetitions: int = 0
    num_requests: int = 0
    num_ok: int = 0
    num_error: int = 0
    num_cancelled: int = 0
    num_oom: int = 0
    num_preemptions: int = 0
    error_rate: float | None = None
    prompt_tokens_mean: float | None = None
    #: the server-counted prompt lengths against the input tier's bounds (see cells.py)
    prompt_tokens_in_tier: dict[str, Any] = Field(default_factory=dict)
    summaries: dict[str, MetricSummary] = Field(default_factory=dict)
    throughput: dict[str, float] = Field(default_factory=dict)
    prefix_hit_rate_tokens: float | None = None
    peak_kv_usage: float | None = None
    kv_usage_after_drain: float | None = None
    #: KV offload tier figures (sim target with target.kv_tiers; see accept.judge.tier_checks)
    kv_tier: dict[str, Any] = Field(default_factory=dict)
    timeseries: TimeSeries = Field(default_factory=TimeSeries)
    samples_ttft_s: list[float] = Field(default_factory=list)
    samples_tpot_s: list[float] = Field(default_factory=list)
    quality: list[dict[str, Any]] = Field(default_factory=list)
    output_excerpts: list[str] = Field(default_factory=list)
    #: each repetition on its own (n, TTFT and TPOT p50/p95): how repeatable the cell is
    per_repetition: list[dict[str, float | None]] = Field(default_factory=list)
    #: calibrated simulator's forecast for a measured cell, with relative errors
    prediction: dict[str, Any] = Field(default_factory=dict)
    #: how the cell ran against its plan (e.g. cut short by max_requests_per_cell)
    notes: list[str] = Field(default_factory=list)
    #: seconds the repetitions ran, summed (the target's clock: virtual for sim)
    duration_s: float = 0.0
    #: requests meeting every per-request SLO bound (``goodput_bounds``, seconds per metric)
    num_good: int = 0
    goodput_bounds: dict[str, float] = Field(default_factory=dict)
    #: prefix cache: tokens looked up / hit (engine counters), requests with any hit / counted
    prefix_queries_tokens: float | None = None
    prefix_hits_tokens: float | None = None
    num_prefix_hit_requests: int = 0
    num_prefix_requests: int = 0
    prompt_tokens_min: int | None = None
    prompt_tokens_max: int | None = None
    output_tokens_mean: float | None = None


class StopStatus(_Model):
    name: str
    declared: str
    status: Literal["not_triggered", "triggered", "untested"]
    cells: list[str] = Field(default_factory=list)
    detail: str = ""


class MetricDelta(_Model):
    cell_id: str
    metric: str
    n_baseline: int
    n_variant: int
    baseline_pct: float | None
    variant_pct: float | None
    pct_diff: float | None
    pct_diff_low: float | None
    pct_diff_high: float | None
    #: the confidence of [pct_diff_low, pct_diff_high]: 1 - alpha / m (Bonferroni over the
    #: comparison's m tests), so the interval is the corrected statistic the verdict reads
    ci_confidence: float = 0.95
    hl_shift: float | None
    p_value: float | None
    p_holm: float | None
    significant: bool


class ComparisonResult(_Model):
    name: str
    factor: str
    verdict: Verdict
    reasons: list[str]
    baseline_value: Any = None
    variant_value: Any = None
    differences: list[str] = Field(default_factory=list)
    #: the engine configuration fields that differ between the two arms as they were started
    engine_changes: list[str] = Field(default_factory=list)
    percentile: float = 95.0
    alpha: float = 0.05
    deltas: list[MetricDelta] = Field(default_factory=list)
    capacity_ratio: float | None = None
    conclusions: dict[str, str] = Field(default_factory=dict)


class Anomaly(_Model):
    code: str
    title: str
    evidence: str
    cells: list[str] = Field(default_factory=list)
    advice: str


class AcceptResult(ResultDocument):
    """The acceptance result (kind ``accept``)."""

    kind: Literal["accept"] = "accept"
    name: str
    seed: int
    plan: dict[str, Any]
    plan_sha256: str
    target: dict[str, Any]
    lock: list[LockEntry]
    blocking: list[str]
    ledger: Ledger
    #: the engine's final resolved values read back over HTTP (EngineReport; {} for sim)
    engine_report: dict[str, Any] = Field(default_factory=dict)
    #: planned pool beside the engine-reported pool: {field, planned, engine_reported, ...}
    pool: list[dict[str, Any]] = Field(default_factory=list)
    baseline: dict[str, Any] = Field(default_factory=dict)
    warmup: dict[str, Any] = Field(default_factory=dict)
    cells: list[CellResult]
    #: per input tier: highest concurrency tier passing on capacity and latency, where it stopped
    rows: list[dict[str, Any]] = Field(default_factory=list)
    stop_conditions: list[StopStatus]
    comparisons: list[ComparisonResult] = Field(default_factory=list)
    anomalies: list[Anomaly] = Field(default_factory=list)
    audits: AuditsSection = Field(default_factory=AuditsSection)
    verdict: OverallVerdict
    verdict_reasons: list[str]
    #: plan warnings shown before the run (a gated percentile out of reach, untestable quality)
    plan_warnings: list[str] = Field(default_factory=list)
    rollback: list[str] = Field(default_factory=list)
    #: the rollback drill (kvbudget.accept.drill): measured time to ready / first ok, verdict
    rollback_drill: dict[str, Any] = Field(default_factory=dict)
    canary: list[str] = Field(default_factory=list)
    #: the percentiles the report shows per cell beside the mean and median
    #: (``--metric-percentiles`` with p50 and p99; older documents: p50/p90/p95/p99)
    metric_percentiles: list[float] = Field(default_factory=lambda: [50.0, 90.0, 95.0, 99.0])
    #: one line when every timed request of the run failed (``kvbudget accept`` then exits 4);
    #: kept out of report.json, whose first verdict reason says it
    run_failure: str | None = Field(default=None, exclude=True)

    # Typed views of the document (kvbudget.accept.result_views), computed from its own fields
    # on each read: a report re-rendered from report.json shows what the run's report showed.

    @property
    def plan_view(self) -> PlanView:
        """The plan's declared load and latency ceilings."""
        return plan_view(self.plan)

    @property
    def target_view(self) -> TargetView:
        """What ran: target kind, figure source, label."""
        return target_view(self.target)

    @property
    def tier_rows(self) -> list[TierRowView]:
        """Per input tier: the highest passing concurrency tier and where the row stopped."""
        return [tier_row_view(row) for row in self.rows]

    @property
    def roles(self) -> RolesView | None:
        """The "who does what" rows for the declared lock and target (None without a lock)."""
        return roles_view(
            self.plan,
            self.target_view,
            [c.peak_kv_usage for c in self.cells if c.peak_kv_usage is not None],
            [c.prefix_hit_rate_tokens for c in self.cells if c.prefix_hit_rate_tokens is not None],
        )

    @property
    def lifecycle(self) -> list[LifecycleRow]:
        """One deletion-and-lifecycle row per storage layer."""
        return lifecycle_rows(self)

    @model_validator(mode="before")
    @classmethod
    def _old_document(cls, data: Any) -> Any:
        """A report.json from before checks carried their stop key gets it from their names."""
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            return data
        cells = [
            {**c, "checks": [_with_stop(ch) for ch in c["checks"]]}
            if isinstance(c, dict) and isinstance(c.get("checks"), list)
            else c
            for c in data["cells"]
        ]
        return {**data, "cells": cells}


def _with_stop(check: Any) -> Any:
    if isinstance(check, dict) and "stop" not in check and isinstance(check.get("name"), str):
        return {**check, "stop": _stop_of_old_check(check["name"])}
    return check
