"""``kvbudget sim``'s summary as text on the terminal."""

from __future__ import annotations

from typing import Any


def render_summary(summary: dict[str, Any]) -> str:
    def f(value: Any, unit: str = "", scale: float = 1.0) -> str:
        return "n/a" if value is None else f"{value * scale:.3f}{unit}"

    lines = [
        f"kvbudget sim  (figures: simulated, timing model: {summary['timing_model']}, "
        f"router: {summary['router']})",
        f"  requests completed   {summary['requests_completed']} of {summary['requests_total']}"
        + (
            f"  ({summary['requests_cancelled']} cancelled by the client)"
            if summary["requests_cancelled"]
            else ""
        )
        + (
            f"  ({summary['requests_unfinished']} unfinished, see --records-out)"
            if summary["requests_unfinished"]
            else ""
        ),
        *_latency_lines(summary, f),
        f"  prefix hit rate      {summary['prefix_hit_rate_tokens'] * 100:.1f}% of prompt tokens "
        f"({summary['prefix_cache_hits_tokens']} / {summary['prefix_cache_queries_tokens']}), "
        f"{summary['prefix_hit_rate_requests'] * 100:.1f}% of requests",
        f"  preemptions          {summary['num_preemptions']}",
        f"  GPU KV blocks        {summary['num_gpu_blocks']} "
        f"({', '.join(f'{k}: {v}' for k, v in summary['num_gpu_blocks_by_replica'].items())})",
        f"  output throughput    {summary['output_tokens_per_s']:.1f} tokens/s",
        f"  simulated / wall     {summary['simulated_s']:.2f} s / {summary['wall_s']:.2f} s",
        f"  simulator build      {summary['simulator_build']}",
    ]
    if "async_scheduling" in summary:
        asynchronous = summary["async_scheduling"]
        lines.insert(
            1,
            f"  async scheduling     {'on' if asynchronous['enabled'] else 'off'}: "
            f"{asynchronous['reason']}",
        )
    for reason, count in list(summary.get("unfinished_reasons", {}).items())[:3]:
        lines.append(f"  unfinished ({count}): {reason}")
    lines.extend(f"  note: {note}" for note in summary.get("notes", []))
    return "\n".join(lines)


def _latency_lines(summary: dict[str, Any], f: Any) -> list[str]:
    """``TTFT mean / p50 / p90 / ...`` lines of the chosen percentiles."""
    from kvbudget.metrics.percentile_set import percentile_name, reported_percentiles

    names = [percentile_name(q) for q in reported_percentiles(summary["metric_percentiles"])]
    lines = []
    for metric, unit, scale in (
        ("ttft", " s", 1.0),
        ("tpot", " ms", 1e3),
        ("itl", " ms", 1e3),
        ("e2e", " s", 1.0),
    ):
        head = f"{metric.upper()} mean / {' / '.join(names)}"
        values = [summary[f"{metric}_mean_s"], *(summary[f"{metric}_{n}_s"] for n in names)]
        lines.append(f"  {head:<20} " + " / ".join(f(v, unit, scale) for v in values))
    return lines
