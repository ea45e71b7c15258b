"""``kvbudget audit``'s target: a real engine (``--base-url``) or the embedded simulator (``--target
sim``), its options, their checks and the probe an audit runs on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kvbudget.cli.vocab import ENDPOINT
from kvbudget.errors import ConfigError
from kvbudget.safety.redact import secret_from_env


def target_options(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option(
            "--base-url",
            default=None,
            help="OpenAI-compatible server to audit, with or without /v1 (figures are measured).",
        ),
        click.option(
            "--target",
            type=click.Choice(["sim"]),
            default=None,
            help="'sim': the embedded simulator in virtual time (figures are simulated).",
        ),
        click.option("--model", default=None, help="Model name (default: first of /v1/models)."),
        click.option(
            "--endpoint",
            type=ENDPOINT,
            default="completions",
            show_default=True,
            help="--base-url: /v1/completions (raw prompt) or /v1/chat/completions (one user "
            "message).",
        ),
        click.option(
            "--metrics-url",
            default=None,
            help="Prometheus /metrics URL; the prefix-cache hit counter is read around requests.",
        ),
        click.option(
            "--api-key-env",
            default=None,
            help="Name of the environment variable holding the API key (never written anywhere).",
        ),
        click.option(
            "--timeout",
            "timeout_s",
            type=click.FloatRange(min=0.1),
            default=60.0,
            show_default=True,
            help="Per-request timeout in seconds.",
        ),
        click.option(
            "--sim-step-ms",
            type=click.FloatRange(min=0.0),
            default=1.0,
            show_default=True,
            help="--target sim: fixed time of one engine step (ms).",
        ),
        click.option(
            "--sim-per-token-us",
            type=click.FloatRange(min=0.0),
            default=20.0,
            show_default=True,
            help="--target sim: prefill cost per uncached token (us); a hit skips it.",
        ),
        click.option(
            "--sim-jitter-ms",
            type=click.FloatRange(min=0.0),
            default=2.0,
            show_default=True,
            help="--target sim: median of the lognormal simulated client/network jitter (ms).",
        ),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of the run."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
        click.option(
            "--out",
            "out_dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Write the result as JSON and Markdown into this directory.",
        ),
        click.option(
            "--strict",
            is_flag=True,
            help="Exit 1 unless the verdict is no_leak_detected (isolation) or pass (reuse).",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def check_target(opts: dict[str, Any]) -> None:
    if (opts["base_url"] is None) == (opts["target"] is None):
        raise ConfigError(
            "give exactly one target: --base-url URL (a real engine) or --target sim "
            f"(got --base-url {opts['base_url']!r}, --target {opts['target']!r})",
            field="base_url",
        )
    url = opts["base_url"]
    if url is not None and not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"--base-url {url!r}: must start with http:// or https:// (e.g. http://127.0.0.1:8000)",
            field="base_url",
        )


async def with_probe(opts: dict[str, Any], work: Callable[[Any], Any]) -> Any:
    import numpy as np

    from kvbudget.audit.probe_http import HttpProbe
    from kvbudget.audit.probe_sim import SimProbe, SimProbeOptions

    if opts["target"] == "sim":
        sim = SimProbe(
            SimProbeOptions(
                step_s=opts["sim_step_ms"] / 1e3,
                per_token_s=opts["sim_per_token_us"] / 1e6,
                jitter_median_s=opts["sim_jitter_ms"] / 1e3,
                model=opts["model"] or "sim",
            ),
            np.random.default_rng(opts["seed"]),
        )
        return await work(sim)
    tenant_b_env = opts.get("tenant_b_api_key_env")
    tenant_keys = None
    if tenant_b_env:
        from kvbudget.audit.isolation import ATTACKER

        key = secret_from_env(tenant_b_env, flag="--tenant-b-api-key-env")
        tenant_keys = {ATTACKER: key} if key else None
    async with HttpProbe(
        opts["base_url"],
        model=opts["model"],
        metrics_url=opts["metrics_url"],
        api_key=secret_from_env(opts["api_key_env"], flag="--api-key-env"),
        timeout_s=opts["timeout_s"],
        endpoint=opts["endpoint"],
        tenant_api_keys=tenant_keys,
    ) as http:
        return await work(http)


def check_sim_length(opts: dict[str, Any], num_tokens: int, flags: str) -> None:
    from kvbudget.audit.probe_sim import SimProbeOptions

    limit = SimProbeOptions().max_model_len
    if opts["target"] == "sim" and num_tokens > limit:
        raise ConfigError(
            f"{flags}: {num_tokens} tokens per request exceed the simulated engine's "
            f"max_model_len {limit}; use at most {limit} tokens in all",
            field="prefix_tokens",
        )
