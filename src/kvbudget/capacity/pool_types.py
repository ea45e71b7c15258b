"""The vLLM pool's layer and group (``capacity.pool`` groups the one into the other).

:class:`PoolLayer` is one cache-holding layer on one rank (what
``capacity.layouts.vllm_specs.VllmLayerSpec`` carries); :class:`KvCacheGroup` is layers that share
block ids. How a layer or group of a kind holds blocks is its kind's rule
(``capacity.layouts.vllm_kinds``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kvbudget.capacity.layouts.vllm_kinds import kind_rule
from kvbudget.capacity.layouts.vllm_specs import MambaCacheMode
from kvbudget.units import cdiv

PoolKind = Literal["full", "sliding", "chunked", "mla", "mamba", "none"]  # none: no cache, skipped


@dataclass(frozen=True, slots=True)
class PoolLayer:
    """One cache-holding layer on one rank: block size and page (one block of one layer)."""

    layer_index: int
    kind: PoolKind
    block_size: int
    page_size_bytes: int
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    num_speculative_blocks: int = 0
    num_checkpoint_blocks: int = 0  # vLLM 0.32 mamba2 prefill checkpoint (align mode)
    #: (heads, head size) where two specs of one kind, block, page and window still differ in
    #: vLLM (its buckets key on the whole spec): Inkling's conv states of sliding and full layers
    shape: tuple[int, int] = (0, 0)

    def spec_key(self) -> tuple[object, ...]:
        return (
            self.kind,
            self.block_size,
            self.page_size_bytes,
            self.sliding_window,
            self.attention_chunk_size,
            self.num_checkpoint_blocks,
            self.shape,
        )

    def max_memory_usage_bytes(
        self,
        max_model_len: int,
        max_num_batched_tokens: int,
        mamba_cache_mode: MambaCacheMode = "none",
    ) -> int:
        """Bytes one max-length request needs in this layer (reference §1.2-§1.6)."""
        return kind_rule(self.kind).max_memory_usage_bytes(
            self, max_model_len, max_num_batched_tokens, mamba_cache_mode
        )


@dataclass(frozen=True, slots=True)
class KvCacheGroup:
    """One KV cache group: layers that share block ids (one block = one page in each layer)."""

    group_id: int
    kind: PoolKind
    layer_indices: Sequence[int]  # a LayerIndices (ranges)
    num_padding_layers: int
    block_size: int
    page_size_bytes: int
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    num_speculative_blocks: int = 0
    num_checkpoint_blocks: int = 0
    #: vLLM's ``UniformTypeKVCacheSpecs``: ``page_size_bytes`` is the sum over every member layer's
    #: page (layers of one kind with different pages: DSA's MLA latent + indexer keys, GLM-5.2's
    #: layers with and without an indexer), so the group counts as one layer of that page
    uniform_type: bool = False

    @property
    def num_layers(self) -> int:
        return len(self.layer_indices)

    def as_layer(self) -> PoolLayer:
        return PoolLayer(
            layer_index=self.layer_indices[0] if self.layer_indices else -1,
            kind=self.kind,
            block_size=self.block_size,
            page_size_bytes=self.page_size_bytes,
            sliding_window=self.sliding_window,
            attention_chunk_size=self.attention_chunk_size,
            num_speculative_blocks=self.num_speculative_blocks,
            num_checkpoint_blocks=self.num_checkpoint_blocks,
        )

    def max_blocks_per_request(
        self,
        max_model_len: int,
        max_num_batched_tokens: int,
        mamba_cache_mode: MambaCacheMode = "none",
    ) -> int:
        """``cdiv(max_memory_usage_bytes, page)``: blocks one max-length request holds in this group."""
        mem = self.as_layer().max_memory_usage_bytes(
            max_model_len, max_num_batched_tokens, mamba_cache_mode
        )
        return cdiv(mem, self.page_size_bytes)

    def blocks_for_tokens(
        self,
        num_tokens: int,
        max_num_batched_tokens: int,
        mamba_cache_mode: MambaCacheMode = "none",
    ) -> int:
        """Blocks a sequence of ``num_tokens`` holds in this group at its peak (window bound)."""
        if num_tokens <= 0:
            return 0
        return kind_rule(self.kind).peak_blocks(
            self, num_tokens, max_num_batched_tokens, mamba_cache_mode
        )
