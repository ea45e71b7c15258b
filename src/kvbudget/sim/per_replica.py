"""Per-replica load of one simulated run, and two routing policies side by side.

The seed's routing acceptance: "compare two routing policies at the same total arrival rate,
looking at each replica's length distribution, KV high water, queue, preemptions and failures"
— a router that looks good on the mean can pile the long prompts onto one replica. Everything
here is *simulated* (the run's timing model is named in the section).

Inputs are the run's :class:`~kvbudget.sim.request_result.RequestResult` rows and its periodic
:class:`~kvbudget.sim.replica.KVSample` rows; nothing is re-simulated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from kvbudget.sim.replica import KVSample
from kvbudget.sim.request_result import RequestResult
from kvbudget.sim.results import SimResult


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What one replica was given and how it held up."""

    replica: str
    num_requests: int
    prompt_tokens_p50: float | None
    prompt_tokens_p95: float | None
    prompt_tokens_max: int | None
    prompt_tokens_total: int
    kv_usage_peak: float | None
    num_waiting_peak: int | None
    num_preemptions: int
    num_failed: int


def per_replica(
    requests: Iterable[RequestResult], samples: Iterable[KVSample]
) -> list[ReplicaLoad]:
    """One row per replica that received a request or was sampled, sorted by name."""
    prompts: dict[str, list[int]] = {}
    preempt: dict[str, int] = {}
    failed: dict[str, int] = {}
    for r in requests:
        if not r.replica:
            continue
        prompts.setdefault(r.replica, []).append(r.prompt_tokens)
        preempt[r.replica] = preempt.get(r.replica, 0) + r.preemptions
        if r.status != "finished":
            failed[r.replica] = failed.get(r.replica, 0) + 1
    kv_peak: dict[str, float] = {}
    wait_peak: dict[str, int] = {}
    for s in samples:
        kv_peak[s.replica] = max(kv_peak.get(s.replica, 0.0), s.kv_usage)
        wait_peak[s.replica] = max(wait_peak.get(s.replica, 0), s.num_waiting)
    rows: list[ReplicaLoad] = []
    for name in sorted(set(prompts) | set(kv_peak)):
        values = np.array(prompts.get(name, []), dtype=float)
        rows.append(
            ReplicaLoad(
                replica=name,
                num_requests=int(values.size),
                prompt_tokens_p50=float(np.percentile(values, 50)) if values.size else None,
                prompt_tokens_p95=float(np.percentile(values, 95)) if values.size else None,
                prompt_tokens_max=int(values.max()) if values.size else None,
                prompt_tokens_total=int(values.sum()),
                kv_usage_peak=kv_peak.get(name),
                num_waiting_peak=wait_peak.get(name),
                num_preemptions=preempt.get(name, 0),
                num_failed=failed.get(name, 0),
            )
        )
    return rows


def imbalance(rows: list[ReplicaLoad]) -> float | None:
    """Largest replica prompt-token total over the mean (1.0 = perfectly even)."""
    totals = [r.prompt_tokens_total for r in rows]
    if not totals or sum(totals) == 0:
        return None
    return max(totals) / (sum(totals) / len(totals))


def routing_section(results: dict[str, SimResult]) -> dict[str, Any]:
    """The report section: per policy, the summary figures and the per-replica rows."""
    policies: dict[str, Any] = {}
    for policy, result in results.items():
        rows = per_replica(result.requests, result.samples)
        summary = result.summary()
        policies[policy] = {
            "timing_model": result.timing_model,
            "requests_completed": summary["requests_completed"],
            "requests_total": summary["requests_total"],
            "ttft_p99_s": summary["ttft_p99_s"],
            "tpot_p99_s": summary["tpot_p99_s"],
            "prefix_hit_rate_tokens": summary["prefix_hit_rate_tokens"],
            "num_preemptions": summary["num_preemptions"],
            "router_fallbacks": result.router_fallbacks,
            "prompt_token_imbalance": imbalance(rows),
            "replicas": [asdict(r) for r in rows],
        }
    return {"figures": "simulated", "policies": policies}


def render_routing_section(section: dict[str, Any]) -> str:
    """Plain-text table of :func:`routing_section` (the sim CLI's output)."""

    def f(value: Any, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    lines: list[str] = ["routing comparison (figures: simulated, same requests and arrivals)"]
    for policy, data in section["policies"].items():
        lines.append(
            f"  {policy}: completed {data['requests_completed']}/{data['requests_total']}, "
            f"TTFT p99 {f(data['ttft_p99_s'], '.3f')} s, "
            f"prefix hits {data['prefix_hit_rate_tokens'] * 100:.1f}% of tokens, "
            f"preemptions {data['num_preemptions']}, "
            f"prompt-token imbalance {f(data['prompt_token_imbalance'], '.2f')}x "
            f"(timing model {data['timing_model']})"
        )
        lines.append(
            "    replica      requests  prompt p50/p95/max     KV peak  queue peak  preempt  failed"
        )
        for row in data["replicas"]:
            kv = row["kv_usage_peak"]
            lines.append(
                f"    {row['replica']:<12} {row['num_requests']:>8}  "
                f"{f(row['prompt_tokens_p50'], '.0f'):>6}/{f(row['prompt_tokens_p95'], '.0f')}/"
                f"{f(row['prompt_tokens_max'], 'd'):<8}  "
                f"{'n/a' if kv is None else f'{kv * 100:.1f}%':>7}  "
                f"{f(row['num_waiting_peak'], 'd'):>10}  {row['num_preemptions']:>7}  "
                f"{row['num_failed']:>6}"
            )
    return "\n".join(lines)
