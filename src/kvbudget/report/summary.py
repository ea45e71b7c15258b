"""The first screen of an acceptance report, in words: the verdict, its basis, and capacity
per input tier ("short: 64 concurrent at TTFT p95 0.69 s (<= 2 s) ...").

Shared by the HTML, Markdown and terminal views so the three say the same sentences. Every
sentence is built from the cells' own checks (observed value and ceiling), never re-judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbudget.accept.result import AcceptResult, CellResult, Check
from kvbudget.accept.result_views import ConcurrencyTierView, TierRowView

_METRIC_WORDS = {"ttft_s": "TTFT", "tpot_s": "TPOT"}


def seconds_text(value: float) -> str:
    """``0.0134 -> '13.4 ms'``, ``1.23 -> '1.23 s'`` (3 significant digits)."""
    if abs(value) < 1.0:
        return f"{value * 1000:.3g} ms"
    return f"{value:.3g} s"


def _latency_checks(cell: CellResult) -> list[Check]:
    return [
        c
        for c in cell.checks
        if c.name.split(" ")[0] in _METRIC_WORDS and c.observed is not None and c.limit is not None
    ]


def check_text(check: Check) -> str:
    """``TTFT p95 0.691 s (<= 2 s)`` or ``TTFT p50 16.9 s > 1 s`` from a latency check."""
    metric, pct = check.name.split(" ")[:2]
    assert check.observed is not None and check.limit is not None
    word = _METRIC_WORDS.get(metric, metric)
    if check.observed > check.limit:
        return f"{word} {pct} {seconds_text(check.observed)} > {seconds_text(check.limit)}"
    return f"{word} {pct} {seconds_text(check.observed)} (≤ {seconds_text(check.limit)})"


def throughput_text(cell: CellResult) -> str:
    """``achieved 12.8 req/s, 1640 output tokens/s, goodput 12 req/s``: what the cell completed
    (requests that finished ok per second of its window), never the rate it was offered."""
    t = cell.throughput
    if not t:
        return "throughput not measured"
    parts = [
        f"achieved {t.get('requests_per_s', 0.0):.3g} req/s",
        f"{t.get('output_tokens_per_s', 0.0):.4g} output tokens/s",
    ]
    if "goodput_requests_per_s" in t:
        parts.append(f"goodput {t['goodput_requests_per_s']:.3g} req/s")
    return ", ".join(parts)


def tier_load_text(tier: ConcurrencyTierView) -> str:
    """What load a concurrency tier offered: ``64 concurrent`` (closed loop: that many clients,
    each sending when its last request ends) or ``poisson 15 req/s offered, at most 256 in
    flight`` (open loop: the rate is what was sent, the in-flight number only a cap)."""
    n = "?" if tier.concurrency is None else tier.concurrency
    if tier.closed_loop:
        return f"{n} concurrent"
    rate = tier.offered_rate_per_s
    offered = f" {rate:g} req/s offered" if rate is not None else " arrivals"
    return f"{tier.arrival}{offered}, at most {n} in flight"


def load_words(doc: AcceptResult, concurrency_tier: str) -> str:
    """:func:`tier_load_text` of the plan's concurrency tier ``concurrency_tier``."""
    return tier_load_text(doc.plan_view.concurrency_tier(concurrency_tier))


def tier_label(doc: AcceptResult, input_tier: str) -> str:
    """``short (128-768 prompt tokens, 128 out)``."""
    tier = doc.plan_view.input_tiers.get(input_tier)
    if tier is None:
        return input_tier
    return (
        f"{input_tier} ({tier.min_tokens}–{tier.max_tokens} prompt tokens, "
        f"{tier.output_tokens} out)"
    )


def _deciding_reason(cell: CellResult, verdict: str) -> str:
    checks = [c for c in cell.checks if c.verdict == verdict and not c.is_quality]
    latency = [c for c in checks if c in _latency_checks(cell)]
    if latency and verdict == "fail":
        return ", ".join(check_text(c) for c in latency)
    if checks:
        return "; ".join(dict.fromkeys(c.reason.split(";")[0] for c in checks))
    return "; ".join(cell.reasons)


def capacity_sentence(doc: AcceptResult, row: TierRowView) -> str:
    """One sentence per input tier: what it holds, where it fails, what stayed untested."""
    name = row.input_tier
    cells = {c.concurrency_tier: c for c in doc.cells if c.input_tier == name}
    parts: list[str] = []
    last = row.last_passing
    if last and last in cells:
        cell = cells[last]
        checks = ", ".join(check_text(c) for c in _latency_checks(cell))
        parts.append(
            f"holds {load_words(doc, last)} ({last}) at {checks or 'every check passed'}; "
            f"{throughput_text(cell)}"
        )
    stopped = row.stopped_at
    if stopped and stopped in cells and row.capacity_error:
        parts.append(
            f"capacity error at {load_words(doc, stopped)} ({stopped}): "
            f"{_deciding_reason(cells[stopped], 'fail')}; rest of the row not run, no retry"
        )
    elif stopped and stopped in cells:
        cell = cells[stopped]
        parts.append(
            f"fails at {load_words(doc, stopped)} ({stopped}): {_deciding_reason(cell, 'fail')}; "
            f"{throughput_text(cell)}"
        )
    for conc in row.untested:
        if conc in cells:
            parts.append(
                f"untested at {load_words(doc, conc)} ({conc}): "
                f"{_deciding_reason(cells[conc], 'untested')}"
            )
    if not parts:
        parts.append("no cell was run")
    if row.highest_load is not None:
        parts.append(highest_load_text(row.highest_load))
    return f"{tier_label(doc, name)}: " + "; ".join(parts)


def highest_load_text(found: Mapping[str, Any]) -> str:
    """``highest load within the stop conditions (searched, simulated): 37 concurrent; 38 fails
    on ttft_p95``, from the row's ``highest_load`` (kvbudget.accept.highest_load)."""
    head = f"highest load within the stop conditions (searched, {found['figures']})"
    best, failing = found.get("highest_concurrency"), found.get("failing_concurrency")
    if best is None:
        text = f"{head}: none, 1 concurrent fails on {found.get('binding_constraint')}"
    else:
        text = f"{head}: {best} concurrent"
        if failing is not None:
            text += f"; {failing} fails on {found.get('binding_constraint')}"
        else:
            text += f" (every probe up to {best} passed; a probe has {found['requests_per_probe']} requests)"
    if "max_rate_per_s" in found:
        text += "; " + _highest_rate_text(found)
    return text


def _highest_rate_text(found: Mapping[str, Any]) -> str:
    """``9.6 req/s Poisson (confirmed over 160 requests); 10.1 req/s fails on queue_growth``."""
    rate, failing = found.get("max_rate_per_s"), found.get("failing_rate_per_s")
    why = found.get("binding_constraint_rate")
    if found.get("rate_not_searched"):
        return f"rate not searched ({found['rate_not_searched']})"
    if rate is None:
        if failing is None:
            return "no Poisson rate found (no rate probe ran)"
        return f"no Poisson rate found: the lowest probed, {failing:.3g} req/s, fails on {why}"
    text = f"{rate:.3g} req/s Poisson"
    if found.get("max_rate_confirmed"):
        longest = max((p.get("requests") or 0 for p in found.get("rate_probes") or []), default=0)
        text += f" (confirmed over {longest} requests)"
    if failing is not None:
        text += f"; {failing:.3g} req/s fails on {why}"
    return text


def capacity_sentences(doc: AcceptResult) -> list[str]:
    return [capacity_sentence(doc, row) for row in doc.tier_rows]


def basis_text(doc: AcceptResult) -> str:
    """``simulated (roofline) — simulated H100 (...)``: what the figures are and where from."""
    label = doc.target_view.label or ""
    kind = doc.provenance.label()
    return f"{kind} — {label}" if label and label != kind else kind


def peak_throughput(doc: AcceptResult) -> str:
    """The highest output-token throughput among the cells that passed latency and capacity."""
    passing = [
        c
        for c in doc.cells
        if c.throughput and all(x.verdict == "pass" for x in c.checks if not x.is_quality)
    ]
    pool = passing or [c for c in doc.cells if c.throughput]
    if not pool:
        return "Throughput: no cell ran."
    best = max(pool, key=lambda c: c.throughput.get("output_tokens_per_s", 0.0))
    which = "within every latency ceiling" if passing else "no cell met every ceiling"
    return (
        f"Throughput ({doc.provenance.kind}), best cell {best.cell_id} ({which}): "
        f"{throughput_text(best)}."
    )
