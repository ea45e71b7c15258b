"""The one reader of an acceptance ``report.json``, shared by ``kvbudget report`` and
``kvbudget deploy``: whatever one refuses, the other refuses with the same line.

On top of the schema (:func:`kvbudget.records.read_document`: JSON, ``schema_version``, fields)
it refuses a document kvbudget accept cannot have written:

* a number that is not finite (``NaN``, ``Infinity``, ``1e400``), or text that is not Unicode
  (a lone UTF-16 surrogate from a ``\\ud800`` escape); kvbudget writes neither;
* a negative count, time or usage in a cell's time series or summary sample count;
* a confidence interval whose low end is above its high end;
* a cell whose verdict is not the worst of its checks, or an overall verdict that
  :func:`kvbudget.accept.judge.verdicts.overall_verdict` does not give for the document's own stop
  conditions, lock fields and cells (a ``pass`` over failed cells). Comparisons are left out
  of that: ``report --compare --out`` appends one to a finished document without re-judging it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kvbudget.accept.judge.verdicts import cell_verdict, overall_verdict
from kvbudget.accept.result import AcceptResult
from kvbudget.errors import ReportError
from kvbudget.records import read_document

FIX = "give the report.json that 'kvbudget accept --out DIR' wrote (DIR/report.json)"


def load_accept_result(path: Path) -> AcceptResult:
    """Read and check an acceptance report.json; a one-line ReportError on any problem."""
    try:
        doc = read_document(path, AcceptResult)
    except ReportError as exc:
        raise ReportError(f"{exc}; {FIX}") from exc
    problem = _not_finite(doc.model_dump(mode="python"), ()) or _inconsistent(doc)
    if problem is not None:
        raise ReportError(f"result document {path}: {problem}; {FIX}", field="report")
    return doc


def _not_finite(value: Any, where: tuple[str, ...]) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{'.'.join(where) or 'value'} is {value!r}, not a finite number"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{'.'.join(where) or 'value'} holds a lone UTF-16 surrogate, not text"
        return None
    items: Any = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, (list, tuple))
        else ()
    )
    for key, item in items:
        found = _not_finite(item, (*where, str(key)))
        if found is not None:
            return found
    return None


def _inconsistent(doc: AcceptResult) -> str | None:
    for cell in doc.cells:
        where = f"cell {cell.cell_id!r}"
        ts = cell.timeseries
        # t_s is relative to the cell's start, and a measured run's first scrape may come just
        # before it (vLLM-CPU: -0.05 s): only the counted series cannot be negative
        for name in ("kv_usage", "num_running", "num_waiting"):
            negative = [v for v in getattr(ts, name) if v < 0]
            if negative:
                return f"{where}: timeseries.{name} holds {negative[0]:g}, below 0"
        for metric, summary in cell.summaries.items():
            if summary.n < 0:
                return f"{where}: {metric}.n is {summary.n}, below 0"
            for pct, ci in summary.percentiles.items():
                if ci.low is not None and ci.high is not None and ci.low > ci.high:
                    return f"{where}: {metric} {pct} interval low {ci.low:g} > high {ci.high:g}"
        if cell.checks:
            expected, _ = cell_verdict(cell.checks)
            if cell.verdict != expected:
                return (
                    f"{where}: verdict {cell.verdict!r} but its checks give {expected!r} "
                    "(the worst check decides)"
                )
    simulated = doc.target.get("source", doc.provenance.kind) == "simulated"
    expected_overall, _ = overall_verdict(
        doc.stop_conditions,
        doc.blocking,
        [c.verdict for c in doc.cells],
        simulated=simulated,
    )
    # a comparison that is not 'pass' turns accept's 'pass' into 'untested'; allow either
    if doc.verdict != expected_overall and not (
        expected_overall == "pass" and doc.verdict == "untested" and doc.comparisons
    ):
        failed = sum(1 for c in doc.cells if c.verdict == "fail")
        return (
            f"verdict {doc.verdict!r} but its stop conditions, lock and cells ({failed} of "
            f"{len(doc.cells)} failed) give {expected_overall!r}"
        )
    return None
