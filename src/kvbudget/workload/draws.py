"""Whole-array draws replayed chunk by chunk: the same numbers in memory that does not grow.

A workload's per-session quantities are drawn from one generator as whole arrays, one after
another (all arrival gaps, then all tenants, then all input lengths, ...). :class:`Column`
gives the same values in bounded memory with two passes:

1. **skip** (at construction): note the generator's state, then draw the quantity chunk by chunk
   and throw the values away; the generator ends exactly where the one-shot draw left it, so
   the next quantity (and the prompt tokens after the last one) start where they always did;
2. **replay** (:meth:`Column.take`): a private generator set to the noted state draws the values
   again, a chunk at a time, as the sessions reach them.

This rests on numpy's Generator giving the same values drawn in chunks as in one call, for the
distributions used here (``exponential``, ``gamma``, ``normal``, ``lognormal``, ``random``,
``integers`` with scalar and array bounds, ``choice`` with ``p``); each is checked in
``tests/unit/workload/test_workload_draws.py``, odd chunk sizes included. A quantity drawn in
several calls (an empirical histogram's bin, then the value inside it) is a list of
:data:`Stage` s: each stage is skipped and replayed from its own noted state, the later ones
fed the earlier ones' values for the same elements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

#: a draw for ``n`` elements, given the earlier stages' values for those same elements
Stage = Callable[[np.random.Generator, int, list[np.ndarray]], np.ndarray]

#: elements drawn at once while skipping
SKIP_CHUNK = 1 << 16


def generator_at(like: np.random.Generator, state: Mapping[str, Any]) -> np.random.Generator:
    """A new generator of ``like``'s bit-generator type, set to ``state``."""
    bits = type(like.bit_generator)(0)
    bits.state = state
    return np.random.Generator(bits)


def run_stages(stages: Sequence[Stage], gens: Sequence[np.random.Generator], n: int) -> np.ndarray:
    """The last stage's values for ``n`` elements, each stage drawing from its own generator."""
    outs: list[np.ndarray] = []
    for stage, gen in zip(stages, gens, strict=True):
        outs.append(stage(gen, n, outs))
    return outs[-1]


class Column:
    """``n`` values of a quantity drawn from ``rng`` as one array, handed out in order."""

    def __init__(
        self, rng: np.random.Generator, stages: Sequence[Stage], n: int, *, chunk: int = 0
    ) -> None:
        chunk = chunk or SKIP_CHUNK
        self._stages = tuple(stages)
        self.size = n
        starts: list[Mapping[str, Any]] = []
        for i, stage in enumerate(self._stages):
            starts.append(rng.bit_generator.state)
            # earlier stages replayed from their own starts give this stage its inputs
            earlier = [generator_at(rng, s) for s in starts[:i]]
            for a in range(0, n, chunk):
                m = min(chunk, n - a)
                outs: list[np.ndarray] = []
                for prev, gen in zip(self._stages[:i], earlier, strict=True):
                    outs.append(prev(gen, m, outs))
                stage(rng, m, outs)
        self._gens = [generator_at(rng, s) for s in starts]
        self._taken = 0

    def take(self, m: int) -> np.ndarray:
        """The next ``m`` values (those the one-shot draw had at these positions)."""
        if self._taken + m > self.size:
            raise ValueError(f"take({m}) past the column's {self.size} values")
        self._taken += m
        return run_stages(self._stages, self._gens, m)
