"""The layer indices of one group of layers as a few ``range`` objects, never one int per layer.

A :class:`LayerIndices` holds disjoint ``range`` objects (strided where the group's layers recur
periodically): length and membership cost O(number of ranges), lookup and slicing
O(ranges x log(span)), whatever the number of layers; its JSON form is
:meth:`LayerIndices.as_ranges`. The layers themselves are a
:class:`~kvbudget.spec.layer_runs.LayerSeq`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

#: a group's layers are written out one by one (plan's ``layer_indices``; the layers of strided
#: ranges in :meth:`LayerIndices.as_ranges`) only up to this many layers
MAX_SPELLED_OUT_LAYERS = 10_000


class LayerIndices(Sequence[int]):
    """Layer indices of one group as disjoint ascending ``range`` objects; iterates in ascending
    order."""

    __slots__ = ("ranges",)

    def __init__(self, ranges: Iterable[range]) -> None:
        self.ranges: tuple[range, ...] = tuple(r for r in ranges if len(r))

    @classmethod
    def of(cls, indices: Iterable[int]) -> LayerIndices:
        if isinstance(indices, LayerIndices):
            return indices
        runs: list[list[int]] = []
        for index in indices:
            if runs and runs[-1][1] == index:
                runs[-1][1] = index + 1
            else:
                runs.append([index, index + 1])
        return cls(range(a, b) for a, b in runs)

    def __len__(self) -> int:
        return sum(len(r) for r in self.ranges)

    def __iter__(self) -> Iterator[int]:
        if len(self.ranges) == 1:
            return iter(self.ranges[0])
        return heapq.merge(*self.ranges)

    def __contains__(self, value: object) -> bool:
        return any(value in r for r in self.ranges)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> LayerIndices: ...

    def __getitem__(self, index: int | slice) -> int | LayerIndices:
        """The ``index``-th smallest index, or a step-1 slice: O(ranges x log(span))."""
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                raise ValueError(
                    f"LayerIndices[{index.start}:{index.stop}:{index.step}]: slices with step 1 "
                    "only; iterate or use .ranges for a strided view"
                )
            if start >= stop:
                return LayerIndices(())
            return self.split(self._kth(start), self._kth(stop - 1) + 1)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {n} layer indices")
        return self._kth(index)

    def _kth(self, k: int) -> int:
        """The ``k``-th smallest index (0-based; the ranges are disjoint): the least value with
        more than ``k`` indices at or below it, by bisection over the values."""
        lo, hi = min(r[0] for r in self.ranges), max(r[-1] for r in self.ranges)
        while lo < hi:
            mid = (lo + hi) // 2
            if sum(len(range(r.start, min(mid + 1, r.stop), r.step)) for r in self.ranges) > k:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(len(self))

    def __repr__(self) -> str:
        return f"LayerIndices({list(self.ranges)!r})"

    def split(self, lo: int, hi: int) -> LayerIndices:
        """The indices in ``[lo, hi)``."""
        out: list[range] = []
        for r in self.ranges:
            first = max(lo, r.start) if r.step == 1 else _first_at_least(r, lo)
            out.append(range(first, min(hi, r.stop), r.step))
        return LayerIndices(out)

    def as_ranges(self) -> list[list[int]]:
        """JSON form, sorted by start: each step-1 range as a ``[start, stop)`` pair; the strided
        ranges' layers as pairs too (touching pairs merged) when they hold at most
        :data:`MAX_SPELLED_OUT_LAYERS` layers in all, else each strided range as one
        ``[start, last + 1, step]`` triple (Python's ``range``), pairs and triples mixed."""
        strided = [r for r in self.ranges if r.step != 1 and len(r) > 1]
        listed = sum(len(r) for r in strided) <= MAX_SPELLED_OUT_LAYERS
        pieces: list[tuple[int, int]] = []
        triples: list[list[int]] = []
        for r in self.ranges:
            if r.step == 1 or len(r) == 1:
                pieces.append((r.start, r.start + len(r)))
            elif listed:
                pieces.extend((i, i + 1) for i in r)
            else:
                triples.append([r.start, r.start + (len(r) - 1) * r.step + 1, r.step])
        runs: list[list[int]] = []
        for a, b in sorted(pieces):
            if runs and runs[-1][1] >= a:
                runs[-1][1] = max(runs[-1][1], b)
            else:
                runs.append([a, b])
        return sorted(runs + triples)


def _first_at_least(r: range, lo: int) -> int:
    if lo <= r.start:
        return r.start
    k = -(-(lo - r.start) // r.step)
    return r.start + k * r.step
