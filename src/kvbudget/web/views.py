"""Library results -> display rows for the page (unit conversion and text only, no KV math)."""

from __future__ import annotations

from typing import Any

from kvbudget.units import format_bytes, to_gib, to_mib
from kvbudget.web.library import ExplicitResult

STATUS_WORDS: dict[str, str] = {
    "exact": "every structural assumption holds; the formula describes this cache",
    "structural_reference": "an assumption does not hold or is unconfirmed; a structural reference only",
    "not_applicable": "the formula does not describe this structure; measure instead",
}


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


def explicit_view(result: ExplicitResult) -> dict[str, Any]:
    """The explicit calculator's answer for the page (and for API clients)."""
    total = result.total_bytes
    return {
        "status": result.status,
        "status_words": STATUS_WORDS.get(result.status, ""),
        "figures": [
            byte_row("per_token", "per token", result.bytes_per_token),
            byte_row("per_sequence", "per sequence", result.bytes_per_sequence),
            byte_row("total", "total", total),
        ],
        "total_display": f"{format_bytes(total)} ({total:,} bytes, computed)",
        "assumptions": result.assumptions,
        "label": "computed",
    }


def model_view(calc_doc: dict[str, Any], plan_doc: dict[str, Any]) -> dict[str, Any]:
    """Model mode rows (filled in when the calc and plan documents land)."""
    return {"status": calc_doc.get("status"), "calc": calc_doc, "plan": plan_doc}


def chart_view(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Chart points with display labels."""
    return {"points": points, "label": "computed", "has_concurrency": True}
