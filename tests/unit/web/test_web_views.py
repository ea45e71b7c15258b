"""Small pure helpers of the web layer: chart ladder, labels, document header checks."""

from __future__ import annotations

import pytest

from kvbudget.errors import ReportError
from kvbudget.web.documents import inspect_document
from kvbudget.web.library import CHART_POINTS, context_lengths
from kvbudget.web.rows import byte_row
from kvbudget.web.views import token_label


def test_context_ladder_ends_at_max_model_len() -> None:
    assert context_lengths(8192) == [1024, 2048, 4096, 8192]
    assert context_lengths(10_000) == [1024, 2048, 4096, 8192, 10_000]
    assert context_lengths(512) == [512]
    long = context_lengths(1 << 20)
    assert len(long) == CHART_POINTS
    assert long[-1] == 1 << 20
    assert long == sorted(set(long))


def test_token_labels() -> None:
    assert token_label(4096) == "4Ki"
    assert token_label(1 << 20) == "1Mi"
    assert token_label(10_000) == "10,000"


def test_byte_row_units_are_binary() -> None:
    row = byte_row("total", "total", 3 * 2**30)
    assert row["gib"] == 3.0
    assert row["mib"] == 3072.0
    assert row["bytes_text"] == "3,221,225,472"
    assert row["gib_text"] == "3"


def test_newer_schema_and_bad_figures_are_warned_not_hidden() -> None:
    info = inspect_document(
        {
            "kind": "bench",
            "schema_version": 99,
            "provenance": {"kind": "measured"},
            "figures": [{"name": "x", "value": 1, "kind": "guessed"}],
        }
    )
    text = " ".join(info["warnings"])
    assert "schema_version 99" in text
    assert "provenance is not valid" in text  # measured without an engine
    assert "figures[0]" in text
    assert info["is_kvbudget_document"] is False


def test_non_object_document_is_a_report_error() -> None:
    with pytest.raises(ReportError) as info:
        inspect_document("just a string")
    assert info.value.field == "document"


def test_summary_documents_with_a_top_level_label() -> None:
    # the shape `kvbudget sim --json` prints: "figures": "simulated" plus the timing model
    info = inspect_document(
        {"figures": "simulated", "timing_model": "roofline", "ttft_p50_s": 0.04}
    )
    assert info["provenance"] == "simulated (roofline)"
    assert info["warnings"] == []
    assert info["is_kvbudget_document"] is True
    missing = inspect_document({"figures": "simulated"})
    assert any("timing_model" in w for w in missing["warnings"])
