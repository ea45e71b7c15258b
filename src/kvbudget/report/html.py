"""The self-contained HTML acceptance report (``OUT/report.html``).

No script, no external request (a Content-Security-Policy forbids both); charts are inline SVG;
every piece of text from the plan, the target or the model is escaped with ``html.escape``.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from kvbudget.accept.result import AcceptResult
from kvbudget.report.cell_tables import DETAIL_HEADER, detail_rows
from kvbudget.report.charts import CHARTS, render_charts
from kvbudget.report.lifecycle import lifecycle_html
from kvbudget.report.roles import roles_html
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

CSS = """
body{font-family:system-ui,sans-serif;margin:1em 1.5em;color:#212121}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;
font-size:13px;text-align:left}.pass{background:#c8e6c9}.fail{background:#ffcdd2}
.untested{background:#eeeeee}.not_comparable{background:#fff9c4}.banner{padding:.5em 1em;
border-radius:6px;font-size:22px;font-weight:bold;margin:.3em 0}figure{margin:1em 0;width:100%}
figure.chart svg{width:100%;height:auto}.note{background:#fff3e0;padding:.5em 1em;
border-left:4px solid #ef6c00}pre{white-space:pre-wrap;background:#f5f5f5;padding:.5em}
.basis{font-size:15px;font-weight:normal}#capacity li{font-size:16px;margin:.2em 0}
h1{font-size:22px;margin:.2em 0}.side{display:grid;grid-template-columns:1fr 1fr;gap:1em}
.side figure{margin:0}.side svg{width:100%;height:auto}
"""
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _table(header: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{_e(classes[i])}"' if classes else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _list(items: list[str], ordered: bool = False) -> str:
    tag = "ol" if ordered else "ul"
    return f"<{tag}>" + "".join(f"<li>{_e(i)}</li>" for i in items) + f"</{tag}>"


def _chart(key: str, charts: dict[str, str]) -> str:
    return (
        f"<figure class='chart' data-chart='{_e(key)}'><figcaption>{_e(CHARTS[key][0])}"
        f"</figcaption>{charts[key]}</figure>"
    )


Section = Callable[[AcceptResult, dict[str, str]], str]


def head_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    """The first screen: verdict, basis, capacity per input tier, throughput, why."""
    parts = [
        f"<h1>Capacity acceptance: {_e(doc.name)}</h1>",
        f"<div class='banner {_e(doc.verdict)}' id='overall-verdict'>Overall verdict: "
        f"{_e(doc.verdict.upper())} <span class='basis'>— {_e(basis_text(doc))}</span></div>",
        "<h2 id='capacity-heading'>Capacity per input tier</h2>",
        "<ul id='capacity'>" + "".join(f"<li>{_e(x)}</li>" for x in capacity_sentences(doc)),
        "</ul>",
        f"<p id='throughput'><b>{_e(peak_throughput(doc))}</b></p>",
        "<p>Why this verdict:</p>" + _list(doc.verdict_reasons),
        f"<p>Figures: <b>{_e(doc.provenance.label())}</b>; capacity figures are <i>computed</i>. "
        f"Seed {_e(doc.seed)}; kvbudget {_e(doc.tool_version)}; created {_e(doc.created)}.</p>",
    ]
    if doc.target_view.synthetic_text:
        parts.append(
            "<p class='note'>Simulated target: output text is synthetic, so every quality "
            "checkpoint is <b>untested</b> (never pass). Nothing here is a measurement.</p>"
        )
    if doc.plan_warnings:
        parts.append(
            "<div class='note' id='plan-warnings'>Plan warnings (before the run):"
            + _list(doc.plan_warnings)
            + "</div>"
        )
    return "\n".join(parts)


def cells_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    rows = [cell_row(c) for c in doc.cells]
    out = [
        f"<h2 id='cells'>Verdicts ({len(doc.cells)} cells)</h2>",
        _table(CELL_HEADER, rows, [c.verdict for c in doc.cells]),
    ]
    notes = [f"{c.cell_id}: {n}" for c in doc.cells for n in c.notes]
    if notes:
        out.append(_list(notes))
    trows, basis = tier_rows(doc)
    if trows:
        out.append(f"<h3>KV offload tier per cell ({_e(basis)})</h3>")
        out.append(_table(TIER_HEADER, trows))
    return "\n".join(out)


def blocking_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    if not doc.blocking:
        return (
            "<p id='blocking'>Lock: every field is confirmed or not applicable for this target "
            "(the object lock is listed below).</p>"
        )
    return (
        f"<details id='blocking'><summary>Blocking list: {len(doc.blocking)} lock field(s) not "
        f"confirmed</summary>{_list(doc.blocking)}</details>"
    )


def charts_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    keys = ("latency", "throughput", "timeline", "heatmap", "ttft", "tpot")
    return "<h2 id='charts'>Charts</h2>" + "".join(_chart(k, charts) for k in keys)


def details_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    out = ["<h2 id='details'>Per cell: checks and figures</h2>"]
    for cell in doc.cells:
        out.append(
            f"<details><summary>{_e(cell.cell_id)}: {_e(cell.verdict)} — "
            f"{_e('; '.join(cell.reasons))}</summary>"
        )
        out.append(
            _table(
                ["check", "verdict", "reason"],
                [[c.name, c.verdict, c.reason] for c in cell.checks],
                [c.verdict for c in cell.checks],
            )
        )
        out.append(_table(DETAIL_HEADER, detail_rows(doc, cell)))
        if cell.summaries:
            out.append(
                _table(
                    pct_header(doc.metric_percentiles),
                    percentile_rows(cell, doc.metric_percentiles),
                )
            )
        if len(cell.per_repetition) > 1:
            out.append(_table(REP_HEADER, repetition_rows(cell)))
        if cell.output_excerpts:
            out.append("<p>Model output excerpts (escaped):</p>")
            out.extend(f"<pre class='model-output'>{_e(t)}</pre>" for t in cell.output_excerpts)
        out.append("</details>")
    pred = prediction_rows(doc)
    if pred:
        out.append("<h2 id='prediction'>Predicted (calibrated simulator) vs measured</h2>")
        out.append(_table(PRED_HEADER, pred))
    return "\n".join(out)


def comparisons_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    out = ["<h2 id='comparisons'>Single-factor comparisons</h2>", _chart("ab", charts)]
    for c in doc.comparisons:
        out.append(f"<h3>{_e(c.name)} ({_e(c.factor)}): {_e(c.verdict)}</h3>")
        engine = [f"engine: {x}" for x in c.engine_changes]
        out.append(
            _list(
                c.reasons + c.differences + engine + [f"{k}: {v}" for k, v in c.conclusions.items()]
            )
        )
        if c.deltas:
            out.append(_table(delta_header(c.percentile), delta_rows(c)))
    return "\n".join(out)


def audits_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    if not doc.audits.requested:
        return ""
    out = ["<h2 id='audits'>Audits</h2>"]
    items = []
    for key, summary in doc.audits.summaries():
        basis = f" ({summary.basis})" if summary.basis else ""
        items.append(f"{key}{basis}: {summary.verdict} — {summary.reason}")
    if doc.audits.note is not None:
        items.append(doc.audits.note)
    out.append(_list(items))
    for key, detail in doc.audits.details():
        out.append(
            f"<details><summary>{_e(key)} audit details</summary><pre>{_e(detail)}</pre></details>"
        )
    return "\n".join(out)


def stops_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    return "<h2 id='stops'>Stop conditions (declared before the run)</h2>" + _table(
        ["condition", "declared", "status", "cells", "detail"],
        [[s.name, s.declared, s.status, ", ".join(s.cells), s.detail] for s in doc.stop_conditions],
    )


def load_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    plan = doc.plan_view
    out = ["<h2 id='load'>Load</h2>"]
    out.append(
        _table(
            ["input tier", "prompt tokens", "output tokens", "source"],
            [
                [
                    n,
                    f"{t.min_tokens}-{t.max_tokens}",
                    str(t.output_tokens),
                    t.source.replace("_", " ") + (f" ({t.data_ref})" if t.data_ref else ""),
                ]
                for n, t in plan.input_tiers.items()
            ],
        )
    )
    out.append(
        _table(
            ["concurrency tier", "load offered", "duration (s)", "source"],
            [
                [n, tier_load_text(t), str(t.duration_s), t.source.replace("_", " ")]
                for n, t in plan.concurrency_tiers.items()
            ],
        )
    )
    out.append(
        f"<p>Repetitions {_e(plan.repetitions)}; at most "
        f"{_e(plan.max_requests_per_cell)} requests per cell and repetition; template "
        f"{_e(plan.template_version)}; warm-up {_e(pairs_text(doc.warmup))}; idle "
        f"baseline {_e(pairs_text(doc.baseline))}.</p>"
    )
    samples = plan.samples
    if samples:
        out.append(
            _table(
                ["sample tier", "sha256", "prompt tokens", "template"],
                [
                    [str(x.tier), str(x.sha256), str(x.prompt_tokens), str(x.template_version)]
                    for x in samples
                ],
            )
        )
    return "\n".join(out)


def lock_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    return "<h2 id='lock'>Object lock</h2>" + _table(
        ["field", "value", "status", "source", "note"],
        [[e.field, value_text(e.value), e.status, e.source or "", e.note or ""] for e in doc.lock],
    )


def ledger_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    out = ["<h2 id='ledger'>Capacity ledger and the three budgets</h2>", _chart("budgets", charts)]
    out.append(
        _table(
            ["budget", "size", "kind", "what"],
            [[b.name, format_bytes(b.bytes or 0), b.kind, b.what] for b in doc.ledger.budgets],
        )
    )
    out.append(
        _table(
            ["input", "value", "source", "note"],
            [[i.name, value_text(i.value), i.source, i.note or ""] for i in doc.ledger.entries],
        )
    )
    if doc.ledger.warnings:
        out.append(_list([f"warning: {w}" for w in doc.ledger.warnings]))
    if doc.pool:
        out.append("<h2>KV pool: planned (computed) vs engine-reported (measured)</h2>")
        out.append(
            _table(
                ["field", "planned", "engine-reported", "match", "engine source"],
                [
                    [
                        r["field"],
                        value_text(r["planned"]),
                        value_text(r["engine_reported"]),
                        {True: "yes", False: "NO", None: "—"}[r["match"]],
                        r["source"] or "",
                    ]
                    for r in doc.pool
                ],
            )
        )
    return "\n".join(out)


def closing_section(doc: AcceptResult, charts: dict[str, str]) -> str:
    anomalies = [f"{a.code}: {a.title}. Evidence: {a.evidence}. {a.advice}" for a in doc.anomalies]
    return (
        "<h2 id='anomalies'>Anomaly hints</h2>"
        + _list(anomalies or ["none raised (each needs its evidence)"])
        + "<h2 id='rollback'>Rollback</h2>"
        + _list(doc.rollback, ordered=True)
        + "<h2 id='canary'>Canary</h2>"
        + _list(doc.canary, ordered=True)
    )


#: the report's sections in order; a new section is one function added here (it gets the
#: document and the rendered charts and returns escaped HTML)
SECTIONS: list[Section] = [
    head_section,
    cells_section,
    blocking_section,
    charts_section,
    details_section,
    comparisons_section,
    audits_section,
    stops_section,
    load_section,
    lock_section,
    ledger_section,
    closing_section,
    lambda doc, charts: lifecycle_html(doc),
    # "who does what": empty without the plan's lock (a hand-built document may carry none)
    lambda doc, charts: roles_html(doc),
]

SIDE_BY_SIDE: tuple[str, ...] = ("latency", "throughput", "timeline", "heatmap")


def side_by_side(doc: AcceptResult, variant: AcceptResult, charts: dict[str, str]) -> str:
    """``report --compare``: the two runs' charts in two columns (baseline left)."""
    other = render_charts(variant)
    out = [
        "<h2 id='side-by-side'>Baseline and variant side by side</h2>",
        f"<p>Left: baseline <b>{_e(doc.name)}</b> ({_e(doc.provenance.label())}). Right: "
        f"variant <b>{_e(variant.name)}</b> ({_e(variant.provenance.label())}), verdict "
        f"{_e(variant.verdict.upper())}.</p>",
    ]
    for key in SIDE_BY_SIDE:
        out.append(
            f"<div class='side' data-side='{_e(key)}'>"
            f"<figure class='chart-base'><figcaption>baseline: {_e(CHARTS[key][0])}</figcaption>"
            f"{charts[key]}</figure>"
            f"<figure class='chart-variant'><figcaption>variant: {_e(CHARTS[key][0])}"
            f"</figcaption>{other[key]}</figure></div>"
        )
    return "\n".join(out)


def render_html(doc: AcceptResult, *, variant: AcceptResult | None = None) -> str:
    charts = render_charts(doc)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>kvbudget acceptance: {_e(doc.name)}</title><style>{CSS}</style></head><body>",
    ]
    for section in SECTIONS:
        parts.append(section(doc, charts))
        if section is comparisons_section and variant is not None:
            parts.append(side_by_side(doc, variant, charts))
    parts.append("</body></html>")
    return "\n".join(parts)
