"""What ``kvbudget deploy`` renders from: an acceptance plan (YAML) or an accepted report.json.

Every number the manifests and alerts use is a :class:`Figure` that says what it is and where it
came from: ``measured`` / ``simulated`` (an accepted cell, its provenance named), ``computed``
(kvbudget's arithmetic), ``declared`` (the plan file) or ``assumed`` (a stated default, with the
flag that overrides it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kvbudget.accept.plan.planfile import AcceptPlan, load_plan, parse_plan
from kvbudget.accept.result import AcceptResult, CellResult
from kvbudget.accept.result_load import load_accept_result
from kvbudget.errors import ConfigError

FigureKind = Literal["measured", "simulated", "computed", "declared", "assumed"]


@dataclass(frozen=True, slots=True)
class Figure:
    value: float
    kind: FigureKind
    source: str

    def text(self, unit: str = "") -> str:
        return f"{self.value:g}{unit} ({self.kind}: {self.source})"


@dataclass(frozen=True, slots=True)
class DeploySource:
    path: Path
    origin: Literal["plan", "accepted report"]
    plan: AcceptPlan
    result: AcceptResult | None = None

    @property
    def verdict(self) -> str | None:
        return None if self.result is None else self.result.verdict

    @property
    def cell_kind(self) -> FigureKind:
        """What the accepted cells' figures are (simulated or measured)."""
        if self.result is None:
            return "computed"
        return "measured" if self.result.provenance.kind == "measured" else "simulated"

    @property
    def provenance(self) -> str:
        if self.result is None:
            return "plan only: no cell was run; thresholds are the plan's declared ceilings"
        p = self.result.provenance
        if p.kind == "simulated":
            return f"simulated (timing model {p.timing_model})"
        return f"measured ({p.engine} {p.engine_version or ''} on {p.hardware or 'unknown'})"


def load_source(path: Path, *, allow_failed: bool = False) -> DeploySource:
    """Read a plan YAML or an accept report.json; one-line error on any problem (a report is
    read by :func:`kvbudget.accept.result_load.load_accept_result`, as ``kvbudget report``
    reads it)."""
    if not path.is_file():
        raise ConfigError(
            f"PLAN_OR_REPORT: {str(path)!r} not found; give an acceptance plan (YAML) or an "
            "accepted report.json",
            field="PLAN_OR_REPORT",
        )
    if path.suffix.lower() != ".json":
        return DeploySource(path=path, origin="plan", plan=load_plan(path))
    result = load_accept_result(path)
    if result.verdict == "fail" and not allow_failed:
        raise ConfigError(
            f"{path.name}: verdict is fail ({'; '.join(result.verdict_reasons[:2])}); deploy "
            "renders accepted budgets only (pass --allow-failed to render it anyway)",
            field="verdict",
        )
    plan = parse_plan(result.plan, origin=path.name)
    return DeploySource(path=path, origin="accepted report", plan=plan, result=result)


def _passing(src: DeploySource) -> list[CellResult]:
    """Cells inside the accepted envelope: served requests and failed no check.

    A simulated cell is ``untested`` (its quality cannot be judged on synthetic text) yet its
    latency and capacity checks may all have passed; such a cell counts, a failed one never.
    """
    assert src.result is not None
    return [
        c
        for c in src.result.cells
        if c.num_ok > 0 and c.verdict != "fail" and not any(ch.verdict == "fail" for ch in c.checks)
    ]


def _cell_pct(cells: list[CellResult], metric: str) -> tuple[float, str, str] | None:
    """Largest p99 (else p95, else p50) of a metric over cells: (value, pct, cell)."""
    for pct in ("p99", "p95", "p50"):
        best: tuple[float, str, str] | None = None
        for cell in cells:
            summary = cell.summaries.get(metric)
            value = None if summary is None else summary.pct(pct)
            if value is not None and (best is None or value > best[0]):
                best = (value, pct, cell.cell_id)
        if best is not None:
            return best
    return None


def e2e_p99(src: DeploySource) -> Figure:
    """Longest request the service must let finish on shutdown (accepted p99 end-to-end)."""
    if src.result is not None:
        found = _cell_pct(_passing(src), "e2e_s")
        if found is not None:
            value, pct, cell = found
            note = "" if pct == "p99" else f" ({pct}: too few samples for p99)"
            return Figure(value, src.cell_kind, f"accepted cell {cell} e2e {pct}{note}")
    stop = src.plan.stop
    ttft = max((v for _, v in stop.ttft_s.items()), default=None)
    tpot = max((v for _, v in stop.tpot_s.items()), default=None)
    out_tokens = max(t.output_tokens for t in src.plan.load.tiers.values())
    if ttft is not None and tpot is not None:
        value = ttft + tpot * out_tokens
        return Figure(
            value,
            "computed",
            f"plan ceilings: TTFT {ttft:g} s + TPOT {tpot:g} s x {out_tokens} output tokens",
        )
    return Figure(600.0, "assumed", "no accepted e2e and no TTFT+TPOT ceilings: 600 s")


def ceiling(src: DeploySource, metric: Literal["ttft_s", "tpot_s"]) -> tuple[str, float] | None:
    """The plan's highest declared percentile ceiling (p99 preferred) for a metric."""
    items = dict(getattr(src.plan.stop, metric).items())
    for pct in ("p99", "p95", "p90", "p50"):
        if pct in items:
            return pct, items[pct]
    return None


#: alert thresholds sit this far above what the highest accepted load showed
CAPACITY_HEADROOM = 0.20


def accepted_capacity_cell(src: DeploySource) -> CellResult | None:
    """The passing cell that served the most requests per second: the highest load the report
    accepted (its alerts' reference, rather than whichever cell had the largest figure)."""
    if src.result is None:
        return None
    best: tuple[float, CellResult] | None = None
    for cell in _passing(src):
        rate = cell.throughput.get("requests_per_s")
        if rate is not None and math.isfinite(rate) and (best is None or rate > best[0]):
            best = (rate, cell)
    return None if best is None else best[1]


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def waiting_threshold(src: DeploySource) -> Figure:
    """Requests waiting per replica that page: the p95 of the waiting samples of the highest
    accepted load, plus ``CAPACITY_HEADROOM``, rounded up, at least 1 (a queue the accepted
    capacity itself showed is not an incident)."""
    cell = accepted_capacity_cell(src)
    series = [] if cell is None else list(cell.timeseries.num_waiting)
    if cell is None or not series:
        return Figure(
            1.0, "assumed", "1 request (no accepted load with waiting samples): a sustained queue"
        )
    p95 = _p95(series)
    value = float(max(1, math.ceil(p95 * (1 + CAPACITY_HEADROOM))))
    return Figure(
        value,
        src.cell_kind,
        f"ceil(p95 {p95:.3g} of num_waiting in accepted cell {cell.cell_id}, the highest "
        f"accepted load at {cell.throughput['requests_per_s']:.3g} req/s, x "
        f"{1 + CAPACITY_HEADROOM:g}), at least 1",
    )


def preemption_threshold(src: DeploySource) -> Figure:
    """Preemptions per second that page: the rate of the highest accepted load, plus
    ``CAPACITY_HEADROOM`` (0 when it preempted nothing: sustained preemptions at any rate then
    mean more load than was accepted)."""
    cell = accepted_capacity_cell(src)
    if cell is None:
        return Figure(0.0, "assumed", "none accepted: any sustained preemption")
    t = cell.timeseries.t_s
    span = (t[-1] - t[0]) if len(t) >= 2 else cell.duration_s
    rate = cell.num_preemptions / span if span > 0 else 0.0
    return Figure(
        rate * (1 + CAPACITY_HEADROOM),
        src.cell_kind,
        f"{rate:.3g}/s preempted in accepted cell {cell.cell_id} (the highest accepted load, "
        f"{cell.throughput['requests_per_s']:.3g} req/s) x {1 + CAPACITY_HEADROOM:g}",
    )


def accepted_peak(src: DeploySource, field: str) -> Figure | None:
    """The largest mean of a timeseries (num_waiting, kv_usage) over passing cells."""
    if src.result is None:
        return None
    best: tuple[float, str] | None = None
    for cell in _passing(src):
        series = getattr(cell.timeseries, field)
        if series:
            mean = sum(series) / len(series)
            if best is None or mean > best[0]:
                best = (mean, cell.cell_id)
    if best is None:
        return None
    return Figure(best[0], src.cell_kind, f"mean {field} of accepted cell {best[1]}")


def accepted_queue_p99(src: DeploySource) -> Figure | None:
    if src.result is None:
        return None
    found = _cell_pct(_passing(src), "queue_s")
    if found is None:
        return None
    value, pct, cell = found
    return Figure(value, src.cell_kind, f"accepted cell {cell} queue {pct}")


def measured_ready_s(src: DeploySource) -> Figure | None:
    """Time to ready of the report's rollback drill, when one was measured."""
    if src.result is None:
        return None
    drill: dict[str, Any] = getattr(src.result, "rollback_drill", {}) or {}
    value = drill.get("time_to_ready_s")
    if isinstance(value, (int, float)) and math.isfinite(value) and drill.get("kind") == "measured":
        return Figure(float(value), "measured", f"rollback drill ({drill.get('target', '?')})")
    return None
