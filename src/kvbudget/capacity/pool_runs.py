"""vLLM's KV cache grouping on runs of layers: buckets and their strided/contiguous splits
as ``range`` objects, so a periodic model of 10^8 layers costs a few objects.

A :class:`Segment` is the layers ``lo + period * q + offset`` for ``q < repeats`` and each
``offset`` (ascending), i.e. some pattern entries of one periodic block; a bucket (the layers of
one spec, ascending) is a list of segments in index order. ``select`` is ``bucket[i::step]``
(vLLM's newest strided split) and ``window`` is ``bucket[a:b]`` (the ~v0.9 contiguous split).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Segment:
    lo: int
    period: int
    offsets: tuple[int, ...]
    repeats: int

    @property
    def size(self) -> int:
        return len(self.offsets) * self.repeats

    def index_at(self, position: int) -> int:
        q, j = divmod(position, len(self.offsets))
        return self.lo + self.period * q + self.offsets[j]


def bucket_size(bucket: list[Segment]) -> int:
    return sum(s.size for s in bucket)


def select(bucket: list[Segment], first: int, step: int) -> list[range]:
    """Indices at positions ``first, first + step, ...`` of the bucket, as ranges."""
    out: list[range] = []
    position = 0
    for seg in bucket:
        size = seg.size
        t0 = (first - position) % step if position > first else first - position
        position += size
        if t0 >= size:
            continue
        c = len(seg.offsets)
        classes = c // math.gcd(step, c)
        lcm = step * classes
        stride = seg.period * (lcm // c)
        for u in range(classes):
            t = t0 + step * u
            if t >= size:
                break
            count = -(-(size - t) // lcm)
            start = seg.index_at(t)
            out.append(range(start, start + stride * count, stride))
    return out


def window(bucket: list[Segment], a: int, b: int) -> list[range]:
    """Indices at positions ``[a, b)`` of the bucket, as ranges."""
    out: list[range] = []
    position = 0
    for seg in bucket:
        x, y = max(a - position, 0), min(b - position, seg.size)
        position += seg.size
        if x >= y:
            continue
        c = len(seg.offsets)
        q1, q2 = -(-x // c), y // c
        if q1 >= q2:
            out.extend(range(i, i + 1) for i in map(seg.index_at, range(x, y)))
            continue
        out.extend(range(i, i + 1) for i in map(seg.index_at, range(x, q1 * c)))
        for offset in seg.offsets:
            start = seg.lo + seg.period * q1 + offset
            out.append(range(start, start + seg.period * (q2 - q1), seg.period))
        out.extend(range(i, i + 1) for i in map(seg.index_at, range(q2 * c, y)))
    return out
