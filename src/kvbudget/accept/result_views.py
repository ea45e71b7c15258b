"""Typed views of an acceptance result's plan, target, roles and lifecycle, built in accept.

:class:`~kvbudget.accept.result.AcceptResult` keeps the plan and the target as the JSON objects
it writes to ``report.json`` (so a document round-trips byte for byte, and one written by an
older kvbudget still reads). What a report shows of them is read here, once, into frozen
dataclasses: :func:`plan_view`, :func:`target_view` and :func:`roles_view`; the result exposes
them as ``plan_view``, ``target_view``, ``roles`` and ``lifecycle``, computed from the
document's own fields, so ``kvbudget accept`` and ``kvbudget report`` (which re-reads
``report.json``) render the same rows. ``kvbudget.report`` only renders these.

A field the document lacks reads as ``None`` (rendered as the report always showed a missing
value), never as an invented default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvbudget.accept.plan.load import CONCURRENCY_TIERS, INPUT_TIERS
from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.accept.roles import CacheKindRow, RoleRow, cache_kinds, who_does_what

#: the concurrency tiers of every report's grid, single -> peak (every plan declares the three)
GRID_CONCURRENCY_TIERS: tuple[str, ...] = CONCURRENCY_TIERS


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class InputTierView:
    """One declared input tier: prompt-length bounds and output length (tokens)."""

    name: str
    min_tokens: int | None
    max_tokens: int | None
    output_tokens: int | None
    source: str
    data_ref: str | None = None


@dataclass(frozen=True, slots=True)
class ConcurrencyTierView:
    """One declared concurrency tier; an undeclared one has ``concurrency`` None."""

    name: str
    concurrency: int | None = None
    arrival: str = "closed"
    #: the plan's number as written (an int stays an int), None when absent
    rate_per_s: float | None = None
    duration_s: float | None = None
    source: str = "None"

    @property
    def closed_loop(self) -> bool:
        return self.arrival == "closed"

    @property
    def offered_rate_per_s(self) -> float | None:
        """The arrival rate a poisson/constant tier offered (requests/s); None for a closed
        loop."""
        if self.closed_loop or self.rate_per_s is None:
            return None
        return float(self.rate_per_s)


@dataclass(frozen=True, slots=True)
class SampleView:
    """A data-set sample the plan pinned (``load.samples``)."""

    tier: Any
    sha256: Any
    prompt_tokens: Any
    template_version: Any


@dataclass(frozen=True, slots=True)
class PlanView:
    """What the report shows of the plan: the load it declared and the latency ceilings."""

    input_tiers: dict[str, InputTierView]
    concurrency_tiers: dict[str, ConcurrencyTierView]
    repetitions: int | None
    max_requests_per_cell: int | None
    template_version: str | None
    samples: tuple[SampleView, ...]
    #: per metric (``ttft_s``, ``tpot_s``): (percentile, ceiling in seconds), as declared
    ceilings: dict[str, tuple[tuple[str, float], ...]]
    #: the plan carries its object lock (a hand-built document may not)
    has_lock: bool

    @property
    def grid_input_tiers(self) -> tuple[str, ...]:
        """The declared input tiers short -> long (all three when none is declared)."""
        return tuple(t for t in INPUT_TIERS if t in self.input_tiers) or INPUT_TIERS

    def concurrency_tier(self, name: str) -> ConcurrencyTierView:
        """The declared tier ``name``, or an empty one (load unknown) when not declared."""
        return self.concurrency_tiers.get(name) or ConcurrencyTierView(name)


def _number(value: Any) -> Any:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def plan_view(plan: Mapping[str, Any]) -> PlanView:
    """The typed view of a result document's ``plan`` object."""
    load = _mapping(plan.get("load"))
    inputs = {
        str(name): InputTierView(
            name=str(name),
            min_tokens=t.get("min_tokens"),
            max_tokens=t.get("max_tokens"),
            output_tokens=t.get("output_tokens"),
            source=str(t.get("source")),
            data_ref=t.get("data_ref") or None,
        )
        for name, t in _mapping(load.get("tiers")).items()
        if isinstance(t, Mapping) and t
    }
    concurrency = {
        str(name): ConcurrencyTierView(
            name=str(name),
            concurrency=t.get("concurrency"),
            arrival=str(t.get("arrival", "closed")),
            rate_per_s=_number(t.get("rate_per_s")),
            duration_s=t.get("duration_s"),
            source=str(t.get("source")),
        )
        for name, t in _mapping(load.get("concurrency")).items()
        if isinstance(t, Mapping)
    }
    samples = tuple(
        SampleView(
            s.get("tier"), s.get("sha256"), s.get("prompt_tokens"), s.get("template_version")
        )
        for s in load.get("samples") or []
        if isinstance(s, Mapping)
    )
    stop = _mapping(plan.get("stop"))
    ceilings = {
        metric: tuple(
            (str(k), float(v))
            for k, v in _mapping(stop.get(metric)).items()
            if _number(v) is not None
        )
        for metric in ("ttft_s", "tpot_s")
    }
    lock = plan.get("lock")
    return PlanView(
        input_tiers=inputs,
        concurrency_tiers=concurrency,
        repetitions=load.get("repetitions"),
        max_requests_per_cell=load.get("max_requests_per_cell"),
        template_version=load.get("template_version"),
        samples=samples,
        ceilings=ceilings,
        has_lock=isinstance(lock, Mapping) and bool(lock),
    )


@dataclass(frozen=True, slots=True)
class TierRowView:
    """One input tier's row (:func:`kvbudget.accept.judge.verdicts.row_summaries`): the highest
    concurrency tier passing on capacity and latency, where the row stopped, what stayed
    untested, and the highest-load search's record when one ran."""

    input_tier: str
    last_passing: str | None
    stopped_at: str | None
    capacity_error: bool
    untested: tuple[str, ...]
    #: :func:`kvbudget.accept.highest_load.highest_loads`' record for this tier, as written
    highest_load: Mapping[str, Any] | None


def tier_row_view(row: Mapping[str, Any]) -> TierRowView:
    """The typed view of one of a result document's ``rows``."""
    found = row.get("highest_load")
    return TierRowView(
        input_tier=str(row["input_tier"]),
        last_passing=row.get("last_passing") or None,
        stopped_at=row.get("stopped_at") or None,
        capacity_error=bool(row.get("capacity_error")),
        untested=tuple(row.get("untested") or ()),
        highest_load=found if isinstance(found, Mapping) and found else None,
    )


@dataclass(frozen=True, slots=True)
class TargetView:
    """What ran: the target kind, whether its figures are simulated or measured, its label."""

    kind: str
    source: str | None
    label: str | None
    synthetic_text: bool

    @property
    def basis(self) -> str:
        """The run's figures' basis as the cache-kind rows name it."""
        return str(self.label or self.source or "this run")


def target_view(target: Mapping[str, Any]) -> TargetView:
    """The typed view of a result document's ``target`` object."""
    label, source = target.get("label"), target.get("source")
    return TargetView(
        kind=str(target.get("kind", "sim")),
        source=None if source is None else str(source),
        label=None if label is None else str(label),
        synthetic_text=bool(target.get("synthetic_text")),
    )


@dataclass(frozen=True, slots=True)
class RolesView:
    """The "who does what" section: the four questions and the four kinds of cache."""

    questions: tuple[RoleRow, ...]
    cache_kinds: tuple[CacheKindRow, ...]


def roles_view(
    plan: Mapping[str, Any],
    target: TargetView,
    peak_kv_usages: Sequence[float],
    prefix_hit_rates: Sequence[float],
) -> RolesView | None:
    """The section for the plan's declared lock and target, with the run's highest peak KV
    usage and best prefix-hit rate; None when the plan carries no lock."""
    lock_data = plan.get("lock")
    if not isinstance(lock_data, Mapping) or not lock_data:
        return None
    lock = ObjectLock.model_validate(lock_data)
    num_replicas = int(_mapping(plan.get("target")).get("replicas", 1) or 1)
    summary: dict[str, Any] = {}
    if peak_kv_usages:
        summary["kv_usage_peak"] = max(peak_kv_usages)
    if prefix_hit_rates:
        summary["prefix_hit_rate_tokens"] = max(prefix_hit_rates)
    return RolesView(
        questions=tuple(who_does_what(lock, target.kind, num_replicas)),
        cache_kinds=tuple(cache_kinds(summary, target.basis)),
    )
