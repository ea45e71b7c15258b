"""``kvbudget bench``'s options read as ``vllm bench serve`` reads its flags, into a
:class:`~kvbudget.load.config.RunConfig` (a validation error names the flag)."""

from __future__ import annotations

from typing import Any

import click

from kvbudget.errors import ConfigError
from kvbudget.validation import first_problem

_FLAG_OF = {
    "base_url": "--base-url",
    "model": "--model",
    "shape": "--arrival",
    "concurrency": "--concurrency",
    "rate_per_s": "--rate",
    "gamma_cv": "--gamma-cv",
    "ramp_stages": "--ramp",
    "num_requests": "--num-requests",
    "prompt_tokens": "--input-tokens",
    "duration_s": "--duration",
    "timeout_s": "--timeout",
    "workload.turn_interval_s": "--turn-interval",
}


def parse_ramp(text: str | None) -> list[tuple[float, float]]:
    if not text:
        return []
    stages: list[tuple[float, float]] = []
    for part in text.split(","):
        try:
            rate, dur = part.split(":")
            stages.append((float(rate), float(dur)))
        except ValueError as exc:
            raise ConfigError(
                f"--ramp {text!r}: stage {part!r} is not RATE:SECONDS; write e.g. 2:10,4:10,8:10",
                field="ramp",
            ) from exc
    return stages


def run_config(values: dict[str, Any]) -> Any:
    from pydantic import ValidationError

    from kvbudget.load.config import RunConfig

    try:
        return RunConfig(**values)
    except ValidationError as exc:
        problem = first_problem(exc)
        loc = problem.where
        tail = loc.removeprefix("workload.")
        flag = _FLAG_OF.get(loc, f"--{tail.replace('_', '-')}" if loc else "options")
        given = values.get(loc) if loc else None
        if loc.startswith("workload."):
            given = values.get("workload", {}).get(tail)
        where = f"{flag}={given}: " if given is not None else (f"{flag}: " if loc else "")
        raise ConfigError(f"{where}{problem.message}", field=loc or None) from exc


def vllm_names(opts: dict[str, Any], ctx: click.Context) -> None:
    """Resolve the load shape as ``vllm bench serve`` reads its flags.

    ``--rate`` alone is a Poisson open loop (vLLM's default); ``--max-concurrency`` caps the
    requests in flight of an open loop, or is the closed loop's concurrency without a rate;
    ``--served-model-name`` is the name put in requests.
    """
    explicit_shape = ctx.get_parameter_source("shape") is not click.core.ParameterSource.DEFAULT
    if opts["ramp_stages"] and opts["shape"] == "closed" and not explicit_shape:
        opts["shape"] = "ramp"
    if opts["rate_per_s"] is not None and opts["shape"] == "closed":
        if explicit_shape:
            raise ConfigError(
                f"--rate {opts['rate_per_s']:g}: an offered rate is open loop; drop --arrival "
                "closed (or drop --rate and give --concurrency)",
                field="rate_per_s",
            )
        opts["shape"] = "poisson"
    cap = opts.pop("max_concurrency")
    if cap is not None:
        key, flag = ("max_inflight", "--max-inflight")
        if opts["shape"] == "closed":
            key, flag = ("concurrency", "--concurrency")
        if opts[key] is not None and opts[key] != cap:
            raise ConfigError(
                f"--max-concurrency {cap} and {flag} {opts[key]}: they mean the same here; give one",
                field="max_concurrency",
            )
        opts[key] = cap
    if opts["shape"] != "closed" and opts["concurrency"] is not None:
        raise ConfigError(
            f"--concurrency {opts['concurrency']}: only for the closed loop; with --rate cap the "
            "requests in flight with --max-concurrency",
            field="concurrency",
        )
    for key in ("concurrency", "max_inflight"):
        if opts[key] is None:
            del opts[key]  # the RunConfig default
    # the name put in requests; empty: the first of GET /v1/models (checked before the load)
    opts["model"] = opts.pop("served_model_name") or opts["model"] or ""
