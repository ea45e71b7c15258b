"""``kvbudget sim --engine llamacpp``: a scenario's workload on llama.cpp-style slots.

One server (``--slots`` slots of ``n_ctx_slot`` cells; no router, no tiers). The step time is
the scenario's: the calibrated profile when one is given (``--timing-profile``), else the
roofline of the scenario's model and GPU. ``n_ctx_slot`` follows llama.cpp
(``llama-context.cpp``, non-unified KV): ``n_ctx`` padded to 256, divided by the slots, padded
to 256 again; without ``--ctx-size`` it comes from the profile's ``engine_settings`` or, failing
that, the scenario's ``max_model_len`` (else 4096) per slot.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from kvbudget.errors import ConfigError
from kvbudget.metrics.percentile_set import (
    DEFAULT_METRIC_PERCENTILES,
    latency_fields,
    percentile_name,
    reported_percentiles,
)
from kvbudget.records import RequestRecord
from kvbudget.sim.scenario import SimScenario, build_cluster, build_workload
from kvbudget.sim.slots import SlotConfig
from kvbudget.sim.slots_records import run_planned
from kvbudget.sim.timing import CalibratedTiming, StepTimeModel

LLAMACPP_PAD = 256


def _pad(n: int) -> int:
    return -(-n // LLAMACPP_PAD) * LLAMACPP_PAD


def slot_config_for(
    scenario: SimScenario,
    timing: StepTimeModel,
    *,
    num_slots: int | None,
    ctx_size_tokens: int | None,
    n_batch: int | None,
    n_ubatch: int | None,
) -> SlotConfig:
    settings: dict[str, Any] = {}
    if isinstance(timing, CalibratedTiming):
        settings = dict(timing.profile.engine_settings)
    slots = num_slots if num_slots is not None else int(settings.get("num_slots") or 4)
    if ctx_size_tokens is not None:
        n_ctx_slot = _pad(_pad(ctx_size_tokens) // slots)
    elif settings.get("n_ctx_slot"):
        n_ctx_slot = int(settings["n_ctx_slot"])
    else:
        n_ctx_slot = scenario.max_model_len or 4096
    return SlotConfig(
        num_slots=slots,
        n_ctx_slot=n_ctx_slot,
        n_batch=n_batch or int(settings.get("n_batch") or 2048),
        n_ubatch=n_ubatch or int(settings.get("n_ubatch") or 512),
    )


def simulate_slots_scenario(
    scenario: SimScenario,
    *,
    num_slots: int | None = None,
    ctx_size_tokens: int | None = None,
    n_batch: int | None = None,
    n_ubatch: int | None = None,
    percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
) -> tuple[dict[str, Any], list[RequestRecord]]:
    """(summary, records) of the scenario's workload on one llama.cpp-style server; TTFT, TPOT,
    ITL and E2E as mean, median and ``percentiles`` (``--metric-percentiles``)."""
    wall0 = time.perf_counter()
    if scenario.replicas != 1 or scenario.tiers:
        raise ConfigError(
            f"--engine llamacpp: simulates one server without KV tiers (got replicas "
            f"{scenario.replicas}, {len(scenario.tiers)} tiers); drop --replicas and tiers",
            field="engine",
        )
    if scenario.timing_model == "measured":
        raise ConfigError(
            "--timing-model measured: aiconfigurator-core's tables are vLLM's kernels, not "
            "llama.cpp's; drop it (the roofline) or give --timing-profile from kvbudget calibrate",
            field="timing_model",
        )
    # the roofline (or the calibrated profile): vLLM's measured tables do not price llama.cpp
    roofline = scenario.model_copy(update={"timing_model": "roofline"})
    timing = build_cluster(roofline).setups[0].timing
    cfg = slot_config_for(
        scenario,
        timing,
        num_slots=num_slots,
        ctx_size_tokens=ctx_size_tokens,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
    )
    requests, concurrency = build_workload(scenario)
    records, stats = run_planned(cfg, timing, requests, concurrency=concurrency)
    ok = [r for r in records if r.status == "ok"]
    latency = {
        "ttft": [r.ttft_s for r in ok if r.ttft_s is not None],
        "tpot": [r.tpot_s for r in ok if r.tpot_s is not None],
        "itl": [g for r in ok for g in r.itl_s()],
        "e2e": [r.e2e_s for r in ok if r.e2e_s is not None],
    }
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    cached = sum(r.cached_tokens or 0 for r in ok)

    def pct(values: list[float], q: float) -> float | None:
        return float(np.percentile(values, q)) if values else None

    notes = [
        "llama.cpp slots: no preemption (requests wait for a free slot), per-slot prompt reuse, "
        "no RAM prompt cache / context shift / unified KV (docs/calibration.md)"
    ]
    if isinstance(timing, CalibratedTiming):
        longest = max((r.prompt_tokens or 0 for r in records), default=0)
        out_max = max((r.output_tokens for r in records), default=1)
        notes += timing.profile.range_warnings(
            {
                "prompt_tokens": float(longest),
                "context_tokens": float(longest + max(out_max - 1, 0)),
                "batch_size": float(min(concurrency or cfg.num_slots, cfg.num_slots)),
            }
        )
    refused = [r for r in records if r.status != "ok"]
    if refused and not ok:
        raise ConfigError(
            f"no request could run: {refused[0].error_excerpt}; raise --ctx-size or lower "
            "--slots (each slot gets ctx-size / slots cells)",
            field="ctx_size",
        )
    summary: dict[str, Any] = {
        "engine": "llamacpp-slots",
        "timing_model": timing.name,
        "num_slots": cfg.num_slots,
        "n_ctx_slot": cfg.n_ctx_slot,
        "n_batch": cfg.n_batch,
        "n_ubatch": cfg.n_ubatch,
        "requests_total": len(records),
        "requests_completed": len(ok),
        "requests_refused": len(refused),
        "metric_percentiles": list(percentiles),
        "prefix_hit_rate_tokens": cached / prompt if prompt else 0.0,
        "num_preemptions": 0,
        "num_gpu_blocks": None,
        "peak_kv_usage": stats.peak_kv_usage,
        "num_deferred_peak": stats.num_deferred_peak,
        "simulated_s": max((r.done_s or 0.0 for r in records), default=0.0),
        "wall_s": time.perf_counter() - wall0,
        "notes": notes + ([f"refused: {refused[0].error_excerpt}"] if refused else []),
    }
    for metric, values in latency.items():
        summary.update(
            latency_fields(
                metric,
                count=len(values),
                total=math.fsum(values),
                percentile=partial(pct, values),
                chosen=percentiles,
            )
        )
    return summary, records


def slots_summary_text(summary: dict[str, Any]) -> str:
    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value * 1e3:.1f} ms"

    lines = [
        f"kvbudget sim --engine llamacpp  (figures: simulated, timing model: "
        f"{summary['timing_model']})",
        f"  slots                {summary['num_slots']} x {summary['n_ctx_slot']} cells "
        f"(n_batch {summary['n_batch']}, n_ubatch {summary['n_ubatch']})",
        f"  requests completed   {summary['requests_completed']} of {summary['requests_total']}"
        f" ({summary['requests_refused']} refused)",
        *_latency_lines(summary, ms),
        f"  prompt reuse         {summary['prefix_hit_rate_tokens']:.1%} of prompt tokens",
        f"  peak KV usage        {summary['peak_kv_usage']:.1%} of the slots' cells; "
        f"deferred requests peak {summary['num_deferred_peak']}",
        f"  simulated / wall     {summary['simulated_s']:.2f} s / {summary['wall_s']:.2f} s",
    ]
    lines += [f"  note: {n}" for n in summary["notes"]]
    return "\n".join(lines)


def _latency_lines(summary: dict[str, Any], ms: Any) -> list[str]:
    """``TTFT mean / p50 / p90 / ...`` in milliseconds, the chosen percentiles."""
    chosen = summary.get("metric_percentiles") or DEFAULT_METRIC_PERCENTILES
    names = [percentile_name(q) for q in reported_percentiles(chosen)]
    lines = []
    for metric in ("ttft", "tpot", "itl", "e2e"):
        head = f"{metric.upper()} mean / {' / '.join(names)}"
        values = [summary[f"{metric}_mean_s"], *(summary[f"{metric}_{n}_s"] for n in names)]
        lines.append(f"  {head:<20} " + " / ".join(ms(v) for v in values))
    return lines
