"""The seed's four questions and four cache kinds for a declared lock."""

from __future__ import annotations

from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.accept.roles import cache_kinds, roles_section, who_does_what


def _lock(**kw: object) -> ObjectLock:
    return ObjectLock.model_validate({"model": {"id": "meta-llama/Llama-3.1-8B"}, **kw})


def test_single_vllm_replica_without_offload() -> None:
    rows = who_does_what(_lock(engine={"name": "vllm"}), "http")
    assert [r.question for r in rows] == [
        "who decides that prefixes match",
        "who knows where the cache is",
        "who moves tensors",
        "who decides where a request goes",
    ]
    assert rows[0].who == "the engine (vllm)" and "cache_salt: per-tenant" in rows[0].how
    assert "hash_block_tokens" in rows[0].how
    assert rows[1].who.startswith("the engine (vllm)'s own hash table")
    assert rows[2].who == "nobody beyond the engine"
    assert rows[3].who == "nobody: one replica"


def test_prefix_caching_off_means_nobody_matches() -> None:
    lock = _lock(prefix_caching={"value": {"enabled": False, "salt": "none"}})
    assert who_does_what(lock, "sim")[0].who == "nobody: prefix caching is off"


def test_router_and_offload_name_their_components() -> None:
    lock = _lock(engine={"name": "SGLang"}, offload="cpu:64GiB", router_policy="prefix_precise")
    rows = who_does_what(lock, "http", num_replicas=4)
    assert "radix tree" in rows[0].how
    assert "KV events" in rows[1].who and "cpu:64GiB" in rows[1].who
    assert rows[2].who == "the KV connector / offload path (cpu:64GiB)"
    assert rows[3].who == "the router (prefix_precise)"


def test_four_cache_kinds_are_separate_rows_and_only_two_are_observed() -> None:
    summary = {
        "kv_usage_peak": 0.5,
        "prefix_hit_rate_tokens": 0.25,
        "prefix_hit_rate_requests": 0.9,
    }
    rows = cache_kinds(summary, "simulated (roofline)")
    assert [r.kind for r in rows] == [
        "in-request KV",
        "cross-request prefix",
        "application response cache",
        "API billing cache",
    ]
    assert rows[0].observed == "peak KV usage 50.0% (simulated (roofline))"
    assert rows[1].observed.startswith("25.0% of prompt tokens, 90.0% of requests")
    assert rows[2].observed.startswith("not observed") and rows[3].observed.startswith(
        "not applicable"
    )
    section = roles_section(_lock(), "sim", None, "simulated")
    assert section["cache_kinds"][0]["observed"] == "not observed in this run"
