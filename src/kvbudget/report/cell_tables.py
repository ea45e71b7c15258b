"""Per-cell figures as table rows (shared by the Markdown and HTML reports).

Throughput, goodput, latency percentiles with their CIs, queueing, preemptions, prefix hit
rates by tokens and by requests with their denominators, peak KV use and the measured prompt
and output lengths against the tier's bounds. All in the cell's own figure kind.
"""

from __future__ import annotations

from kvbudget.accept.result import AcceptResult, CellResult
from kvbudget.report.summary import seconds_text


def _fmt(value: float | None, scale: float = 1.0, unit: str = "s") -> str:
    if value is None:
        return "—"
    return f"{value * scale:.3g} {unit}"


def _ratio(num: float | None, den: float | None, unit: str) -> str:
    if num is None or not den:
        return f"— (no {unit} counted)"
    return f"{num:.0f} / {den:.0f} {unit} ({100.0 * num / den:.1f} %)"


def goodput_text(cell: CellResult) -> str:
    bounds = " and ".join(
        f"{m.split('_')[0].upper()} ≤ {seconds_text(v)}" for m, v in cell.goodput_bounds.items()
    )
    if not cell.num_ok:
        return "—"
    rate = cell.throughput.get("goodput_requests_per_s")
    rate_text = f"{rate:.3g} req/s; " if rate is not None else ""
    return (
        f"{rate_text}{cell.num_good} of {cell.num_ok} completed requests meet {bounds or 'no SLO'}"
    )


def lengths_text(doc: AcceptResult, cell: CellResult) -> str:
    tier = doc.plan_view.input_tiers.get(cell.input_tier)
    if cell.prompt_tokens_min is None:
        return "—"
    bounds = f" (tier {tier.min_tokens}–{tier.max_tokens})" if tier else ""
    out = f" (tier {tier.output_tokens})" if tier else ""
    mean_out = "—" if cell.output_tokens_mean is None else f"{cell.output_tokens_mean:.4g}"
    return (
        f"prompt {cell.prompt_tokens_min}–{cell.prompt_tokens_max} tokens{bounds}, "
        f"mean {cell.prompt_tokens_mean or 0:.4g}; output mean {mean_out} tokens{out}"
    )


def duration_text(doc: AcceptResult, cell: CellResult) -> str:
    declared = doc.plan_view.concurrency_tier(cell.concurrency_tier).duration_s
    reps = max(cell.repetitions, 1)
    ran = f"{cell.duration_s / reps:.3g} s per repetition"
    return f"{ran} (declared {declared:g} s)" if isinstance(declared, int | float) else ran


DETAIL_HEADER = ["figure", "value"]


def detail_rows(doc: AcceptResult, cell: CellResult) -> list[list[str]]:
    """Figure / value rows for one cell."""
    queue = cell.summaries.get("queue_s")
    itl = cell.summaries.get("itl_s")
    return [
        [
            "throughput",
            f"{cell.throughput.get('requests_per_s', 0):.3g} req/s, "
            f"{cell.throughput.get('output_tokens_per_s', 0):.4g} output tokens/s"
            if cell.throughput
            else "—",
        ],
        ["goodput", goodput_text(cell)],
        [
            "requests",
            f"{cell.num_requests} sent: {cell.num_ok} ok, {cell.num_error} errors, "
            f"{cell.num_cancelled} cancelled (client), {cell.num_oom} OOM",
        ],
        ["ran", duration_text(doc, cell)],
        [
            "queueing (p50 / p95)",
            "—"
            if queue is None or not queue.n
            else f"{_fmt(queue.pct('p50'))} / {_fmt(queue.pct('p95'))}",
        ],
        [
            "ITL",
            "not recorded by this target (no token times)"
            if itl is None or not itl.n
            else f"p50 {_fmt(itl.pct('p50'))}, p95 {_fmt(itl.pct('p95'))}, "
            f"p99 {_fmt(itl.pct('p99'))} (n={itl.n})",
        ],
        ["preemptions", str(cell.num_preemptions)],
        [
            "prefix hits by tokens",
            _ratio(cell.prefix_hits_tokens, cell.prefix_queries_tokens, "tokens"),
        ],
        [
            "prefix hits by requests",
            _ratio(
                float(cell.num_prefix_hit_requests), float(cell.num_prefix_requests), "requests"
            ),
        ],
        ["peak KV use", _fmt(cell.peak_kv_usage, 100.0, "%")],
        ["KV use after drain", _fmt(cell.kv_usage_after_drain, 100.0, "%")],
        ["lengths", lengths_text(doc, cell)],
        *[["note", n] for n in cell.notes],
    ]
