"""Re-summarise a finished acceptance run's cells at other percentiles, from its records.

``kvbudget report OUT/report.json --metric-percentiles 75,99.9`` reads ``OUT/records.jsonl``
and ``OUT/progress.jsonl`` (the files ``kvbudget accept --out OUT`` wrote, as ``--resume``
reads them: :func:`kvbudget.accept.resume_files.load_progress`) and recomputes each cell's
TTFT, TPOT, ITL, E2E and queue summaries with the one summariser the run used
(:func:`kvbudget.accept.cells.cell_summaries`), replaying the run's bootstrap generator
(``numpy.random.default_rng([seed, 7])``, cells in the run's order), so the figures the run
computed come out the same and the added percentiles get CIs from the same resamples.

Only the summaries and ``metric_percentiles`` change: checks, verdicts and stop conditions were
judged at their own percentiles (always summarised) and are kept as the run wrote them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kvbudget.accept.cells import cell_summaries
from kvbudget.accept.result import AcceptResult, CellResult
from kvbudget.accept.resume_files import RUN_FILE, load_progress
from kvbudget.errors import ConfigError
from kvbudget.metrics.percentile_set import reported_percentiles

FLAG = "--metric-percentiles"
_FIX = "re-render from the run's own OUT directory, or leave --metric-percentiles out"


def _refuse(why: str) -> ConfigError:
    return ConfigError(f"{FLAG}: {why}; {_FIX}", field="metric_percentiles")


def _check_run_file(doc: AcceptResult, run_dir: Path) -> None:
    """The records in ``run_dir`` belong to ``doc``'s plan (``accept-run.json``)."""
    path = run_dir / RUN_FILE
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        raise _refuse(
            f"{path} is missing or not JSON, so its records cannot be tied to the report"
        ) from None
    sha = recorded.get("plan_sha256") if isinstance(recorded, dict) else None
    if sha != doc.plan_sha256:
        raise _refuse(
            f"the records in {run_dir} are from another plan (plan_sha256 {str(sha)[:12]}, the "
            f"report's {doc.plan_sha256[:12]})"
        )


def resummarize(doc: AcceptResult, run_dir: Path, percentiles: Sequence[float]) -> AcceptResult:
    """``doc`` with each cell's summaries recomputed from ``run_dir``'s records, holding
    ``percentiles`` (with p50 and p99, and p90/p95 for the stop conditions) beside the mean and
    median. A cell whose records do not add up to the report's request count is refused in one
    line (the directory holds another run's records)."""
    for name in ("records.jsonl", "progress.jsonl"):
        if not (run_dir / name).is_file():
            raise _refuse(
                f"{run_dir / name} does not exist; re-summarising needs the run's records "
                "beside report.json"
            )
    _check_run_file(doc, run_dir)
    done, _ = load_progress(run_dir, reader=(FLAG, _FIX))
    rng = np.random.default_rng([doc.seed, 7])  # the run's generator (run_acceptance)
    cells: list[CellResult] = []
    for cell in doc.cells:
        if any((cell.cell_id, rep) not in done for rep in range(cell.repetitions)):
            raise _refuse(f"{run_dir / 'progress.jsonl'} lacks a repetition of cell {cell.cell_id}")
        runs = [done[(cell.cell_id, rep)] for rep in range(cell.repetitions)]
        found = sum(1 for run in runs for r in run.records if not r.warmup)
        if found != cell.num_requests:
            raise _refuse(
                f"cell {cell.cell_id} has {found} record(s) in {run_dir / 'records.jsonl'} but "
                f"{cell.num_requests} in the report (another run's records?)"
            )
        summaries = cell_summaries(runs, rng, percentiles)
        cells.append(cell.model_copy(update={"summaries": summaries if found else {}}))
    return doc.model_copy(
        update={"cells": cells, "metric_percentiles": list(reported_percentiles(percentiles))}
    )
