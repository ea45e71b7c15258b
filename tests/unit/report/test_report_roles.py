"""The report's "Who does what" section, rendered from a run of the demo plan's lock."""

from __future__ import annotations

from kvbudget.accept.result import AcceptResult
from kvbudget.report.roles import roles_html, roles_markdown


def _doc(lock: dict[str, object], cells: list[dict[str, object]]) -> AcceptResult:
    return AcceptResult.model_construct(
        plan={"lock": lock},
        target={"kind": "http", "label": "measured <vLLM>"},
        cells=[_cell(c) for c in cells],
    )


def _cell(values: dict[str, object]) -> object:
    from kvbudget.accept.result import CellResult

    return CellResult.model_construct(**values)


def test_markdown_rows_and_observed_figures() -> None:
    doc = _doc(
        {"model": {"id": "x"}, "engine": {"name": "vllm"}, "router_policy": "prefix_precise"},
        [
            {"peak_kv_usage": 0.25, "prefix_hit_rate_tokens": 0.1},
            {"peak_kv_usage": 0.5, "prefix_hit_rate_tokens": None},
        ],
    )
    text = "\n".join(roles_markdown(doc))
    assert "## Who does what" in text
    assert "| who decides where a request goes | the router (prefix_precise) |" in text
    assert "peak KV usage 50.0% (measured &lt;vLLM>)" in text
    assert "10.0% of prompt tokens (best cell)" in text
    assert text.count("| application response cache |") == 1


def test_html_escapes_everything() -> None:
    doc = _doc({"model": {"id": "x"}, "engine": {"name": "<script>vllm"}}, [])
    html = roles_html(doc)
    assert "<script>" not in html and "&lt;vLLM&gt;" not in html  # no figures: label unused
    assert "<h2>Who does what</h2>" in html and "not observed in this run" in html
