"""What the acceptance charts label: the grid's cells by tier, the load each concurrency tier
offered (and achieved), the figures' kind and the plan's SLO ceilings."""

from __future__ import annotations

from kvbudget.accept.result import AcceptResult, CellResult
from kvbudget.accept.result_views import GRID_CONCURRENCY_TIERS

#: the grid's concurrency tiers, single -> peak (every plan has the three)
CONCURRENCY_TIERS = GRID_CONCURRENCY_TIERS


def cell_grid(cells: list[CellResult]) -> dict[tuple[str, str], CellResult]:
    return {(c.input_tier, c.concurrency_tier): c for c in cells}


def input_tiers(doc: AcceptResult) -> tuple[str, ...]:
    """The plan's declared input tiers (one, two or three), short -> long."""
    return doc.plan_view.grid_input_tiers


def figures_kind(doc: AcceptResult) -> str:
    """What every chart's figures are: ``simulated (roofline)``, ``measured (vllm ...)``."""
    return doc.provenance.label()


def load_label(doc: AcceptResult, concurrency_tier: str, cell: CellResult | None = None) -> str:
    """A concurrency tier's x label: its name and the load it offered (``64 concurrent``, or
    ``offered 15 req/s`` with its in-flight cap), and with a cell the rate it achieved."""
    tier = doc.plan_view.concurrency_tier(concurrency_tier)
    n = "?" if tier.concurrency is None else tier.concurrency
    rate = tier.offered_rate_per_s
    if tier.closed_loop:
        lines = [concurrency_tier, f"{n} concurrent"]
    elif rate is not None:
        lines = [concurrency_tier, f"offered {rate:g} req/s", f"(≤ {n} in flight)"]
    else:
        lines = [concurrency_tier, f"{tier.arrival} arrivals", f"(≤ {n} in flight)"]
    if cell is not None and cell.throughput:
        lines.append(f"achieved {cell.throughput.get('requests_per_s', 0.0):.3g} req/s")
    return "\n".join(lines)


def concurrency_labels(doc: AcceptResult, input_tier: str | None = None) -> list[str]:
    """The three concurrency tiers' load labels; with ``input_tier`` each also says the rate
    that row's cell achieved (completed requests per second)."""
    grid = cell_grid(doc.cells)
    return [
        load_label(doc, ct, grid.get((input_tier, ct)) if input_tier else None)
        for ct in CONCURRENCY_TIERS
    ]


LOAD_AXIS = "load (concurrency tier: clients in a closed loop, or the offered arrival rate)"


def slo_ceilings(doc: AcceptResult, metric: str) -> list[tuple[str, float]]:
    return list(doc.plan_view.ceilings.get(metric, ()))
