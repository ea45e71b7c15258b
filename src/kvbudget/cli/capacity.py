"""``kvbudget capacity``: the highest load that meets an SLO (every figure *simulated*)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import click

from kvbudget.cli.capacity_render import render
from kvbudget.cli.capacity_search import (
    DEFAULT_MAX_DURATION_S,
    DEFAULT_WARMUP_REQUESTS,
    search_http,
    search_sim,
)
from kvbudget.cli.sim import sim as _sim
from kvbudget.cli.sim_outputs import check_output_path
from kvbudget.cli.sim_scenario import ENGINE_FLAG_KEYS
from kvbudget.cli.vocab import COUNT
from kvbudget.errors import ConfigError

#: ``kvbudget sim``'s options that describe the configuration and the workload, reused as they
#: are (one definition: a flag means the same in both commands)
SIM_OPTIONS = (
    "scenario",
    "model",
    *ENGINE_FLAG_KEYS,
    "num_requests",
    "input_tokens",
    "output_tokens",
    "prefix_groups",
    "shared_prefix_tokens",
    "prefix_caching",
    "seed",
    "as_json",
)
DEFAULT_NUM_REQUESTS = 200
#: fewer requests than this cannot tell a growing queue (kvbudget.metrics.stability)
MIN_NUM_REQUESTS = 20
_HELP = {
    "num_requests": f"Requests per probe, e.g. 200 [default: {DEFAULT_NUM_REQUESTS}; a "
    "scenario's workload.num_requests is not used].",
    "seed": "Seed of the first search; the reruns use the next --seeds - 1 seeds [default: 0].",
    "as_json": "Print the answer as JSON (max_rate_per_s, max_concurrency, binding_constraint, "
    "the points).",
}


#: ``kvbudget bench``'s options for reaching a running engine, reused as they are
BENCH_OPTIONS = (
    "base_url",
    "metrics_url",
    "scrape_interval_s",
    "api_key_env",
    "timeout_s",
    "warmup_requests",
)
_BENCH_HELP = {
    "base_url": "Search a running OpenAI-compatible server instead of the simulator, e.g. "
    "http://127.0.0.1:8000 (with --model, the name it serves).",
    "warmup_requests": "With --base-url: requests sent one at a time before the search, not "
    f"judged [default: {DEFAULT_WARMUP_REQUESTS}].",
}


def _bench_params() -> list[click.Parameter]:
    from kvbudget.cli.bench import bench

    by_name = {p.name: p for p in bench.params}
    out: list[click.Parameter] = []
    for name in BENCH_OPTIONS:
        param = copy.copy(by_name[name])
        param.required = False
        if isinstance(param, click.Option) and name in _BENCH_HELP:
            param.help = _BENCH_HELP[name]
            param.default = None
        out.append(param)
    return out


def _sim_params() -> list[click.Parameter]:
    by_name = {p.name: p for p in _sim.params}
    out: list[click.Parameter] = []
    for name in SIM_OPTIONS:
        param = copy.copy(by_name[name])
        if name in _HELP and isinstance(param, click.Option):
            param.help = _HELP[name]
        out.append(param)
    return out


@click.command("capacity", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--slo",
    required=True,
    help="The SLO as users write it: 'ttft_p95<1s,tpot_p95<50ms' (metrics ttft, tpot, itl, "
    "e2e; pNN, mean, median; s or ms), optionally goodput>=0.99 (vllm bench serve's goodput).",
)
@click.option(
    "--seeds",
    "num_seeds",
    type=COUNT,
    default=3,
    show_default=True,
    help="Searches with this many seeds; the answer's min / mean / max across them is stated.",
)
@click.option(
    "--rate-tolerance",
    "tolerance",
    type=float,
    default=0.05,
    show_default=True,
    help="Bisect the rate until the bracket is within this fraction of its upper end.",
)
@click.option(
    "--max-total-requests",
    type=COUNT,
    help="With --base-url: stop the search before sending more than this many requests "
    "(what was found is kept) [default: no limit].",
)
@click.option(
    "--max-duration-s",
    type=float,
    help="With --base-url: start no probe after this many seconds (what was found is kept) "
    f"[default: {DEFAULT_MAX_DURATION_S:g}].",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the search in this directory: capacity-run.json, probes.jsonl (each probe "
    "appended as it finishes) and capacity.json (the answer).",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the search in --out: reuse its finished probes, run the rest (with the same "
    "options; the budgets and --warmup-requests may change).",
)
@click.option(
    "--chart-out",
    type=click.Path(dir_okay=False),
    help="Write each SLO figure against load with the SLO lines (.svg, else PNG).",
)
def capacity(**opts: Any) -> None:
    """The highest load that meets an SLO: Poisson rate and closed-loop concurrency, simulated
    or on a running server.

    Builds the replicas as `kvbudget sim` does (same flags and scenario), then searches: one
    closed-loop probe with every batch slot full estimates the service rate; the Poisson rate
    is bracketed from it (x2) and bisected to --rate-tolerance; the concurrency likewise on
    integers from 1. A rate whose queue grows with the arrivals is not sustainable, whatever its
    percentiles. With --base-url the same search drives a running server with kvbudget bench's
    load runner (concurrency first, then rate from the throughput it reached), after
    --warmup-requests, within --max-total-requests and --max-duration-s, reading --metrics-url
    at each probe. With --out DIR every finished probe is kept as it ends; --resume continues
    an interrupted search from them (same options, same answer). See
    docs/how-much-can-it-hold.md and docs/commands/capacity.md.
    """
    from kvbudget.maxload.slo import parse_slo

    slo = parse_slo(opts["slo"])
    tolerance = opts["tolerance"]
    if not 0 < tolerance <= 0.5:
        raise ConfigError(
            f"--rate-tolerance {tolerance:g}: give a fraction in (0, 0.5], e.g. 0.05",
            field="tolerance",
        )
    num_requests = opts["num_requests"] or DEFAULT_NUM_REQUESTS
    if num_requests < MIN_NUM_REQUESTS:
        raise ConfigError(
            f"--num-requests {num_requests}: a probe needs at least {MIN_NUM_REQUESTS} requests "
            "to tell a growing queue; give e.g. 200",
            field="num_requests",
        )
    if opts["chart_out"]:
        check_output_path("--chart-out", opts["chart_out"])
    if opts["resume"] and opts["out_dir"] is None:
        raise ConfigError("--resume needs --out DIR (the search to continue)", field="resume")
    flags = {"rate": None, "concurrency": None, "max_concurrency": None, **opts}
    search = search_http if opts["base_url"] else search_sim
    # the journal names each option by its flag
    option_flags = {
        p.name: p.opts[0] for p in capacity.params if isinstance(p, click.Option) and p.name
    }
    try:
        doc, result, journal = search(opts, flags, slo, num_requests, tolerance, option_flags)
    except KeyboardInterrupt:
        from kvbudget.maxload.journal import PROBES_FILE

        if opts["out_dir"] is not None and (opts["out_dir"] / PROBES_FILE).exists():
            click.echo(
                f"capacity: the finished probes are kept in {opts['out_dir'] / PROBES_FILE}; "
                f"rerun with --resume --out {opts['out_dir']} to continue",
                err=True,
            )
        raise
    if opts["chart_out"]:
        from kvbudget.maxload.chart import write_chart

        write_chart(Path(opts["chart_out"]), result, figures=doc["figures_label"])
        doc["chart"] = opts["chart_out"]
    if journal is not None:
        doc["out"] = {
            "dir": str(opts["out_dir"]),
            "resumed": bool(opts["resume"]),
            "probes_reused": journal.num_reused,
            "notes": journal.notes,
        }
        journal.write_answer(doc)
        journal.close()
    if opts["as_json"]:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(render(doc))


capacity.params[:0] = _sim_params() + _bench_params()
