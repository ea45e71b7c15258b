"""The planner's display rows: the engine pool (as ``kvbudget plan`` prints it), its layer groups and
windows, the headline and the three budgets (unit conversion and text only, no KV math)."""

from __future__ import annotations

from typing import Any

from kvbudget.capacity.budget import StructuralBudget, ThreeBudgets
from kvbudget.capacity.engines.registry import engine_entry
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.capacity.window_charge import group_blocks, window_charges
from kvbudget.units import format_bytes
from kvbudget.web.rows import bytes_text, labelled_row


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
        return labelled_row(
            "max model length", value, "as given (or the model's maximum)", label=None
        )
    fitted = [line for line in result.log_lines if line.startswith(AUTO_FIT_PREFIX)]
    note = (
        fitted[0].removeprefix(AUTO_FIT_PREFIX).strip()
        if fitted
        else "the model's maximum fits the pool, so it is kept"
    )
    return labelled_row("max model length (auto-fitted)", value, "auto: " + note)


def kv_memory_row(result: PlanResult) -> dict[str, Any]:
    """Where the KV bytes per GPU come from: ``--kv-cache-memory`` or the utilization arithmetic."""
    rank = min(result.ranks, key=lambda r: r.available_kv_bytes)
    if rank.kv_cache_memory_override:
        how = "kv_cache_memory override (--kv-cache-memory); replaces the utilization arithmetic"
    else:
        words = engine_entry(result.engine).wording
        how = words.available_web.format(utilization=rank.gpu_memory_utilization)
    return labelled_row(
        "KV memory (per GPU)", bytes_text(rank.available_kv_bytes), "source: " + how
    )


def kv_memory_source(result: PlanResult) -> str:
    """``kv_cache_memory`` when the override set the pool, else ``gpu_memory_utilization``."""
    override = any(r.kv_cache_memory_override for r in result.ranks)
    return "kv_cache_memory" if override else "gpu_memory_utilization"


def pool_rows(result: PlanResult, *, auto_fit: bool = False) -> list[dict[str, Any]]:
    """Blocks, tokens, concurrency and the engine's own log lines."""
    rows = [
        labelled_row("engine", f"{result.engine} {result.engine_version}", label=None),
        labelled_row(
            "GPU",
            f"{result.gpu.id} × {result.num_gpus} (TP {result.tp}, PP {result.pp})",
            label=None,
        ),
        length_row(result, auto_fit=auto_fit),
        kv_memory_row(result),
        labelled_row("KV dtype", result.kv_dtype, label=None),
        labelled_row(
            "blocks (per GPU)", f"{result.num_blocks:,} (usable {result.num_usable_blocks:,})"
        ),
        labelled_row("block size", f"{result.block_size} tokens", label=None),
        labelled_row(
            "KV-cache tokens", f"{result.kv_cache_tokens:,}", "as this engine version logs it"
        ),
        labelled_row(
            "maximum concurrency",
            f"{result.max_concurrency:.2f}x",
            f"requests of {result.max_model_len:,} tokens at once",
        ),
        *window_rows(result),
        labelled_row("KV bytes per token (one rank)", f"{result.kv_bytes_per_token_per_rank:,}"),
        labelled_row(
            "weights (most loaded GPU)",
            bytes_text(result.weights_bytes),
            result.weights.method,
            label=result.weights.source,
        ),
    ]
    rows.extend(
        labelled_row("engine log (as it would print)", line, label=None)
        for line in result.log_lines
    )
    return rows


def window_rows(result: PlanResult) -> list[dict[str, Any]]:
    """Why the window groups' blocks per sequence differ from what the concurrency charges."""
    charges = window_charges(result)
    if charges is None:
        return []
    *windows, summary = charges.lines()
    rows = [labelled_row("window group", w.split(": ", 1)[0], w.split(": ", 1)[1]) for w in windows]
    rows.append(
        labelled_row(
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
    return labelled_row(
        f"1. structural ({structural.num_sequences} × {structural.bytes_per_sequence:,} B per sequence)",
        bytes_text(structural.total_bytes),
        "how large the K/V data is by structure alone: " + structural.method,
    )


def budget_rows(budgets: ThreeBudgets, structural: StructuralBudget) -> list[dict[str, Any]]:
    """The seed's three budgets, each with what it answers; never merged into one number."""
    rows = [structural_row(structural)]
    rows.append(
        labelled_row(
            "2. engine cache pool (per GPU)",
            bytes_text(max(budgets.engine_pool_bytes_per_rank, default=0)),
            f"what the engine allocates for KV: {budgets.engine_pool_tokens:,} tokens; "
            f"{bytes_text(budgets.engine_pool_bytes_replica)} over the whole replica",
        )
    )
    for peak in budgets.device_peak:
        rows.append(
            labelled_row(
                f"3. device peak (PP rank {peak.pp_rank})",
                f"{bytes_text(peak.peak_bytes)} of {format_bytes(peak.device_bytes)}",
                "context + weights + activation + non-torch + graphs + KV pool; "
                + peak.headroom_text(),
            )
        )
    return rows
