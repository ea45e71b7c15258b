"""The capacity chart marks a probe stopped early with its own marker and legend entry."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from kvbudget.maxload.chart import STOPPED_LABEL, STOPPED_MARKER, marker, write_chart
from kvbudget.maxload.point import Point
from kvbudget.maxload.run import Capacity, LoadAnswer
from kvbudget.maxload.search import Search
from kvbudget.maxload.slo import parse_slo
from kvbudget.metrics.stability import QueueGrowth


def _point(load: float, ttft_s: float, *, stopped: str | None = None) -> Point:
    return Point(
        kind="rate",
        load=load,
        seed=0,
        values={"ttft_p95_s": ttft_s},
        goodput_fraction=None,
        num_requests=40,
        num_ok=40 if stopped is None else 12,
        num_preemptions=0,
        requests_per_s=load,
        failing=() if ttft_s <= 1.0 else ("ttft_p95",),
        stopped_early=stopped,
        num_sent=None if stopped is None else 12,
    )


def _capacity(points: list[Point]) -> Capacity:
    passing = [p for p in points if p.meets_slo]
    failing = [p for p in points if not p.meets_slo]
    rate = Search(kind="rate", seed=0, points=points, passing=passing[-1], failing=failing[0])
    conc = Search(kind="concurrency", seed=0, points=[])
    return Capacity(
        slo=parse_slo("ttft_p95<1s"),
        rate=LoadAnswer(rate, ()),
        concurrency=LoadAnswer(conc, ()),
        estimate=None,
        tolerance=0.05,
        num_requests=40,
        wall_s=1.0,
    )


def test_markers_by_kind_of_point() -> None:
    queue = QueueGrowth(
        num_requests=40,
        ttft_growth_s_per_s=0.5,
        offered_per_s=9.0,
        served_per_s=6.0,
        first_quarter_ttft_s=0.1,
        last_quarter_ttft_s=2.0,
    )
    assert marker(_point(1.0, 0.2)) == "o"
    assert marker(_point(8.0, 3.0, stopped="ttft_p95 broken after 12 requests")) == "v"
    assert marker(replace(_point(9.0, 0.9), queue=queue)) == "x"


def test_a_stopped_probe_has_its_marker_and_legend_entry(tmp_path: Path) -> None:
    points = [
        _point(1.0, 0.2),
        _point(2.0, 0.5),
        _point(4.0, 3.0, stopped="ttft_p95 is over 1 s whatever the rest"),
    ]
    path = tmp_path / "curve.svg"
    write_chart(path, _capacity(points), figures="measured")
    svg = path.read_text()
    ET.fromstring(svg)
    assert STOPPED_MARKER == "v" and svg.count(STOPPED_LABEL) == 1  # the rate panel's legend
    # without a stopped probe, no such entry
    write_chart(path, _capacity([*points[:2], _point(4.0, 3.0)]), figures="measured")
    assert STOPPED_LABEL not in path.read_text()
