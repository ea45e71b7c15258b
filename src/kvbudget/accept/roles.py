"""Who does what in the declared deployment, and the four kinds of cache kept apart.

The second seed (§9.8): "the four most useful questions: who decides that prefixes are the
same, who knows where the cache is, who moves the tensors, who decides where a request goes.
Answering them shows the real dependencies between components and avoids deploying systems
whose functions overlap." The first seed: in-request KV, cross-request prefix reuse, the
application's response cache and the API provider's billing cache "share only 'reusing a
result'; their storage, identity keys, lifecycle, quality risk, permission boundary and
metering differ; a capacity audit must keep them in separate rows", so a high hit rate is
never silently a response-cache effect written up as GPU KV reuse.

Both tables are built from the plan's lock and target only (what was declared), plus the run's
own figures for the rows kvbudget can observe; nothing here runs a load.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvbudget.accept.plan.lock import ObjectLock

#: how each engine decides that two prompts share a prefix (cited to the engines' source)
_PREFIX_MATCH: dict[str, str] = {
    "vllm": (
        "vLLM's block hash chain: hash(parent block hash, the block's token ids, extra keys: "
        "LoRA id, multimodal hashes, cache_salt on the first block); only full blocks of "
        "block_size tokens match (vllm/v1/core/kv_cache_utils.py hash_block_tokens)"
    ),
    "sglang": (
        "SGLang's radix tree over token ids, matched page by page (page_size tokens) "
        "(python/sglang/srt/mem_cache/radix_cache.py)"
    ),
    "llamacpp": (
        "llama-server per slot: the new prompt's common prefix with the slot's previous tokens "
        "(cache_prompt); no sharing across slots (tools/server/server.cpp)"
    ),
}


@dataclass(frozen=True, slots=True)
class RoleRow:
    """One of the seed's four questions, answered for this deployment."""

    question: str
    who: str
    how: str


@dataclass(frozen=True, slots=True)
class CacheKindRow:
    """One kind of cache, with what this run observed of it (or why nothing)."""

    kind: str
    where: str
    identity_key: str
    observed: str


def _engine(lock: ObjectLock, target_kind: str) -> str:
    if target_kind in ("sim", "serve"):
        return "vllm"
    name = (lock.engine.name.value or "").lower().replace(".", "").replace("-", "")
    for engine in _PREFIX_MATCH:
        if engine in name:
            return engine
    return "unknown"


def who_does_what(lock: ObjectLock, target_kind: str, num_replicas: int = 1) -> list[RoleRow]:
    """The four questions for the declared lock and target."""
    engine = _engine(lock, target_kind)
    policy = lock.prefix_caching.value
    caching = policy.enabled if policy is not None else False
    offload = str(lock.offload.value or "none")
    # several simulated replicas without a declared policy run the sim target's default
    router = str(lock.router_policy.value or ("round_robin" if num_replicas > 1 else "none"))
    simulated = target_kind in ("sim", "serve")
    who_engine = "the simulated engine (vLLM V1 rules)" if simulated else f"the engine ({engine})"
    if not caching:
        match = RoleRow(
            "who decides that prefixes match",
            "nobody: prefix caching is off",
            "every prompt is computed in full; only in-request KV is reused",
        )
    else:
        salt = policy.salt if policy is not None else "none"
        match = RoleRow(
            "who decides that prefixes match",
            who_engine,
            _PREFIX_MATCH.get(engine, "unknown engine: name it in lock.engine.name")
            + f"; tenants separated by cache_salt: {salt}",
        )
    blocks = "one replica's GPU blocks" if num_replicas <= 1 else "per replica, its GPU blocks"
    where_parts = [f"{who_engine}'s own hash table ({blocks})"]
    if router in ("prefix_precise", "cost"):
        where_parts.append("the router's index, fed by the engines' KV events (precise)")
    elif router == "prefix_approx":
        where_parts.append("the router's routing history (approximate: it never sees evictions)")
    if offload != "none":
        where_parts.append(f"the offload tier's index ({offload}) kept by the KV connector")
    where = RoleRow(
        "who knows where the cache is",
        "; ".join(where_parts),
        "a component that is not listed does not know; a stale index routes to evicted blocks",
    )
    if offload == "none":
        move = RoleRow(
            "who moves tensors",
            "nobody beyond the engine",
            "KV stays in GPU memory; evicted blocks are recomputed, not reloaded",
        )
    else:
        move = RoleRow(
            "who moves tensors",
            f"the KV connector / offload path ({offload})",
            "copies blocks out on eviction (or write-through) and reloads them when the reload "
            "is cheaper than recomputing (seed: latency + bytes / bandwidth + format + sync)",
        )
    if num_replicas <= 1 and router == "none":
        route = RoleRow(
            "who decides where a request goes",
            "nobody: one replica",
            "a single endpoint; a Kubernetes Service in front adds no policy",
        )
    else:
        route = RoleRow(
            "who decides where a request goes",
            f"the router ({router})",
            "round_robin / least_* ignore the cache; prefix_* and cost use cache location "
            "and must fall back on load (a gateway's endpoint picker in Kubernetes)",
        )
    return [match, where, move, route]


def cache_kinds(summary: dict[str, Any] | None, basis: str) -> list[CacheKindRow]:
    """The four kinds of cache, each in its own row; ``summary`` holds the run's figures."""
    s = summary or {}

    def fig(key: str, fmt: str) -> str | None:
        value = s.get(key)
        return None if value is None else format(value, fmt)

    peak = fig("kv_usage_peak", ".1%")
    tokens = fig("prefix_hit_rate_tokens", ".1%")
    requests = fig("prefix_hit_rate_requests", ".1%")
    return [
        CacheKindRow(
            "in-request KV",
            "GPU KV blocks of running requests",
            "the request itself",
            f"peak KV usage {peak} ({basis})" if peak else "not observed in this run",
        ),
        CacheKindRow(
            "cross-request prefix",
            "the engine's prefix cache (and its offload tiers)",
            "token-id block hashes (+ LoRA, multimodal, cache_salt)",
            (
                f"{tokens} of prompt tokens"
                + (f", {requests} of requests had a hit" if requests else "")
                + f" ({basis})"
                if tokens
                else "not observed in this run"
            ),
        ),
        CacheKindRow(
            "application response cache",
            "the application, in front of the model",
            "business key, expiry, invalidation rules",
            "not observed: outside the engine; kvbudget never counts it as KV reuse",
        ),
        CacheKindRow(
            "API billing cache",
            "the API provider's pricing",
            "the provider's own rules",
            "not applicable: a billing figure is never derived from engine KV, nor the reverse",
        ),
    ]


def roles_section(
    lock: ObjectLock,
    target_kind: str,
    summary: dict[str, Any] | None,
    basis: str,
    num_replicas: int = 1,
) -> dict[str, Any]:
    """The report section ``who_does_what`` (JSON-ready)."""
    return {
        "basis": "declared (the plan's lock and target)",
        "questions": [asdict(r) for r in who_does_what(lock, target_kind, num_replicas)],
        "cache_kinds": [asdict(r) for r in cache_kinds(summary, basis)],
    }
