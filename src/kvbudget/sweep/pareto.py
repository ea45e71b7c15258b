"""``pareto.svg``: cost (or GPUs) against TTFT and TPOT, one colour per arrival rate.

x is the cost per million output tokens when the grid prices every simulated point's GPU,
else the number of GPUs (tp x replicas). y is p99 of TTFT and of TPOT, or, with ``--slo``, the
statistic its term on that metric names (``ttft_p95<1s`` plots TTFT p95); an ``--slo`` term on
ITL or E2E adds a panel. Each rate's Pareto front (no other point at that rate is both cheaper
and faster) is drawn as a step line; each ceiling at the plotted statistic (``--slo``'s, and a
grid SLO's) is a dashed line with its name. Points where some request did not finish are left out (their percentiles describe only
the requests that did). A self-contained SVG (matplotlib, Agg; text as SVG text, no external
references, no date), the same rows giving the same bytes.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvbudget.sweep.grid import GridFile


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-dominated points (lower x and lower y are better), sorted by x."""
    front: list[tuple[float, float]] = []
    best_y = float("inf")
    for x, y in sorted(points):
        if y < best_y:
            front.append((x, y))
            best_y = y
    return front


def _x_axis(rows: Sequence[dict[str, Any]]) -> tuple[str, str]:
    if rows and all(r.get("cost_usd_per_million_output_tokens") is not None for r in rows):
        return "cost_usd_per_million_output_tokens", "USD per million output tokens"
    return "num_gpus", "GPUs (tp x replicas)"


#: panel label and scale of each latency metric (TPOT and ITL in ms)
_METRICS = {"ttft": ("TTFT", "s", 1.0), "tpot": ("TPOT", "ms", 1e3), "itl": ("ITL", "ms", 1e3)}
_METRICS["e2e"] = ("E2E", "s", 1.0)


def panels(
    grid: GridFile, slo: str | None = None
) -> list[tuple[str, str, list[tuple[str, float]]]]:
    """(row key, y label, [(line label, ceiling in s)]) of each panel.

    TTFT and TPOT always, and each metric ``slo`` names; a panel's statistic is ``slo``'s first
    term on that metric (else p99), and its lines are the ceilings at that statistic.
    """
    from kvbudget.maxload.slo import parse_slo

    terms = [] if slo is None else [t for t in parse_slo(slo).statistic_terms]
    metrics = ["ttft", "tpot", *(t.metric for t in terms if t.metric not in ("ttft", "tpot"))]
    out: list[tuple[str, str, list[tuple[str, float]]]] = []
    for metric in dict.fromkeys(metrics):
        own = [t for t in terms if t.metric == metric]
        stat = own[0].statistic if own and own[0].statistic else "p99"
        lines = [(f"--slo {t.name}", t.ceiling_s) for t in own if t.statistic == stat]
        for s in grid.slos:
            ceilings = s.ttft_s if metric == "ttft" else s.tpot_s if metric == "tpot" else None
            value = None if ceilings is None else dict(ceilings.items()).get(stat)
            if value is not None:
                lines.append((f"SLO {s.name} {stat}", value))
        name, unit, _ = _METRICS[metric]
        out.append((f"{metric}_{stat}_s", f"{name} {stat} ({unit})", lines))
    return out


def render_pareto(rows: Sequence[dict[str, Any]], grid: GridFile, *, slo: str | None = None) -> str:
    """The chart as an SVG document (text); ``slo`` (``--slo``) sets the statistics plotted and
    draws its ceilings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    plt.rcParams["svg.hashsalt"] = "kvbudget-sweep"
    plt.rcParams["svg.fonttype"] = "none"
    plt.rcParams["font.size"] = 8
    usable = [
        r
        for r in rows
        if r.get("status") == "simulated"
        and r.get("requests_completed") == r.get("requests_total")
        and r.get("ttft_p99_s") is not None
    ]
    xkey, xlabel = _x_axis(usable)
    timing = sorted({str(r.get("timing_model")) for r in usable}) or ["none"]
    rates = sorted({float(r.get("rate_per_s") or 0.0) for r in usable})
    colors = plt.get_cmap("tab10")
    specs = panels(grid, slo)
    fig, axs = plt.subplots(1, len(specs), figsize=(4.5 * len(specs), 3.6), squeeze=False)
    axes = list(axs[0])
    for ax, (metric, label, lines) in zip(axes, specs, strict=True):
        scale = _METRICS[metric.split("_", 1)[0]][2]
        for i, rate in enumerate(rates):
            pts = [
                (float(r[xkey]), float(r[metric]) * scale)
                for r in usable
                if float(r.get("rate_per_s") or 0.0) == rate and r.get(metric) is not None
            ]
            if not pts:
                continue
            color = colors(i % 10)
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, color=color, alpha=0.6, lw=0)
            front = pareto_front(pts)
            ax.step(
                [p[0] for p in front],
                [p[1] for p in front],
                where="post",
                color=color,
                lw=1.2,
                label=(f"{rate:g} req/s" if rate else "closed loop") if ax is axes[0] else None,
            )
        for line_label, ceiling in lines:
            if ceiling is not None:
                ax.axhline(ceiling * scale, color="0.4", ls="--", lw=0.8)
                ax.annotate(
                    f"{line_label} <= {ceiling * scale:g}",
                    (0.01, ceiling * scale),
                    xycoords=("axes fraction", "data"),
                    ha="left",
                    va="bottom",
                    color="0.3",
                )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.grid(True, lw=0.3, alpha=0.5)
        if usable:
            ax.set_yscale("log")
            low, high = ax.get_ylim()
            ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
            # 2 and 5 labelled too on a range of up to three decades (beyond, they crowd)
            if low > 0 and high / low < 1000:
                ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
                ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
            else:
                ax.yaxis.set_minor_formatter(NullFormatter())
    fig.suptitle(
        f"kvbudget sweep: {len(usable)} of {len(rows)} points, simulated "
        f"(timing model: {', '.join(timing)})"
    )
    if rates:
        fig.legend(title="arrival rate\n(Pareto front)", loc="center right", fontsize=7)
        fig.tight_layout(rect=(0.0, 0.0, 0.87, 1.0))
    else:
        fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)


def write_pareto(
    path: Path, rows: Sequence[dict[str, Any]], grid: GridFile, *, slo: str | None = None
) -> None:
    path.write_text(render_pareto(rows, grid, slo=slo), encoding="utf-8")
