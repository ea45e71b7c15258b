"""``kvbudget audit``: cross-tenant prefix-cache isolation and reused-KV correctness."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kvbudget.cli.main import run_async
from kvbudget.cli.vocab import COUNT, COUNT0, ENDPOINT, INPUT_TOKENS, OUTPUT_TOKENS
from kvbudget.errors import ConfigError
from kvbudget.safety.redact import secret_from_env


def _target_options(f: Callable[..., Any]) -> Callable[..., Any]:
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


def _check_target(opts: dict[str, Any]) -> None:
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


async def _with_probe(opts: dict[str, Any], work: Callable[[Any], Any]) -> Any:
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


def _check_sim_length(opts: dict[str, Any], num_tokens: int, flags: str) -> None:
    from kvbudget.audit.probe_sim import SimProbeOptions

    limit = SimProbeOptions().max_model_len
    if opts["target"] == "sim" and num_tokens > limit:
        raise ConfigError(
            f"{flags}: {num_tokens} tokens per request exceed the simulated engine's "
            f"max_model_len {limit}; use at most {limit} tokens in all",
            field="prefix_tokens",
        )


def _progress(enabled: bool) -> Callable[[int, int], None] | None:
    if not enabled:
        return None

    def show(done: int, total: int) -> None:
        click.echo(f"\r  {done}/{total}", err=True, nl=done == total)

    return show


def _prepare_out(opts: dict[str, Any], name: str) -> None:
    if opts["out_dir"] is not None:
        from kvbudget.cli.outdir import prepare_out_dir

        prepare_out_dir(opts["out_dir"], (f"{name}.json", f"{name}.md"))


def _emit(result: Any, opts: dict[str, Any], name: str) -> None:
    out_dir: Path | None = opts["out_dir"]
    if out_dir is not None:
        from kvbudget.records import write_document

        out_dir.mkdir(parents=True, exist_ok=True)
        write_document(out_dir / f"{name}.json", result)
        from kvbudget.safety.redact import redact_text

        (out_dir / f"{name}.md").write_text(
            redact_text(result.to_markdown(heading_level=1)), encoding="utf-8"
        )
    if opts["as_json"]:
        click.echo(json.dumps(result.model_dump(mode="json"), indent=2))
    else:
        click.echo(result.to_markdown())
        if out_dir is not None:
            click.echo(f"Wrote {out_dir / (name + '.json')} and {out_dir / (name + '.md')}")


def _fail_if_all_failed(outcomes: list[tuple[str | None, bool]], result: Any, what: str) -> None:
    """Exit 4 in one line when every request of the audit failed (the result is written)."""
    from kvbudget.errors import RunFailedError
    from kvbudget.load.diagnosis import diagnose, digest, failure_from_text

    failures = [failure_from_text(error) for error, ok in outcomes if not ok]
    where = (result.target or {}).get("base_url") or "the simulator"
    line = diagnose(digest(failures, len(outcomes)), url=str(where), what=what)
    if line is not None:
        raise RunFailedError(line)


def _load_salts(path: Path | None) -> dict[str, str] | None:
    if path is None:
        return None
    import yaml

    from kvbudget.safety.yamlload import load_yaml_text, read_text_file

    try:
        raw = load_yaml_text(read_text_file(path, what="--salt-file"), source="--salt-file")
    except (OSError, yaml.YAMLError, ConfigError) as exc:
        # never echo the file's content (it holds secrets)
        raise ConfigError(
            f"--salt-file {path}: cannot read it as YAML ({type(exc).__name__}); write "
            "'tenant-a: SALT' and 'tenant-b: SALT' lines",
            field="salt_file",
        ) from None
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise ConfigError(
            f"--salt-file {path}: must be a YAML mapping of tenant name to salt string",
            field="salt_file",
        )
    from kvbudget.safety.redact import register_secret

    salts = {k: v for k, v in raw.items() if isinstance(v, str)}
    for salt in salts.values():
        register_secret(salt)  # salts are secrets too
    return salts


@click.group()
def audit() -> None:
    """Audit a prefix cache: cross-tenant isolation and correctness of reused KV.

    Both audits run against a real engine (--base-url, measured) or the embedded simulator
    (--target sim, simulated) and print Markdown, or JSON with --json; --out DIR writes both.
    """


@audit.command(
    "isolation", short_help="Cross-tenant prefix-cache isolation (timing + cached tokens)."
)
@_target_options
@click.option(
    "--salt",
    "salt_mode",
    type=click.Choice(["per-tenant", "user", "none"]),
    default="per-tenant",
    show_default=True,
    help="per-tenant: kvbudget injects a fresh random cache_salt per tenant (a trusted "
    "gateway); user: salts from --salt-file; none: no salt (shows the baseline leak).",
)
@click.option(
    "--tenant-b-api-key-env",
    default=None,
    help="--base-url: variable holding a second API key used by tenant-b (the attacker), for "
    "gateways that separate tenants by key; tenant-a uses --api-key-env.",
)
@click.option(
    "--salt-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="YAML mapping tenant-a / tenant-b to salts (for --salt user; never echoed).",
)
@click.option("--trials", type=COUNT, default=30, show_default=True, help="Trials per arm.")
@click.option(
    "--shared-prefix-tokens",
    "--prefix-tokens",
    "prefix_tokens",
    type=COUNT,
    default=512,
    show_default=True,
    help="Shared prefix length.",
)
@click.option(
    "--suffix-tokens", type=COUNT, default=32, show_default=True, help="Fresh suffix length."
)
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Significance level.")
@click.option("--power", type=float, default=0.8, show_default=True, help="Power for the MDE AUC.")
def isolation(**opts: Any) -> int:
    """Can tenant B tell from first-token timing or cached-token counts that tenant A sent
    a prompt? Three interleaved arms (hit, control, same-tenant positive control), fresh
    random prefixes per trial, max_tokens=1, one request at a time. The statistics are
    printed (stderr) before the first request. Verdict: leak_detected, no_leak_detected
    (at the stated minimum detectable AUC) or inconclusive."""
    from kvbudget.audit.isolation import IsolationConfig, declared_statistics, run_isolation

    _check_target(opts)
    if opts["tenant_b_api_key_env"] and opts["target"] == "sim":
        raise ConfigError(
            "--tenant-b-api-key-env needs --base-url (the simulator has no API keys)",
            field="tenant_b_api_key_env",
        )
    if opts["salt_mode"] == "user" and opts["salt_file"] is None:
        raise ConfigError("--salt user needs --salt-file FILE (tenant -> salt)", field="salt_file")
    if opts["salt_mode"] != "user" and opts["salt_file"] is not None:
        raise ConfigError(
            f"--salt-file is only read with --salt user (got --salt {opts['salt_mode']})",
            field="salt_file",
        )
    cfg = IsolationConfig(
        trials=opts["trials"],
        prefix_tokens=opts["prefix_tokens"],
        suffix_tokens=opts["suffix_tokens"],
        alpha=opts["alpha"],
        power=opts["power"],
        seed=opts["seed"],
        salt_mode=opts["salt_mode"],
        user_salts=_load_salts(opts["salt_file"]),
    )
    cfg.validate()
    _check_sim_length(
        opts, cfg.prefix_tokens + cfg.suffix_tokens + 1, "--shared-prefix-tokens + --suffix-tokens"
    )
    if not 0 < cfg.power < 1:
        raise ConfigError(f"--power {cfg.power}: must lie in (0, 1), e.g. 0.8", field="power")
    _prepare_out(opts, "audit-isolation")
    declared = declared_statistics(cfg)
    progress = _progress(not opts["as_json"] and sys.stderr.isatty())

    async def work(probe: Any) -> Any:
        await probe.identity()  # an unreachable target fails here, in one line
        click.echo(
            "Declared before the run: one-sided Mann-Whitney + one-sided KS on attacker TTFT "
            f"(hit < control), Holm, alpha {cfg.alpha:g}, power {cfg.power:g}, {cfg.trials} "
            f"trials per arm, minimum detectable AUC {declared['mde_auc']:.3f}; any "
            "cross-tenant cached token is a leak; the same-tenant positive control must show "
            "reuse.",
            err=True,
        )
        return await run_isolation(probe, cfg, progress=progress)

    result = run_async(_with_probe(opts, work))
    _emit(result, opts, "audit-isolation")
    trials = result.trial_records
    _fail_if_all_failed(
        [(t.error, t.victim_ok and t.attacker_ok) for t in trials], result, "trials"
    )
    return 1 if opts["strict"] and result.verdict != "no_leak_detected" else 0


def _read_prompts(path: Path) -> list[tuple[tuple[int, ...], str]]:
    from kvbudget.workload.tokenizer import get_tokenizer

    tok = get_tokenizer()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"--prompts-file {path}: cannot read it ({type(exc).__name__})", field="prompts_file"
        ) from None
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        text = obj.get("prompt") if isinstance(obj, dict) else None
        if not isinstance(text, str) or not text:
            raise ConfigError(
                f"--prompts-file {path}: line {i} is not a JSON object with a non-empty "
                '"prompt" string; write one {"prompt": "..."} per line',
                field="prompts_file",
            )
        out.append((tuple(tok.encode(text)), text))
    return out


@audit.command("reuse", short_help="Correctness of reused KV: cold vs hot vs after-reset output.")
@_target_options
@click.option("--prompts", "num_prompts", type=COUNT, default=8, show_default=True,
              help="Number of distinct generated prompts, each sent cold, hot and after reset "
              "(ignored with --prompts-file).")  # fmt: skip
@click.option(*INPUT_TOKENS, "--prompt-tokens", "prompt_tokens", type=COUNT, default=512,
              show_default=True,
              help="Length of each generated prompt (synthetic tokenizer words).")  # fmt: skip
@click.option(
    "--prompts-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help='JSONL of {"prompt": "..."} lines (results store only their sha256).',
)
@click.option(*OUTPUT_TOKENS, "--max-tokens", "max_tokens", type=COUNT, default=32,
              show_default=True, help="Greedy output tokens per run.")  # fmt: skip
@click.option("--logprobs", type=COUNT0, default=5, show_default=True,
              help="Top logprobs to request (0 = none).")  # fmt: skip
@click.option("--tolerance", type=float, default=0.05, show_default=True,
              help="Largest logprob gap (nats) of a near-tie at the first divergence.")  # fmt: skip
@click.option("--no-reset", is_flag=True,
              help="Never call /reset_prefix_cache (the after-reset run is then untested).")  # fmt: skip
def reuse(**opts: Any) -> int:
    """Is output computed from reused KV the same as output computed cold? For each prompt:
    a cold run, a hot run (prefix-cache hit) and a run after /reset_prefix_cache, greedy.
    Verdict pass, diverged, reuse_not_exercised (the cache never hit: nothing was tested)
    or incomplete."""
    from kvbudget.audit.reuse import ReuseConfig, run_reuse

    _check_target(opts)
    cfg = ReuseConfig(
        num_prompts=opts["num_prompts"],
        prompt_tokens=opts["prompt_tokens"],
        max_tokens=opts["max_tokens"],
        logprobs=opts["logprobs"],
        tolerance=opts["tolerance"],
        seed=opts["seed"],
        reset=not opts["no_reset"],
    )
    cfg.validate()
    _check_sim_length(opts, cfg.prompt_tokens + cfg.max_tokens, "--input-tokens + --output-tokens")
    _prepare_out(opts, "audit-reuse")
    prompts = _read_prompts(opts["prompts_file"]) if opts["prompts_file"] else None
    progress = _progress(not opts["as_json"] and sys.stderr.isatty())

    async def work(probe: Any) -> Any:
        return await run_reuse(probe, cfg, prompts=prompts, progress=progress)

    result = run_async(_with_probe(opts, work))
    _emit(result, opts, "audit-reuse")
    runs = [r for p in result.prompts for r in (p.cold, p.hot, p.after_reset) if r is not None]
    _fail_if_all_failed([(r.error, r.ok) for r in runs], result, "requests")
    return 1 if opts["strict"] and result.verdict != "pass" else 0


@audit.command(
    "restart", short_help="Simulated: a persistent KV store across a restart and an upgrade."
)
@click.option("--prompts", "num_prompts", type=COUNT, default=4, show_default=True,
              help="Number of generated prompts.")  # fmt: skip
@click.option(*INPUT_TOKENS, "--prompt-tokens", "prompt_tokens", type=COUNT, default=512,
              show_default=True, help="Length of each generated prompt.")  # fmt: skip
@click.option(*OUTPUT_TOKENS, "--max-tokens", "max_tokens", type=COUNT, default=16,
              show_default=True, help="Greedy output tokens per run.")  # fmt: skip
@click.option("--identity", default="deploy-v1", show_default=True,
              help="The deployment's cache identity (e.g. a kvbudget fingerprint digest).")  # fmt: skip
@click.option("--upgraded-identity", default="deploy-v2", show_default=True,
              help="The identity after the upgrade; the same value models a deployment that "
              "forgot to change its fingerprint.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Prompt seed.")
@click.option("--json", "as_json", is_flag=True, help="Print the section as JSON.")
def restart(**opts: Any) -> int:
    """Simulated check that a KV store outliving the pod serves the same deployment after a
    restart (reused tokens, output identical to cold) and serves nothing after an upgrade to
    an incompatible identity. Exit 1 when a check fails."""
    import json

    from kvbudget.audit.restart import run_restart_upgrade
    from kvbudget.audit.reuse import ReuseConfig

    if opts["seed"] < 0:
        raise ConfigError(f"--seed: must be >= 0, got {opts['seed']}", field="seed")
    cfg = ReuseConfig(
        num_prompts=opts["num_prompts"],
        prompt_tokens=opts["prompt_tokens"],
        max_tokens=opts["max_tokens"],
        logprobs=0,
        seed=opts["seed"],
    )
    section = run_async(
        run_restart_upgrade(
            cfg, identity=opts["identity"], upgraded_identity=opts["upgraded_identity"]
        )
    )
    if opts["as_json"]:
        click.echo(json.dumps(section, indent=2))
    else:
        click.echo(
            f"audit restart ({section['figures']}): {section['verdict']} — {section['reason']}"
        )
        for check in section["checks"]:
            click.echo(
                f"  {check['phase']:<8} {check['identity']:<12} cached {check['cached_tokens']:>6}"
                f"  output {check['output_vs_cold']:<10} {check['verdict']}"
            )
    return 0 if section["verdict"] == "pass" else 1
