"""``kvbudget bench``'s result on the terminal: the ``--json`` document and the rich tables."""

from __future__ import annotations

from typing import Any


def bench_json(doc: Any) -> dict[str, Any]:
    """The ``--json`` document: summary fields on top, then the details."""
    out: dict[str, Any] = dict(doc.summary)
    out["server_metrics"] = {
        name: {
            k: entry.get(k)
            for k in ("samples", "min", "max", "last", "baseline", "delta", "rate_per_s")
            if k in entry
        }
        for name, entry in doc.server_metrics.items()
    }
    out["statistics"] = doc.statistics
    out["accounting"] = doc.accounting
    out["warnings"] = doc.warnings
    out["failures"] = doc.failures
    out["server"] = doc.server
    out["prompts"] = doc.prompts
    out["engine_report"] = doc.engine_report
    out["provenance"] = doc.provenance.model_dump()
    out["scrape"] = doc.scrape
    out["schema_version"] = doc.schema_version
    out["created"] = doc.created
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.2f} ms"


def render_bench(doc: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    s = doc.summary
    a = doc.accounting
    console = Console()
    console.print(
        f"[bold]kvbudget bench[/] — {doc.provenance.label()}  (POST "
        f"{doc.server.get('endpoint_url') or doc.server.get('base_url')}, model "
        f"{doc.server.get('model_sent')})"
    )
    if doc.provenance.note:
        console.print(f"note: {doc.provenance.note}")
    t = Table(show_header=True, header_style="bold")
    t.add_column("requests")
    t.add_column("value", justify="right")
    for key in (
        "requests_total",
        "requests_ok",
        "requests_error",
        "requests_cancelled",
        "requests_warmup",
    ):
        t.add_row(key.removeprefix("requests_"), str(s[key]))
    t.add_row("offered / sent / not sent", f"{a['offered']} / {a['sent']} / {a['not_sent']}")
    if s["errors_by_kind"]:
        t.add_row("errors by kind", ", ".join(f"{k}={v}" for k, v in s["errors_by_kind"].items()))
    console.print(t)
    for w in a.get("per_worker", []):
        console.print(
            f"ray worker {w['worker']} on {w['node']}: clock offset {w['clock_offset_s']:+.6f} s "
            f"(rtt {w['clock_rtt_s'] * 1e3:.2f} ms), sent {w['sent'] if w['sent'] is not None else '?'}"
            f" = ok {w['ok']} + error {w['error']} + cancelled {w['cancelled']}"
            + (f"  LOST: {w['lost']}" if w["lost"] else "")
        )
    from kvbudget.metrics.percentile_set import percentile_name, reported_percentiles

    names = [percentile_name(q) for q in reported_percentiles(s["metric_percentiles"])]
    lat = Table(show_header=True, header_style="bold")
    for col in ("metric", "mean", "median", *names):
        lat.add_column(col, justify="right" if col != "metric" else "left")
    for name in ("ttft", "tpot", "itl", "e2e"):
        lat.add_row(
            name,
            _ms(s.get(f"{name}_mean_s")),
            _ms(s.get(f"{name}_median_s")),
            *(_ms(s.get(f"{name}_{p}_s")) for p in names),
        )
    lat.add_row(
        "schedule_lag",
        "-",
        _ms(s.get("schedule_lag_p50_s")),
        *(_ms(s.get(f"schedule_lag_{p}_s")) for p in names),
    )
    console.print(lat)
    if "goodput_requests" in s:
        slo = ", ".join(f"{k} <= {v:g} ms" for k, v in s["goodput_slo_ms"].items())
        frac = s["goodput_fraction"]
        rate = s["goodput_requests_per_s"]
        console.print(
            f"goodput ({slo}): {s['goodput_requests']} of {s['requests_total']} requests met "
            f"every SLO ({'-' if frac is None else f'{frac:.1%}'}), "
            f"{'-' if rate is None else f'{rate:,.2f}'} requests/s"
        )
    tput = s.get("output_tokens_per_s")
    rps = s.get("requests_per_s")
    console.print(
        f"throughput: {'-' if tput is None else f'{tput:,.1f}'} output tokens/s, "
        f"{'-' if rps is None else f'{rps:,.2f}'} requests/s over {s['window_s']:.2f} s; "
        f"client CPU {a['client_cpu_s']:.2f} s"
    )
    if s.get("token_count_check"):
        console.print(f"token count check: {s['token_count_check']}")
    for name, entry in doc.server_metrics.items():
        if name.endswith("_bucket"):
            continue
        extra = f", delta {entry['delta']:g}" if "delta" in entry else ""
        console.print(
            f"server {name}: last {entry['last']:g} (min {entry['min']:g}, max {entry['max']:g}{extra})"
        )
    small = [w for w in doc.warnings if "needed; the estimate rests" in w]
    for w in doc.warnings:
        if w not in small:
            console.print(f"[yellow]warning:[/] {w}")
    if small:
        which = ", ".join(w.split(" from ")[0] for w in small)
        console.print(
            f"[yellow]warning:[/] too few samples for {which} (the q-quantile needs 10/(1-q) "
            "samples; see --json statistics for the confidence intervals)"
        )
