"""What a config normaliser returns, shared by :mod:`kvbudget.spec.normalise` and its
per-family rules (:mod:`kvbudget.spec.normalise_attention`, :mod:`kvbudget.spec.normalise_hybrid`,
:mod:`kvbudget.spec.normalise_sparse`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbudget.errors import SpecError


@dataclass
class Normalised:
    """The config as transformers' config class sees it, with what was rewritten and why."""

    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    consumed: set[str] = field(default_factory=set)


def expected(prefix: str, field: str, what: str, value: object) -> SpecError:
    """The one-line refusal of a config field whose value has the wrong shape."""
    return SpecError(
        f"{prefix}{field}: expected {what}, got {str(value)[:40]!r}; fix the config",
        field=field.split(".")[0],
    )
