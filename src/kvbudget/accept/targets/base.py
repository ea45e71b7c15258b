"""What an acceptance run talks to: the ``Target`` protocol and what one cell returns.

Three kinds (plan ``target.kind``):

``sim``
    the simulated engine in virtual time (:mod:`kvbudget.accept.targets.sim`); every figure is
    ``simulated`` with its timing model named; output text is synthetic, so quality is untested;
``serve``
    the embedded engine behind kvbudget's OpenAI-compatible server, driven over HTTP;
``http``
    a real OpenAI-compatible endpoint (plus its ``/metrics``); figures are ``measured``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvbudget.accept.plan.engine_config import EngineConfig
from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.accept.result import Ledger
from kvbudget.records import MetricSample, RecordSource, RequestRecord
from kvbudget.workload.request import PlannedRequest


@dataclass(frozen=True, slots=True)
class CellRun:
    """One repetition of one cell on a target."""

    records: list[RequestRecord]
    duration_s: float
    #: kv_usage / num_running / num_waiting over the cell's own timeline (seconds from start)
    samples: list[MetricSample] = field(default_factory=list)
    #: the engine refused or ran out of KV capacity (message with the numbers), else None
    capacity_error: str | None = None
    #: counter deltas over the cell: prefix_queries_tokens, prefix_hits_tokens, preemptions
    counters: dict[str, float] = field(default_factory=dict)
    #: KV usage once the cell drained (every request finished or cancelled)
    kv_usage_after_drain: float | None = None
    #: output text per request id (kept in memory for quality checks; never written unless
    #: --keep-prompts)
    outputs: dict[str, str] = field(default_factory=dict)
    #: the user asked to keep text (--keep-prompts): quality outputs may be shown in the report
    show_outputs: bool = False
    #: why the cell was stopped before sending all its requests (load.run_load's stop_when)
    stopped_early: str | None = None


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """Who produced the figures (provenance) and the lock values the target observed."""

    kind: str
    source: RecordSource
    label: str
    timing_model: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    hardware: str | None = None
    #: lock field -> (observed value, where it was read)
    observed: dict[str, tuple[Any, str]] = field(default_factory=dict)
    #: lock fields that are meaningless for this target -> why
    not_applicable: dict[str, str] = field(default_factory=dict)
    synthetic_text: bool = False
    #: the engine's final resolved values (kvbudget.load.engine_report.EngineReport as JSON)
    engine_report: dict[str, Any] = field(default_factory=dict)


class Target(Protocol):
    """A thing that runs planned requests and returns one record per request."""

    @property
    def info(self) -> TargetInfo: ...

    def idle_baseline(self) -> dict[str, float]:
        """Server-side state at rest (KV usage, running, waiting, idle memory if known)."""
        ...

    def run_cell(
        self,
        requests: Sequence[PlannedRequest],
        *,
        cell_id: str,
        closed_loop_concurrency: int | None,
        duration_s: float | None,
        warmup: bool = False,
    ) -> CellRun:
        """Run the requests (closed loop when a concurrency is given) and record them."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PreparedTarget:
    """A started target with its capacity ledger, as a :data:`TargetFactory` returns it."""

    target: Target
    ledger: Ledger
    computed_lock: dict[str, tuple[Any, str]] = field(default_factory=dict)
    #: the engine configuration this target was started with (None: not known, e.g. http)
    engine: EngineConfig | None = None


#: builds and starts the target for one (possibly overridden) lock
TargetFactory = Callable[[ObjectLock], PreparedTarget]
