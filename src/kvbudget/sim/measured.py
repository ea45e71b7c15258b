"""The measured step-time model: kvbudget's scheduler decides the batch, silicon tables price it.

:class:`MeasuredTiming` prices one step with NVIDIA's aiconfigurator-core (``AicEngine``, its
Rust estimator over per-GPU kernel timings measured on silicon; reached only through
:mod:`kvbudget.sim.aic`). The simulator hands it a :class:`~kvbudget.sim.roofline.BatchShape`
(aggregates over the step's requests); this module turns the aggregate into the arguments of the
estimator's step calls, the way its own agg composition (``Engine::mixed_step_latency``) and the
Dynamo Mocker use them:

* **prefill chunks**: the shape keeps ``P`` new tokens, ``pairs = sum n_i (c_i + (n_i + 1)/2)``
  and ``ctx = sum (c_i + n_i)``. The ``k`` equal chunks of ``n = P/k`` new tokens after ``c``
  cached ones that keep both sums are ``k = (ctx - P/2) / (pairs/P - 1/2)``, ``c = ctx/k - n``
  (exact when the chunks are equal; :func:`prefill_chunks`);
* **decodes**: ``m`` sequences at the mean context ``s = decode_context_tokens / m``;
* a decode-only step is ``decode_step_latency(m, isl=s - 1, osl=1)`` (one generation step at
  ``s``, the full generation op list); any step with prefill is the agg composition: the
  non-attention ops of all ``P + m`` tokens (``mixed_step_breakdown``'s shared part), the
  context attention of ``k`` chunks of ``n`` after ``c`` and the decode attention of ``m`` at
  ``s`` (:meth:`MeasuredTiming.price`).

Each distinct step is priced once: its figures are bucketed (:func:`bucket`: exact up to 32,
then 32 buckets per doubling, under 1.6 % apart) and the price of the bucket's representative is
cached, so a long run calls the estimator a few thousand times, not once a step. Decode-only
steps (most steps of a run) look their price up by one integer, ``m`` and the unbucketed mean
context packed together (a miss: by their buckets packed the same way, then the
:class:`StepArgs`), without building the :class:`StepArgs`; the price is the same.

Compiled with mypyc (``kvbudget.sim.native.COMPILED``): plain classes, typed integer arithmetic.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from kvbudget.sim.roofline import BatchShape
from kvbudget.sim.timing import decode_shape, prefill_shape

#: exact below this, then ``_BUCKETS_PER_DOUBLING`` buckets per doubling
_EXACT_UP_TO = 32
_BUCKETS_PER_DOUBLING = 32


def bucket(value: float) -> int:
    """``value`` rounded to its bucket's representative (an integer >= 1 for value >= 0.5)."""
    x = round(value)
    if x <= _EXACT_UP_TO:
        return max(x, 0)
    step = 1 << (x.bit_length() - 1 - 5)  # 2**floor(log2 x) / 32
    return round(value / step) * step


class StepArgs(NamedTuple):
    """The estimator's view of one step: ``k`` chunks of ``n`` new tokens after ``c`` cached,
    ``m`` decodes at mean context ``s`` (all bucketed; a named tuple: built once a step)."""

    num_chunks: int
    chunk_tokens: int
    chunk_cached_tokens: int
    num_decode_seqs: int
    decode_context_tokens: int


def prefill_chunks(num_tokens: int, pairs: float, context_tokens: int) -> tuple[int, int, int]:
    """``(k, n, c)``: ``k`` equal chunks of ``n`` new tokens after ``c`` cached ones with the
    same new tokens, attention pairs and attended context as the shape (module docstring)."""
    if num_tokens <= 0:
        return 0, 0, 0
    per_token = pairs / num_tokens - 0.5  # = c + n/2 for equal chunks
    spread = context_tokens - num_tokens / 2  # = k (c + n/2)
    k = max(1, min(num_tokens, round(spread / per_token))) if per_token > 0 else 1
    n = max(1, round(num_tokens / k))
    c = max(0, round(context_tokens / k - n))
    return k, n, c


#: bucket of each integer seen (a dict lookup instead of the arithmetic, once a step)
_BUCKETS: dict[int, int] = {}


def _b(x: int) -> int:
    got = _BUCKETS.get(x)
    if got is None:
        got = _BUCKETS[x] = bucket(x)
    return got


def step_args(shape: BatchShape) -> StepArgs:
    """The bucketed estimator arguments of a step (the cache key)."""
    num_prefill, pairs, prefill_ctx, m, decode_ctx = shape
    s = _b(round(decode_ctx / m)) if m else 0
    if num_prefill == 0:
        return StepArgs(0, 0, 0, _b(m), s)
    k, n, c = prefill_chunks(num_prefill, pairs, prefill_ctx)
    return StepArgs(_b(k), _b(n), _b(c), _b(m), s)


class StepEstimator(Protocol):
    """What :class:`MeasuredTiming` needs of aiconfigurator-core's engine (milliseconds)."""

    def mixed_step_breakdown(
        self, ctx_tokens: int, gen_tokens: int, isl: int, osl: int, prefix: int = 0
    ) -> tuple[float, float, float, float]: ...

    def decode_step_latency(self, gen_tokens: int, isl: int, osl: int) -> float: ...


#: a decode-only step's key: ``m``'s bucket above ``s``'s (contexts stay far below 2**40)
_DECODE_SHIFT = 40


class MeasuredTiming:
    """Step time from measured kernel tables (``name`` says which tables)."""

    def __init__(
        self, engine: StepEstimator, *, name: str, cache: dict[StepArgs, float] | None = None
    ) -> None:
        self.engine = engine
        self.name = name
        #: price of each bucket; replicas of one compiled model share it (``cache``)
        self._cache: dict[StepArgs, float] = {} if cache is None else cache
        #: decode-only steps: packed bucket key -> the same price as ``_cache`` holds
        self._decode: dict[int, float] = {}
        #: decode-only steps: packed unbucketed ``(m, mean context)`` -> its bucket's price
        self._decode_raw: dict[int, float] = {}
        #: the estimator's mixed-step breakdowns by arguments (:meth:`_breakdown`)
        self._parts: dict[tuple[int, int, int, int], tuple[float, float, float, float]] = {}

    @property
    def num_priced(self) -> int:
        """Distinct step shapes priced so far (calls into the estimator)."""
        return len(self._cache)

    def step_time_s(self, shape: BatchShape) -> float:
        num_prefill, _pairs, _prefill_ctx, m, decode_ctx = shape
        if num_prefill == 0:
            if m == 0:
                return 0.0
            raw = round(decode_ctx / m)
            # one lookup by the unbucketed (m, mean context): a run repeats these often
            got = self._decode_raw.get((m << _DECODE_SHIFT) | raw)
            if got is None:
                got = self._decode_raw[(m << _DECODE_SHIFT) | raw] = self._decode_price(m, raw)
            return got
        return self._priced(step_args(shape))

    def _decode_price(self, m: int, raw: int) -> float:
        """The price of a decode-only step of ``m`` sequences at mean context ``raw``: its
        buckets' (:meth:`price` once per bucket pair)."""
        mb = _b(m)
        sb = _b(raw)
        key = (mb << _DECODE_SHIFT) | sb
        got = self._decode.get(key)
        if got is None:
            got = self._decode[key] = self._priced(StepArgs(0, 0, 0, mb, sb))
        return got

    def _priced(self, args: StepArgs) -> float:
        price = self._cache.get(args)
        if price is None:
            price = self.price(args)
            self._cache[args] = price
        return price

    def price(self, a: StepArgs) -> float:
        """Seconds of one step of these arguments (uncached; module docstring)."""
        e = self.engine
        m, s = a.num_decode_seqs, a.decode_context_tokens
        if a.num_chunks == 0:
            return e.decode_step_latency(m, max(s - 1, 1), 1) / 1e3
        k, n, c = a.num_chunks, a.chunk_tokens, a.chunk_cached_tokens
        shared_ms = self._breakdown(k * n, m, n + c, 0)[1]
        context_attention_ms = self._breakdown(k * (n + c), 0, n + c, c)[2]
        decode_attention_ms = self._breakdown(0, m, max(s - 1, 1), 0)[3] if m else 0.0
        return (shared_ms + context_attention_ms + decode_attention_ms) / 1e3

    def _breakdown(
        self, ctx_tokens: int, gen_tokens: int, isl: int, prefix: int
    ) -> tuple[float, float, float, float]:
        """``mixed_step_breakdown(ctx_tokens, gen_tokens, isl, 1, prefix)``, each distinct call
        once (steps of different shapes share parts: a long run repeats three calls in four)."""
        key = (ctx_tokens, gen_tokens, isl, prefix)
        got = self._parts.get(key)
        if got is None:
            got = self._parts[key] = self.engine.mixed_step_breakdown(
                ctx_tokens, gen_tokens, isl, 1, prefix
            )
        return got

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        """A pure decode step of ``num_seqs`` sequences attending ``context_tokens`` in all."""
        return self.step_time_s(decode_shape(num_seqs, context_tokens))

    def decode_attention_time_s(self, num_seqs: int, context_tokens_per_seq: int) -> float:
        """The generation-attention part alone of a decode step of ``num_seqs`` sequences, each
        attending ``context_tokens_per_seq`` tokens: the term :meth:`price` adds to a step's
        shared GEMMs for its decodes (the KV reads), unbucketed."""
        if num_seqs <= 0:
            return 0.0
        part = self._breakdown(0, num_seqs, max(context_tokens_per_seq - 1, 1), 0)[3]
        return part / 1e3

    def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float:
        """A lone prefill of ``num_tokens`` after ``context_tokens`` cached ones."""
        return self.step_time_s(prefill_shape(num_tokens, context_tokens))
