"""The report's "Who does what" section: the seed's four questions and the four kinds of cache.

Renders :attr:`kvbudget.accept.result.AcceptResult.roles` (rows built in accept for the plan's
declared lock and target; the cache-kind rows carry this run's own figures: highest peak KV
usage and the best prefix-hit rate over the cells, labelled with the run's basis). Nothing is
rendered when the plan carries no lock.
"""

from __future__ import annotations

from html import escape

from kvbudget.accept.result import AcceptResult
from kvbudget.accept.result_views import RolesView

INTRO = (
    "The second seed's four questions, answered for the declared deployment (from the plan's "
    "lock and target), and the four kinds of cache kept in separate rows: a hit rate shown "
    "here is never an application-cache or billing effect."
)


def _rows(view: RolesView) -> tuple[list[tuple[str, str, str]], list[tuple[str, ...]]]:
    roles = [(r.question, r.who, r.how) for r in view.questions]
    kinds: list[tuple[str, ...]] = [
        (
            r.kind,
            r.where,
            r.identity_key,
            r.observed.replace("of prompt tokens", "of prompt tokens (best cell)"),
        )
        for r in view.cache_kinds
    ]
    return roles, kinds


def roles_markdown(doc: AcceptResult) -> list[str]:
    view = doc.roles
    if view is None:
        return []

    def md(text: str) -> str:
        return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")

    roles, kinds = _rows(view)
    out = ["", "## Who does what", "", INTRO, "", "| question | who | how |", "|---|---|---|"]
    out += [f"| {md(q)} | {md(w)} | {md(h)} |" for q, w, h in roles]
    out += ["", "| kind of cache | where | identity key | in this run |", "|---|---|---|---|"]
    out += ["| " + " | ".join(md(c) for c in row) + " |" for row in kinds]
    return out


def roles_html(doc: AcceptResult) -> str:
    view = doc.roles
    if view is None:
        return ""
    roles, kinds = _rows(view)

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
