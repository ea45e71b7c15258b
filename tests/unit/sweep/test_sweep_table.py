"""Derived columns (cost, SLO verdicts), the cheapest configuration, the Pareto front, the SVG.

Expected numbers are hand arithmetic on hand-made rows."""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kvbudget.sweep.grid import grid_from_dict
from kvbudget.sweep.pareto import pareto_front, render_pareto
from kvbudget.sweep.table import (
    cheapest,
    cheapest_lines,
    columns,
    derive,
    parquet_available,
    write_csv,
    write_parquet,
)

GRID = grid_from_dict(
    {
        "slos": [
            {"name": "chat", "ttft_s": {"p99": 0.5}, "tpot_s": {"p99": 0.05}},
            {"name": "batch", "ttft_s": {"p99": 10.0}},
        ],
        "gpu_hour_usd": {"H100-SXM": 3.0, "A100-80GB": 2.0},
    }
)


def _row(
    key: str, gpu: str, tp: int, replicas: int, ttft: float, tpot: float, **kw: Any
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "key": key,
        "status": "simulated",
        "figures": "simulated",
        "timing_model": "roofline",
        "model": "m",
        "gpu": gpu,
        "tp": tp,
        "kv_dtype": "auto",
        "max_model_len": 4096,
        "prefix_caching": True,
        "router": "round_robin",
        "replicas": replicas,
        "rate_per_s": 10.0,
        "num_gpus": tp * replicas,
        "requests_total": 100,
        "requests_completed": 100,
        "ttft_p99_s": ttft,
        "tpot_p99_s": tpot,
        "output_tokens_per_s": 1000.0,
    }
    row.update(kw)
    return row


ROWS = [
    _row("a", "H100-SXM", 1, 1, ttft=0.9, tpot=0.02),  # $3/h, misses chat (TTFT)
    _row("b", "H100-SXM", 1, 2, ttft=0.3, tpot=0.02),  # $6/h, meets both
    _row("c", "A100-80GB", 2, 1, ttft=0.4, tpot=0.04),  # $4/h, meets both
    _row("d", "A100-80GB", 1, 1, ttft=0.2, tpot=0.01, requests_completed=99),  # $2/h, unfinished
]


def test_cost_columns_are_hand_arithmetic() -> None:
    rows = {r["key"]: r for r in derive(ROWS, GRID)}
    assert rows["b"]["cost_usd_per_hour"] == pytest.approx(6.0)  # 2 GPUs x $3
    # $6/h at 1000 output tokens/s: 6 / 3600 / 1000 * 1e6 = 1.6667 USD per million tokens
    assert rows["b"]["cost_usd_per_million_output_tokens"] == pytest.approx(6 / 3.6)
    assert rows["c"]["cost_usd_per_hour"] == pytest.approx(4.0)


def test_slo_verdicts() -> None:
    rows = {r["key"]: r for r in derive(ROWS, GRID)}
    assert [rows[k]["meets_chat"] for k in "abcd"] == [False, True, True, False]
    # d is fastest and cheapest, but a request did not finish: it meets nothing
    assert [rows[k]["meets_batch"] for k in "abcd"] == [True, True, True, False]


def test_cheapest_per_slo() -> None:
    answers = {a["slo"]: a for a in cheapest(derive(ROWS, GRID), GRID)}
    assert answers["chat"]["key"] == "c"  # $4/h beats b's $6/h
    assert answers["batch"]["key"] == "a"  # $3/h
    assert answers["chat"]["num_meeting"] == 2 and answers["chat"]["num_points"] == 4
    lines = cheapest_lines(list(answers.values()))
    assert any("cheapest is 2 x A100-80GB" in line and "$4.00/h" in line for line in lines)
    assert all("simulated" in line for line in lines)


def test_no_point_meets_is_stated() -> None:
    strict = grid_from_dict({"slos": [{"name": "x", "ttft_s": {"p99": 0.01}}]})
    (answer,) = cheapest(derive(ROWS, strict), strict)
    assert answer["key"] is None
    assert "no configuration meets it (0 of 4 points)" in cheapest_lines([answer])[0]


def test_without_prices_cheapest_is_fewest_gpus() -> None:
    grid = grid_from_dict({"slos": [{"name": "batch", "ttft_s": {"p99": 10.0}}]})
    (answer,) = cheapest(derive(ROWS, grid), grid)
    assert answer["by"] == "num_gpus" and answer["key"] == "a"


def test_pareto_front_by_hand() -> None:
    pts = [(1.0, 5.0), (2.0, 3.0), (2.0, 4.0), (3.0, 3.5), (4.0, 1.0)]
    assert pareto_front(pts) == [(1.0, 5.0), (2.0, 3.0), (4.0, 1.0)]


def test_pareto_svg_is_self_contained() -> None:
    rows = derive(ROWS, GRID)
    svg = render_pareto(rows, GRID)
    root = ET.fromstring(svg)  # well-formed XML
    assert root.tag.endswith("svg")
    outside = svg.replace("http://www.w3.org", "")  # namespaces are not references
    assert "http://" not in outside and "https://" not in outside and "<image" not in svg
    assert "simulated" in svg and "roofline" in svg
    assert "SLO chat p99" in svg
    assert render_pareto(rows, GRID) == svg  # same rows, same bytes


def test_parquet_holds_the_csv_table(tmp_path: Path) -> None:
    import pyarrow.parquet as pq  # the test extra installs pyarrow: missing fails, never skips

    rows = derive(ROWS, GRID)
    cols = columns(GRID)
    assert parquet_available()
    write_parquet(tmp_path / "r.parquet", rows, cols)
    write_csv(tmp_path / "r.csv", rows, cols)
    table = pq.read_table(tmp_path / "r.parquet").to_pylist()
    with (tmp_path / "r.csv").open() as fh:
        text_rows = list(csv.DictReader(fh))
    assert [t["key"] for t in table] == [t["key"] for t in text_rows] == ["d", "c", "a", "b"]
    assert table[1]["cost_usd_per_hour"] == pytest.approx(4.0)
    assert table[1]["meets_chat"] is True and text_rows[1]["meets_chat"] == "True"
