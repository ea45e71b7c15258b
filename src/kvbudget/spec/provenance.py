"""Provenance of every input: where a value came from and how it was read.

A :class:`LedgerEntry` is one line of the audit ledger (the seed's "来源台账"): value, source
kind, location (file + key, catalog id, flag), the config's sha256, snapshot revision when known,
tool version, time read and an interpretation note. ``conflict`` explains a disagreement
between sources and which one won (the override order).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

SourceKind = Literal[
    "config",  # read from config.json (file + key)
    "catalog",  # from the bundled catalog (same as config, but the file ships with kvbudget)
    "flag",  # a CLI flag / explicit input
    "user",  # a --set override
    "default",  # a kvbudget or engine default
    "architecture_default",  # a default the architecture defines when the config omits it
    "derived",  # computed from other fields (e.g. head_dim = hidden_size / num_attention_heads)
]

#: Override order, strongest first: a user --set beats a flag beats the config beats defaults.
OVERRIDE_ORDER: tuple[SourceKind, ...] = (
    "user",
    "flag",
    "config",
    "catalog",
    "architecture_default",
    "derived",
    "default",
)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One resolved input and its provenance."""

    field: str
    value: Any
    source: SourceKind
    location: str = ""
    config_sha256: str | None = None
    revision: str | None = None
    tool_version: str = ""
    read_at: str = ""
    note: str = ""
    conflict: str | None = None

    def with_conflict(self, text: str) -> LedgerEntry:
        """A copy flagged with a conflict explanation (appended if one is already there)."""
        joined = text if not self.conflict else f"{self.conflict}; {text}"
        return replace(self, conflict=joined)

    def to_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "value": self.value,
            "source": self.source,
            "location": self.location,
            "config_sha256": self.config_sha256,
            "revision": self.revision,
            "tool_version": self.tool_version,
            "read_at": self.read_at,
            "note": self.note,
            "conflict": self.conflict,
        }
