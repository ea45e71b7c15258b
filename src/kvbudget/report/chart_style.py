"""How every acceptance chart looks and is written: matplotlib's Agg backend, deterministic SVG
(a fixed hash salt, no date metadata) and plain numbers on the axes."""

from __future__ import annotations

import io
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter

VERDICT_COLORS = {
    "pass": "#2e7d32",
    "fail": "#c62828",
    "untested": "#9e9e9e",
    "not_comparable": "#f9a825",
}

plt.rcParams["svg.hashsalt"] = "kvbudget"
plt.rcParams["svg.fonttype"] = "none"
plt.rcParams["font.size"] = 8
# plain numbers on linear axes: no offset ("+4e1") and no scientific notation ("1e-3")
plt.rcParams["axes.formatter.useoffset"] = False
plt.rcParams["axes.formatter.limits"] = (-9, 9)


def figure_svg(fig: Figure) -> str:
    """``fig`` as an inline SVG string (no XML prolog, DOCTYPE or metadata); closes ``fig``."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"^<\?xml[^>]*>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)
    return text


def plain_number(value: float) -> str:
    """``40.0 -> '40'``, ``0.25 -> '0.25'``, ``1e-05 -> '0.00001'``: positional, 6 significant
    digits, never ``4×10^1``."""
    text = f"{value:.6g}"
    if "e" in text:
        text = f"{float(text):.12f}".rstrip("0").rstrip(".")
    return text


class PlainLogFormatter(Formatter):
    """A log axis's tick labels as plain numbers (``40``, ``0.2``). Which ticks carry a label
    stays matplotlib's choice (the formatter it replaces decides; on a range under a decade it
    labels the minor ticks too), only the text changes: ``4×10^1`` becomes ``40``."""

    def __init__(self, inner: Formatter) -> None:
        self.inner = inner

    def set_axis(self, axis: Any) -> None:
        super().set_axis(axis)
        self.inner.set_axis(axis)

    def set_locs(self, locs: list[float]) -> None:
        super().set_locs(locs)
        self.inner.set_locs(locs)

    def __call__(self, x: float, pos: int | None = None) -> str:
        return plain_number(x) if self.inner(x, pos) else ""


def plain_log_axis(axis: Axis) -> None:
    """Plain tick labels on a log-scaled axis (call after ``set_yscale("log")``)."""
    for major in (True, False):
        current = axis.get_major_formatter() if major else axis.get_minor_formatter()
        if isinstance(current, PlainLogFormatter):
            continue
        wrapped = PlainLogFormatter(current)
        if major:
            axis.set_major_formatter(wrapped)
        else:
            axis.set_minor_formatter(wrapped)
