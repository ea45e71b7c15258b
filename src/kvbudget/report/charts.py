"""Charts of an acceptance result as inline SVG strings (matplotlib, Agg backend).

Deterministic output (:mod:`kvbudget.report.chart_style`): a fixed SVG hash salt and no date
metadata, so the same result renders the same bytes. No chart embeds user-supplied free text
except cell ids and metric names.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from kvbudget.accept.result import AcceptResult, CellResult
from kvbudget.report.chart_labels import (
    CONCURRENCY_TIERS,
    LOAD_AXIS,
    cell_grid,
    concurrency_labels,
    figures_kind,
    input_tiers,
    slo_ceilings,
)
from kvbudget.report.chart_style import VERDICT_COLORS, figure_svg, plain_log_axis
from kvbudget.report.table_rows import shown_percentiles

GIB = float(1 << 30)


def verdict_heatmap(doc: AcceptResult) -> str:
    """Nine cells coloured by verdict, annotated with TTFT/TPOT p95."""
    grid = cell_grid(doc.cells)
    tiers = input_tiers(doc)
    fig, ax = plt.subplots(figsize=(12.0, 1.0 * len(tiers)))
    for r, it in enumerate(tiers):
        for c, ct in enumerate(CONCURRENCY_TIERS):
            cell = grid.get((it, ct))
            verdict = cell.verdict if cell else "untested"
            ax.add_patch(Rectangle((c, r), 1, 1, color=VERDICT_COLORS[verdict], alpha=0.85))
            lines: list[str] = [verdict]
            if cell and cell.summaries:
                ttft = cell.summaries.get("ttft_s")
                tpot = cell.summaries.get("tpot_s")
                if ttft and ttft.pct("p95") is not None:
                    lines.append(f"TTFT p95 {ttft.pct('p95'):.3g} s")
                if tpot and tpot.pct("p95") is not None:
                    lines.append(f"TPOT p95 {1000 * (tpot.pct('p95') or 0):.3g} ms")
            ax.text(c + 0.5, r + 0.5, "  ".join(lines), ha="center", va="center", color="white")
    ax.set_xlim(0, 3)
    ax.set_ylim(len(tiers), 0)
    ax.set_xticks([0.5, 1.5, 2.5], concurrency_labels(doc))
    ax.set_yticks([r + 0.5 for r in range(len(tiers))], list(tiers))
    ax.set_xlabel(LOAD_AXIS)
    ax.set_ylabel("input tier")
    ax.set_title(f"Cell verdicts with p95 latencies — {figures_kind(doc)}")
    return figure_svg(fig)


#: markers of the latency chart's percentile series, in order (the median first)
_PCT_MARKERS = ("s", "^", "o", "D", "v", "P", "X", "*")


def latency_vs_load(doc: AcceptResult) -> str:
    """TTFT and TPOT (the median and each percentile of the document's ``metric_percentiles``,
    ``--metric-percentiles``, with 95% CIs) against the concurrency tier, one panel per input
    tier, with the declared ceilings as horizontal lines."""
    pcts = shown_percentiles(doc.metric_percentiles)
    grid = cell_grid(doc.cells)
    tiers = input_tiers(doc)
    fig, axes = plt.subplots(2, len(tiers), figsize=(12.0, 5.6), sharex="col", squeeze=False)
    x = list(range(len(CONCURRENCY_TIERS)))
    for col, it in enumerate(tiers):
        for row, (metric, scale, unit) in enumerate((("ttft_s", 1.0, "s"), ("tpot_s", 1e3, "ms"))):
            ax = axes[row][col]
            seen: list[float] = []
            for i, pct in enumerate(pcts):
                marker = _PCT_MARKERS[i % len(_PCT_MARKERS)]
                ys, lo, hi = [], [], []
                for ct in CONCURRENCY_TIERS:
                    cell = grid.get((it, ct))
                    summary = cell.summaries.get(metric) if cell else None
                    est = summary.percentiles.get(pct) if summary else None
                    v = est.value * scale if est else float("nan")
                    ys.append(v)
                    # a bootstrap interval need not hold its estimate: no negative bar
                    lo.append(max(v - est.low * scale, 0.0) if est and est.low is not None else 0.0)
                    hi.append(
                        max(est.high * scale - v, 0.0) if est and est.high is not None else 0.0
                    )
                label = "median" if pct == "p50" else pct
                ax.errorbar(x, ys, yerr=[lo, hi], marker=marker, capsize=3, label=label)
                seen.extend(y for y in ys if math.isfinite(y) and y > 0)
            for i, (pct, limit) in enumerate(slo_ceilings(doc, metric)):
                ax.axhline(
                    limit * scale,
                    color="#c62828",
                    linestyle=("--", ":", "-.", "-")[i % 4],
                    linewidth=1,
                    label=f"SLO {pct} ≤ {limit * scale:g} {unit}",
                )
            ax.set_title(f"{it}: {metric.split('_')[0].upper()}")
            ax.set_ylabel(f"{metric.split('_')[0].upper()} ({unit})")
            ax.set_xticks(x, concurrency_labels(doc, it))
            if seen:
                ax.set_yscale("log")
                plain_log_axis(ax.yaxis)
            else:
                ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
            ax.legend(fontsize=6, loc="upper left")
            if row == 1:
                ax.set_xlabel("load (achieved = completed requests/s)")
    named = ", ".join(["median", *pcts[1:]])
    fig.suptitle(
        f"Latency against load per input tier ({named} with 95% CIs) — {figures_kind(doc)}"
    )
    fig.tight_layout()
    return figure_svg(fig)


def throughput_vs_concurrency(doc: AcceptResult) -> str:
    """Output tokens/s and the achieved requests/s (goodput dashed) per concurrency tier, each
    tier labelled with the load it offered; an open-loop tier's offered rate is marked beside
    what was achieved."""
    grid = cell_grid(doc.cells)
    xs = list(range(len(CONCURRENCY_TIERS)))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.0, 3.6))
    for it in input_tiers(doc):
        cells = [grid.get((it, ct)) for ct in CONCURRENCY_TIERS]

        def series(key: str, cells: list[CellResult | None] = cells) -> list[float]:
            return [c.throughput.get(key, float("nan")) if c else float("nan") for c in cells]

        left.plot(xs, series("output_tokens_per_s"), marker="o", label=it)
        line = right.plot(xs, series("requests_per_s"), marker="o", label=f"{it} achieved")
        right.plot(
            xs,
            series("goodput_requests_per_s"),
            marker="x",
            linestyle="--",
            color=line[0].get_color(),
            label=f"{it} goodput",
        )
    plan = doc.plan_view
    offered = [
        (x, plan.concurrency_tier(ct).offered_rate_per_s)
        for x, ct in zip(xs, CONCURRENCY_TIERS, strict=True)
    ]
    marks = [(x, r) for x, r in offered if r is not None]
    if marks:
        right.plot(
            [x for x, _ in marks],
            [r for _, r in marks],
            marker="_",
            markersize=22,
            markeredgewidth=2,
            linestyle="none",
            color="black",
            label="offered rate",
        )
    for ax, unit in ((left, "output tokens/s"), (right, "requests/s")):
        ax.set_xticks(xs, concurrency_labels(doc))
        ax.set_xlim(-0.4, len(xs) - 0.6)
        ax.set_xlabel(LOAD_AXIS)
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6)
    left.set_title(f"Output throughput — {figures_kind(doc)}")
    right.set_title("Requests/s achieved (completed) and goodput (meeting every SLO)")
    fig.tight_layout()
    return figure_svg(fig)


def distributions(doc: AcceptResult, metric: str) -> str:
    """Box plots of TTFT (s) or TPOT (ms) per cell (raw samples kept in the document)."""
    attr = "samples_ttft_s" if metric == "ttft_s" else "samples_tpot_s"
    scale, unit = (1.0, "s") if metric == "ttft_s" else (1e3, "ms")
    data = [[v * scale for v in getattr(c, attr)] or [float("nan")] for c in doc.cells]
    labels = [c.cell_id for c in doc.cells]
    name = metric.split("_")[0].upper()
    fig, ax = plt.subplots(figsize=(12.0, 2.8))
    if not any(x > 0 for values in data for x in values):
        # no request succeeded (or none ran): nothing to draw on a log axis, and say so
        ax.text(0.5, 0.5, f"no {metric} samples: no request succeeded", ha="center",
                va="center", transform=ax.transAxes)  # fmt: skip
        ax.set_axis_off()
        return figure_svg(fig)
    ax.boxplot(data, showfliers=True)
    ax.set_xticks(range(1, len(labels) + 1), labels)
    ax.set_yscale("log")
    plain_log_axis(ax.yaxis)
    ax.set_xlabel("cell (input tier / concurrency tier)")
    ax.set_ylabel(f"{name} ({unit}, log scale)")
    ax.set_title(f"{name} distribution per cell — {figures_kind(doc)}")
    return figure_svg(fig)


def timelines(doc: AcceptResult) -> str:
    """KV usage (%) and waiting requests on one time axis per cell (first repetition)."""
    tiers = input_tiers(doc)
    fig, axes = plt.subplots(len(tiers), 3, figsize=(12.0, 2.2 * len(tiers)), squeeze=False)
    grid = cell_grid(doc.cells)
    for r, it in enumerate(tiers):
        for c, ct in enumerate(CONCURRENCY_TIERS):
            ax = axes[r][c]
            cell = grid.get((it, ct))
            ax.set_title(f"{it}/{ct}")
            ax.set_ylim(0, 105)
            ax.set_ylabel("KV use (%)", color="#1565c0")
            ax.set_xlabel("time in cell (s)")
            if cell is None or not cell.timeseries.t_s:
                ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
                continue
            ts = cell.timeseries
            ax.plot(ts.t_s, [100 * v for v in ts.kv_usage], color="#1565c0", linewidth=1)
            twin = ax.twinx()
            twin.plot(ts.t_s, ts.num_waiting, color="#ef6c00", linewidth=0.8)
            twin.set_ylim(0, max(1.0, max(ts.num_waiting, default=0.0) * 1.1))
            twin.set_ylabel("waiting (requests)", color="#ef6c00")
    fig.suptitle(
        f"KV use (blue, left axis) and waiting requests (orange, right axis) over time — "
        f"{figures_kind(doc)}"
    )
    fig.tight_layout()
    return figure_svg(fig)


def budgets(doc: AcceptResult) -> str:
    """The three budgets side by side, in GiB."""
    items = [b for b in doc.ledger.budgets if b.bytes is not None]
    fig, ax = plt.subplots(figsize=(12.0, 2.2))
    names = [b.name.replace("_", " ") for b in items]
    values = [(b.bytes or 0) / GIB for b in items]
    bars = ax.barh(names, values, color=["#6a1b9a", "#1565c0", "#37474f"][: len(items)])
    for bar, value, b in zip(bars, values, items, strict=True):
        ax.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f" {value:.2f} GiB ({b.kind})",
            va="center",
        )
    ax.invert_yaxis()
    ax.set_xlabel("GiB")
    ax.set_ylabel("budget")
    ax.set_title("Structural / engine pool / device peak budgets (computed)")
    return figure_svg(fig)


def ab_deltas(doc: AcceptResult) -> str:
    """Percentile differences (variant - baseline) with their corrected intervals, as a % of the
    baseline percentile so TTFT (seconds) and TPOT (milliseconds) share one axis. Red: slower
    (the corrected interval lies above 0, or a Holm-significant positive shift); green: faster;
    grey: no change after correction."""
    rows = [
        (c.name, d)
        for c in doc.comparisons
        for d in c.deltas
        if d.pct_diff is not None and d.baseline_pct
    ]
    fig, ax = plt.subplots(figsize=(12.0, max(1.6, 0.3 * len(rows) + 1.0)))
    if not rows:
        ax.text(0.5, 0.5, "no comparison ran", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return figure_svg(fig)
    seen: set[str] = set()
    for i, (_, d) in enumerate(rows):
        base = d.baseline_pct or 1.0
        diff = d.pct_diff or 0.0
        low = d.pct_diff_low if d.pct_diff_low is not None else diff
        high = d.pct_diff_high if d.pct_diff_high is not None else diff
        slower = low > 0 or (d.significant and (d.hl_shift or 0) > 0)
        faster = high < 0 or (d.significant and (d.hl_shift or 0) < 0)
        label = "slower" if slower else ("faster" if faster else "no change after correction")
        color = {"slower": "#c62828", "faster": "#2e7d32"}.get(label, "#616161")
        ax.errorbar(
            [100.0 * diff / base],
            [i],
            xerr=[[100.0 * max(diff - low, 0) / base], [100.0 * max(high - diff, 0) / base]],
            fmt="o",
            color=color,
            capsize=3,
            label=None if label in seen else label,
        )
        seen.add(label)
    ax.axvline(0, color="black", linewidth=0.6)
    ax.set_yticks(range(len(rows)), [f"{n}: {d.metric} {d.cell_id}" for n, d in rows])
    ax.invert_yaxis()
    confidence = rows[0][1].ci_confidence
    ax.set_xlabel(
        f"variant - baseline at the declared percentile (% of baseline), "
        f"{100 * confidence:.3g}% corrected interval"
    )
    ax.set_ylabel("comparison: metric, cell")
    ax.legend(fontsize=7, loc="best")
    ax.set_title(f"A/B deltas with corrected intervals — {figures_kind(doc)}")
    return figure_svg(fig)


CHARTS: dict[str, tuple[str, Callable[[AcceptResult], str]]] = {
    "latency": ("Latency against load per input tier, with the SLO lines", latency_vs_load),
    "throughput": (
        "Throughput against load (achieved requests/s, the offered rate marked)",
        throughput_vs_concurrency,
    ),
    "heatmap": ("Cell verdicts and p95 latencies", verdict_heatmap),
    "ttft": ("TTFT distribution per cell", lambda d: distributions(d, "ttft_s")),
    "tpot": ("TPOT distribution per cell", lambda d: distributions(d, "tpot_s")),
    "timeline": ("KV usage and queue over time", timelines),
    "budgets": ("The three budgets", budgets),
    "ab": ("A/B deltas with intervals", ab_deltas),
}


def render_charts(doc: AcceptResult) -> dict[str, str]:
    """Every chart, keyed by its id."""
    return {key: fn(doc) for key, (_, fn) in CHARTS.items()}
