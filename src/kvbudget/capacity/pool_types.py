"""The vLLM pool's group (``capacity.pool`` groups layers into it).

The pool's layers are the layout's specs (``capacity.layouts.vllm_specs.VllmLayerSpec``: one
cache-holding layer on one rank, with its page and byte arithmetic); :class:`KvCacheGroup` is layers
that share block ids. How a layer or group of a kind holds blocks is its kind's rule
(``capacity.layouts.vllm_kinds``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvbudget.capacity.layouts.vllm_kinds import kind_rule
from kvbudget.capacity.layouts.vllm_specs import MambaCacheMode, VllmKind, VllmLayerSpec
from kvbudget.units import cdiv


@dataclass(frozen=True, slots=True)
class KvCacheGroup:
    """One KV cache group: layers that share block ids (one block = one page in each layer)."""

    group_id: int
    kind: VllmKind
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
    #: bytes the block stride must be a multiple of: the lcm of the members' ``block_stride_alignment``
    #: (vLLM 0.32 ``_get_kv_cache_bytes_per_block``, ``v1/core/kv_cache_utils.py`` lines 1541-1551;
    #: Dots3-Note's sparse-MLA rows), 1 when no member sets one
    block_stride_alignment: int = 1

    @property
    def num_layers(self) -> int:
        return len(self.layer_indices)

    def as_layer(self) -> VllmLayerSpec:
        return VllmLayerSpec(
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
