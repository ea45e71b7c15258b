"""KV offload tiers in acceptance: what the sim target reports per cell and the stop conditions.

The ``sim`` target with ``target.kv_tiers`` runs the simulator's tier model
(:mod:`kvbudget.sim.tiers`), read per cell by
:class:`kvbudget.accept.targets.tier_meter.TierMeter`. Per cell it reports (all ``simulated``):

* ``tier_host_capacity_bytes`` / ``tier_host_peak_bytes`` — the ``cpu`` tier's declared capacity
  and the most bytes it held after any engine step (blocks resident x block bytes);
* ``tier_bytes_written`` / ``tier_bytes_read`` — bytes moved to / reloaded from every tier;
* ``tier_link_busy_fraction`` — the busiest tier link's transfer time / cell duration (above 1
  when queued transfers run past the end of the cell);
* ``tier_reload_wait_p95_s`` — p95 of the time a taken reload waited for busy links
  (``tier_num_reloads`` samples).

Stop conditions: *host memory* fails when the peak exceeds ``host_memory_max_fraction`` of the
capacity (default 0.95 when a cpu tier is configured) or ``host_memory_max_bytes``; *transfer*
fails when the busy fraction exceeds ``transfer_busy_max_fraction`` or the reload wait p95
exceeds ``transfer_stall_max_s``. Without a tier or the series they stay ``untested``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvbudget.accept.plan.checks import DEFAULT_HOST_MEMORY_MAX_FRACTION, StopConditions
from kvbudget.accept.result import STOP_HOST_MEMORY, STOP_TRANSFER, Check, StopStatus
from kvbudget.accept.targets.tier_meter import HOST_TIER
from kvbudget.records import FigureKind

if TYPE_CHECKING:
    from kvbudget.accept.plan.planfile import AcceptPlan
    from kvbudget.accept.result import CellResult
    from kvbudget.accept.targets.base import CellRun

BASIS = (
    "simulated: kvbudget tier model (LRU blocks x block bytes; one FIFO link per tier at the "
    "declared bandwidth)"
)


def summarize_tiers(runs: Sequence[CellRun]) -> dict[str, Any]:
    """One cell's tier figures over its repetitions (peaks and p95s: the worst repetition)."""
    counters = [run.counters for run in runs if "tier_bytes_written" in run.counters]
    if not counters:
        return {}

    def worst(key: str) -> float | None:
        values = [c[key] for c in counters if key in c]
        return max(values) if values else None

    def total(key: str) -> float:
        return sum(c.get(key, 0.0) for c in counters)

    out: dict[str, Any] = {"basis": BASIS}
    capacity = worst("tier_host_capacity_bytes")
    peak = worst("tier_host_peak_bytes")
    if capacity is not None and peak is not None:
        out["host_capacity_bytes"] = capacity
        out["host_peak_bytes"] = peak
        out["host_peak_fraction"] = peak / capacity
        out["host_evictions_blocks"] = total("tier_host_evictions_blocks")
    out["bytes_written"] = total("tier_bytes_written")
    out["bytes_read"] = total("tier_bytes_read")
    out["link_busy_fraction"] = worst("tier_link_busy_fraction")
    out["reload_wait_p95_s"] = worst("tier_reload_wait_p95_s")
    out["num_reloads"] = total("tier_num_reloads")
    out["declined_reloads"] = total("tier_declined_reloads")
    return out


def _host_declared(stop: StopConditions) -> bool:
    return stop.host_memory_max_bytes is not None or stop.host_memory_max_fraction is not None


def _transfer_declared(stop: StopConditions) -> bool:
    return stop.transfer_busy_max_fraction is not None or stop.transfer_stall_max_s is not None


def _judge(
    name: str, stop: str, observed: float, limit: float, unit: str, kind: FigureKind | None
) -> Check:
    failed = observed > limit
    verdict = "fail" if failed else "pass"
    rel = ">" if failed else "<="
    return Check(
        name=name,
        stop=stop,
        verdict=verdict,
        reason=f"{observed:.4g}{unit} {rel} ceiling {limit:.4g}{unit} ({BASIS})",
        observed=observed,
        limit=limit,
        kind=kind,
    )


def tier_checks(plan: AcceptPlan, summary: dict[str, Any], kind: FigureKind | None) -> list[Check]:
    """The host-memory and transfer checks of one cell (none when nothing applies)."""
    stop = plan.stop
    tiers = plan.target.kv_tiers
    has_host = any(t.name == HOST_TIER for t in tiers)
    checks: list[Check] = []
    if has_host or _host_declared(stop):
        if not tiers:
            why = (
                "no KV tier configured (target.kv_tiers); the target reports no host-memory series"
            )
        elif not has_host:
            why = "no cpu tier in target.kv_tiers; no host-memory series"
        elif "host_peak_bytes" not in summary:
            why = "the target reported no host-tier series for this cell"
        else:
            why = ""
        if why:
            checks.append(
                Check(name="host memory", stop=STOP_HOST_MEMORY, verdict="untested", reason=why)
            )
        else:
            fraction = stop.host_memory_max_fraction or DEFAULT_HOST_MEMORY_MAX_FRACTION
            check = _judge(
                "host memory peak/capacity",
                STOP_HOST_MEMORY,
                summary["host_peak_fraction"],
                fraction,
                "",
                kind,
            )
            checks.append(check)
            if stop.host_memory_max_bytes is not None:
                checks.append(
                    _judge(
                        "host memory peak bytes",
                        STOP_HOST_MEMORY,
                        summary["host_peak_bytes"],
                        float(stop.host_memory_max_bytes),
                        " B",
                        kind,
                    )
                )
    if _transfer_declared(stop):
        if not tiers:
            why = "no KV tier configured (target.kv_tiers); the target reports no transfer series"
        elif not summary:
            why = "the target reported no tier transfer series for this cell"
        else:
            why = ""
        if why:
            checks.append(
                Check(name="transfer", stop=STOP_TRANSFER, verdict="untested", reason=why)
            )
            return checks
        busy = summary.get("link_busy_fraction")
        if stop.transfer_busy_max_fraction is not None:
            if busy is None:
                checks.append(
                    Check(
                        name="transfer busy",
                        stop=STOP_TRANSFER,
                        verdict="untested",
                        reason="cell has no duration",
                    )
                )
            else:
                checks.append(
                    _judge(
                        "transfer link busy",
                        STOP_TRANSFER,
                        busy,
                        stop.transfer_busy_max_fraction,
                        "",
                        kind,
                    )
                )
        if stop.transfer_stall_max_s is not None:
            wait = summary.get("reload_wait_p95_s")
            if wait is None:
                checks.append(
                    Check(
                        name="transfer reload wait",
                        stop=STOP_TRANSFER,
                        verdict="untested",
                        reason="no tier reloads in this cell (no reload wait samples)",
                    )
                )
            else:
                checks.append(
                    _judge(
                        "transfer reload wait p95",
                        STOP_TRANSFER,
                        wait,
                        stop.transfer_stall_max_s,
                        " s",
                        kind,
                    )
                )
    return checks


def tier_stop_statuses(plan: AcceptPlan, cells: Sequence[CellResult]) -> list[StopStatus]:
    """The 'host memory' and 'transfer' stop conditions from the cells' checks."""
    stop = plan.stop
    out: list[StopStatus] = []
    has_host = any(t.name == HOST_TIER for t in plan.target.kv_tiers)
    fraction = stop.host_memory_max_fraction or DEFAULT_HOST_MEMORY_MAX_FRACTION
    host_declared = [f"<= {fraction:g} of the cpu tier capacity"]
    if stop.host_memory_max_bytes is not None:
        host_declared.append(f"<= {stop.host_memory_max_bytes} bytes")
    transfer_declared = []
    if stop.transfer_busy_max_fraction is not None:
        transfer_declared.append(f"link busy <= {stop.transfer_busy_max_fraction:g}")
    if stop.transfer_stall_max_s is not None:
        transfer_declared.append(f"reload wait p95 <= {stop.transfer_stall_max_s:g} s")
    rows = []
    if has_host or _host_declared(stop):
        rows.append((STOP_HOST_MEMORY, "; ".join(host_declared)))
    if _transfer_declared(stop):
        rows.append((STOP_TRANSFER, "; ".join(transfer_declared)))
    for name, declared in rows:
        checks = [(c, ch) for c in cells for ch in c.checks if ch.stop == name]
        failed = sorted({c.cell_id for c, ch in checks if ch.verdict == "fail"})
        tested = [ch for _, ch in checks if ch.verdict != "untested"]
        if failed:
            status, detail = "triggered", f"failed in {len(failed)} cell(s) ({BASIS})"
        elif tested:
            status, detail = "not_triggered", f"checked in {len(tested)} cell check(s) ({BASIS})"
        else:
            reasons = sorted({ch.reason for _, ch in checks}) or ["no cell was run"]
            status, detail = "untested", reasons[0]
        out.append(
            StopStatus(name=name, declared=declared, status=status, cells=failed, detail=detail)  # type: ignore[arg-type]
        )
    return out
