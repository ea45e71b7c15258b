"""``WorkloadSpec`` (what YAML files and CLI flags build) and ``generate``.

``generate(spec, rng)`` is deterministic: the same spec and the same seeded generator give
the same list of :class:`PlannedRequest`, sorted by (arrival, turn, session);
``generate_stream(spec, rng)`` yields the same requests one at a time (trace scale).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar, overload

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kvbudget.errors import ConfigError
from kvbudget.safety.limits import (
    MAX_DURATION_S,
    MAX_REQUEST_TOKENS,
    MAX_REQUESTS,
    MAX_VOCAB,
)
from kvbudget.validation import first_problem, problem_line
from kvbudget.workload.arrival_specs import ArrivalSpec, ClosedLoopArrivals
from kvbudget.workload.lengths import FixedLength, LengthSpec
from kvbudget.workload.prefixes import (
    PrefixSpec,
    SessionSpec,
    TenantSpec,
)
from kvbudget.workload.request import PlannedRequest, RequestFactory, build_with
from kvbudget.workload.sessions import SessionPlan
from kvbudget.workload.tokenizer import DEFAULT_VOCAB_SIZE, MIN_VOCAB_SIZE, get_tokenizer
from kvbudget.workload.traces import TraceReplaySpec, stream_trace_requests


class WorkloadSpec(BaseModel):
    """A workload: arrivals, lengths, prompt structure, tenants, sessions, cancellations."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    cell_id: str | None = Field(None, description="matrix cell or scenario id")
    num_requests: int | None = Field(None, ge=0, le=MAX_REQUESTS)
    duration_s: float | None = Field(None, gt=0, le=MAX_DURATION_S)
    arrivals: ArrivalSpec = Field(default_factory=lambda: ClosedLoopArrivals(concurrency=1))
    input_tokens: LengthSpec = Field(default_factory=lambda: FixedLength(value=1024))
    output_tokens: LengthSpec = Field(default_factory=lambda: FixedLength(value=128))
    input_tokens_include_prefix: bool = Field(
        True,
        description="input_tokens is the whole prompt (shared part included); "
        "false: it is the unique part only",
    )
    prefix: PrefixSpec = Field(default_factory=PrefixSpec)
    tenants: TenantSpec = Field(default_factory=TenantSpec)
    sessions: SessionSpec = Field(default_factory=SessionSpec)
    cancel_fraction: float = Field(0.0, ge=0, le=1)
    cancel_after_tokens: int = Field(1, ge=1, le=MAX_REQUEST_TOKENS)
    priorities: list[int] = Field(default_factory=lambda: [0], min_length=1)
    priority_weights: list[float] | None = None
    vocab_size: int = Field(DEFAULT_VOCAB_SIZE, ge=MIN_VOCAB_SIZE, le=MAX_VOCAB)
    keep_prompt_text: bool = False
    trace: TraceReplaySpec | None = None

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.trace is None and self.num_requests is None and self.duration_s is None:
            raise ValueError("set num_requests or duration_s (or both)")
        rate = getattr(self.arrivals, "rate_per_s", None)
        if self.num_requests is None and self.duration_s is not None and rate is not None:
            expected = float(rate) * self.duration_s
            if expected > MAX_REQUESTS:
                raise ValueError(
                    f"rate_per_s x duration_s asks for about {expected:.3g} requests, more than "
                    f"the {MAX_REQUESTS:,} a run may have (docs/limits.md); lower one, or set "
                    "num_requests"
                )
        if self.trace is not None and "arrivals" in self.model_fields_set:
            raise ValueError(
                "a trace replay takes each request's arrival time from the trace (its "
                "timestamps, scaled by trace.speedup); drop arrivals (and --rate/--concurrency)"
            )
        if self.priority_weights is not None and len(self.priority_weights) != len(self.priorities):
            raise ValueError(
                f"priority_weights has {len(self.priority_weights)} entries for "
                f"{len(self.priorities)} priorities"
            )
        return self

    @property
    def closed_loop_concurrency(self) -> int | None:
        """Concurrency for closed-loop workloads, else ``None`` (a trace replay is open loop:
        requests arrive at the trace's timestamps)."""
        if self.trace is not None:
            return None
        a = self.arrivals
        return a.concurrency if isinstance(a, ClosedLoopArrivals) else None


def workload_from_dict(data: Any) -> WorkloadSpec:
    """Validate a mapping into a ``WorkloadSpec``; errors become one-line ``ConfigError``s."""
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as exc:
        problem = first_problem(exc)
        text = problem_line(
            problem, what="workload", origin="the workload", docs="docs/workloads.md"
        )
        raise ConfigError(text, field=problem.where or "workload") from None


def load_workload_yaml(path: str | Path) -> WorkloadSpec:
    """Read a workload YAML file (see docs/workloads.md for the schema)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"workload file {str(p)!r} does not exist", field="path")
    # YAML only for a workload file: the flag-built workload never pays for importing it
    import yaml

    from kvbudget.safety.yamlload import load_yaml_text, read_text_file

    try:
        data = load_yaml_text(read_text_file(p, what="workload file"), source=str(p))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({exc})", field="path") from None
    return workload_from_dict(data if data is not None else {})


def generate(spec: WorkloadSpec, rng: np.random.Generator) -> list[PlannedRequest]:
    """Plan every request of ``spec`` with randomness drawn only from ``rng``."""
    return list(generate_stream(spec, rng))


R = TypeVar("R")


@overload
def generate_stream(
    spec: WorkloadSpec, rng: np.random.Generator, *, compact_ids: bool = False
) -> Iterator[PlannedRequest]: ...


@overload
def generate_stream(
    spec: WorkloadSpec,
    rng: np.random.Generator,
    *,
    compact_ids: bool = False,
    make: RequestFactory[R],
) -> Iterator[R]: ...


def generate_stream(
    spec: WorkloadSpec,
    rng: np.random.Generator,
    *,
    compact_ids: bool = False,
    make: RequestFactory[Any] = PlannedRequest,
) -> Iterator[Any]:
    """The requests of :func:`generate`, one at a time, without holding their prompts.

    ``make``: what each request is built as, from :class:`PlannedRequest`'s fields in order
    (:class:`~kvbudget.workload.request.RequestFactory`; ``PlannedRequest`` by default): the
    simulator builds its own engine request directly, so a request costs one object.

    ``compact_ids``: generated prompts' ids as ``array('q')`` (8 bytes a token, copied from
    numpy's draw without a Python int per token) instead of tuples: the same ids in the same
    order (the simulator's trace-scale path; a trace file's prompts regenerated from hash ids
    too, while a line's own ``prompt_token_ids`` stay a tuple).

    Same requests, same ids, same order, in memory that does not grow with the number of
    requests: the per-session draws (arrivals, tenants, lengths, ...) are whole arrays of one
    random stream, skipped once and replayed a block of sessions at a time
    (:mod:`kvbudget.workload.sessions`); then the prompt tokens, the last draw, in chunks of
    sessions (numpy's bounded integers give the same stream in chunks as in one call);
    sessions' turns are merged in (arrival, turn, session) order with a heap of the turns still
    to come. Arrival processes whose times are not sorted (none of the built-in ones) fall back
    to building the list.
    """
    tok = get_tokenizer(spec.vocab_size)
    base_seed = int(rng.integers(0, 2**62))
    if spec.trace is not None:
        for req in stream_trace_requests(
            spec.trace.path,
            tok,
            base_seed=base_seed,
            default_block_size=spec.trace.block_size,
            speedup=spec.trace.speedup,
            num_requests=spec.num_requests,
            duration_s=spec.duration_s,
            cell_id=spec.cell_id,
            compact_ids=compact_ids,
        ):
            yield build_with(make, req)
        return
    plan = SessionPlan(spec, rng, tok, base_seed, compact_ids=compact_ids)
    if plan.num_sessions and not plan.sorted_starts:
        yield from _generate_sorted(plan, rng, make)
        return
    yield from _generate_merged(plan, rng, make)


def _generate_sorted(
    plan: SessionPlan, rng: np.random.Generator, make: RequestFactory[R]
) -> Iterator[R]:
    """Every row built, then sorted (unsorted arrival times)."""
    rows = [row for session in plan.sessions(rng) for row in session]
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    limit = plan.spec.num_requests
    for i, r in enumerate(rows if limit is None else rows[:limit]):
        yield make(f"r{i:06d}", *r[3])


def _generate_merged(
    plan: SessionPlan, rng: np.random.Generator, make: RequestFactory[R]
) -> Iterator[R]:
    """Rows in (arrival, turn, session) order from sessions in start order (sorted starts)."""
    limit = plan.spec.num_requests
    sessions = plan.sessions(rng)
    if plan.turns == 1:
        # one row a session, sessions already in (arrival, session) order: no merge
        for i, (row,) in enumerate(itertools.islice(sessions, limit)):
            yield make(f"r{i:06d}", *row[3])
        return
    pending: list[tuple[float, int, int, tuple[Any, ...]]] = []
    upcoming = next(sessions, None)
    i = 0
    while limit is None or i < limit:
        # a session's first turn is its earliest; later sessions start no earlier
        if upcoming is not None and (not pending or upcoming[0][:3] <= pending[0][:3]):
            first, *later = upcoming
            for row in later:
                heapq.heappush(pending, row)
            row = first
            upcoming = next(sessions, None)
        elif pending:
            row = heapq.heappop(pending)
        else:
            return
        yield make(f"r{i:06d}", *row[3])
        i += 1
