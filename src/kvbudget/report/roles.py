"""The report's "Who does what" section: the seed's four questions and the four kinds of cache.

Rows from :mod:`kvbudget.accept.roles`, for the plan's declared lock and target; the cache-kind
rows carry this run's own figures (highest peak KV usage and the range of prefix-hit rates over
the cells), labelled with the run's basis.
"""

from __future__ import annotations

from html import escape
from typing import Any

from kvbudget.accept.plan_lock import ObjectLock
from kvbudget.accept.result import AcceptResult
from kvbudget.accept.roles import cache_kinds, who_does_what

INTRO = (
    "The second seed's four questions, answered for the declared deployment (from the plan's "
    "lock and target), and the four kinds of cache kept in separate rows: a hit rate shown "
    "here is never an application-cache or billing effect."
)


def _rows(doc: AcceptResult) -> tuple[list[tuple[str, str, str]], list[tuple[str, ...]]]:
    lock = ObjectLock.model_validate(doc.plan.get("lock", {}))
    kind = str(doc.target.get("kind", "sim"))
    num_replicas = int(doc.plan.get("target", {}).get("replicas", 1) or 1)
    roles = [(r.question, r.who, r.how) for r in who_does_what(lock, kind, num_replicas)]
    peaks = [c.peak_kv_usage for c in doc.cells if c.peak_kv_usage is not None]
    hits = [c.prefix_hit_rate_tokens for c in doc.cells if c.prefix_hit_rate_tokens is not None]
    summary: dict[str, Any] = {}
    if peaks:
        summary["kv_usage_peak"] = max(peaks)
    if hits:
        summary["prefix_hit_rate_tokens"] = max(hits)
    basis = str(doc.target.get("label") or doc.target.get("source") or "this run")
    kinds: list[tuple[str, ...]] = [
        (
            r.kind,
            r.where,
            r.identity_key,
            r.observed.replace("of prompt tokens", "of prompt tokens (best cell)"),
        )
        for r in cache_kinds(summary, basis)
    ]
    return roles, kinds


def roles_markdown(doc: AcceptResult) -> list[str]:
    if not isinstance(doc.plan.get("lock"), dict):
        return []

    def md(text: str) -> str:
        return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")

    roles, kinds = _rows(doc)
    out = ["", "## Who does what", "", INTRO, "", "| question | who | how |", "|---|---|---|"]
    out += [f"| {md(q)} | {md(w)} | {md(h)} |" for q, w, h in roles]
    out += ["", "| kind of cache | where | identity key | in this run |", "|---|---|---|---|"]
    out += ["| " + " | ".join(md(c) for c in row) + " |" for row in kinds]
    return out


def roles_html(doc: AcceptResult) -> str:
    if not isinstance(doc.plan.get("lock"), dict):
        return ""
    roles, kinds = _rows(doc)

    def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
        th = "".join(f"<th>{escape(c)}</th>" for c in head)
        body = "".join(
            "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows
        )
        return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"

    return (
        f"<h2>Who does what</h2><p>{escape(INTRO)}</p>"
        + table(("question", "who", "how"), list(roles))
        + table(("kind of cache", "where", "identity key", "in this run"), kinds)
    )
