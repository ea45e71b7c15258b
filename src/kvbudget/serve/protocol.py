"""OpenAI-compatible request parsing and response bodies for ``kvbudget serve``.

Parsing mirrors vLLM's behaviour where it matters to a load test: ``max_tokens`` (chat also
``max_completion_tokens``; default 16), ``ignore_eos`` (accepted: the synthetic engine never
emits EOS), ``cache_salt`` (a non-empty string, vLLM's rule), ``stream`` and
``stream_options.include_usage``, ``n`` must be 1, and the context-length check with vLLM's
wording. Errors use OpenAI's ``{"error": {"message", "type", "param", "code"}}`` shape.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kvbudget.workload.tokenizer import SyntheticTokenizer

DEFAULT_MAX_TOKENS = 16


class RequestInvalid(Exception):
    """A request the server refuses (HTTP status, message, offending field)."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = "NotFoundError" if self.status == 404 else "BadRequestError"
        return {
            "error": {
                "message": self.message,
                "type": kind,
                "param": self.param,
                "code": self.status,
            }
        }


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    chat: bool
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    stream: bool
    include_usage: bool
    cache_salt: str | None


def parse_body(
    body: Any,
    *,
    chat: bool,
    model_name: str,
    tokenizer: SyntheticTokenizer,
    max_model_len: int,
) -> ParsedRequest:
    """Validate an OpenAI request body; raise :class:`RequestInvalid` with vLLM-like text."""
    if not isinstance(body, dict):
        raise RequestInvalid(400, "request body must be a JSON object")
    model = body.get("model", model_name)
    if model != model_name:
        raise RequestInvalid(404, f"The model `{model}` does not exist.", "model")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestInvalid(400, "'messages' must be a non-empty list", "messages")
        try:
            text = tokenizer.render_chat(messages)
        except Exception as exc:  # ConfigError from the tokenizer: one line
            raise RequestInvalid(400, str(exc), "messages") from exc
        ids = tuple(tokenizer.encode(text))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = tuple(tokenizer.encode(prompt))
        elif isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            if any(not 0 <= t < tokenizer.vocab_size for t in prompt):
                raise RequestInvalid(
                    400, f"token ids must be in [0, {tokenizer.vocab_size})", "prompt"
                )
            ids = tuple(prompt)
        else:
            raise RequestInvalid(
                400, "'prompt' must be a string or a list of token ids (one prompt)", "prompt"
            )
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise RequestInvalid(
            400, f"max_tokens must be an integer >= 1, got {max_tokens!r}", "max_tokens"
        )
    if not ids:
        raise RequestInvalid(400, "the prompt is empty (0 tokens)", "prompt")
    if body.get("n", 1) != 1:
        raise RequestInvalid(400, "only n=1 is supported by kvbudget serve", "n")
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise RequestInvalid(
            400, "Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt"
        )
    total = len(ids) + max_tokens
    if total > max_model_len:
        raise RequestInvalid(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {total} tokens ({len(ids)} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.",
            "max_tokens",
        )
    opts = body.get("stream_options") or {}
    return ParsedRequest(
        chat=chat,
        prompt_token_ids=ids,
        max_tokens=max_tokens,
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(opts, dict) and opts.get("include_usage", False)),
        cache_salt=salt,
    )


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


class ChunkMaker:
    """Builds the streamed chunks of one response (vLLM's shapes)."""

    def __init__(self, request_id: str, model: str, chat: bool) -> None:
        self.id = request_id
        self.model = model
        self.chat = chat
        self.created = int(time.time())
        self.object = "chat.completion.chunk" if chat else "text_completion"

    def _wrap(
        self, choices: list[dict[str, Any]], usage_: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage_ is not None:
            out["usage"] = usage_
        return out

    def role(self) -> dict[str, Any]:
        return self._wrap(
            [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
        )

    def token(self, piece: str, finish_reason: str | None) -> dict[str, Any]:
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": piece}}
        else:
            choice = {"index": 0, "text": piece}
        choice["logprobs"] = None
        choice["finish_reason"] = finish_reason
        return self._wrap([choice])

    def usage_chunk(self, usage_: dict[str, Any]) -> dict[str, Any]:
        return self._wrap([], usage_)

    def full(self, text: str, finish_reason: str | None, usage_: dict[str, Any]) -> dict[str, Any]:
        """The non-streaming response."""
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
            obj = "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage_,
        }
