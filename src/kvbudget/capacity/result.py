"""``CalcResult``: one KV calculation, rendered as a table or as the ``calc --json`` document.

The JSON schema (``kvbudget.calc/1``) is documented in ``docs/commands/calc.md``. Every byte
figure is ``computed`` (arithmetic on the config and flags), never measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbudget import __version__
from kvbudget.capacity.assumptions import Assumption, Status
from kvbudget.spec.provenance import LedgerEntry
from kvbudget.units import GiB, MiB

SCHEMA = "kvbudget.calc/1"


@dataclass(frozen=True, slots=True)
class CalcResult:
    """One calculation, ready to render as a table or as the JSON document."""

    mode: str  # "explicit" | "model"
    status: Status
    engine: str
    kv_dtype: str
    tokens: int
    seqs: int
    tp: int = 1
    pp: int = 1
    dp: int = 1
    model_id: str | None = None
    block_size: int | None = None
    bytes_per_token: int | None = None
    bytes_per_sequence: int | None = None
    total_bytes: int | None = None
    replica_bytes: int | None = None
    per_rank_max_bytes: int | None = None
    groups: list[dict[str, Any]] = field(default_factory=list)
    per_rank: list[dict[str, Any]] = field(default_factory=list)
    assumptions: list[Assumption] = field(default_factory=list)
    ledger: list[LedgerEntry] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    missing_fields: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        def mib(v: int | None) -> float | None:
            return None if v is None else v / MiB

        def gib(v: int | None) -> float | None:
            return None if v is None else v / GiB

        return {
            "schema": SCHEMA,
            "kind": "calc",
            "figure": "computed",
            "tool_version": __version__,
            "mode": self.mode,
            "model_id": self.model_id,
            "engine": self.engine,
            "kv_dtype": self.kv_dtype,
            "status": self.status,
            "status_reasons": self.reasons,
            "missing_fields": self.missing_fields,
            "tokens": self.tokens,
            "seqs": self.seqs,
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "block_size": self.block_size,
            "bytes_per_token": self.bytes_per_token,
            "bytes_per_sequence": self.bytes_per_sequence,
            "total_bytes": self.total_bytes,
            "per_token_mib": mib(self.bytes_per_token),
            "per_sequence_mib": mib(self.bytes_per_sequence),
            "per_sequence_gib": gib(self.bytes_per_sequence),
            "total_mib": mib(self.total_bytes),
            "total_gib": gib(self.total_bytes),
            "replica_bytes": self.replica_bytes,
            "per_rank_max_bytes": self.per_rank_max_bytes,
            "groups": self.groups,
            "per_rank": self.per_rank,
            "assumptions": [a.to_dict() for a in self.assumptions],
            "ledger": [e.to_dict() for e in self.ledger],
            "notes": self.notes,
        }
