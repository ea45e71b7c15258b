"""Anomaly hints from the seed's "如何解释常见异常" — each raised only when its evidence is there.

=============================  ====================================================================
code                           evidence required
=============================  ====================================================================
structural_below_runtime       a runtime memory figure (declared idle baseline or measured device
                               memory) above the structural KV estimate; the gap is decomposed
free_pool_but_queueing         samples with requests waiting while KV usage was below 80 %
low_prefix_hit                 a shared prefix declared, prefix caching on, and the token hit rate
                               below half of the shared share of the prompt
memory_down_no_speedup         a comparison whose variant has a bigger KV pool but no metric
                               significantly faster
long_input_quality_drop        a quality checkpoint passing on short inputs and failing on long ones
memory_not_released_after_...  cancelled requests and KV usage above 1 % after the cell drained
unstable_queue                 an open-loop cell whose TTFT rose with arrival time throughout
                               (kvbudget.accept.judge.record_checks, from the run's request records)
=============================  ====================================================================
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.result import Anomaly, CellResult, ComparisonResult, Ledger

#: KV usage below which a waiting queue means the bottleneck is not the pool
FREE_POOL_USAGE = 0.8
RELEASE_TOLERANCE = 0.01
#: share of a cell's samples that must show the queue-with-free-pool pattern
MIN_QUEUE_FRACTION = 0.10


def _structural(plan: AcceptPlan, ledger: Ledger, baseline: dict[str, float]) -> list[Anomaly]:
    runtime = plan.ledger.idle_baseline_bytes
    source = "declared idle baseline"
    if runtime is None and "device_memory_used_bytes" in baseline:
        runtime = int(baseline["device_memory_used_bytes"])
        source = "measured device memory"
    budgets = {b.name: b.bytes for b in ledger.budgets}
    structural = budgets.get("structural")
    if runtime is None or structural is None or runtime <= structural:
        return []
    pool = budgets.get("engine_pool")
    peak = budgets.get("device_peak")
    parts = [f"{source} {runtime} bytes > structural KV estimate {structural} bytes"]
    if pool is not None and peak is not None:
        parts.append(
            f"planned engine pool {pool} bytes and non-KV {peak - pool} bytes "
            f"(weights, activation, non-torch, CUDA graphs, context)"
        )
        parts.append(f"unexplained beyond the planned device peak: {runtime - peak} bytes")
    return [
        Anomaly(
            code="structural_below_runtime",
            title="Runtime memory above the structural estimate",
            evidence="; ".join(parts),
            advice="compare like with like (device peak vs KV pool vs structural KV); break the "
            "gap into CUDA context, workspace, CUDA graphs, other processes, extra layer groups, "
            "alignment and scale metadata before blaming the framework",
        )
    ]


def _queueing(cells: Sequence[CellResult]) -> list[Anomaly]:
    hits = []
    for cell in cells:
        ts = cell.timeseries
        n = sum(
            1
            for kv, waiting in zip(ts.kv_usage, ts.num_waiting, strict=False)
            if waiting > 0 and kv < FREE_POOL_USAGE
        )
        if n >= 3 and n >= MIN_QUEUE_FRACTION * len(ts.kv_usage):
            hits.append((cell.cell_id, n, len(ts.kv_usage)))
    if not hits:
        return []
    detail = "; ".join(f"{c}: {n} of {m} samples" for c, n, m in hits)
    return [
        Anomaly(
            code="free_pool_but_queueing",
            title="Requests wait while the KV pool has room",
            evidence=f"waiting > 0 with KV usage < {FREE_POOL_USAGE:.0%} in {detail}",
            cells=[c for c, _, _ in hits],
            advice="the limit is compute, max_num_seqs, max_num_batched_tokens, communication "
            "or the service layer, not KV capacity; align queue, prefill/decode phases and "
            "batch sizes to see where the wait happens",
        )
    ]


def _prefix(plan: AcceptPlan, cells: Sequence[CellResult]) -> list[Anomaly]:
    shared = plan.load.shared_prefix.tokens
    policy = plan.lock.prefix_caching.value
    if shared == 0 or policy is None or not policy.enabled:
        return []
    low = []
    for cell in cells:
        if cell.prefix_hit_rate_tokens is None or not cell.prompt_tokens_mean:
            continue
        expected = min(1.0, shared / cell.prompt_tokens_mean)
        if cell.prefix_hit_rate_tokens < 0.5 * expected:
            low.append(
                f"{cell.cell_id}: {cell.prefix_hit_rate_tokens:.1%} vs shared share {expected:.1%}"
            )
    if not low:
        return []
    return [
        Anomaly(
            code="low_prefix_hit",
            title="Prefix-cache hit rate far below the shared share of the prompts",
            evidence="token hit rate (hits / queried prompt tokens): " + "; ".join(low),
            cells=[x.split(":", 1)[0] for x in low],
            advice="check template, system message, dynamic fields placed before the shared "
            "part, block boundaries, tokenizer, revision, adapters and salts, and the metric's "
            "denominator; never move user content into a shared prefix across trust groups",
        )
    ]


def _no_speedup(comparisons: Sequence[ComparisonResult]) -> list[Anomaly]:
    out = []
    for comp in comparisons:
        if comp.verdict == "not_comparable" or not comp.deltas:
            continue
        capacity = comp.conclusions.get("capacity", "")
        bigger = comp.capacity_ratio is not None and comp.capacity_ratio > 1.0
        faster = any(d.significant and (d.hl_shift or 0) < 0 for d in comp.deltas)
        if bigger and not faster:
            out.append(
                Anomaly(
                    code="memory_down_no_speedup",
                    title=f"{comp.name}: less memory per token but no speed-up",
                    evidence=f"{capacity}; no metric significantly faster",
                    cells=sorted({d.cell_id for d in comp.deltas}),
                    advice="the gain is capacity (more concurrency), not per-request latency; "
                    "quantization or offload add conversion and transfer work; keep capacity, "
                    "latency and cost conclusions separate",
                )
            )
    return out


def _quality_drop(cells: Sequence[CellResult]) -> list[Anomaly]:
    verdicts: dict[str, dict[str, set[str]]] = {}
    for cell in cells:
        for q in cell.quality:
            verdicts.setdefault(str(q["checkpoint"]), {}).setdefault(cell.input_tier, set()).add(
                str(q["verdict"])
            )
    out = []
    for checkpoint, tiers in verdicts.items():
        if "pass" in tiers.get("short", set()) and "fail" in tiers.get("long", set()):
            out.append(
                Anomaly(
                    code="long_input_quality_drop",
                    title=f"Quality checkpoint {checkpoint} passes on short inputs, fails on long",
                    evidence="short: pass; long: fail",
                    cells=[c.cell_id for c in cells if c.input_tier in ("short", "long")],
                    advice="check sliding windows, truncation by the service layer, position "
                    "limits and KV quantization error; compare the real token counts; restore the "
                    "baseline before investigating further",
                )
            )
    return out


def _release(cells: Sequence[CellResult]) -> list[Anomaly]:
    bad = [
        c
        for c in cells
        if c.num_cancelled > 0
        and c.kv_usage_after_drain is not None
        and c.kv_usage_after_drain > RELEASE_TOLERANCE
    ]
    if not bad:
        return []
    return [
        Anomaly(
            code="memory_not_released_after_cancel",
            title="KV not released after cancelled requests",
            evidence="; ".join(
                f"{c.cell_id}: {c.num_cancelled} cancelled, KV usage {c.kv_usage_after_drain:.1%} "
                "after drain"
                for c in bad
            ),
            cells=[c.cell_id for c in bad],
            advice="watch several rounds at steady state before calling it a leak (pools and "
            "reuse keep blocks); the retention must still satisfy tenant and privacy rules",
        )
    ]


def find_anomalies(
    plan: AcceptPlan,
    ledger: Ledger,
    baseline: dict[str, float],
    cells: Sequence[CellResult],
    comparisons: Sequence[ComparisonResult],
) -> list[Anomaly]:
    return [
        *_structural(plan, ledger, baseline),
        *_queueing(cells),
        *_prefix(plan, cells),
        *_no_speedup(comparisons),
        *_quality_drop(cells),
        *_release(cells),
    ]
