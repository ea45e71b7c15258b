"""``kvbudget sim``: simulate a cluster serving a workload (every figure *simulated*)."""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

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
from kvbudget.engine_name import EngineName, parse_engine
from kvbudget.errors import ConfigError
from kvbudget.sim.timing_select import timing_model_names

if TYPE_CHECKING:
    from kvbudget.sim.scenario import SimScenario

_OUTPUT_FLAGS = ("trace_out", "records_out", "samples_out")
#: the engines ``sim`` steps: vLLM's paged blocks, llama.cpp's fixed slots (SGLang: not yet)
SIM_ENGINES: tuple[EngineName, ...] = ("vllm", "llamacpp")


def _check_output_path(flag: str, raw: str) -> None:
    """Refuse an output path that cannot be written, before any simulation runs.

    Missing parent directories are created (as writing would need them anyway).
    """
    path = Path(raw)
    if path.is_dir():
        raise ConfigError(
            f"{flag} {raw}: is a directory; give a file path (e.g. {path / 'out.json'})",
            field=flag,
        )
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"{flag} {raw}: directory {parent} cannot be created ({reason}); "
            "give a path in a writable directory",
            field=flag,
        ) from None
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{flag} {raw}: directory {parent} is not writable; "
            "give a path in a writable directory",
            field=flag,
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(
            f"{flag} {raw}: file is not writable; give another path or fix its permissions",
            field=flag,
        )
    from kvbudget.safety.outlock import lock_out_file

    lock_out_file(path, flag=flag)  # two sims never write one file at once


def _positive_tokens(flag: str, value: int) -> int:
    if value < 1:
        raise ConfigError(
            f"{flag} {value}: must be >= 1 token (vLLM requires max_tokens >= 1 and a "
            "non-empty prompt); give e.g. 128",
            field=flag.removeprefix("--").replace("-", "_"),
        )
    return value


def _workload_from_flags(opts: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    wl = dict(base)
    if opts["num_requests"] is not None:
        wl["num_requests"] = opts["num_requests"]
    cap = opts["max_concurrency"]
    if cap is not None:
        if opts["concurrency"] is not None and opts["concurrency"] != cap:
            raise ConfigError(
                f"--max-concurrency {cap} and --concurrency {opts['concurrency']}: they mean "
                "the same here; give one",
                field="max_concurrency",
            )
        if opts["rate"] is None:
            opts = {**opts, "concurrency": cap}
    if opts["rate"] is not None and opts["concurrency"] is not None:
        raise ConfigError(
            "--rate and --concurrency: give one (open loop at a rate, or a closed loop)",
            field="rate",
        )
    if opts["rate"] is not None:
        if opts["rate"] <= 0:
            raise ConfigError(f"--rate: must be > 0 requests/s, got {opts['rate']}", field="rate")
        wl["arrivals"] = {"kind": "poisson", "rate_per_s": opts["rate"]}
    if opts["concurrency"] is not None:
        wl["arrivals"] = {"kind": "closed", "concurrency": opts["concurrency"]}
    if opts["input_tokens"] is not None:
        value = _positive_tokens("--input-tokens", opts["input_tokens"])
        wl["input_tokens"] = {"kind": "fixed", "value": value}
    if opts["output_tokens"] is not None:
        value = _positive_tokens("--output-tokens", opts["output_tokens"])
        wl["output_tokens"] = {"kind": "fixed", "value": value}
    if opts["random_range_ratio"] is not None:
        _apply_range_ratio(wl, opts["random_range_ratio"])
    groups = opts["prefix_groups"]
    shared = opts["shared_prefix_tokens"]
    if groups and not shared:
        raise ConfigError(
            f"--prefix-groups {groups}: give --shared-prefix-tokens too (tokens of each "
            "group's shared prefix, e.g. 2048)",
            field="prefix_groups",
        )
    if groups is not None or shared is not None:
        prefix = dict(wl.get("prefix", {}))
        if groups:
            prefix["num_groups"] = groups
            prefix["group_prefix_tokens"] = shared or 0
        elif shared is not None:
            prefix["system_prompt_tokens"] = shared
        wl["prefix"] = prefix
    return wl


def _apply_range_ratio(wl: dict[str, Any], text: str) -> None:
    """``--random-range-ratio``: fixed lengths become vLLM's uniform ranges around them."""
    from kvbudget.workload.range_ratio import parse_range_ratio, ranged_length

    ratios = parse_range_ratio(text)
    defaults = {"input_tokens": 1024, "output_tokens": 128}  # WorkloadSpec's and vLLM's
    for (name, default), ratio in zip(defaults.items(), ratios, strict=True):
        length = wl.get(name, {"kind": "fixed", "value": default})
        kind = length.get("kind", "fixed") if isinstance(length, dict) else repr(length)
        if kind != "fixed":
            raise ConfigError(
                f"--random-range-ratio: workload.{name} is already a distribution ({kind}); it "
                "applies to a fixed length (--input-tokens / --output-tokens); drop one",
                field="random_range_ratio",
            )
        minimum = 1 if name == "output_tokens" else 0
        wl[name] = ranged_length(int(length.get("value", default)), ratio, minimum=minimum)


def _queue_check(stats: Any) -> dict[str, Any]:
    """``{"stable": bool, ...}``: TTFT against arrival time (kvbudget.metrics.stability)."""
    from kvbudget.metrics.stability import queue_growth_spilled

    # the rows as kept (in memory, or a temporary file past its buffer): the same answer
    growth = queue_growth_spilled(stats.first_token_rows)
    if growth is None:
        return {"stable": True}
    return {"stable": False, "note": growth.line(), **growth.to_dict()}


def _render(summary: dict[str, Any]) -> str:
    def f(value: Any, unit: str = "", scale: float = 1.0) -> str:
        return "n/a" if value is None else f"{value * scale:.3f}{unit}"

    lines = [
        f"kvbudget sim  (figures: simulated, timing model: {summary['timing_model']}, "
        f"router: {summary['router']})",
        f"  requests completed   {summary['requests_completed']} of {summary['requests_total']}"
        + (
            f"  ({summary['requests_cancelled']} cancelled by the client)"
            if summary["requests_cancelled"]
            else ""
        )
        + (
            f"  ({summary['requests_unfinished']} unfinished, see --records-out)"
            if summary["requests_unfinished"]
            else ""
        ),
        *_latency_lines(summary, f),
        f"  prefix hit rate      {summary['prefix_hit_rate_tokens'] * 100:.1f}% of prompt tokens "
        f"({summary['prefix_cache_hits_tokens']} / {summary['prefix_cache_queries_tokens']}), "
        f"{summary['prefix_hit_rate_requests'] * 100:.1f}% of requests",
        f"  preemptions          {summary['num_preemptions']}",
        f"  GPU KV blocks        {summary['num_gpu_blocks']} "
        f"({', '.join(f'{k}: {v}' for k, v in summary['num_gpu_blocks_by_replica'].items())})",
        f"  output throughput    {summary['output_tokens_per_s']:.1f} tokens/s",
        f"  simulated / wall     {summary['simulated_s']:.2f} s / {summary['wall_s']:.2f} s",
        f"  simulator build      {summary['simulator_build']}",
    ]
    if "async_scheduling" in summary:
        asynchronous = summary["async_scheduling"]
        lines.insert(
            1,
            f"  async scheduling     {'on' if asynchronous['enabled'] else 'off'}: "
            f"{asynchronous['reason']}",
        )
    for reason, count in list(summary.get("unfinished_reasons", {}).items())[:3]:
        lines.append(f"  unfinished ({count}): {reason}")
    lines.extend(f"  note: {note}" for note in summary.get("notes", []))
    return "\n".join(lines)


def _latency_lines(summary: dict[str, Any], f: Any) -> list[str]:
    """``TTFT mean / p50 / p90 / ...`` lines of the chosen percentiles."""
    from kvbudget.metrics.percentile_set import percentile_name, reported_percentiles

    names = [percentile_name(q) for q in reported_percentiles(summary["metric_percentiles"])]
    lines = []
    for metric, unit, scale in (
        ("ttft", " s", 1.0),
        ("tpot", " ms", 1e3),
        ("itl", " ms", 1e3),
        ("e2e", " s", 1.0),
    ):
        head = f"{metric.upper()} mean / {' / '.join(names)}"
        values = [summary[f"{metric}_mean_s"], *(summary[f"{metric}_{n}_s"] for n in names)]
        lines.append(f"  {head:<20} " + " / ".join(f(v, unit, scale) for v in values))
    return lines


#: the flags (scenario keys) that describe the simulated engine and its replicas, in one place:
#: ``scenario_from_opts`` copies them into the scenario, ``kvbudget capacity`` reuses the options
#: and refuses them with ``--base-url`` (the server is the engine); ``prefix_caching`` is copied
#: on its own (a boolean that may be False)
ENGINE_FLAG_KEYS = (
    "gpu",
    "tp",
    "replicas",
    "data_parallel_size",
    "router",
    "kv_dtype",
    "pp",
    "engine_version",
    "quantization",
    "enable_expert_parallel",
    "async_scheduling",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "timing_model",
    "timing_profile",
)


def scenario_from_opts(opts: dict[str, Any]) -> SimScenario:
    """The scenario of ``--scenario`` with the flags on top (``kvbudget capacity`` reuses it;
    a flag the caller lacks counts as not given)."""
    from collections import defaultdict

    from kvbudget.sim.scenario import load_scenario, scenario_from_dict

    opts = defaultdict(lambda: None, opts)

    data: dict[str, Any] = {}
    if opts["scenario"]:
        data = load_scenario(opts["scenario"])
        # the file alone first, so its mistakes are reported against the file
        scenario_from_dict(dict(data), origin=Path(opts["scenario"]).name)
    for key in ("model", *ENGINE_FLAG_KEYS, "max_simulated_s", "seed", "sample_every_s"):
        if opts.get(key) is not None:
            data[key] = opts[key]
    if opts.get("prefix_caching") is not None:
        data["prefix_caching"] = opts["prefix_caching"]
    base_wl = data.get("workload") or {
        "num_requests": 1000,
        "arrivals": {"kind": "poisson", "rate_per_s": 10.0},
    }
    data["workload"] = _workload_from_flags(opts, base_wl)
    return scenario_from_dict(data, origin="the command-line flags")


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
    "scheduler and KV pool (a MoE model's experts span all of them), routed as vLLM's API "
    "server routes (least_outstanding) unless --router is given [default: 1].",
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
    help="Calibrated timing profile (JSON); replaces --timing-model.",
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
    for flag in _OUTPUT_FLAGS:
        if opts[flag]:
            _check_output_path(f"--{flag.replace('_', '-')}", opts[flag])
    scenario = scenario_from_opts(opts)
    engine = parse_engine(opts["engine"], "engine")  # click.Choice(SIM_ENGINES) checked it
    if engine == "llamacpp":
        _sim_slots(scenario, opts, percentiles)
        return
    if scenario.disaggregation is not None:
        _sim_pd(scenario, opts, percentiles)
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
            samples = files.enter_context(_SampleWriter(Path(opts["samples_out"])))
        routing = None
        if opts["trace_out"] or opts["compare_router"]:
            # the Chrome trace and the routing comparison need every result: a collected run
            # (results in workload order)
            requests, concurrency = build_workload(scenario)
            concurrency = concurrency or capped
            cluster.concurrency = concurrency
            result = simulate(requests, cluster, seed=scenario.seed)
            routing = _compare_router(opts, scenario, requests, concurrency, result)
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
            else "as independent engines (each its own TP group)"
        )
        how += (
            "; each engine steps on its own clock: vLLM keeps a MoE model's engines in step "
            "(an idle one runs dummy batches), which is not modelled"
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
        click.echo(_render(summary))
        if routing is not None:
            from kvbudget.sim.per_replica import render_routing_section

            click.echo(render_routing_section(routing))


def _compare_router(
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


class _SampleWriter:
    """The samples CSV, written as samples come (rows of one time sorted by replica name)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._batch: list[Any] = []

    def __enter__(self) -> _SampleWriter:
        self._fh = self.path.open("w")
        self._fh.write("time_s,replica,kv_usage,num_running,num_waiting\n")
        return self

    def write(self, x: Any) -> None:
        if self._batch and self._batch[0].time_s != x.time_s:
            self._flush()
        self._batch.append(x)

    def _flush(self) -> None:
        for x in sorted(self._batch, key=lambda x: x.replica):
            self._fh.write(
                f"{x.time_s:.6f},{x.replica},{x.kv_usage:.6f},{x.num_running},{x.num_waiting}\n"
            )
        self._batch.clear()

    def __exit__(self, *exc: object) -> None:
        self._flush()
        self._fh.close()


def _sim_pd(scenario: Any, opts: dict[str, Any], percentiles: Any) -> None:
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


def _sim_slots(scenario: Any, opts: dict[str, Any], percentiles: Any) -> None:
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
