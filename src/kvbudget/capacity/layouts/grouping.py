"""Group a stage's layers by (kind, window) in first-seen order, run by run (never per layer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from kvbudget.capacity.layouts.base import group_key
from kvbudget.spec.layer_parts import PartRuns
from kvbudget.spec.layer_runs import IndexedRuns, LayerIndices, Runs

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Members(Generic[T]):
    """The runs of one group: ``(layer, indices)`` where every index holds a layer like it."""

    runs: tuple[tuple[T, range], ...]

    @property
    def first(self) -> T:
        return self.runs[0][0]

    @property
    def indices(self) -> LayerIndices:
        return LayerIndices(indices for _, indices in self.runs)

    def total(self, per_layer: Callable[[T], int]) -> int:
        """``sum(per_layer(x) for x in layers)``, one call per run."""
        return sum(per_layer(item) * len(indices) for item, indices in self.runs)


def group_by_kind(layers: Sequence[T]) -> list[tuple[tuple[str, int | None], Members[T]]]:
    """``[((kind, window), members), ...]`` in order of first appearance.

    ``layers`` as :class:`PartRuns` (a hybrid run's parts go to their own groups, both with the
    run's indices), :class:`Runs`, or any sequence of indexed layers (compressed by runs)."""
    runs = layers if isinstance(layers, Runs | PartRuns) else IndexedRuns.from_items(layers)
    groups: dict[tuple[str, int | None], list[tuple[T, range]]] = {}
    for item, indices in runs.runs():
        groups.setdefault(group_key(item), []).append((item, indices))
    return [(key, Members(tuple(members))) for key, members in groups.items()]
