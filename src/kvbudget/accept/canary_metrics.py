"""The canary's Prometheus textfile (node_exporter's textfile collector format).

``kvbudget_canary_runs_total`` and ``kvbudget_canary_failures_total`` are counters kept across
runs: each run reads the previous file and adds to it (a missing or unreadable file starts at 0).
The only label is ``service`` (bounded; no prompt or identity).
"""

from __future__ import annotations

import re
from pathlib import Path

_LINE = re.compile(r'^(kvbudget_canary_(?:runs|failures)_total)\{service="([^"]*)"\}\s+(\S+)$')


def service_name(text: str, *, max_len: int = 52) -> str:
    """A DNS-1123 label from a plan name (lowercase, dashes); also kvbudget deploy's names."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name)[:max_len].strip("-")
    return name or "kvbudget"


def _previous(path: Path, service: str) -> dict[str, float]:
    counts = {"kvbudget_canary_runs_total": 0.0, "kvbudget_canary_failures_total": 0.0}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return counts
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match and match.group(2) == service:
            try:
                counts[match.group(1)] = float(match.group(3))
            except ValueError:
                continue
    return counts


def write_textfile(path: Path, *, service: str, failed: bool) -> dict[str, float]:
    counts = _previous(path, service)
    counts["kvbudget_canary_runs_total"] += 1
    if failed:
        counts["kvbudget_canary_failures_total"] += 1
    lines = [
        "# HELP kvbudget_canary_runs_total kvbudget canary runs.",
        "# TYPE kvbudget_canary_runs_total counter",
        f'kvbudget_canary_runs_total{{service="{service}"}} {counts["kvbudget_canary_runs_total"]:g}',
        "# HELP kvbudget_canary_failures_total kvbudget canary runs whose gate failed.",
        "# TYPE kvbudget_canary_failures_total counter",
        f'kvbudget_canary_failures_total{{service="{service}"}} '
        f"{counts['kvbudget_canary_failures_total']:g}",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    tmp.replace(path)
    return counts
