"""The outcome of one streamed request and how its SSE events are interpreted.

Kept apart from the HTTP client so the parsing rules can be read (and tested) on their own:
an event that is not JSON, or an ``{"error": ...}`` event, makes the request an error; content
pieces are ``choices[0].text`` (completions) or ``choices[0].delta.content`` (chat), and every
chunk that carries a token counts, its text empty or not (:func:`token_piece`); the last
``usage`` object gives the token counts and ``prompt_tokens_details.cached_tokens``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kvbudget.records import ErrorKind, excerpt

Endpoint = Literal["completions", "chat"]

_OOM_MARKERS = ("out of memory", "outofmemory", "kv cache is full")
_OOM_WORD = re.compile(r"\boom\b")


def looks_like_oom(text: str) -> bool:
    """Whether an error text reports an out-of-memory condition."""
    low = text.lower()
    return any(m in low for m in _OOM_MARKERS) or _OOM_WORD.search(low) is not None


@dataclass(slots=True)
class StreamOutcome:
    """Raw outcome of one streamed request (times on the perf_counter clock)."""

    request_id: str
    status: Literal["ok", "error", "cancelled"] = "ok"
    error_kind: ErrorKind | None = None
    http_status: int | None = None
    error_excerpt: str | None = None
    sent_s: float | None = None
    first_token_s: float | None = None
    done_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    cached_tokens: int | None = None
    num_events: int = 0
    headers: dict[str, str] | None = None
    #: the engine's own per-request timings when its final chunk carries them (llama.cpp:
    #: prompt_n, prompt_ms, predicted_n, predicted_ms, cache_n); numeric entries only
    server_timings: dict[str, float] | None = None

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_times_s)

    def output_tokens(self) -> int:
        """Server-reported completion tokens, else the number of content chunks."""
        if self.usage_completion_tokens is not None:
            return self.usage_completion_tokens
        return len(self.chunk_times_s)

    def token_times_s(self) -> list[float]:
        """One arrival time per output token.

        Equal to the chunk times when every chunk carried one token (the usual case); when the
        server reports more tokens than chunks, chunk ``i`` gets ``floor``/``ceil`` of the
        even share (an approximation; per-chunk times stay exact in ``chunk_times_s``).
        """
        chunks = self.chunk_times_s
        n_tokens = self.output_tokens()
        if not chunks or n_tokens == len(chunks):
            return list(chunks)
        out: list[float] = []
        n = len(chunks)
        for i, t in enumerate(chunks):
            share = (n_tokens * (i + 1)) // n - (n_tokens * i) // n
            out.extend([t] * share)
        return out


def token_piece(choice: Mapping[str, Any], endpoint: Endpoint) -> str | None:
    """The text of the output token a streamed choice carries (``""`` for a token whose text is
    empty), or ``None`` when it carries no token.

    Text is not required: vLLM streams one chunk per token, and a token whose text is empty (a
    special token, bytes its detokenizer holds back until a character is complete, or the stop
    token ending a request, whose text vLLM leaves out) comes as ``"text": ""``; vLLM 0.32's
    ``benchmarks/lib/endpoint_request_func.py`` counts every such chunk ("text could be empty
    here e.g. for special tokens"). Not tokens: a chat chunk that only announces the role, and
    an empty closing chunk that only gives the finish reason (llama.cpp ends its stream so:
    its last token came in the chunk before). vLLM's own closing chunk carries the last token
    and says so with a ``stop_reason`` key, which llama.cpp's lacks (both recorded in
    ``tests/unit/load/fixtures/sse/``).
    """
    if endpoint == "chat":
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            return None
        piece = delta.get("content")
        if "role" in delta and not piece:
            return None
    else:
        piece = choice.get("text")
    if not isinstance(piece, str):
        return None
    if piece or not choice.get("finish_reason") or "stop_reason" in choice:
        return piece
    return None


def parse_events(
    events: list[tuple[float, bytes]], endpoint: Endpoint, out: StreamOutcome
) -> tuple[ErrorKind, str] | None:
    """Fill ``out`` from the raw events; return (kind, text) for an error event or bad JSON."""
    pieces: list[str] = []
    chunk_times = out.chunk_times_s
    out.num_events = len(events)
    try:  # one parse for the whole stream (far cheaper than one json.loads per event)
        objs: list[Any] = json.loads(b"[" + b",".join(d for _, d in events) + b"]")
        if len(objs) != len(events):
            raise ValueError("an event held more than one JSON value")
    except ValueError:
        objs = []
        for _, data in events:
            try:
                objs.append(json.loads(data))
            except ValueError:
                return "broken_stream", f"malformed SSE event (not JSON): {data[:80]!r}"
    for (t, data), obj in zip(events, objs, strict=True):
        if not isinstance(obj, dict):
            return "broken_stream", f"malformed SSE event (not an object): {data[:80]!r}"
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            out.text = "".join(pieces)
            return "other", f"error event: {msg}"
        choices = obj.get("choices") or []
        if choices:
            choice = choices[0]
            piece = token_piece(choice, endpoint) if isinstance(choice, dict) else None
            if piece is not None:
                if piece:
                    pieces.append(piece)
                chunk_times.append(t)
                if out.first_token_s is None:
                    out.first_token_s = t
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            if reason:
                out.finish_reason = reason
        timings = obj.get("timings")
        if isinstance(timings, dict):
            out.server_timings = {
                k: float(v)
                for k, v in timings.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
        usage = obj.get("usage")
        if isinstance(usage, dict):
            out.usage_prompt_tokens = usage.get("prompt_tokens", out.usage_prompt_tokens)
            out.usage_completion_tokens = usage.get(
                "completion_tokens", out.usage_completion_tokens
            )
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and details.get("cached_tokens") is not None:
                out.cached_tokens = int(details["cached_tokens"])
    out.text = "".join(pieces)
    return None


def failed_outcome(out: StreamOutcome, kind: ErrorKind, text: str, now_s: float) -> StreamOutcome:
    """``out`` marked failed at ``now_s``: an error text that says out of memory makes it
    ``oom``; a short excerpt of the text is kept."""
    out.status = "error"
    out.error_kind = (
        "oom"
        if kind in ("http_status", "broken_stream", "other") and looks_like_oom(text)
        else kind
    )
    out.error_excerpt = excerpt(text) if text else None
    out.done_s = now_s
    return out


def carries_token(data: bytes, endpoint: Endpoint) -> bool:
    """Whether one streamed event carries an output token, by the rule the outcome is parsed
    with (:func:`token_piece`: its text may be empty); parsed JSON,
    whatever its spacing. Cancellation counts tokens from this."""
    try:
        event = json.loads(data)
    except ValueError:
        return False
    if not isinstance(event, dict):
        return False
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    return token_piece(choices[0], endpoint) is not None
