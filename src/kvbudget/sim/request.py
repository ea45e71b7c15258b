"""A request inside the simulated engine (mutable state, slotted for speed).

Token content: the prompt's token ids, then generated tokens. Generated token ids are a
deterministic function of a per-request seed drawn from the engine's ``numpy`` generator when
the request is added (:func:`generated_token_id`), so stepping one decode step at a time and
advancing many at once give identical ids and block hashes.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from kvbudget.sim.prefix import BlockHash, ChainHasher
from kvbudget.workload.request import PlannedRequest

Status = Literal["waiting", "loading", "running", "finished", "aborted"]

_MIX = 2654435761  # Knuth's multiplicative constant


def generated_token_id(seed: int, index: int, vocab_size: int) -> int:
    """Token id of output ``index`` (0-based) of a request whose seed is ``seed``."""
    return (seed + (index + 1) * _MIX) % vocab_size


#: per-request records of the hot path (EngineRequest, SimRequest, RequestResult, RouteRequest,
#: EngineStats) write their own ``__init__`` and keep ``@dataclass`` for eq, repr and hash: a
#: dataclass-generated ``__init__`` is interpreted Python even in the mypyc build, a hand-written
#: one is compiled (docs/simulator.md, "Compiled build (mypyc)"). ``Final`` keeps the former ``frozen``
#: promise: mypy refuses an assignment outside ``__init__``, and the compiled class refuses
#: one at run time.
@dataclass(slots=True, init=False, unsafe_hash=True)
class EngineRequest:
    """A request as the engine receives it."""

    request_id: Final[str]
    #: a tuple, or an ``array('q')`` (the streamed generator's compact ids): read-only
    prompt_token_ids: Final[Sequence[int]]
    max_output_tokens: Final[int]
    arrival_s: Final[float]
    priority: Final[int]
    cache_salt: Final[str | None]
    adapter_id: Final[str | None]
    mm_hashes: Final[tuple[str, ...]]
    session_id: Final[str | None]
    tenant: Final[str]
    cell_id: Final[str | None]
    cancel_after_tokens: Final[int | None]
    #: arrives with its context's KV transferred (a session migrated by transfer): every
    #: prompt token but the last is present (kvbudget.sim.lifecycle, kvbudget.sim.disagg)
    kv_transferred: Final[bool]

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        max_output_tokens: int,
        arrival_s: float = 0.0,
        priority: int = 0,
        cache_salt: str | None = None,
        adapter_id: str | None = None,
        mm_hashes: tuple[str, ...] = (),
        session_id: str | None = None,
        tenant: str = "default",
        cell_id: str | None = None,
        cancel_after_tokens: int | None = None,
        kv_transferred: bool = False,
    ) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.max_output_tokens = max_output_tokens
        self.arrival_s = arrival_s
        self.priority = priority
        self.cache_salt = cache_salt
        self.adapter_id = adapter_id
        self.mm_hashes = mm_hashes
        self.session_id = session_id
        self.tenant = tenant
        self.cell_id = cell_id
        self.cancel_after_tokens = cancel_after_tokens
        self.kv_transferred = kv_transferred

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


@dataclass(slots=True, eq=False, init=False)
class SimRequest:
    """Scheduler-side state of one request (its own ``__init__``: see :class:`EngineRequest`)."""

    spec: EngineRequest
    seed: int
    vocab_size: int
    hasher: ChainHasher | None
    arrival_order: int
    status: Status
    num_computed_tokens: int
    num_output_tokens: int
    #: tokens whose KV is being reloaded from a lower tier (computed once the load ends)
    loading_until_s: float
    #: block ids per KV group (null block 0 marks released sliding-window slots)
    block_ids: list[list[int]]
    #: number of leading blocks per group already released (sliding window)
    num_skipped_blocks: list[int]
    block_hashes: list[BlockHash]
    #: how many of this request's blocks (group 0) are registered in the hash table
    num_cached_blocks: int
    num_preemptions: int
    #: prompt tokens served from the cache at first scheduling, by tier ("gpu", "cpu", ...)
    cached_tokens_by_tier: dict[str, int]
    first_scheduled_s: float | None
    first_token_s: float | None
    finish_s: float | None
    finish_reason: str | None
    has_been_scheduled: bool
    #: lazy decode bookkeeping of the fast path (kvbudget.sim.fastpath); -1 = not lazy
    lazy_g0: int
    lazy_c0: int
    lazy_o0: int
    running_seq: int

    def __init__(
        self,
        spec: EngineRequest,
        seed: int,
        vocab_size: int,
        hasher: ChainHasher | None,
        arrival_order: int,
        status: Status = "waiting",
    ) -> None:
        self.spec = spec
        self.seed = seed
        self.vocab_size = vocab_size
        self.hasher = hasher
        self.arrival_order = arrival_order
        self.status = status
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.loading_until_s = 0.0
        self.block_ids = []
        self.num_skipped_blocks = []
        self.block_hashes = []
        self.num_cached_blocks = 0
        self.num_preemptions = 0
        self.cached_tokens_by_tier = {}
        self.first_scheduled_s = None
        self.first_token_s = None
        self.finish_s = None
        self.finish_reason = None
        self.has_been_scheduled = False
        self.lazy_g0 = -1
        self.lazy_c0 = 0
        self.lazy_o0 = 0
        self.running_seq = 0

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
