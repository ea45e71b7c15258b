"""The report's "Deletion and lifecycle" section: renders
:attr:`kvbudget.accept.result.AcceptResult.lifecycle` (rows built in :mod:`kvbudget.accept.lifecycle`)."""

from __future__ import annotations

from html import escape

from kvbudget.accept.result import AcceptResult

COLUMNS = (
    "layer",
    "owner",
    "trigger event",
    "longest retention",
    "how verified",
    "status",
    "evidence",
)
INTRO = (
    "Each storage layer has its own deletion lifetime; freed GPU blocks never prove that a "
    "persistent layer was deleted. Status: verified (evidence in this run), failed, declared "
    "(in the plan, not verifiable here), not_declared."
)


def _cells(doc: AcceptResult) -> list[tuple[str, ...]]:
    return [
        (r.layer, r.owner, r.trigger, r.retention, r.verification, r.status, r.evidence)
        for r in doc.lifecycle
    ]


def lifecycle_markdown(doc: AcceptResult) -> list[str]:
    def md(text: str) -> str:
        return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")

    out = ["", "## Deletion and lifecycle", "", INTRO, ""]
    out.append("| " + " | ".join(COLUMNS) + " |")
    out.append("|" + "---|" * len(COLUMNS))
    out += ["| " + " | ".join(md(c) for c in row) + " |" for row in _cells(doc)]
    return out


def lifecycle_html(doc: AcceptResult) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in _cells(doc)
    )
    return (
        f"<h2>Deletion and lifecycle</h2><p>{escape(INTRO)}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )
