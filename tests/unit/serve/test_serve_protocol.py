"""``kvbudget serve``'s request parsing: typed bodies, vLLM 0.32's rules, one-line 400s.

Expected texts are written by hand from the rules in ``serve/protocol.py``'s docstring
(vLLM 0.32's field names, ``validate_cache_salt`` and context-length wording); token ids come
from the synthetic tokenizer's documented encoding (one id per word).
"""

from __future__ import annotations

import pytest

from kvbudget.serve.protocol import ParsedRequest, RequestInvalid, parse_body
from kvbudget.workload.tokenizer import get_tokenizer

TOK = get_tokenizer()


def _parse(body: object, *, chat: bool = False) -> ParsedRequest:
    return parse_body(body, chat=chat, model_name="m", tokenizer=TOK, max_model_len=64)


def _refused(body: object, *, chat: bool = False) -> RequestInvalid:
    with pytest.raises(RequestInvalid) as info:
        _parse(body, chat=chat)
    return info.value


USER = [{"role": "user", "content": "ba be"}]


@pytest.mark.parametrize(
    ("body", "chat", "param", "message"),
    [
        (
            {"prompt": "ba", "max_tokens": "5"},
            False,
            "max_tokens",
            "max_tokens='5' is not valid (input should be a valid integer); "
            "give an integer >= 1 (default 16)",
        ),
        (
            {"prompt": "ba", "max_tokens": True},
            False,
            "max_tokens",
            "max_tokens=true is not valid (input should be a valid integer); "
            "give an integer >= 1 (default 16)",
        ),
        (
            {"prompt": "ba", "max_tokens": 0},
            False,
            "max_tokens",
            "max_tokens=0 is not valid (input should be greater than or equal to 1); "
            "give an integer >= 1 (default 16)",
        ),
        (
            {"messages": USER, "max_completion_tokens": -1},
            True,
            "max_completion_tokens",
            "max_completion_tokens=-1 is not valid (input should be greater than or equal to 1);"
            " give an integer >= 1 (default 16)",
        ),
        (
            {"prompt": "ba", "stream": "maybe"},
            False,
            "stream",
            "stream='maybe' is not valid (input should be a valid boolean); give true or false "
            "(a JSON boolean)",
        ),
        (
            {"prompt": "ba", "stream_options": 5},
            False,
            "stream_options",
            "stream_options=5 is not valid (input should be a valid dictionary or instance of "
            'StreamOptions); give an object such as {"include_usage": true}',
        ),
        (
            {"prompt": {"text": "secret words"}},
            False,
            "prompt",
            "prompt=an object with 1 key is not valid; "
            "give a string or a list of token ids >= 0 (one prompt)",
        ),
        (
            {"prompt": [1, -2]},
            False,
            "prompt",
            "prompt=a list of 2 items is not valid; "
            "give a string or a list of token ids >= 0 (one prompt)",
        ),
        (
            {"prompt": [1, 32000]},
            False,
            "prompt",
            "prompt[1]=32000 is out of range; token ids must be in [0, 32000)",
        ),
        (
            {},
            False,
            "prompt",
            "prompt is required; give a string or a list of token ids >= 0 (one prompt)",
        ),
        (
            {"prompt": ["ba", "be"]},
            False,
            "prompt",
            "prompt is a batch of 2 prompts; kvbudget serve takes one prompt per request: "
            "send one request each",
        ),
        (
            {"prompt": "ba", "n": 2},
            False,
            "n",
            "n=2 is not supported; give 1 (kvbudget serve returns one choice)",
        ),
        (
            {"prompt": "ba", "cache_salt": 7},
            False,
            "cache_salt",
            "cache_salt=an integer is not valid (input should be a valid string); "
            "give a non-empty string",
        ),
        (
            {"prompt": "ba", "cache_salt": "tenant/a"},
            False,
            "cache_salt",
            "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', "
            "'/', '\\\\', or NUL.",
        ),
        (
            {"prompt": "ba", "model": 5},
            False,
            "model",
            "model=5 is not valid (input should be a valid string); "
            "give the served model's name (GET /v1/models) or leave it out",
        ),
        (
            {},
            True,
            "messages",
            "messages is required; give a non-empty list of {role, content} messages",
        ),
        (
            {"messages": ["hello there"]},
            True,
            "messages.0",
            "messages[0]=a string of 11 characters is not valid (input should be a valid "
            "dictionary or instance of ChatMessage); give a non-empty list of {role, content} "
            "messages",
        ),
        (
            {"messages": [{"content": "hi"}]},
            True,
            "messages.0.role",
            "messages[0].role is required; give a non-empty list of {role, content} messages",
        ),
        (
            [1, 2],
            False,
            None,
            "the request body is a list of 2 items; give a JSON object",
        ),
    ],
)
def test_a_bad_body_is_one_line_naming_the_field_the_value_and_the_fix(
    body: object, chat: bool, param: str | None, message: str
) -> None:
    exc = _refused(body, chat=chat)
    assert (exc.status, exc.param, exc.message) == (400, param, message)
    assert "\n" not in exc.message
    assert exc.body()["error"] == {
        "message": message,
        "type": "BadRequestError",
        "param": param,
        "code": 400,
    }


def test_private_values_are_described_never_echoed() -> None:
    for body in (
        {"prompt": {"text": "my secret prompt"}},
        {"prompt": "ba", "cache_salt": ["my-secret-salt"]},
        {"messages": [{"role": "user", "content": {"text": "my secret prompt"}}]},
    ):
        exc = _refused(body, chat="messages" in body)
        assert "secret" not in exc.message, exc.message


def test_a_wrong_model_is_404_and_a_missing_one_is_the_served_one() -> None:
    exc = _refused({"prompt": "ba", "model": "other"})
    assert (exc.status, exc.message) == (404, "The model `other` does not exist.")
    assert _parse({"prompt": "ba", "model": None}).prompt_token_ids == tuple(TOK.encode("ba"))


def test_good_bodies_in_vllm_shapes() -> None:
    # one prompt in a list, as text or as ids; unknown fields are ignored (vLLM accepts them)
    one_text = _parse({"prompt": ["ba be"], "temperature": 0.0, "ignore_eos": True})
    assert one_text.prompt_token_ids == tuple(TOK.encode("ba be"))
    assert one_text.max_tokens == 16  # the default
    assert _parse({"prompt": [[3, 4, 5]]}).prompt_token_ids == (3, 4, 5)
    # stream flags are JSON booleans (a string such as "false" is refused: test_booleans_are_strict)
    parsed = _parse({"prompt": "ba", "stream": False, "stream_options": {"include_usage": True}})
    assert (parsed.stream, parsed.include_usage) == (False, True)
    # chat: max_completion_tokens wins over max_tokens; text parts are joined, others dropped
    chat = _parse(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "ba"},
                        {"type": "image_url", "image_url": {"url": "x"}},
                        {"type": "text", "text": "be"},
                    ],
                }
            ],
            "max_tokens": 3,
            "max_completion_tokens": 2,
        },
        chat=True,
    )
    assert chat.max_tokens == 2
    assert chat.prompt_token_ids == tuple(TOK.encode(TOK.render_chat(USER)))


def test_the_context_length_check_uses_vllms_words() -> None:
    exc = _refused({"prompt": "ba be bi", "max_tokens": 62})
    assert exc.param == "max_tokens"
    assert exc.message.startswith(
        "This model's maximum context length is 64 tokens. However, you requested 65 tokens "
        "(3 in the messages, 62 in the completion)."
    )


def test_longest_synthetic_token_is_the_assistant_marker() -> None:
    from kvbudget.serve.protocol import max_chars_per_token

    # "<|assistant|>" is 13 characters; words of a 32,000-id vocabulary are at most 3
    # syllables (80 + 80**2 < 31,995 <= 80 + 80**2 + 80**3), 6 characters
    assert max_chars_per_token(TOK) == 13
    # a 10,000,000-id vocabulary needs 4 syllables (8 characters): still the marker
    assert max_chars_per_token(get_tokenizer(10_000_000)) == 13


@pytest.mark.parametrize("field", ["stream", "ignore_eos"])
@pytest.mark.parametrize("value", ["yes", "true", "1", 1, 0])
def test_booleans_are_strict(field: str, value: object) -> None:
    err = _refused({"prompt": "ba", field: value})
    assert err.param == field and "(a JSON boolean)" in err.message


def test_include_usage_is_strict() -> None:
    err = _refused({"prompt": "ba", "stream": True, "stream_options": {"include_usage": "on"}})
    assert err.param == "stream_options.include_usage"


def test_a_long_role_is_not_echoed_whole() -> None:
    err = _refused({"messages": [{"role": "r" * 5000, "content": "ba"}]}, chat=True)
    assert err.param == "messages" and "r" * 200 not in err.message
    # the cut run is `messages[0].role='rrr...'`: 17 characters, then the 5,002 of the repr
    assert "... (5,019 characters) is not supported" in err.message
