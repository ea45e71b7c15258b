"""The page's row cells: a figure in bytes, MiB and GiB, a labelled value with its note, free text
shown as one line (unit conversion and text only, no KV math)."""

from __future__ import annotations

import json
from typing import Any

from kvbudget.units import format_bytes, to_gib, to_mib


def _trim(value: float) -> str:
    text = f"{value:,.6f}".rstrip("0").rstrip(".")
    return text or "0"


def byte_row(key: str, name: str, num_bytes: int) -> dict[str, Any]:
    """One figure in bytes, MiB and GiB (binary), as numbers and as text."""
    return {
        "key": key,
        "name": name,
        "bytes": num_bytes,
        "mib": to_mib(num_bytes),
        "gib": to_gib(num_bytes),
        "bytes_text": f"{num_bytes:,}",
        "mib_text": _trim(to_mib(num_bytes)),
        "gib_text": _trim(to_gib(num_bytes)),
        "label": "computed",
    }


def bytes_text(num_bytes: int | None) -> str:
    return "—" if num_bytes is None else f"{format_bytes(num_bytes)} ({num_bytes:,} B)"


def labelled_row(
    name: str, value: Any, note: str = "", label: str | None = "computed"
) -> dict[str, Any]:
    row: dict[str, Any] = {"name": name, "value": value, "note": note}
    if label:
        row["label"] = label
    return row


def one_line_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
