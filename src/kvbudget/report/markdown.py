"""The Markdown acceptance report (``OUT/report.md``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kvbudget.accept.result import AcceptResult, CellResult, ComparisonResult
from kvbudget.report.cell_tables import DETAIL_HEADER, detail_rows
from kvbudget.report.lifecycle import lifecycle_markdown
from kvbudget.report.roles import roles_markdown
from kvbudget.report.summary import (
    basis_text,
    capacity_sentences,
    peak_throughput,
    tier_load_text,
)
from kvbudget.units import format_bytes


def _fmt(value: float | None, scale: float = 1.0, unit: str = "s") -> str:
    if value is None:
        return "—"
    return f"{value * scale:.3g} {unit}"


#: a ``<`` that could open raw HTML or an autolink in CommonMark (tag name, ``/``, ``!``, ``?``)
_HTML_OPEN = re.compile(r"<(?=[A-Za-z/!?])")


def _md(text: object) -> str:
    """Neutralise Markdown/HTML in free text: escape pipes, backslashes and every ``<`` that
    could open HTML (so ``<script>`` stays text), join lines. Comparisons such as ``<= 2`` stay
    readable in the raw file."""
    s = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("&", "&amp;")
    s = _HTML_OPEN.sub("&lt;", s)
    return " ".join(s.split())


#: seconds below this are float residue of subtracting equal times (sim clock), shown as 0
_RESIDUE_S = 1e-9


def _num(value: float) -> str:
    """A figure in seconds to 4 significant digits; float residue (``7.1e-15``) shows as 0."""
    return "0" if abs(value) < _RESIDUE_S else f"{value:.4g}"


def pairs_text(values: dict[str, Any]) -> str:
    """``requests 8, scored no, duration_s 0.314`` from a flat mapping (no Python repr)."""
    if not values:
        return "not recorded"
    parts = []
    for key, value in values.items():
        if isinstance(value, bool):
            shown = "yes" if value else "no"
        elif isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
            shown = str(int(value))  # a count sent as a float (27578.0) reads as a count
        elif isinstance(value, float):
            shown = f"{value:.4g}"
        else:
            shown = str(value)
        parts.append(f"{key} {shown}")
    return ", ".join(parts)


def value_text(value: object) -> str:
    """A lock or ledger value as a reader writes it: ``—`` for none, lists and mappings without
    Python quoting (``--a --b``, ``enabled: true, salt: per-tenant``)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return " ".join(value_text(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {value_text(v)}" for k, v in value.items())
    return str(value)


def split_verdicts(cell: CellResult) -> tuple[str, str]:
    """(latency/capacity verdict, quality verdict) of a cell, from its checks."""
    perf = [c.verdict for c in cell.checks if not c.is_quality]
    qual = [c.verdict for c in cell.checks if c.is_quality]

    def worst(vs: Sequence[str]) -> str:
        order = {"pass": 0, "untested": 1, "not_comparable": 2, "fail": 3}
        return max(vs, key=lambda v: order[v]) if vs else "—"

    return worst(perf), worst(qual)


#: the percentiles a report shows per cell when its document does not say (older reports)
DEFAULT_SHOWN = (50.0, 90.0, 95.0, 99.0)


def shown_percentiles(percentiles: Sequence[float] = DEFAULT_SHOWN) -> list[str]:
    """The percentile keys of the per-cell table: the median (p50) first, then the others of
    ``percentiles`` (the document's ``metric_percentiles``: ``--metric-percentiles``)."""
    return ["p50", *(f"p{q:g}" for q in sorted(set(percentiles)) if q != 50.0)]


def percentile_rows(
    cell: CellResult, percentiles: Sequence[float] = DEFAULT_SHOWN
) -> list[list[str]]:
    """One row per metric: n, the mean, then the median and each other percentile of
    ``percentiles`` as ``value [low, high]`` (seconds); ``—`` where the data does not exist."""
    rows = []
    for metric, summary in cell.summaries.items():
        row = [metric, str(summary.n), "—" if summary.mean is None else _num(summary.mean)]
        for key in shown_percentiles(percentiles):
            est = summary.percentiles.get(key)
            if est is None:
                row.append("—")
            elif est.low is None or est.high is None:
                row.append(_num(est.value))
            else:
                row.append(f"{_num(est.value)} [{_num(est.low)}, {_num(est.high)}]")
        row.append("; ".join(summary.warnings))
        rows.append(row)
    return rows


def pct_header(percentiles: Sequence[float] = DEFAULT_SHOWN) -> list[str]:
    """The per-cell percentile table's header for ``percentiles``."""
    return [
        "metric (s)",
        "n",
        "mean",
        "median (p50) [95% CI]",
        *shown_percentiles(percentiles)[1:],
        "small-sample warnings",
    ]


REP_HEADER = ["repetition", "n", "TTFT p50", "TTFT p95", "TPOT p50", "TPOT p95"]


def repetition_rows(cell: CellResult) -> list[list[str]]:
    """Each repetition's own percentiles (seconds), to show how repeatable the cell is."""
    rows = []
    for i, rep in enumerate(cell.per_repetition):
        row = [str(i), f"{rep.get('n') or 0:.0f}"]
        for key in ("ttft_p50_s", "ttft_p95_s", "tpot_p50_s", "tpot_p95_s"):
            value = rep.get(key)
            row.append("—" if value is None else _num(value))
        rows.append(row)
    return rows


def delta_header(percentile: float) -> list[str]:
    return [
        "cell",
        "metric",
        "n (base/variant)",
        f"baseline p{percentile:g}",
        "variant",
        "diff [95% CI]",
        "change",
        "HL shift",
        "p (Holm)",
    ]


def delta_rows(comparison: ComparisonResult) -> list[list[str]]:
    """One row per (cell, metric) of a single-factor comparison (seconds; change in %)."""
    rows = []
    for d in comparison.deltas:
        change = "—"
        if d.pct_diff is not None and d.baseline_pct:
            change = f"{100.0 * d.pct_diff / d.baseline_pct:+.1f} %"
        rows.append(
            [
                d.cell_id,
                d.metric,
                f"{d.n_baseline}/{d.n_variant}",
                _fmt(d.baseline_pct),
                _fmt(d.variant_pct),
                f"{_fmt(d.pct_diff)} [{_fmt(d.pct_diff_low)}, {_fmt(d.pct_diff_high)}]",
                change,
                _fmt(d.hl_shift),
                "—" if d.p_holm is None else f"{d.p_holm:.3g}",
            ]
        )
    return rows


PRED_HEADER = ["cell", "quantity", "predicted", "measured", "relative error"]


def prediction_rows(doc: AcceptResult) -> list[list[str]]:
    """Predicted (calibrated simulator) vs measured, per cell and quantity."""
    rows = []
    for cell in doc.cells:
        for key, q in (cell.prediction.get("quantities") or {}).items():
            err = q.get("relative_error")
            rows.append(
                [
                    cell.cell_id,
                    key,
                    "—" if q.get("predicted") is None else f"{q['predicted']:.4g}",
                    "—" if q.get("measured") is None else f"{q['measured']:.4g}",
                    "—" if err is None else f"{err:+.1%}",
                ]
            )
    return rows


def cell_row(cell: CellResult) -> list[str]:
    perf, qual = split_verdicts(cell)
    ttft = cell.summaries.get("ttft_s")
    tpot = cell.summaries.get("tpot_s")
    t = cell.throughput
    return [
        cell.cell_id,
        cell.verdict.upper(),
        perf,
        qual,
        f"{t['requests_per_s']:.3g}" if "requests_per_s" in t else "—",
        f"{t['output_tokens_per_s']:.4g}" if "output_tokens_per_s" in t else "—",
        f"{t['goodput_requests_per_s']:.3g}" if "goodput_requests_per_s" in t else "—",
        _fmt(ttft.pct("p95") if ttft else None),
        _fmt(tpot.pct("p95") if tpot else None, 1000.0, "ms"),
        str(cell.num_requests),
        _fmt(cell.peak_kv_usage, 100.0, "%"),
        str(cell.num_preemptions),
    ]


TIER_HEADER = [
    "cell",
    "host peak / capacity",
    "host peak",
    "bytes to tiers",
    "bytes reloaded",
    "link busy",
    "reload wait p95",
    "reloads",
]


def tier_rows(doc: AcceptResult) -> tuple[list[list[str]], str]:
    """KV offload tier figures per cell, and their basis ('' when no cell has a tier)."""
    rows: list[list[str]] = []
    basis = ""
    for cell in doc.cells:
        t = cell.kv_tier
        if not t:
            continue
        basis = str(t.get("basis", ""))
        peak = t.get("host_peak_bytes")
        cap = t.get("host_capacity_bytes")
        rows.append(
            [
                cell.cell_id,
                _fmt(t.get("host_peak_fraction"), 100.0, "%"),
                f"{format_bytes(int(peak))} of {format_bytes(int(cap))}"
                if peak is not None and cap is not None
                else "—",
                format_bytes(int(t.get("bytes_written", 0))),
                format_bytes(int(t.get("bytes_read", 0))),
                _fmt(t.get("link_busy_fraction"), 100.0, "%"),
                _fmt(t.get("reload_wait_p95_s")),
                str(int(t.get("num_reloads", 0))),
            ]
        )
    return rows, basis


CELL_HEADER = [
    "cell",
    "verdict",
    "latency/capacity",
    "quality",
    "achieved req/s",
    "output tok/s",
    "goodput req/s",
    "TTFT p95",
    "TPOT p95",
    "requests",
    "peak KV",
    "preempt",
]


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
