"""The SSE splitter at every chunk boundary, and one huge event fed in small reads."""

from __future__ import annotations

from kvbudget.load.sse import SseSplitter

STREAM = (
    b'data: {"a": 1}\r\n\r\n'
    b": comment\n\n"
    b"data: line one\ndata: line two\n\n"
    b'data: {"b": 2}\n\n'
    b"data: [DONE]\r\n\r\n"
)
EXPECTED = [b'{"a": 1}', b"line one\nline two", b'{"b": 2}', b"[DONE]"]


def _feed_all(chunks: list[bytes]) -> list[bytes]:
    s = SseSplitter()
    out: list[bytes] = []
    for t, chunk in enumerate(chunks):
        out.extend(data for _, data in s.feed(chunk, float(t)))
    assert s.pending == b""
    return out


def test_every_two_way_split_gives_the_same_events() -> None:
    for cut in range(len(STREAM) + 1):
        assert _feed_all([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut


def test_byte_by_byte() -> None:
    assert _feed_all([bytes([b]) for b in STREAM]) == EXPECTED


def test_event_time_is_the_arrival_of_its_first_byte() -> None:
    s = SseSplitter()
    assert s.feed(b"data: x", 1.0) == []
    assert s.feed(b"yz\n", 2.0) == []
    assert s.feed(b"\ndata: q\n\ndata: r", 3.0) == [(1.0, b"xyz"), (3.0, b"q")]
    assert s.feed(b"\n\n", 4.0) == [(3.0, b"r")]


def test_one_20mb_event_in_4kib_reads() -> None:
    """One pass over the bytes (the old splitter copied the whole buffer on every read:
    quadratic, 38.7 s of client CPU for this event; this runs in well under a second, but no
    wall clock is asserted here)."""
    payload = b"x" * (20 * 1024 * 1024)
    stream = b"data: " + payload + b"\n\n"
    s = SseSplitter()
    events = []
    for i in range(0, len(stream), 4096):
        events.extend(s.feed(stream[i : i + 4096], 0.0))
    assert len(events) == 1 and events[0][1] == payload
