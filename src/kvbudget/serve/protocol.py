"""OpenAI-compatible request parsing for ``kvbudget serve``: typed bodies, one-line 400s.

A body is parsed into a pydantic model (:class:`CompletionBody`, :class:`ChatBody`,
:class:`TokenizeBody`) with vLLM 0.32's field names and types
(``vllm/entrypoints/openai/completion/protocol.py`` ``CompletionRequest``,
``vllm/entrypoints/openai/chat_completion/protocol.py`` ``ChatCompletionRequest``,
``vllm/entrypoints/generate/base/protocol.py`` ``StreamOptions`` and ``validate_cache_salt``);
unknown fields are accepted and ignored, as vLLM's ``OpenAIBaseModel`` (``extra="allow"``)
does. Then :func:`parse_body` applies vLLM's rules where they matter to a load test:
``max_tokens`` (chat: ``max_completion_tokens`` when given, else ``max_tokens``; default 16),
``ignore_eos`` (accepted: the synthetic engine never emits EOS), ``cache_salt`` (a non-empty
string of at most 128 characters without ``@``, ``/``, ``\\`` or NUL), ``stream`` and
``stream_options.include_usage``, ``n`` must be 1, and the context-length check with vLLM's
wording.

A body that does not fit is one :class:`RequestInvalid` line naming the field, the value and
the fix; prompts, messages and salts are described (type and size), never echoed. Errors use
OpenAI's ``{"error": {"message", "type", "param", "code"}}`` shape. The response bodies are
typed in :mod:`kvbudget.serve.responses`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError
from pydantic_core import ErrorDetails

from kvbudget.errors import KvbudgetError, cap_long_runs
from kvbudget.serve.responses import ErrorBody
from kvbudget.workload.tokenizer import NUM_SPECIAL, SPECIAL_TOKENS, SYLLABLES, SyntheticTokenizer

DEFAULT_MAX_TOKENS = 16
#: vLLM 0.32 ``validate_cache_salt`` (vllm/entrypoints/generate/base/protocol.py)
MAX_CACHE_SALT_CHARS = 128
_SALT_FORBIDDEN = frozenset("@/\\\x00")


class RequestInvalid(Exception):
    """A request the server refuses (HTTP status, message, offending field)."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        message = cap_long_runs(message)  # a value echoed by a lower layer is cut too
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> ErrorBody:
        kind = "NotFoundError" if self.status == 404 else "BadRequestError"
        return {
            "error": {
                "message": self.message,
                "type": kind,
                "param": self.param,
                "code": self.status,
            }
        }


# ---------------------------------------------------------------------- the request bodies
class _Body(BaseModel):
    """Unknown fields are ignored (vLLM accepts them and logs them at debug level)."""

    model_config = ConfigDict(extra="ignore")


_BodyT = TypeVar("_BodyT", bound=_Body)


class StreamOptions(_Body):
    include_usage: StrictBool | None = False
    continuous_usage_stats: StrictBool | None = False


#: a token id (vLLM: ``Annotated[int, Field(ge=0)]``; the vocabulary bound is checked after)
TokenId = Annotated[StrictInt, Field(ge=0)]
#: a number of tokens to generate (kvbudget serve: at least one)
NumTokens = Annotated[StrictInt, Field(ge=1)]


class _GenerateBody(_Body):
    model: str | None = None
    max_tokens: NumTokens | None = None
    n: StrictInt | None = 1
    #: JSON booleans only: ``"yes"``, ``"true"`` and ``1`` are refused (issue 30), as documented
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    ignore_eos: StrictBool = False
    cache_salt: str | None = None


class CompletionBody(_GenerateBody):
    """``POST /v1/completions``: one prompt, as text or token ids."""

    prompt: str | list[TokenId] | list[str] | list[list[TokenId]] | None = None


class ContentPart(_Body):
    """One part of a message's content; only text parts reach the prompt."""

    type: str = "text"
    text: str | None = None


class ChatMessage(_Body):
    role: str
    content: str | list[ContentPart] | None = None

    def as_mapping(self) -> dict[str, object]:
        """What the tokenizer's chat template reads: the role and the text (parts joined)."""
        content = self.content
        if isinstance(content, list):
            content = " ".join(p.text or "" for p in content if p.type == "text")
        return {"role": self.role, "content": content}


class ChatBody(_GenerateBody):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: NumTokens | None = None


class TokenizeBody(_Body):
    """``POST /tokenize``: a prompt or chat messages."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None


# ---------------------------------------------------------------------- one-line errors
#: the fix each top-level field's error names
_FIXES = {
    "model": "give the served model's name (GET /v1/models) or leave it out",
    "prompt": "give a string or a list of token ids >= 0 (one prompt)",
    "messages": "give a non-empty list of {role, content} messages",
    "max_tokens": f"give an integer >= 1 (default {DEFAULT_MAX_TOKENS})",
    "max_completion_tokens": f"give an integer >= 1 (default {DEFAULT_MAX_TOKENS})",
    "n": "give 1 (kvbudget serve returns one choice)",
    "stream": "give true or false (a JSON boolean)",
    "stream_options": 'give an object such as {"include_usage": true}',
    "ignore_eos": "give true or false (a JSON boolean)",
    "cache_salt": "give a non-empty string",
}
#: fields whose values are never echoed (prompts are private; salts are secrets)
_PRIVATE = frozenset({"prompt", "messages", "cache_salt"})
_MAX_SHOWN_CHARS = 40


#: pydantic's names of union branches in an error's location (vLLM 0.32 drops the same ones:
#: ``_INTERNAL_LOC_MARKERS`` in vllm/entrypoints/serve/exception_handling/handlers/validation.py)
_BRANCH_MARKERS = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "union"})


def _is_marker(part: int | str) -> bool:
    return isinstance(part, str) and (
        part in _BRANCH_MARKERS or any(c in part for c in "[]()") or "-" in part
    )


def _path(loc: tuple[int | str, ...]) -> tuple[str, str]:
    """(the dotted ``param`` vLLM reports, the field as the message writes it) of an error's
    location, union-branch markers dropped: ``messages.0.role`` and ``messages[0].role``."""
    names: list[str] = []
    shown = ""
    for part in loc:
        if _is_marker(part):
            continue
        names.append(str(part))
        if isinstance(part, int):
            shown += f"[{part}]"
        else:
            shown += f".{part}" if shown else part
    return ".".join(names), shown


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _described(value: object) -> str:
    """A value's JSON type and size, not its content."""
    if isinstance(value, str):
        return f"a string of {_count(len(value), 'character')}"
    if isinstance(value, (list, tuple)):
        return f"a list of {_count(len(value), 'item')}"
    if isinstance(value, dict):
        return f"an object with {_count(len(value), 'key')}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "an integer" if isinstance(value, int) else "a number"


def _shown(value: object, private: bool) -> str:
    if private or isinstance(value, (list, tuple, dict)):
        return _described(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN_CHARS else text[:_MAX_SHOWN_CHARS] + "..."


def invalid_body(exc: ValidationError) -> RequestInvalid:
    """The first error of ``exc`` as one line: the field, its value, what is wrong, the fix."""
    err: ErrorDetails = exc.errors()[0]
    param, field = _path(tuple(err["loc"]))
    top = param.split(".", 1)[0]
    fix = _FIXES.get(top, "see the OpenAI API reference")
    if err["type"] == "missing":
        return RequestInvalid(400, f"{field} is required; {fix}", param or None)
    value = _shown(err["input"], top in _PRIVATE)
    union = any(_is_marker(p) for p in err["loc"])
    why = "" if union else f" ({err['msg'][0].lower()}{err['msg'][1:]})"
    return RequestInvalid(400, f"{field}={value} is not valid{why}; {fix}", param or None)


def validate(model: type[_BodyT], body: object) -> _BodyT:
    """``body`` (parsed JSON) as ``model``; a one-line 400 when it does not fit."""
    if not isinstance(body, dict):
        raise RequestInvalid(400, f"the request body is {_described(body)}; give a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise invalid_body(exc) from None


# ---------------------------------------------------------------------- what the engine runs
@dataclass(frozen=True, slots=True)
class ParsedRequest:
    chat: bool
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    stream: bool
    include_usage: bool
    cache_salt: str | None


def chat_text(messages: list[ChatMessage], tokenizer: SyntheticTokenizer) -> str:
    """The prompt text of chat ``messages`` (the tokenizer's template; a bad role is a 400)."""
    try:
        return tokenizer.render_chat([m.as_mapping() for m in messages])
    except KvbudgetError as exc:  # ConfigError from the tokenizer: one line
        raise RequestInvalid(400, str(exc), "messages") from exc


def max_chars_per_token(tokenizer: SyntheticTokenizer) -> int:
    """The longest token of ``tokenizer``'s vocabulary, in characters: vLLM 0.32's
    ``max_chars_per_token`` (``max(len(tok) for tok in vocab)``, vllm/tokenizers/hf.py), here
    from the synthetic vocabulary's rule 1 (every syllable two characters; the last id has the
    most syllables) rather than by listing the vocabulary."""
    syllables, n = 0, tokenizer.vocab_size - NUM_SPECIAL  # bijective base-80 digits of n
    while n > 0:
        n = (n - 1) // len(SYLLABLES)
        syllables += 1
    longest_syllable = max(len(s) for s in SYLLABLES)
    return max(max(len(s) for s in SPECIAL_TOKENS), syllables * longest_syllable)


def check_text_length(text: str, *, max_model_len: int, tokenizer: SyntheticTokenizer) -> None:
    """vLLM 0.32's check before tokenizing (``_text_len_check`` in vllm/renderers/params.py):
    a prompt longer than ``max_model_len x max_chars_per_token`` characters cannot fit, so it
    is refused in vLLM's words without being tokenized (bounded time and memory)."""
    max_input_chars = max_model_len * max_chars_per_token(tokenizer)
    if len(text) > max_input_chars:
        raise RequestInvalid(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {len(text)} characters (more than {max_input_chars} characters, "
            f"which is the upper bound for {max_model_len} input tokens). Please reduce the "
            "length of the input prompt.",
            "input_text",
        )


def _encode(text: str, tokenizer: SyntheticTokenizer, max_model_len: int) -> tuple[int, ...]:
    check_text_length(text, max_model_len=max_model_len, tokenizer=tokenizer)
    return tuple(tokenizer.encode(text))


def _prompt_ids(
    req: CompletionBody, tokenizer: SyntheticTokenizer, max_model_len: int
) -> tuple[int, ...]:
    prompt = req.prompt
    if prompt is None:
        raise RequestInvalid(400, f"prompt is required; {_FIXES['prompt']}", "prompt")
    if isinstance(prompt, str):
        return _encode(prompt, tokenizer, max_model_len)
    batch = [p for p in prompt if not isinstance(p, int)]  # a list of prompts (text or ids)
    ids: list[int] = [t for t in prompt if isinstance(t, int)]
    if batch:
        if len(batch) != 1:
            raise RequestInvalid(
                400,
                f"prompt is a batch of {len(batch)} prompts; kvbudget serve takes one prompt "
                "per request: send one request each",
                "prompt",
            )
        if isinstance(batch[0], str):
            return _encode(batch[0], tokenizer, max_model_len)
        ids = batch[0]
    vocab = tokenizer.vocab_size
    for i, t in enumerate(ids):
        if t >= vocab:
            raise RequestInvalid(
                400, f"prompt[{i}]={t} is out of range; token ids must be in [0, {vocab})", "prompt"
            )
    return tuple(ids)


def _check_salt(salt: str | None) -> None:
    if salt is None:
        return
    if not salt:
        raise RequestInvalid(
            400, "Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt"
        )
    if len(salt) > MAX_CACHE_SALT_CHARS or not _SALT_FORBIDDEN.isdisjoint(salt):
        raise RequestInvalid(
            400,
            f"Parameter 'cache_salt' must be at most {MAX_CACHE_SALT_CHARS} characters and must "
            "not contain '@', '/', '\\\\', or NUL.",
            "cache_salt",
        )


def parse_body(
    body: object,
    *,
    chat: bool,
    model_name: str,
    tokenizer: SyntheticTokenizer,
    max_model_len: int,
) -> ParsedRequest:
    """Validate an OpenAI request body; raise :class:`RequestInvalid` with vLLM-like text."""
    req = validate(ChatBody if chat else CompletionBody, body)
    if req.model is not None and req.model != model_name:
        raise RequestInvalid(404, f"The model `{req.model}` does not exist.", "model")
    max_tokens = req.max_tokens
    if isinstance(req, ChatBody):
        ids = _encode(chat_text(req.messages, tokenizer), tokenizer, max_model_len)
        if req.max_completion_tokens is not None:  # vLLM: it wins over max_tokens
            max_tokens = req.max_completion_tokens
    else:
        assert isinstance(req, CompletionBody)
        ids = _prompt_ids(req, tokenizer, max_model_len)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not ids:
        raise RequestInvalid(400, "the prompt is empty (0 tokens)", "prompt")
    if req.n not in (None, 1):
        raise RequestInvalid(400, f"n={req.n} is not supported; {_FIXES['n']}", "n")
    _check_salt(req.cache_salt)
    total = len(ids) + max_tokens
    if total > max_model_len:
        raise RequestInvalid(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {total} tokens ({len(ids)} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.",
            "max_tokens",
        )
    opts = req.stream_options
    return ParsedRequest(
        chat=chat,
        prompt_token_ids=ids,
        max_tokens=max_tokens,
        stream=bool(req.stream),
        include_usage=bool(opts is not None and opts.include_usage),
        cache_salt=req.cache_salt,
    )
