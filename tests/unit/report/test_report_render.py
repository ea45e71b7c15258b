"""Rendering a hand-built acceptance result: charts, tables, escaping, determinism."""

from __future__ import annotations

from kvbudget.accept.result import (
    AcceptResult,
    Budget,
    CellResult,
    Check,
    Ledger,
    MetricSummary,
    PercentileCI,
    StopStatus,
    TimeSeries,
)
from kvbudget.records import Provenance
from kvbudget.report.charts import CHARTS, render_charts
from kvbudget.report.html import render_html
from kvbudget.report.markdown import render_markdown
from kvbudget.report.table_rows import CELL_HEADER, cell_row, split_verdicts


def make_doc(name: str = "hand-built") -> AcceptResult:
    cells = []
    for i, it in enumerate(("short", "medium", "long")):
        for j, ct in enumerate(("single", "normal", "peak")):
            verdict = "fail" if (it, ct) == ("long", "peak") else "pass"
            cells.append(
                CellResult(
                    cell_id=f"{it}/{ct}",
                    input_tier=it,
                    concurrency_tier=ct,
                    order=3 * i + j,
                    verdict=verdict,
                    reasons=["r"],
                    kind="measured",
                    checks=[
                        Check(
                            name="ttft_s p95 <= 2", stop="ttft_s p95", verdict=verdict, reason="x"
                        ),
                        Check(name="quality q", stop="quality failure", verdict="pass", reason="y"),
                    ],
                    num_requests=300,
                    summaries={
                        "ttft_s": MetricSummary(
                            n=300, percentiles={"p95": PercentileCI(value=0.5 + i)}
                        )
                    },
                    samples_ttft_s=[0.1, 0.2, 0.3 + i],
                    samples_tpot_s=[0.01, 0.02],
                    timeseries=TimeSeries(
                        t_s=[0, 1, 2],
                        kv_usage=[0.1, 0.5, 0.2],
                        num_running=[1, 2, 1],
                        num_waiting=[0, 1, 0],
                    ),
                    peak_kv_usage=0.5,
                )
            )
    return AcceptResult(
        provenance=Provenance(
            kind="measured", engine="vllm", engine_version="0.11.0", hardware="H100"
        ),
        name=name,
        seed=1,
        plan={},
        plan_sha256="0" * 64,
        target={"kind": "http"},
        lock=[],
        blocking=[],
        cells=cells,
        # consistent with the failed cell (kvbudget's loader refuses a verdict its stop
        # conditions do not give)
        stop_conditions=[
            StopStatus(name="ttft_s p95", declared="2", status="triggered", cells=["long/peak"])
        ],
        verdict="fail",
        verdict_reasons=["because"],
        ledger=Ledger(
            budgets=[
                Budget(name="structural", bytes=2**30, kind="computed", what="w"),
                Budget(name="engine_pool", bytes=50 * 2**30, kind="computed", what="w"),
                Budget(name="device_peak", bytes=70 * 2**30, kind="computed", what="w"),
            ]
        ),
        created="2026-01-01T00:00:00Z",
    )


def test_every_chart_is_an_svg_and_deterministic() -> None:
    doc = make_doc()
    first = render_charts(doc)
    assert set(first) == set(CHARTS)
    for key, svg in first.items():
        assert svg.lstrip().startswith("<svg"), key
        assert "http://purl.org" not in svg
    assert render_charts(doc) == first


def test_tables_and_labels() -> None:
    doc = make_doc()
    peak = doc.cells[-1]
    assert split_verdicts(peak) == ("fail", "pass")
    row = cell_row(peak)
    assert len(row) == len(CELL_HEADER)
    assert row[:2] == ["long/peak", "FAIL"] and row[CELL_HEADER.index("TTFT p95")] == "2.5 s"
    md = render_markdown(doc)
    assert "**Overall verdict: FAIL** — measured (vllm 0.11.0, H100)" in md
    assert "measured (vllm 0.11.0, H100)" in md
    html = render_html(doc)
    assert html.count("data-chart=") == len(CHARTS)
    assert "Content-Security-Policy" in html and "<script" not in html


def test_free_text_is_escaped_in_both_formats() -> None:
    doc = make_doc(name="x <script>alert(1)</script> | y")
    html = render_html(doc)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    md = render_markdown(doc)
    assert "<script>" not in md and "\\|" in md


def test_float_residue_and_run_dicts_are_readable() -> None:
    from kvbudget.report.table_rows import pairs_text, percentile_rows

    doc = make_doc()
    cell = doc.cells[0]
    cell.summaries["queue_s"] = MetricSummary(
        n=300, percentiles={"p50": PercentileCI(value=7.105e-15, low=0.0, high=1.4e-14)}
    )
    row = next(r for r in percentile_rows(cell) if r[0] == "queue_s")
    assert row[3] == "0 [0, 0]"  # sim-clock subtraction residue is not a figure
    assert pairs_text({"requests": 8, "scored": False, "duration_s": 0.31378}) == (
        "requests 8, scored no, duration_s 0.3138"
    )
    assert pairs_text({"num_free_blocks": 27578.0, "kv_usage": 0.0}) == (
        "num_free_blocks 27578, kv_usage 0"
    )
    doc.warmup = {"requests": 8, "scored": False}
    md = render_markdown(doc)
    html = render_html(doc)
    assert "warm-up: requests 8, scored no" in md and "{'requests'" not in md
    assert "warm-up requests 8, scored no" in html and "&#x27;requests&#x27;" not in html


def test_lock_values_and_delta_change_read_as_written() -> None:
    from kvbudget.accept.result import ComparisonResult, MetricDelta
    from kvbudget.report.table_rows import delta_rows, value_text

    assert value_text(None) == "—"
    assert value_text({"enabled": True, "salt": "per-tenant"}) == "enabled: true, salt: per-tenant"
    assert value_text(["--a", "--b=1"]) == "--a --b=1"
    delta = MetricDelta(
        cell_id="long/peak", metric="tpot_s", n_baseline=200, n_variant=210,
        baseline_pct=0.080, variant_pct=0.100, pct_diff=0.020, pct_diff_low=0.010,
        pct_diff_high=0.030, hl_shift=0.001, p_value=0.5, p_holm=0.9, significant=False,
    )  # fmt: skip
    comp = ComparisonResult(name="c", factor="kv_dtype", verdict="fail", reasons=[], deltas=[delta])
    (row,) = delta_rows(comp)
    assert row[2] == "200/210"
    assert row[6] == "+25.0 %"  # 0.020 / 0.080, worked by hand


def test_markdown_keeps_comparisons_readable_but_no_html() -> None:
    from kvbudget.report.markdown import _md

    assert _md("ttft_s p95 <= 2; 'auto' -> 'fp8'") == "ttft_s p95 <= 2; 'auto' -> 'fp8'"
    assert _md("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)>"
    assert _md("</b><!-- x --><?php") == "&lt;/b>&lt;!-- x -->&lt;?php"
    assert _md("&lt;script&gt;") == "&amp;lt;script&amp;gt;"  # no entity smuggling either
