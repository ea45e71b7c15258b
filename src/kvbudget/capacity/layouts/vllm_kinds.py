"""One class per vLLM cache kind, owning how a layer of that kind holds blocks.

vLLM gives each kind its own spec class (``vllm/v1/kv_cache_interface.py``: ``FullAttentionSpec``
and ``MLAAttentionSpec``, ``SlidingWindowSpec``, ``ChunkedLocalAttentionSpec``, ``MambaSpec``),
each with its ``max_memory_usage_bytes``, and its own manager (``v1/core/single_type_kv_cache_manager.py``)
that frees the blocks a window skips. Here each kind is one :class:`KindRule`; the layout's
``VllmLayerSpec`` (the pool's layers too) and the pool's ``KvCacheGroup`` carry the figures
(:class:`BlockFigures`) and ask :func:`kind_rule` instead of branching on ``kind``.

Per layer, with ``B`` the block size, ``page`` one block's bytes, ``L`` ``max_model_len``, ``T_b``
``max_num_batched_tokens`` and ``T`` a sequence's tokens (reference §1.2-§1.6):

* full / MLA: ``cdiv(L, B) * page``; holds ``cdiv(T, B)`` blocks;
* sliding (window ``W``): ``(cdiv(min(W - 1 + T_b, L), B) + 1) * page``; skips ``max(0, T - W)``
  tokens once its last token is computed;
* chunked local (chunk ``C``): ``cdiv(min(C + T_b, L), B) * page``; skips ``((T - 1) // C) * C``;
* mamba: ``page * (1 + spec)`` (mode ``none``), ``page * (2 + spec + checkpoint)`` (``align``),
  ``cdiv(L, B) * page`` (``all``);
* ring (``CircularBufferSpec``, Qwen4-Exp's QSA raw keys): one page per request for its whole
  lifetime, whatever its length or the mamba cache mode (``max_memory_usage_bytes`` = the page,
  ``v1/kv_cache_interface.py`` lines 923-930);
* none (no cache: KV-shared or attention-free layers): nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Final, Protocol

from kvbudget.units import cdiv

if TYPE_CHECKING:
    from kvbudget.capacity.layouts.vllm_specs import MambaCacheMode


class BlockFigures(Protocol):
    """What a layer spec, a pool layer or a group carries for its kind's arithmetic."""

    @property
    def block_size(self) -> int: ...
    @property
    def page_size_bytes(self) -> int: ...
    @property
    def sliding_window(self) -> int | None: ...
    @property
    def attention_chunk_size(self) -> int | None: ...
    @property
    def num_speculative_blocks(self) -> int: ...
    @property
    def num_checkpoint_blocks(self) -> int: ...


class KindRule:
    """A cache kind with no blocks (``none``); the other kinds override each method."""

    #: whether a page is a block of tokens (so a layer has bytes per token), not a state or nothing
    holds_tokens: ClassVar[bool] = False
    #: whether a layer of this kind holds a cache at all (every kind but ``none``)
    holds_cache: ClassVar[bool] = False
    #: whether its manager frees the blocks a window skips (sliding, chunked local)
    windowed: ClassVar[bool] = False

    def max_memory_usage_bytes(
        self, x: BlockFigures, max_model_len: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        """vLLM ``max_memory_usage_bytes``: bytes one request of ``max_model_len`` needs."""
        return 0

    def blocks_held(self, x: BlockFigures, num_tokens: int, mode: MambaCacheMode) -> int:
        """Blocks a sequence of ``num_tokens`` holds while its last token is computed (the blocks
        a window's manager skips are back in the pool)."""
        return 0

    def peak_blocks(
        self, x: BlockFigures, num_tokens: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        """Blocks a sequence of ``num_tokens`` (> 0) holds at its peak, a prefill chunk of up to
        ``max_num_batched_tokens`` included (window bound, never above the full count)."""
        return 0


class FullRule(KindRule):
    """``FullAttentionSpec`` / ``MLAAttentionSpec``: a block per ``B`` tokens, all kept."""

    holds_tokens = True
    holds_cache = True

    def max_memory_usage_bytes(
        self, x: BlockFigures, max_model_len: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        return cdiv(max_model_len, x.block_size) * x.page_size_bytes

    def blocks_held(self, x: BlockFigures, num_tokens: int, mode: MambaCacheMode) -> int:
        return cdiv(num_tokens, x.block_size)

    def peak_blocks(
        self, x: BlockFigures, num_tokens: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        return cdiv(num_tokens, x.block_size)


class SlidingRule(KindRule):
    """``SlidingWindowSpec``: the window, a chunk in flight and one block for misalignment."""

    holds_tokens = True
    holds_cache = True
    windowed = True

    def max_memory_usage_bytes(
        self, x: BlockFigures, max_model_len: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        assert x.sliding_window is not None
        num_tokens = min(x.sliding_window - 1 + max_num_batched_tokens, max_model_len)
        return (cdiv(num_tokens, x.block_size) + 1) * x.page_size_bytes

    def blocks_held(self, x: BlockFigures, num_tokens: int, mode: MambaCacheMode) -> int:
        assert x.sliding_window is not None
        block = x.block_size
        return cdiv(num_tokens, block) - max(0, num_tokens - x.sliding_window) // block

    def peak_blocks(
        self, x: BlockFigures, num_tokens: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        assert x.sliding_window is not None
        window = min(x.sliding_window - 1 + max_num_batched_tokens, num_tokens)
        return min(cdiv(num_tokens, x.block_size), cdiv(window, x.block_size) + 1)


class ChunkedRule(KindRule):
    """``ChunkedLocalAttentionSpec``: the current chunk and a chunk in flight."""

    holds_tokens = True
    holds_cache = True
    windowed = True

    def max_memory_usage_bytes(
        self, x: BlockFigures, max_model_len: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        assert x.attention_chunk_size is not None
        num_tokens = min(x.attention_chunk_size + max_num_batched_tokens, max_model_len)
        return cdiv(num_tokens, x.block_size) * x.page_size_bytes

    def blocks_held(self, x: BlockFigures, num_tokens: int, mode: MambaCacheMode) -> int:
        assert x.attention_chunk_size is not None
        chunk, block = x.attention_chunk_size, x.block_size
        return cdiv(num_tokens, block) - ((num_tokens - 1) // chunk * chunk) // block

    def peak_blocks(
        self, x: BlockFigures, num_tokens: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        assert x.attention_chunk_size is not None
        chunk = min(x.attention_chunk_size + max_num_batched_tokens, num_tokens)
        return min(cdiv(num_tokens, x.block_size), cdiv(chunk, x.block_size))


class MambaRule(KindRule):
    """``MambaSpec``: one state page per sequence (``none``), two with ``align`` (plus the
    speculative and prefill-checkpoint blocks), one per block of tokens with ``all``."""

    holds_cache = True

    def _blocks(self, x: BlockFigures, num_tokens: int, mode: MambaCacheMode) -> int:
        if mode == "all":  # one state per block of tokens (prefix caching)
            return cdiv(num_tokens, x.block_size)
        if mode == "align":
            return 2 + x.num_speculative_blocks + x.num_checkpoint_blocks
        return 1 + x.num_speculative_blocks

    def max_memory_usage_bytes(
        self, x: BlockFigures, max_model_len: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        return self._blocks(x, max_model_len, mode) * x.page_size_bytes

    def blocks_held(self, x: BlockFigures, num_tokens: int, mode: MambaCacheMode) -> int:
        return self._blocks(x, num_tokens, mode)

    def peak_blocks(
        self, x: BlockFigures, num_tokens: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        return self._blocks(x, num_tokens, mode)


class RingRule(KindRule):
    """``CircularBufferSpec``: one block per request, kept for its whole lifetime."""

    holds_cache = True

    def max_memory_usage_bytes(
        self, x: BlockFigures, max_model_len: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        return x.page_size_bytes

    def blocks_held(self, x: BlockFigures, num_tokens: int, mode: MambaCacheMode) -> int:
        return 1

    def peak_blocks(
        self, x: BlockFigures, num_tokens: int, max_num_batched_tokens: int, mode: MambaCacheMode
    ) -> int:
        return 1


_FULL = FullRule()
#: each cache kind's rule (``full`` and ``mla`` page differently but hold blocks alike)
KIND_RULES: Final[dict[str, KindRule]] = {
    "full": _FULL,
    "mla": _FULL,
    "sliding": SlidingRule(),
    "chunked": ChunkedRule(),
    "mamba": MambaRule(),
    "ring": RingRule(),
    "none": KindRule(),
}


def kind_rule(kind: str) -> KindRule:
    """The rule of cache kind ``kind`` (one of ``VllmKind``)."""
    return KIND_RULES[kind]
