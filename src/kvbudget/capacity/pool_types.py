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
    """One KV cache group: layers that share block ids (one block = one page in each layer).

    As vLLM's ``KVCacheGroupSpec(layer_names, kv_cache_spec)``: the member layers and the one
    spec they share (after the hybrid page unification); the spec owns the page arithmetic, the
    group only says which layers hold it.
    """

    group_id: int
    #: the members' shared spec (its ``layer_index``: the first member)
    spec: VllmLayerSpec
    layer_indices: Sequence[int]  # a LayerIndices (ranges)
    num_padding_layers: int = 0
    #: vLLM's ``UniformTypeKVCacheSpecs``: ``spec.page_size_bytes`` is the sum over every member
    #: layer's page (layers of one kind with different pages: DSA's MLA latent + indexer keys,
    #: GLM-5.2's layers with and without an indexer), so the group counts as one layer of that page
    uniform_type: bool = False
    #: a UniformType group whose every member layer adds this same page (Qwen4-Exp's packed
    #: groups), so it projects onto a pipeline stage as that page x its layers there (vLLM 0.32
    #: ``_project_kv_cache_groups_to_worker``, ``v1/core/kv_cache_utils.py`` lines 2486-2528);
    #: 0: not projectable, planned on one stage only
    layer_page_bytes: int = 0

    def page_on(self, rank_layers: range | set[int] | None) -> int:
        """This group's page on the stage of ``rank_layers`` (the whole page when None)."""
        if rank_layers is None or not self.layer_page_bytes:
            return self.page_size_bytes
        return self.layer_page_bytes * sum(1 for i in self.layer_indices if i in rank_layers)

    @property
    def kind(self) -> VllmKind:
        return self.spec.kind

    @property
    def block_size(self) -> int:
        return self.spec.block_size

    @property
    def page_size_bytes(self) -> int:
        return self.spec.page_size_bytes

    @property
    def sliding_window(self) -> int | None:
        return self.spec.sliding_window

    @property
    def block_stride_alignment(self) -> int:
        return self.spec.block_stride_alignment

    @property
    def attention_chunk_size(self) -> int | None:
        return self.spec.attention_chunk_size

    @property
    def num_speculative_blocks(self) -> int:
        return self.spec.num_speculative_blocks

    @property
    def num_checkpoint_blocks(self) -> int:
        return self.spec.num_checkpoint_blocks

    @property
    def num_layers(self) -> int:
        return len(self.layer_indices)

    def max_blocks_per_request(
        self,
        max_model_len: int,
        max_num_batched_tokens: int,
        mamba_cache_mode: MambaCacheMode = "none",
    ) -> int:
        """``cdiv(max_memory_usage_bytes, page)``: blocks one max-length request holds in this group."""
        mem = self.spec.max_memory_usage_bytes(
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
