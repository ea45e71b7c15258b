"""Library results -> display rows for the page (unit conversion and text only, no KV math).

Each view also carries the library's own documents under ``raw`` (the ``kvbudget calc --json``
document, the plan and the three budgets), so API clients get the CLI's numbers unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from kvbudget.capacity.assumptions import Assumption
from kvbudget.capacity.budget import StructuralBudget, ThreeBudgets, three_budgets
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.capacity.result import CalcResult
from kvbudget.capacity.window_charge import group_blocks, window_charges
from kvbudget.spec.provenance import LedgerEntry
from kvbudget.units import format_bytes, to_gib, to_mib

SET_HINT = " (on this page: one key=value per line in Overrides)"


def _trim(value: float) -> str:
    text = f"{value:,.6f}".rstrip("0").rstrip(".")
    return text or "0"


def byte_row(key: str, name: str, num_bytes: int) -> dict[str, Any]:
    """One figure in bytes, MiB and GiB (binary), as numbers and as text."""
    return {
        "key": key,
        "name": name,
        "bytes": num_bytes,
        "mib": to_mib(num_bytes),
        "gib": to_gib(num_bytes),
        "bytes_text": f"{num_bytes:,}",
        "mib_text": _trim(to_mib(num_bytes)),
        "gib_text": _trim(to_gib(num_bytes)),
        "label": "computed",
    }


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


def _fmt_bytes(num_bytes: int | None) -> str:
    return "—" if num_bytes is None else f"{format_bytes(num_bytes)} ({num_bytes:,} B)"


def _kv(name: str, value: Any, note: str = "", label: str | None = "computed") -> dict[str, Any]:
    row: dict[str, Any] = {"name": name, "value": value, "note": note}
    if label:
        row["label"] = label
    return row


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def ledger_table(entries: Iterable[LedgerEntry]) -> dict[str, Any]:
    """The ledger: field, value, source, where, note (conflicts flagged)."""
    rows = []
    for entry in entries:
        note = "; ".join(
            x for x in (entry.note, entry.conflict and f"CONFLICT: {entry.conflict}") if x
        )
        rows.append([entry.field, _text(entry.value), entry.source, entry.location, note])
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


def pool_groups_table(result: PlanResult) -> dict[str, Any]:
    """The engine's KV cache groups as the planner built them."""
    columns = [
        "group",
        "kind",
        "layers",
        "padding layers",
        "block size (tokens)",
        "page bytes (1 block, 1 layer, 1 rank)",
        "window / chunk",
    ]
    blocks = group_blocks(result)
    if blocks is not None:
        columns += [
            "blocks kept per sequence (decoding at max length)",
            "blocks charged per sequence (maximum concurrency)",
        ]
    rows = []
    for i, group in enumerate(result.groups):
        limit = group.sliding_window or group.attention_chunk_size
        row = [
            group.group_id,
            group.kind,
            group.num_layers,
            group.num_padding_layers,
            group.block_size,
            f"{group.page_size_bytes:,}",
            "—" if limit is None else f"{limit:,}",
        ]
        if blocks is not None:
            row += [f"{blocks[i].kept:,}", f"{blocks[i].charged:,}"]
        rows.append(row)
    return {"columns": columns, "rows": rows}


AUTO_FIT_PREFIX = "Auto-fit max_model_len:"


def length_row(result: PlanResult, *, auto_fit: bool) -> dict[str, Any]:
    """The max model length, and whether make_plan auto-fitted it (vLLM ``--max-model-len auto``)."""
    value = f"{result.max_model_len:,} tokens"
    if not auto_fit:
        return _kv("max model length", value, "as given (or the model's maximum)", label=None)
    fitted = [line for line in result.log_lines if line.startswith(AUTO_FIT_PREFIX)]
    note = (
        fitted[0].removeprefix(AUTO_FIT_PREFIX).strip()
        if fitted
        else "the model's maximum fits the pool, so it is kept"
    )
    return _kv("max model length (auto-fitted)", value, "auto: " + note)


def kv_memory_row(result: PlanResult) -> dict[str, Any]:
    """Where the KV bytes per GPU come from: ``--kv-cache-memory`` or the utilization arithmetic."""
    rank = min(result.ranks, key=lambda r: r.available_kv_bytes)
    if rank.kv_cache_memory_override:
        how = "kv_cache_memory override (--kv-cache-memory); replaces the utilization arithmetic"
    elif result.engine == "sglang":
        how = f"mem_fraction_static {rank.gpu_memory_utilization} arithmetic (SGLang)"
    else:
        how = (
            f"total × gpu_memory_utilization {rank.gpu_memory_utilization} − weights, "
            "activation, non-torch (and graphs where subtracted)"
        )
    return _kv("KV memory (per GPU)", _fmt_bytes(rank.available_kv_bytes), "source: " + how)


def kv_memory_source(result: PlanResult) -> str:
    """``kv_cache_memory`` when the override set the pool, else ``gpu_memory_utilization``."""
    override = any(r.kv_cache_memory_override for r in result.ranks)
    return "kv_cache_memory" if override else "gpu_memory_utilization"


def pool_rows(result: PlanResult, *, auto_fit: bool = False) -> list[dict[str, Any]]:
    """Blocks, tokens, concurrency and the engine's own log lines."""
    rows = [
        _kv("engine", f"{result.engine} {result.engine_version}", label=None),
        _kv(
            "GPU",
            f"{result.gpu.id} × {result.num_gpus} (TP {result.tp}, PP {result.pp})",
            label=None,
        ),
        length_row(result, auto_fit=auto_fit),
        kv_memory_row(result),
        _kv("KV dtype", result.kv_dtype, label=None),
        _kv("blocks (per GPU)", f"{result.num_blocks:,} (usable {result.num_usable_blocks:,})"),
        _kv("block size", f"{result.block_size} tokens", label=None),
        _kv("KV-cache tokens", f"{result.kv_cache_tokens:,}", "as this engine version logs it"),
        _kv(
            "maximum concurrency",
            f"{result.max_concurrency:.2f}x",
            f"requests of {result.max_model_len:,} tokens at once",
        ),
        *window_rows(result),
        _kv("KV bytes per token (one rank)", f"{result.kv_bytes_per_token_per_rank:,}"),
        _kv(
            "weights (most loaded GPU)",
            _fmt_bytes(result.weights_bytes),
            result.weights.method,
            label=result.weights.source,
        ),
    ]
    rows.extend(
        _kv("engine log (as it would print)", line, label=None) for line in result.log_lines
    )
    return rows


def window_rows(result: PlanResult) -> list[dict[str, Any]]:
    """Why the window groups' blocks per sequence differ from what the concurrency charges."""
    charges = window_charges(result)
    if charges is None:
        return []
    *windows, summary = charges.lines()
    rows = [_kv("window group", w.split(": ", 1)[0], w.split(": ", 1)[1]) for w in windows]
    rows.append(
        _kv(
            "max-length sequences while all decode",
            f"{charges.decode_concurrency:.2f}",
            summary.removeprefix("so "),
        )
    )
    return rows


def headline(result: PlanResult, budgets: ThreeBudgets | None) -> dict[str, Any]:
    """The answer first: does it start, how many max-length requests at once, how much room."""
    figures = [
        {
            "name": "maximum concurrency",
            "value": f"{result.max_concurrency:.2f}x",
            "note": f"requests of {result.max_model_len:,} tokens at once, as the engine logs it",
        },
        {
            "name": "KV-cache tokens",
            "value": f"{result.kv_cache_tokens:,}",
            "note": f"{result.num_blocks:,} blocks of {result.block_size} tokens",
        },
    ]
    peaks = budgets.device_peak if budgets is not None else ()
    if peaks and result.device_given:
        worst = min(peaks, key=lambda p: p.headroom_bytes)
        where = f" (PP rank {worst.pp_rank})" if len(peaks) > 1 else ""
        figures.append(
            {
                "name": "device headroom" + where,
                "value": format_bytes(worst.headroom_bytes),
                "note": worst.headroom_text(),
            }
        )
    engine = f"{result.engine} {result.engine_version}"
    if result.fits:
        verdict = f"Fits: {engine} starts and holds a {result.max_model_len:,}-token request"
    else:
        verdict = f"Does not fit: {engine} would refuse to start"
    return {"fits": result.fits, "verdict": verdict, "figures": figures, "label": "computed"}


def structural_row(structural: StructuralBudget) -> dict[str, Any]:
    return _kv(
        f"1. structural ({structural.num_sequences} × {structural.bytes_per_sequence:,} B per sequence)",
        _fmt_bytes(structural.total_bytes),
        "how large the K/V data is by structure alone: " + structural.method,
    )


def budget_rows(budgets: ThreeBudgets, structural: StructuralBudget) -> list[dict[str, Any]]:
    """The seed's three budgets, each with what it answers; never merged into one number."""
    rows = [structural_row(structural)]
    rows.append(
        _kv(
            "2. engine cache pool (per GPU)",
            _fmt_bytes(max(budgets.engine_pool_bytes_per_rank, default=0)),
            f"what the engine allocates for KV: {budgets.engine_pool_tokens:,} tokens; "
            f"{_fmt_bytes(budgets.engine_pool_bytes_replica)} over the whole replica",
        )
    )
    for peak in budgets.device_peak:
        rows.append(
            _kv(
                f"3. device peak (PP rank {peak.pp_rank})",
                f"{_fmt_bytes(peak.peak_bytes)} of {format_bytes(peak.device_bytes)}",
                "context + weights + activation + non-torch + graphs + KV pool; "
                + peak.headroom_text(),
            )
        )
    return rows


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
            else [_kv("engine pool", "not planned", note, label=None)]
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
