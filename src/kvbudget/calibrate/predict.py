"""Predict a cell with the calibrated model and compare it with what was measured.

The prediction replays the cell's requests (same prompt token ids, output lengths and
concurrency) through the llama.cpp slot engine (a profile measured on vLLM: the paged engine,
:mod:`kvbudget.calibrate.predict_paged`) (:mod:`kvbudget.sim.slots`) priced by
:class:`~kvbudget.sim.timing.CalibratedTiming`; the profile's ``request_overhead_s`` (HTTP and
tokenization, measured during calibration) is added to every TTFT and is the closed-loop
turnaround (a client's next request reaches the server that long after its previous one
ended); the clients' first requests are ``CLIENT_STAGGER_S`` apart, so, as on the real server,
they do not all land in the same iteration. Figures are labelled
``simulated`` with the timing model named; measured ones come from the client clock.
Percentiles are numpy's default (linear interpolation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from kvbudget.sim.slots import SlotConfig, SlotRequest
from kvbudget.sim.slots_replica import run_slots
from kvbudget.sim.timing import CalibratedTiming, CalibrationProfile

METRICS = ("ttft_p50_s", "ttft_p95_s", "tpot_p50_s", "tpot_p95_s", "throughput_tokens_per_s")
#: the load client's workers start their first requests about this far apart
CLIENT_STAGGER_S = 1e-3


@dataclass(frozen=True, slots=True)
class CellLoad:
    """What a cell sends: prompts (token ids), output tokens each, closed-loop concurrency."""

    cell_id: str
    prompts: tuple[tuple[int, ...], ...]
    output_tokens: int
    concurrency: int


class CellFigures(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str  # "measured (<engine>)" or "simulated (<timing model>)"
    num_requests: int
    ttft_p50_s: float
    ttft_p95_s: float
    tpot_p50_s: float
    tpot_p95_s: float
    throughput_tokens_per_s: float
    peak_kv_usage: float | None = None


class ErrorRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cell_id: str
    role: str  # "calibration" or "held-out"
    metric: str
    measured: float | None
    predicted: float
    #: (predicted - measured) / measured; None when nothing was measured
    rel_error: float | None


def figures(
    source: str,
    ttfts_s: list[float],
    tpots_s: list[float],
    total_output_tokens: int,
    span_s: float,
    peak_kv_usage: float | None = None,
) -> CellFigures:
    def pct(values: list[float], q: float) -> float:
        return float(np.percentile(values, q)) if values else float("nan")

    return CellFigures(
        source=source,
        num_requests=len(ttfts_s),
        ttft_p50_s=pct(ttfts_s, 50),
        ttft_p95_s=pct(ttfts_s, 95),
        tpot_p50_s=pct(tpots_s, 50),
        tpot_p95_s=pct(tpots_s, 95),
        throughput_tokens_per_s=total_output_tokens / span_s if span_s > 0 else float("nan"),
        peak_kv_usage=peak_kv_usage,
    )


def slot_config(profile: CalibrationProfile) -> SlotConfig:
    """The slot layout the profile was measured on (llama.cpp defaults where unknown)."""
    s = profile.engine_settings
    return SlotConfig(
        num_slots=int(s.get("num_slots") or 1),
        n_ctx_slot=int(s.get("n_ctx_slot") or s.get("max_model_len") or 4096),
        n_batch=int(s.get("n_batch") or 2048),
        n_ubatch=int(s.get("n_ubatch") or 512),
    )


def predict_cell(profile: CalibrationProfile, load: CellLoad) -> tuple[CellFigures, list[str]]:
    """Simulated figures of one cell, and the profile's out-of-range warnings for it."""
    timing = CalibratedTiming(profile)
    config = slot_config(profile)
    reqs = [
        SlotRequest(f"{load.cell_id}-{i}", 0.0, p, load.output_tokens)
        for i, p in enumerate(load.prompts)
    ]
    results, stats = run_slots(
        config,
        timing,
        reqs,
        concurrency=load.concurrency,
        turnaround_s=profile.request_overhead_s,
        stagger_s=CLIENT_STAGGER_S,
    )
    ok = [r for r in results if r.status == "ok" and r.first_token_s is not None]
    overhead = profile.request_overhead_s
    ttfts = [r.first_token_s - r.arrival_s + overhead for r in ok if r.first_token_s is not None]
    tpots = [
        (r.token_times_s[-1] - r.token_times_s[0]) / (len(r.token_times_s) - 1)
        for r in ok
        if len(r.token_times_s) >= 2
    ]
    span = max((r.done_s or 0.0) for r in results) if results else 0.0
    out = figures(
        f"simulated ({timing.name}, llama.cpp slots)",
        ttfts,
        tpots,
        sum(r.output_tokens for r in ok),
        span,
        stats.peak_kv_usage,
    )
    warnings = cell_warnings(profile, load, config.num_slots)
    if len(ok) < len(results):
        warnings.append(
            f"{load.cell_id}: {len(results) - len(ok)} of {len(results)} requests refused by "
            f"the simulated slots (prompt does not fit {config.n_ctx_slot} cells)"
        )
    return out, warnings


def cell_warnings(profile: CalibrationProfile, load: CellLoad, max_batch: int) -> list[str]:
    """The profile's out-of-range warnings for a cell whose decode batch is capped at
    ``max_batch`` (slots, or vLLM's max_num_seqs)."""
    # llama.cpp and vLLM add no BOS to a token-id prompt (llama.cpp's prompt_n = len(prompt))
    longest = max((len(p) for p in load.prompts), default=0)
    observed = {
        "prompt_tokens": float(longest),
        # the last output token is sampled, never fed back: context peaks at prompt + out - 1
        "context_tokens": float(longest + load.output_tokens - 1),
        "batch_size": float(min(load.concurrency, max_batch)),
    }
    return [f"{load.cell_id}: {w}" for w in profile.range_warnings(observed)]


def compare(
    cell_id: str, role: str, measured: CellFigures, predicted: CellFigures
) -> list[ErrorRow]:
    """One row per metric: measured, predicted and the relative error."""
    names = [*METRICS, "peak_kv_usage"]
    rows: list[ErrorRow] = []
    for name in names:
        m, p = getattr(measured, name), getattr(predicted, name)
        if p is None:
            continue
        rel = None if m is None or not m or np.isnan(m) else (p - m) / m
        rows.append(
            ErrorRow(
                cell_id=cell_id, role=role, metric=name, measured=m, predicted=p, rel_error=rel
            )
        )
    return rows
