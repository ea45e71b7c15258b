"""A run whose requests failed: one line that says so, from the first errors.

``bench``, ``accept`` (http and serve targets), ``audit`` and ``calibrate`` call
:func:`failure_diagnosis` once their records are safely written; a non-None answer becomes a
:class:`~kvbudget.errors.RunFailedError` (exit status 4) so a run that measured nothing never
exits 0. The line names how many failed, the most common error (HTTP status or error kind),
the URL, the server's own message (an excerpt, never a secret: the client already redacts an
echoed API key) and the likely fix.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kvbudget.records import RequestRecord

_HINTS: dict[str, str] = {
    "404": "check --base-url (the server root or its /v1), --endpoint and --model",
    "401": "the server wants an API key: --api-key-env VAR",
    "403": "the server refused the key: check --api-key-env",
    "400": "the server refused the request body: see its message",
    "429": "the server is rate-limiting: lower the concurrency or the rate",
    "connect": "is the server up at that address?",
    "timeout": "raise --timeout or lower the load",
    "oom": "the engine ran out of memory: lower the concurrency or the lengths",
}


@dataclass(frozen=True)
class Failure:
    """What one failed request said (a record, or a bare outcome from a probe)."""

    error_kind: str | None
    http_status: int | None = None
    error_excerpt: str | None = None


def _label(f: Failure) -> str:
    if f.error_kind == "http_status" and f.http_status is not None:
        return f"HTTP {f.http_status}"
    return f.error_kind or "error"


def _hint(f: Failure) -> str:
    key = str(f.http_status) if f.error_kind == "http_status" else (f.error_kind or "")
    return _HINTS.get(key, "see the server's message")


def digest(failures: Iterable[Failure], num_total: int) -> dict[str, Any]:
    """What a diagnosis needs, small enough to keep in a result document."""
    counts: Counter[str] = Counter()
    examples: dict[str, dict[str, Any]] = {}
    for f in failures:
        label = _label(f)
        counts[label] += 1
        if label not in examples:
            examples[label] = {
                "error_kind": f.error_kind,
                "http_status": f.http_status,
                "error_excerpt": f.error_excerpt,
            }
    return {
        "num_total": num_total,
        "num_failed": sum(counts.values()),
        "by_label": dict(counts),
        "examples": examples,
    }


def diagnose(
    summary: dict[str, Any],
    *,
    url: str,
    what: str = "requests",
    max_error_fraction: float = 1.0,
) -> str | None:
    """One line when every request failed, or more than ``max_error_fraction`` of them.

    ``summary`` is a :func:`digest`.
    """
    num_total = int(summary.get("num_total") or 0)
    num_failed = int(summary.get("num_failed") or 0)
    if num_total <= 0 or num_failed == 0:
        return None
    if num_failed < num_total and num_failed / num_total <= max_error_fraction:
        return None
    scope = (
        f"all {num_total} {what} failed"
        if num_failed == num_total
        else f"{num_failed} of {num_total} {what} failed (more than the allowed "
        f"{max_error_fraction:.0%})"
    )
    return _describe(summary, scope, url)


def _describe(summary: dict[str, Any], scope: str, url: str) -> str:
    counts = Counter({str(k): int(v) for k, v in (summary.get("by_label") or {}).items()})
    common, _ = counts.most_common(1)[0] if counts else ("error", 0)
    ex = (summary.get("examples") or {}).get(common) or {}
    first = Failure(ex.get("error_kind"), ex.get("http_status"), ex.get("error_excerpt"))
    said = f": {first.error_excerpt}" if first.error_excerpt else ""
    said = said.replace(f": {common}: ", ": ", 1) if said.startswith(f": {common}: ") else said
    kinds = ", ".join(f"{k} x{n}" for k, n in counts.most_common(3))
    return f"{scope} ({kinds}); first {common} from {url}{said}; {_hint(first)}"


_HTTP_TEXT = re.compile(r"HTTP (\d{3}):? ?(.*)", re.DOTALL)


def failure_from_text(error: str | None) -> Failure:
    """A :class:`Failure` from a probe's error text (``HTTP 500: msg``, ``connect: msg``, ...)."""
    text = error or ""
    found = _HTTP_TEXT.search(text)
    if found:
        return Failure("http_status", int(found.group(1)), found.group(2).strip() or None)
    kind, sep, rest = text.partition(": ")
    if sep and kind and " " not in kind:
        return Failure(kind, None, rest.strip() or None)
    return Failure("error", None, text.strip() or None)


def stopped_line(
    failures: list[Failure], *, num_sent: int, url: str, what: str = "requests"
) -> str:
    """One line for a run that stopped at a failed request (``audit``, ``calibrate``).

    Every failure is named the same way as :func:`diagnose` names them: how many of the
    requests sent failed, the most common status or kind, the URL, the server's words and the
    likely fix.
    """
    num_failed = len(failures)
    scope = (
        f"all {num_sent} {what} failed"
        if num_failed >= num_sent
        else f"{num_failed} of {num_sent} {what} failed"
    )
    return f"{_describe(digest(failures, num_sent), scope, url)}; the run stopped there"


def record_digest(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """:func:`digest` over request records (cancelled-on-purpose and warm-up ones do not count)."""
    counted = [r for r in records if r.status != "cancelled" and not r.warmup]
    failures = [
        Failure(r.error_kind, r.http_status, r.error_excerpt)
        for r in counted
        if r.status == "error"
    ]
    return digest(failures, len(counted))


def failure_diagnosis(
    records: Iterable[RequestRecord],
    *,
    url: str,
    what: str = "requests",
    max_error_fraction: float = 1.0,
) -> str | None:
    """:func:`diagnose` over request records."""
    return diagnose(
        record_digest(records), url=url, what=what, max_error_fraction=max_error_fraction
    )
