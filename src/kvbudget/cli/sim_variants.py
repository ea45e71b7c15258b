"""The runs of ``kvbudget sim`` beside a vLLM cluster: ``--compare-router``'s second policy, a
P/D ``disaggregation:`` scenario and ``--engine llamacpp``'s slots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from kvbudget.errors import ConfigError


def compare_router(
    opts: dict[str, Any], scenario: Any, requests: Any, concurrency: int | None, first: Any
) -> dict[str, Any] | None:
    """``--compare-router``: the same requests through a second policy, per replica."""
    other = opts["compare_router"]
    if other is None:
        return None
    from kvbudget.sim.cluster import simulate
    from kvbudget.sim.per_replica import routing_section
    from kvbudget.sim.router import ROUTERS
    from kvbudget.sim.scenario import build_cluster

    if other not in ROUTERS:
        raise ConfigError(
            f"--compare-router: {other!r} is not a router policy; use one of {', '.join(ROUTERS)}",
            field="compare_router",
        )
    if other == first.router:
        raise ConfigError(
            f"--compare-router: {other!r} is already --router; name a different policy",
            field="compare_router",
        )
    second_cluster = build_cluster(scenario.model_copy(update={"router": other}), trace=False)
    second_cluster.concurrency = concurrency
    second = simulate(requests, second_cluster, seed=scenario.seed)
    return routing_section({first.router: first, other: second})


def sim_pd(scenario: Any, opts: dict[str, Any], percentiles: Any) -> None:
    """A scenario with ``disaggregation:``: P/D beside co-located (kvbudget.sim.pd_scenario)."""
    from kvbudget.sim.native import build_label
    from kvbudget.sim.pd_scenario import render_pd, simulate_pd_scenario

    for flag in ("trace_out", "samples_out", "records_out", "compare_router"):
        if opts[flag]:
            raise ConfigError(
                f"--{flag.replace('_', '-')}: not available with a disaggregation scenario; "
                "drop it",
                field=flag,
            )
    from kvbudget.sim.scenario import scenario_async_scheduling

    doc = simulate_pd_scenario(scenario, percentiles)
    doc["async_scheduling"] = scenario_async_scheduling(scenario).to_dict()
    doc["simulator_build"] = build_label()
    if opts["as_json"]:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(render_pd(doc))


def sim_slots(scenario: Any, opts: dict[str, Any], percentiles: Any) -> None:
    """``--engine llamacpp``: the llama.cpp slot engine (kvbudget.sim.slots_scenario)."""
    from kvbudget.safety.limits import MAX_SLOTS, MAX_TOKENS
    from kvbudget.sim.native import build_label
    from kvbudget.sim.slots_scenario import simulate_slots_scenario, slots_summary_text

    if opts["slots"] is not None and not 1 <= opts["slots"] <= MAX_SLOTS:
        raise ConfigError(
            f"--slots {opts['slots']}: llama.cpp needs 1 <= slots (-np) <= {MAX_SLOTS}; "
            "give e.g. --slots 4",
            field="slots",
        )
    if opts["ctx_size"] is not None and not 1 <= opts["ctx_size"] <= MAX_TOKENS:
        raise ConfigError(
            f"--ctx-size {opts['ctx_size']}: give 1 <= ctx-size <= {MAX_TOKENS} tokens "
            "(llama.cpp -c)",
            field="ctx_size",
        )
    for flag in ("trace_out", "samples_out"):
        if opts[flag]:
            raise ConfigError(
                f"--{flag.replace('_', '-')}: not available with --engine llamacpp; drop it",
                field=flag,
            )
    if scenario.async_scheduling is not None:
        flag = "--async-scheduling" if scenario.async_scheduling else "--no-async-scheduling"
        raise ConfigError(
            f"{flag}: a vLLM flag; llama-server has no async scheduling to set; drop it or "
            "simulate --engine vllm",
            field="async_scheduling",
        )
    summary, records = simulate_slots_scenario(
        scenario,
        num_slots=opts["slots"],
        ctx_size_tokens=opts["ctx_size"],
        percentiles=percentiles,
    )
    summary["simulator_build"] = build_label()
    if opts["records_out"]:
        with Path(opts["records_out"]).open("w") as fh:
            for record in records:
                fh.write(record.model_dump_json() + "\n")
    if opts["as_json"]:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
    else:
        click.echo(slots_summary_text(summary))
