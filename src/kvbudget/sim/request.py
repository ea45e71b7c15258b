"""A request inside the simulated engine (mutable state, slotted for speed).

Token content: the prompt's token ids, then generated tokens. Generated token ids are a
deterministic function of a per-request seed drawn from the engine's ``numpy`` generator when
the request is added (:func:`generated_token_id`), so stepping one decode step at a time and
advancing many at once give identical ids and block hashes.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from kvbudget.sim.prefix import BlockHash, ChainHasher
from kvbudget.workload.request import PlannedRequest

Status = Literal["waiting", "loading", "running", "finished", "aborted"]

_MIX = 2654435761  # Knuth's multiplicative constant


def generated_token_id(seed: int, index: int, vocab_size: int) -> int:
    """Token id of output ``index`` (0-based) of a request whose seed is ``seed``."""
    return (seed + (index + 1) * _MIX) % vocab_size


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """A request as the engine receives it."""

    request_id: str
    #: a tuple, or an ``array('q')`` (the streamed generator's compact ids): read-only
    prompt_token_ids: Sequence[int]
    max_output_tokens: int
    arrival_s: float = 0.0
    priority: int = 0
    cache_salt: str | None = None
    adapter_id: str | None = None
    mm_hashes: tuple[str, ...] = ()
    session_id: str | None = None
    tenant: str = "default"
    cell_id: str | None = None
    cancel_after_tokens: int | None = None
    #: arrives with its context's KV transferred (a session migrated by transfer): every
    #: prompt token but the last is present (kvbudget.sim.lifecycle, kvbudget.sim.disagg)
    kv_transferred: bool = False

    @property
    def num_prompt_tokens(self) -> int:
        """Prompt length in tokens."""
        return len(self.prompt_token_ids)


#: what the engine takes as a request: its own type, or the workload's, converted on arrival
RequestIn = EngineRequest | PlannedRequest


def as_engine_request(req: RequestIn, *, arrival_s: float | None = None) -> EngineRequest:
    """The engine's view of ``req``: an :class:`EngineRequest` as it is (no copy), a
    :class:`PlannedRequest` through :func:`engine_request` (the one conversion).
    ``arrival_s`` replaces the request's own arrival time (a cell's timeline offset).
    """
    if isinstance(req, EngineRequest):
        return req if arrival_s is None else replace(req, arrival_s=arrival_s)
    return engine_request(
        req.request_id,
        req.arrival_s if arrival_s is None else arrival_s,
        req.prompt_token_ids,
        req.output_tokens,
        tenant=req.tenant,
        cache_salt=req.cache_salt,
        session_id=req.session_id,
        priority=req.priority,
        cancel_after_tokens=req.cancel_after_tokens,
        cell_id=req.cell_id,
    )


def engine_request(
    request_id: str,
    arrival_s: float,
    prompt_token_ids: Sequence[int],
    output_tokens: int,
    prompt_text: str | None = None,
    tenant: str = "default",
    cache_salt: str | None = None,
    session_id: str | None = None,
    prefix_group: int | None = None,
    priority: int = 0,
    cancel_after_tokens: int | None = None,
    cell_id: str | None = None,
    shared_prefix_tokens: int = 0,
    turn_index: int = 0,
) -> EngineRequest:
    """A planned request's fields (:class:`PlannedRequest`'s, in its order: a
    :class:`~kvbudget.workload.request.RequestFactory`) as the engine's request, with the
    engine's own fields at their defaults (no adapter, no multimodal inputs, no KV
    transferred). The prompt text, prefix group, shared-prefix length and turn are the
    workload's, not the engine's: dropped. The generator builds this directly on the
    trace-scale path (``generate_stream(make=engine_request)``).
    """
    ids = prompt_token_ids
    return EngineRequest(
        request_id,
        # a read-only sequence: compact ids and tuples as they are, anything else copied
        ids if ids.__class__ is array or ids.__class__ is tuple else tuple(ids),
        output_tokens,
        arrival_s,
        priority,
        cache_salt,
        None,
        (),
        session_id,
        tenant,
        cell_id,
        cancel_after_tokens,
    )


@dataclass(slots=True, eq=False)
class SimRequest:
    """Scheduler-side state of one request."""

    spec: EngineRequest
    seed: int
    vocab_size: int
    hasher: ChainHasher | None
    arrival_order: int
    status: Status = "waiting"
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    #: tokens whose KV is being reloaded from a lower tier (computed once the load ends)
    loading_until_s: float = 0.0
    #: block ids per KV group (null block 0 marks released sliding-window slots)
    block_ids: list[list[int]] = field(default_factory=list)
    #: number of leading blocks per group already released (sliding window)
    num_skipped_blocks: list[int] = field(default_factory=list)
    block_hashes: list[BlockHash] = field(default_factory=list)
    #: how many of this request's blocks (group 0) are registered in the hash table
    num_cached_blocks: int = 0
    num_preemptions: int = 0
    #: prompt tokens served from the cache at first scheduling, by tier ("gpu", "cpu", ...)
    cached_tokens_by_tier: dict[str, int] = field(default_factory=dict)
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    finish_reason: str | None = None
    has_been_scheduled: bool = False
    #: lazy decode bookkeeping of the fast path (kvbudget.sim.fastpath); -1 = not lazy
    lazy_g0: int = -1
    lazy_c0: int = 0
    lazy_o0: int = 0
    running_seq: int = 0

    @property
    def request_id(self) -> str:
        return self.spec.request_id

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.spec.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt + generated tokens so far (the newest one not yet computed)."""
        return len(self.spec.prompt_token_ids) + self.num_output_tokens

    @property
    def max_tokens(self) -> int:
        """Length when finished (the last generated token is never computed)."""
        return len(self.spec.prompt_token_ids) + self.spec.max_output_tokens - 1

    @property
    def output_limit(self) -> int:
        """Outputs after which the request ends: its length, or the client's cancellation."""
        cancel = self.spec.cancel_after_tokens
        limit = self.spec.max_output_tokens
        return limit if cancel is None or cancel >= limit else max(1, cancel)

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens served from any cache tier at first scheduling."""
        return sum(self.cached_tokens_by_tier.values())

    def token_slice(self, start: int, end: int) -> Sequence[int]:
        """Tokens ``start .. end-1`` (prompt then generated)."""
        prompt = self.spec.prompt_token_ids
        num_prompt = len(prompt)
        if end <= num_prompt:
            return prompt[start:end]
        seed = self.seed
        vocab = self.vocab_size
        first = max(start, num_prompt) - num_prompt
        # generated_token_id for j in first .. end-num_prompt-1, as one C-level map
        generated = list(
            map(
                vocab.__rmod__,
                range(seed + (first + 1) * _MIX, seed + (end - num_prompt + 1) * _MIX, _MIX),
            )
        )
        if start < num_prompt:
            return list(prompt[start:num_prompt]) + generated
        return generated

    def update_block_hashes(self, num_tokens: int) -> None:
        """Extend the hash chain to every full block within the first ``num_tokens``."""
        hasher = self.hasher
        if hasher is None:
            return
        size = hasher.block_size
        start = len(self.block_hashes) * size
        end = (num_tokens // size) * size
        if end <= start:
            return
        prompt = self.spec.prompt_token_ids
        if end <= len(prompt):
            hasher.extend(self.block_hashes, prompt, end)  # the prompt itself, not a copy
        else:
            hasher.extend(self.block_hashes, self.token_slice(start, end), end, offset=start)
