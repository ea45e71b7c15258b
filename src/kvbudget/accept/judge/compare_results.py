"""Single-factor comparison of two finished runs (``kvbudget report BASE.json --compare VAR.json``).

The way to compare measured runs: the variant engine is restarted by its operator, the plan is
run again, and the two result documents are compared here. The comparison is
``not_comparable`` (every difference listed) when the two resolved locks differ in anything but
the declared factor, or when one run is simulated and the other measured. Samples come from the
``records.jsonl`` beside each ``report.json`` when present (all requests), else from the raw
TTFT/TPOT samples kept in the document (at most 400 per cell; said in the reasons).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.accept.judge.comparisons import judge_comparison, not_comparable
from kvbudget.accept.plan.checks import FACTOR_LOCK_FIELD, Comparison
from kvbudget.accept.plan.lockcheck import Difference, difference_lines
from kvbudget.accept.request_keys import RequestKey
from kvbudget.accept.result import AcceptResult, ComparisonResult
from kvbudget.accept.targets.base import CellRun
from kvbudget.records import RequestRecord, read_jsonl

_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")


def _lock_values(doc: AcceptResult) -> dict[str, Any]:
    return {e.field: e.observed if e.observed is not None else e.value for e in doc.lock}


def _runs(doc: AcceptResult, path: Path) -> tuple[dict[str, list[CellRun]], str]:
    records_file = path.parent / "records.jsonl"
    if records_file.is_file():
        records = [r for r in read_jsonl(records_file, RequestRecord).items if not r.warmup]
        by_cell: dict[str, list[RequestRecord]] = {}
        for rec in records:
            if rec.cell_id is not None:
                by_cell.setdefault(rec.cell_id, []).append(rec)
        runs = {c: [CellRun(records=recs, duration_s=0.0)] for c, recs in by_cell.items()}
        return runs, f"all requests from {records_file.name}"
    out: dict[str, list[CellRun]] = {}
    for cell in doc.cells:
        n = max(len(cell.samples_ttft_s), len(cell.samples_tpot_s))
        recs = [
            RequestRecord(
                request_id=RequestKey(cell.cell_id, 0, f"sample{i}").encode(),
                source=doc.provenance.kind if doc.provenance.kind != "computed" else "simulated",  # type: ignore[arg-type]
                status="ok",
                ttft_s=cell.samples_ttft_s[i] if i < len(cell.samples_ttft_s) else None,
                tpot_s=cell.samples_tpot_s[i] if i < len(cell.samples_tpot_s) else None,
            )
            for i in range(n)
        ]
        out[cell.cell_id] = [CellRun(records=recs, duration_s=0.0)]
    return out, "the thinned TTFT/TPOT samples kept in report.json (records.jsonl not found)"


def compare_documents(
    base: AcceptResult,
    base_path: Path,
    variant: AcceptResult,
    variant_path: Path,
    *,
    factor: str,
    percentile: float = 95.0,
    alpha: float = 0.05,
) -> ComparisonResult:
    field_name = FACTOR_LOCK_FIELD[factor]
    a, b = _lock_values(base), _lock_values(variant)
    diffs = [
        Difference(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
    ]
    lines = difference_lines(diffs)
    comparison = Comparison(
        name=f"{base_path.parent.name or 'baseline'}-vs-{variant_path.parent.name or 'variant'}"
        if _SAFE.match(f"{base_path.parent.name}-vs-{variant_path.parent.name}")
        else "baseline-vs-variant",
        factor=factor,  # type: ignore[arg-type]
        set={field_name: b.get(field_name)},
        percentile=percentile,
        alpha=alpha,
    )
    if base.provenance.kind != variant.provenance.kind:
        return not_comparable(
            comparison,
            lines,
            f"one run is {base.provenance.kind}, the other {variant.provenance.kind}",
        )
    others = [d.field for d in diffs if d.field != field_name]
    if not diffs:
        return not_comparable(comparison, lines, f"the two locks are identical ({factor} too)")
    if others:
        return not_comparable(
            comparison,
            lines,
            "the locks differ in more than the declared factor: " + ", ".join(others),
        )
    base_runs, how_a = _runs(base, base_path)
    var_runs, how_b = _runs(variant, variant_path)
    common = {c: r for c, r in var_runs.items() if c in base_runs}
    result = judge_comparison(
        comparison,
        baseline_runs=base_runs,
        variant_runs=common,
        baseline_ledger=base.ledger,
        variant_ledger=variant.ledger,
        differences=lines,
        baseline_value=a.get(field_name),
        variant_value=b.get(field_name),
        rng=np.random.default_rng([base.seed, variant.seed, 11]),
    )
    note = f"samples: baseline {how_a}; variant {how_b}"
    return result.model_copy(update={"reasons": [*result.reasons, note]})
