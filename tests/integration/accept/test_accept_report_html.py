"""The HTML report: self-contained, every chart present, model output escaped; opened in a real
headless Chromium (Debian package) through Playwright."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.report.charts import CHARTS
from kvbudget.report.html import render_html
from kvbudget.report.markdown import render_markdown
from kvbudget.report.write import load_result, write_report

EVIL = "<script>alert('pwned')</script><img src=x onerror=alert(2)>"
CHROMIUM = Path("/usr/bin/chromium")


def poisoned(small_run: Path, tmp_path: Path) -> Path:
    doc = load_result(small_run / "report.json")
    cells = list(doc.cells)
    cells[0] = cells[0].model_copy(
        update={"output_excerpts": [f"model said: {EVIL}"], "reasons": [f"reason {EVIL}"]}
    )
    lock = list(doc.lock)
    lock[0] = lock[0].model_copy(update={"note": EVIL})
    doc = doc.model_copy(update={"name": f"demo {EVIL}", "cells": cells, "lock": lock})
    write_report(doc, tmp_path)
    return tmp_path / "report.html"


def test_model_output_and_plan_text_are_escaped(small_run: Path, tmp_path: Path) -> None:
    html = poisoned(small_run, tmp_path).read_text()
    assert "<script" not in html.lower()
    assert "onerror=alert" not in html.replace("onerror=alert(2)&gt;", "")
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in html
    assert "model said: &lt;script&gt;" in html
    md = (tmp_path / "report.md").read_text()
    assert "<script" not in md
    doc = load_result(small_run / "report.json")
    assert render_markdown(doc) == (small_run / "report.md").read_text()
    assert "Content-Security-Policy" in render_html(doc)


def test_html_has_no_external_references(small_run: Path) -> None:
    html = (small_run / "report.html").read_text()
    for marker in ("http://", "https://", "src="):
        hits = [line for line in html.splitlines() if marker in line and "www.w3.org" not in line]
        assert not hits, hits[:2]


@pytest.mark.browser
def test_report_in_headless_chromium(small_run: Path, tmp_path: Path) -> None:
    # a browser test that cannot find its browser fails (make test installs it); never a skip
    assert CHROMIUM.exists(), (
        "Debian chromium missing: apt-get install -y chromium (make test does it)"
    )
    from playwright.sync_api import sync_playwright

    page_file = poisoned(small_run, tmp_path)
    errors: list[str] = []
    dialogs: list[str] = []
    foreign: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on(
                "request",
                lambda r: (
                    foreign.append(r.url) if not r.url.startswith(("file:", "data:")) else None
                ),
            )
            page.goto(page_file.as_uri())
            page.wait_for_load_state("load")
            for key in CHARTS:
                figure = page.locator(f"figure.chart[data-chart='{key}']")
                assert figure.count() == 1, key
                assert figure.locator("svg").count() >= 1, key
                box = figure.locator("svg").first.bounding_box()
                assert box is not None and box["width"] > 50 and box["height"] > 50, key
            assert "OVERALL VERDICT" in page.locator("#overall-verdict").inner_text().upper()
            rows = page.locator("table").first.locator("tbody tr")
            assert rows.count() == 9
            assert (page.locator("pre.model-output").first.text_content() or "").startswith(
                "model said: <script>"
            )
        finally:
            browser.close()
    assert errors == []
    assert dialogs == []
    assert foreign == []
