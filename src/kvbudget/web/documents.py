"""Reading result documents (accept / sim / bench) for the viewer.

The viewer renders the whole document in the browser (as text). This module checks the common
header every kvbudget document carries (``kind``, ``schema_version``, ``provenance``,
``figures``; see :mod:`kvbudget.records.document`) with the records models themselves, so the
page can say what the figures are (computed, simulated with which timing model, measured on
which engine and hardware) and flag a document that is not a kvbudget result.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from kvbudget.errors import ReportError
from kvbudget.records.document import FIGURE_KINDS, SCHEMA_VERSION, Figure, Provenance

_SCALAR = (str, int, float, bool, type(None))


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "value"
    return f"{where}: {first['msg']}"


def inspect_document(raw: Any) -> dict[str, Any]:
    """Summary of a result document's header; ``ReportError`` when it is not a JSON object.

    Returns ``kind``, ``schema_version``, ``tool_version``, ``created``, the provenance label
    (e.g. ``simulated (roofline)``), the figures with their kinds, and ``warnings`` for anything
    that does not match the kvbudget document header (the viewer still shows the JSON).
    """
    if not isinstance(raw, dict):
        raise ReportError(
            f"document: expected a JSON object with a 'kind' field, got {type(raw).__name__}; "
            "open the .json file that accept, sim or bench wrote",
            field="document",
        )
    warnings: list[str] = []
    kind = raw.get("kind")
    label_field = next((key for key in ("figures", "figure") if raw.get(key) in FIGURE_KINDS), None)
    if not isinstance(kind, str) and label_field is None:
        warnings.append("no 'kind' field: this may not be a kvbudget result document")
    version = raw.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        warnings.append(
            f"schema_version {version} is newer than this kvbudget reads ({SCHEMA_VERSION}); "
            "upgrade kvbudget to see every field"
        )
    provenance_label: str | None = None
    if "provenance" in raw:
        try:
            provenance_label = Provenance.model_validate(raw["provenance"]).label()
        except ValidationError as exc:
            warnings.append(f"provenance is not valid: {_first_error(exc)}")
    elif label_field is not None:
        # summary documents (``kvbudget sim --json``, ``calc --json``, ``plan --json``) carry
        # their label as a top-level string plus the timing model / engine fields
        try:
            provenance_label = Provenance(
                kind=raw[label_field],
                timing_model=_str_or_none(raw.get("timing_model")),
                engine=_str_or_none(raw.get("engine")),
                engine_version=_str_or_none(raw.get("engine_version")),
            ).label()
        except ValidationError as exc:
            warnings.append(f"'{label_field}' label is incomplete: {_first_error(exc)}")
    else:
        warnings.append(
            "no 'provenance': the document does not say whether it is computed, simulated or measured"
        )
    figures: list[dict[str, Any]] = []
    raw_figures = raw.get("figures", [])
    if label_field == "figures":
        raw_figures = []
    if isinstance(raw_figures, list):
        for index, item in enumerate(raw_figures):
            try:
                fig = Figure.model_validate(item)
            except ValidationError as exc:
                warnings.append(f"figures[{index}] is not valid: {_first_error(exc)}")
                continue
            figures.append(fig.model_dump())
    else:
        warnings.append("'figures' is not a list")
    header = {
        key: raw[key]
        for key in ("kind", "schema_version", "tool", "tool_version", "created")
        if key in raw and isinstance(raw[key], _SCALAR)
    }
    return {
        "header": header,
        "provenance": provenance_label,
        "figures": figures,
        "warnings": warnings,
        "is_kvbudget_document": provenance_label is not None
        and (isinstance(kind, str) or label_field is not None),
    }
