"""The workload generator as it was before streaming (commit f3e2cbd): the oracle.

Every per-session quantity drawn as one whole array, in order, then the prompt tokens in chunks
of sessions; copied unchanged from ``kvbudget.workload.spec`` at f3e2cbd so the streamed
generator can be compared with it request for request. Trace workloads are not covered (they
are read as before).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from kvbudget.workload.prefixes import PromptBuilder, zipf_probabilities
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.spec import WorkloadSpec
from kvbudget.workload.tokenizer import get_tokenizer


def generate_stream_oneshot(
    spec: Any, rng: np.random.Generator, *, compact_ids: bool = False
) -> Iterator[PlannedRequest]:
    """``generate_stream`` at f3e2cbd, without the trace branch."""
    tok = get_tokenizer(spec.vocab_size)
    base_seed = int(rng.integers(0, 2**62))
    plan = _SessionPlan(spec, rng, tok, base_seed, compact_ids=compact_ids)
    if plan.num_sessions and bool(np.any(np.diff(plan.starts) < 0)):
        yield from _generate_sorted(plan, rng)
        return
    yield from _generate_merged(plan, rng)


def _choice(rng: np.random.Generator, n: int, p: np.ndarray, size: int) -> np.ndarray:
    if n == 1:
        return np.zeros(size, dtype=np.int64)
    return rng.choice(n, size=size, p=p).astype(np.int64)


#: sessions whose unique prompt tokens are drawn in one ``rng`` call (streamed generation)
DRAW_CHUNK_SESSIONS = 256


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
