"""The report's first screen in words: one capacity sentence per input tier, built from the
cells' own checks (observed value and ceiling), throughput, and the sections' order."""

from __future__ import annotations

from typing import Any

from kvbudget.accept.judge.verdicts import row_summaries
from kvbudget.accept.result import AcceptResult, CellResult, Check, Ledger
from kvbudget.records import Provenance
from kvbudget.report import html as html_report
from kvbudget.report.summary import capacity_sentences, peak_throughput

PLAN: dict[str, Any] = {
    "load": {
        "tiers": {
            "short": {"min_tokens": 128, "max_tokens": 768, "output_tokens": 128},
            "medium": {"min_tokens": 1024, "max_tokens": 4096, "output_tokens": 256},
            "long": {"min_tokens": 8192, "max_tokens": 15360, "output_tokens": 256},
        },
        "concurrency": {
            "single": {"concurrency": 1, "arrival": "closed", "duration_s": 60},
            "normal": {"concurrency": 16, "arrival": "poisson", "rate_per_s": 4, "duration_s": 30},
            "peak": {"concurrency": 64, "arrival": "closed", "duration_s": 30},
        },
    },
    "stop": {"ttft_s": {"p50": 1.0, "p95": 2.0}},
}


for _tier in (*PLAN["load"]["tiers"].values(), *PLAN["load"]["concurrency"].values()):
    _tier["source"] = "planning_scenario"


def _cell(it: str, ct: str, verdict: str, ttft_p95: float) -> CellResult:
    check = Check(
        name="ttft_s p95 <= 2",
        verdict=verdict,  # type: ignore[arg-type]
        reason="r" if verdict != "untested" else "120 samples are too few for p95 (needs >= 200)",
        observed=ttft_p95,
        limit=2.0,
    )
    return CellResult(
        cell_id=f"{it}/{ct}",
        input_tier=it,
        concurrency_tier=ct,
        order=0,
        verdict=verdict,  # type: ignore[arg-type]
        reasons=["r"],
        checks=[check],
        throughput={"requests_per_s": 4.0, "output_tokens_per_s": 512.0},
    )


def _doc() -> AcceptResult:
    cells = [
        _cell("short", "single", "pass", 0.05),
        _cell("short", "normal", "pass", 0.1),
        _cell("short", "peak", "pass", 1.2),
        _cell("medium", "single", "untested", 0.2),
        _cell("medium", "normal", "pass", 0.3),
        _cell("medium", "peak", "fail", 4.5),
        _cell("long", "single", "pass", 0.6),
        _cell("long", "normal", "fail", 16.9),
        _cell("long", "peak", "fail", 30.0),
    ]
    return AcceptResult(
        provenance=Provenance(kind="simulated", timing_model="roofline"),
        name="t",
        seed=1,
        plan=PLAN,
        plan_sha256="0" * 64,
        target={"kind": "sim", "label": "simulated H100"},
        lock=[],
        blocking=[],
        ledger=Ledger(),
        cells=cells,
        rows=row_summaries(cells),
        stop_conditions=[],
        verdict="fail",
        verdict_reasons=["x"],
        created="2026-01-01T00:00:00Z",
    )


def test_one_sentence_per_tier_from_the_checks() -> None:
    short, medium, long = capacity_sentences(_doc())
    assert short == (
        "short (128–768 prompt tokens, 128 out): holds 64 concurrent (peak) at TTFT p95 1.2 s "
        "(≤ 2 s); achieved 4 req/s, 512 output tokens/s"
    )
    assert medium.startswith(
        "medium (1024–4096 prompt tokens, 256 out): holds poisson 4 req/s offered, at most 16 in "
        "flight (normal)"
    )
    assert "fails at 64 concurrent (peak): TTFT p95 4.5 s > 2 s" in medium
    assert "untested at 1 concurrent (single): 120 samples are too few for p95" in medium
    assert (
        "fails at poisson 4 req/s offered, at most 16 in flight (normal): TTFT p95 16.9 s > 2 s"
        in long
    )


def test_throughput_names_the_cell_and_its_basis() -> None:
    text = peak_throughput(_doc())
    assert text.startswith(
        "Throughput (simulated), best cell short/single (within every latency ceiling): "
        "achieved 4 req/s, 512 output tokens/s"
    )


def test_the_head_comes_first_and_sections_are_a_list() -> None:
    page = html_report.render_html(_doc())
    verdict = page.index("id='overall-verdict'")
    capacity = page.index("id='capacity'")
    assert verdict < capacity < page.index("id='throughput'") < page.index("id='cells'")
    assert page.index("id='cells'") < page.index("id='blocking'")
    assert html_report.SECTIONS[0] is html_report.head_section


def test_compare_puts_the_two_runs_charts_side_by_side() -> None:
    base, variant = _doc(), _doc().model_copy(update={"name": "variant-run"})
    page = html_report.render_html(base, variant=variant)
    for key in html_report.SIDE_BY_SIDE:
        start = page.index(f"data-side='{key}'")
        block = page[start : page.index("</div>", start)]
        assert block.count("<svg") == 2, key
        assert "chart-base" in block and "chart-variant" in block
    assert "variant <b>variant-run</b>" in page
    assert "data-side=" not in html_report.render_html(base)
