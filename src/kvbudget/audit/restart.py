"""Reuse across a restart and an upgrade (simulated): a persistent store must serve the same
deployment after a restart and must never serve an incompatible one.

The second seed: "files kept outside the pod do not mean a hit after an engine restart: it also
needs a recoverable index, a valid version fingerprint, complete data and a start-up recovery
procedure". The check, on the simulator's probe with a write-through store shared by three
successive replicas (:mod:`kvbudget.audit.probe_sim`):

1. **before**: a cold and a hot completion of each prompt on replica A (identity ``X``); the
   store now holds the prompts' full blocks;
2. **restart**: a new replica B with identity ``X`` (empty GPU cache, same store): each prompt's
   cached tokens must come from the store and its output must equal the cold one;
3. **upgrade**: a new replica C with another identity ``Y``
   (:func:`kvbudget.spec.fingerprint.compatible` says why they differ): the store must serve
   **nothing**; any cached token is a failure (KV reused across an incompatible upgrade).

Every figure is *simulated* (fixed step timing).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np

from kvbudget.audit.probe_sim import SimProbe, SimProbeOptions
from kvbudget.audit.reuse import ReuseConfig, compare, make_prompts
from kvbudget.sim.tiers import Tier, TierConfig

Verdict = Literal["pass", "fail"]


@dataclass(frozen=True, slots=True)
class RestartCheck:
    phase: Literal["restart", "upgrade"]
    identity: str
    prompt_sha256: str
    cached_tokens: int
    output_vs_cold: str
    verdict: Verdict
    reason: str


def _store() -> Tier:
    config = TierConfig(
        name="remote",
        capacity_bytes=1 << 40,
        bandwidth_bytes_per_s=25e9,
        policy="write_through",
    )
    return Tier(config, 131072 * 16)


async def run_restart_upgrade(
    cfg: ReuseConfig,
    *,
    identity: str = "deploy-v1",
    upgraded_identity: str = "deploy-v2",
    opts: SimProbeOptions | None = None,
) -> dict[str, Any]:
    """The three phases above; returns the report section (JSON-ready)."""
    import hashlib

    cfg.validate()
    base = opts or SimProbeOptions()
    store = _store()
    rng = np.random.default_rng(cfg.seed)

    def probe(ident: str) -> SimProbe:
        return SimProbe(replace(base, store=store, identity=ident), rng)

    prompts = make_prompts(cfg)
    first = probe(identity)
    colds = []
    for ids, text in prompts:
        cold = await first.complete(ids, text, max_tokens=cfg.max_tokens, logprobs=0)
        await first.complete(ids, text, max_tokens=cfg.max_tokens, logprobs=0)  # hot
        colds.append(cold)
    checks: list[RestartCheck] = []
    clock_s = first.now_s
    for phase, ident in (("restart", identity), ("upgrade", upgraded_identity)):
        replica = probe(ident)
        replica.now_s = clock_s + 60.0  # the new pod starts later on the same timeline
        for (ids, text), cold in zip(prompts, colds, strict=True):
            out = await replica.complete(ids, text, max_tokens=cfg.max_tokens, logprobs=0)
            cached = out.cached_tokens or 0
            same = compare(cold, out, cfg).verdict
            if phase == "restart":
                ok = cached > 0 and same == "identical"
                reason = (
                    f"{cached} prompt tokens reused from the store after the restart, output {same}"
                    if cached
                    else "nothing reused after the restart: the store was not found or not read"
                )
            else:
                ok = cached == 0
                reason = (
                    "the store served nothing to the incompatible deployment"
                    if ok
                    else f"{cached} tokens of KV served across an incompatible upgrade"
                )
            clock_s = replica.now_s
            checks.append(
                RestartCheck(
                    phase=phase,  # type: ignore[arg-type]
                    identity=ident,
                    prompt_sha256=hashlib.sha256(text.encode()).hexdigest(),
                    cached_tokens=cached,
                    output_vs_cold=same,
                    verdict="pass" if ok else "fail",
                    reason=reason,
                )
            )
    failed = [c for c in checks if c.verdict == "fail"]
    return {
        "figures": "simulated (fixed step timing)",
        "verdict": "fail" if failed else "pass",
        "identity": identity,
        "upgraded_identity": upgraded_identity,
        "num_prompts": len(prompts),
        "checks": [asdict(c) for c in checks],
        "reason": failed[0].reason if failed else "restart reused the store; upgrade got none",
    }
