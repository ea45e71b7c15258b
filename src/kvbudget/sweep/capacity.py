"""``kvbudget sweep --slo``: the highest load meeting an SLO at each configuration of the grid.

A *configuration* is a grid point without its arrival rate (points that differ only in
``rate_per_s`` share one). For each, :func:`capacity_row` runs ``kvbudget capacity``'s search on
the simulator (:class:`kvbudget.maxload.sim_probe.SimProbe`, :func:`kvbudget.maxload.run.
find_capacity`, one seed: the configuration's own ``seed``; probes of ``--capacity-requests``
requests, the rate confirmed by a run four times as long), so a row is exactly ``kvbudget
capacity --scenario`` of that configuration's scenario with ``--seeds 1``. The row quotes the
SLO's own figures (its percentiles, e.g. ``ttft_p95_s``) at the highest passing rate.

:func:`cheapest_for_rates` then answers "which configuration serves R requests/s within the SLO
for the least": among the configurations whose highest rate is at least ``R``, the lowest
``cost_usd_per_hour`` (without prices: the fewest GPUs; ties to the higher max rate).

Rows are appended to ``capacity.jsonl`` as they finish; their key hashes the configuration's
scenario, the SLO and the probe length, so ``--resume`` skips the searches already done.
"""

from __future__ import annotations

import copy
import hashlib
import os
import time
from collections.abc import Sequence
from typing import Any

from kvbudget import __version__
from kvbudget.errors import KvbudgetError
from kvbudget.sweep.grid import GridFile, SweepPoint
from kvbudget.sweep.table import configuration_fields

CAPACITY_FILE = "capacity.jsonl"
#: the rate's answer is confirmed by a run with this many times the probe's requests
#: (kvbudget capacity's CONFIRM_FACTOR)
CONFIRM_FACTOR = 4
DEFAULT_CAPACITY_REQUESTS = 200


def configurations(
    points: Sequence[SweepPoint], slo_text: str, num_requests: int
) -> list[SweepPoint]:
    """One point per configuration (the arrivals dropped), keyed by scenario, SLO and length."""
    from kvbudget.sweep.grid import point_key

    out: list[SweepPoint] = []
    seen: set[str] = set()
    for p in points:
        scenario = copy.deepcopy(p.scenario)
        (scenario.get("workload") or {}).pop("arrivals", None)
        base = point_key(scenario)
        text = f"{base}|{slo_text}|{num_requests}"
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        if key in seen:
            continue
        seen.add(key)
        axes = {k: v for k, v in p.axes.items() if k != "rate_per_s"}
        out.append(SweepPoint(key=key, axes=axes, scenario=scenario))
    return out


def capacity_row(point: SweepPoint, slo_text: str, num_requests: int) -> dict[str, Any]:
    """The highest rate and concurrency meeting ``slo_text`` at one configuration."""
    from kvbudget.maxload.run import find_capacity
    from kvbudget.maxload.sim_probe import SimProbe
    from kvbudget.maxload.slo import parse_slo
    from kvbudget.sim.scenario import scenario_async_scheduling, scenario_from_dict

    wall0 = time.perf_counter()
    row: dict[str, Any] = {
        "key": point.key,
        "figures": "simulated",
        "slo": slo_text,
        **point.axes,
        "num_gpus": int(point.axes["tp"]) * int(point.axes["replicas"]),
        "seed": point.scenario.get("seed", 0),
        "num_requests": num_requests,
        "kvbudget_version": __version__,
        "worker_pid": os.getpid(),
    }
    slo = parse_slo(slo_text)
    try:
        scenario = scenario_from_dict(dict(point.scenario), origin="the sweep configuration")
        probe = SimProbe.from_scenario(scenario, slo, num_requests=num_requests)
        cap = find_capacity(
            probe,
            slo,
            saturation_concurrency=probe.setup.config.max_num_seqs * scenario.replicas,
            num_requests=num_requests,
            seeds=[scenario.seed],
            confirm=probe.longer(CONFIRM_FACTOR),
        )
    except KvbudgetError as exc:
        row.update(status="not-run", reason=exc.one_line(), timing_model=None)
        row["wall_s"] = time.perf_counter() - wall0
        return row
    rate, conc = cap.rate.main, cap.concurrency.main
    asynchronous = scenario_async_scheduling(scenario)
    row.update(
        status="simulated",
        timing_model=probe.timing_model,
        async_scheduling_enabled=asynchronous.enabled,
        async_scheduling_reason=asynchronous.reason,
        max_rate_per_s=rate.answer,
        max_rate_confirmed=rate.confirmed,
        binding_constraint=rate.binding_constraint,
        max_concurrency=None if conc.answer is None else int(conc.answer),
        binding_constraint_concurrency=conc.binding_constraint,
        failing_rate_per_s=None if rate.failing is None else rate.failing.load,
        reason=None,
    )
    # the SLO's own figures (its percentiles, not p99 by default) at the highest passing rate
    passing = rate.passing
    for term in slo.statistic_terms:
        row[f"slo_{term.key}"] = None if passing is None else passing.values.get(term.key)
    if slo.goodput_min is not None:
        row["slo_goodput_fraction"] = None if passing is None else passing.goodput_fraction
    row["wall_s"] = time.perf_counter() - wall0
    return row


def price_rows(rows: Sequence[dict[str, Any]], grid: GridFile) -> list[dict[str, Any]]:
    """Rows with ``cost_usd_per_hour`` (num_gpus x the GPU's price, when priced)."""
    out = []
    for raw in rows:
        row = dict(raw)
        price = grid.gpu_hour_usd.get(str(row.get("gpu")))
        row["cost_usd_per_hour"] = None if price is None else price * int(row["num_gpus"])
        out.append(row)
    return out


def _cost_key(row: dict[str, Any]) -> tuple[float, float, float]:
    per_hour = row.get("cost_usd_per_hour")
    return (
        float(per_hour) if per_hour is not None else float("inf"),
        float(row["num_gpus"]),
        -float(row.get("max_rate_per_s") or 0.0),
    )


def cheapest_for_rates(
    rows: Sequence[dict[str, Any]], rates: Sequence[float], *, priced: bool
) -> list[dict[str, Any]]:
    """Per target rate: the cheapest configuration whose highest rate under the SLO reaches it."""
    out: list[dict[str, Any]] = []
    done = [r for r in rows if r.get("status") == "simulated"]
    for rate in sorted(set(rates)):
        ok = [r for r in done if (r.get("max_rate_per_s") or 0.0) >= rate]
        entry: dict[str, Any] = {
            "target_rate_per_s": rate,
            "by": "cost_usd_per_hour" if priced else "num_gpus",
            "num_configurations": len(done),
            "num_reaching": len(ok),
            "key": None,
        }
        if ok:
            best = min(ok, key=_cost_key)
            entry.update(
                **configuration_fields(best),
                max_rate_per_s=best["max_rate_per_s"],
                binding_constraint=best.get("binding_constraint"),
                timing_model=best.get("timing_model"),
                **{k: v for k, v in best.items() if k.startswith("slo_")},
            )
        out.append(entry)
    return out


def _figures(row: dict[str, Any]) -> str:
    parts = []
    for k, v in row.items():
        if not k.startswith("slo_") or k == "slo" or v is None:
            continue
        name = k.removeprefix("slo_").removesuffix("_s")
        parts.append(f"{name} {v:.3g}" if name == "goodput_fraction" else f"{name} {v:.3g} s")
    return ", ".join(parts)


def capacity_lines(
    slo_text: str, rows: Sequence[dict[str, Any]], answers: Sequence[dict[str, Any]]
) -> list[str]:
    """The terminal's sentences: each configuration's highest rate, then the cheapest per rate."""
    lines = [f"highest Poisson rate meeting --slo {slo_text!r} (simulated) per configuration:"]
    for r in sorted(rows, key=lambda r: -(r.get("max_rate_per_s") or 0.0)):
        label = (
            f"{r['num_gpus']} x {r['gpu']} ({r['model']}, tp={r['tp']}, replicas={r['replicas']}, "
            f"kv_dtype={r['kv_dtype']})"
        )
        if r.get("status") != "simulated":
            lines.append(f"  {label}: not run ({r.get('reason')})")
        elif r.get("max_rate_per_s") is None:
            lines.append(
                f"  {label}: none (the lowest rate probed failed: {r['binding_constraint']})"
            )
        else:
            lines.append(
                f"  {label}: {r['max_rate_per_s']:.3g} req/s (binding: "
                f"{r['binding_constraint'] or 'none failed'}; at it {_figures(r)})"
            )
    for a in answers:
        head = f"for {a['target_rate_per_s']:g} req/s under {slo_text!r}"
        if a["key"] is None:
            lines.append(f"{head}: no configuration reaches it (0 of {a['num_configurations']})")
            continue
        cost = f", ${a['cost_usd_per_hour']:.2f}/h" if a["cost_usd_per_hour"] is not None else ""
        lines.append(
            f"{head}: cheapest is {a['num_gpus']} x {a['gpu']} ({a['model']}, tp={a['tp']}, "
            f"replicas={a['replicas']}, kv_dtype={a['kv_dtype']}){cost}, holding up to "
            f"{a['max_rate_per_s']:.3g} req/s ({_figures(a)} at it; simulated, "
            f"{a['timing_model']}; {a['num_reaching']} of {a['num_configurations']} "
            f"configurations reach it; key {a['key']})"
        )
    return lines
