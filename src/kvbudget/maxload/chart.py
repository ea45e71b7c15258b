"""The curve of each SLO figure against load, with the SLO's lines (matplotlib, Agg).

One row per kind of load (Poisson rate, closed-loop concurrency), one column per SLO figure
(each statistic term, and goodput when the SLO sets a floor). Points of the first seed's search, one
colour per probe length (the rate's confirmation runs are longer): filled where the point met
the whole SLO, hollow where it did not; a cross marks a rate whose queue grew, and a hollow
down-pointing triangle (legend "stopped early") a probe stopped before sending all its requests
because the SLO was clearly broken (``--base-url``: :mod:`kvbudget.maxload.early_stop`; its
figures are over the requests sent). The dashed red line is the term's limit; the dotted
vertical line the answer. The
title says what the figures are (``simulated``, with the timing model). Deterministic SVG (no
date, fixed hash salt) as :mod:`kvbudget.report.charts` writes it.
"""

from __future__ import annotations

from pathlib import Path

from kvbudget.maxload.point import Point
from kvbudget.maxload.run import Capacity

_MS = 1e3
#: one colour per probe length (the rate's confirmation runs longer probes)
_COLORS = ("#1565c0", "#6a1b9a", "#ef6c00")
#: the marker of a probe stopped early (the SLO clearly broken before all requests were sent)
STOPPED_MARKER = "v"
STOPPED_LABEL = "stopped early"


def marker(point: Point) -> str:
    """A probe's marker: stopped early, queue grew, else a circle."""
    if point.stopped_early is not None:
        return STOPPED_MARKER
    return "x" if point.queue is not None else "o"


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
        ("offered Poisson rate (requests/s)", cap.rate.points(), cap.rate.main.answer),
        ("closed-loop concurrency", cap.concurrency.points(), cap.concurrency.main.answer),
    ]
    # plain tick labels (40, not 4×10^1 or an offset "+4e1"): every axis here is linear
    with plt.rc_context(
        {
            "svg.hashsalt": "kvbudget",
            "svg.fonttype": "none",
            "font.size": 8,
            "axes.formatter.useoffset": False,
            "axes.formatter.limits": (-9, 9),
        }
    ):
        fig, axes = plt.subplots(
            len(rows), len(panels), figsize=(3.2 * len(panels), 5.4), squeeze=False
        )
        for r, (xlabel, points, answer) in enumerate(rows):
            for c, (key, ylabel, limit, floor) in enumerate(panels):
                ax = axes[r][c]
                sizes = sorted({p.num_requests for p in points})
                stopped = False
                for i, size in enumerate(sizes):
                    color = _COLORS[i % len(_COLORS)]
                    group = [p for p in points if p.num_requests == size]
                    xy = [(p.load, _value(p, key)) for p in group if _value(p, key) is not None]
                    ax.plot(
                        [x for x, _ in xy],
                        [y for _, y in xy],
                        color=color,
                        lw=0.8,
                        label=f"{size} requests a probe",
                    )
                    for p in group:
                        y = _value(p, key)
                        if y is None:
                            continue
                        face = color if p.meets_slo else "none"
                        ax.plot([p.load], [y], marker=marker(p), color=color, mfc=face, ls="none")
                        stopped = stopped or p.stopped_early is not None
                if stopped:  # one legend entry for the marker, whatever the probe length
                    ax.plot(
                        [],
                        [],
                        marker=STOPPED_MARKER,
                        color="#424242",
                        mfc="none",
                        ls="none",
                        label=STOPPED_LABEL,
                    )
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
