"""Deletion and lifecycle per storage layer (seed: 删除请求应拆成多个存储层验证).

A user deleting a session touches layers with different lifetimes: the application database,
object store, vector store, response cache, queues, traces and logs, the engine's KV and its
offload tiers. For each: owner, trigger event, longest retention, how it is verified, and
whether this run verified it. The plan declares the layers kvbudget cannot see (``lifecycle:``);
for the engine KV and kvbudget's own artifacts the run itself supplies the evidence:

* ``/reset_prefix_cache`` took effect: the reuse audit's after-reset run (``audits.reuse``);
* cancelled requests freed their blocks: cells with cancelled requests whose KV usage went back
  to the idle level after draining;
* artifacts hold only hashes: ``report.json`` carries no prompt or output text.

Short-lived GPU blocks being freed never proves that a persistent layer was deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvbudget.accept.plan.lifecycle import LifecycleLayer

LAYER_TITLES: dict[str, str] = {
    "application_database": "application database",
    "object_store": "object store",
    "vector_store": "vector store",
    "response_cache": "response cache",
    "queues": "queues",
    "traces_and_logs": "traces and logs",
    "engine_kv": "engine KV (GPU blocks, prefix cache)",
    "offload_tiers": "offload tiers (CPU, disk, remote)",
    "kvbudget_artifacts": "kvbudget artifacts (report, records)",
}
#: KV usage at or below which a drained cell counts as having freed its blocks
FREED_KV_USAGE = 0.01

Status = Literal["verified", "failed", "declared", "not_declared"]


@dataclass(frozen=True, slots=True)
class LifecycleRow:
    layer: str
    owner: str
    trigger: str
    retention: str
    verification: str
    status: Status
    evidence: str


def _declared(plan: dict[str, Any]) -> dict[str, LifecycleLayer]:
    return {
        item.layer: item
        for item in (LifecycleLayer.model_validate(raw) for raw in plan.get("lifecycle", []) or [])
    }


def _kv_evidence(result: Any) -> tuple[Status, str]:
    notes: list[str] = []
    failed = False
    reuse = result.audits.reuse
    if reuse is not None and reuse.reset_available:
        ok = reuse.status != "fail"
        failed |= not ok
        notes.append(
            f"/reset_prefix_cache: after-reset run {'matched' if ok else 'did NOT match'} the "
            f"cold run ({reuse.source or '?'}, reuse audit)"
        )
    else:
        notes.append("/reset_prefix_cache: not exercised (audits.reuse: true runs it)")
    cancelled = [c for c in result.cells if c.num_cancelled > 0]
    freed = [
        c
        for c in cancelled
        if c.kv_usage_after_drain is not None and c.kv_usage_after_drain <= FREED_KV_USAGE
    ]
    held = [
        c
        for c in cancelled
        if c.kv_usage_after_drain is not None and c.kv_usage_after_drain > FREED_KV_USAGE
    ]
    if cancelled:
        kind = cancelled[0].kind or "unknown"
        notes.append(
            f"cancelled requests freed their blocks in {len(freed)} of {len(cancelled)} cell(s) "
            f"with cancellations (KV usage after drain <= {FREED_KV_USAGE:g}, {kind})"
            + (f"; still held in {', '.join(c.cell_id for c in held)}" if held else "")
        )
        failed |= bool(held)
    else:
        notes.append("cancellation: no cell cancelled requests (load.cancel_fraction > 0 does)")
    verified = bool(freed) or any("matched" in n and "NOT" not in n for n in notes)
    status: Status = "failed" if failed else ("verified" if verified else "declared")
    return status, "; ".join(notes)


def _artifact_evidence(result: Any) -> tuple[Status, str]:
    with_text = [c.cell_id for c in result.cells if c.output_excerpts]
    if with_text:
        return "declared", (
            f"report.json shows output excerpts in {len(with_text)} cell(s) (--keep-prompts was "
            "given); records.jsonl then keeps text too"
        )
    return "verified", (
        "report.json carries no prompt or output text (no output excerpts); records.jsonl "
        "keeps sha256 hashes and token counts unless --keep-prompts"
    )


#: what kvbudget itself can say about the layers it sees, when the plan declares nothing
DEFAULTS: dict[str, LifecycleLayer] = {
    "engine_kv": LifecycleLayer(
        layer="engine_kv",
        owner="the inference platform",
        trigger="request end or cancel, eviction, /reset_prefix_cache on a model, KV dtype or "
        "block-size change and on tenant exit",
        retention="while cached (LRU eviction); gone on restart",
        verification="reset and cancellation events, checked in this run",
    ),
    "kvbudget_artifacts": LifecycleLayer(
        layer="kvbudget_artifacts",
        owner="whoever runs kvbudget",
        trigger="deleting the run's output directory",
        retention="until deleted",
        verification="hashes only, checked in this report",
    ),
}


def lifecycle_rows(result: Any) -> list[LifecycleRow]:
    """One row per storage layer for an :class:`~kvbudget.accept.result.AcceptResult`."""
    declared = _declared(result.plan)
    evidence: dict[str, tuple[Status, str]] = {
        "engine_kv": _kv_evidence(result),
        "kvbudget_artifacts": _artifact_evidence(result),
    }
    rows: list[LifecycleRow] = []
    for layer, title in LAYER_TITLES.items():
        item = declared.get(layer) or DEFAULTS.get(layer)
        if item is None:
            rows.append(
                LifecycleRow(
                    title,
                    "NOT DECLARED",
                    "—",
                    "—",
                    "—",
                    "not_declared",
                    "declare it under lifecycle: in the plan",
                )
            )
            continue
        status, note = evidence.get(
            layer, ("declared", "declared in the plan; kvbudget cannot verify this layer")
        )
        rows.append(
            LifecycleRow(
                title, item.owner, item.trigger, item.retention, item.verification, status, note
            )
        )
    return rows
