"""``kvbudget sim``: simulate a cluster serving a workload (every figure *simulated*)."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from kvbudget.cli.sim_outputs import OUTPUT_FLAGS, SampleWriter, check_output_path
from kvbudget.cli.sim_render import render_summary
from kvbudget.cli.sim_scenario import scenario_from_opts
from kvbudget.cli.sim_variants import compare_router, sim_pd, sim_slots
from kvbudget.cli.vocab import (
    COUNT,
    COUNT0,
    DP,
    INPUT_TOKENS,
    METRIC_PERCENTILES,
    METRIC_PERCENTILES_HELP,
    NUM_REQUESTS,
    OUTPUT_TOKENS,
    PREFIX_CACHING,
    PREFIX_CACHING_VLLM,
    RANDOM_RANGE_RATIO,
    RATE,
    TP,
    engine_input_options,
)
from kvbudget.engine_name import LLAMACPP, VLLM, EngineName, parse_engine
from kvbudget.errors import ConfigError
from kvbudget.sim.timing_select import timing_model_names

#: the engines ``sim`` steps: vLLM's paged blocks, llama.cpp's fixed slots (SGLang: not yet)
SIM_ENGINES: tuple[EngineName, ...] = (VLLM, LLAMACPP)


def _queue_check(stats: Any) -> dict[str, Any]:
    """``{"stable": bool, ...}``: TTFT against arrival time (kvbudget.metrics.stability)."""
    from kvbudget.metrics.stability import queue_growth_spilled

    # the rows as kept (in memory, or a temporary file past its buffer): the same answer
    growth = queue_growth_spilled(stats.first_token_rows)
    if growth is None:
        return {"stable": True}
    return {"stable": False, "note": growth.line(), **growth.to_dict()}


@click.command("sim", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--scenario",
    type=click.Path(dir_okay=False),
    help="YAML scenario (docs/simulator.md); flags override its fields.",
)
@click.option("--model", help="Catalog id or config.json path [default: meta-llama/Llama-3.1-8B].")
@click.option("--gpu", help="GPU catalog id (kvbudget gpus) [default: H100-SXM].")
@click.option(*TP, "tp", type=COUNT, help="Tensor-parallel size per replica [default: 1].")
@click.option("--replicas", type=COUNT, help="Number of identical replicas [default: 1].")
@click.option(
    *DP,
    "data_parallel_size",
    type=COUNT,
    help="vLLM --data-parallel-size: one deployment of this many engines, each with its own "
    "scheduler and KV pool (a MoE model's experts span all of them, and its engines step "
    "in lockstep: each step as long as the slowest engine's, idle ones running dummy "
    "batches), routed as vLLM's API server routes (least_outstanding) unless --router is "
    "given [default: 1].",
)
@click.option(
    "--router",
    help="round_robin, least_outstanding, least_kv, session, prefix_approx, prefix_precise or cost [default: round_robin].",
)
@click.option(
    "--compare-router",
    help="Run the same requests and arrivals again with this router policy and print both "
    "side by side per replica (routing acceptance).",
)
@click.option(
    *NUM_REQUESTS,
    "--requests",
    "num_requests",
    type=COUNT,
    help="Number of requests, e.g. 1000 or 10k [default: 1000].",
)
@click.option(
    *RATE, "rate", type=float, help="Poisson arrival rate, requests/s (open loop) [default: 10]."
)
@click.option(
    "--concurrency", type=COUNT, help="Closed loop: requests kept in flight (instead of --rate)."
)
@click.option(
    "--max-concurrency",
    type=COUNT,
    help="vllm bench serve's name: without --rate, the closed loop's --concurrency; with "
    "--rate, Poisson arrivals with at most this many in flight (the rest wait at the client).",
)
@click.option(
    *INPUT_TOKENS,
    "input_tokens",
    type=COUNT,
    help="Prompt tokens per request, shared prefix included [default: 1024].",
)
@click.option(
    *OUTPUT_TOKENS,
    "output_tokens",
    type=COUNT,
    help="Output tokens per request [default: 128].",
)
@click.option(
    RANDOM_RANGE_RATIO,
    "random_range_ratio",
    help="vllm bench serve's random dataset: draw each request's input and output length "
    "uniformly within this ratio of --input-tokens / --output-tokens (0.1 = +-10 %; or "
    '\'{"input": 0.3, "output": 0.5}\') [default: 0.0, fixed].',
)
@click.option(
    "--prefix-groups",
    type=COUNT0,
    help="Shared-prefix groups (Zipf popularity); 0 = one system prompt.",
)
@click.option(
    "--shared-prefix-tokens",
    type=COUNT0,
    help="Tokens of the shared prefix (per group, or the system prompt).",
)
@click.option(
    PREFIX_CACHING,
    PREFIX_CACHING_VLLM,
    "prefix_caching",
    default=None,
    help="vLLM automatic prefix caching [default: on].",
)
@engine_input_options()
@click.option("--max-num-seqs", type=COUNT, help="Scheduler max_num_seqs [default: the plan's].")
@click.option(
    "--max-num-batched-tokens",
    type=COUNT,
    help="Scheduler max_num_batched_tokens (tokens per step) [default: the plan's, by engine "
    "version and GPU].",
)
@click.option("--max-model-len", type=COUNT, help="max_model_len, e.g. 32k [default: the plan's].")
@click.option(
    "--timing-model",
    type=click.Choice(timing_model_names()),
    help="Step-time model: measured (aiconfigurator-core's silicon kernel tables, extra "
    "gpu-data), roofline, or auto: measured where the GPU, vLLM tables and every op are "
    "covered, else the roofline with the reason [default: auto].",
)
@click.option(
    "--timing-profile",
    type=click.Path(dir_okay=False),
    help="Calibrated timing profile (JSON); replaces --timing-model, except with "
    "--timing-model measured: then its measured points correct the measured model.",
)
@click.option(
    "--max-simulated-s",
    type=float,
    help="Stop at this simulated time; requests in flight are reported unfinished.",
)
@click.option("--seed", type=int, help="Seed of the workload and the engines [default: 0].")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(METRIC_PERCENTILES, "metric_percentiles", help=METRIC_PERCENTILES_HELP)
@click.option(
    "--itl/--no-itl",
    default=True,
    show_default=True,
    help="Keep every output token's time: ITL figures and token_times_s in --records-out "
    "(--no-itl: ITL null, about a quarter less CPU at 128 output tokens).",
)
@click.option(
    "--trace-out",
    type=click.Path(dir_okay=False),
    help="Write a Chrome trace (chrome://tracing, Perfetto) of every step.",
)
@click.option(
    "--records-out",
    type=click.Path(dir_okay=False),
    help="Write one RequestRecord per request (JSONL, source=simulated).",
)
@click.option(
    "--samples-out",
    type=click.Path(dir_okay=False),
    help="Write KV usage / running / waiting per replica every --sample-every-s (CSV).",
)
@click.option(
    "--sample-every-s",
    type=float,
    help="Sampling period of replica state, simulated seconds [default: 1].",
)
@click.option(
    "--engine",
    type=click.Choice(SIM_ENGINES),
    default="vllm",
    show_default=True,
    help="Engine behaviour: vLLM-style paged blocks, or llama.cpp-style fixed slots "
    "(one server; docs/calibration.md).",
)
@click.option("--slots", type=COUNT, help="llamacpp: -np slots [default: profile's, else 4].")
@click.option(
    "--ctx-size",
    type=COUNT,
    help="llamacpp: -c total context, split over the slots [default: profile's n_ctx_slot].",
)
def sim(**opts: Any) -> None:
    """Simulate serving: plan-built replicas, a router, a workload; figures are *simulated*.

    Each replica's KV pool comes from the same arithmetic as `kvbudget plan` (one source of
    truth). Step times come from measured kernel tables (aiconfigurator-core), the roofline
    model (GPU catalog + model structure) or a calibrated profile; the summary names the model
    used. See docs/simulator.md for what is
    and is not modelled.
    """
    from kvbudget.capacity.versions import DEFAULT_VLLM_VERSION
    from kvbudget.metrics.percentile_set import (
        DEFAULT_METRIC_PERCENTILES,
        parse_metric_percentiles,
    )
    from kvbudget.sim.cluster import simulate, simulate_stream
    from kvbudget.sim.native import build_label
    from kvbudget.sim.scenario import (
        build_cluster,
        build_workload,
        scenario_async_scheduling,
        stream_workload,
    )

    percentiles = (
        DEFAULT_METRIC_PERCENTILES
        if opts["metric_percentiles"] is None
        else parse_metric_percentiles(opts["metric_percentiles"])
    )
    for flag in OUTPUT_FLAGS:
        if opts[flag]:
            check_output_path(f"--{flag.replace('_', '-')}", opts[flag])
    scenario = scenario_from_opts(opts)
    engine = parse_engine(opts["engine"], "engine")  # click.Choice(SIM_ENGINES) checked it
    if engine == LLAMACPP:
        sim_slots(scenario, opts, percentiles)
        return
    if scenario.disaggregation is not None:
        sim_pd(scenario, opts, percentiles)
        return
    cluster = build_cluster(scenario, trace=opts["trace_out"] is not None)
    # --rate with --max-concurrency: arrivals at the rate, at most this many in flight (vllm
    # bench serve's semaphore); the others wait at the client and are sent when a slot frees
    capped = opts["max_concurrency"] if opts["rate"] is not None else None
    # ITL figures, and token times in --records-out (about a quarter more CPU at 128 output
    # tokens: --no-itl for trace-scale runs that do not need them)
    cluster.record_token_times = opts["itl"]
    with ExitStack() as files:
        records = samples = None
        if opts["records_out"]:
            records = files.enter_context(Path(opts["records_out"]).open("w"))
        if opts["samples_out"]:
            samples = files.enter_context(SampleWriter(Path(opts["samples_out"])))
        routing = None
        if opts["trace_out"] or opts["compare_router"]:
            # the Chrome trace and the routing comparison need every result: a collected run
            # (results in workload order)
            requests, concurrency = build_workload(scenario)
            concurrency = concurrency or capped
            cluster.concurrency = concurrency
            result = simulate(requests, cluster, seed=scenario.seed)
            routing = compare_router(opts, scenario, requests, concurrency, result)
            for r in result.requests:
                if records is not None:
                    records.write(r.to_record().model_dump_json() + "\n")
            for x in sorted(result.samples, key=lambda x: (x.time_s, x.replica)):
                if samples is not None:
                    samples.write(x)
            if opts["trace_out"]:
                Path(opts["trace_out"]).write_text(
                    json.dumps({"traceEvents": result.trace_events, "displayTimeUnit": "ms"})
                )
            summary = result.summary(percentiles)
            stats = result.run_stats()
            if routing is not None:
                summary["routing_comparison"] = routing
            num_requests = len(result.requests)
        else:
            # streamed: requests generated as they arrive, results written as they finish
            stream, concurrency = stream_workload(scenario)
            concurrency = concurrency or capped
            cluster.concurrency = concurrency
            out = records

            def on_result(r: Any) -> None:
                if out is not None:
                    out.write(r.to_record().model_dump_json() + "\n")

            run = simulate_stream(
                stream,
                cluster,
                seed=scenario.seed,
                on_result=on_result,
                on_sample=samples.write if samples is not None else None,
            )
            summary = run.summary(percentiles)
            stats = run.stats
            num_requests = summary["requests_total"]
    reasons = summary["unfinished_reasons"]
    if (
        num_requests
        and summary["requests_completed"] == 0
        and all(k.startswith("rejected") for k in reasons)
    ):
        raise ConfigError(
            f"no request could run: {next(iter(reasons)).removeprefix('rejected: ')}",
            field="workload",
        )
    if capped is not None:
        summary["notes"] = [
            *summary.get("notes", []),
            f"arrivals at --rate {opts['rate']:g}/s, at most {capped} in flight "
            "(--max-concurrency): a request that finds every slot busy waits at the client and "
            "its TTFT counts from when it is sent, as vllm bench serve measures it",
        ]
    if concurrency is None:  # open loop (rate or trace): did the queue keep growing?
        summary["queue"] = _queue_check(stats)
        if not summary["queue"]["stable"]:
            summary["notes"] = [*summary.get("notes", []), summary["queue"]["note"]]
    summary["model"] = scenario.model
    summary["gpu"] = scenario.gpu
    summary["tp"] = scenario.tp
    summary["pp"] = scenario.pp
    summary["engine_version"] = scenario.engine_version or (
        f"{DEFAULT_VLLM_VERSION} (kvbudget default)"
    )
    summary["quantization"] = scenario.quantization or "the config's (none if it has none)"
    summary["kv_dtype"] = scenario.kv_dtype
    summary["enable_expert_parallel"] = scenario.enable_expert_parallel
    summary["data_parallel_size"] = scenario.data_parallel_size
    if scenario.data_parallel_size > 1:
        how = (
            "by aiconfigurator-core's attention data parallel (each engine's attention on its "
            "own batch, the MoE layers on every engine's tokens as if all were as loaded)"
            if "data parallel" in str(summary.get("timing_model", ""))
            else "each engine as its own TP group"
        )
        lockstep = summary.get("lockstep")
        how += (
            (
                "; the engines step in lockstep, as vLLM's DPEngineCoreProc runs a MoE "
                "model's ranks: each step lasts as long as the slowest engine's, an engine "
                "with nothing to run pays a dummy 1-token batch "
                f"({lockstep['dummy_engine_steps']} of "
                f"{lockstep['group_steps'] * lockstep['engines_per_group']} engine steps), "
                f"and a finished wave stops at the next {lockstep['sync_interval_steps']}-step "
                "sync"
            )
            if lockstep
            else "; each engine steps on its own clock (a dense model's ranks are independent "
            "engines in vLLM)"
        )
        summary["notes"] = [
            *summary.get("notes", []),
            f"data parallel {scenario.data_parallel_size}: that many engines with their own "
            f"pools, routed by {scenario.router}; steps are priced {how}",
        ]
    summary["async_scheduling"] = scenario_async_scheduling(scenario).to_dict()
    if scenario.enable_expert_parallel:
        how = (
            "by aiconfigurator-core's expert-parallel MoE kernels and all-to-all (experts split "
            "whole over the TP ranks)"
            if "expert parallel" in str(summary.get("timing_model", ""))
            else "as tensor parallel (same per-rank expert bytes on uniform routing; the "
            "all-to-all priced as the all-reduce)"
        )
        summary["notes"] = [*summary.get("notes", []), f"expert parallel is priced {how}"]
    if scenario.pp > 1:
        summary["notes"] = [
            *summary.get("notes", []),
            f"pipeline parallel {scenario.pp}: the pool is the plan's per stage; a step is "
            "priced as one pass through all stages, and the simulator runs one batch at a "
            "time (vLLM overlaps up to pp batches)",
        ]
    summary["replicas"] = len(summary["num_gpu_blocks_by_replica"])
    summary["simulator_build"] = build_label()
    if opts["as_json"]:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
    else:
        click.echo(render_summary(summary))
        if routing is not None:
            from kvbudget.sim.per_replica import render_routing_section

            click.echo(render_routing_section(routing))
