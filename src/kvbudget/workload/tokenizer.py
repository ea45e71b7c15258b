"""The documented, deterministic synthetic tokenizer shared by ``serve`` and ``workload``.

Why: the embedded server, the simulator and the workload generator must agree on how many
tokens a prompt has and which ids they are, without downloading a real tokenizer. A prompt
planned as token ids is sent over HTTP as text and the server recovers exactly the same ids.

Rules (a test pins each of them):

1. **Vocabulary.** ``vocab_size`` ids (default 32,000). Ids ``0 .. NUM_SPECIAL-1`` are the
   special tokens ``<|eos|> <|system|> <|user|> <|assistant|> <|tool|>`` (id 0 is EOS). Every
   other id ``i`` is a pronounceable lower-case word: ``k = i - NUM_SPECIAL`` written in
   bijective base 80 whose digits are the syllables consonant+vowel
   (``"bdfghjklmnprstvz"`` x ``"aeiou"``), least significant syllable first. Bijective
   numeration makes every word distinct (``k=0`` -> ``"ba"``, ``k=1`` -> ``"be"``,
   ``k=80`` -> ``"baba"``).
2. **Encoding.** Text is split on whitespace (``str.split()``); each word is one token. A word
   in the vocabulary maps to its id; any other word maps to
   ``NUM_SPECIAL + blake2b(word, 8 bytes, big-endian) % (vocab_size - NUM_SPECIAL)``
   (stable across processes and machines; never Python's salted ``hash``).
3. **Decoding.** Ids become their words joined by single spaces, so
   ``encode(decode(ids)) == ids`` for any ids in range and
   ``decode(encode(text)) == text`` for any text made of vocabulary words separated by single
   spaces (every prompt kvbudget generates). Streaming pieces: the first output token is its
   word, each later one is ``" " + word``; their concatenation equals ``decode``.
4. **Synthetic output.** Output token ``j`` of a request is
   ``NUM_SPECIAL + splitmix64(key + j) % (vocab_size - NUM_SPECIAL)`` with
   ``key = blake2b(prompt ids as little-endian uint32, 8 bytes) XOR seed``: the same prompt gives
   the same output whether or not its KV came from the cache (what the reuse audit relies on).
   EOS is never generated (engines run with ``ignore_eos``).
5. **Chat.** ``render_chat`` turns OpenAI messages into ``<|role|> content ...`` and appends
   ``<|assistant|>``; the role markers are one special token each.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from kvbudget.errors import ConfigError

SPECIAL_TOKENS: tuple[str, ...] = (
    "<|eos|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|tool|>",
)
NUM_SPECIAL = len(SPECIAL_TOKENS)
EOS_TOKEN_ID = 0
DEFAULT_VOCAB_SIZE = 32_000
MIN_VOCAB_SIZE = NUM_SPECIAL + 2

_CONSONANTS = "bdfghjklmnprstvz"
_VOWELS = "aeiou"
SYLLABLES: tuple[str, ...] = tuple(c + v for c in _CONSONANTS for v in _VOWELS)
_BASE = len(SYLLABLES)  # 80
_MASK64 = (1 << 64) - 1
_ROLES = {"system": 1, "user": 2, "assistant": 3, "tool": 4}


def _word_for_index(k: int) -> str:
    """Bijective base-80 numeral of ``k`` in syllables, least significant first."""
    parts: list[str] = []
    n = k + 1
    while n > 0:
        n -= 1
        parts.append(SYLLABLES[n % _BASE])
        n //= _BASE
    return "".join(parts)


def splitmix64(x: int) -> int:
    """SplitMix64 finaliser (Steele, Lea, Flood 2014) on a 64-bit unsigned integer."""
    z = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def prompt_key(token_ids: Sequence[int]) -> int:
    """64-bit blake2b key of token ids (little-endian uint32), stable across processes."""
    data = np.asarray(token_ids, dtype="<u4").tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class SyntheticTokenizer:
    """Whitespace-word tokenizer over a fixed synthetic vocabulary (see module docstring)."""

    __slots__ = ("_index", "_words", "vocab_size")

    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        if vocab_size < MIN_VOCAB_SIZE:
            raise ConfigError(
                f"vocab_size={vocab_size} is too small: the synthetic tokenizer needs at "
                f"least {MIN_VOCAB_SIZE} ids ({NUM_SPECIAL} special + 2 words); use e.g. 32000",
                field="vocab_size",
            )
        self.vocab_size = vocab_size
        # built on first use: a workload of token ids never needs the words
        self._words: tuple[str, ...] | None = None
        self._index: dict[str, int] | None = None

    def _vocabulary(self) -> tuple[tuple[str, ...], dict[str, int]]:
        """(words by id, id by word), built once."""
        if self._words is None or self._index is None:
            words = list(SPECIAL_TOKENS)
            words.extend(_word_for_index(k) for k in range(self.vocab_size - NUM_SPECIAL))
            self._words = tuple(words)
            self._index = {w: i for i, w in enumerate(self._words)}
        return self._words, self._index

    @property
    def eos_token_id(self) -> int:
        return EOS_TOKEN_ID

    def word(self, token_id: int) -> str:
        """The word of one id (``ConfigError`` when out of range)."""
        if not 0 <= token_id < self.vocab_size:
            raise ConfigError(
                f"token id {token_id} is outside the synthetic vocabulary "
                f"[0, {self.vocab_size}); regenerate the prompt with the same vocab_size",
                field="token_id",
            )
        return self._vocabulary()[0][token_id]

    def token_id(self, word: str) -> int:
        """The id of one word: table lookup, else the stable blake2b hash rule."""
        found = self._vocabulary()[1].get(word)
        if found is not None:
            return found
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        return NUM_SPECIAL + int.from_bytes(digest, "big") % (self.vocab_size - NUM_SPECIAL)

    def encode(self, text: str) -> list[int]:
        """Text -> token ids (one per whitespace-separated word)."""
        index = self._vocabulary()[1]
        out: list[int] = []
        for w in text.split():
            found = index.get(w)
            out.append(found if found is not None else self.token_id(w))
        return out

    def count(self, text: str) -> int:
        """Number of tokens ``encode`` would return (words)."""
        return len(text.split())

    def decode(self, token_ids: Iterable[int]) -> str:
        """Token ids -> text (words joined by single spaces)."""
        ids = [int(i) for i in token_ids]
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = [i for i in ids if not 0 <= i < self.vocab_size]
            raise ConfigError(
                f"token ids {bad[:5]} are outside the synthetic vocabulary [0, {self.vocab_size}); "
                "regenerate the prompt with the same vocab_size",
                field="token_ids",
            )
        words = self._vocabulary()[0]
        return " ".join([words[i] for i in ids])

    def piece(self, token_id: int, token_index: int) -> str:
        """Streaming text of output token ``token_index`` (a leading space after the first)."""
        word = self.word(token_id)
        return word if token_index == 0 else " " + word

    def random_ids(self, rng: np.random.Generator, num_tokens: int) -> np.ndarray:
        """``num_tokens`` ordinary (non-special) ids drawn uniformly with ``rng`` (int64 array)."""
        return rng.integers(NUM_SPECIAL, self.vocab_size, size=num_tokens, dtype=np.int64)

    def output_token_id(self, key: int, token_index: int) -> int:
        """Deterministic output id number ``token_index`` for a request keyed ``key``."""
        mixed = splitmix64((key + token_index) & _MASK64)
        return NUM_SPECIAL + mixed % (self.vocab_size - NUM_SPECIAL)

    def output_ids(
        self, prompt_token_ids: Sequence[int], num_tokens: int, *, seed: int = 0
    ) -> list[int]:
        """The synthetic output of a prompt: ``num_tokens`` ids (rule 4 of the module doc)."""
        key = prompt_key(prompt_token_ids) ^ (seed & _MASK64)
        return [self.output_token_id(key, j) for j in range(num_tokens)]

    def output_text(
        self, prompt_token_ids: Sequence[int], num_tokens: int, *, seed: int = 0
    ) -> str:
        """``decode(output_ids(...))``."""
        return self.decode(self.output_ids(prompt_token_ids, num_tokens, seed=seed))

    def render_chat(self, messages: Sequence[Mapping[str, object]]) -> str:
        """OpenAI chat messages -> prompt text ``<|role|> content ... <|assistant|>``."""
        parts: list[str] = []
        for i, msg in enumerate(messages):
            role = msg.get("role")
            if not isinstance(role, str) or role not in _ROLES:
                raise ConfigError(
                    f"messages[{i}].role={role!r} is not supported; use one of {sorted(_ROLES)}",
                    field=f"messages[{i}].role",
                )
            content = msg.get("content", "")
            if isinstance(content, list):  # OpenAI content parts: keep the text parts
                content = " ".join(
                    str(p.get("text", "")) for p in content if isinstance(p, Mapping)
                )
            parts.append(SPECIAL_TOKENS[_ROLES[role]])
            text = str(content if content is not None else "").strip()
            if text:
                parts.append(text)
        parts.append(SPECIAL_TOKENS[_ROLES["assistant"]])
        return " ".join(parts)


@functools.lru_cache(maxsize=8)
def get_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE) -> SyntheticTokenizer:
    """A shared, cached tokenizer instance for ``vocab_size``."""
    return SyntheticTokenizer(vocab_size)


def encode(text: str, vocab_size: int = DEFAULT_VOCAB_SIZE) -> list[int]:
    """Module-level shortcut for ``get_tokenizer(vocab_size).encode(text)``."""
    return get_tokenizer(vocab_size).encode(text)


def decode(token_ids: Iterable[int], vocab_size: int = DEFAULT_VOCAB_SIZE) -> str:
    """Module-level shortcut for ``get_tokenizer(vocab_size).decode(token_ids)``."""
    return get_tokenizer(vocab_size).decode(token_ids)
