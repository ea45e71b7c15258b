"""One record per request, for the simulator and for real HTTP engines alike.

Times are seconds on the run's own monotonic timeline (``0.0`` = the run's start), so records
from one run compare directly; wall-clock time lives in the result document, not here.
Derived latencies follow the usual definitions:

* ``ttft_s = first_token_s - sent_s`` (time to the first streamed token),
* ``e2e_s = done_s - sent_s``,
* ``tpot_s = (done_s - first_token_s) / (output_tokens - 1)`` (needs two or more tokens),
* ITL is the list of gaps between consecutive ``token_times_s`` (see :meth:`itl_s`).

Prompts are private: a record carries ``prompt_sha256``; ``prompt_text`` / ``output_text`` only
when the user asked to keep them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

RequestStatus = Literal["ok", "error", "cancelled"]
ErrorKind = Literal[
    "connect",
    "timeout",
    "http_status",
    "broken_stream",
    "truncated_stream",
    "oom",
    "cancelled",
    "other",
]
RecordSource = Literal["measured", "simulated"]

REQUEST_STATUSES: tuple[RequestStatus, ...] = get_args(RequestStatus)
ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)

#: longest error body excerpt kept in a record (characters)
MAX_ERROR_EXCERPT_CHARS = 200


def sha256_text(text: str) -> str:
    """Hex sha256 of UTF-8 text (how prompts and outputs are stored by default)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def excerpt(text: str, limit: int = MAX_ERROR_EXCERPT_CHARS) -> str:
    """One-line, bounded excerpt of an error body."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class RequestRecord(BaseModel):
    """What happened to one request (measured over HTTP or simulated)."""

    model_config = ConfigDict(extra="forbid")

    request_id: str
    source: RecordSource
    status: RequestStatus
    cell_id: str | None = None
    tenant: str | None = None
    replica: str | None = None
    session_id: str | None = None
    worker: int | None = None
    #: 0 for the first run; +1 for each ``--resume`` (each segment has its own timeline)
    run_segment: int = Field(default=0, ge=0)
    warmup: bool = False

    error_kind: ErrorKind | None = None
    http_status: int | None = None
    error_excerpt: str | None = None
    finish_reason: str | None = None

    scheduled_s: float | None = None
    sent_s: float | None = None
    first_token_s: float | None = None
    done_s: float | None = None
    #: arrival time of every output token (a chunk with k tokens gives k equal entries)
    token_times_s: list[float] = Field(default_factory=list)
    #: arrival time of every streamed event that carried output (one per chunk)
    chunk_times_s: list[float] = Field(default_factory=list)
    #: lateness of the send against the schedule (open loop), seconds
    schedule_lag_s: float | None = None

    prompt_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)
    cached_tokens_by_tier: dict[str, int] = Field(default_factory=dict)
    #: where the token counts came from: "usage" (server), "stream" (counted events),
    #: "simulated"
    token_count_source: str | None = None
    #: the same counts from an independent tokenizer (server /tokenize or local), if checked
    prompt_tokens_check: int | None = None
    output_tokens_check: int | None = None
    preemptions: int = Field(default=0, ge=0)

    queue_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    prompt_sha256: str | None = None
    output_sha256: str | None = None
    prompt_text: str | None = None
    output_text: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> RequestRecord:
        if self.status == "ok" and self.error_kind is not None:
            raise ValueError(
                f"request {self.request_id}: status 'ok' cannot carry error_kind "
                f"{self.error_kind!r}; use status 'error'"
            )
        if self.status == "error" and self.error_kind in (None, "cancelled"):
            raise ValueError(
                f"request {self.request_id}: status 'error' needs an error_kind other than "
                f"'cancelled' (got {self.error_kind!r}); a cancelled request has status "
                "'cancelled'"
            )
        if self.status == "cancelled" and self.error_kind not in (None, "cancelled"):
            raise ValueError(
                f"request {self.request_id}: status 'cancelled' has error_kind "
                f"{self.error_kind!r}; expected 'cancelled' or none"
            )
        return self

    def tokens_at_one_instant(self) -> bool:
        """:func:`at_one_instant` of this record's token times (its TPOT is not observable)."""
        return at_one_instant(self.token_times_s)

    def itl_s(self) -> list[float]:
        """Inter-token latencies: gaps between consecutive token arrivals (per token)."""
        t = self.token_times_s
        return [t[i + 1] - t[i] for i in range(len(t) - 1)]

    def chunk_itl_s(self) -> list[float]:
        """Gaps between consecutive streamed chunks (per event)."""
        t = self.chunk_times_s
        return [t[i + 1] - t[i] for i in range(len(t) - 1)]


def at_one_instant(token_times_s: Sequence[float]) -> bool:
    """Whether two or more output tokens all reached the client at one instant: the client
    was not scheduled while the server streamed them (or the server sent them in one burst),
    so their TPOT is not observable (left out rather than counted as 0 s)."""
    t = token_times_s
    return len(t) >= 2 and t[-1] <= t[0]


def derive_latencies(
    *,
    sent_s: float | None,
    first_token_s: float | None,
    done_s: float | None,
    output_tokens: int,
) -> tuple[float | None, float | None, float | None]:
    """(ttft_s, tpot_s, e2e_s) from the raw times, ``None`` where undefined."""
    ttft = first_token_s - sent_s if sent_s is not None and first_token_s is not None else None
    e2e = done_s - sent_s if sent_s is not None and done_s is not None else None
    tpot = None
    if first_token_s is not None and done_s is not None and output_tokens >= 2:
        tpot = (done_s - first_token_s) / (output_tokens - 1)
    return ttft, tpot, e2e
