"""Per-request latencies from :class:`~kvbudget.records.RequestRecord` s.

Definitions (seconds; times on the run's monotonic timeline):

- ``TTFT = first_token_s - sent_s`` (request sent to first streamed token).
- ``E2E  = done_s - sent_s``.
- ``TPOT = (E2E - TTFT) / (output_tokens - 1)`` — mean time per output token after the first;
  undefined for requests with fewer than two output tokens, and not observable for a request
  whose tokens all reached the client at one instant
  (:meth:`~kvbudget.records.RequestRecord.tokens_at_one_instant`): both are left out of TPOT.
- ``ITL`` per token: gaps between consecutive ``token_times_s``; a chunk that carries k tokens
  contributes k-1 zero gaps (what vLLM's ``bench serve`` reports).
- ``ITL`` per chunk: gaps between consecutive ``chunk_times_s`` (streamed events).
- ``queue``: ``queue_s`` as the target reported it (simulator: scheduled to first scheduled).

A record's own ``ttft_s`` / ``tpot_s`` / ``e2e_s`` are used when present, else derived from the
raw times. Only ``status == "ok"`` records count; warm-up records are excluded unless asked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kvbudget.records import RequestRecord, derive_latencies

LATENCY_METRICS: tuple[str, ...] = ("ttft_s", "tpot_s", "itl_s", "itl_chunk_s", "e2e_s", "queue_s")


@dataclass(frozen=True, slots=True)
class LatencySamples:
    """Latency samples of the ok requests of one run or cell (float64 arrays, seconds)."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    itl_s: np.ndarray
    itl_chunk_s: np.ndarray
    e2e_s: np.ndarray
    queue_s: np.ndarray
    num_ok: int
    num_error: int
    num_cancelled: int

    def get(self, metric: str) -> np.ndarray:
        """Samples of one metric by name (one of ``LATENCY_METRICS``)."""
        if metric not in LATENCY_METRICS:
            raise KeyError(f"unknown latency metric {metric!r}; use one of {LATENCY_METRICS}")
        value: np.ndarray = getattr(self, metric)
        return value


def record_latencies(rec: RequestRecord) -> tuple[float | None, float | None, float | None]:
    """(ttft_s, tpot_s, e2e_s) of one record: its own fields, else derived from raw times."""
    ttft, tpot, e2e = derive_latencies(
        sent_s=rec.sent_s,
        first_token_s=rec.first_token_s,
        done_s=rec.done_s,
        output_tokens=rec.output_tokens,
    )
    ttft = rec.ttft_s if rec.ttft_s is not None else ttft
    e2e = rec.e2e_s if rec.e2e_s is not None else e2e
    if rec.tokens_at_one_instant():
        tpot = None
    elif rec.tpot_s is not None:
        tpot = rec.tpot_s
    elif ttft is not None and e2e is not None and rec.output_tokens >= 2:
        tpot = (e2e - ttft) / (rec.output_tokens - 1)
    return ttft, tpot, e2e


def collect_latencies(
    records: Iterable[RequestRecord], *, include_warmup: bool = False
) -> LatencySamples:
    """Gather TTFT/TPOT/ITL/E2E/queue samples of the ok records."""
    ttft: list[float] = []
    tpot: list[float] = []
    e2e: list[float] = []
    queue: list[float] = []
    itl: list[np.ndarray] = []
    itl_chunk: list[np.ndarray] = []
    counts = {"ok": 0, "error": 0, "cancelled": 0}
    for rec in records:
        if rec.warmup and not include_warmup:
            continue
        counts[rec.status] += 1
        if rec.status != "ok":
            continue
        t, p, e = record_latencies(rec)
        if t is not None:
            ttft.append(t)
        if p is not None:
            tpot.append(p)
        if e is not None:
            e2e.append(e)
        if rec.queue_s is not None:
            queue.append(rec.queue_s)
        if len(rec.token_times_s) > 1:
            itl.append(np.diff(np.asarray(rec.token_times_s, dtype=np.float64)))
        if len(rec.chunk_times_s) > 1:
            itl_chunk.append(np.diff(np.asarray(rec.chunk_times_s, dtype=np.float64)))

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)

    return LatencySamples(
        ttft_s=np.asarray(ttft, dtype=np.float64),
        tpot_s=np.asarray(tpot, dtype=np.float64),
        itl_s=cat(itl),
        itl_chunk_s=cat(itl_chunk),
        e2e_s=np.asarray(e2e, dtype=np.float64),
        queue_s=np.asarray(queue, dtype=np.float64),
        num_ok=counts["ok"],
        num_error=counts["error"],
        num_cancelled=counts["cancelled"],
    )
