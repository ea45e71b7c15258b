"""The canary's Prometheus textfile (node_exporter's textfile collector format).

``kvbudget_canary_runs_total``, ``kvbudget_canary_failures_total`` and
``kvbudget_canary_untested_total`` (runs that could not judge the candidate) are counters kept across
runs: each run reads the previous file and adds to it (a missing file starts at 0); other
services' counters in the same file are kept. The only label is ``service`` (bounded; no prompt
or identity). A file that holds anything else (not UTF-8 text, or a line that is neither a
comment nor one of these counters) is refused before the canary runs, never overwritten.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvbudget.errors import ConfigError

_LINE = re.compile(
    r'^(kvbudget_canary_(?:runs|failures|untested)_total)\{service="([^"]*)"\}\s+(\S+)$'
)


def service_name(text: str, *, max_len: int = 52) -> str:
    """A DNS-1123 label from a plan name (lowercase, dashes); also kvbudget deploy's names."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name)[:max_len].strip("-")
    return name or "kvbudget"


_NAMES = (
    "kvbudget_canary_runs_total",
    "kvbudget_canary_failures_total",
    "kvbudget_canary_untested_total",
)
_HELP = {
    "kvbudget_canary_runs_total": "kvbudget canary runs.",
    "kvbudget_canary_failures_total": "kvbudget canary runs whose gate failed.",
    "kvbudget_canary_untested_total": "kvbudget canary runs that could not judge the candidate.",
}


def read_textfile(path: Path) -> dict[tuple[str, str], float]:
    """The counters already in ``path`` by ``(name, service)`` (empty when it does not exist).

    Raises a one-line ConfigError, without echoing the file, when it is not such a textfile.
    """
    fix = "give a textfile of its own, e.g. /var/lib/node_exporter/textfile/kvbudget_canary.prom"
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        what = "is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "cannot be read"
        raise ConfigError(
            f"--metrics-textfile {str(path)!r}: {what}; {fix}", field="metrics_textfile"
        ) from None
    counts: dict[tuple[str, str], float] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _LINE.match(stripped)
        value = _number(match.group(3)) if match else None
        if match is None or value is None:
            raise ConfigError(
                f"--metrics-textfile {str(path)!r}: line {number} is not a kvbudget canary "
                f"counter, so the file is not overwritten; {fix}",
                field="metrics_textfile",
            )
        counts[(match.group(1), match.group(2))] = value
    return counts


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 and value != float("inf") else None


def write_textfile(path: Path, *, service: str, verdict: str) -> dict[str, float]:
    """Add one run with ``verdict`` (pass, fail or untested) to ``service``'s counters."""
    known = read_textfile(path)
    add = {
        "kvbudget_canary_runs_total": 1,
        "kvbudget_canary_failures_total": int(verdict == "fail"),
        "kvbudget_canary_untested_total": int(verdict not in ("pass", "fail")),
    }
    for name, step in add.items():
        known[(name, service)] = known.get((name, service), 0.0) + step
    lines: list[str] = []
    for name in _NAMES:
        lines += [f"# HELP {name} {_HELP[name]}", f"# TYPE {name} counter"]
        for (metric, svc), value in sorted(known.items()):
            if metric == name:
                lines.append(f'{name}{{service="{svc}"}} {value:g}')
    lines.append("")
    counts = {name: known[(name, service)] for name in _NAMES}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    tmp.replace(path)
    return counts
