"""The acceptance plan file (YAML): schema, loading and one-line validation errors.

``load_plan(path)`` returns an :class:`AcceptPlan` or raises :class:`ConfigError` with one line
naming the field, the value and the fix, e.g.::

    ConfigError: load.tiers.short.max_tokens: must be >= min_tokens (got 100 < 200); fix the tier range

``plan_json_schema()`` is the JSON Schema (``kvbudget accept --schema``). A commented example
lives in ``examples/acceptance-demo.yaml`` and ``docs/plan-file.md``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from kvbudget.accept.plan.checks import (
    Audits,
    Canary,
    Comparison,
    QualityCheckpoint,
    Rollback,
    StopConditions,
    TargetPlan,
)
from kvbudget.accept.plan.engine_config import factor_refusal, sim_tiers
from kvbudget.accept.plan.errors import PLAN_FIELD_ERROR, field_error
from kvbudget.accept.plan.lifecycle import LifecycleLayer
from kvbudget.accept.plan.load import LoadPlan
from kvbudget.accept.plan.lock import ObjectLock, StrictModel
from kvbudget.errors import ConfigError
from kvbudget.safety.yamlload import load_yaml_text, read_text_file

PLAN_SCHEMA_VERSION = 1


class LedgerInput(StrictModel):
    """One declared input of the capacity ledger with its source (seed step 2)."""

    name: str
    value: str | int | float
    source: str = Field(description="config key, file, log line or request log it came from")
    note: str | None = None


class LedgerPlan(StrictModel):
    inputs: list[LedgerInput] = Field(default_factory=list)
    idle_baseline_bytes: int | None = Field(
        default=None, ge=0, description="measured idle GPU memory (weights, graphs, workspace)"
    )


class AcceptPlan(StrictModel):
    """A whole acceptance plan. Everything is declared before the run."""

    schema_version: int = Field(default=PLAN_SCHEMA_VERSION)
    name: str = Field(min_length=1)
    description: str | None = None
    seed: int = Field(default=0, ge=0)
    target: TargetPlan = Field(default_factory=TargetPlan)
    lock: ObjectLock
    ledger: LedgerPlan = Field(default_factory=LedgerPlan)
    load: LoadPlan
    quality: list[QualityCheckpoint] = Field(default_factory=list)
    stop: StopConditions
    comparisons: list[Comparison] = Field(default_factory=list)
    audits: Audits = Field(default_factory=Audits)
    rollback: Rollback = Field(default_factory=Rollback)
    canary: Canary = Field(default_factory=Canary)
    lifecycle: list[LifecycleLayer] = Field(
        default_factory=list,
        description="deletion contract per storage layer (owner, trigger, retention, check)",
    )

    @model_validator(mode="after")
    def _check(self) -> AcceptPlan:
        if self.schema_version != PLAN_SCHEMA_VERSION:
            raise field_error(
                "schema_version",
                f"this kvbudget reads plan schema {PLAN_SCHEMA_VERSION} "
                f"(got {self.schema_version}); update the plan file",
            )
        ids = [q.id for q in self.quality]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise field_error(
                "quality", f"checkpoint id {dupes[0]!r} is used twice; ids must be unique"
            )
        names = [c.name for c in self.comparisons]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise field_error(
                "comparisons", f"name {dupes[0]!r} is used twice; names must be unique"
            )
        if self.target.kind == "sim":
            try:
                sim_tiers(self.target, self.lock)
            except ConfigError as exc:
                field = exc.field or "target"
                text = str(exc).removeprefix(f"{field}: ")
                raise field_error(field, text) from None
        for index, comparison in enumerate(self.comparisons):
            why = factor_refusal(self.target, comparison, self.lock)
            if why is not None:
                raise field_error(f"comparisons.{index}.factor", f"refused before the run: {why}")
        valid = {f"{i}/{c}" for i, c in self.load.cell_order()}
        for index, comparison in enumerate(self.comparisons):
            for cell in comparison.cells or []:
                if cell not in valid:
                    raise field_error(
                        f"comparisons.{index}.cells",
                        f"unknown cell {cell!r}; write 'input/concurrency' such as 'medium/normal'",
                    )
        return self

    def canonical_sha256(self) -> str:
        """sha256 of the plan's canonical JSON (the inputs a report was made from)."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _loc_text(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def format_validation_error(exc: ValidationError) -> str:
    """The first error of a pydantic ValidationError as ``field.path: message``.

    Validators in the plan models raise :func:`~kvbudget.accept.plan.errors.field_error` to
    point below their own location.
    """
    err = exc.errors(include_url=False)[0]
    loc = tuple(part for part in err["loc"] if not str(part).startswith("function-"))
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if err["type"] == PLAN_FIELD_ERROR:
        ctx = err.get("ctx") or {}
        loc = (*loc, str(ctx["field"]))
        msg = str(ctx["text"])
    field = _loc_text(loc) or "plan"
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{field}: unknown field; remove it or check the spelling (see kvbudget accept --schema)"
    if kind == "missing":
        return f"{field}: required field is missing; add it (see docs/plan-file.md)"
    value = err.get("input")
    if kind in (
        "greater_than_equal",
        "greater_than",
        "less_than_equal",
        "less_than",
        "int_parsing",
        "float_parsing",
        "literal_error",
        "string_pattern_mismatch",
        "int_type",
        "bool_parsing",
        "string_type",
        "int_from_float",
        "too_short",
    ):
        return f"{field}: {msg} (got {value!r}); fix the value"
    return f"{field}: {msg}"


def parse_plan(data: Any, *, origin: str = "plan") -> AcceptPlan:
    """Validate already-parsed YAML/JSON data."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{origin}: expected a mapping at the top level, got {type(data).__name__}; "
            "start from examples/acceptance-demo.yaml (see docs/plan-file.md)"
        )
    try:
        return AcceptPlan.model_validate(data)
    except ValidationError as exc:
        text = format_validation_error(exc)
        raise ConfigError(text, field=text.split(":", 1)[0]) from None


def load_plan(path: str | Path) -> AcceptPlan:
    """Read and validate a YAML plan file; one-line ``ConfigError`` on any problem."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"plan: file {str(file)!r} not found; give the path of a YAML plan")
    try:
        data = load_yaml_text(read_text_file(file, what="plan"), source=f"plan {file.name}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"plan: {file.name}{where}: {problem}; fix the YAML syntax") from None
    return parse_plan(data, origin=file.name)


def plan_json_schema() -> dict[str, Any]:
    """JSON Schema of the plan file (draft 2020-12, as pydantic emits it)."""
    schema = AcceptPlan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "kvbudget acceptance plan"
    return schema
