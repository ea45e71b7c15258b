"""Cache parts by runs of decoder layers: a parallel hybrid layer (Falcon-H1) is two parts.

A :class:`PartRuns` stores, per pattern entry of a :class:`~kvbudget.spec.layer_runs.Runs` of
decoder layers, the tuple of cache entries one such layer holds: the layer itself for every kind
but ``hybrid``, its attention part then its state part for a
:class:`~kvbudget.spec.layers.ParallelHybrid`. Every part takes its decoder layer's
``layer_index`` on access, so layer counts stay decoder-layer counts, and :meth:`PartRuns.runs`
gives a hybrid run's ``range`` once per part. Cost is O(blocks x pattern) whatever the number of
layers; as a sequence it lists the parts in layer order, as
:func:`~kvbudget.spec.layers.cache_parts` does for a list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar, overload

from kvbudget.spec.layer_runs import Block, Runs

T = TypeVar("T")
U = TypeVar("U")


def _indexed(part: T, index: int) -> T:
    if getattr(part, "layer_index") == index:  # noqa: B009 (T is any indexed dataclass)
        return part
    out: T = replace(part, layer_index=index)  # type: ignore[type-var]
    return out


class PartRuns(Sequence[T]):
    """Cache parts of runs of decoder layers (see the module docstring)."""

    __slots__ = ("layers",)

    def __init__(self, layers: Runs[tuple[T, ...]]) -> None:
        self.layers = layers  # one tuple of parts per decoder layer

    @classmethod
    def single(cls, runs: Runs[T]) -> PartRuns[T]:
        """One part per decoder layer (the layers of ``runs`` as they are)."""
        blocks: list[Block[tuple[T, ...]]] = [
            Block(b.start, tuple((x,) for x in b.pattern), b.repeats) for b in runs.blocks
        ]
        return cls(Runs(blocks, base=runs.base))

    @property
    def base(self) -> int:
        return self.layers.base

    @property
    def blocks(self) -> tuple[Block[tuple[T, ...]], ...]:
        return self.layers.blocks

    def runs(self) -> Iterator[tuple[T, range]]:
        """``(part, indices)`` per part of every pattern entry (a hybrid run twice)."""
        for parts, indices in self.layers.runs():
            for part in parts:
                yield _indexed(part, indices[0]), indices

    def distinct(self) -> list[T]:
        """Distinct parts (equal but for ``layer_index``), as first seen."""
        seen: dict[Any, T] = {}
        for part, _ in self.runs():
            seen.setdefault(replace(part, layer_index=0), part)  # type: ignore[type-var]
        return list(seen.values())

    def map(self, function: Callable[[T, int], U]) -> PartRuns[U]:
        """``function(part, first_index)`` once per part of every pattern entry; same blocks."""
        return PartRuns(
            self.layers.map(
                lambda parts, first: tuple(function(_indexed(p, first), first) for p in parts)
            )
        )

    def __len__(self) -> int:
        return sum(sum(map(len, b.pattern)) * b.repeats for b in self.layers.blocks)

    def __iter__(self) -> Iterator[T]:
        for block in self.layers.blocks:
            index = self.layers.base + block.start
            for _ in range(block.repeats):
                for parts in block.pattern:
                    for part in parts:
                        yield _indexed(part, index)
                    index += 1

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...

    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return tuple(self)[index]
        n = len(self)
        position = index + n if index < 0 else index
        if not 0 <= position < n:
            raise IndexError(f"index {index} out of range for {n} parts")
        for block in self.layers.blocks:
            per_period = sum(map(len, block.pattern))
            if position >= per_period * block.repeats:
                position -= per_period * block.repeats
                continue
            q, rest = divmod(position, per_period)
            for j, parts in enumerate(block.pattern):
                if rest < len(parts):
                    layer = self.layers.base + block.start + q * len(block.pattern) + j
                    return _indexed(parts[rest], layer)
                rest -= len(parts)
        raise AssertionError("unreachable: position checked against len")

    def __repr__(self) -> str:
        return f"PartRuns({len(self)} parts of {len(self.layers)} layers)"
