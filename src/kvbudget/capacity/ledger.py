"""The calculation ledger: the model's provenance plus every calculation input.

Each entry says where a value came from (config file + key, catalog, flag, default, derivation),
the config's sha256 and revision, the tool version, when it was read and how it was interpreted.
Conflicts (a requested length above the model's ``max_position_embeddings``, a window present but
disabled) are flagged with the override order used.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kvbudget import __version__
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.provenance import OVERRIDE_ORDER, LedgerEntry, SourceKind


def input_entry(
    field: str, value: Any, source: SourceKind, *, location: str = "", note: str = ""
) -> LedgerEntry:
    """A ledger entry for a calculation input (flag or default)."""
    return LedgerEntry(
        field=field,
        value=value,
        source=source,
        location=location,
        tool_version=__version__,
        read_at=datetime.now(UTC).isoformat(timespec="seconds"),
        note=note,
    )


def length_conflict(spec: ModelSpec, tokens: int, entry: LedgerEntry) -> LedgerEntry:
    """Flag ``tokens`` above the model's configured maximum length."""
    limit = spec.max_position_embeddings
    if limit is not None and tokens > limit:
        return entry.with_conflict(
            f"tokens={tokens} exceeds max_position_embeddings={limit} from the config; the flag wins for this "
            f"arithmetic (order: {' > '.join(OVERRIDE_ORDER)}), but an engine would refuse max_model_len > {limit} "
            "without rope scaling / an override"
        )
    return entry
