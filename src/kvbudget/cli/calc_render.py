"""``kvbudget calc``'s tables on the terminal: the summary, layer groups, assumption checklist and
ledger (figures computed, not measured)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kvbudget.capacity.layouts.llamacpp import LlamacppKV
from kvbudget.capacity.result import CalcResult
from kvbudget.units import GiB, MiB


def _bytes_text(num_bytes: int | None) -> str:
    if num_bytes is None:
        return "-"
    return f"{num_bytes:,} B = {num_bytes / MiB:,.3f} MiB = {num_bytes / GiB:,.6f} GiB"


def render(result: CalcResult, console: Console, kv: LlamacppKV | None = None) -> None:
    """The human-readable tables (figures are computed, not measured)."""
    title = (
        f"kvbudget calc - {result.model_id or 'explicit input'} - {result.engine} layout (computed)"
    )
    summary = Table(title=title, show_header=False)
    summary.add_row("status", result.status)
    for reason in result.reasons:
        summary.add_row("", reason)
    if result.missing_fields:
        summary.add_row("supply", ", ".join(f"--set {m}=..." for m in result.missing_fields))
    summary.add_row("kv dtype", result.kv_dtype)
    summary.add_row(
        "load",
        f"{result.tokens:,} tokens x {result.seqs} sequences; tp {result.tp}, pp {result.pp}, dp {result.dp}",
    )
    if result.block_size:
        summary.add_row("block size", str(result.block_size))
    summary.add_row("per token", _bytes_text(result.bytes_per_token))
    summary.add_row("per sequence", _bytes_text(result.bytes_per_sequence))
    summary.add_row("largest rank", _bytes_text(result.per_rank_max_bytes))
    summary.add_row("total", _bytes_text(result.total_bytes))
    if kv is not None:
        summary.add_row(
            "llama.cpp cells",
            f"{kv.cells_per_stream:,} cells x {kv.streams} streams = {kv.n_ctx:,} (n_ctx padded)",
        )
        summary.add_row(f"K ({kv.k_type})", _bytes_text(kv.k_bytes))
        summary.add_row(f"V ({kv.v_type})", _bytes_text(kv.v_bytes))
    console.print(summary)
    if result.groups:
        groups = Table(title="layer groups (one rank)")
        for col in (
            "stage",
            "kind",
            "layers",
            "tokens kept",
            "per token",
            "per sequence",
            "all sequences",
            "note",
        ):
            groups.add_column(col)
        for g in result.groups:
            groups.add_row(
                str(g["pp_rank"]),
                g["kind"],
                str(g["num_layers"]),
                f"{g['tokens_kept']:,}",
                f"{g['bytes_per_token']:,}",
                f"{g['bytes_per_sequence']:,}",
                f"{g['bytes_per_rank']:,}",
                g["note"],
            )
        console.print(groups)
    checks = Table(title="assumption checklist")
    for col in ("assumption", "holds", "basis", "why"):
        checks.add_column(col)
    for a in result.assumptions:
        checks.add_row(
            a.text, {True: "yes", False: "no", None: "unconfirmed"}[a.holds], a.basis, a.reason
        )
    console.print(checks)
    ledger = Table(title="ledger (provenance)")
    for col in ("field", "value", "source", "where", "note / conflict"):
        ledger.add_column(col, overflow="fold")
    for e in result.ledger:
        note = e.note + (f" CONFLICT: {e.conflict}" if e.conflict else "")
        ledger.add_row(e.field, str(e.value), e.source, e.location, note)
    console.print(ledger)
    for note in result.notes:
        console.print(f"note: {note}")
