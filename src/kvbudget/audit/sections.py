"""Run the audits for another command (``accept``) and hand back report sections.

``accept`` knows its target as plain fields (kind, base URL, metrics URL, model, API key);
:func:`run_audits` builds the probe, runs the requested audits one after the other (never
while a load runs: both audits need an otherwise idle server) and returns an
:class:`AuditBundle` whose :meth:`AuditBundle.audits_dict` is what the acceptance verdicts
read (``cross_tenant_cached_tokens`` for the "cross-tenant cache hit" stop condition) and whose
:meth:`AuditBundle.to_markdown` is the report section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from kvbudget.audit.isolation import IsolationConfig, IsolationResult, run_isolation
from kvbudget.audit.probe_http import HttpProbe
from kvbudget.audit.probe_sim import SimProbe, SimProbeOptions
from kvbudget.audit.probes import Probe
from kvbudget.audit.reuse import ReuseConfig, ReuseResult, run_reuse
from kvbudget.errors import ConfigError


@dataclass
class AuditBundle:
    isolation: IsolationResult | None = None
    reuse: ReuseResult | None = None

    def audits_dict(self) -> dict[str, Any]:
        """Headline fields; ``cross_tenant_cached_tokens`` only when isolation ran."""
        out: dict[str, Any] = {}
        if self.isolation is not None:
            out["isolation"] = self.isolation.summary()
            out["cross_tenant_cached_tokens"] = self.isolation.cross_tenant_cached_tokens
        if self.reuse is not None:
            out["reuse"] = self.reuse.summary()
        return out

    def to_markdown(self, heading_level: int = 2) -> str:
        parts = [
            r.to_markdown(heading_level) for r in (self.isolation, self.reuse) if r is not None
        ]
        return "\n".join(parts)


async def _run(probe: Probe, iso: IsolationConfig | None, reuse: ReuseConfig | None) -> AuditBundle:
    bundle = AuditBundle()
    if iso is not None:
        bundle.isolation = await run_isolation(probe, iso)
    if reuse is not None:
        bundle.reuse = await run_reuse(probe, reuse)
    return bundle


async def run_audits(
    *,
    kind: Literal["sim", "http"],
    isolation: IsolationConfig | None,
    reuse: ReuseConfig | None,
    base_url: str | None = None,
    metrics_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    timeout_s: float = 60.0,
    endpoint: Literal["completions", "chat"] = "completions",
    sim: SimProbeOptions | None = None,
    seed: int = 0,
) -> AuditBundle:
    """Run the requested audits against a simulated or an HTTP target (see module doc)."""
    if kind == "sim":
        probe = SimProbe(sim or SimProbeOptions(), np.random.default_rng(seed))
        return await _run(probe, isolation, reuse)
    if not base_url:
        raise ConfigError("audit target kind 'http' needs base_url", field="base_url")
    async with HttpProbe(
        base_url,
        model=model,
        metrics_url=metrics_url,
        api_key=api_key,
        timeout_s=timeout_s,
        endpoint=endpoint,
    ) as http:
        return await _run(http, isolation, reuse)
