"""Verdict rules of the isolation audit (``docs/audits.md``, "Verdict rules").

Pure functions over the trial records: the cached-token excess over the control arm, the
timing test, the positive control and the ordered verdict rules.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from kvbudget.metrics.sidechannel import SideChannelTest, timing_side_channel

Arm = Literal["hit", "control", "positive"]
Verdict = Literal["leak_detected", "no_leak_detected", "inconclusive"]


class TrialRecord(BaseModel):
    """One trial (no prompt text, no salt: only lengths, TTFTs and counts)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    arm: Arm
    victim_ok: bool
    attacker_ok: bool
    attacker_ttft_s: float | None
    attacker_prompt_tokens: int | None
    attacker_cached_tokens: int | None
    hit_counter_delta: float | None
    error: str | None = None


class PositiveControl(BaseModel):
    model_config = ConfigDict(extra="forbid")

    passed: bool
    evidence: Literal["cached_tokens", "hit_counter", "timing", "none"]
    num_trials: int
    num_trials_with_reuse: int | None
    p_value_holm: float | None
    auc: float | None


def valid(records: list[TrialRecord], arm: Arm) -> list[TrialRecord]:
    return [
        r
        for r in records
        if r.arm == arm and r.victim_ok and r.attacker_ok and r.attacker_ttft_s is not None
    ]


def excess(values: list[float], baseline: float) -> float:
    return float(sum(max(0.0, v - baseline) for v in values))


def counts(
    hit: list[TrialRecord], control: list[TrialRecord], attr: str
) -> tuple[float | None, float | None, float | None]:
    """(excess over the control maximum, raw sum, control maximum) of one counter."""
    hv = [getattr(r, attr) for r in hit if getattr(r, attr) is not None]
    cv = [getattr(r, attr) for r in control if getattr(r, attr) is not None]
    if not hv:
        return None, None, None
    base = float(max(cv)) if cv else 0.0
    return excess(hv, base), float(sum(hv)), base


def timing(
    a: list[TrialRecord], b: list[TrialRecord], alpha: float, power: float
) -> SideChannelTest:
    return timing_side_channel(
        [r.attacker_ttft_s for r in a if r.attacker_ttft_s is not None],
        [r.attacker_ttft_s for r in b if r.attacker_ttft_s is not None],
        alpha=alpha,
        power=power,
    )


def positive_control(
    pos: list[TrialRecord], control: list[TrialRecord], alpha: float, power: float
) -> PositiveControl:
    test = timing(pos, control, alpha, power) if len(pos) >= 2 and len(control) >= 2 else None
    p = min(test.p_mann_whitney_holm, test.p_ks_holm) if test else None
    auc = test.auc if test else None
    for attr, evidence in (("attacker_cached_tokens", "cached_tokens"),
                           ("hit_counter_delta", "hit_counter")):  # fmt: skip
        cv = [getattr(r, attr) for r in control if getattr(r, attr) is not None]
        pv = [getattr(r, attr) for r in pos if getattr(r, attr) is not None]
        if pv:
            base = max(cv) if cv else 0
            n_reuse = sum(1 for v in pv if v > base)
            return PositiveControl(
                passed=bool(pos) and 2 * n_reuse >= len(pos),
                evidence=evidence,  # type: ignore[arg-type]
                num_trials=len(pos),
                num_trials_with_reuse=n_reuse,
                p_value_holm=p,
                auc=auc,
            )
    detected = bool(test and test.detected)
    return PositiveControl(
        passed=detected,
        evidence="timing" if test else "none",
        num_trials=len(pos),
        num_trials_with_reuse=None,
        p_value_holm=p,
        auc=auc,
    )


def decide(
    leak_tokens: float | None,
    test: SideChannelTest | None,
    pc: PositiveControl,
    enough: bool,
) -> tuple[Verdict, str]:
    if leak_tokens is not None and leak_tokens > 0:
        return "leak_detected", (
            f"{leak_tokens:g} cross-tenant cached tokens above the control arm (a leak "
            "regardless of timing)"
        )
    if not enough or test is None:
        return "inconclusive", "fewer than 2 successful trials in the hit or control arm"
    if test.detected:
        return "leak_detected", (
            f"hit-arm TTFT smaller than control (Holm p = "
            f"{min(test.p_mann_whitney_holm, test.p_ks_holm):.3g} <= alpha {test.alpha:g}, "
            f"AUC {test.auc:.3f})"
        )
    if not pc.passed:
        return "inconclusive", (
            f"the positive control (same tenant) showed no reuse (evidence: {pc.evidence}); "
            "the audit cannot tell isolation from a cache that never hits"
        )
    tokens = (
        "the target reports no cached tokens or hit counter"
        if leak_tokens is None
        else "no cross-tenant cached tokens"
    )
    return "no_leak_detected", (
        f"{tokens} and no timing difference at alpha {test.alpha:g}; "
        f"an effect of AUC >= {test.mde_auc:.3f} would be detected with power {test.power:g}"
    )
