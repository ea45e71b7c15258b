"""The synthetic tokenizer: rules of its module docstring, checked by hand-worked values."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from kvbudget.errors import ConfigError
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.tokenizer import (
    EOS_TOKEN_ID,
    NUM_SPECIAL,
    SyntheticTokenizer,
    decode,
    encode,
    get_tokenizer,
    splitmix64,
)


def test_words_are_bijective_base_80_syllables() -> None:
    tok = get_tokenizer()
    # worked by hand: k = id - 5; bijective base 80 over "b a", "b e", ... least significant first
    assert tok.word(NUM_SPECIAL + 0) == "ba"
    assert tok.word(NUM_SPECIAL + 1) == "be"
    assert tok.word(NUM_SPECIAL + 5) == "da"
    assert tok.word(NUM_SPECIAL + 79) == "zu"
    assert tok.word(NUM_SPECIAL + 80) == "baba"
    assert tok.word(NUM_SPECIAL + 81) == "beba"
    assert tok.word(EOS_TOKEN_ID) == "<|eos|>"


def test_all_words_distinct_and_whitespace_free() -> None:
    tok = SyntheticTokenizer(7000)
    words = [tok.word(i) for i in range(7000)]
    assert len(set(words)) == 7000
    assert all(len(w.split()) == 1 for w in words)


def test_roundtrip_ids_and_text() -> None:
    tok = get_tokenizer()
    ids = [int(x) for x in tok.random_ids(np.random.default_rng(1), 500)]
    text = tok.decode(ids)
    assert tok.encode(text) == ids
    assert tok.decode(tok.encode(text)) == text
    assert tok.count(text) == 500
    assert encode(decode(ids)) == ids


def test_unknown_word_uses_blake2b_rule() -> None:
    tok = SyntheticTokenizer(1000)
    digest = hashlib.blake2b(b"Hello,", digest_size=8).digest()
    expected = 5 + int.from_bytes(digest, "big") % 995
    assert tok.encode("Hello,") == [expected]
    assert tok.encode("  Hello,\n\tHello, ") == [expected, expected]


def test_splitmix64_reference_vector() -> None:
    # SplitMix64 reference implementation, state 0: first output 0xE220A8397B1DCDAF
    assert splitmix64(0) == 0xE220A8397B1DCDAF


def test_output_is_deterministic_and_prompt_dependent() -> None:
    tok = get_tokenizer()
    a = tok.output_ids([10, 11, 12], 20)
    assert a == tok.output_ids([10, 11, 12], 20)
    assert a != tok.output_ids([10, 11, 13], 20)
    assert all(NUM_SPECIAL <= i < tok.vocab_size for i in a)
    assert tok.output_ids([10, 11, 12], 5) == a[:5]
    pieces = "".join(tok.piece(t, j) for j, t in enumerate(a))
    assert pieces == tok.output_text([10, 11, 12], 20)


def test_chat_template() -> None:
    tok = get_tokenizer()
    text = tok.render_chat(
        [{"role": "system", "content": "ba be"}, {"role": "user", "content": "da"}]
    )
    assert text == "<|system|> ba be <|user|> da <|assistant|>"
    assert tok.encode(text)[0] == 1
    with pytest.raises(ConfigError, match="role"):
        tok.render_chat([{"role": "wizard", "content": "x"}])


def test_bad_inputs_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="vocab_size"):
        SyntheticTokenizer(3)
    with pytest.raises(ConfigError, match="outside"):
        decode([5, 32000])
    with pytest.raises(ConfigError, match="outside"):
        decode([-1])


def test_planned_request_text() -> None:
    req = PlannedRequest(request_id="r1", arrival_s=0.0, prompt_token_ids=(5, 6), output_tokens=3)
    assert req.text() == "ba be"
    assert req.prompt_tokens == 2
    with pytest.raises(AttributeError):
        req.arrival_s = 1.0  # type: ignore[misc]
