"""``kvbudget capacity``'s two searches: on the simulator (replicas built as ``kvbudget sim`` builds
them) or on a running server (kvbudget bench's load runner), each with its probes kept in
``--out``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbudget.cli.sim_scenario import ENGINE_FLAG_KEYS, scenario_from_opts
from kvbudget.errors import ConfigError

if TYPE_CHECKING:
    from kvbudget.maxload.journal import ProbeJournal


#: the rate's answer is confirmed by a run with this many times --num-requests
CONFIRM_FACTOR = 4


#: sim options that describe the simulated engine: refused with --base-url (the server is it)
SIM_ENGINE_OPTIONS = (*ENGINE_FLAG_KEYS, "prefix_caching")


DEFAULT_WARMUP_REQUESTS = 4


DEFAULT_MAX_DURATION_S = 600.0


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


def _journal(
    opts: dict[str, Any], resolved: dict[str, Any], option_flags: dict[str, str]
) -> ProbeJournal | None:
    """The probes of the search in ``--out`` (None without it): its identity is every option
    but :data:`RESUME_FREE`, by flag (``option_flags``: the command's option name -> its first
    flag), and ``resolved`` (the scenario or workload as built)."""
    if opts["out_dir"] is None:
        return None
    from kvbudget.cli.outdir import prepare_out_dir
    from kvbudget.maxload.journal import ProbeJournal

    flags = option_flags
    options = {flags[k]: v for k, v in opts.items() if k in flags and k not in RESUME_FREE}
    prepare_out_dir(opts["out_dir"], ())  # locked (one search per directory), or one line
    return ProbeJournal(opts["out_dir"], {"options": options, **resolved}, resume=opts["resume"])


def search_sim(
    opts: dict[str, Any],
    flags: dict[str, Any],
    slo: Any,
    num_requests: int,
    tolerance: float,
    option_flags: dict[str, str],
) -> tuple[dict[str, Any], Any, ProbeJournal | None]:
    from kvbudget.maxload.run import find_capacity
    from kvbudget.maxload.sim_probe import SimProbe
    from kvbudget.sim.native import build_label
    from kvbudget.sim.scenario import scenario_async_scheduling

    scenario = scenario_from_opts(flags)
    probe = SimProbe.from_scenario(scenario, slo, num_requests=num_requests)
    probe.journal = journal = _journal(
        opts, {"scenario": scenario.model_dump(mode="json")}, option_flags
    )
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


def search_http(
    opts: dict[str, Any],
    flags: dict[str, Any],
    slo: Any,
    num_requests: int,
    tolerance: float,
    option_flags: dict[str, str],
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
    journal = _journal(opts, {"workload": workload}, option_flags)
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
