"""``pareto.svg``: cost (or GPUs) against TTFT p99 and TPOT p99, one colour per arrival rate.

x is the cost per million output tokens when the grid prices every simulated point's GPU,
else the number of GPUs (tp x replicas). Each rate's Pareto front (no other point at that
rate is both cheaper and faster) is drawn as a step line; each SLO's p99 ceiling is a dashed
line. Points where some request did not finish are left out (their percentiles describe only
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


def render_pareto(rows: Sequence[dict[str, Any]], grid: GridFile) -> str:
    """The chart as an SVG document (text)."""
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
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6))
    for ax, metric, label, scale in (
        (axes[0], "ttft_p99_s", "TTFT p99 (s)", 1.0),
        (axes[1], "tpot_p99_s", "TPOT p99 (ms)", 1e3),
    ):
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
        for slo in grid.slos:
            ceiling = (slo.ttft_s if metric.startswith("ttft") else slo.tpot_s).p99
            if ceiling is not None:
                ax.axhline(ceiling * scale, color="0.4", ls="--", lw=0.8)
                ax.annotate(
                    f"SLO {slo.name} p99",
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


def write_pareto(path: Path, rows: Sequence[dict[str, Any]], grid: GridFile) -> None:
    path.write_text(render_pareto(rows, grid), encoding="utf-8")
