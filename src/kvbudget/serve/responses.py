"""The response bodies of ``kvbudget serve``, typed: vLLM 0.32's shapes as ``TypedDict`` s.

Field names and order follow vLLM's pydantic responses (``CompletionResponse``,
``CompletionStreamResponse``, ``ChatCompletionResponse``, ``ChatCompletionStreamResponse`` in
``vllm/entrypoints/openai/{completion,chat_completion}/protocol.py``; ``UsageInfo`` and
``ErrorResponse`` in ``vllm/entrypoints/serve/engine/protocol.py``), with only the fields a
synthetic engine fills. ``TypedDict`` s are plain dicts at run time: a streamed token costs
no model object, and ``json.dumps`` writes them as they are.
"""

from __future__ import annotations

import time
from typing import Literal, NotRequired, TypedDict


class ErrorInfo(TypedDict):
    message: str
    code: int
    type: NotRequired[str]
    param: NotRequired[str | None]


class ErrorBody(TypedDict):
    error: ErrorInfo


class PromptTokensDetails(TypedDict):
    cached_tokens: int


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class Delta(TypedDict, total=False):
    role: str
    content: str


class CompletionStreamChoice(TypedDict):
    index: int
    text: str
    logprobs: None
    finish_reason: str | None


class ChatStreamChoice(TypedDict):
    index: int
    delta: Delta
    logprobs: None
    finish_reason: str | None


class Chunk(TypedDict):
    """One server-sent event of a streamed response."""

    id: str
    object: Literal["text_completion", "chat.completion.chunk"]
    created: int
    model: str
    choices: list[CompletionStreamChoice] | list[ChatStreamChoice]
    usage: NotRequired[Usage]


class Message(TypedDict):
    role: str
    content: str


class CompletionChoice(TypedDict):
    index: int
    text: str
    logprobs: None
    finish_reason: str | None


class ChatChoice(TypedDict):
    index: int
    message: Message
    finish_reason: str | None


class Completion(TypedDict):
    """A whole (non-streamed) response."""

    id: str
    object: Literal["text_completion", "chat.completion"]
    created: int
    model: str
    choices: list[CompletionChoice] | list[ChatChoice]
    usage: Usage


class TokenizeResult(TypedDict):
    count: int
    max_model_len: int
    tokens: list[int]


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> Usage:
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
        self.object: Literal["text_completion", "chat.completion.chunk"] = (
            "chat.completion.chunk" if chat else "text_completion"
        )

    def _wrap(
        self,
        choices: list[CompletionStreamChoice] | list[ChatStreamChoice],
        usage_: Usage | None = None,
    ) -> Chunk:
        out: Chunk = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage_ is not None:
            out["usage"] = usage_
        return out

    def role(self) -> Chunk:
        first: ChatStreamChoice = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        return self._wrap([first])

    def token(self, piece: str, finish_reason: str | None) -> Chunk:
        if self.chat:
            chat: ChatStreamChoice = {
                "index": 0,
                "delta": {"content": piece},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            return self._wrap([chat])
        text: CompletionStreamChoice = {
            "index": 0,
            "text": piece,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        return self._wrap([text])

    def usage_chunk(self, usage_: Usage) -> Chunk:
        empty: list[CompletionStreamChoice] = []
        return self._wrap(empty, usage_)

    def full(self, text: str, finish_reason: str | None, usage_: Usage) -> Completion:
        """The non-streaming response."""
        if self.chat:
            chat_choice: ChatChoice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
            return {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [chat_choice],
                "usage": usage_,
            }
        choice: CompletionChoice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage_,
        }
