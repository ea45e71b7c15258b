"""``kvbudget sim`` with a ``disaggregation:`` section: the scenario's requests through a
prefill pool, a KV link and a decode pool (:mod:`kvbudget.sim.disagg`), and the same requests
co-located on the same number of GPUs, side by side. Every figure is *simulated*.

The co-located side runs ``(prefill_replicas x prefill_tp + decode_replicas x decode_tp) / tp``
replicas at the scenario's own ``tp``; a GPU count that ``tp`` does not divide is refused (the
comparison would not be on equal hardware). Open-loop arrivals only, as ``simulate_pd`` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvbudget.errors import ConfigError
from kvbudget.metrics.percentile_set import (
    DEFAULT_METRIC_PERCENTILES,
    percentile_name,
    reported_percentiles,
)
from kvbudget.sim.disagg import PDSpec, compare_pd
from kvbudget.sim.scenario import (
    DisaggregationSpec,
    ReplicaOverride,
    SimScenario,
    build_workload,
    replica_setup,
)


def _check(scenario: SimScenario, pd: DisaggregationSpec) -> tuple[int, int, int]:
    for name in ("replica_overrides", "scale_out", "scale_in", "crashes", "tiers"):
        if getattr(scenario, name):
            raise ConfigError(
                f"disaggregation: {name} is not modelled with P/D; remove {name} or the "
                "disaggregation section (docs/disaggregation.md)",
                field=name,
            )
    if scenario.remote_tier is not None:
        raise ConfigError(
            "disaggregation: remote_tier is not modelled with P/D; remove one of the two",
            field="remote_tier",
        )
    prefill_tp = pd.prefill_tp or scenario.tp
    decode_tp = pd.decode_tp or scenario.tp
    num_gpus = pd.prefill_replicas * prefill_tp + pd.decode_replicas * decode_tp
    if num_gpus % scenario.tp:
        raise ConfigError(
            f"disaggregation: {num_gpus} GPUs (prefill {pd.prefill_replicas} x TP {prefill_tp} "
            f"+ decode {pd.decode_replicas} x TP {decode_tp}) do not split into co-located "
            f"replicas of tp {scenario.tp}; choose pool sizes whose GPU count tp divides",
            field="disaggregation",
        )
    return prefill_tp, decode_tp, num_gpus // scenario.tp


def simulate_pd_scenario(
    scenario: SimScenario, percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES
) -> dict[str, Any]:
    """The ``sim --json`` document of a P/D scenario (both sides simulated); TTFT, TPOT and
    E2E as mean, median and ``percentiles`` (``--metric-percentiles``)."""
    pd = scenario.disaggregation
    if pd is None:
        raise ConfigError("disaggregation: the scenario has no disaggregation section")
    prefill_tp, decode_tp, num_colocated = _check(scenario, pd)
    requests, concurrency = build_workload(scenario)
    if concurrency is not None:
        raise ConfigError(
            "disaggregation: a closed loop is not modelled with P/D (its next arrival depends "
            "on the decode pool); give arrivals as a rate or a trace",
            field="workload.arrivals",
        )
    prefill = replica_setup(scenario, ReplicaOverride(tp=prefill_tp))
    decode = replica_setup(scenario, ReplicaOverride(tp=decode_tp))
    colocated = replica_setup(scenario, None)
    spec = PDSpec(
        prefill=[prefill] * pd.prefill_replicas,
        decode=[decode] * pd.decode_replicas,
        link=pd.link,
        prefill_tp=prefill_tp,
        decode_tp=decode_tp,
        router=scenario.router,
    )
    out = compare_pd(
        requests, spec, [colocated] * num_colocated, seed=scenario.seed, percentiles=percentiles
    )
    out["disaggregated"].update({"prefill_tp": prefill_tp, "decode_tp": decode_tp})
    out["colocated"]["tp"] = scenario.tp
    out.update(
        {
            "mode": "disaggregation",
            "model": scenario.model,
            "gpu": scenario.gpu,
            "gpus_per_side": num_colocated * scenario.tp,
            "link": pd.link.model_dump(),
        }
    )
    return out


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


def render_pd(doc: dict[str, Any]) -> str:
    """The two sides as a small text table (mean and the chosen percentiles, milliseconds)."""
    pd, co = doc["disaggregated"], doc["colocated"]
    lines = [
        f"kvbudget sim: P/D disaggregation vs co-located, {doc['model']} on {doc['gpu']}, "
        f"{doc['gpus_per_side']} GPUs each side (simulated, {doc['timing_model']})",
        f"{'':24}{'disaggregated':>18}{'co-located':>18}",
        f"{'layout':24}{pd['prefill_replicas']:>8} P + {pd['decode_replicas']:<4} D"
        f"{co['replicas']:>12} x TP {co['tp']}",
        f"{'completed':24}{pd['requests_completed']:>18,}{co['requests_completed']:>18,}",
    ]
    chosen = doc.get("metric_percentiles") or DEFAULT_METRIC_PERCENTILES
    stats = ["mean", *(percentile_name(q) for q in reported_percentiles(chosen))]
    for key in ("ttft", "tpot", "e2e"):
        for stat in stats:
            label = f"{key.upper()} {stat} (ms)"
            lines.append(
                f"{label:24}{_ms(pd[f'{key}_{stat}_s']):>18}{_ms(co[f'{key}_{stat}_s']):>18}"
            )
    lines.append(
        f"KV transfer: {pd['transfer_bytes']:,} B in all, {_ms(pd['transfer_s_mean'])} ms mean "
        "per request (docs/disaggregation.md says what is and is not modelled)"
    )
    return "\n".join(lines)
