"""``kvbudget capacity``'s answer as text: both maxima, what binds, the spread over seeds and every
probed point."""

from __future__ import annotations

from typing import Any

from kvbudget.cli.capacity_search import CONFIRM_FACTOR


def _fmt(value: float | None, scale: float = 1.0, unit: str = "") -> str:
    return "n/a" if value is None else f"{value * scale:.3g}{unit}"


def _answer_line(label: str, doc: dict[str, Any], key: str, binding: str, unit: str) -> str:
    seeds = doc[f"{key}_across_seeds"]
    value = doc[key]
    if value is None and doc[binding] is None:
        head = f"not found (the search stopped: {doc.get('stopped') or 'no probe ran'})"
    elif value is None:
        head = f"none (the lowest load probed failed: {doc[binding]})"
    else:
        head = f"{value:.3g}{unit}  (binding: {doc[binding] or 'none failed up to the last probe'})"
    spread = (
        f"seeds {seeds['seeds'][0]}..{seeds['seeds'][-1]}: min {_fmt(seeds['min'])} / mean "
        f"{_fmt(seeds['mean'])} / max {_fmt(seeds['max'])}"
    )
    return f"  {label:<17}{head}\n  {'':<17}{spread}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.4g} ms"


def _table(points: list[dict[str, Any]], keys: list[str], label: str, goodput: bool) -> list[str]:
    head = f"  {label:<12}{'requests':>9}" + "".join(f"{k.removesuffix('_s'):>12}" for k in keys)
    head += (f"{'goodput':>9}" if goodput else "") + f"{'queue':>9}{'meets':>7}"
    lines = [head]
    for p in points:
        stopped = p.get("stopped_early") is not None
        sent = f"{p.get('num_sent')}/{p['num_requests']}" if stopped else str(p["num_requests"])
        row = f"  {p['load']:<12.4g}{sent:>9}"
        row += "".join(f"{_ms(p.get(k)):>12}" for k in keys)
        if goodput:
            row += f"{_fmt(p['goodput_fraction']):>9}"
        queue = "-" if label == "concurrency" else "stable" if p["stable"] else "GROWS"
        meets = "yes" if p["meets_slo"] else "no*" if stopped else "no"
        lines.append(row + f"{queue:>9}{meets:>7}")
    if any(p.get("stopped_early") for p in points):
        lines.append(
            "  no*: stopped early, the SLO already broken (sent/planned requests; those in "
            "flight cancelled)"
        )
    return lines


def render(doc: dict[str, Any]) -> str:
    """The answer as text: both maxima, what binds, the spread over seeds, every point."""
    keys = [f"{t['metric']}_{t['statistic']}_s" for t in doc["slo"]["terms"] if t["statistic"]]
    goodput = doc["slo"]["goodput_min"] is not None
    if doc.get("engine"):
        figures = f"figures: {doc['figures_label']}"
    else:
        figures = f"figures: simulated, timing model: {doc['timing_model']}"
    lines = [
        f"kvbudget capacity  ({figures}; SLO {doc['slo']['text']})",
        _answer_line("max rate", doc, "max_rate_per_s", "binding_constraint", " requests/s"),
        _answer_line(
            "max concurrency", doc, "max_concurrency", "binding_constraint_concurrency", ""
        ),
        f"  probes           {doc['num_requests']} requests each (the rate's answer confirmed "
        f"with {doc['num_requests'] * CONFIRM_FACTOR});\n  {'':<17}rate to within "
        f"{doc['tolerance'] * 100:g} %; {doc['wall_s']:.1f} s",
        "",
        *_table(doc["rate_points"], keys, "rate/s", goodput),
        "",
        *_table(doc["concurrency_points"], keys, "concurrency", goodput),
    ]
    if doc.get("stopped"):
        lines.insert(4, f"  stopped early    {doc['stopped']}")
        if doc["max_rate_per_s"] is not None and not doc.get("max_rate_confirmed"):
            lines.insert(
                5, f"  {'':<17}the max rate was not confirmed by a longer run: raise the budget"
            )
    if doc.get("async_scheduling"):
        asynchronous = doc["async_scheduling"]
        state = "on" if asynchronous["enabled"] else "off"
        lines.insert(3, f"  async scheduling {state}: {asynchronous['reason']}")
    if "chart" in doc:
        lines.append(f"\n  chart: {doc['chart']}")
    if doc.get("out"):
        out = doc["out"]
        reused = f"; {out['probes_reused']} probe(s) reused from it" if out["resumed"] else ""
        lines.append(f"\n  search kept in {out['dir']} (probes.jsonl, capacity.json){reused}")
        lines += [f"  note: {n}" for n in out["notes"]]
    return "\n".join(lines)
