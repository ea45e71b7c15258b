"""The audits a plan asks for (``audits.isolation``, ``audits.reuse``) as report sections.

Runs :mod:`kvbudget.audit` against the plan's target: the audit's simulated probe for ``sim``
and ``serve`` (virtual time, the lock's block size and prefix-caching policy), an HTTP probe
for ``http``. The isolation result feeds the "any cross-tenant cache hit" stop condition: a
cross-tenant cached-token count above zero or a ``leak_detected`` verdict triggers it.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

import numpy as np

from kvbudget.accept.audit_sections import (
    AuditsSection,
    AuditSummary,
    IsolationSection,
    RestartSection,
    ReuseSection,
)
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.targets.http import RunAsync
from kvbudget.audit.isolation import IsolationConfig, SaltMode, run_isolation
from kvbudget.audit.probe_http import HttpProbe
from kvbudget.audit.probe_sim import SimProbe, SimProbeOptions
from kvbudget.audit.probes import Probe
from kvbudget.audit.reuse import ReuseConfig, run_reuse
from kvbudget.errors import KvbudgetError
from kvbudget.safety.redact import register_secret

ISOLATION_TRIALS = 30

T = TypeVar("T")
S = TypeVar("S", bound=AuditSummary)


def _salt_mode(plan: AcceptPlan) -> SaltMode | None:
    policy = plan.lock.prefix_caching.value
    if policy is None or policy.salt == "per-tenant":
        return "per-tenant"
    if policy.salt == "none":
        return "none"
    return None  # user-supplied salts are not in the plan (they are secrets)


async def _with_probe(plan: AcceptPlan, work: Callable[[Probe], Awaitable[T]]) -> T:
    t = plan.target
    if t.kind == "http":
        assert t.base_url is not None
        key = os.environ.get(t.api_key_env) if t.api_key_env else None
        register_secret(key)
        async with HttpProbe(
            t.base_url,
            model=t.served_model or plan.lock.model.id,
            metrics_url=t.metrics_url,
            api_key=key,
            timeout_s=t.request_timeout_s,
        ) as probe:
            return await work(probe)
    policy = plan.lock.prefix_caching.value
    opts = SimProbeOptions(
        block_size=plan.lock.block_size.value or 16,
        enable_prefix_caching=policy is None or policy.enabled,
        model=plan.lock.model.id,
    )
    return await work(SimProbe(opts, np.random.default_rng([plan.seed, 31])))


def _failed(section: type[S], name: str, exc: Exception) -> S:
    """A failed audit as its report section: verdict ``inconclusive`` (it proves nothing either
    way), ``status: failed`` and the reason in one line."""
    why = exc.one_line() if isinstance(exc, KvbudgetError) else f"{type(exc).__name__}: {exc}"
    return section(
        verdict="inconclusive",
        status="failed",
        reason=f"the {name} audit could not run: {' '.join(why.split())}; the matrix cells "
        "are kept; fix the endpoint and rerun accept with --resume",
    )


def run_audits(plan: AcceptPlan, run_async: RunAsync | None) -> AuditsSection:
    """Summaries of the requested audits (``{}`` when none is requested).

    An audit that fails (the endpoint answers 429, drops the connection ...) becomes a section
    with ``verdict: inconclusive``, ``status: failed`` and the reason, never an exception that would discard the finished
    matrix; ``failed`` lists the audits that failed."""
    if not (plan.audits.isolation or plan.audits.reuse or plan.audits.restart):
        return AuditsSection()
    if run_async is None:
        return AuditsSection(
            note="audits requested but no event-loop runner was given (run from the CLI)"
        )
    return _sections(plan, run_async)


def _sections(plan: AcceptPlan, run_async: RunAsync) -> AuditsSection:
    """Each requested audit's typed section; an audit's own headline (``summary()``, a dict
    of the audit package) is validated into its section here, once.

    Only the fields set here are written (``AuditsSection`` serializes ``model_fields_set``),
    as the report always read."""
    out = AuditsSection()
    if plan.audits.isolation:
        mode = _salt_mode(plan)
        if mode is None:
            out.isolation = IsolationSection(
                verdict="inconclusive",
                reason="user-supplied salts are secrets and not in the plan; run "
                "kvbudget audit isolation --salt-file",
            )
        else:
            cfg = IsolationConfig(trials=ISOLATION_TRIALS, seed=plan.seed, salt_mode=mode)
            try:
                iso = run_async(_with_probe(plan, lambda p: run_isolation(p, cfg)))
            except Exception as exc:  # the finished matrix is never discarded for it
                out.isolation = _failed(IsolationSection, "isolation", exc)
                out.failed = [*out.failed, "isolation"]
            else:
                out.isolation = IsolationSection.model_validate(
                    {**iso.summary(), "basis": iso.provenance.label()}
                )
                out.isolation_markdown = iso.to_markdown(3)
                out.cross_tenant_cached_tokens = iso.cross_tenant_cached_tokens
                out.leak_detected = iso.verdict == "leak_detected"
    if plan.audits.reuse:
        rcfg = ReuseConfig(seed=plan.seed)
        try:
            reuse = run_async(_with_probe(plan, lambda p: run_reuse(p, rcfg)))
        except Exception as exc:  # the finished matrix is never discarded for it
            out.reuse = _failed(ReuseSection, "reuse", exc)
            out.failed = [*out.failed, "reuse"]
        else:
            out.reuse = ReuseSection.model_validate(
                {**reuse.summary(), "basis": reuse.provenance.label()}
            )
            out.reuse_markdown = reuse.to_markdown(3)
    if plan.audits.restart:
        out.restart = _restart(plan, run_async)
        if out.restart.status == "failed":
            out.failed = [*out.failed, "restart"]
    return out


def _restart(plan: AcceptPlan, run_async: RunAsync) -> RestartSection:
    """Reuse across a restart and an upgrade: the simulator's store (kvbudget.audit.restart)."""
    from kvbudget.audit.restart import run_restart_upgrade

    if plan.target.kind != "sim":
        return RestartSection(
            verdict="untested",
            reason="the restart/upgrade audit runs on the simulator only (a real engine's "
            "restart needs its persistent store and connector); use target kind sim",
        )
    cfg = ReuseConfig(num_prompts=4, prompt_tokens=512, max_tokens=16, logprobs=0, seed=plan.seed)
    try:
        section = run_async(run_restart_upgrade(cfg))
    except Exception as exc:  # the finished matrix is never discarded for it
        return _failed(RestartSection, "restart", exc)
    return RestartSection.model_validate({**section, "basis": section["figures"]})
