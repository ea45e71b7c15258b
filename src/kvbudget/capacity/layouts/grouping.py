"""Group a stage's layers by (kind, window) in first-seen order, run by run (never per layer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from kvbudget.capacity.layouts.base import group_key
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layer_parts import PartRuns
from kvbudget.spec.layer_runs import Runs
from kvbudget.spec.layers import ParallelHybrid, cache_parts

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


def _listed_runs(items: Sequence[T]) -> list[tuple[T, range]]:
    """A listed sequence (each item carries its own ``layer_index``) as one-layer runs."""
    return [(item, range(index, index + 1)) for item in items for index in [item_index(item)]]


def item_index(item: object) -> int:
    index = getattr(item, "layer_index", None)
    assert isinstance(index, int), item
    return index


def group_by_kind(layers: Sequence[T]) -> list[tuple[tuple[str, int | None], Members[T]]]:
    """``[((kind, window), members), ...]`` in order of first appearance, per run; a parallel
    hybrid layer (Falcon-H1) counts once in its attention group and once in its state group
    (:class:`PartRuns`, e.g. vLLM's specs, come already split: both parts of a run share it)."""
    runs = layers.runs() if isinstance(layers, Runs | PartRuns) else _listed_runs(layers)
    groups: dict[tuple[str, int | None], list[tuple[T, range]]] = {}
    for item, indices in runs:
        parts = cache_parts((item,)) if isinstance(item, ParallelHybrid) else (item,)
        for part in parts:
            groups.setdefault(group_key(part), []).append((cast(T, part), indices))
    return [(key, Members(tuple(members))) for key, members in groups.items()]
