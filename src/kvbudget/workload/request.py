"""``PlannedRequest``: one request a workload plans, before any target runs it.

The same object drives the simulator (virtual time) and the HTTP load runner (real
time): ``prompt_token_ids`` are ids of the shared synthetic tokenizer
(:mod:`kvbudget.workload.tokenizer`), so ``prompt_text`` — or
``decode(prompt_token_ids)`` when no text is stored — is the SAME prompt over HTTP and in
the simulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Protocol, TypeVar

from kvbudget.workload.tokenizer import decode


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One planned request.

    Fields (units in names):

    - ``request_id``: unique within a workload (``"r000042"``; sessions ``"s0003-t02"``).
    - ``arrival_s``: offset from the start of the run, seconds (>= 0). Closed-loop
      workloads set 0 for every request and let the runner pace them.
    - ``prompt_token_ids``: token ids of the shared synthetic tokenizer: a tuple, or an
      ``array('q')`` from the simulator's streamed generator (``compact_ids``: 8 bytes a token,
      no Python int per token; the same ids, so the same block hashes).
    - ``prompt_text``: the prompt as text, or ``None`` (then use :meth:`text`).
    - ``output_tokens``: tokens to generate (``max_tokens`` with ``ignore_eos``).
    - ``tenant``: tenant name (``"default"`` when the workload has one tenant).
    - ``cache_salt``: per-tenant salt for the prefix cache (vLLM ``cache_salt``) or ``None``.
    - ``session_id``: multi-turn session id or ``None``.
    - ``prefix_group``: index of the shared-prefix group used, or ``None``.
    - ``priority``: scheduler priority (lower value = served first, as in vLLM).
    - ``cancel_after_tokens``: abort the request after this many output tokens, or ``None``.
    - ``cell_id``: matrix cell (``"short/single"``) or scenario id, or ``None``.
    - ``shared_prefix_tokens``: length of the leading run of prompt tokens that other
      requests share by construction (system prompt, tool/document group, earlier turns of
      the session) — what a prefix cache can reuse at best. A dynamic field placed *before*
      the shared part makes it 0.
    - ``turn_index``: 0-based turn within a session (0 outside sessions).
    """

    request_id: str
    arrival_s: float
    prompt_token_ids: Sequence[int]
    output_tokens: int
    prompt_text: str | None = None
    tenant: str = "default"
    cache_salt: str | None = None
    session_id: str | None = None
    prefix_group: int | None = None
    priority: int = 0
    cancel_after_tokens: int | None = None
    cell_id: str | None = None
    shared_prefix_tokens: int = 0
    turn_index: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Number of prompt tokens."""
        return len(self.prompt_token_ids)

    def text(self) -> str:
        """The prompt as text: ``prompt_text`` if stored, else decoded from the token ids."""
        if self.prompt_text is not None:
            return self.prompt_text
        return decode(self.prompt_token_ids)


R_co = TypeVar("R_co", covariant=True)


class RequestFactory(Protocol[R_co]):
    """What builds one generated request from :class:`PlannedRequest`'s fields, positionally
    and in field order: ``PlannedRequest`` itself, or a consumer's own request type (the
    simulator's trace-scale path builds its engine request directly, one object a request)."""

    def __call__(
        self,
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
    ) -> R_co: ...


def build_with(make: RequestFactory[R_co], req: PlannedRequest) -> R_co:
    """``req`` rebuilt by ``make`` (for requests planned as ``PlannedRequest``, e.g. a trace's)."""
    if make is PlannedRequest:
        return req  # type: ignore[return-value]  # (the factory is the type itself)
    return make(*(getattr(req, f.name) for f in fields(PlannedRequest)))
