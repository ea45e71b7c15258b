"""Issue #32 item 5, read as a user reads it: a hand-built report (peak tier: Poisson offered at
15 req/s, at most 256 in flight, 12.8 req/s achieved; TPOT 38-42 ms) opened in headless Debian
Chromium at 1280 px. The capacity sentence shows both rates, the cell table calls its rate
achieved, the charts' load axes carry the offered and achieved rates, and the TPOT axis reads
40, not 4×10^1. Screenshots go to ``reports/test-artifacts/`` (git ignores it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvbudget.report.html import render_html
from tests.unit.report.test_report_load_wording import HOSTILE, load_doc

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "reports" / "test-artifacts"
WIDTH, HEIGHT = 1280, 800


@pytest.mark.browser
def test_report_states_offered_and_achieved_load_in_chromium(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.fail("Debian chromium missing: bash scripts/ensure-chromium.sh (make test does it)")
    from playwright.sync_api import sync_playwright

    page_path = tmp_path / "report.html"
    page_path.write_text(render_html(load_doc()), encoding="utf-8")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.goto(page_path.as_uri())
            page.wait_for_load_state("load")
            shot = tmp_path / "report-load-wording.png"
            page.screenshot(path=str(shot), full_page=True)
            # the first capacity sentence: the peak was offered 15 req/s and achieved 12.8
            short = page.locator("#capacity li").first.inner_text()
            assert "holds poisson 15 req/s offered, at most 256 in flight (peak)" in short
            assert "achieved 12.8 req/s" in short
            # the cell table's rate is the achieved one, and short/peak shows 12.8 there
            header = page.locator("#cells + table thead th").all_inner_texts()
            rate_col = header.index("achieved req/s")
            row = page.locator("#cells + table tbody tr").nth(2).locator("td").all_inner_texts()
            assert row[0] == "short/peak" and row[rate_col] == "12.8"

            def chart_texts(key: str) -> list[str]:
                texts = page.locator(f"figure[data-chart='{key}'] svg text").all_text_contents()
                return [t.strip() for t in texts]

            latency = chart_texts("latency")
            assert "offered 15 req/s" in latency and "achieved 12.8 req/s" in latency
            assert "32 concurrent" in latency
            throughput = chart_texts("throughput")
            assert "offered 15 req/s" in throughput and "offered rate" in throughput
            for key in ("latency", "tpot", "ttft"):
                assert not [t for t in chart_texts(key) if "×" in t or "10^" in t], key
            assert "40" in latency and "40" in chart_texts("tpot")
            # the load table says each tier's offered load
            load = page.locator("#load ~ table").nth(1).inner_text()
            assert "poisson 15 req/s offered, at most 256 in flight" in load
            # free text from the document is shown as text, never as markup
            assert page.locator("td b").count() == 0
            assert HOSTILE in page.locator("#ledger ~ table").nth(1).inner_text()
            assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / shot.name)
