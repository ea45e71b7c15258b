"""The SSE splitter: events, data fields and first-byte timestamps (cases worked by hand)."""

from __future__ import annotations

from kvbudget.load.sse import SseSplitter


def test_events_in_one_chunk_share_its_time() -> None:
    sp = SseSplitter()
    out = sp.feed(b"data: a\n\ndata: b\n\n", 1.0)
    assert out == [(1.0, b"a"), (1.0, b"b")]
    assert sp.pending == b""


def test_event_split_over_reads_keeps_first_byte_time() -> None:
    sp = SseSplitter()
    assert sp.feed(b'data: {"x"', 1.0) == []
    assert sp.feed(b":1}", 2.0) == []
    # completes at 3.0 but its first byte came at 1.0; the next event starts in this read
    assert sp.feed(b"\n\ndata: next", 3.0) == [(1.0, b'{"x":1}')]
    assert sp.feed(b"\n\n", 4.0) == [(3.0, b"next")]


def test_separator_split_across_reads() -> None:
    sp = SseSplitter()
    assert sp.feed(b"data: a\n", 1.0) == []
    assert sp.feed(b"\ndata: b\n\n", 2.0) == [(1.0, b"a"), (2.0, b"b")]


def test_crlf_comments_and_multiline_data() -> None:
    sp = SseSplitter()
    out = sp.feed(b": keep-alive\r\n\r\nevent: x\r\ndata: one\r\ndata: two\r\n\r\n", 5.0)
    assert out == [(5.0, b"one\ntwo")]


def test_data_without_space_and_done() -> None:
    sp = SseSplitter()
    assert sp.feed(b"data:[DONE]\n\n", 0.5) == [(0.5, b"[DONE]")]
