"""``WorkloadSpec`` (what YAML files and CLI flags build) and ``generate``.

``generate(spec, rng)`` is deterministic: the same spec and the same seeded generator give
the same list of :class:`PlannedRequest`, sorted by (arrival, turn, session);
``generate_stream(spec, rng)`` yields the same requests one at a time (trace scale).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kvbudget.errors import ConfigError
from kvbudget.safety.limits import (
    MAX_DURATION_S,
    MAX_REQUEST_TOKENS,
    MAX_REQUESTS,
    MAX_VOCAB,
)
from kvbudget.safety.yamlload import load_yaml_text, read_text_file
from kvbudget.workload.arrival_specs import ArrivalSpec, ClosedLoopArrivals
from kvbudget.workload.lengths import FixedLength, LengthSpec
from kvbudget.workload.prefixes import (
    PrefixSpec,
    PromptBuilder,
    SessionSpec,
    TenantSpec,
    zipf_probabilities,
)
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.tokenizer import DEFAULT_VOCAB_SIZE, MIN_VOCAB_SIZE, get_tokenizer
from kvbudget.workload.traces import TraceReplaySpec, read_trace, requests_from_trace


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
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "workload"
        value = err.get("input")
        shown = repr(value) if not isinstance(value, dict) else "{…}"
        raise ConfigError(
            f"workload field {loc}={shown}: {err['msg']} (see docs/workloads.md)", field=loc
        ) from None


def load_workload_yaml(path: str | Path) -> WorkloadSpec:
    """Read a workload YAML file (see docs/workloads.md for the schema)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"workload file {str(p)!r} does not exist", field="path")
    try:
        data = load_yaml_text(read_text_file(p, what="workload file"), source=str(p))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({exc})", field="path") from None
    return workload_from_dict(data if data is not None else {})


def _choice(rng: np.random.Generator, n: int, p: np.ndarray, size: int) -> np.ndarray:
    if n == 1:
        return np.zeros(size, dtype=np.int64)
    return rng.choice(n, size=size, p=p).astype(np.int64)


def generate(spec: WorkloadSpec, rng: np.random.Generator) -> list[PlannedRequest]:
    """Plan every request of ``spec`` with randomness drawn only from ``rng``."""
    return list(generate_stream(spec, rng))


#: sessions whose unique prompt tokens are drawn in one ``rng`` call (streamed generation)
DRAW_CHUNK_SESSIONS = 256


def generate_stream(
    spec: WorkloadSpec, rng: np.random.Generator, *, compact_ids: bool = False
) -> Iterator[PlannedRequest]:
    """The requests of :func:`generate`, one at a time, without holding their prompts.

    ``compact_ids``: generated prompts' ids as ``array('q')`` (8 bytes a token, copied from
    numpy's draw without a Python int per token) instead of tuples: the same ids in the same
    order (the simulator's trace-scale path; a trace file's requests stay tuples).

    Same requests, same ids, same order: the per-session draws (arrivals, tenants, lengths, ...)
    are made first as in :func:`generate` (a few numbers per session), then the prompt tokens,
    the last draw, in chunks of sessions (numpy's bounded integers give the same stream in
    chunks as in one call); sessions' turns are merged in (arrival, turn, session) order with a
    heap of the turns still to come. Arrival processes whose times are not sorted (none of the
    built-in ones) fall back to building the list.
    """
    tok = get_tokenizer(spec.vocab_size)
    base_seed = int(rng.integers(0, 2**62))
    if spec.trace is not None:
        records = read_trace(spec.trace.path)
        yield from requests_from_trace(
            records,
            tok,
            base_seed=base_seed,
            default_block_size=spec.trace.block_size,
            speedup=spec.trace.speedup,
            num_requests=spec.num_requests,
            duration_s=spec.duration_s,
            cell_id=spec.cell_id,
        )
        return
    plan = _SessionPlan(spec, rng, tok, base_seed, compact_ids=compact_ids)
    if plan.num_sessions and bool(np.any(np.diff(plan.starts) < 0)):
        yield from _generate_sorted(plan, rng)
        return
    yield from _generate_merged(plan, rng)


class _SessionPlan:
    """The per-session draws of one workload, in :func:`generate`'s order."""

    def __init__(
        self,
        spec: WorkloadSpec,
        rng: np.random.Generator,
        tok: Any,
        base_seed: int,
        *,
        compact_ids: bool = False,
    ) -> None:
        self.spec = spec
        self.compact_ids = compact_ids
        self.tok = tok
        turns = spec.sessions.num_turns
        self.turns = turns
        cap = None if spec.num_requests is None else math.ceil(spec.num_requests / turns)
        self.starts = spec.arrivals.times(rng, cap, spec.duration_s)
        num_sessions = int(self.starts.size)
        self.num_sessions = num_sessions
        tenants = spec.tenants
        self.tenant_idx = _choice(rng, len(tenants.names), tenants.probabilities(), num_sessions)
        pfx = spec.prefix
        self.groups = (
            _choice(
                rng, pfx.num_groups, zipf_probabilities(pfx.num_groups, pfx.zipf_s), num_sessions
            )
            if pfx.num_groups
            else None
        )
        first_len = spec.input_tokens.sample(rng, num_sessions)
        out_len = spec.output_tokens.sample(rng, num_sessions * turns).reshape(num_sessions, turns)
        self.out_len = np.maximum(out_len, 1)
        user_dist = spec.sessions.user_tokens or spec.input_tokens
        self.user_len = user_dist.sample(rng, num_sessions * (turns - 1)).reshape(
            num_sessions, turns - 1
        )
        pw = np.asarray(spec.priority_weights or [1.0] * len(spec.priorities), dtype=np.float64)
        self.prio = _choice(rng, len(spec.priorities), pw / pw.sum(), num_sessions * turns)
        self.cancel = rng.random(num_sessions * turns) < spec.cancel_fraction
        self.dynamic_all = tok.random_ids(rng, num_sessions * pfx.dynamic_tokens).reshape(
            num_sessions, pfx.dynamic_tokens
        )
        self.builder = PromptBuilder(pfx, tok, base_seed)
        overhead = pfx.shared_tokens + pfx.dynamic_tokens if spec.input_tokens_include_prefix else 0
        self.unique_len = np.maximum(first_len - overhead, 1)
        #: prompt tokens each session draws (its unique part, then each later turn's user part)
        self.draw_len = self.unique_len + self.user_len.sum(axis=1)
        self.salts = {name: tenants.salt_for(name, base_seed) for name in tenants.names}

    def session(
        self, s: int, ids_pool: np.ndarray
    ) -> list[tuple[float, int, int, tuple[Any, ...]]]:
        """Every turn of session ``s``; ``ids_pool`` holds exactly its drawn tokens."""
        spec = self.spec
        tok = self.tok
        turns = self.turns
        tenant = spec.tenants.names[int(self.tenant_idx[s])]
        group = None if self.groups is None else int(self.groups[s])
        shared = self.builder.shared_part(int(self.tenant_idx[s]), group)
        n_unique = int(self.unique_len[s])
        cursor = n_unique
        ids: Sequence[int]
        if self.compact_ids:
            dynamic_ids = self.dynamic_all[s]
            ids, reusable = self._compact_first_turn(shared, dynamic_ids, ids_pool[:n_unique])
        else:
            unique = tuple(ids_pool[:n_unique].tolist())
            dynamic = tuple(self.dynamic_all[s].tolist())
            ids, reusable = self.builder.compose(shared, dynamic, unique)
        session_id = f"s{s:06d}" if turns > 1 else None
        rows: list[tuple[float, int, int, tuple[Any, ...]]] = []
        for k in range(turns):
            if k > 0:
                prev_out = tok.output_ids(ids, int(self.out_len[s, k - 1]))
                n_user = int(self.user_len[s, k - 1])
                user = ids_pool[cursor : cursor + n_user]
                cursor += n_user
                reusable = len(ids) + len(prev_out)
                if isinstance(ids, array):
                    ids = ids + array("q", prev_out) + _compact(user)
                else:
                    ids = tuple(ids) + tuple(prev_out) + tuple(user.tolist())
            j = s * turns + k
            arrival_s = float(self.starts[s]) + k * spec.sessions.turn_interval_s
            # PlannedRequest's fields after request_id, in field order (positional: cheaper
            # than a dict of keywords, once per request)
            fields = (
                arrival_s,
                ids,
                int(self.out_len[s, k]),
                tok.decode(ids) if spec.keep_prompt_text else None,
                tenant,
                self.salts[tenant],
                session_id,
                group,
                int(spec.priorities[int(self.prio[j])]),
                spec.cancel_after_tokens if self.cancel[j] else None,
                spec.cell_id,
                int(reusable),
                k,
            )
            rows.append((arrival_s, k, s, fields))
        return rows

    def _compact_first_turn(
        self, shared: tuple[int, ...], dynamic: np.ndarray, unique: np.ndarray
    ) -> tuple[array[int], int]:
        """:meth:`PromptBuilder.compose`'s layout, as one ``array('q')``."""
        if not shared and not dynamic.size:
            return _compact(unique), 0
        if self.spec.prefix.dynamic_position == "before" and dynamic.size:
            return _compact(dynamic) + array("q", shared) + _compact(unique), 0
        return array("q", shared) + _compact(dynamic) + _compact(unique), len(shared)

    def sessions(self, rng: np.random.Generator) -> Iterator[list[tuple[float, int, int, Any]]]:
        """Each session's turns in session order, drawing prompt tokens chunk by chunk."""
        for a in range(0, self.num_sessions, DRAW_CHUNK_SESSIONS):
            b = min(a + DRAW_CHUNK_SESSIONS, self.num_sessions)
            lens = self.draw_len[a:b]
            pool = self.tok.random_ids(rng, int(lens.sum()))
            offset = 0
            for s in range(a, b):
                n = int(lens[s - a])
                yield self.session(s, pool[offset : offset + n])
                offset += n


def _compact(ids: np.ndarray) -> array[int]:
    """int64 ids as an ``array('q')``: one copy of the buffer, no Python int per id."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
    return out


def _generate_sorted(plan: _SessionPlan, rng: np.random.Generator) -> Iterator[PlannedRequest]:
    """Every row built, then sorted (unsorted arrival times)."""
    rows = [row for session in plan.sessions(rng) for row in session]
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    limit = plan.spec.num_requests
    for i, r in enumerate(rows if limit is None else rows[:limit]):
        yield PlannedRequest(f"r{i:06d}", *r[3])


def _generate_merged(plan: _SessionPlan, rng: np.random.Generator) -> Iterator[PlannedRequest]:
    """Rows in (arrival, turn, session) order from sessions in start order (sorted starts)."""
    limit = plan.spec.num_requests
    pending: list[tuple[float, int, int, tuple[Any, ...]]] = []
    sessions = plan.sessions(rng)
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
        yield PlannedRequest(f"r{i:06d}", *row[3])
        i += 1
