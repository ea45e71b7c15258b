"""``kvbudget sim``'s flags on top of ``--scenario``: the scenario a run simulates (``kvbudget
capacity`` reuses it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbudget.errors import ConfigError

if TYPE_CHECKING:
    from kvbudget.sim.scenario import SimScenario


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
