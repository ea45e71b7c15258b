"""Predicted vs measured: the calibrated simulator's forecast beside each measured cell.

When a measured run (``target.kind: http``) also names a step-time profile
(``target.profile``, fitted by ``kvbudget calibrate``), the same requests (same seeds) run on the
simulator with that profile, and every measured cell carries the prediction and its relative
error for TTFT and TPOT (p50, p95), output throughput and peak KV usage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.result import CellResult

#: (name in the prediction, how to read it from a cell)
QUANTITIES: tuple[tuple[str, str, str], ...] = (
    ("ttft_p50_s", "ttft_s", "p50"),
    ("ttft_p95_s", "ttft_s", "p95"),
    ("tpot_p50_s", "tpot_s", "p50"),
    ("tpot_p95_s", "tpot_s", "p95"),
)


def _read(cell: CellResult) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, metric, pct in QUANTITIES:
        summary = cell.summaries.get(metric)
        out[name] = summary.pct(pct) if summary else None
    out["output_tokens_per_s"] = cell.throughput.get("output_tokens_per_s")
    out["peak_kv_usage"] = cell.peak_kv_usage
    return out


def prediction_table(
    measured: CellResult,
    predicted: CellResult,
    label: str,
    *,
    engine_behaviour: str | None = None,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """Predicted value, measured value and relative error ``(pred - meas) / meas`` per quantity;
    ``model`` names the timing model and the engine behaviour profile used."""
    m, p = _read(measured), _read(predicted)
    rows = {}
    for key in m:
        mv, pv = m[key], p[key]
        err = (pv - mv) / mv if (mv not in (None, 0.0) and pv is not None) else None
        rows[key] = {"predicted": pv, "measured": mv, "relative_error": err}
    out: dict[str, Any] = {"kind": "simulated", "model": label, "quantities": rows}
    if engine_behaviour is not None:
        out["engine_behaviour"] = engine_behaviour
    if warnings:
        out["warnings"] = list(warnings)
    return out


def attach_predictions(
    plan: AcceptPlan,
    measured: Sequence[CellResult],
    predicted: Sequence[CellResult],
    label: str,
    *,
    engine_behaviour: str | None = None,
    warnings: Mapping[str, Sequence[str]] | None = None,
) -> list[CellResult]:
    by_id = {c.cell_id: c for c in predicted}
    out = []
    for cell in measured:
        twin = by_id.get(cell.cell_id)
        if twin is None or not cell.summaries or not twin.summaries:
            out.append(cell)
            continue
        table = prediction_table(
            cell,
            twin,
            label,
            engine_behaviour=engine_behaviour,
            warnings=(warnings or {}).get(cell.cell_id, ()),
        )
        out.append(cell.model_copy(update={"prediction": table}))
    return out
