"""Library results -> display rows for the page (unit conversion and text only, no KV math)."""

from __future__ import annotations

import json
from typing import Any

from kvbudget.capacity.budget import StructuralBudget, ThreeBudgets, three_budgets
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.spec.resolve import ResolvedModel
from kvbudget.units import format_bytes, to_gib, to_mib
from kvbudget.web.library import ExplicitResult

STATUS_WORDS: dict[str, str] = {
    "exact": "every structural assumption holds; the formula describes this cache",
    "structural_reference": "an assumption does not hold or is unconfirmed; a structural reference only",
    "not_applicable": "the formula does not describe this structure; measure instead",
}


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


def explicit_view(result: ExplicitResult) -> dict[str, Any]:
    """The explicit calculator's answer for the page (and for API clients)."""
    total = result.total_bytes
    return {
        "status": result.status,
        "status_words": STATUS_WORDS.get(result.status, ""),
        "figures": [
            byte_row("per_token", "per token", result.bytes_per_token),
            byte_row("per_sequence", "per sequence", result.bytes_per_sequence),
            byte_row("total", "total", total),
        ],
        "total_display": f"{format_bytes(total)} ({total:,} bytes, computed)",
        "assumptions": result.assumptions,
        "label": "computed",
    }


def _fmt_bytes(num_bytes: int | None) -> str:
    return "—" if num_bytes is None else f"{format_bytes(num_bytes)} ({num_bytes:,} B)"


def _kv(name: str, value: Any, note: str = "", label: str | None = "computed") -> dict[str, Any]:
    row: dict[str, Any] = {"name": name, "value": value, "note": note}
    if label:
        row["label"] = label
    return row


def ledger_table(resolved: ResolvedModel) -> dict[str, Any]:
    """The resolver's ledger: field, value, source, where, note (conflicts included)."""
    rows = []
    for entry in resolved.ledger:
        note = "; ".join(
            x for x in (entry.note, entry.conflict and f"conflict: {entry.conflict}") if x
        )
        rows.append(
            [
                entry.field,
                json.dumps(entry.value) if not isinstance(entry.value, str) else entry.value,
                entry.source,
                entry.location,
                note,
            ]
        )
    return {"columns": ["field", "value", "source", "where", "note"], "rows": rows}


def groups_table(result: PlanResult) -> dict[str, Any]:
    """vLLM's KV cache groups (or the SGLang pool's one group) as the planner built them."""
    rows = []
    for group in result.groups:
        limit = group.sliding_window or group.attention_chunk_size
        rows.append(
            [
                group.group_id,
                group.kind,
                group.num_layers,
                group.num_padding_layers,
                group.block_size,
                f"{group.page_size_bytes:,}",
                "—" if limit is None else f"{limit:,}",
            ]
        )
    columns = [
        "group",
        "kind",
        "layers",
        "padding layers",
        "block size (tokens)",
        "page bytes (1 block, 1 layer, 1 rank)",
        "window / chunk",
    ]
    return {"columns": columns, "rows": rows}


def pool_rows(result: PlanResult) -> list[dict[str, Any]]:
    rows = [
        _kv("engine", f"{result.engine} {result.engine_version}", label=None),
        _kv(
            "GPU",
            f"{result.gpu.id} × {result.num_gpus} (TP {result.tp}, PP {result.pp})",
            label=None,
        ),
        _kv("max model length", f"{result.max_model_len:,} tokens", label=None),
        _kv("KV dtype", result.kv_dtype, label=None),
        _kv("blocks (per GPU)", f"{result.num_blocks:,} (usable {result.num_usable_blocks:,})"),
        _kv("block size", f"{result.block_size} tokens", label=None),
        _kv("KV-cache tokens", f"{result.kv_cache_tokens:,}", "as the engine version logs it"),
        _kv(
            "maximum concurrency",
            f"{result.max_concurrency:.2f}x",
            f"requests of {result.max_model_len:,} tokens at once",
        ),
        _kv("KV bytes per token (one rank)", f"{result.kv_bytes_per_token_per_rank:,}"),
        _kv(
            "weights (most loaded GPU)",
            _fmt_bytes(result.weights_bytes),
            result.weights.method,
            label=result.weights.source,
        ),
    ]
    rows.extend(_kv("engine log", line, label=None) for line in result.log_lines)
    return rows


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
        verdict = "within" if peak.ok else "OVER"
        rows.append(
            _kv(
                f"3. device peak (PP rank {peak.pp_rank})",
                f"{_fmt_bytes(peak.peak_bytes)} of {format_bytes(peak.device_bytes)}",
                "context + weights + activation + non-torch + graphs + KV pool; headroom "
                f"{format_bytes(peak.headroom_bytes)} is {verdict} the "
                f"{format_bytes(peak.margin_bytes)} margin",
            )
        )
    return rows


def structural_row(structural: StructuralBudget) -> dict[str, Any]:
    return _kv(
        f"1. structural ({structural.num_sequences} × {structural.bytes_per_sequence:,} B per sequence)",
        _fmt_bytes(structural.total_bytes),
        "how large the K/V data is by structure alone: " + structural.method,
    )


def model_view(
    resolved: ResolvedModel,
    result: PlanResult | None,
    engine: str,
    structural: StructuralBudget | None,
) -> dict[str, Any]:
    """Model mode for the page: status, budgets, pool, groups, ledger, assumptions."""
    if resolved.status != "resolved" or resolved.spec is None:
        return {
            "status": "not_applicable",
            "status_note": resolved.reason
            + (
                " (on this page: one key=value per line in Overrides)"
                if "--set" in resolved.reason
                else ""
            ),
            "missing": list(resolved.missing),
            "budgets": [],
            "pool": [],
            "fits": False,
            "fit_message": "",
            "groups": {"columns": [], "rows": []},
            "ledger": ledger_table(resolved),
            "assumptions": [],
            "chart": False,
        }
    spec = resolved.spec
    kinds = ", ".join(f"{n} {k}" for k, n in spec.kind_counts().items())
    budgets: list[dict[str, Any]] = []
    view: dict[str, Any] = {
        "status": "structural_reference",
        "status_note": f"{spec.model_id}: {spec.num_layers} layers ({kinds})",
        "budgets": budgets,
        "ledger": ledger_table(resolved),
        "assumptions": [],
        "chart": result is not None,
    }
    if structural is not None:
        view["raw"] = {"structural": structural.to_dict(), "plan": None, "budgets": None}
        if result is None:
            budgets.append(structural_row(structural))
    if result is None or structural is None:
        view.update(
            pool=[
                _kv(
                    "engine pool",
                    f"not planned for {engine}",
                    "kvbudget plan models vllm and sglang",
                    label=None,
                )
            ],
            fits=True,
            fit_message="",
            groups={"columns": [], "rows": []},
        )
        return view
    three = three_budgets(result, spec)
    budgets.extend(budget_rows(three, structural))
    view["raw"] = {
        "structural": structural.to_dict(),
        "plan": result.to_dict(),
        "budgets": three.to_dict(),
    }
    view.update(
        pool=pool_rows(result),
        fits=result.fits,
        fit_message=(
            f"one request of {result.max_model_len:,} tokens fits"
            if result.fits
            else (result.error or "does not fit")
        ),
        groups=groups_table(result),
    )
    return view


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
    points: list[dict[str, Any]], *, has_concurrency: bool, model_id: str
) -> dict[str, Any]:
    """Chart series for the page's SVG (every value computed by the library)."""
    return {
        "title": f"{model_id}: KV bytes per sequence and maximum concurrency against context length",
        "points": points,
        "label": "computed",
        "has_concurrency": has_concurrency,
    }
