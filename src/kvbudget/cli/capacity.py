"""``kvbudget capacity``: the highest load that meets an SLO (every figure *simulated*)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kvbudget.cli.sim import sim as _sim
from kvbudget.cli.sim_outputs import check_output_path
from kvbudget.cli.sim_scenario import ENGINE_FLAG_KEYS, scenario_from_opts
from kvbudget.cli.vocab import COUNT
from kvbudget.errors import ConfigError

if TYPE_CHECKING:
    from kvbudget.maxload.journal import ProbeJournal

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
#: the rate's answer is confirmed by a run with this many times --num-requests
CONFIRM_FACTOR = 4
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
#: sim options that describe the simulated engine: refused with --base-url (the server is it)
SIM_ENGINE_OPTIONS = (*ENGINE_FLAG_KEYS, "prefix_caching")
DEFAULT_WARMUP_REQUESTS = 4
DEFAULT_MAX_DURATION_S = 600.0
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


def _fmt(value: float | None, scale: float = 1.0, unit: str = "") -> str:
    return "n/a" if value is None else f"{value * scale:.3g}{unit}"


def _answer_line(label: str, doc: dict[str, Any], key: str, binding: str, unit: str) -> str:
    seeds = doc[f"{key}_across_seeds"]
    value = doc[key]
    if value is None and doc[binding] is None:
        head = f"not found (the search stopped: {doc.get('stopped') or 'no probe ran'})"
    elif value is None:
        head = f"none (the lowest load probed failed: {doc[binding]})"
    else:
        head = f"{value:.3g}{unit}  (binding: {doc[binding] or 'none failed up to the last probe'})"
    spread = (
        f"seeds {seeds['seeds'][0]}..{seeds['seeds'][-1]}: min {_fmt(seeds['min'])} / mean "
        f"{_fmt(seeds['mean'])} / max {_fmt(seeds['max'])}"
    )
    return f"  {label:<17}{head}\n  {'':<17}{spread}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.4g} ms"


def _table(points: list[dict[str, Any]], keys: list[str], label: str, goodput: bool) -> list[str]:
    head = f"  {label:<12}{'requests':>9}" + "".join(f"{k.removesuffix('_s'):>12}" for k in keys)
    head += (f"{'goodput':>9}" if goodput else "") + f"{'queue':>9}{'meets':>7}"
    lines = [head]
    for p in points:
        stopped = p.get("stopped_early") is not None
        sent = f"{p.get('num_sent')}/{p['num_requests']}" if stopped else str(p["num_requests"])
        row = f"  {p['load']:<12.4g}{sent:>9}"
        row += "".join(f"{_ms(p.get(k)):>12}" for k in keys)
        if goodput:
            row += f"{_fmt(p['goodput_fraction']):>9}"
        queue = "-" if label == "concurrency" else "stable" if p["stable"] else "GROWS"
        meets = "yes" if p["meets_slo"] else "no*" if stopped else "no"
        lines.append(row + f"{queue:>9}{meets:>7}")
    if any(p.get("stopped_early") for p in points):
        lines.append(
            "  no*: stopped early, the SLO already broken (sent/planned requests; those in "
            "flight cancelled)"
        )
    return lines


def render(doc: dict[str, Any]) -> str:
    """The answer as text: both maxima, what binds, the spread over seeds, every point."""
    keys = [f"{t['metric']}_{t['statistic']}_s" for t in doc["slo"]["terms"] if t["statistic"]]
    goodput = doc["slo"]["goodput_min"] is not None
    if doc.get("engine"):
        figures = f"figures: {doc['figures_label']}"
    else:
        figures = f"figures: simulated, timing model: {doc['timing_model']}"
    lines = [
        f"kvbudget capacity  ({figures}; SLO {doc['slo']['text']})",
        _answer_line("max rate", doc, "max_rate_per_s", "binding_constraint", " requests/s"),
        _answer_line(
            "max concurrency", doc, "max_concurrency", "binding_constraint_concurrency", ""
        ),
        f"  probes           {doc['num_requests']} requests each (the rate's answer confirmed "
        f"with {doc['num_requests'] * CONFIRM_FACTOR});\n  {'':<17}rate to within "
        f"{doc['tolerance'] * 100:g} %; {doc['wall_s']:.1f} s",
        "",
        *_table(doc["rate_points"], keys, "rate/s", goodput),
        "",
        *_table(doc["concurrency_points"], keys, "concurrency", goodput),
    ]
    if doc.get("stopped"):
        lines.insert(4, f"  stopped early    {doc['stopped']}")
        if doc["max_rate_per_s"] is not None and not doc.get("max_rate_confirmed"):
            lines.insert(
                5, f"  {'':<17}the max rate was not confirmed by a longer run: raise the budget"
            )
    if doc.get("async_scheduling"):
        asynchronous = doc["async_scheduling"]
        state = "on" if asynchronous["enabled"] else "off"
        lines.insert(3, f"  async scheduling {state}: {asynchronous['reason']}")
    if "chart" in doc:
        lines.append(f"\n  chart: {doc['chart']}")
    if doc.get("out"):
        out = doc["out"]
        reused = f"; {out['probes_reused']} probe(s) reused from it" if out["resumed"] else ""
        lines.append(f"\n  search kept in {out['dir']} (probes.jsonl, capacity.json){reused}")
        lines += [f"  note: {n}" for n in out["notes"]]
    return "\n".join(lines)


#: options a resumed search may change (budgets, warm-up, output); the rest must match
RESUME_FREE = (
    "max_total_requests",
    "max_duration_s",
    "warmup_requests",
    "chart_out",
    "as_json",
    "out_dir",
    "resume",
)


def _journal(opts: dict[str, Any], resolved: dict[str, Any]) -> ProbeJournal | None:
    """The probes of the search in ``--out`` (None without it): its identity is every option
    but :data:`RESUME_FREE`, by flag, and ``resolved`` (the scenario or workload as built)."""
    if opts["out_dir"] is None:
        return None
    from kvbudget.cli.outdir import prepare_out_dir
    from kvbudget.maxload.journal import ProbeJournal

    flags = {p.name: p.opts[0] for p in capacity.params if isinstance(p, click.Option)}
    options = {flags[k]: v for k, v in opts.items() if k in flags and k not in RESUME_FREE}
    prepare_out_dir(opts["out_dir"], ())  # locked (one search per directory), or one line
    return ProbeJournal(opts["out_dir"], {"options": options, **resolved}, resume=opts["resume"])


def _search_sim(
    opts: dict[str, Any], flags: dict[str, Any], slo: Any, num_requests: int, tolerance: float
) -> tuple[dict[str, Any], Any, ProbeJournal | None]:
    from kvbudget.maxload.run import find_capacity
    from kvbudget.maxload.sim_probe import SimProbe
    from kvbudget.sim.native import build_label
    from kvbudget.sim.scenario import scenario_async_scheduling

    scenario = scenario_from_opts(flags)
    probe = SimProbe.from_scenario(scenario, slo, num_requests=num_requests)
    probe.journal = journal = _journal(opts, {"scenario": scenario.model_dump(mode="json")})
    result = find_capacity(
        probe,
        slo,
        saturation_concurrency=probe.setup.config.max_num_seqs * scenario.replicas,
        num_requests=num_requests,
        seeds=[scenario.seed + i for i in range(opts["num_seeds"])],
        tolerance=tolerance,
        confirm=probe.longer(CONFIRM_FACTOR),
    )
    doc: dict[str, Any] = {
        "figures": "simulated",
        "figures_label": f"simulated, {probe.timing_model} timing",
        "timing_model": probe.timing_model,
        "model": scenario.model,
        "gpu": scenario.gpu,
        "tp": scenario.tp,
        "replicas": scenario.replicas,
        "async_scheduling": scenario_async_scheduling(scenario).to_dict(),
        **result.to_dict(),
        "simulator_build": build_label(),
    }
    return doc, result, journal


def _search_http(
    opts: dict[str, Any], flags: dict[str, Any], slo: Any, num_requests: int, tolerance: float
) -> tuple[dict[str, Any], Any, ProbeJournal | None]:
    from kvbudget.cli.main import run_async
    from kvbudget.maxload.http_probe import http_probe
    from kvbudget.maxload.probe import Budget
    from kvbudget.maxload.run import find_capacity

    for name in SIM_ENGINE_OPTIONS:
        if opts.get(name) is not None:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(
                f"{flag} with --base-url: it describes the simulated engine, and the server is "
                f"the engine here; drop {flag}",
                field=name,
            )
    if not opts["model"]:
        raise ConfigError(
            "--base-url: give --model, the name the server serves (GET /v1/models)",
            field="model",
        )
    workload = scenario_from_opts({**flags, "model": None}).workload
    seed = opts["seed"] or 0
    budget = Budget(
        max_requests=opts["max_total_requests"],
        max_duration_s=opts["max_duration_s"] or DEFAULT_MAX_DURATION_S,
    )
    # refused (a changed search in --out) before the server is asked anything
    journal = _journal(opts, {"workload": workload})
    probe, info = http_probe(
        base_url=opts["base_url"],
        model=opts["model"],
        run_async=run_async,
        workload=workload,
        slo=slo,
        num_requests=num_requests,
        budget=budget,
        metrics_url=opts["metrics_url"],
        scrape_interval_s=opts["scrape_interval_s"],
        api_key_env=opts["api_key_env"],
        timeout_s=opts["timeout_s"] or 120.0,
        seed=seed,
    )
    probe.journal = journal
    warmup = opts["warmup_requests"]
    probe.warm_up(DEFAULT_WARMUP_REQUESTS if warmup is None else warmup, seed)
    result = find_capacity(
        probe,
        slo,
        saturation_concurrency=None,
        num_requests=num_requests,
        seeds=[seed + i for i in range(opts["num_seeds"])],
        tolerance=tolerance,
        confirm=probe.longer(CONFIRM_FACTOR),
    )
    doc: dict[str, Any] = {
        "figures": info.source,
        "figures_label": info.label,
        "timing_model": info.timing_model,
        "engine": info.engine,
        "engine_version": info.engine_version,
        "base_url": opts["base_url"],
        "model": opts["model"],
        **result.to_dict(),
        "num_requests_sent": budget.num_requests,
    }
    return doc, result, journal


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
    search = _search_http if opts["base_url"] else _search_sim
    try:
        doc, result, journal = search(opts, flags, slo, num_requests, tolerance)
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
