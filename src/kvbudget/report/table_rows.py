"""The acceptance report's tables as rows of plain cell text, and the phrases in them: one
source for ``report.md``, ``report.html``, the terminal summary and the charts (each escapes
for its own format)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvbudget.accept.result import AcceptResult, CellResult, ComparisonResult
from kvbudget.units import format_bytes


def figure_text(value: float | None, scale: float = 1.0, unit: str = "s") -> str:
    if value is None:
        return "—"
    return f"{value * scale:.3g} {unit}"


#: seconds below this are float residue of subtracting equal times (sim clock), shown as 0
_RESIDUE_S = 1e-9


def seconds_text(value: float) -> str:
    """A figure in seconds to 4 significant digits; float residue (``7.1e-15``) shows as 0."""
    return "0" if abs(value) < _RESIDUE_S else f"{value:.4g}"


def pairs_text(values: dict[str, Any]) -> str:
    """``requests 8, scored no, duration_s 0.314`` from a flat mapping (no Python repr)."""
    if not values:
        return "not recorded"
    parts = []
    for key, value in values.items():
        if isinstance(value, bool):
            shown = "yes" if value else "no"
        elif isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
            shown = str(int(value))  # a count sent as a float (27578.0) reads as a count
        elif isinstance(value, float):
            shown = f"{value:.4g}"
        else:
            shown = str(value)
        parts.append(f"{key} {shown}")
    return ", ".join(parts)


def value_text(value: object) -> str:
    """A lock or ledger value as a reader writes it: ``—`` for none, lists and mappings without
    Python quoting (``--a --b``, ``enabled: true, salt: per-tenant``)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return " ".join(value_text(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {value_text(v)}" for k, v in value.items())
    return str(value)


def split_verdicts(cell: CellResult) -> tuple[str, str]:
    """(latency/capacity verdict, quality verdict) of a cell, from its checks."""
    perf = [c.verdict for c in cell.checks if not c.is_quality]
    qual = [c.verdict for c in cell.checks if c.is_quality]

    def worst(vs: Sequence[str]) -> str:
        order = {"pass": 0, "untested": 1, "not_comparable": 2, "fail": 3}
        return max(vs, key=lambda v: order[v]) if vs else "—"

    return worst(perf), worst(qual)


#: the percentiles a report shows per cell when its document does not say (older reports)
DEFAULT_SHOWN = (50.0, 90.0, 95.0, 99.0)


def shown_percentiles(percentiles: Sequence[float] = DEFAULT_SHOWN) -> list[str]:
    """The percentile keys of the per-cell table: the median (p50) first, then the others of
    ``percentiles`` (the document's ``metric_percentiles``: ``--metric-percentiles``)."""
    return ["p50", *(f"p{q:g}" for q in sorted(set(percentiles)) if q != 50.0)]


def percentile_rows(
    cell: CellResult, percentiles: Sequence[float] = DEFAULT_SHOWN
) -> list[list[str]]:
    """One row per metric: n, the mean, then the median and each other percentile of
    ``percentiles`` as ``value [low, high]`` (seconds); ``—`` where the data does not exist."""
    rows = []
    for metric, summary in cell.summaries.items():
        row = [metric, str(summary.n), "—" if summary.mean is None else seconds_text(summary.mean)]
        for key in shown_percentiles(percentiles):
            est = summary.percentiles.get(key)
            if est is None:
                row.append("—")
            elif est.low is None or est.high is None:
                row.append(seconds_text(est.value))
            else:
                row.append(
                    f"{seconds_text(est.value)} [{seconds_text(est.low)}, {seconds_text(est.high)}]"
                )
        row.append("; ".join(summary.warnings))
        rows.append(row)
    return rows


def pct_header(percentiles: Sequence[float] = DEFAULT_SHOWN) -> list[str]:
    """The per-cell percentile table's header for ``percentiles``."""
    return [
        "metric (s)",
        "n",
        "mean",
        "median (p50) [95% CI]",
        *shown_percentiles(percentiles)[1:],
        "small-sample warnings",
    ]


REP_HEADER = ["repetition", "n", "TTFT p50", "TTFT p95", "TPOT p50", "TPOT p95"]


def repetition_rows(cell: CellResult) -> list[list[str]]:
    """Each repetition's own percentiles (seconds), to show how repeatable the cell is."""
    rows = []
    for i, rep in enumerate(cell.per_repetition):
        row = [str(i), f"{rep.get('n') or 0:.0f}"]
        for key in ("ttft_p50_s", "ttft_p95_s", "tpot_p50_s", "tpot_p95_s"):
            value = rep.get(key)
            row.append("—" if value is None else seconds_text(value))
        rows.append(row)
    return rows


def delta_header(percentile: float) -> list[str]:
    return [
        "cell",
        "metric",
        "n (base/variant)",
        f"baseline p{percentile:g}",
        "variant",
        "diff [95% CI]",
        "change",
        "HL shift",
        "p (Holm)",
    ]


def delta_rows(comparison: ComparisonResult) -> list[list[str]]:
    """One row per (cell, metric) of a single-factor comparison (seconds; change in %)."""
    rows = []
    for d in comparison.deltas:
        change = "—"
        if d.pct_diff is not None and d.baseline_pct:
            change = f"{100.0 * d.pct_diff / d.baseline_pct:+.1f} %"
        rows.append(
            [
                d.cell_id,
                d.metric,
                f"{d.n_baseline}/{d.n_variant}",
                figure_text(d.baseline_pct),
                figure_text(d.variant_pct),
                f"{figure_text(d.pct_diff)} [{figure_text(d.pct_diff_low)}, {figure_text(d.pct_diff_high)}]",
                change,
                figure_text(d.hl_shift),
                "—" if d.p_holm is None else f"{d.p_holm:.3g}",
            ]
        )
    return rows


PRED_HEADER = ["cell", "quantity", "predicted", "measured", "relative error"]


def prediction_rows(doc: AcceptResult) -> list[list[str]]:
    """Predicted (calibrated simulator) vs measured, per cell and quantity."""
    rows = []
    for cell in doc.cells:
        for key, q in (cell.prediction.get("quantities") or {}).items():
            err = q.get("relative_error")
            rows.append(
                [
                    cell.cell_id,
                    key,
                    "—" if q.get("predicted") is None else f"{q['predicted']:.4g}",
                    "—" if q.get("measured") is None else f"{q['measured']:.4g}",
                    "—" if err is None else f"{err:+.1%}",
                ]
            )
    return rows


def cell_row(cell: CellResult) -> list[str]:
    perf, qual = split_verdicts(cell)
    ttft = cell.summaries.get("ttft_s")
    tpot = cell.summaries.get("tpot_s")
    t = cell.throughput
    return [
        cell.cell_id,
        cell.verdict.upper(),
        perf,
        qual,
        f"{t['requests_per_s']:.3g}" if "requests_per_s" in t else "—",
        f"{t['output_tokens_per_s']:.4g}" if "output_tokens_per_s" in t else "—",
        f"{t['goodput_requests_per_s']:.3g}" if "goodput_requests_per_s" in t else "—",
        figure_text(ttft.pct("p95") if ttft else None),
        figure_text(tpot.pct("p95") if tpot else None, 1000.0, "ms"),
        str(cell.num_requests),
        figure_text(cell.peak_kv_usage, 100.0, "%"),
        str(cell.num_preemptions),
    ]


TIER_HEADER = [
    "cell",
    "host peak / capacity",
    "host peak",
    "bytes to tiers",
    "bytes reloaded",
    "link busy",
    "reload wait p95",
    "reloads",
]


def tier_rows(doc: AcceptResult) -> tuple[list[list[str]], str]:
    """KV offload tier figures per cell, and their basis ('' when no cell has a tier)."""
    rows: list[list[str]] = []
    basis = ""
    for cell in doc.cells:
        t = cell.kv_tier
        if not t:
            continue
        basis = str(t.get("basis", ""))
        peak = t.get("host_peak_bytes")
        cap = t.get("host_capacity_bytes")
        rows.append(
            [
                cell.cell_id,
                figure_text(t.get("host_peak_fraction"), 100.0, "%"),
                f"{format_bytes(int(peak))} of {format_bytes(int(cap))}"
                if peak is not None and cap is not None
                else "—",
                format_bytes(int(t.get("bytes_written", 0))),
                format_bytes(int(t.get("bytes_read", 0))),
                figure_text(t.get("link_busy_fraction"), 100.0, "%"),
                figure_text(t.get("reload_wait_p95_s")),
                str(int(t.get("num_reloads", 0))),
            ]
        )
    return rows, basis


CELL_HEADER = [
    "cell",
    "verdict",
    "latency/capacity",
    "quality",
    "achieved req/s",
    "output tok/s",
    "goodput req/s",
    "TTFT p95",
    "TPOT p95",
    "requests",
    "peak KV",
    "preempt",
]
