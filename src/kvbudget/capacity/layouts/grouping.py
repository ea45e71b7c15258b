"""Group a stage's layers by (kind, window) in first-seen order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from kvbudget.capacity.layouts.base import group_key

T = TypeVar("T")


def group_by_kind(layers: Sequence[T]) -> list[tuple[tuple[str, int | None], list[T]]]:
    """``[((kind, window), [layers...]), ...]`` in order of first appearance."""
    groups: dict[tuple[str, int | None], list[T]] = {}
    for layer in layers:
        groups.setdefault(group_key(layer), []).append(layer)
    return list(groups.items())
