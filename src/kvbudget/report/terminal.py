"""The verdict table printed at the end of ``kvbudget accept`` / ``kvbudget report``."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvbudget.accept.result import AcceptResult, CellResult
from kvbudget.report.summary import capacity_sentences, peak_throughput
from kvbudget.report.table_rows import CELL_HEADER, cell_row, shown_percentiles

STYLE = {
    "pass": "green",
    "fail": "red",
    "untested": "grey50",
    "not_comparable": "yellow",
    "blocked": "yellow",
}


#: the metrics of the per-cell latency table: (summary key, label, unit, scale)
LATENCY_COLUMNS = (
    ("ttft_s", "TTFT", "s", 1.0),
    ("tpot_s", "TPOT", "ms", 1e3),
    ("itl_s", "ITL", "ms", 1e3),
    ("e2e_s", "E2E", "s", 1.0),
)


def latency_header(percentiles: list[float]) -> list[str]:
    """``TTFT s: mean / median / p90 / p95 / p99`` per metric, after ``cell``."""
    stats = " / ".join(["mean", "median", *shown_percentiles(percentiles)[1:]])
    return ["cell", *(f"{label} {unit}: {stats}" for _, label, unit, _ in LATENCY_COLUMNS)]


def latency_row(cell: CellResult, percentiles: list[float]) -> list[str]:
    """A cell's mean, median and chosen percentiles of each metric, ``—`` where it has none
    (ITL where the target recorded no token times)."""
    out = [cell.cell_id]
    for key, _, _, scale in LATENCY_COLUMNS:
        summary = cell.summaries.get(key)
        if summary is None or not summary.n:
            out.append("—")
            continue
        values = [summary.mean, *(summary.pct(k) for k in shown_percentiles(percentiles))]
        out.append(" / ".join("—" if v is None else f"{v * scale:.3g}" for v in values))
    return out


def print_summary(doc: AcceptResult, paths: dict[str, Path], *, wall_s: float | None) -> None:
    console = Console(width=140)
    table = Table(title=f"{escape(doc.name)} — figures {escape(doc.provenance.label())}")
    for name in CELL_HEADER:
        table.add_column(name)
    for cell in doc.cells:
        row = [escape(x) for x in cell_row(cell)]
        row[1] = f"[{STYLE[cell.verdict]}]{row[1]}[/]"
        table.add_row(*row)
    console.print(table)
    latency = Table(
        title="Latency per cell (mean, median and --metric-percentiles; TPOT and ITL in ms)"
    )
    for name in latency_header(doc.metric_percentiles):
        latency.add_column(escape(name))
    for cell in doc.cells:
        if cell.summaries:
            latency.add_row(*(escape(x) for x in latency_row(cell, doc.metric_percentiles)))
    if latency.row_count:
        console.print(latency)
    for sentence in capacity_sentences(doc):
        console.print(escape(sentence))
    console.print(escape(peak_throughput(doc)))
    for cell in doc.cells:
        for note in cell.notes:
            console.print(f"{escape(cell.cell_id)}: {escape(note)}")
    for warning in doc.plan_warnings:
        console.print(f"plan warning: {escape(warning)}")
    if doc.blocking:
        console.print(
            f"blocking list: {len(doc.blocking)} lock field(s) not confirmed "
            "(see the top of the report)"
        )
    for comp in doc.comparisons:
        console.print(
            f"comparison {escape(comp.name)} ({comp.factor}): {comp.verdict} — "
            f"{escape('; '.join(comp.reasons))}"
        )
    style = STYLE.get(doc.verdict, "white")
    console.print(
        f"[bold {style}]overall verdict: {doc.verdict.upper()}[/] — "
        f"{escape(doc.provenance.label())}"
    )
    for reason in doc.verdict_reasons:
        console.print(f"  - {escape(reason)}")
    if wall_s is not None:
        console.print(f"wall time {wall_s:.1f} s")
    for kind in ("html", "md", "json"):
        if kind in paths:
            console.print(f"report {kind}: {paths[kind]}")
