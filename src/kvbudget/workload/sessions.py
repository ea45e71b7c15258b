"""The per-session draws of a workload, streamed: ``generate``'s random stream in bounded memory.

The draws, in this order from one generator: arrival times (``spec.arrivals.times``), tenants,
prefix groups, first-turn input lengths, output lengths (``sessions x turns``), later turns'
user lengths, priorities, cancel flags, dynamic-field tokens; then the prompt tokens, a chunk of
sessions at a time. Each whole-array quantity is a :class:`~kvbudget.workload.draws.Column`
(skipped once, then replayed :data:`BLOCK_SESSIONS` sessions at a time), so the plan holds a
block's numbers, not every session's, and the prompt tokens start where they always did.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from kvbudget.workload.arrival_stream import arrival_column
from kvbudget.workload.draws import Column, Stage
from kvbudget.workload.prefixes import PromptBuilder, zipf_probabilities

#: sessions whose unique prompt tokens are drawn in one ``rng`` call (streamed generation)
DRAW_CHUNK_SESSIONS = 256
#: sessions whose per-session numbers are replayed at once
BLOCK_SESSIONS = 4096

Row = tuple[float, int, int, tuple[Any, ...]]


def _choice_stage(n: int, p: np.ndarray) -> Stage:
    if n == 1:
        return lambda rng, m, _: np.zeros(m, dtype=np.int64)
    return lambda rng, m, _: rng.choice(n, size=m, p=p).astype(np.int64)


def _length_column(dist: Any, rng: np.random.Generator, n: int) -> tuple[Column, Any]:
    return Column(rng, dist.stages(), n), dist


class _Block:
    """One block's per-session numbers, as Python lists (cheap to index per request)."""

    def __init__(self, plan: SessionPlan, a: int, b: int) -> None:
        m = b - a
        turns = plan.turns
        self.starts = plan.starts.take(m).tolist()
        self.tenant_idx = plan.tenant_idx.take(m).tolist()
        self.groups = None if plan.groups is None else plan.groups.take(m).tolist()
        first_len = plan.first_len[1].finish(plan.first_len[0].take(m))
        out_len = plan.out_len[1].finish(plan.out_len[0].take(m * turns))
        self.out_len = np.maximum(out_len, 1).reshape(m, turns).tolist()
        user_len = plan.user_len[1].finish(plan.user_len[0].take(m * (turns - 1)))
        user_len = user_len.reshape(m, turns - 1)
        self.user_len = user_len.tolist()
        self.prio = plan.prio.take(m * turns).tolist()
        self.cancel = (plan.cancel.take(m * turns) < plan.spec.cancel_fraction).tolist()
        dyn = plan.spec.prefix.dynamic_tokens
        self.dynamic = plan.dynamic.take(m * dyn).reshape(m, dyn)
        unique_len = np.maximum(first_len - plan.overhead, 1)
        self.unique_len = unique_len.tolist()
        #: prompt tokens each session draws (its unique part, then each later turn's user part)
        self.draw_len = unique_len + user_len.sum(axis=1)


class SessionPlan:
    """The per-session draws of one workload, in :func:`generate`'s order, replayed by block."""

    def __init__(
        self,
        spec: Any,
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
        self.starts = arrival_column(spec.arrivals, rng, cap, spec.duration_s)
        #: arrival times in order (else :func:`generate` sorts every row)
        self.sorted_starts = self.starts.nondecreasing
        n = self.starts.size
        self.num_sessions = n
        tenants = spec.tenants
        self.tenant_idx = Column(
            rng, [_choice_stage(len(tenants.names), tenants.probabilities())], n
        )
        pfx = spec.prefix
        self.groups = (
            Column(
                rng,
                [_choice_stage(pfx.num_groups, zipf_probabilities(pfx.num_groups, pfx.zipf_s))],
                n,
            )
            if pfx.num_groups
            else None
        )
        self.first_len = _length_column(spec.input_tokens, rng, n)
        self.out_len = _length_column(spec.output_tokens, rng, n * turns)
        user_dist = spec.sessions.user_tokens or spec.input_tokens
        self.user_len = _length_column(user_dist, rng, n * (turns - 1))
        pw = np.asarray(spec.priority_weights or [1.0] * len(spec.priorities), dtype=np.float64)
        self.prio = Column(rng, [_choice_stage(len(spec.priorities), pw / pw.sum())], n * turns)
        self.cancel = Column(rng, [lambda g, m, _: g.random(m)], n * turns)
        self.dynamic = Column(rng, [lambda g, m, _: tok.random_ids(g, m)], n * pfx.dynamic_tokens)
        self.builder = PromptBuilder(pfx, tok, base_seed)
        self.overhead = (
            pfx.shared_tokens + pfx.dynamic_tokens if spec.input_tokens_include_prefix else 0
        )
        self.salts = {name: tenants.salt_for(name, base_seed) for name in tenants.names}
        self._priorities = [int(p) for p in spec.priorities]
        self._names = list(tenants.names)
        self._plain = not pfx.shared_tokens and not pfx.dynamic_tokens
        self._keep_text = spec.keep_prompt_text
        self._cancel_after = spec.cancel_after_tokens
        self._cell_id = spec.cell_id
        self._turn_interval_s = spec.sessions.turn_interval_s

    def sessions(self, rng: np.random.Generator) -> Iterator[list[Row]]:
        """Each session's turns in session order, drawing prompt tokens chunk by chunk."""
        for a0 in range(0, self.num_sessions, BLOCK_SESSIONS):
            b0 = min(a0 + BLOCK_SESSIONS, self.num_sessions)
            block = _Block(self, a0, b0)
            for a in range(a0, b0, DRAW_CHUNK_SESSIONS):
                b = min(a + DRAW_CHUNK_SESSIONS, b0)
                lens = block.draw_len[a - a0 : b - a0]
                pool: Any = self.tok.random_ids(rng, int(lens.sum()))
                if self.compact_ids:
                    pool = compact(pool)  # sliced per session: one copy of each prompt
                offset = 0
                for s, n in zip(range(a, b), lens.tolist(), strict=True):
                    yield self.session(s, s - a0, block, pool[offset : offset + n])
                    offset += n

    def session(self, s: int, i: int, block: _Block, ids_pool: Any) -> list[Row]:
        """Every turn of session ``s`` (``i`` within ``block``); ``ids_pool``: its drawn tokens
        (an ``array('q')`` with ``compact_ids``, else an int64 array)."""
        tok = self.tok
        turns = self.turns
        tenant_index = block.tenant_idx[i]
        tenant = self._names[tenant_index]
        group = None if block.groups is None else block.groups[i]
        n_unique = block.unique_len[i]
        cursor = n_unique
        ids: Sequence[int]
        if self.compact_ids:
            # a fresh array per session already: no second copy when it is the whole prompt
            unique = ids_pool if n_unique == len(ids_pool) else ids_pool[:n_unique]
            if self._plain:  # no shared part, no dynamic field: the unique part alone
                ids, reusable = unique, 0
            else:
                shared = self.builder.shared_part(tenant_index, group)
                ids, reusable = self._compact_first_turn(shared, block.dynamic[i], unique)
        else:
            shared = self.builder.shared_part(tenant_index, group)
            unique = tuple(ids_pool[:n_unique].tolist())
            dynamic = tuple(block.dynamic[i].tolist())
            ids, reusable = self.builder.compose(shared, dynamic, unique)
        session_id = f"s{s:06d}" if turns > 1 else None
        out_len = block.out_len[i]
        start = block.starts[i]
        salt = self.salts[tenant]
        keep_text = self._keep_text
        cancel_after = self._cancel_after
        cell_id = self._cell_id
        interval = self._turn_interval_s
        priorities = self._priorities
        prio = block.prio
        cancel = block.cancel
        rows: list[Row] = []
        for k in range(turns):
            if k > 0:
                prev_out = tok.output_ids(ids, out_len[k - 1])
                n_user = block.user_len[i][k - 1]
                user = ids_pool[cursor : cursor + n_user]
                cursor += n_user
                reusable = len(ids) + len(prev_out)
                if isinstance(ids, array):
                    ids = ids + array("q", prev_out) + user
                else:
                    ids = tuple(ids) + tuple(prev_out) + tuple(user.tolist())
            j = i * turns + k
            arrival_s = start + k * interval
            # PlannedRequest's fields after request_id, in field order (positional: cheaper
            # than a dict of keywords, once per request)
            fields = (
                arrival_s,
                ids,
                out_len[k],
                tok.decode(ids) if keep_text else None,
                tenant,
                salt,
                session_id,
                group,
                priorities[prio[j]],
                cancel_after if cancel[j] else None,
                cell_id,
                int(reusable),
                k,
            )
            rows.append((arrival_s, k, s, fields))
        return rows

    def _compact_first_turn(
        self, shared: tuple[int, ...], dynamic: np.ndarray, unique: array[int]
    ) -> tuple[array[int], int]:
        """:meth:`PromptBuilder.compose`'s layout, as one ``array('q')``."""
        if not shared and not dynamic.size:
            return unique, 0
        if self.spec.prefix.dynamic_position == "before" and dynamic.size:
            return compact(dynamic) + array("q", shared) + unique, 0
        return array("q", shared) + compact(dynamic) + unique, len(shared)


def compact(ids: np.ndarray) -> array[int]:
    """int64 ids as an ``array('q')``: one copy of the buffer, no Python int per id."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(ids, dtype=np.int64).data.cast("B"))
    return out
