"""The sweep's table: derived columns (cost, SLO verdicts), CSV / Parquet, the cheapest per SLO.

``results.jsonl`` holds the raw simulated rows (appended as points finish; the resume source).
SLOs and prices are applied here, when the table is written, so changing them needs no new
simulation. A point *meets* an SLO when it was simulated, every request finished, its queue did
not grow (``stable`` is not false: a rate past what the point serves is not sustainable,
whatever its percentiles over a short run), and each percentile ceiling holds
(``ttft_p99_s <= ttft_s.p99`` ...). The cheapest point is quoted at the SLO's own percentiles.

Latency columns: for TTFT, TPOT, ITL and E2E the mean, the median and each percentile of
``--metric-percentiles`` (vLLM bench serve's flag; default 50,90,95,99), with p50, p99 and every
percentile a grid SLO or ``--slo`` names added (:func:`point_percentiles`), so an SLO is always
checked and quoted at its own percentile.

Cost (when ``gpu_hour_usd`` prices the point's GPU): ``cost_usd_per_hour = num_gpus x price``
and ``cost_usd_per_million_output_tokens = cost_usd_per_hour / 3600 / output_tokens_per_s x 1e6``
at the offered arrival rate (computed from simulated throughput).
"""

from __future__ import annotations

import csv
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvbudget.metrics.percentile_set import DEFAULT_METRIC_PERCENTILES, reported_percentiles
from kvbudget.sweep.grid import AXES, GridFile, SweepSlo
from kvbudget.sweep.point import latency_keys

#: columns of results.csv before the latency figures (SLO columns ``meets_<name>`` come last)
HEAD_COLUMNS = (
    "key",
    "status",
    "figures",
    "timing_model",
    "async_scheduling_enabled",
    "async_scheduling_reason",
    *AXES,
    "num_gpus",
    "cost_usd_per_hour",
    "cost_usd_per_million_output_tokens",
    "requests_total",
    "requests_completed",
)
#: columns after the latency figures
TAIL_COLUMNS = (
    "output_tokens_per_s",
    "prefix_hit_rate_tokens",
    "num_preemptions",
    "num_gpu_blocks",
    "kv_usage_peak",
    "stable",
    "queue_ttft_growth_s_per_s",
    "simulated_s",
    "wall_s",
    "cpu_s",
    "seed",
    "kvbudget_version",
    "reason",
)


def point_percentiles(
    grid: GridFile,
    chosen: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
    extra: Sequence[float] = (),
) -> tuple[float, ...]:
    """The percentiles each point is simulated for: ``chosen`` (``--metric-percentiles``), p50
    and p99, every grid SLO's and ``extra`` (``--slo``'s pNN terms)."""
    named = [
        float(p[1:]) for slo in grid.slos for c in (slo.ttft_s, slo.tpot_s) for p, _ in c.items()
    ]
    return reported_percentiles([*chosen, *named, *extra])


def has_figures(row: dict[str, Any], percentiles: Sequence[float]) -> bool:
    """Whether a simulated row holds every latency figure at ``percentiles`` (a row from a run
    with other ``--metric-percentiles`` does not, and is simulated again on ``--resume``)."""
    return row.get("status") != "simulated" or all(k in row for k in latency_keys(percentiles))


def meets(row: dict[str, Any], slo: SweepSlo) -> bool:
    """Whether a row meets ``slo`` (simulated, all requests finished, every ceiling held)."""
    if row.get("status") != "simulated" or row.get("requests_completed") != row.get(
        "requests_total"
    ):
        return False
    if row.get("stable") is False:  # the queue grew: not sustainable (older rows: None)
        return False
    for metric, ceilings in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s)):
        for pct, ceiling in ceilings.items():
            value = row.get(f"{metric}_{pct}_s")
            if value is None or value > ceiling:
                return False
    return True


def derive(rows: Sequence[dict[str, Any]], grid: GridFile) -> list[dict[str, Any]]:
    """Rows with cost and ``meets_<slo>`` columns, in a stable order."""
    out: list[dict[str, Any]] = []
    for raw in rows:
        row = dict(raw)
        price = grid.gpu_hour_usd.get(str(row.get("gpu")))
        per_hour = None if price is None else price * int(row["num_gpus"])
        row["cost_usd_per_hour"] = per_hour
        tput = row.get("output_tokens_per_s") or 0.0
        row["cost_usd_per_million_output_tokens"] = (
            per_hour / 3600.0 / tput * 1e6 if per_hour is not None and tput > 0 else None
        )
        for slo in grid.slos:
            row[f"meets_{slo.name}"] = meets(row, slo)
        out.append(row)
    out.sort(key=_order)
    return out


def _order(row: dict[str, Any]) -> tuple[tuple[int, float, str], ...]:
    """Rows by axis values (numbers numerically, None last), then key."""
    parts: list[tuple[int, float, str]] = []
    for value in [*(row.get(a) for a in AXES), row["key"]]:
        if value is None:
            parts.append((2, 0.0, ""))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            parts.append((0, float(value), ""))
        else:
            parts.append((1, 0.0, str(value)))
    return tuple(parts)


def configuration_fields(row: dict[str, Any]) -> dict[str, Any]:
    """What names a chosen configuration in a cheapest-answer entry: its key, its axes (the
    rate aside), its GPUs and its hourly cost."""
    return {
        "key": row["key"],
        **{a: row.get(a) for a in AXES if a != "rate_per_s"},
        "num_gpus": row["num_gpus"],
        "cost_usd_per_hour": row.get("cost_usd_per_hour"),
    }


def _cost_key(row: dict[str, Any]) -> tuple[float, float, float]:
    per_hour = row.get("cost_usd_per_hour")
    return (
        float(per_hour) if per_hour is not None else float("inf"),
        float(row["num_gpus"]),
        float(row.get("ttft_p99_s") or 0.0),
    )


def slo_values(row: dict[str, Any], slo: SweepSlo) -> dict[str, Any]:
    """The row's figures at the SLO's own percentiles, with their ceilings
    (``{"ttft_p95_s": {"value": 0.21, "ceiling": 0.5}}``)."""
    out: dict[str, Any] = {}
    for metric, ceilings in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s)):
        for pct, ceiling in ceilings.items():
            out[f"{metric}_{pct}_s"] = {"value": row.get(f"{metric}_{pct}_s"), "ceiling": ceiling}
    return out


def _quote(values: dict[str, Any]) -> str:
    """``TTFT p95 0.210 s (<= 0.5 s), TPOT p95 12.0 ms (<= 50 ms)``."""
    parts = []
    for key, v in values.items():
        metric, pct, _ = key.split("_")
        value, ceiling = v["value"], v["ceiling"]
        if metric == "tpot":
            shown = "n/a" if value is None else f"{value * 1e3:.1f} ms"
            parts.append(f"TPOT {pct} {shown} (<= {ceiling * 1e3:g} ms)")
        else:
            shown = "n/a" if value is None else f"{value:.3f} s"
            parts.append(f"TTFT {pct} {shown} (<= {ceiling:g} s)")
    return ", ".join(parts)


def cheapest(rows: Sequence[dict[str, Any]], grid: GridFile) -> list[dict[str, Any]]:
    """Per SLO and arrival rate: the cheapest point meeting it (by $/hour, else by GPUs).

    An SLO that no point meets at a rate is listed with ``key: None`` and the count simulated.
    """
    priced = bool(grid.gpu_hour_usd)
    rates = sorted({r.get("rate_per_s") for r in rows}, key=lambda x: (x is None, x or 0.0))
    answers: list[dict[str, Any]] = []
    for slo in grid.slos:
        for rate in rates:
            at_rate = [r for r in rows if r.get("rate_per_s") == rate]
            ok = [r for r in at_rate if r.get(f"meets_{slo.name}")]
            entry: dict[str, Any] = {
                "slo": slo.name,
                "rate_per_s": rate,
                "by": "cost_usd_per_hour" if priced else "num_gpus",
                "num_points": len(at_rate),
                "num_meeting": len(ok),
                "key": None,
            }
            if ok:
                best = min(ok, key=_cost_key)
                entry.update(
                    **configuration_fields(best),
                    cost_usd_per_million_output_tokens=best.get(
                        "cost_usd_per_million_output_tokens"
                    ),
                    ttft_p99_s=best.get("ttft_p99_s"),
                    tpot_p99_s=best.get("tpot_p99_s"),
                    timing_model=best.get("timing_model"),
                    slo_values=slo_values(best, slo),
                )
            answers.append(entry)
    return answers


def cheapest_lines(answers: Sequence[dict[str, Any]]) -> list[str]:
    """One sentence per (SLO, rate), e.g. for the terminal and summary.md."""
    lines: list[str] = []
    for a in answers:
        head = f"SLO {a['slo']} at {a['rate_per_s']:g} req/s" if a["rate_per_s"] else a["slo"]
        if a["key"] is None:
            lines.append(f"{head}: no configuration meets it (0 of {a['num_points']} points)")
            continue
        cost = (
            f", ${a['cost_usd_per_hour']:.2f}/h"
            + (
                f", ${a['cost_usd_per_million_output_tokens']:.3f} per million output tokens"
                if a["cost_usd_per_million_output_tokens"] is not None
                else ""
            )
            if a["cost_usd_per_hour"] is not None
            else ""
        )
        lines.append(
            f"{head}: cheapest is {a['num_gpus']} x {a['gpu']} ({a['model']}, tp={a['tp']}, "
            f"replicas={a['replicas']}, kv_dtype={a['kv_dtype']}, max_model_len="
            f"{a['max_model_len']}, prefix_caching={a['prefix_caching']}, router={a['router']})"
            f"{cost}; {_quote(a['slo_values'])} "
            f"(simulated, {a['timing_model']}; {a['num_meeting']} of {a['num_points']} "
            f"points meet it; key {a['key']})"
        )
    return lines


def columns(grid: GridFile, percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES) -> list[str]:
    """results.csv's columns: the point, its latency figures at ``percentiles``, the rest, then
    ``meets_<slo>`` per grid SLO."""
    return [
        *HEAD_COLUMNS,
        *latency_keys(percentiles),
        *TAIL_COLUMNS,
        *(f"meets_{s.name}" for s in grid.slos),
    ]


def write_csv(path: Path, rows: Sequence[dict[str, Any]], cols: Sequence[str]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(cols), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: "" if row.get(c) is None else row.get(c) for c in cols})


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def write_parquet(path: Path, rows: Sequence[dict[str, Any]], cols: Sequence[str]) -> None:
    """results.parquet (only called when pyarrow is installed)."""
    import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]

    table = pa.table({c: [r.get(c) for r in rows] for c in cols})
    pq.write_table(table, str(path))


def write_summary(path: Path, answers: Sequence[dict[str, Any]], extra: dict[str, Any]) -> None:
    path.write_text(
        json.dumps({"figures": "simulated", **extra, "cheapest": list(answers)}, indent=2) + "\n",
        encoding="utf-8",
    )
