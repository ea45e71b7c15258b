"""The curve of each SLO figure against load, with the SLO's lines (matplotlib, Agg).

One row per kind of load (Poisson rate, closed-loop concurrency), one column per SLO figure
(each statistic term, and goodput when the SLO sets a floor). Points of the first seed's search:
filled where the point met the whole SLO, hollow where it did not; a cross marks a rate whose
queue grew. The dashed red line is the term's limit; the dotted vertical line the answer. The
title says what the figures are (``simulated``, with the timing model). Deterministic SVG (no
date, fixed hash salt) as :mod:`kvbudget.report.charts` writes it.
"""

from __future__ import annotations

from pathlib import Path

from kvbudget.maxload.point import Point
from kvbudget.maxload.run import Capacity

_MS = 1e3


def _panels(cap: Capacity) -> list[tuple[str, str, float, bool]]:
    """(point key, axis label, limit in axis units, limit is a floor)."""
    out = [(t.key, f"{t.name} (ms)", t.ceiling_s * _MS, False) for t in cap.slo.statistic_terms]
    if cap.slo.goodput_min is not None:
        out.append(
            ("goodput_fraction", "goodput (fraction of requests)", cap.slo.goodput_min, True)
        )
    return out


def _value(point: Point, key: str) -> float | None:
    if key == "goodput_fraction":
        return point.goodput_fraction
    value = point.values.get(key)
    return None if value is None else value * _MS


def write_chart(path: Path, cap: Capacity, *, figures: str) -> None:
    """Write the chart as SVG (``.svg``) or PNG (any other suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(cap)
    rows = [
        ("Poisson rate (requests/s)", cap.rate.points(), cap.rate.main.answer),
        ("closed-loop concurrency", cap.concurrency.points(), cap.concurrency.main.answer),
    ]
    with plt.rc_context({"svg.hashsalt": "kvbudget", "svg.fonttype": "none", "font.size": 8}):
        fig, axes = plt.subplots(
            len(rows), len(panels), figsize=(3.2 * len(panels), 5.4), squeeze=False
        )
        for r, (xlabel, points, answer) in enumerate(rows):
            for c, (key, ylabel, limit, floor) in enumerate(panels):
                ax = axes[r][c]
                for p in points:
                    y = _value(p, key)
                    if y is None:
                        continue
                    marker = "x" if p.queue is not None else "o"
                    face = "#1565c0" if p.meets_slo else "none"
                    ax.plot([p.load], [y], marker=marker, color="#1565c0", mfc=face, ls="none")
                xs = [p.load for p in points if _value(p, key) is not None]
                ys = [_value(p, key) for p in points if _value(p, key) is not None]
                ax.plot(xs, ys, color="#1565c0", lw=0.8)
                ax.axhline(
                    limit, color="#c62828", ls="--", lw=1, label="SLO " + (">=" if floor else "<=")
                )
                if answer is not None:
                    ax.axvline(answer, color="#2e7d32", ls=":", lw=1, label=f"max {answer:.3g}")
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                ax.legend(loc="best", fontsize=7)
        fig.suptitle(f"{cap.slo.text}: each figure against load ({figures})")
        fig.tight_layout()
        if path.suffix.lower() == ".svg":
            fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
        else:
            fig.savefig(path, format="png", dpi=120, metadata={"Software": None})
        plt.close(fig)
