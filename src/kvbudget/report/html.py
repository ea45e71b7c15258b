"""The self-contained HTML acceptance report (``OUT/report.html``).

No script, no external request (a Content-Security-Policy forbids both); charts are inline SVG;
every piece of text from the plan, the target or the model is escaped with ``html.escape``.
"""

from __future__ import annotations

from html import escape

from kvbudget.accept.result import AcceptResult
from kvbudget.report.charts import CHARTS, render_charts
from kvbudget.report.lifecycle import lifecycle_html
from kvbudget.report.markdown import (
    CELL_HEADER,
    PCT_HEADER,
    PRED_HEADER,
    REP_HEADER,
    TIER_HEADER,
    cell_row,
    delta_header,
    delta_rows,
    pairs_text,
    percentile_rows,
    prediction_rows,
    repetition_rows,
    tier_row_text,
    tier_rows,
    value_text,
)
from kvbudget.report.roles import roles_html
from kvbudget.units import format_bytes

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#212121}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;
font-size:13px;text-align:left}.pass{background:#c8e6c9}.fail{background:#ffcdd2}
.untested{background:#eeeeee}.not_comparable{background:#fff9c4}.banner{padding:.6em 1em;
border-radius:6px;font-size:20px;font-weight:bold}figure{margin:1em 0}
.note{background:#fff3e0;padding:.5em 1em;border-left:4px solid #ef6c00}
pre{white-space:pre-wrap;background:#f5f5f5;padding:.5em}.basis{font-size:15px;font-weight:normal}
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


def render_html(doc: AcceptResult) -> str:
    charts = render_charts(doc)
    parts: list[str] = []
    add = parts.append
    add("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>")
    add(f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">")
    add(f"<title>kvbudget acceptance: {_e(doc.name)}</title><style>{CSS}</style></head><body>")
    add(f"<h1>Capacity acceptance: {_e(doc.name)}</h1>")
    add(
        f"<div class='banner {_e(doc.verdict)}' id='overall-verdict'>Overall verdict: "
        f"{_e(doc.verdict.upper())} <span class='basis'>— {_e(doc.provenance.label())}</span>"
        "</div>"
    )
    add(_list(doc.verdict_reasons))
    add(
        f"<p>Figures: <b>{_e(doc.provenance.label())}</b>; capacity figures are <i>computed</i>. "
        f"Seed {_e(doc.seed)}; kvbudget {_e(doc.tool_version)}; created {_e(doc.created)}.</p>"
    )
    if doc.target.get("synthetic_text"):
        add(
            "<p class='note'>Simulated target: output text is synthetic, so every quality "
            "checkpoint is <b>untested</b> (never pass). Nothing here is a measurement.</p>"
        )
    add("<h2 id='blocking'>Blocking list (lock fields not confirmed)</h2>")
    add(_list(doc.blocking or ["none"]))
    add("<h2>Verdicts (nine cells)</h2>")
    add(_table(CELL_HEADER, [cell_row(c) for c in doc.cells], [c.verdict for c in doc.cells]))
    trows, basis = tier_rows(doc)
    if trows:
        add(f"<h3>KV offload tier per cell ({_e(basis)})</h3>")
        add(_table(TIER_HEADER, trows))
    for key, (title, _) in CHARTS.items():
        if key in ("heatmap", "ttft", "tpot", "timeline"):
            add(
                f"<figure class='chart' data-chart='{key}'><figcaption>{_e(title)}</figcaption>"
                f"{charts[key]}</figure>"
            )
    if doc.rows:
        add("<h3>Capacity per input tier (latency and capacity checks; quality apart)</h3>")
        add(_list([f"{r['input_tier']}: {tier_row_text(r)}" for r in doc.rows]))
    add("<h3>Reasons and checks</h3>")
    for cell in doc.cells:
        add(
            f"<details><summary>{_e(cell.cell_id)}: {_e(cell.verdict)} — "
            f"{_e('; '.join(cell.reasons))}</summary>"
        )
        add(
            _table(
                ["check", "verdict", "reason"],
                [[c.name, c.verdict, c.reason] for c in cell.checks],
                [c.verdict for c in cell.checks],
            )
        )
        if cell.summaries:
            add(_table(PCT_HEADER, percentile_rows(cell)))
        if len(cell.per_repetition) > 1:
            add(_table(REP_HEADER, repetition_rows(cell)))
        if cell.output_excerpts:
            add("<p>Model output excerpts (escaped):</p>")
            for text in cell.output_excerpts:
                add(f"<pre class='model-output'>{_e(text)}</pre>")
        add("</details>")
    pred = prediction_rows(doc)
    if pred:
        add("<h2 id='prediction'>Predicted (calibrated simulator) vs measured</h2>")
        add(_table(PRED_HEADER, pred))
    add("<h2 id='load'>Load</h2>")
    load = doc.plan.get("load", {})
    tiers = load.get("tiers", {})
    add(
        _table(
            ["input tier", "prompt tokens", "output tokens", "source"],
            [
                [
                    n,
                    f"{t['min_tokens']}-{t['max_tokens']}",
                    t["output_tokens"],
                    str(t["source"]).replace("_", " ")
                    + (f" ({t['data_ref']})" if t.get("data_ref") else ""),
                ]
                for n, t in tiers.items()
            ],
        )
    )
    conc = load.get("concurrency", {})
    add(
        _table(
            ["concurrency tier", "in flight", "arrival", "duration (s)", "source"],
            [
                [
                    n,
                    t["concurrency"],
                    t["arrival"] + (f" {t['rate_per_s']}/s" if t.get("rate_per_s") else ""),
                    t["duration_s"],
                    str(t["source"]).replace("_", " "),
                ]
                for n, t in conc.items()
            ],
        )
    )
    add(
        f"<p>Repetitions {_e(load.get('repetitions'))}; template {_e(load.get('template_version'))}; "
        f"warm-up {_e(pairs_text(doc.warmup))}; idle baseline {_e(pairs_text(doc.baseline))}.</p>"
    )
    samples = load.get("samples") or []
    if samples:
        add(
            _table(
                ["sample tier", "sha256", "prompt tokens", "template"],
                [
                    [x["tier"], x["sha256"], x["prompt_tokens"], x["template_version"]]
                    for x in samples
                ],
            )
        )
    add("<h2>Stop conditions (declared before the run)</h2>")
    add(
        _table(
            ["condition", "declared", "status", "cells", "detail"],
            [
                [s.name, s.declared, s.status, ", ".join(s.cells), s.detail]
                for s in doc.stop_conditions
            ],
        )
    )
    add("<h2>Object lock</h2>")
    add(
        _table(
            ["field", "value", "status", "source", "note"],
            [
                [e.field, value_text(e.value), e.status, e.source or "", e.note or ""]
                for e in doc.lock
            ],
        )
    )
    add("<h2>Capacity ledger and the three budgets</h2>")
    add(
        f"<figure class='chart' data-chart='budgets'><figcaption>{_e(CHARTS['budgets'][0])}"
        f"</figcaption>{charts['budgets']}</figure>"
    )
    add(
        _table(
            ["budget", "size", "kind", "what"],
            [[b.name, format_bytes(b.bytes or 0), b.kind, b.what] for b in doc.ledger.budgets],
        )
    )
    add(
        _table(
            ["input", "value", "source"],
            [[i.name, value_text(i.value), i.source] for i in doc.ledger.entries],
        )
    )
    add(_list([f"warning: {w}" for w in doc.ledger.warnings]) if doc.ledger.warnings else "")
    if doc.pool:
        add("<h2>KV pool: planned (computed) vs engine-reported (measured)</h2>")
        add(
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
    add("<h2>Single-factor comparisons</h2>")
    add(
        f"<figure class='chart' data-chart='ab'><figcaption>{_e(CHARTS['ab'][0])}</figcaption>"
        f"{charts['ab']}</figure>"
    )
    for c in doc.comparisons:
        add(f"<h3>{_e(c.name)} ({_e(c.factor)}): {_e(c.verdict)}</h3>")
        add(_list(c.reasons + c.differences + [f"{k}: {v}" for k, v in c.conclusions.items()]))
        if c.deltas:
            add(_table(delta_header(c.percentile), delta_rows(c)))
    if doc.audits:
        add("<h2 id='audits'>Audits</h2>")
        items = []
        for key in ("isolation", "reuse"):
            summary = doc.audits.get(key)
            if isinstance(summary, dict):
                basis = f" ({summary['basis']})" if summary.get("basis") else ""
                items.append(f"{key}{basis}: {summary.get('verdict')} — {summary.get('reason')}")
        if "note" in doc.audits:
            items.append(str(doc.audits["note"]))
        add(_list(items))
        for key in ("isolation_markdown", "reuse_markdown"):
            detail = doc.audits.get(key)
            if isinstance(detail, str):
                add(
                    f"<details><summary>{_e(key.split('_')[0])} audit details</summary>"
                    f"<pre>{_e(detail)}</pre></details>"
                )
    add("<h2>Anomaly hints</h2>")
    add(
        _list(
            [f"{a.code}: {a.title}. Evidence: {a.evidence}. {a.advice}" for a in doc.anomalies]
            or ["none raised (each needs its evidence)"]
        )
    )
    add("<h2>Rollback</h2>" + _list(doc.rollback, ordered=True))
    add("<h2>Canary</h2>" + _list(doc.canary, ordered=True))
    add(lifecycle_html(doc))
    add(roles_html(doc))
    add("</body></html>")
    return "\n".join(parts)
