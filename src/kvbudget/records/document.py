"""Versioned, self-describing result documents.

Every document says what its numbers are: ``computed`` (arithmetic), ``simulated`` (the timing
model is named) or ``measured`` (the engine, its version and the hardware are named). Subclass
:class:`ResultDocument` for a concrete kind (``plan``, ``sim``, ``bench``, ``accept`` …) and
add fields; ``extra="forbid"`` keeps the schema honest.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kvbudget import __version__
from kvbudget.errors import ReportError
from kvbudget.safety.redact import redact_text
from kvbudget.validation import first_problem

FigureKind = Literal["computed", "simulated", "measured"]
FIGURE_KINDS: tuple[FigureKind, ...] = get_args(FigureKind)

SCHEMA_VERSION = 1


def utc_now_iso() -> str:
    """Current UTC time, ISO 8601 with seconds and a ``Z``."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Provenance(BaseModel):
    """Where a figure comes from.

    ``simulated`` needs ``timing_model``; ``measured`` needs ``engine`` (version and hardware
    are recorded as given, ``"unknown"`` when the engine does not say).
    """

    model_config = ConfigDict(extra="forbid")

    kind: FigureKind
    timing_model: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    hardware: str | None = None
    note: str | None = None

    @model_validator(mode="after")
    def _named(self) -> Provenance:
        if self.kind == "simulated" and not self.timing_model:
            raise ValueError("a simulated figure must name its timing_model")
        if self.kind == "measured" and not self.engine:
            raise ValueError(
                "a measured figure must name the engine (and its version and hardware, "
                "'unknown' if the engine does not report them)"
            )
        return self

    def label(self) -> str:
        """Short human label, e.g. ``measured (vllm 0.11.0, H100)``."""
        if self.kind == "simulated":
            return f"simulated ({self.timing_model})"
        if self.kind == "measured":
            parts = [p for p in (self.engine, self.engine_version) if p]
            tail = f", {self.hardware}" if self.hardware else ""
            return f"measured ({' '.join(parts)}{tail})"
        return "computed"


class Figure(BaseModel):
    """One named number with its unit and provenance kind."""

    model_config = ConfigDict(extra="forbid")

    name: str
    value: float | int | str | bool | None
    unit: str | None = None
    kind: FigureKind
    note: str | None = None


class ResultDocument(BaseModel):
    """Base of every result document kvbudget writes."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    kind: str
    tool: Literal["kvbudget"] = "kvbudget"
    tool_version: str = __version__
    created: str = Field(default_factory=utc_now_iso)
    provenance: Provenance
    figures: list[Figure] = Field(default_factory=list)

    def figure(self, name: str) -> Figure:
        """The figure called ``name`` (KeyError if absent)."""
        for fig in self.figures:
            if fig.name == name:
                return fig
        raise KeyError(name)


DocT = TypeVar("DocT", bound=ResultDocument)


def write_document(path: Path, doc: ResultDocument) -> None:
    """Write a document as indented JSON (atomic: temp file then rename), with the run's
    secrets scrubbed (:mod:`kvbudget.safety.redact`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(redact_text(doc.model_dump_json(indent=2)) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_document(path: Path, cls: type[DocT]) -> DocT:
    """Read and validate a document; a one-line :class:`ReportError` if it is not one."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ReportError(f"result document {path} does not exist") from exc
    except UnicodeDecodeError as exc:
        raise ReportError(
            f"result document {path} is not UTF-8 text (byte {exc.start}); kvbudget writes "
            "UTF-8 JSON"
        ) from None
    except RecursionError:
        raise ReportError(
            f"result document {path} nests deeper than any result document does; it is not one"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ReportError(f"result document {path} is not readable JSON: {exc}") from exc
    version = raw.get("schema_version", SCHEMA_VERSION) if isinstance(raw, dict) else None
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise ReportError(
            f"result document {path} has schema_version {raw['schema_version']}, this kvbudget "
            f"reads up to {SCHEMA_VERSION}; upgrade kvbudget"
        )
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        problem = first_problem(exc)
        raise ReportError(
            f"result document {path} is not a valid {cls.__name__}: field {problem.where!r}: "
            f"{problem.message} ({exc.error_count()} error(s))"
        ) from exc
