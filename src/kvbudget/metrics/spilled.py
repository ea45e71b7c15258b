"""Exact percentiles of more values than a run should hold in memory.

:class:`SpilledColumns` keeps rows of float64 columns (appended one at a time) in a fixed
in-memory buffer and spills each full buffer to an anonymous temporary file
(:func:`tempfile.TemporaryFile` in ``TMPDIR``: it has no name and is gone when closed or when the
process ends, error or not). Memory stays at the buffer's size whatever the number of rows;
the file grows by 8 bytes a value.

:func:`percentile` gives *exactly* ``numpy.percentile(values, q)`` (method ``linear``): with
every value still in memory it calls numpy on them; past the buffer it finds the two order
statistics numpy would interpolate between by radix selection on the order-preserving integer
view of float64 (a histogram of 16 key bits per pass over the file, a few passes, then an
in-memory sort of the few values left), and interpolates as numpy's ``_lerp`` does. No sketch:
the same bits.
"""

from __future__ import annotations

import math
import tempfile
from array import array
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import IO

import numpy as np

#: rows kept in memory before the buffer goes to the temporary file
BUFFER_ROWS = 1 << 16
#: values read from the file at once
READ_ROWS = 1 << 16
#: a candidate range this small is sorted in memory instead of refined further
COLLECT_LIMIT = 1 << 16
_STEP_BITS = 16
_SIGN = np.uint64(1 << 63)

Chunks = Callable[[], Iterator[np.ndarray]]


class SpilledColumns:
    """Rows of ``num_columns`` float64 values: a buffer in memory, the rest in a temporary file."""

    def __init__(self, num_columns: int = 1, *, buffer_rows: int = 0) -> None:
        self.num_columns = num_columns
        self._limit = (buffer_rows or BUFFER_ROWS) * num_columns
        self._buf = array("d")
        self._file: IO[bytes] | None = None
        self._spilled_values = 0

    def __len__(self) -> int:
        return (self._spilled_values + len(self._buf)) // self.num_columns

    @property
    def spilled(self) -> bool:
        """Whether some rows are in the temporary file."""
        return self._file is not None

    def append(self, value: float) -> None:
        """Add one row of a one-column store."""
        self._buf.append(value)
        if len(self._buf) >= self._limit:
            self._spill()

    def extend_array(self, values: np.ndarray) -> None:
        """Add several rows of a one-column store (a float64 array, copied as bytes)."""
        self._buf.frombytes(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        if len(self._buf) >= self._limit:
            self._spill()

    def append2(self, first: float, second: float) -> None:
        """Add one row of a two-column store."""
        buf = self._buf
        buf.append(first)
        buf.append(second)
        if len(buf) >= self._limit:
            self._spill()

    def _spill(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="kvbudget-values-")  # noqa: SIM115 (closed by close() or on collection)
        self._file.seek(0, 2)
        self._buf.tofile(self._file)
        self._spilled_values += len(self._buf)
        self._buf = array("d")

    def in_memory(self) -> np.ndarray:
        """The buffered rows, shape (rows, num_columns) (every row when nothing spilled)."""
        return np.frombuffer(self._buf, dtype=np.float64).reshape(-1, self.num_columns)

    def chunks(self) -> Iterator[np.ndarray]:
        """Every row in the order appended, a block of rows (2-D array) at a time."""
        cols = self.num_columns
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            left = self._spilled_values
            while left:
                count = min(left, READ_ROWS * cols)
                data = np.fromfile(self._file, dtype=np.float64, count=count)
                left -= count
                yield data.reshape(-1, cols)
        yield self.in_memory()

    def column(self, index: int) -> Chunks:
        """A source of column ``index``'s values, block by block (for :func:`select`)."""

        def chunks() -> Iterator[np.ndarray]:
            for block in self.chunks():
                yield block[:, index]

        return chunks

    def exact_sum(self, column: int = 0) -> float:
        """``math.fsum`` of column ``column``'s values (the correctly rounded exact sum), a
        block at a time (:func:`_fold`)."""
        partials: list[float] = []
        for block in self.column(column)():
            partials = _fold(partials, block.tolist())
        return math.fsum(partials)

    def read_all(self) -> np.ndarray:
        """Every row in one array (memory for all of them: a fallback, not the usual path)."""
        return np.concatenate(list(self.chunks()))

    def close(self) -> None:
        """Drop the temporary file (also done when the store is garbage collected)."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self._spilled_values = 0


def _keys(values: np.ndarray) -> np.ndarray:
    """float64 -> uint64 with the same order (negatives reversed, sign bit set for the rest)."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    # the sign spread over all bits (arithmetic shift): all ones flips a negative's bits, the
    # sign bit alone sets a positive's
    flip = (bits.view(np.int64) >> np.int64(63)).view(np.uint64) | _SIGN
    return bits ^ flip


def _value(key: int) -> float:
    bits = key ^ (1 << 63) if key >> 63 else ~key & ((1 << 64) - 1)
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def select(source: Chunks, ranks: Sequence[int]) -> dict[int, float]:
    """The values at 0-based ``ranks`` of the sorted values ``source()`` yields (no NaN).

    Radix selection: each pass over the source narrows each rank's candidate key range by 16
    bits (a histogram); once a range holds at most :data:`COLLECT_LIMIT` values they are sorted
    in memory. At most four histogram passes and one collecting pass.
    """
    # rank -> (range start key, free bits below it, values below the range, values in it)
    state: dict[int, tuple[int, int, int, int]] = {r: (0, 64, 0, -1) for r in ranks}
    out: dict[int, float] = {}
    while state:
        ranges = sorted({(lo, bits, below, count) for lo, bits, below, count in state.values()})
        hist: dict[tuple[int, int], np.ndarray] = {}
        found: dict[tuple[int, int], list[np.ndarray]] = {}
        for lo, bits, _, count in ranges:
            if 0 <= count <= COLLECT_LIMIT or bits == 0:
                found[(lo, bits)] = []
            else:
                hist[(lo, bits)] = np.zeros(1 << min(bits, _STEP_BITS), dtype=np.int64)
        for chunk in source():
            keys = _keys(chunk)
            for (lo, bits), parts in found.items():
                if bits:
                    parts.append(keys[(keys >> np.uint64(bits)) == np.uint64(lo >> bits)])
            for (lo, bits), h in hist.items():
                inside = keys if bits == 64 else keys[(keys >> np.uint64(bits)) == lo >> bits]
                shift = bits - min(bits, _STEP_BITS)
                mask = np.uint64(h.size - 1)
                h += np.bincount(
                    ((inside >> np.uint64(shift)) & mask).astype(np.int64), minlength=h.size
                )
        for rank, (lo, bits, below, _count) in list(state.items()):
            if (lo, bits) in found:
                if bits == 0:
                    out[rank] = _value(lo)
                else:
                    keys = np.sort(np.concatenate(found[(lo, bits)]))
                    out[rank] = _value(int(keys[rank - below]))
                del state[rank]
                continue
            h = hist[(lo, bits)]
            cum = np.cumsum(h)
            b = int(np.searchsorted(cum, rank - below, side="right"))
            step = min(bits, _STEP_BITS)
            before = int(cum[b - 1]) if b else 0
            state[rank] = (lo | (b << (bits - step)), bits - step, below + before, int(h[b]))
    return out


def percentile(store: SpilledColumns, q: float, column: int = 0) -> float | None:
    """``numpy.percentile`` (method ``linear``) of one column, bit for bit; ``None`` if empty."""
    n = len(store)
    if not n:
        return None
    if not store.spilled:
        return float(np.percentile(store.in_memory()[:, column], q))
    source = store.column(column)
    if any(bool(np.isnan(c).any()) for c in source()):
        return math.nan
    return _percentile_from(n, q, lambda ranks: select(source, ranks))


def percentiles(
    store: SpilledColumns, qs: Sequence[float], column: int = 0
) -> dict[float, float | None]:
    """:func:`percentile` of each of ``qs``, bit for bit, from one selection pass over the file
    for all of them (not one each); ``None`` for each when the store is empty."""
    n = len(store)
    if not n:
        return dict.fromkeys(qs)
    if not store.spilled:
        return {q: percentile(store, q, column) for q in qs}
    source = store.column(column)
    if any(bool(np.isnan(c).any()) for c in source()):
        return dict.fromkeys(qs, math.nan)
    needed: set[int] = set()
    for q in qs:  # which order statistics each q interpolates between
        _percentile_from(n, q, partial(_note, needed))
    stats = select(source, sorted(needed))
    return {q: _percentile_from(n, q, lambda _ranks: stats) for q in qs}


def _note(needed: set[int], ranks: list[int]) -> dict[int, float]:
    """Collect the ranks a percentile asks for (placeholder values: the first pass's result is
    dropped)."""
    needed.update(ranks)
    return dict.fromkeys(ranks, 0.0)


def _percentile_from(
    n: int, q: float, order_stats: Callable[[list[int]], dict[int, float]]
) -> float:
    """numpy's linear method (``_quantile``, ``_get_indexes``, ``_lerp``) given order statistics."""
    virtual = (n - 1) * float(np.true_divide(q, 100))
    if virtual >= n - 1:
        prev = nxt = n - 1
        gamma = virtual + 1  # numpy's index -1 for the last value
    elif virtual < 0:
        prev = nxt = 0
        gamma = virtual
    else:
        prev = math.floor(virtual)
        nxt = prev + 1
        gamma = virtual - prev
    values = order_stats(sorted({prev, nxt}))
    a, b = values[prev], values[nxt]
    diff = b - a
    result = a + diff * gamma
    if gamma >= 0.5:
        result = b - diff * (1 - gamma)
    return result


def median_of(source: Chunks, n: int) -> float:
    """``numpy.median`` of the ``n`` values ``source()`` yields (no NaN), bit for bit."""
    half = n // 2
    if n % 2:
        return select(source, [half])[half]
    got = select(source, [half - 1, half])
    return (got[half - 1] + got[half]) / 2


class ExactSum:
    """``math.fsum`` of values added one at a time, in memory that does not grow with them.

    Values are buffered and a full buffer is folded into a few partials whose exact sum is the
    exact sum of everything so far (:func:`_fold`: repeated ``math.fsum`` of the remainder);
    :meth:`value` is ``math.fsum`` of the partials and the buffer, which is ``math.fsum`` of
    every value (both are the correctly rounded exact sum).
    Finite values only.
    """

    def __init__(self, *, buffer_values: int = 4096) -> None:
        self.count = 0
        self._partials: list[float] = []
        self._buf = array("d")
        self._limit = buffer_values

    def add(self, value: float) -> None:
        self.count += 1
        self._buf.append(value)
        if len(self._buf) >= self._limit:
            self._partials = _fold(self._partials, self._buf)
            self._buf = array("d")

    def value(self) -> float:
        return math.fsum([*self._partials, *self._buf])


def _fold(partials: list[float], values: Sequence[float]) -> list[float]:
    """Floats whose exact sum is the exact sum of ``partials`` and ``values`` (a few of them).

    ``math.fsum`` (C) gives the correctly rounded exact sum ``s``; the exact remainder, once
    ``-s`` joins the terms, is rounded again, and so on until a remainder rounds to zero, which
    only an exactly zero one does (every double is a multiple of 2**-1074, so a nonzero remainder
    is at least the smallest subnormal). Each remainder is at most half an ulp of the last
    output, so the loop ends after a few rounds (the exact sum's bit span over 53). The
    same exact sum as folding each value into Shewchuk's partials, at C speed.
    """
    terms = [*partials, *values]
    out: list[float] = []
    while True:
        s = math.fsum(terms)
        if s == 0.0:
            return out
        out.append(s)
        terms.append(-s)
