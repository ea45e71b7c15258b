"""Prefill/decode disaggregation: a prefill pool, a KV link, a decode pool (all *simulated*).

The second seed warns that P/D "is not free: for short requests, low concurrency or a slow
link the transfer can cost more than it saves". This module answers that per workload by
running the same requests twice, disaggregated and co-located on the same number of GPUs.

Model (what is and is not modelled):

* **Prefill pool**: each request runs on a prefill replica with ``max_output_tokens = 1`` (as
  vLLM's P/D proxy sends it); the prompt's KV exists when that step ends (``first_token_s``).
  Prefix caching works on the prefill pool as on any replica.
* **KV link**: one FIFO link per prefill replica (its NIC). A transfer of ``prompt_tokens x
  kv_bytes_per_token`` bytes takes ``latency_s + per_transfer_s x messages + bytes /
  (bandwidth_bytes_per_s x streams)`` where, with prefill TP ``p`` and decode TP ``d``,
  ``streams = min(p, d)`` rank pairs move data in parallel and each sends
  ``messages = max(p, d) / min(p, d)`` pieces (a rank's heads split over, or gathered from,
  the other side's ranks); a TP mismatch adds ``relayout_s`` (the layout conversion).
* **Decode pool**: the request arrives when its transfer ends, with its prompt's KV already
  present except the last prompt token, which the decoder recomputes to sample the first
  token (vLLM 0.32 ``vllm/v1/core/sched/scheduler.py`` ``_update_waiting_for_remote_kv``:
  ``if request.num_computed_tokens == request.num_tokens: request.num_computed_tokens =
  request.num_tokens - 1``; the NIXL connector loads every prompt token for attention models,
  ``nixl/base_scheduler.py`` ``_get_remote_prefill_token_count``). The client's TTFT is the
  decoder's first token minus the original arrival: prefill queue + prefill + transfer +
  decode queue + one decode step.
* **Not modelled**: prefill blocks held until the decoder pulls them (backpressure from a full
  decode pool), KV-transfer/compute overlap, layer-wise streaming, a prefill pool that also
  decodes, link contention between prefill replicas beyond each one's own NIC.

Open-loop arrivals only (a trace or a rate): a closed loop's next arrival depends on the
decode pool, which the two-pass model does not feed back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvbudget.errors import ConfigError
from kvbudget.metrics.percentile_set import DEFAULT_METRIC_PERCENTILES, latency_fields
from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest, RequestIn, as_engine_request
from kvbudget.sim.request_result import RequestResult
from kvbudget.sim.results import SimResult


class KVLinkConfig(BaseModel):
    """The prefill -> decode KV link of one prefill replica (per rank pair)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bandwidth_bytes_per_s: float = Field(gt=0, description="per rank pair (one NIC / NVLink)")
    latency_s: float = Field(default=0.0, ge=0)
    per_transfer_s: float = Field(default=0.0, ge=0, description="fixed cost per message")
    relayout_s: float = Field(default=0.0, ge=0, description="added when prefill TP != decode TP")


@dataclass(frozen=True, slots=True)
class PDSpec:
    """A disaggregated deployment: prefill replicas, decode replicas and their link."""

    prefill: list[ReplicaSetup]
    decode: list[ReplicaSetup]
    link: KVLinkConfig
    prefill_tp: int = 1
    decode_tp: int = 1
    router: str = "round_robin"


@dataclass(frozen=True, slots=True)
class Transfer:
    request_id: str
    prefill_replica: str
    start_s: float
    end_s: float
    num_bytes: int


def transfer_s(num_bytes: int, link: KVLinkConfig, prefill_tp: int, decode_tp: int) -> float:
    """Seconds one transfer occupies the link (no queueing)."""
    streams = min(prefill_tp, decode_tp)
    messages = max(prefill_tp, decode_tp) / streams
    seconds = link.latency_s + link.per_transfer_s * messages
    seconds += num_bytes / (link.bandwidth_bytes_per_s * streams)
    if prefill_tp != decode_tp:
        seconds += link.relayout_s
    return seconds


@dataclass(slots=True)
class PDResult:
    """Client-side results of a disaggregated run, plus both pools' own results."""

    requests: list[RequestResult]
    transfers: list[Transfer]
    prefill: SimResult
    decode: SimResult

    @property
    def timing_model(self) -> str:
        return self.decode.timing_model


def simulate_pd(requests: Sequence[RequestIn], spec: PDSpec, *, seed: int = 0) -> PDResult:
    """Run ``requests`` through the prefill pool, the link and the decode pool."""
    if not spec.prefill or not spec.decode:
        raise ConfigError(
            "disaggregation: need at least one prefill and one decode replica", field="replicas"
        )
    if spec.prefill_tp < 1 or spec.decode_tp < 1:
        raise ConfigError("disaggregation: TP sizes must be >= 1", field="tp")
    originals = [as_engine_request(r) for r in requests]
    by_id = {r.request_id: r for r in originals}
    if len(by_id) != len(originals):
        raise ConfigError("disaggregation: request ids must be unique", field="request_id")
    kv_bytes = spec.prefill[0].config.kv_bytes_per_token
    if kv_bytes <= 0:
        raise ConfigError(
            "disaggregation: the prefill replica's kv_bytes_per_token is 0 (unknown); build it "
            "from a plan or set kv_bytes_per_token",
            field="kv_bytes_per_token",
        )
    prefill_reqs = [replace(r, max_output_tokens=1, cancel_after_tokens=None) for r in originals]
    prefill = simulate(prefill_reqs, ClusterSpec(list(spec.prefill), router=spec.router), seed=seed)
    link_free: dict[str, float] = {}
    transfers: list[Transfer] = []
    decode_reqs: list[EngineRequest] = []
    prefill_failed: dict[str, RequestResult] = {}
    for res in sorted(prefill.requests, key=lambda r: (r.first_token_s or 0.0, r.request_id)):
        if res.first_token_s is None:
            prefill_failed[res.request_id] = res
            continue
        num_bytes = res.prompt_tokens * kv_bytes
        start = max(res.first_token_s, link_free.get(res.replica, 0.0))
        end = start + transfer_s(num_bytes, spec.link, spec.prefill_tp, spec.decode_tp)
        link_free[res.replica] = end
        transfers.append(Transfer(res.request_id, res.replica, start, end, num_bytes))
        decode_reqs.append(replace(by_id[res.request_id], arrival_s=end))
    decode_setups = [replace(s, kv_preloaded=True) for s in spec.decode]
    decode = simulate(decode_reqs, ClusterSpec(decode_setups, router=spec.router), seed=seed + 1)
    prefill_by_id = {r.request_id: r for r in prefill.requests}
    out: list[RequestResult] = []
    for res in decode.requests:
        original = by_id[res.request_id]
        first = prefill_by_id[res.request_id]
        out.append(
            replace(
                res,
                replica=f"{first.replica}->{res.replica}",
                arrival_s=original.arrival_s,
                # the prefill pool's own hits, not the transferred span
                cached_tokens_by_tier=dict(first.cached_tokens_by_tier),
                preemptions=res.preemptions + first.preemptions,
            )
        )
    out.extend(prefill_failed.values())
    order = {r.request_id: i for i, r in enumerate(originals)}
    out.sort(key=lambda r: order[r.request_id])
    return PDResult(out, transfers, prefill, decode)


def latency_summary(
    requests: Sequence[RequestResult], percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES
) -> dict[str, float | int | None]:
    """Client TTFT, TPOT and E2E (seconds): mean, median and ``percentiles`` (p50 and p99
    always, :mod:`kvbudget.metrics.percentile_set`), and completion counts. ITL is not kept by
    the P/D model (no per-token times)."""
    import numpy as np

    done = [r for r in requests if r.finished and r.first_token_s is not None]
    ttft = [r.first_token_s - r.arrival_s for r in done if r.first_token_s is not None]
    tpot = [
        (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
        for r in done
        if r.finish_s is not None and r.first_token_s is not None and r.output_tokens > 1
    ]
    e2e = [r.finish_s - r.arrival_s for r in done if r.finish_s is not None]

    def pct(values: list[float], q: float) -> float | None:
        return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else None

    out: dict[str, float | int | None] = {
        "requests_total": len(requests),
        "requests_completed": len(done),
    }
    for metric, values in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        out.update(
            latency_fields(
                metric,
                count=len(values),
                total=math.fsum(values),
                percentile=partial(pct, values),
                chosen=percentiles,
            )
        )
    return out


def compare_pd(
    requests: Sequence[RequestIn],
    spec: PDSpec,
    colocated: Sequence[ReplicaSetup],
    *,
    seed: int = 0,
    percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
) -> dict[str, Any]:
    """The same requests disaggregated and co-located; the figures are simulated."""
    pd = simulate_pd(requests, spec, seed=seed)
    co = simulate(list(requests), ClusterSpec(list(colocated), router=spec.router), seed=seed)
    pd_summary = latency_summary(pd.requests, percentiles)
    co_summary = latency_summary(co.requests, percentiles)
    total = sum(t.end_s - t.start_s for t in pd.transfers)
    return {
        "figures": "simulated",
        "timing_model": pd.timing_model,
        "metric_percentiles": list(percentiles),
        "disaggregated": {
            **pd_summary,
            "prefill_replicas": len(spec.prefill),
            "decode_replicas": len(spec.decode),
            "transfer_s_mean": total / len(pd.transfers) if pd.transfers else None,
            "transfer_bytes": sum(t.num_bytes for t in pd.transfers),
        },
        "colocated": {**co_summary, "replicas": len(colocated)},
    }
