"""The Markdown acceptance report (``OUT/report.md``)."""

from __future__ import annotations

import re

from kvbudget.accept.result import AcceptResult
from kvbudget.report.cell_tables import DETAIL_HEADER, detail_rows
from kvbudget.report.lifecycle import lifecycle_markdown
from kvbudget.report.roles import roles_markdown
from kvbudget.report.summary import (
    basis_text,
    capacity_sentences,
    peak_throughput,
    tier_load_text,
)
from kvbudget.report.table_rows import (
    CELL_HEADER,
    PRED_HEADER,
    REP_HEADER,
    TIER_HEADER,
    cell_row,
    delta_header,
    delta_rows,
    pairs_text,
    pct_header,
    percentile_rows,
    prediction_rows,
    repetition_rows,
    tier_rows,
    value_text,
)
from kvbudget.units import format_bytes

#: a ``<`` that could open raw HTML or an autolink in CommonMark (tag name, ``/``, ``!``, ``?``)
_HTML_OPEN = re.compile(r"<(?=[A-Za-z/!?])")


def _md(text: object) -> str:
    """Neutralise Markdown/HTML in free text: escape pipes, backslashes and every ``<`` that
    could open HTML (so ``<script>`` stays text), join lines. Comparisons such as ``<= 2`` stay
    readable in the raw file."""
    s = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("&", "&amp;")
    s = _HTML_OPEN.sub("&lt;", s)
    return " ".join(s.split())


def render_markdown(doc: AcceptResult) -> str:
    out: list[str] = []
    add = out.append
    add(f"# Capacity acceptance: {_md(doc.name)}\n")
    add(f"**Overall verdict: {doc.verdict.upper()}** — {_md(basis_text(doc))}\n")
    add("## Capacity per input tier\n")
    for sentence in capacity_sentences(doc):
        add(f"- {_md(sentence)}")
    add(f"\n**{_md(peak_throughput(doc))}**\n")
    add("Why this verdict:\n")
    for reason in doc.verdict_reasons:
        add(f"- {_md(reason)}")
    add("")
    add(
        f"Figures: **{_md(doc.provenance.label())}**. Capacity figures are *computed*. "
        f"Seed {doc.seed}; kvbudget {doc.tool_version}; plan sha256 `{doc.plan_sha256[:16]}`.\n"
    )
    if doc.target_view.synthetic_text:
        add(
            "> Simulated target: output text is synthetic, so every quality checkpoint is "
            "**untested** (never pass). Nothing here is a measurement.\n"
        )
    if doc.plan_warnings:
        add("Plan warnings (before the run):\n")
        for w in doc.plan_warnings:
            add(f"- warning: {_md(w)}")
        add("")
    add(f"## Verdicts ({len(doc.cells)} cells)\n")
    add("| " + " | ".join(CELL_HEADER) + " |")
    add("|" + "---|" * len(CELL_HEADER))
    for cell in doc.cells:
        add("| " + " | ".join(_md(x) for x in cell_row(cell)) + " |")
    for cell in doc.cells:
        for note in cell.notes:
            add(f"\n- {cell.cell_id}: {_md(note)}")
    if doc.blocking:
        add(
            f"\n<details><summary>Blocking list: {len(doc.blocking)} lock field(s) not "
            "confirmed</summary>\n"
        )
        for item in doc.blocking:
            add(f"- {_md(item)}")
        add("\n</details>")
    else:
        add("\nLock: every field is confirmed or not applicable for this target (see below).")
    trows, basis = tier_rows(doc)
    if trows:
        add(f"\n### KV offload tier per cell ({_md(basis)})\n")
        add("| " + " | ".join(TIER_HEADER) + " |")
        add("|" + "---|" * len(TIER_HEADER))
        for row in trows:
            add("| " + " | ".join(_md(x) for x in row) + " |")
    add("\n### Reasons\n")
    for cell in doc.cells:
        add(f"- **{cell.cell_id}** ({cell.verdict}): " + "; ".join(_md(r) for r in cell.reasons))
    in_tier = [cell for cell in doc.cells if cell.prompt_tokens_in_tier]
    if in_tier:
        add("\n### Prompt lengths as the engine counted them, against the tier bounds\n")
        add("| cell | tier bounds | counted min–max | in bounds |\n|---|---|---|---|")
        for cell in in_tier:
            bounds = cell.prompt_tokens_in_tier
            add(
                f"| {cell.cell_id} | {bounds['min_tokens']}–{bounds['max_tokens']} | "
                f"{bounds['min_counted']}–{bounds['max_counted']} | "
                f"{bounds['num_in_bounds']}/{bounds['num_counted']}"
                f"{'' if bounds['within'] else ' **(outside)**'} |"
            )
    add("\n### Figures and percentiles per cell (bootstrap 95% CIs)\n")
    for cell in doc.cells:
        if not cell.summaries:
            continue
        add(f"**{cell.cell_id}** ({cell.kind}, {cell.repetitions} repetitions)\n")
        add("| " + " | ".join(DETAIL_HEADER) + " |\n|---|---|")
        for row in detail_rows(doc, cell):
            add("| " + " | ".join(_md(x) for x in row) + " |")
        add("")
        header = pct_header(doc.metric_percentiles)
        add("| " + " | ".join(header) + " |")
        add("|" + "---|" * len(header))
        for row in percentile_rows(cell, doc.metric_percentiles):
            add("| " + " | ".join(_md(x) for x in row) + " |")
        add("")
        if len(cell.per_repetition) > 1:
            add("| " + " | ".join(REP_HEADER) + " |")
            add("|" + "---|" * len(REP_HEADER))
            for row in repetition_rows(cell):
                add("| " + " | ".join(row) + " |")
            add("")
    pred = prediction_rows(doc)
    if pred:
        model = next(c.prediction.get("model") for c in doc.cells if c.prediction)
        add(f"\n### Predicted ({_md(model)}) vs measured\n")
        add("| " + " | ".join(PRED_HEADER) + " |")
        add("|" + "---|" * len(PRED_HEADER))
        for row in pred:
            add("| " + " | ".join(_md(x) for x in row) + " |")
    add("\n## Stop conditions (declared before the run)\n")
    add("| condition | declared | status | cells | detail |\n|---|---|---|---|---|")
    for s in doc.stop_conditions:
        add(
            f"| {_md(s.name)} | {_md(s.declared)} | {s.status} | {_md(', '.join(s.cells))} | "
            f"{_md(s.detail)} |"
        )
    add("\n## Object lock\n")
    add("| field | value | status | source / note |\n|---|---|---|---|")
    for e in doc.lock:
        add(
            f"| {_md(e.field)} | {_md(value_text(e.value))} | {e.status} | {_md(e.source or '')} "
            f"{_md(e.note or '')} |"
        )
    add("\n## Capacity ledger and budgets (computed)\n")
    add("| budget | bytes | what |\n|---|---|---|")
    for b in doc.ledger.budgets:
        add(f"| {b.name} | {format_bytes(b.bytes or 0)} | {_md(b.what)} |")
    add("\n| input | value | source | note |\n|---|---|---|---|")
    for entry in doc.ledger.entries:
        add(
            f"| {_md(entry.name)} | {_md(value_text(entry.value))} | {_md(entry.source)} | "
            f"{_md(entry.note or '')} |"
        )
    for w in doc.ledger.warnings:
        add(f"- warning: {_md(w)}")
    if doc.pool:
        add("\n## KV pool: planned (computed) vs engine-reported (measured)\n")
        add("| field | planned | engine-reported | match | engine source |\n|---|---|---|---|---|")
        for pool_row in doc.pool:
            match = {True: "yes", False: "**NO**", None: "—"}[pool_row["match"]]
            add(
                f"| {_md(pool_row['field'])} | {_md(value_text(pool_row['planned']))} | "
                f"{_md(value_text(pool_row['engine_reported']))} | {match} | "
                f"{_md(pool_row['source'] or '')} |"
            )
    add("\n## Load\n")
    plan = doc.plan_view
    for name, tier in plan.input_tiers.items():
        add(
            f"- input tier **{name}**: {tier.min_tokens}–{tier.max_tokens} prompt tokens, "
            f"{tier.output_tokens} output tokens — {_md(tier.source).replace('_', ' ')}"
        )
    for name, conc in plan.concurrency_tiers.items():
        add(
            f"- concurrency tier **{name}**: {_md(tier_load_text(conc))}, "
            f"{conc.duration_s} s — {_md(conc.source).replace('_', ' ')}"
        )
    add(
        f"- repetitions: {plan.repetitions}; warm-up: {_md(pairs_text(doc.warmup))}; "
        f"idle baseline: {_md(pairs_text(doc.baseline))}"
    )
    if doc.comparisons:
        add("\n## Single-factor comparisons\n")
        for c in doc.comparisons:
            add(f"### {_md(c.name)} ({c.factor}): {c.verdict}\n")
            for r in c.reasons + c.differences + [f"engine: {x}" for x in c.engine_changes]:
                add(f"- {_md(r)}")
            for key, text in c.conclusions.items():
                add(f"- {key}: {_md(text)}")
            if c.deltas:
                header = delta_header(c.percentile)
                add("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
                for row in delta_rows(c):
                    add("| " + " | ".join(_md(x) for x in row) + " |")
    if doc.audits.requested:
        add("\n## Audits\n")
        for key, summary in doc.audits.summaries():
            basis = f" ({_md(summary.basis)})" if summary.basis else ""
            add(f"- **{key}**{basis}: {_md(summary.verdict)} — {_md(summary.reason)}")
        if doc.audits.note is not None:
            add(f"- {_md(doc.audits.note)}")
        for key, detail in doc.audits.details():
            add("\n<details><summary>" + key + " audit details</summary>\n")
            add(detail.replace("<", "&lt;").replace(">", "&gt;"))
            add("\n</details>")
    add("\n## Anomaly hints\n")
    if not doc.anomalies:
        add("- none raised (each needs its evidence)")
    for a in doc.anomalies:
        add(f"- **{a.code}** — {_md(a.title)}. Evidence: {_md(a.evidence)}. {_md(a.advice)}")
    add("\n## Rollback\n")
    for step in doc.rollback:
        add(f"1. {_md(step)}")
    add("\n## Canary\n")
    for step in doc.canary:
        add(f"1. {_md(step)}")
    out.extend(lifecycle_markdown(doc))
    out.extend(roles_markdown(doc))  # none without the plan's lock (a hand-built document)
    add("")
    return "\n".join(out)
