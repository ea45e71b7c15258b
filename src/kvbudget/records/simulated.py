"""The one builder of a simulated request's record: how it ended decides its labels.

Every simulated path writes its records here: ``kvbudget sim --records-out`` (the cluster's
results), accept's simulated target (the driver's finished and refused requests) and the
llama.cpp slot engine. A request ended in one of three ways (:data:`Ended`), and each has
one set of labels, the ones a measured run writes for the same outcome:

- ``finished``: ``status="ok"``, the engine's ``finish_reason`` (``"length"``);
- ``aborted`` (the client cancelled it, or the server aborted it: a drained replica, a
  disconnect): ``status="cancelled"``, ``error_kind="cancelled"`` and ``finish_reason="abort"``,
  vLLM's meaning (``FinishReason.ABORT``, "aborted by client", whose string is ``"abort"``:
  ``FINISH_REASON_STRINGS`` in vLLM 0.32.0's ``vllm/v1/engine/__init__.py``), whatever the
  simulator's internal reason (a client's cancel or the driver's abort);
- ``error`` (refused, or never finished): ``status="error"``, ``error_kind`` ``"http_status"``
  with the HTTP status when the engine answers one (llama.cpp's 400 for a prompt that fits no
  slot), else ``"other"``, and the reason as the excerpt.

:func:`ended_as` decides the ending from the engine's status and finish reason (the paged
engine, :mod:`kvbudget.sim.request_result` and accept's simulated target); the slot engine's requests
end ``finished`` unless their client cancelled them (a shorter output) or they were refused.

Latencies come from the times (:func:`~kvbudget.records.request.derive_latencies`), as for a
measured record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from kvbudget.records.request import (
    MAX_ERROR_EXCERPT_CHARS,
    ErrorKind,
    RequestRecord,
    RequestStatus,
    derive_latencies,
)

Ended = Literal["finished", "aborted", "error"]
#: vLLM's finish reason of an aborted request (``FinishReason.ABORT``)
ABORT_FINISH_REASON = "abort"


#: the simulator's finish reasons of a request that did not finish on its own: a client's
#: cancel (``cancel_after_tokens``, a scale-in's cancel) and the driver's abort
_ABORTED_REASONS = frozenset({"cancelled", ABORT_FINISH_REASON})


def ended_as(status: str, finish_reason: str | None) -> Ended:
    """How a simulated request ended, from its engine status and finish reason (the one rule
    every simulated path uses): ``status`` ``"finished"`` is ``finished``; a cancel or an abort
    (:data:`_ABORTED_REASONS`) is ``aborted``, as a measured run records a request its client
    cancelled (``status="cancelled"``, :mod:`kvbudget.load.client`); anything else ``error``."""
    if status == "finished":
        return "finished"
    return "aborted" if finish_reason in _ABORTED_REASONS else "error"


def simulated_record(
    request_id: str,
    ended: Ended,
    *,
    sent_s: float | None,
    done_s: float | None,
    prompt_tokens: int | None,
    first_token_s: float | None = None,
    output_tokens: int = 0,
    token_times_s: Sequence[float] = (),
    finish_reason: str | None = None,
    error: str | None = None,
    http_status: int | None = None,
    scheduled_s: float | None = None,
    queue_s: float | None = None,
    cached_tokens: int | None = None,
    cached_tokens_by_tier: dict[str, int] | None = None,
    preemptions: int = 0,
    cell_id: str | None = None,
    tenant: str | None = None,
    replica: str | None = None,
    session_id: str | None = None,
    warmup: bool = False,
    prompt_sha256: str | None = None,
) -> RequestRecord:
    """The record of one simulated request that ended as ``ended`` (see the module)."""
    ttft, tpot, e2e = derive_latencies(
        sent_s=sent_s, first_token_s=first_token_s, done_s=done_s, output_tokens=output_tokens
    )
    status: RequestStatus = "ok"
    error_kind: ErrorKind | None = None
    excerpt: str | None = None
    if ended == "aborted":
        status, error_kind, finish_reason = "cancelled", "cancelled", ABORT_FINISH_REASON
    elif ended == "error":
        status, error_kind = "error", "other" if http_status is None else "http_status"
        excerpt = None if error is None else error[:MAX_ERROR_EXCERPT_CHARS]
        finish_reason = None
    return RequestRecord(
        request_id=request_id,
        source="simulated",
        status=status,
        error_kind=error_kind,
        http_status=http_status if ended == "error" else None,
        error_excerpt=excerpt,
        finish_reason=finish_reason,
        cell_id=cell_id,
        tenant=tenant,
        replica=replica,
        session_id=session_id,
        warmup=warmup,
        scheduled_s=scheduled_s,
        sent_s=sent_s,
        first_token_s=first_token_s,
        done_s=done_s,
        token_times_s=list(token_times_s),
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached_tokens,
        cached_tokens_by_tier=dict(cached_tokens_by_tier or {}),
        token_count_source="simulated",
        preemptions=preemptions,
        queue_s=queue_s,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        prompt_sha256=prompt_sha256,
    )
