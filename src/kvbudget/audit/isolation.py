"""Cross-tenant prefix-cache isolation audit (after Gu et al., "Auditing Prompt Caching in
Language Model APIs", 2025). Protocol, statistics and verdict rules: ``docs/audits.md``.

Each trial uses fresh random prompts (cache-breaking) and runs one of three arms, in a seeded
random order, strictly sequentially, ``max_tokens=1``:

* ``hit``: victim (tenant A) sends ``P = prefix + suffix_v``; attacker (tenant B) sends
  ``prefix + suffix_a``;
* ``control``: victim sends an unrelated prompt of the same length; attacker sends
  ``prefix' + suffix_a`` for a prefix nobody sent;
* ``positive``: as ``hit`` but the attacker is tenant A (must show reuse).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from kvbudget.audit.isolation_rules import (
    Arm,
    PositiveControl,
    TrialRecord,
    Verdict,
    counts,
    decide,
    positive_control,
    timing,
    valid,
)
from kvbudget.audit.probes import Probe
from kvbudget.errors import ConfigError, RunFailedError
from kvbudget.load.diagnosis import failure_from_text, stopped_line
from kvbudget.metrics.stats import min_detectable_auc
from kvbudget.records import ResultDocument
from kvbudget.workload.tokenizer import get_tokenizer

SaltMode = Literal["per-tenant", "user", "none"]
VICTIM = "tenant-a"
ATTACKER = "tenant-b"
ARMS: tuple[Arm, ...] = ("hit", "control", "positive")


@dataclass(frozen=True)
class IsolationConfig:
    trials: int = 30
    prefix_tokens: int = 512
    suffix_tokens: int = 32
    alpha: float = 0.05
    power: float = 0.8
    seed: int = 0
    salt_mode: SaltMode = "per-tenant"
    #: tenant -> salt for ``salt_mode="user"`` (never written, never printed)
    user_salts: Mapping[str, str] | None = field(default=None, repr=False)
    vocab_size: int = 32000

    def validate(self) -> None:
        if self.trials < 3:
            raise ConfigError(
                f"--trials {self.trials}: need at least 3 trials per arm (30+ for a useful "
                "minimum detectable effect)",
                field="trials",
            )
        if self.prefix_tokens < 1 or self.suffix_tokens < 1:
            raise ConfigError(
                f"--shared-prefix-tokens {self.prefix_tokens} / --suffix-tokens {self.suffix_tokens}: "
                "both must be >= 1 (the prefix should span several KV blocks, e.g. 512)",
                field="prefix_tokens",
            )
        if not 0 < self.alpha < 0.5:
            raise ConfigError(
                f"--alpha {self.alpha}: must lie in (0, 0.5), e.g. 0.05", field="alpha"
            )
        if self.salt_mode == "user":
            salts = self.user_salts or {}
            for tenant in (VICTIM, ATTACKER):
                value = salts.get(tenant)
                if not isinstance(value, str) or not value:
                    raise ConfigError(
                        f"--salt-file: tenant {tenant!r} has no salt (a non-empty string); the "
                        f"file must map {VICTIM!r} and {ATTACKER!r} to salts",
                        field="salt_file",
                    )


def declared_statistics(cfg: IsolationConfig) -> dict[str, Any]:
    """The statistics, fixed before any request is sent (printed first by the CLI)."""
    return {
        "tests": [
            "one-sided Mann-Whitney U (hit-arm attacker TTFT < control-arm attacker TTFT)",
            "one-sided two-sample Kolmogorov-Smirnov (same direction)",
        ],
        "multiplicity": "Holm over the two p-values (family-wise error alpha)",
        "alpha": cfg.alpha,
        "power": cfg.power,
        "trials_per_arm": cfg.trials,
        "effect_size": "AUC = P(control TTFT > hit TTFT) + P(tie)/2",
        "mde_auc": min_detectable_auc(cfg.trials, cfg.trials, alpha=cfg.alpha, power=cfg.power),
        "cached_token_rule": "any hit-arm attacker cached tokens above the control arm's "
        "maximum is a leak, regardless of timing",
        "positive_control": "same-tenant arm must show reuse (cached tokens, hit counter or, "
        "with neither reported, a detected timing difference) else inconclusive",
    }


class IsolationResult(ResultDocument):
    """Result of ``kvbudget audit isolation`` (embedded by accept as a report section)."""

    kind: str = "audit-isolation"
    verdict: Verdict
    reason: str
    declared: dict[str, Any]
    alpha: float
    seed: int
    trials: int
    prefix_tokens: int
    suffix_tokens: int
    salt_mode: SaltMode
    source: Literal["measured", "simulated"]
    target: dict[str, Any]
    p_values: dict[str, float | None]
    auc: float | None
    mde_auc: float
    timing: dict[str, Any] | None
    cross_tenant_cached_tokens: int | None
    cross_tenant_cached_tokens_raw: int | None
    control_cached_tokens_max: int | None
    cross_tenant_hit_counter_tokens: float | None
    positive_control: PositiveControl
    num_errors: int
    trial_records: list[TrialRecord]

    def summary(self) -> dict[str, Any]:
        """The headline fields (what accept's ``audits`` dict and stop conditions read)."""
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "cross_tenant_cached_tokens": self.cross_tenant_cached_tokens,
            "p_values": self.p_values,
            "auc": self.auc,
            "mde_auc": self.mde_auc,
            "alpha": self.alpha,
            "trials": self.trials,
            "positive_control": self.positive_control.passed,
            "salt_mode": self.salt_mode,
            "source": self.source,
        }

    def to_markdown(self, heading_level: int = 2) -> str:
        from kvbudget.audit.render import isolation_markdown

        return isolation_markdown(self, heading_level)


@dataclass
class _Trial:
    arm: Arm
    victim_ids: tuple[int, ...]
    attacker_ids: tuple[int, ...]
    attacker_tenant: str


def _salts(cfg: IsolationConfig) -> dict[str, str | None]:
    if cfg.salt_mode == "none":
        return {VICTIM: None, ATTACKER: None}
    if cfg.salt_mode == "user":
        salts = cfg.user_salts or {}
        return {VICTIM: salts[VICTIM], ATTACKER: salts[ATTACKER]}
    # a trusted gateway: a fresh 256-bit random salt per tenant per run (never stored)
    return {VICTIM: secrets.token_hex(32), ATTACKER: secrets.token_hex(32)}


def plan_trials(cfg: IsolationConfig, rng: np.random.Generator) -> list[_Trial]:
    """The seeded trial list: arms shuffled, fresh random prompts per trial."""
    tok = get_tokenizer(cfg.vocab_size)
    arms = np.array([a for a in ARMS for _ in range(cfg.trials)])
    order = rng.permutation(arms)
    length = cfg.prefix_tokens + cfg.suffix_tokens

    def ids(n: int) -> tuple[int, ...]:
        return tuple(int(x) for x in tok.random_ids(rng, n))

    out: list[_Trial] = []
    for arm in order:
        prefix = ids(cfg.prefix_tokens)
        victim_suffix = ids(cfg.suffix_tokens)
        attacker_suffix = ids(cfg.suffix_tokens)
        if arm == "control":
            victim = ids(length)
            attacker = ids(cfg.prefix_tokens) + attacker_suffix
        else:
            victim = prefix + victim_suffix
            attacker = prefix + attacker_suffix
        tenant = VICTIM if arm == "positive" else ATTACKER
        out.append(_Trial(str(arm), victim, attacker, tenant))  # type: ignore[arg-type]
    return out


async def _run_trials(
    probe: Probe,
    cfg: IsolationConfig,
    trials: list[_Trial],
    progress: Callable[[int, int], None] | None,
) -> list[TrialRecord]:
    tok = get_tokenizer(cfg.vocab_size)
    salts = _salts(cfg)
    records: list[TrialRecord] = []
    for i, t in enumerate(trials):
        victim = await probe.send(
            t.victim_ids,
            tok.decode(t.victim_ids),
            tenant=VICTIM,
            cache_salt=salts[VICTIM],
            request_id=f"audit-iso-{i}-victim",
        )
        before = await probe.hit_counter()
        attacker = await probe.send(
            t.attacker_ids,
            tok.decode(t.attacker_ids),
            tenant=t.attacker_tenant,
            cache_salt=salts[t.attacker_tenant],
            request_id=f"audit-iso-{i}-attacker",
        )
        after = await probe.hit_counter()
        if i == 0 and not victim.ok and not attacker.ok:
            where = (await probe.identity()).base_url or "the simulator"
            raise RunFailedError(
                stopped_line(
                    [failure_from_text(victim.error), failure_from_text(attacker.error)],
                    num_sent=2,
                    url=where,
                )
            )
        delta = None if before is None or after is None else after - before
        records.append(
            TrialRecord(
                index=i,
                arm=t.arm,
                victim_ok=victim.ok,
                attacker_ok=attacker.ok,
                attacker_ttft_s=attacker.ttft_s if attacker.ok else None,
                attacker_prompt_tokens=attacker.prompt_tokens,
                attacker_cached_tokens=attacker.cached_tokens,
                hit_counter_delta=delta,
                error=victim.error or attacker.error,
            )
        )
        if progress is not None:
            progress(i + 1, len(trials))
    return records


async def run_isolation(
    probe: Probe,
    cfg: IsolationConfig,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> IsolationResult:
    """Run the audit against ``probe`` (see module doc) and decide the verdict."""
    cfg.validate()
    declared = declared_statistics(cfg)
    ident = await probe.identity()
    rng = np.random.default_rng(cfg.seed)
    records = await _run_trials(probe, cfg, plan_trials(cfg, rng), progress)
    hit, control, pos = (valid(records, a) for a in ARMS)
    enough = len(hit) >= 2 and len(control) >= 2
    test = timing(hit, control, cfg.alpha, cfg.power) if enough else None
    cached_excess, cached_raw, cached_base = counts(hit, control, "attacker_cached_tokens")
    counter_excess, _, _ = counts(hit, control, "hit_counter_delta")
    evidence = [v for v in (cached_excess, counter_excess) if v is not None]
    leak_tokens = max(evidence) if evidence else None
    pc = positive_control(pos, control, cfg.alpha, cfg.power)
    verdict, reason = decide(leak_tokens, test, pc, enough)
    if verdict == "leak_detected" and cfg.salt_mode != "none":
        reason += (
            f", although each tenant sent its own cache_salt (--salt {cfg.salt_mode}): the "
            "target ignores cache_salt or does not isolate by it"
        )
    return IsolationResult(
        provenance=ident.provenance(),
        verdict=verdict,
        reason=reason,
        declared=declared,
        alpha=cfg.alpha,
        seed=cfg.seed,
        trials=cfg.trials,
        prefix_tokens=cfg.prefix_tokens,
        suffix_tokens=cfg.suffix_tokens,
        salt_mode=cfg.salt_mode,
        source=ident.source,
        target=ident.to_dict(),
        p_values={
            "mann_whitney": test.p_mann_whitney if test else None,
            "ks": test.p_ks if test else None,
            "mann_whitney_holm": test.p_mann_whitney_holm if test else None,
            "ks_holm": test.p_ks_holm if test else None,
        },
        auc=test.auc if test else None,
        mde_auc=float(declared["mde_auc"]),
        timing=test.to_dict() if test else None,
        cross_tenant_cached_tokens=None if leak_tokens is None else round(leak_tokens),
        cross_tenant_cached_tokens_raw=None if cached_raw is None else int(cached_raw),
        control_cached_tokens_max=None if cached_base is None else int(cached_base),
        cross_tenant_hit_counter_tokens=counter_excess,
        positive_control=pc,
        num_errors=sum(1 for r in records if not (r.victim_ok and r.attacker_ok)),
        trial_records=records,
    )
