"""``kvbudget audit``: cross-tenant prefix-cache isolation and reused-KV correctness."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from kvbudget.cli.audit_inputs import load_salts, read_prompts
from kvbudget.cli.audit_output import emit_result, fail_if_all_failed, prepare_out, progress_printer
from kvbudget.cli.audit_target import check_sim_length, check_target, target_options, with_probe
from kvbudget.cli.main import run_async
from kvbudget.cli.vocab import COUNT, COUNT0, INPUT_TOKENS, OUTPUT_TOKENS
from kvbudget.errors import ConfigError


@click.group()
def audit() -> None:
    """Audit a prefix cache: cross-tenant isolation and correctness of reused KV.

    Both audits run against a real engine (--base-url, measured) or the embedded simulator
    (--target sim, simulated) and print Markdown, or JSON with --json; --out DIR writes both.
    """


@audit.command(
    "isolation", short_help="Cross-tenant prefix-cache isolation (timing + cached tokens)."
)
@target_options
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

    check_target(opts)
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
        user_salts=load_salts(opts["salt_file"]),
    )
    cfg.validate()
    check_sim_length(
        opts, cfg.prefix_tokens + cfg.suffix_tokens + 1, "--shared-prefix-tokens + --suffix-tokens"
    )
    if not 0 < cfg.power < 1:
        raise ConfigError(f"--power {cfg.power}: must lie in (0, 1), e.g. 0.8", field="power")
    prepare_out(opts, "audit-isolation")
    declared = declared_statistics(cfg)
    progress = progress_printer(not opts["as_json"] and sys.stderr.isatty())

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

    result = run_async(with_probe(opts, work))
    emit_result(result, opts, "audit-isolation")
    trials = result.trial_records
    fail_if_all_failed([(t.error, t.victim_ok and t.attacker_ok) for t in trials], result, "trials")
    return 1 if opts["strict"] and result.verdict != "no_leak_detected" else 0


@audit.command("reuse", short_help="Correctness of reused KV: cold vs hot vs after-reset output.")
@target_options
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

    check_target(opts)
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
    check_sim_length(opts, cfg.prompt_tokens + cfg.max_tokens, "--input-tokens + --output-tokens")
    prepare_out(opts, "audit-reuse")
    prompts = read_prompts(opts["prompts_file"]) if opts["prompts_file"] else None
    progress = progress_printer(not opts["as_json"] and sys.stderr.isatty())

    async def work(probe: Any) -> Any:
        return await run_reuse(probe, cfg, prompts=prompts, progress=progress)

    result = run_async(with_probe(opts, work))
    emit_result(result, opts, "audit-reuse")
    runs = [r for p in result.prompts for r in (p.cold, p.hot, p.after_reset) if r is not None]
    fail_if_all_failed([(r.error, r.ok) for r in runs], result, "requests")
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
