"""The ``audits`` section of ``report.json``, typed: one model per audit a plan can request.

Each section is what :mod:`kvbudget.accept.judge.audits` builds from the audit's own result
(``IsolationResult.summary()``, ``ReuseResult.summary()``, ``run_restart_upgrade``) or, when the
audit could not run, a ``verdict: inconclusive``, ``status: failed`` section with the reason. A
section is written with the fields that were given only (as before the models existed), so a
report.json reads the same and an older one loads unchanged.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_serializer(mode="wrap")
    def _serialize_given_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}


class AuditSummary(_Section):
    """What every audit section says: its verdict, why, and on what basis."""

    #: the audit's own verdict vocabulary (``no_leak_detected``, ``pass``, ``inconclusive``, ...)
    verdict: str
    reason: str = ""
    #: ``failed`` when the audit could not run; the reuse audit's own pass/fail status
    status: str | None = None
    #: how the figures were produced (``simulated (fixed(...))``, ``measured (...)``)
    basis: str | None = None
    source: Literal["measured", "simulated"] | None = None


class IsolationSection(AuditSummary):
    """``kvbudget audit isolation``'s headline (cross-tenant prefix-cache hits)."""

    cross_tenant_cached_tokens: int | None = None
    p_values: dict[str, float | None] = Field(default_factory=dict)
    auc: float | None = None
    mde_auc: float | None = None
    alpha: float | None = None
    trials: int | None = None
    positive_control: bool | None = None
    salt_mode: str | None = None


class ReuseSection(AuditSummary):
    """``kvbudget audit reuse``'s headline (reused KV gives the cold output)."""

    num_prompts: int | None = None
    num_reuse_proven: int | None = None
    num_diverged: int | None = None
    reset_available: bool | None = None


class RestartRow(_Section):
    """One prompt of the restart/upgrade audit (``kvbudget.audit.restart.RestartCheck``)."""

    phase: Literal["restart", "upgrade"]
    identity: str
    prompt_sha256: str
    cached_tokens: int
    output_vs_cold: str
    verdict: str
    reason: str


class RestartSection(AuditSummary):
    """The simulator's restart/upgrade audit (``kvbudget audit restart``)."""

    figures: str | None = None
    identity: str | None = None
    upgraded_identity: str | None = None
    num_prompts: int | None = None
    checks: list[RestartRow] = Field(default_factory=list)


class AuditsSection(_Section):
    """Every requested audit's section (nothing set: no audit was requested)."""

    isolation: IsolationSection | None = None
    isolation_markdown: str | None = None
    #: copied from the isolation section for the cross-tenant stop condition
    cross_tenant_cached_tokens: int | None = None
    leak_detected: bool | None = None
    reuse: ReuseSection | None = None
    reuse_markdown: str | None = None
    restart: RestartSection | None = None
    #: the audits that could not run (the run exits 1)
    failed: list[str] = Field(default_factory=list)
    note: str | None = None

    @property
    def requested(self) -> bool:
        return bool(self.model_fields_set)

    def summaries(self) -> list[tuple[str, AuditSummary]]:
        """(name, section) of each audit that has a section, in report order."""
        named: list[tuple[str, AuditSummary | None]] = [
            ("isolation", self.isolation),
            ("reuse", self.reuse),
            ("restart", self.restart),
        ]
        return [(name, s) for name, s in named if s is not None]

    def details(self) -> list[tuple[str, str]]:
        """(audit name, its Markdown details) for the audits that wrote them."""
        named = [("isolation", self.isolation_markdown), ("reuse", self.reuse_markdown)]
        return [(name, text) for name, text in named if text is not None]
