"""Property: request records survive JSON and JSONL round trips unchanged."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.records import ERROR_KINDS, JsonlWriter, RequestRecord, read_jsonl

finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)


@st.composite
def records(draw: st.DrawFn) -> RequestRecord:
    status = draw(st.sampled_from(["ok", "error", "cancelled"]))
    kind = None
    if status == "error":
        kind = draw(st.sampled_from([k for k in ERROR_KINDS if k != "cancelled"]))
    elif status == "cancelled":
        kind = draw(st.sampled_from([None, "cancelled"]))
    return RequestRecord(
        request_id=draw(st.text(min_size=1, max_size=12)),
        source=draw(st.sampled_from(["measured", "simulated"])),
        status=status,
        error_kind=kind,
        error_excerpt=draw(st.none() | st.text(max_size=30)),
        sent_s=draw(st.none() | finite),
        token_times_s=draw(st.lists(finite, max_size=10)),
        output_tokens=draw(st.integers(min_value=0, max_value=10_000)),
        cached_tokens_by_tier=draw(
            st.dictionaries(st.text(max_size=5), st.integers(0, 100), max_size=3)
        ),
        output_text=draw(st.none() | st.text(max_size=40)),
    )


@settings(max_examples=100, deadline=None)
@given(st.lists(records(), min_size=1, max_size=8))
def test_jsonl_roundtrip(recs: list[RequestRecord]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.jsonl"
        with JsonlWriter(path) as w:
            for r in recs:
                w.write(r)
        got = read_jsonl(path, RequestRecord)
    assert got.items == recs
    assert got.skipped_lines == []
