"""KV offload tier figures per cell in the Markdown and HTML reports, with their basis."""

from __future__ import annotations

from kvbudget.report.html import render_html
from kvbudget.report.markdown import render_markdown
from kvbudget.units import GiB

from .test_report_render import make_doc

BASIS = "simulated: test tier model"


def test_tier_section_shows_numbers_and_basis() -> None:
    doc = make_doc()
    doc.cells[0].kv_tier = {
        "basis": BASIS,
        "host_capacity_bytes": 64.0 * GiB,
        "host_peak_bytes": 48.0 * GiB,
        "host_peak_fraction": 0.75,
        "bytes_written": 2.0 * GiB,
        "bytes_read": 1.0 * GiB,
        "link_busy_fraction": 0.25,
        "reload_wait_p95_s": 0.125,
        "num_reloads": 7.0,
    }
    md = render_markdown(doc)
    assert f"### KV offload tier per cell ({BASIS})" in md
    row = next(line for line in md.splitlines() if line.startswith("| short/single | 75 %"))
    # 48 GiB of 64 GiB = 75 %; link busy 25 %; p95 wait 0.125 s; 7 reloads
    assert "48" in row and "64" in row and "| 25 % | 0.125 s | 7 |" in row
    html = render_html(doc)
    assert f"KV offload tier per cell ({BASIS})" in html
    assert "<td>75 %</td>" in html


def test_no_tier_no_section() -> None:
    doc = make_doc()
    assert "KV offload tier" not in render_markdown(doc)
    assert "KV offload tier" not in render_html(doc)
