"""The typed ``audits`` section reads the sections earlier versions wrote and writes them back
field for field (no nulls added, nothing dropped)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from kvbudget.accept.audit_sections import AuditsSection

#: sections as report.json held them before the models (written by hand from the keys
#: IsolationResult.summary(), ReuseResult.summary(), run_restart_upgrade and _failed returned)
OLD: dict[str, Any] = {
    "isolation": {
        "verdict": "no_leak_detected",
        "reason": "no cross-tenant cached tokens",
        "cross_tenant_cached_tokens": 0,
        "p_values": {"mann_whitney": 0.75, "ks": None},
        "auc": 0.45,
        "mde_auc": 0.69,
        "alpha": 0.05,
        "trials": 30,
        "positive_control": True,
        "salt_mode": "per-tenant",
        "source": "simulated",
        "basis": "simulated (fixed(step=0.001s, per_token=2e-05s))",
    },
    "isolation_markdown": "### Isolation audit",
    "cross_tenant_cached_tokens": 0,
    "leak_detected": False,
    "reuse": {"verdict": "inconclusive", "status": "failed", "reason": "could not run: 429"},
    "restart": {
        "figures": "simulated (fixed step timing)",
        "verdict": "pass",
        "identity": "deploy-v1",
        "upgraded_identity": "deploy-v2",
        "num_prompts": 1,
        "checks": [
            {
                "phase": "restart",
                "identity": "deploy-v1",
                "prompt_sha256": "ab",
                "cached_tokens": 48,
                "output_vs_cold": "identical",
                "verdict": "pass",
                "reason": "48 prompt tokens reused",
            }
        ],
        "reason": "restart reused the store; upgrade got none",
        "basis": "simulated (fixed step timing)",
    },
    "failed": ["reuse"],
}


def test_old_sections_round_trip_field_for_field() -> None:
    section = AuditsSection.model_validate(OLD)
    assert json.loads(section.model_dump_json()) == OLD
    assert section.reuse is not None and section.reuse.status == "failed"
    assert [name for name, _ in section.summaries()] == ["isolation", "reuse", "restart"]


def test_no_audit_requested_is_an_empty_section() -> None:
    section = AuditsSection.model_validate({})
    assert not section.requested and section.model_dump() == {}


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(ValidationError):
        AuditsSection.model_validate({"isolation": {"verdict": "x", "leak": 1}})
