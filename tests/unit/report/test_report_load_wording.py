"""Issue #32 item 5: the report says what load was offered and what was achieved, its load axes
carry that load (not the in-flight cap), and every latency axis has plain tick labels (40, not
4×10^1).

The document is built by hand: the peak tier is a Poisson stream offered at 15 req/s with at most
256 in flight, and its cells completed 12.8 req/s (the figure the cell table shows); TPOT sits
between 38 and 42 ms in every cell, a range inside one decade, where matplotlib's default log
formatter labels its minor ticks 4×10^1.
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from kvbudget.accept.judge.verdicts import row_summaries
from kvbudget.accept.result import (
    AcceptResult,
    Budget,
    CellResult,
    Check,
    Ledger,
    LedgerEntry,
    MetricSummary,
    PercentileCI,
)
from kvbudget.records import Provenance
from kvbudget.report.chart_style import plain_number
from kvbudget.report.charts import (
    distributions,
    latency_vs_load,
    throughput_vs_concurrency,
    verdict_heatmap,
)
from kvbudget.report.html import render_html
from kvbudget.report.markdown import render_markdown
from kvbudget.report.summary import capacity_sentences

OFFERED_PEAK = 15.0
ACHIEVED_PEAK = 12.8
HOSTILE = "<b onmouseover=alert(1)>x</b>"

PLAN: dict[str, Any] = {
    "load": {
        "tiers": {
            "short": {"min_tokens": 128, "max_tokens": 768, "output_tokens": 128},
            "medium": {"min_tokens": 1024, "max_tokens": 4096, "output_tokens": 256},
            "long": {"min_tokens": 8192, "max_tokens": 15360, "output_tokens": 256},
        },
        "concurrency": {
            "single": {"concurrency": 1, "arrival": "closed", "duration_s": 60},
            "normal": {"concurrency": 32, "arrival": "closed", "duration_s": 60},
            "peak": {
                "concurrency": 256,
                "arrival": "poisson",
                "rate_per_s": OFFERED_PEAK,
                "duration_s": 60,
            },
        },
    },
    "stop": {"ttft_s": {"p95": 2.0}, "tpot_s": {"p95": 0.05}},
}
for _tier in (*PLAN["load"]["tiers"].values(), *PLAN["load"]["concurrency"].values()):
    _tier["source"] = "planning_scenario"

#: achieved requests/s per concurrency tier (the peak one below its offered 15 req/s)
ACHIEVED = {"single": 0.9, "normal": 9.5, "peak": ACHIEVED_PEAK}


def _cell(order: int, it: str, ct: str) -> CellResult:
    check = Check(
        name="ttft_s p95 <= 2", stop="ttft_s p95", verdict="pass", reason="ok", observed=0.5,
        limit=2.0,
    )  # fmt: skip
    return CellResult(
        cell_id=f"{it}/{ct}",
        input_tier=it,
        concurrency_tier=ct,
        order=order,
        verdict="pass",
        reasons=["every check passed"],
        kind="simulated",
        checks=[check],
        num_requests=400,
        num_ok=400,
        summaries={
            "ttft_s": MetricSummary(
                n=400,
                percentiles={
                    "p50": PercentileCI(value=0.3, low=0.28, high=0.32),
                    "p95": PercentileCI(value=0.5, low=0.45, high=0.55),
                },
            ),
            "tpot_s": MetricSummary(
                n=400,
                percentiles={
                    "p50": PercentileCI(value=0.038, low=0.0375, high=0.0385),
                    "p95": PercentileCI(value=0.042, low=0.0415, high=0.0425),
                },
            ),
        },
        throughput={
            "requests_per_s": ACHIEVED[ct],
            "output_tokens_per_s": ACHIEVED[ct] * 128,
            "goodput_requests_per_s": ACHIEVED[ct],
        },
        samples_ttft_s=[0.3, 0.4, 0.5],
        samples_tpot_s=[0.038, 0.040, 0.042],
    )


def load_doc(name: str = "load wording") -> AcceptResult:
    """Nine passing cells; the peak tier offered 15 req/s (Poisson) and achieved 12.8."""
    cells = [
        _cell(3 * i + j, it, ct)
        for i, it in enumerate(("short", "medium", "long"))
        for j, ct in enumerate(("single", "normal", "peak"))
    ]
    return AcceptResult(
        provenance=Provenance(kind="simulated", timing_model="roofline"),
        name=name,
        seed=1,
        plan=PLAN,
        plan_sha256="0" * 64,
        target={"kind": "sim", "label": "simulated H100"},
        lock=[],
        blocking=[],
        ledger=Ledger(
            entries=[
                LedgerEntry(name="max_concurrency", value=3.75, source="plan", note=HOSTILE),
            ],
            budgets=[
                Budget(name="structural", bytes=2**30, kind="computed", what="w"),
                Budget(name="engine_pool", bytes=16 * 2**30, kind="computed", what="w"),
                Budget(name="device_peak", bytes=70 * 2**30, kind="computed", what="w"),
            ],
        ),
        cells=cells,
        rows=row_summaries(cells),
        stop_conditions=[],
        verdict="pass",
        verdict_reasons=["every cell passed"],
        created="2026-01-01T00:00:00Z",
    )


def svg_texts(svg: str) -> list[str]:
    """The text of every <text> element of a matplotlib SVG (svg.fonttype none)."""
    return [unescape(t).strip() for t in re.findall(r"<text[^>]*>(.*?)</text>", svg, re.S)]


def test_the_peak_sentence_names_the_offered_and_the_achieved_rate() -> None:
    short = capacity_sentences(load_doc())[0]
    # every short cell passes, so the tier holds its peak: the Poisson stream it was offered
    assert "holds poisson 15 req/s offered, at most 256 in flight (peak)" in short, short
    assert "achieved 12.8 req/s" in short, short
    # the in-flight cap is never presented as the load itself
    assert "holds up to 256 in flight" not in short


def test_the_cell_table_says_its_rate_was_achieved() -> None:
    md = render_markdown(load_doc())
    header = next(line for line in md.splitlines() if line.startswith("| cell | verdict"))
    assert "| achieved req/s |" in header
    assert "short/peak | PASS" in md and "| 12.8 |" in md
    # the load section says what each tier offered
    assert "**peak**: poisson 15 req/s offered, at most 256 in flight, 60 s" in md


def test_load_axes_carry_the_offered_and_the_achieved_rate() -> None:
    doc = load_doc()
    for chart in (latency_vs_load(doc), throughput_vs_concurrency(doc), verdict_heatmap(doc)):
        texts = svg_texts(chart)
        assert "offered 15 req/s" in texts, texts
        assert "32 concurrent" in texts  # a closed tier's load is its clients
        assert not any(t.endswith("in flight") and "(" not in t for t in texts), texts
    latency = svg_texts(latency_vs_load(doc))
    assert "achieved 12.8 req/s" in latency  # the peak cells, under their own panels
    throughput = svg_texts(throughput_vs_concurrency(doc))
    assert "offered rate" in throughput  # the legend of the offered-rate marks


def test_latency_axes_have_plain_tick_labels() -> None:
    """TPOT between 38 and 42 ms: the axis reads 40 (ms), never 4×10^1."""
    doc = load_doc()
    charts = {
        "latency": latency_vs_load(doc),
        "ttft": distributions(doc, "ttft_s"),
        "tpot": distributions(doc, "tpot_s"),
    }
    for key, svg in charts.items():
        texts = svg_texts(svg)
        assert not any("×" in t or "10^" in t or "$" in t for t in texts), (key, texts)
    assert "40" in svg_texts(charts["latency"])
    assert "40" in svg_texts(charts["tpot"])  # TPOT samples shown in ms
    assert "TPOT (ms, log scale)" in svg_texts(charts["tpot"])


def test_plain_number() -> None:
    assert plain_number(40.0) == "40"
    assert plain_number(0.25) == "0.25"
    assert plain_number(1e-5) == "0.00001"
    assert plain_number(3 * 0.1) == "0.3"
    assert plain_number(2_000_000.0) == "2000000"


def test_report_html_escapes_the_ledger_note() -> None:
    page = render_html(load_doc())
    assert HOSTILE not in page
    assert "&lt;b onmouseover=alert(1)&gt;x&lt;/b&gt;" in page
