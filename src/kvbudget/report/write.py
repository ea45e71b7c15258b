"""Write and re-render an acceptance result: ``report.json``, ``report.md``, ``report.html``."""

from __future__ import annotations

from pathlib import Path

from kvbudget.accept.result import AcceptResult
from kvbudget.accept.result_load import load_accept_result
from kvbudget.records import write_document
from kvbudget.report.html import render_html
from kvbudget.report.markdown import render_markdown
from kvbudget.safety.redact import redact_text


def write_report(
    doc: AcceptResult,
    out_dir: Path,
    *,
    json_too: bool = True,
    variant: AcceptResult | None = None,
) -> dict[str, Path]:
    """Write the documents into ``out_dir``; returns their paths. With ``variant`` (``report
    --compare``) the HTML shows the two runs' charts side by side."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / "report.json",
        "md": out_dir / "report.md",
        "html": out_dir / "report.html",
    }
    # Render both views before writing anything: a rendering error leaves no half-written set.
    markdown_text = redact_text(render_markdown(doc))  # no echoed API key in any view
    html_text = redact_text(render_html(doc, variant=variant))
    if json_too:
        write_document(paths["json"], doc)
    paths["md"].write_text(markdown_text, encoding="utf-8")
    paths["html"].write_text(html_text, encoding="utf-8")
    return paths


def load_result(path: Path) -> AcceptResult:
    """Read a ``report.json`` (one-line ``ReportError`` if it is not an acceptance result, or
    not one kvbudget accept can have written: the checks kvbudget deploy makes too)."""
    return load_accept_result(path)
