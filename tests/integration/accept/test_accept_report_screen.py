"""The demo report read as a manager would: rendered at 1280 px in headless Chromium, the first
screen (1280 x 800) holds the verdict, one capacity sentence per input tier and throughput;
charts span the page. Screenshots are kept as test artifacts (the pytest tmp dir and
``reports/test-artifacts/``, which git ignores)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "reports" / "test-artifacts"
WIDTH, HEIGHT = 1280, 800


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kvbudget.cli.main import main

    out = tmp_path_factory.mktemp("demo")
    with pytest.raises(SystemExit) as info:
        main(
            [
                "accept",
                str(REPO / "examples" / "acceptance-demo.yaml"),
                "--out",
                str(out),
                "--quiet",
            ]
        )
    assert info.value.code == 0
    return out / "report.html"


@pytest.mark.browser
@pytest.mark.slow
def test_first_screen_holds_verdict_capacity_and_throughput(
    demo_report: Path, tmp_path: Path
) -> None:
    if not CHROMIUM.exists():
        pytest.fail("Debian chromium missing: bash scripts/ensure-chromium.sh (make test does it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.goto(demo_report.as_uri())
            page.wait_for_load_state("load")
            page.screenshot(path=str(tmp_path / "demo-first-screen.png"))
            page.screenshot(path=str(tmp_path / "demo-full-page.png"), full_page=True)

            def bottom(selector: str) -> float:
                box = page.locator(selector).first.bounding_box()
                assert box is not None, selector
                return box["y"] + box["height"]

            verdict = page.locator("#overall-verdict").inner_text()
            assert verdict.startswith("Overall verdict: FAIL") and "simulated" in verdict
            assert bottom("#overall-verdict") <= HEIGHT
            sentences = page.locator("#capacity li")
            assert sentences.count() == 3  # one per input tier
            for i, tier in enumerate(("short", "medium", "long")):
                text = sentences.nth(i).inner_text()
                assert text.startswith(f"{tier} (") and "output tokens/s" in text, text
                box = sentences.nth(i).bounding_box()
                assert box is not None and box["y"] + box["height"] <= HEIGHT, tier
            # the long-document tier fails for its real reason: TTFT over its ceiling
            assert "fails at" in sentences.nth(2).inner_text()
            assert "TTFT p50" in sentences.nth(2).inner_text()
            throughput = page.locator("#throughput").inner_text()
            assert "output tokens/s" in throughput and "req/s" in throughput
            assert bottom("#throughput") <= HEIGHT
            # the page does not scroll sideways and the charts use its width
            assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
            chart = page.locator("figure.chart[data-chart='latency'] svg").bounding_box()
            assert chart is not None and chart["width"] >= 0.9 * (WIDTH - 60)
        finally:
            browser.close()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name in ("demo-first-screen.png", "demo-full-page.png"):
        assert (tmp_path / name).stat().st_size > 10_000
        shutil.copy(tmp_path / name, ARTIFACTS / name)
