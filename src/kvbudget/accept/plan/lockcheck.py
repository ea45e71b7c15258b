"""Diff two object locks (a comparison's baseline and variant) and apply a variant's overrides.

Resolving the lock against what a started target observed is
:func:`kvbudget.accept.targets.lock_resolve.resolve_lock`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from kvbudget.accept.plan.checks import FACTOR_LOCK_FIELD
from kvbudget.accept.plan.lock import ObjectLock, flatten_lock, lock_value
from kvbudget.errors import ConfigError


class Difference(NamedTuple):
    """One field that differs between a baseline and its variant (lock or engine field)."""

    field: str
    baseline: Any
    variant: Any

    def line(self) -> str:
        """How the report shows it: ``kv_dtype: 'auto' -> 'fp8'``."""
        return f"{self.field}: {self.baseline!r} -> {self.variant!r}"


def difference_lines(differences: Sequence[Difference]) -> list[str]:
    return [d.line() for d in differences]


def apply_overrides(lock: ObjectLock, overrides: dict[str, Any]) -> ObjectLock:
    """A copy of ``lock`` with top-level fields replaced (``{"kv_dtype": "fp8"}``)."""
    data = lock.model_dump(mode="json")
    for key, value in overrides.items():
        if key not in data:
            raise ConfigError(
                f"comparisons.set.{key}: not a lock field; use one of {sorted(data)}",
                field=f"comparisons.set.{key}",
            )
        data[key] = value
    return ObjectLock.model_validate(data)


def lock_differences(baseline: ObjectLock, variant: ObjectLock) -> list[Difference]:
    """Every flattened field whose value differs."""
    a = flatten_lock(baseline)
    b = flatten_lock(variant)
    out = []
    for name in a:
        va = lock_value(a[name].value)
        vb = lock_value(b[name].value) if name in b else None
        if va != vb:
            out.append(Difference(name, va, vb))
    return out


def single_factor_check(factor: str, differences: Sequence[Difference]) -> bool:
    """Comparable only when the sole difference is the factor's field."""
    allowed = FACTOR_LOCK_FIELD[factor]
    return bool(differences) and all(d.field == allowed for d in differences)
