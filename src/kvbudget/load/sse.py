"""A lean Server-Sent-Events splitter that timestamps every event at its first byte.

The client feeds raw body chunks as they arrive, with the monotonic time of arrival. Events are
separated by a blank line (``\\n\\n`` or ``\\r\\n\\r\\n``); an event's time is the arrival time of
the chunk that carried its FIRST byte (a user-space client cannot see finer than one read).
Only ``data:`` lines are kept (comments ``:`` and other fields are ignored), multi-line data is
joined with ``\\n`` as the SSE specification says.
"""

from __future__ import annotations


class SseSplitter:
    """Incremental SSE event splitter (bytes in, ``(time_s, data_bytes)`` out).

    Linear in the bytes received: a chunk that completes no event is appended to a buffer
    (amortized O(1) per byte) and only the new chunk is searched for the blank line, so one
    20 MB event arriving in many reads costs a single pass, not one copy per read."""

    __slots__ = ("_buf", "_cr", "_start_s")

    def __init__(self) -> None:
        self._buf = bytearray()
        #: the last chunk ended in ``\r`` (held back: it may start a ``\r\n`` across reads)
        self._cr = False
        self._start_s = 0.0

    @property
    def pending(self) -> bytes:
        """Bytes of an event that has started but not ended."""
        return bytes(self._buf) + (b"\r" if self._cr else b"")

    def feed(self, chunk: bytes, now_s: float) -> list[tuple[float, bytes]]:
        """Add a chunk received at ``now_s``; return the events it completed."""
        if not chunk:
            return []
        if not self._buf and not self._cr:
            self._start_s = now_s
        data = chunk
        if self._cr:
            data = b"\r" + data
            self._cr = False
        if data.endswith(b"\r"):
            data = data[:-1]
            self._cr = True
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        buf = self._buf
        if b"\n\n" not in data and not (buf.endswith(b"\n") and data.startswith(b"\n")):
            buf += data  # no event ends in this chunk
            return []
        parts = (bytes(buf) + data).split(b"\n\n")
        self._buf = bytearray(parts.pop())
        out: list[tuple[float, bytes]] = []
        append = out.append
        t = self._start_s
        for raw in parts:
            if raw[:6] == b"data: " and b"\n" not in raw:  # the usual one-line event
                append((t, raw[6:]))
            elif raw:
                payload = _data_of(raw)
                if payload is not None:
                    append((t, payload))
            t = now_s
        # the partial event (if any) started inside this chunk
        self._start_s = now_s
        return out


def _data_of(raw: bytes) -> bytes | None:
    """The ``data`` field of one event (None if the event has no data lines)."""
    if raw.startswith(b"data:") and b"\n" not in raw:
        payload = raw[5:]
        return payload[1:] if payload.startswith(b" ") else payload
    lines: list[bytes] = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    if not lines:
        return None
    return b"\n".join(lines)
