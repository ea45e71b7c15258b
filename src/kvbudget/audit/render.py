"""Markdown sections of the audit results (standalone files and accept report sections).

Only numbers, hashes and verdicts appear: never prompt text, salts or API keys. Table cells
are escaped (``|`` and newlines) so a server-provided string cannot break the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvbudget.audit.isolation import IsolationResult
    from kvbudget.audit.reuse import ReuseResult


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _row(*cells: object) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _target(target: dict[str, object], label: str) -> str:
    parts = [f"{k} {_cell(target.get(k))}" for k in ("kind", "engine", "engine_version", "model")]
    url = target.get("base_url")
    if url:
        parts.append(f"base_url {_cell(url)}")
    return f"Target: {', '.join(parts)}. Figures are {label}."


def isolation_markdown(res: IsolationResult, level: int = 2) -> str:
    h = "#" * level
    pc = res.positive_control
    d = res.declared
    lines = [
        f"{h} Isolation audit: `{res.verdict}`",
        "",
        res.reason + ".",
        "",
        _target(res.target, res.provenance.label()),
        "",
        f"{h}# Declared before the run",
        "",
        f"- tests: {'; '.join(str(t) for t in d.get('tests', []))}",
        f"- {d.get('multiplicity')}; alpha {res.alpha:g}, power {d.get('power')}",
        f"- {res.trials} trials per arm (hit, control, positive control), seeded order "
        f"(seed {res.seed}); prefix {res.prefix_tokens} + suffix {res.suffix_tokens} tokens; "
        f"salt mode `{res.salt_mode}`",
        f"- minimum detectable effect: AUC {res.mde_auc:.3f}",
        "",
        f"{h}# Results",
        "",
        _row("quantity", "value"),
        _row("---", "---"),
        _row("verdict", res.verdict),
        _row("cross-tenant cached tokens (excess over control)", res.cross_tenant_cached_tokens),
        _row("hit-arm attacker cached tokens (raw sum)", res.cross_tenant_cached_tokens_raw),
        _row("control-arm cached tokens (max)", res.control_cached_tokens_max),
        _row("cross-tenant hit-counter tokens (excess)", res.cross_tenant_hit_counter_tokens),
        _row("Mann-Whitney p (Holm)", res.p_values.get("mann_whitney_holm")),
        _row("KS p (Holm)", res.p_values.get("ks_holm")),
        _row("AUC (hit faster than control)", res.auc),
        _row("MDE AUC", res.mde_auc),
        _row(
            "positive control",
            f"{'passed' if pc.passed else 'FAILED'} (evidence {pc.evidence}, "
            f"{pc.num_trials_with_reuse if pc.num_trials_with_reuse is not None else '?'}"
            f"/{pc.num_trials} trials with reuse, AUC {_cell(pc.auc)})",
        ),
        _row("failed trials", res.num_errors),
        "",
    ]
    return "\n".join(lines)


def reuse_markdown(res: ReuseResult, level: int = 2) -> str:
    h = "#" * level
    lines = [
        f"{h} Reuse-correctness audit: `{res.verdict}` ({res.status})",
        "",
        res.reason + ".",
        "",
        _target(res.target, res.provenance.label()),
        "",
        f"- greedy decoding, {res.max_tokens} output tokens, top-{res.logprobs} logprobs "
        f"requested; tokens compared as {res.token_basis}",
        f"- {res.tolerance_rule}",
        f"- prefix-cache reset available: {'yes' if res.reset_available else 'no'}; reuse shown "
        f"on {res.num_reuse_proven} of {res.num_prompts} prompt(s); diverged: {res.num_diverged}",
        "",
        _row(
            "prompt (sha256)",
            "prompt tokens",
            "hot cached",
            "hot vs cold",
            "after reset",
            "vs cold",
        ),
        _row("---", "---:", "---:", "---", "---", "---"),
    ]
    for p in res.prompts:
        lines.append(
            _row(
                p.prompt_sha256[:12],
                p.cold.prompt_tokens if p.cold.prompt_tokens is not None else p.prompt_tokens,
                p.hot.cached_tokens,
                p.hot_vs_cold.verdict,
                p.after_reset_path,
                p.after_reset_vs_cold.verdict,
            )
        )
    lines.append("")
    return "\n".join(lines)
