"""The planned calibration series: what to send, in which order (pure, deterministic).

Three kinds of probe, each a group of requests sent at the same time:

* ``prefill``: one request with a fresh prompt of ``L`` tokens and ``max_tokens=2``; lengths
  spread geometrically from 16 tokens to the largest prompt that fits;
* ``prefix``: a fresh base prompt, then the same base plus ``S`` new tokens (the second request
  finds the base in the slot: a prefill of ``S`` tokens after ``base`` cached ones);
* ``decode``: ``B`` concurrent requests (fresh prompts of ``L`` tokens, ``decode_tokens`` each),
  for several batch sizes ``B`` up to the slot count and three context lengths (32 tokens,
  half and all of the longest prompt less the output).

Prompts are random token ids (``[1000, 30000)``: ordinary entries of any 32k+ vocabulary; for a
smaller served vocabulary, its upper half), drawn from a seeded generator, so no probe hits
another's cache by accident.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from kvbudget.errors import ConfigError

TOKEN_LOW, TOKEN_HIGH = 1000, 30000
MIN_PROMPT_TOKENS = 16
#: output tokens of a prefill probe (the prompt time is what it measures)
PREFILL_OUTPUT_TOKENS = 2


def token_range(vocab_size: int | None) -> tuple[int, int]:
    """[low, high) of the random prompt ids: ``[1000, 30000)``, or the upper half of a smaller
    served vocabulary (a vLLM test model has 2,048 ids; an id outside it is refused)."""
    if vocab_size is None or vocab_size >= TOKEN_HIGH:
        return TOKEN_LOW, TOKEN_HIGH
    return min(TOKEN_LOW, vocab_size // 2), vocab_size


@dataclass(frozen=True, slots=True)
class Probe:
    kind: Literal["prefill", "prefix", "decode"]
    #: prompts sent together (prefix: sent one after the other, base first)
    prompts: tuple[tuple[int, ...], ...]
    max_tokens: int
    label: str


@dataclass(frozen=True, slots=True)
class SeriesSpec:
    max_prompt_tokens: int
    max_batch: int
    decode_tokens: int = 32
    num_prefill_lengths: int = 7
    repeats: int = 2
    seed: int = 0
    #: the served vocabulary size, when known (see token_range)
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        if self.max_prompt_tokens < 4 * MIN_PROMPT_TOKENS:
            raise ConfigError(
                f"max_prompt_tokens: {self.max_prompt_tokens} is too small for a series "
                f"(needs >= {4 * MIN_PROMPT_TOKENS}); raise the engine's context per slot",
                field="max_prompt_tokens",
            )
        if self.max_batch < 1 or self.repeats < 1 or self.decode_tokens < 4:
            raise ConfigError(
                f"series: max_batch {self.max_batch}, repeats {self.repeats} must be >= 1 and "
                f"decode_tokens {self.decode_tokens} >= 4",
                field="series",
            )


def prefill_lengths(spec: SeriesSpec) -> list[int]:
    raw = np.geomspace(MIN_PROMPT_TOKENS, spec.max_prompt_tokens, spec.num_prefill_lengths)
    return sorted({int(x + 0.5) for x in raw})


def batch_sizes(max_batch: int) -> list[int]:
    return sorted({1, 2, max(1, max_batch // 2), max_batch} & set(range(1, max_batch + 1)))


def plan_series(spec: SeriesSpec) -> list[Probe]:
    """The whole series, in send order."""
    rng = np.random.default_rng(spec.seed)
    low, high = token_range(spec.vocab_size)

    def fresh(n: int) -> tuple[int, ...]:
        return tuple(int(t) for t in rng.integers(low, high, size=n))

    probes: list[Probe] = []
    top = spec.max_prompt_tokens
    for rep in range(spec.repeats):
        for n in prefill_lengths(spec):
            probes.append(
                Probe("prefill", (fresh(n),), PREFILL_OUTPUT_TOKENS, f"prefill {n} #{rep}")
            )
        for base, extra in ((top // 4, top // 8), (top // 2, top // 4)):
            base_prompt = fresh(base)
            probes.append(
                Probe(
                    "prefix", (base_prompt, base_prompt + fresh(extra)), 2, f"prefix {base}+{extra}"
                )
            )
        for ctx in sorted({MIN_PROMPT_TOKENS * 2, top // 2, top - spec.decode_tokens}):
            for b in batch_sizes(spec.max_batch):
                prompts = tuple(fresh(ctx) for _ in range(b))
                probes.append(
                    Probe("decode", prompts, spec.decode_tokens, f"decode B={b} ctx={ctx} #{rep}")
                )
    return probes
