"""Charts of an acceptance result as inline SVG strings (matplotlib, Agg backend).

Deterministic output: a fixed SVG hash salt and no date metadata, so the same result renders
the same bytes. No chart embeds user-supplied free text except cell ids and metric names.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from kvbudget.accept.plan_load import CONCURRENCY_TIERS, INPUT_TIERS
from kvbudget.accept.result import AcceptResult, CellResult

VERDICT_COLORS = {
    "pass": "#2e7d32",
    "fail": "#c62828",
    "untested": "#9e9e9e",
    "not_comparable": "#f9a825",
}
GIB = float(1 << 30)

plt.rcParams["svg.hashsalt"] = "kvbudget"
plt.rcParams["svg.fonttype"] = "none"
plt.rcParams["font.size"] = 8


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"^<\?xml[^>]*>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)
    return text


def _grid(cells: list[CellResult]) -> dict[tuple[str, str], CellResult]:
    return {(c.input_tier, c.concurrency_tier): c for c in cells}


def verdict_heatmap(doc: AcceptResult) -> str:
    """Nine cells coloured by verdict, annotated with TTFT/TPOT p95."""
    grid = _grid(doc.cells)
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    for r, it in enumerate(INPUT_TIERS):
        for c, ct in enumerate(CONCURRENCY_TIERS):
            cell = grid.get((it, ct))
            verdict = cell.verdict if cell else "untested"
            ax.add_patch(Rectangle((c, r), 1, 1, color=VERDICT_COLORS[verdict], alpha=0.85))
            lines: list[str] = [verdict]
            if cell and cell.summaries:
                ttft = cell.summaries.get("ttft_s")
                tpot = cell.summaries.get("tpot_s")
                if ttft and ttft.pct("p95") is not None:
                    lines.append(f"TTFT p95 {ttft.pct('p95'):.3g}s")
                if tpot and tpot.pct("p95") is not None:
                    lines.append(f"TPOT p95 {1000 * (tpot.pct('p95') or 0):.3g}ms")
            ax.text(c + 0.5, r + 0.5, "\n".join(lines), ha="center", va="center", color="white")
    ax.set_xlim(0, 3)
    ax.set_ylim(3, 0)
    ax.set_xticks([0.5, 1.5, 2.5], list(CONCURRENCY_TIERS))
    ax.set_yticks([0.5, 1.5, 2.5], list(INPUT_TIERS))
    ax.set_xlabel("concurrency tier")
    ax.set_ylabel("input tier")
    ax.set_title("Nine-cell verdicts (p95 latencies)")
    return _svg(fig)


def distributions(doc: AcceptResult, metric: str) -> str:
    """Box plots of TTFT or TPOT per cell (raw samples kept in the document)."""
    attr = "samples_ttft_s" if metric == "ttft_s" else "samples_tpot_s"
    data = [getattr(c, attr) or [float("nan")] for c in doc.cells]
    labels = [c.cell_id for c in doc.cells]
    fig, ax = plt.subplots(figsize=(7.0, 2.8))
    if not any(x > 0 for values in data for x in values):
        # no request succeeded (or none ran): nothing to draw on a log axis, and say so
        ax.text(0.5, 0.5, f"no {metric} samples: no request succeeded", ha="center",
                va="center", transform=ax.transAxes)  # fmt: skip
        ax.set_axis_off()
        return _svg(fig)
    ax.boxplot(data, showfliers=True)
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel(f"{metric} (s, log)")
    ax.set_title(f"{metric.split('_')[0].upper()} distribution per cell ({doc.provenance.kind})")
    return _svg(fig)


def timelines(doc: AcceptResult) -> str:
    """KV usage and waiting requests over time, one panel per cell (first repetition)."""
    fig, axes = plt.subplots(3, 3, figsize=(8.0, 5.4), sharey=True)
    grid = _grid(doc.cells)
    for r, it in enumerate(INPUT_TIERS):
        for c, ct in enumerate(CONCURRENCY_TIERS):
            ax = axes[r][c]
            cell = grid.get((it, ct))
            ax.set_title(f"{it}/{ct}")
            ax.set_ylim(0, 1.05)
            if cell is None or not cell.timeseries.t_s:
                ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
                continue
            ts = cell.timeseries
            ax.plot(ts.t_s, ts.kv_usage, color="#1565c0", linewidth=1, label="KV usage")
            twin = ax.twinx()
            twin.plot(ts.t_s, ts.num_waiting, color="#ef6c00", linewidth=0.8, label="waiting")
            twin.set_ylim(0, max(1.0, max(ts.num_waiting, default=0.0) * 1.1))
            twin.tick_params(labelsize=6)
    axes[2][1].set_xlabel("time in cell (s)")
    axes[1][0].set_ylabel("KV usage (blue)")
    fig.suptitle("KV usage and queue (orange: waiting requests) over time")
    fig.tight_layout()
    return _svg(fig)


def budgets(doc: AcceptResult) -> str:
    """The three budgets side by side, in GiB."""
    items = [b for b in doc.ledger.budgets if b.bytes is not None]
    fig, ax = plt.subplots(figsize=(5.0, 2.4))
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
    ax.set_title("Structural / engine pool / device peak budgets")
    return _svg(fig)


def ab_deltas(doc: AcceptResult) -> str:
    """Percentile differences (variant - baseline) with bootstrap 95 % intervals, as a % of the
    baseline percentile so TTFT (seconds) and TPOT (milliseconds) share one axis. Red: slower
    (the interval lies above 0, or a significant positive Holm-adjusted shift); green: faster."""
    rows = [
        (c.name, d)
        for c in doc.comparisons
        for d in c.deltas
        if d.pct_diff is not None and d.baseline_pct
    ]
    fig, ax = plt.subplots(figsize=(6.0, max(1.6, 0.32 * len(rows) + 0.8)))
    if not rows:
        ax.text(0.5, 0.5, "no comparison ran", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return _svg(fig)
    for i, (_, d) in enumerate(rows):
        base = d.baseline_pct or 1.0
        diff = d.pct_diff or 0.0
        low = d.pct_diff_low if d.pct_diff_low is not None else diff
        high = d.pct_diff_high if d.pct_diff_high is not None else diff
        slower = low > 0 or (d.significant and (d.hl_shift or 0) > 0)
        faster = high < 0 or (d.significant and (d.hl_shift or 0) < 0)
        color = "#c62828" if slower else ("#2e7d32" if faster else "#616161")
        ax.errorbar(
            [100.0 * diff / base],
            [i],
            xerr=[[100.0 * max(diff - low, 0) / base], [100.0 * max(high - diff, 0) / base]],
            fmt="o",
            color=color,
        )
    ax.axvline(0, color="black", linewidth=0.6)
    ax.set_yticks(range(len(rows)), [f"{n}: {d.metric} {d.cell_id}" for n, d in rows])
    ax.invert_yaxis()
    ax.set_xlabel("variant - baseline at the declared percentile (% of baseline)")
    ax.set_title("A/B deltas with bootstrap 95% intervals")
    return _svg(fig)


CHARTS: dict[str, tuple[str, Callable[[AcceptResult], str]]] = {
    "heatmap": ("Nine-cell verdicts and p95 latencies", verdict_heatmap),
    "ttft": ("TTFT distribution per cell", lambda d: distributions(d, "ttft_s")),
    "tpot": ("TPOT distribution per cell", lambda d: distributions(d, "tpot_s")),
    "timeline": ("KV usage and queue over time", timelines),
    "budgets": ("The three budgets", budgets),
    "ab": ("A/B deltas with intervals", ab_deltas),
}


def render_charts(doc: AcceptResult) -> dict[str, str]:
    """Every chart, keyed by its id."""
    return {key: fn(doc) for key, (_, fn) in CHARTS.items()}
