"""Run-length layer sequences: a model's layers as periodic blocks, never one object per layer.

A :class:`Runs` is a read-only sequence stored as blocks; each block is a short ``pattern``
repeated ``repeats`` times (``pattern=(sliding,)*5 + (full,), repeats=10`` is Gemma 3's 60 first
layers). Length, lookup, slicing, counting and :meth:`Runs.runs` cost O(number of blocks x
pattern length), whatever the number of layers; only iterating over it visits every item.
:class:`LayerSeq` is a ``Runs`` of layer specs whose ``layer_index`` is filled in on access (the
indices of one group of layers, as a few ``range`` objects, are
:class:`~kvbudget.spec.layer_indices.LayerIndices`).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import Field, dataclass, replace
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar, overload

from kvbudget.spec.layers import LayerSpec


class _Dataclass(Protocol):
    """Any dataclass instance (typeshed's ``DataclassInstance``, which ``replace`` takes)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


T = TypeVar("T")
U = TypeVar("U")
#: an indexed item: a frozen dataclass with a ``layer_index`` field
D = TypeVar("D", bound=_Dataclass)
E = TypeVar("E", bound=_Dataclass)


@dataclass(frozen=True, slots=True)
class Block(Generic[T]):
    """Items ``start .. start + len(pattern) * repeats`` (positions), ``pattern`` repeated."""

    start: int
    pattern: tuple[T, ...]
    repeats: int

    @property
    def stop(self) -> int:
        return self.start + len(self.pattern) * self.repeats


class Runs(Sequence[T]):
    """An immutable sequence held as periodic blocks (see the module docstring).

    ``base`` is the index of position 0 (a slice of a model's layers keeps their indices).
    """

    __slots__ = ("_blocks", "_starts", "base")

    def __init__(self, blocks: Iterable[Block[T]], *, base: int = 0) -> None:
        out: list[Block[T]] = []
        position = 0
        for block in blocks:
            if block.repeats <= 0 or not block.pattern:
                continue
            if block.start != position:
                raise ValueError(f"block starts at {block.start}, expected {position}")
            out.append(block)
            position = block.stop
        self._blocks: tuple[Block[T], ...] = tuple(out)
        self._starts = [b.start for b in self._blocks]
        self.base = base

    # construction -------------------------------------------------------------------------
    @classmethod
    def periodic(cls, pattern: Sequence[T], length: int, *, base: int = 0) -> Self:
        """``pattern`` repeated to ``length`` items (the last period may be cut short)."""
        return cls(_periodic_blocks(0, tuple(pattern), length), base=base)

    @classmethod
    def from_items(cls, items: Iterable[T], *, base: int = 0) -> Self:
        """Compress an explicit list by runs of equal consecutive items."""
        blocks: list[Block[T]] = []
        position = 0
        for item, group in itertools.groupby(items):
            count = sum(1 for _ in group)
            blocks.append(Block(position, (item,), count))
            position += count
        return cls(blocks, base=base)

    @classmethod
    def concat(cls, parts: Iterable[tuple[Sequence[T], int]], *, base: int = 0) -> Self:
        """Blocks of ``(pattern, length)``: each pattern repeated to its length, one after another."""
        blocks: list[Block[T]] = []
        position = 0
        for pattern, length in parts:
            blocks.extend(_periodic_blocks(position, tuple(pattern), length))
            position += max(0, length)
        return cls(blocks, base=base)

    @classmethod
    def chain(cls, parts: Iterable[Runs[T]], *, base: int = 0) -> Self:
        """The parts one after another (their own ``base`` is ignored)."""
        blocks: list[Block[T]] = []
        position = 0
        for part in parts:
            for block in part.blocks:
                blocks.append(Block(position + block.start, block.pattern, block.repeats))
            position += len(part)
        return cls(blocks, base=base)

    def last_index(self) -> dict[Hashable, int]:
        """The last index of every distinct item (by :meth:`_key`), O(blocks x pattern)."""
        out: dict[Hashable, int] = {}
        for item, indices in self.runs():
            key = self._key(item)
            out[key] = max(out.get(key, -1), indices[-1])
        return out

    # what a block stores -------------------------------------------------------------------
    @property
    def blocks(self) -> tuple[Block[T], ...]:
        return self._blocks

    def _item(self, item: T, index: int) -> T:
        """The item at layer ``index`` (``LayerSeq`` fills in ``layer_index``)."""
        return item

    def runs(self) -> Iterator[tuple[T, range]]:
        """``(item, indices)`` per pattern entry of every block, indices as a ``range``."""
        for block in self._blocks:
            period = len(block.pattern)
            stop = self.base + block.stop
            for offset, item in enumerate(block.pattern):
                first = self.base + block.start + offset
                yield self._item(item, first), range(first, stop, period)

    def distinct(self) -> list[T]:
        """Distinct items (as first seen), O(blocks x pattern)."""
        seen: dict[Hashable, T] = {}
        for item, _ in self.runs():
            seen.setdefault(self._key(item), item)
        return list(seen.values())

    def _key(self, item: T) -> Hashable:
        assert isinstance(item, Hashable)
        return item

    def map(self, function: Callable[[T, int], U]) -> Runs[U]:
        """Apply ``function(item, first_index)`` once per pattern entry; same block structure."""
        blocks: list[Block[U]] = []
        for block in self._blocks:
            first = self.base + block.start
            pattern = tuple(function(item, first + j) for j, item in enumerate(block.pattern))
            blocks.append(Block(block.start, pattern, block.repeats))
        return Runs(blocks, base=self.base)

    # Sequence ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._blocks[-1].stop if self._blocks else 0

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Runs[T]: ...

    def __getitem__(self, index: int | slice) -> T | Runs[T]:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                raise ValueError(
                    f"{type(self).__name__}[{index.start}:{index.stop}:{index.step}]: a run-length "
                    "sequence slices with step 1 only (a strided copy would renumber its "
                    "indices); use runs() for each item's indices as a range"
                )
            return self._window(start, max(start, stop))
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {n} items")
        block = self._blocks[bisect.bisect_right(self._starts, index) - 1]
        item = block.pattern[(index - block.start) % len(block.pattern)]
        return self._item(item, self.base + index)

    def _window(self, lo: int, hi: int) -> Self:
        """Positions ``[lo, hi)``, keeping their indices (``base`` moves to ``lo``)."""
        blocks: list[Block[T]] = []
        position = 0
        for block in self._blocks:
            a, b = max(lo, block.start), min(hi, block.stop)
            if a >= b:
                continue
            period = len(block.pattern)
            rotate = (a - block.start) % period
            pattern = block.pattern[rotate:] + block.pattern[:rotate]
            blocks.extend(_periodic_blocks(position, pattern, b - a))
            position += b - a
        window = type(self).__new__(type(self))
        Runs.__init__(window, blocks, base=self.base + lo)
        return window

    def __iter__(self) -> Iterator[T]:
        for block in self._blocks:
            index = self.base + block.start
            for _ in range(block.repeats):
                for item in block.pattern:
                    yield self._item(item, index)
                    index += 1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        if type(other) is type(self) and (other.base, other.blocks) == (self.base, self._blocks):
            return True  # same blocks: equal without visiting every item
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(len(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} items in {len(self._blocks)} blocks)"


def _periodic_blocks(start: int, pattern: tuple[T, ...], length: int) -> list[Block[T]]:
    if length <= 0 or not pattern:
        return []
    period = _shortest_period(pattern)
    full, rest = divmod(length, period)
    period_items = pattern[:period]
    blocks = [Block(start, period_items, full)] if full else []
    if rest:
        blocks.append(Block(start + full * period, period_items[:rest], 1))
    return blocks


def _shortest_period(pattern: tuple[T, ...]) -> int:
    """Smallest p with ``pattern == pattern[:p] * k`` (a run of one item has period 1)."""
    n = len(pattern)
    for p in range(1, n):
        if n % p == 0 and pattern[:p] * (n // p) == pattern:
            return p
    return n


def _unindexed(item: D) -> D:
    return replace(item, layer_index=0)


class IndexedRuns(Runs[D]):
    """Runs of frozen dataclasses with a ``layer_index`` field, filled in on access."""

    __slots__ = ()

    def _item(self, item: D, index: int) -> D:
        if getattr(item, "layer_index") == index:  # noqa: B009 (D is any indexed dataclass)
            return item
        return replace(item, layer_index=index)

    def _key(self, item: D) -> Hashable:
        key = _unindexed(item)
        assert isinstance(key, Hashable)
        return key

    @classmethod
    def from_items(cls, items: Iterable[D], *, base: int = 0) -> Self:
        """Compress explicit items by runs of items equal but for ``layer_index``."""
        blocks: list[Block[D]] = []
        position = 0
        for _, group in itertools.groupby(items, key=_unindexed):
            first: D | None = None
            count = 0
            for item in group:
                first = item if first is None else first
                count += 1
            assert first is not None
            blocks.append(Block(position, (first,), count))
            position += count
        return cls(blocks, base=base)

    def map_indexed(self, function: Callable[[D, int], E]) -> IndexedRuns[E]:
        """:meth:`map` whose results are indexed dataclasses too."""
        return IndexedRuns(self.map(function).blocks, base=self.base)

    def replaced(self, items: dict[int, D]) -> Self:
        """These items with ``items[i]`` at index ``i`` (O(blocks x replacements))."""
        parts: list[Runs[D]] = []
        position = self.base
        for index in sorted(items):
            parts.append(self[position - self.base : index - self.base])
            parts.append(Runs.from_items([items[index]]))
            position = index + 1
        parts.append(self[position - self.base :])
        return type(self).chain(parts, base=self.base)


class LayerSeq(IndexedRuns[LayerSpec]):
    """A model's layers: templates stored once per pattern entry, ``layer_index`` set on access."""

    __slots__ = ()

    @classmethod
    def from_runs(cls, runs: Runs[T], build: Callable[[T, int], LayerSpec]) -> LayerSeq:
        """Layers from a run-length list (e.g. layer types): ``build(item, first_index)``."""
        mapped = runs.map(build)
        return cls(mapped.blocks, base=runs.base)
