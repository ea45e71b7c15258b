"""Property: the SSE splitter finds the same events however the byte stream is cut into reads,
and stamps each event with the time of the read that carried its first byte."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.load.sse import SseSplitter

payloads = st.lists(
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=40)
    .map(lambda s: s.encode())
    .filter(lambda b: not b.startswith(b" ")),
    min_size=1,
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(payloads, st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=60))
def test_chunking_does_not_change_events(data: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(b"data: " + d + b"\n\n" for d in data)
    # where each event's first byte sits in the stream
    starts = []
    pos = 0
    for d in data:
        starts.append(pos)
        pos += len(d) + 8
    sp = SseSplitter()
    got: list[tuple[float, bytes]] = []
    offset = 0
    read_no = 0
    read_of_byte: list[int] = []
    i = 0
    while offset < len(stream):
        size = cuts[i % len(cuts)]
        i += 1
        chunk = stream[offset : offset + size]
        read_of_byte.extend([read_no] * len(chunk))
        got.extend(sp.feed(chunk, float(read_no)))
        offset += len(chunk)
        read_no += 1
    assert [p for _, p in got] == data
    assert [t for t, _ in got] == [float(read_of_byte[s]) for s in starts]
    assert sp.pending == b""
