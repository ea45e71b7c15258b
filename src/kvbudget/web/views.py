"""Library results -> display rows for the page (unit conversion and text only, no KV math).

Each view also carries the library's own documents under ``raw`` (the ``kvbudget calc --json``
document, the plan and the three budgets), so API clients get the CLI's numbers unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvbudget.capacity.assumptions import Assumption
from kvbudget.capacity.budget import StructuralBudget, ThreeBudgets, three_budgets
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.capacity.result import CalcResult
from kvbudget.spec.provenance import LedgerEntry
from kvbudget.units import format_bytes, to_gib
from kvbudget.web.plan_rows import (
    budget_rows,
    headline,
    kv_memory_source,
    pool_groups_table,
    pool_rows,
    structural_row,
)
from kvbudget.web.rows import byte_row, labelled_row, one_line_text

SET_HINT = " (on this page: one key=value per line in Overrides)"


def figure_rows(result: CalcResult) -> list[dict[str, Any]]:
    """Per token, per sequence, (largest rank,) total of a calculation; absent ones skipped."""
    rows = []
    for key, name, value in (
        ("per_token", "per token", result.bytes_per_token),
        ("per_sequence", "per sequence", result.bytes_per_sequence),
        ("largest_rank", "largest rank (one GPU)", result.per_rank_max_bytes),
        ("total", f"total ({result.seqs} sequences)", result.total_bytes),
    ):
        if value is None or (key == "largest_rank" and result.mode == "explicit"):
            continue
        rows.append(byte_row(key, name, value))
    return rows


def assumption_rows(assumptions: Iterable[Assumption]) -> list[dict[str, Any]]:
    """The checklist: holds only when confirmed (explicit) or derived true (model)."""
    return [
        {
            "key": a.name,
            "label": a.text,
            "holds": a.holds is True,
            "why": "not confirmed: tick it once you have checked that it holds"
            if a.holds is None
            else (a.reason or a.basis),
        }
        for a in assumptions
    ]


def explicit_view(result: CalcResult) -> dict[str, Any]:
    """The explicit calculator's answer for the page (and for API clients)."""
    total = result.total_bytes or 0
    return {
        "status": result.status,
        "status_reasons": result.reasons,
        "figures": figure_rows(result),
        "total_display": f"{format_bytes(total)} ({total:,} bytes, computed)",
        "assumptions": assumption_rows(result.assumptions),
        "label": "computed",
        "raw": {"calc": result.to_dict()},
    }


def ledger_table(entries: Iterable[LedgerEntry]) -> dict[str, Any]:
    """The ledger: field, value, source, where, note (conflicts flagged)."""
    rows = []
    for entry in entries:
        note = "; ".join(
            x for x in (entry.note, entry.conflict and f"CONFLICT: {entry.conflict}") if x
        )
        rows.append([entry.field, one_line_text(entry.value), entry.source, entry.location, note])
    return {"columns": ["field", "value", "source", "where", "note"], "rows": rows}


def layer_groups_table(result: CalcResult) -> dict[str, Any]:
    """The calculator's layer groups under the engine layout (one rank)."""
    columns = [
        "stage",
        "kind",
        "layers",
        "tokens kept",
        "bytes per token",
        "bytes per sequence",
        "all sequences",
        "note",
    ]
    rows = [
        [
            g["pp_rank"],
            g["kind"],
            g["num_layers"],
            f"{g['tokens_kept']:,}",
            f"{g['bytes_per_token']:,}",
            f"{g['bytes_per_sequence']:,}",
            f"{g['bytes_per_rank']:,}",
            g["note"],
        ]
        for g in result.groups
    ]
    return {"columns": columns, "rows": rows}


def model_view(
    calc: CalcResult,
    result: PlanResult | None,
    structural: StructuralBudget | None,
    three: ThreeBudgets | None,
    *,
    auto_fit: bool = False,
) -> dict[str, Any]:
    """Model mode for the page: status, figures, budgets, pool, groups, ledger, assumptions."""
    reasons = [r + (SET_HINT if "--set" in r else "") for r in calc.reasons]
    if calc.missing_fields and not any("--set" in r for r in calc.reasons):
        reasons.append("supply: " + ", ".join(calc.missing_fields) + SET_HINT)
    budgets: list[dict[str, Any]] = []
    if structural is not None:
        budgets = (
            budget_rows(three, structural) if three is not None else [structural_row(structural)]
        )
    if result is None:
        note = f"kvbudget plan models {' and '.join(('vllm', 'sglang'))}; {calc.engine} shows the calculator only"
        pool = (
            []
            if calc.status == "not_applicable"
            else [labelled_row("engine pool", "not planned", note, label=None)]
        )
        fits, fit_message = True, ""
    else:
        pool = pool_rows(result, auto_fit=auto_fit)
        fits = result.fits
        fit_message = (
            f"one request of {result.max_model_len:,} tokens fits"
            if result.fits
            else (result.error or "does not fit")
        )
    return {
        "status": calc.status,
        "status_note": "; ".join(reasons),
        "model_id": calc.model_id,
        "figures": figure_rows(calc),
        "budgets": budgets,
        "pool": pool,
        "fits": fits,
        "fit_message": fit_message,
        #: the answer, shown first: verdict and the figures that size the deployment
        "headline": headline(result, three) if result is not None else None,
        #: what to change so that it starts (the CLI's remedies), when it would not
        "remedies": list(result.remedies) if result is not None and not result.fits else [],
        "engine_label": None if result is None else f"{result.engine} {result.engine_version}",
        "max_model_len": result.max_model_len if result is not None else None,
        "max_model_len_source": "auto" if auto_fit else "given",
        "kv_memory_source": kv_memory_source(result) if result is not None else None,
        "groups": layer_groups_table(calc),
        "pool_groups": pool_groups_table(result)
        if result is not None
        else {"columns": [], "rows": []},
        "ledger": ledger_table(calc.ledger),
        "assumptions": assumption_rows(calc.assumptions),
        "chart": calc.status != "not_applicable",
        "raw": {
            "calc": calc.to_dict(),
            "structural": structural.to_dict() if structural is not None else None,
            "plan": result.to_dict() if result is not None else None,
            "budgets": three.to_dict() if three is not None else None,
        },
    }


def budgets_for(result: PlanResult | None, spec: Any) -> ThreeBudgets | None:
    return None if result is None else three_budgets(result, spec)


def token_label(num_tokens: int) -> str:
    """``4096`` -> ``4Ki``; other values as they are."""
    for unit, size in (("Mi", 1 << 20), ("Ki", 1 << 10)):
        if num_tokens % size == 0:
            return f"{num_tokens // size}{unit}"
    return f"{num_tokens:,}"


def chart_point(num_tokens: int, seq_bytes: int, concurrency: float | None) -> dict[str, Any]:
    return {
        "context_tokens": num_tokens,
        "context_label": token_label(num_tokens),
        "kv_bytes": seq_bytes,
        "kv_gib": to_gib(seq_bytes),
        "kv_display": format_bytes(seq_bytes),
        "max_concurrency": concurrency,
    }


def chart_view(
    points: list[dict[str, Any]], *, has_concurrency: bool, model_id: str, engine: str
) -> dict[str, Any]:
    """Chart series for the page's SVG (every value computed by the library)."""
    return {
        "title": f"{model_id} ({engine} layout): KV bytes per sequence and maximum concurrency "
        "against context length",
        "points": points,
        "label": "computed",
        "has_concurrency": has_concurrency,
    }
