"""Rich tables for ``kvbudget plan`` and ``kvbudget gpus``."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvbudget.capacity.budget import ThreeBudgets
from kvbudget.capacity.engines.registry import engine_entry
from kvbudget.capacity.memory import MemoryTerm
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.capacity.scenarios import ScenarioResult
from kvbudget.capacity.window_charge import window_charges
from kvbudget.spec.hardware import GpuSpec
from kvbudget.units import GiB, format_bytes


def _gib(num_bytes: int | float) -> str:
    return f"{num_bytes / GiB:.2f}"


def _term_row(table: Table, term: MemoryTerm, note: str = "") -> None:
    table.add_row(term.name, _gib(term.num_bytes), term.source, escape(note or term.method))


#: the scenario table's columns, in order; below ``_WIDE_SCENARIOS_COLUMNS`` terminal columns the
#: table is drawn transposed (one column per scenario) so no header or value is truncated
_SCENARIO_FIELDS = (
    "scenario",
    "median/p95 tokens",
    "peak conc.",
    "seqs/replica",
    "limited by",
    "replicas",
    "GPUs",
    "headroom",
    "CPU tier host",
)
_WIDE_SCENARIOS_COLUMNS = 120


def _scenario_cells(e: ScenarioResult) -> tuple[str, ...]:
    return (
        escape(e.scenario.name),
        f"{e.scenario.lengths.median_tokens:,}/{e.scenario.lengths.p95_tokens:,}",
        str(e.scenario.concurrency),
        str(e.per_replica_capacity),
        e.limited_by,
        "-" if e.replicas_needed is None else str(e.replicas_needed),
        "-" if e.gpus_needed is None else str(e.gpus_needed),
        "-" if e.headroom_fraction is None else f"{e.headroom_fraction:+.0%}",
        format_bytes(e.cpu_kv_host_bytes) if e.cpu_kv_host_bytes else "-",
    )


def _scenario_table(title: str, scenarios: Sequence[ScenarioResult], *, width: int) -> Table:
    rows = [_scenario_cells(e) for e in scenarios]
    if width >= _WIDE_SCENARIOS_COLUMNS:
        table = Table(title=title)
        for col in _SCENARIO_FIELDS:
            table.add_column(col)
        for row in rows:
            table.add_row(*row)
        return table
    table = Table(title=title)
    table.add_column(_SCENARIO_FIELDS[0], no_wrap=True)
    for row in rows:
        table.add_column(row[0])
    for i, field in enumerate(_SCENARIO_FIELDS[1:], start=1):
        table.add_row(field, *(row[i] for row in rows))
    return table


def pool_vs_structural(result: PlanResult, budgets: ThreeBudgets) -> str | None:
    """One sentence when the engine pool is far from the structural budget (1.5x or more either
    way), splitting the ratio into its two causes: bytes per token (TP replication: MLA's latent
    and KV heads fewer than TP ranks are stored whole on every rank) and tokens (the pool fills
    the memory left, the structural budget counts ``floor(max_concurrency)`` max-length
    sequences; windows, blocks and padding)."""
    s = budgets.structural
    if s.total_bytes <= 0 or s.bytes_per_token <= 0:
        return None
    ratio = budgets.engine_pool_bytes_replica / s.total_bytes
    if 1 / 1.5 < ratio < 1.5:
        return None
    replication = result.kv_bytes_per_token_replica / s.bytes_per_token
    parts = [f"it is {ratio:.2f}x the structural figure"]
    if replication >= 1.05:
        parts.append(
            f"{replication:.2f}x of that is bytes per token: the {result.num_gpus} GPUs store "
            f"{result.kv_bytes_per_token_replica:,} B per token together against "
            f"{s.bytes_per_token:,} B of K/V data (each rank keeps its own copy of what TP "
            "cannot split: an MLA latent, or KV heads fewer than the TP ranks)"
        )
    rest = ratio / max(replication, 1.0)
    parts.append(
        f"{rest:.2f}x is tokens: the pool holds {budgets.engine_pool_tokens:,} tokens (all the "
        f"memory left for KV) while the structural figure counts {s.num_sequences} x "
        f"{result.max_model_len:,} tokens (windows, blocks and padding included there)"
    )
    return "; ".join(parts)


def render_plan(
    result: PlanResult,
    budgets: ThreeBudgets,
    scenarios: Sequence[ScenarioResult],
    *,
    default_scenarios_used: bool,
    console: Console | None = None,
    close_call_text: str | None = None,
) -> None:
    out = console or Console(soft_wrap=False)
    head = Table(title="kvbudget plan (computed, not measured)", show_header=False)
    head.add_column("field", style="bold")
    head.add_column("value")
    head.add_row("model", escape(result.model_id))
    head.add_row("engine", f"{result.engine} {result.engine_version}")
    head.add_row(
        "gpu",
        f"{result.gpu.id}: {format_bytes(result.gpu.memory_bytes)} ({escape(result.gpu.memory_source)})"
        if result.device_given
        else f"not given ({escape(result.gpu.memory_source)})",
    )
    head.add_row(
        "parallel", f"TP {result.tp} x PP {result.pp} = {result.num_gpus} GPU(s) per replica"
    )
    head.add_row("kv dtype / block", f"{result.kv_dtype} / {result.block_size} tokens")
    head.add_row("max_model_len", f"{result.max_model_len:,}")
    head.add_row("max_num_batched_tokens", f"{result.max_num_batched_tokens:,}")
    head.add_row("max_num_seqs", f"{result.max_num_seqs:,}")
    for key, why in result.defaults_applied.items():
        head.add_row(f"default: {key}", escape(why))
    out.print(head)

    entry = engine_entry(result.engine)  # its registered words: no branch on the name here
    words = entry.wording
    mem = Table(title="Engine memory per GPU (GiB)")
    for col in ("term", "GiB", "source", "method"):
        mem.add_column(col)
    for rank in result.ranks:
        if result.pp > 1:
            mem.add_row(f"[bold]stage {rank.pp_rank}[/bold]", "", "", f"{rank.num_layers} layers")
        how = words.requested.format(utilization=rank.gpu_memory_utilization)
        if result.device_given:
            mem.add_row("requested", _gib(rank.requested_bytes), "computed", how)

        _term_row(mem, rank.weights)
        _term_row(mem, rank.activation)
        _term_row(mem, rank.non_torch)
        if not words.graphs_by_version:
            _term_row(mem, rank.cudagraph)
        else:
            sub = (
                "subtracted"
                if rank.cudagraph_subtracted
                else "NOT subtracted by this version (sits on top)"
            )
            _term_row(mem, rank.cudagraph, f"{sub}; {rank.cudagraph.method}")
        if rank.kv_cache_memory_override:
            avail_how = "--kv-cache-memory (overrides all terms)"
        else:
            avail_how = words.available
        mem.add_row("available KV", _gib(rank.available_kv_bytes), "computed", avail_how)
    out.print(mem)

    pool = Table(title="KV cache pool")
    for col in ("group", "kind", "layers", "padding", "block", "page bytes", "window/chunk"):
        pool.add_column(col)
    for g in result.groups:
        pool.add_row(
            str(g.group_id),
            g.kind,
            str(g.num_layers),
            str(g.num_padding_layers),
            str(g.block_size),
            f"{g.page_size_bytes:,}",
            str(g.sliding_window or g.attention_chunk_size or ""),
        )
    out.print(pool)
    summary = Table(show_header=False)
    summary.add_column("k", style="bold")
    summary.add_column("v")
    summary.add_row(
        "num_blocks",
        f"{result.num_blocks:,} (usable {result.num_usable_blocks:,}; block 0 is the null block)"
        if not entry.token_pool
        else f"{result.num_blocks:,} pages of {result.block_size} token(s)",
    )
    summary.add_row(
        "kv_cache_tokens", f"{result.kv_cache_tokens:,} (as v{result.engine_version} logs it)"
    )
    summary.add_row(
        "max_concurrency", f"{result.max_concurrency:.2f}x at {result.max_model_len:,} tokens"
    )
    summary.add_row(
        "KV bytes per token",
        f"{result.kv_bytes_per_token_per_rank:,} per GPU, {result.kv_bytes_per_token_replica:,} per replica",
    )
    sg = result.sglang
    if sg is not None and sg.max_mamba_cache_size is not None:
        summary.add_row(
            "mamba state pool",
            f"{(sg.mamba_pool_bytes or 0) // (sg.mamba_state_bytes_per_request or 1):,} "
            f"slots (max_mamba_cache_size {sg.max_mamba_cache_size:,}) x "
            f"{sg.mamba_state_bytes_per_request or 0:,} B = "
            f"{_gib(sg.mamba_pool_bytes or 0)} GiB per GPU, before the token pool "
            f"(mamba_full_memory_ratio {sg.mamba_full_memory_ratio})",
        )
    for line in result.log_lines:
        summary.add_row("engine log", escape(line))
    fit = "[green]yes[/green]" if result.fits else "[red]NO[/red]"
    summary.add_row("one max-length request fits", f"{fit} (needs {_gib(result.needed_bytes)} GiB)")
    if close_call_text:
        summary.add_row("verdict", f"[yellow]{escape(close_call_text)}[/yellow]")
    if result.error:
        summary.add_row("engine error", f"[red]{escape(result.error)}[/red]")
    if result.estimated_max_model_len is not None:
        summary.add_row("estimated max model len", f"{result.estimated_max_model_len:,}")
    for remedy in result.remedies:
        summary.add_row("knob", escape(remedy))
    out.print(summary)
    charges = window_charges(result)
    if charges:
        out.print("why max_concurrency charges the window groups more blocks than they keep:")
        for line in charges.lines():
            out.print(f"- {escape(line)}")

    bud = Table(title="Three budgets (never substituted for one another)")
    for col in ("budget", "figure", "what it answers"):
        bud.add_column(col)
    s = budgets.structural
    bud.add_row(
        "structural",
        f"{format_bytes(s.total_bytes)} for {s.num_sequences} x {result.max_model_len:,} tokens",
        "how big the K/V data is (model structure only)",
    )
    bud.add_row(
        "engine pool",
        f"{format_bytes(budgets.engine_pool_bytes_replica)} per replica",
        "what the engine allocates for KV",
    )
    if not budgets.device_peak:
        bud.add_row("device peak", "not computed", "no device given; pass --gpu to check it")
    for peak in budgets.device_peak:
        if peak.ok:
            verdict = (
                f"[green]ok[/green]: headroom >= the {_gib(peak.margin_bytes)} GiB safety margin"
            )
        else:
            verdict = (
                f"[red]tight[/red]: headroom < the {_gib(peak.margin_bytes)} GiB safety margin"
            )
        bud.add_row(
            f"device peak (stage {peak.pp_rank})",
            f"{_gib(peak.peak_bytes)} of {_gib(peak.device_bytes)} GiB, headroom "
            f"{_gib(peak.headroom_bytes)} GiB; {verdict}",
            "context + weights + activation + non-torch + graphs + KV pool",
        )
    out.print(bud)
    pool_note = pool_vs_structural(result, budgets)
    if pool_note:
        out.print(f"why the engine pool differs from the structural budget: {escape(pool_note)}")

    if scenarios:
        title = "Scenarios" + (
            " (kvbudget defaults: planning assumptions, replace with your data)"
            if default_scenarios_used
            else ""
        )
        out.print(_scenario_table(title, scenarios, width=out.width))
        gates = {(e.scenario.quality_gate, tuple(e.scenario.stop_conditions)) for e in scenarios}
        for e in scenarios if len(gates) > 1 else scenarios[:1]:
            sc_ = e.scenario
            who = escape(sc_.name) if len(gates) > 1 else "all scenarios"
            out.print(
                f"{who}: quality gate: {escape(sc_.quality_gate)}; "
                f"stop if: {escape('; '.join(sc_.stop_conditions))}"
            )
        durations = ", ".join(
            f"{escape(e.scenario.name)} {e.scenario.duration_s:g} s" for e in scenarios
        )
        out.print(f"peak durations: {durations} ({escape(scenarios[0].scenario.label)})")
    for note in result.notes:
        out.print(f"note: {escape(note)}")


def render_gpus(catalog: Sequence[GpuSpec], console: Console | None = None) -> None:
    """The catalog's numbers in one narrow table (no column wraps at 80 terminal columns), then
    each GPU's interconnect and memory source as a line of its own (those are sentences)."""
    out = console or Console(soft_wrap=False)
    table = Table(title="GPU catalog (dense tensor TFLOPS; memory as the device reports it)")
    for col in ("id", "memory MiB", "bf16 TFLOPS", "fp8 TFLOPS", "HBM GB/s", "link GB/s"):
        table.add_column(col, no_wrap=True, justify="left" if col == "id" else "right")
    for g in catalog:
        table.add_row(
            g.id,
            f"{g.memory_mib:,.0f}",
            "-" if g.bf16_dense_tflops is None else f"{g.bf16_dense_tflops:,.1f}",
            "-" if g.fp8_dense_tflops is None else f"{g.fp8_dense_tflops:,.1f}",
            "-" if g.hbm_bandwidth_gb_s is None else f"{g.hbm_bandwidth_gb_s:,.0f}",
            "-" if g.interconnect_gb_s is None else f"{g.interconnect_gb_s:,.0f}",
        )
    out.print(table)
    out.print("Interconnect and memory source per GPU:")
    for g in catalog:
        out.print(
            f"  {g.id}: {escape(g.interconnect)}; memory {escape(g.memory_source)}", soft_wrap=True
        )
    out.print("Sources per value: kvbudget gpus --json")
