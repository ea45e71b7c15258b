"""vLLM v1's layer specs and their page arithmetic (the spec classes of ``kv_cache_interface.py``).

:class:`VllmLayerSpec` is one layer's spec on one rank; the ``*_page_bytes`` functions are one
block of one layer of each kind (reference §1: attention, MLA, the DSA indexer, mamba states,
Inkling's conv state). What one request needs and holds in a layer is its kind's rule
(:mod:`~kvbudget.capacity.layouts.vllm_kinds`), asked by :class:`VllmLayerSpec` and
:func:`blocks_held`. :mod:`kvbudget.capacity.layouts.vllm` builds the specs of a model from these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.layouts.base import (
    GroupBytes,
    LayoutResult,
    StageBytes,
    heads_per_rank,
)
from kvbudget.capacity.layouts.vllm_kinds import kind_rule
from kvbudget.errors import ConfigError, SpecError
from kvbudget.spec.layers import MLA, FullAttention
from kvbudget.spec.state_layers import StateLayer

VllmKind = Literal["full", "sliding", "chunked", "mla", "mamba", "ring", "none"]
MambaCacheMode = Literal["none", "align", "all"]

DEFAULT_BLOCK_SIZE = 16
DEFAULT_MLA_BLOCK_SIZE = 64


@dataclass(frozen=True, slots=True)
class VllmLayerSpec:
    """One layer's KV cache spec on one rank, as vLLM v1 sees it."""

    layer_index: int
    kind: VllmKind
    block_size: int
    page_size_bytes: int
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    real_page_size_bytes: int = 0  # before mamba padding (equals page_size_bytes otherwise)
    num_speculative_blocks: int = 0
    mamba_cache_mode: MambaCacheMode = "none"
    #: vLLM 0.32 ``MambaMixer2.get_kv_cache_spec``: ``num_prefill_checkpoint_blocks=1`` (align mode)
    num_checkpoint_blocks: int = 0
    #: (heads, head size) of an Inkling conv state: vLLM keys its groups on the whole spec
    shape: tuple[int, int] = (0, 0)
    #: bytes the stride between blocks must be a multiple of (vLLM 0.32
    #: ``KVCacheSpec.get_block_stride_alignment``, ``v1/kv_cache_interface.py`` lines 183-193; a
    #: group's: the lcm of its members', ``_get_kv_cache_bytes_per_block``,
    #: ``v1/core/kv_cache_utils.py`` lines 1541-1551); 1 except Dots3-Note's sparse-MLA rows
    block_stride_alignment: int = 1

    def spec_key(self) -> tuple[object, ...]:
        """What vLLM's grouping compares (its buckets key on the whole spec): two layers of one
        key share a bucket; the unpadded page, speculative blocks and cache mode are left out."""
        return (
            self.kind,
            self.block_size,
            self.page_size_bytes,
            self.sliding_window,
            self.attention_chunk_size,
            self.num_checkpoint_blocks,
            self.shape,
        )

    @property
    def holds_tokens(self) -> bool:
        """Whether this layer's page is a block of tokens (attention, MLA, sliding, chunked),
        not one sequence's state (mamba) or nothing (none): its kind's rule says."""
        return kind_rule(self.kind).holds_tokens

    @property
    def holds_cache(self) -> bool:
        """Whether this layer holds a cache at all (not ``none``: KV-shared or attention-free)."""
        return kind_rule(self.kind).holds_cache

    @property
    def windowed(self) -> bool:
        """Whether this layer's manager frees the blocks a window skips (sliding, chunked)."""
        return kind_rule(self.kind).windowed

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token adds in this layer (``page // block``); 0 for a state or no cache."""
        return self.page_size_bytes // self.block_size if self.holds_tokens else 0

    def with_block_size(self, block_size: int) -> VllmLayerSpec:
        """This token layer at another block size, its page ``block_size * bytes_per_token``
        (vLLM's hybrid block raise, §1.6; SGLang's one-token cells)."""
        if not self.holds_tokens:
            raise ValueError(f"a {self.kind} layer has no bytes per token to re-block")
        page = self.bytes_per_token * block_size
        return replace(self, block_size=block_size, page_size_bytes=page, real_page_size_bytes=page)

    def unified_to(self, page_size_bytes: int) -> VllmLayerSpec:
        """This layer with its page raised to ``page_size_bytes`` by a larger block size (vLLM
        ``unify_kv_cache_spec_page_size``, §2.1: ``block_size * ratio``); the page must divide it."""
        if self.page_size_bytes == page_size_bytes:
            return self
        if page_size_bytes % self.page_size_bytes:
            raise SpecError(
                f"layers: page sizes {self.page_size_bytes} and {page_size_bytes} bytes are not "
                "multiples; vLLM raises NotImplementedError for this hybrid model",
                field="layers",
            )
        ratio = page_size_bytes // self.page_size_bytes
        return replace(self, block_size=self.block_size * ratio, page_size_bytes=page_size_bytes)

    def max_memory_usage_bytes(
        self,
        max_model_len: int,
        max_num_batched_tokens: int,
        mamba_cache_mode: MambaCacheMode | None = None,
    ) -> int:
        """Bytes one request of ``max_model_len`` tokens needs in this layer (vLLM §1.2–1.6),
        under this spec's mamba cache mode unless ``mamba_cache_mode`` is given."""
        mode = self.mamba_cache_mode if mamba_cache_mode is None else mamba_cache_mode
        return kind_rule(self.kind).max_memory_usage_bytes(
            self, max_model_len, max_num_batched_tokens, mode
        )


def attention_page_bytes(layer: FullAttention, dtype: KvDtype, tp: int, block_size: int) -> int:
    """One block of one head-based attention layer on one rank."""
    if dtype.mla_bytes_per_token is not None:
        raise ConfigError(
            f"kv dtype {dtype.name} is only for MLA models; choose fp8 or auto", field="kv_dtype"
        )
    heads = heads_per_rank(layer.num_kv_heads, tp)
    return block_size * heads * (dtype.row_bytes(layer.head_dim) + dtype.row_bytes(layer.v_dim))


def mla_page_bytes(layer: MLA, dtype: KvDtype, block_size: int) -> int:
    """One block of one MLA layer (not split by TP)."""
    if dtype.mla_bytes_per_token is not None:
        return block_size * dtype.mla_bytes_per_token
    if dtype.row_scale_bytes or dtype.nvfp4:
        raise ConfigError(
            f"kv dtype {dtype.name} is not modelled for MLA layers; choose auto, fp8 or fp8_ds_mla",
            field="kv_dtype",
        )
    return block_size * dtype.row_bytes(layer.latent_dim)


#: vLLM 0.32 ``model_executor/models/deepseek_v2.py`` ``Indexer.__init__`` (lines 723-736):
#: ``quant_block_size = 128`` and the key cache is a ``DeepseekV32IndexerCache`` of
#: ``head_dim = index_head_dim + index_head_dim // quant_block_size * 4`` bytes (``dtype=torch.uint8``:
#: the fp8 key plus one float32 scale per 128 values), whatever ``--kv-cache-dtype`` says
INDEXER_QUANT_BLOCK = 128


def indexer_page_bytes(index_head_dim: int, block_size: int) -> int:
    """One block of a DSA lightning indexer's key cache (DeepSeek-V3.2, GLM-5).

    ``DeepseekV32IndexerCache.get_kv_cache_spec`` (vLLM 0.32 ``deepseek_v2.py`` lines 659-667) is
    an ``MLAAttentionSpec(num_kv_heads=1, head_size=index_head_dim + index_head_dim // 128 * 4,
    dtype=uint8)``: ``block_size * head_size`` bytes (one vector, no V), never split by TP
    (``max_tp_shards=1``). 128 -> 132 bytes per token.
    """
    return block_size * (index_head_dim + index_head_dim // INDEXER_QUANT_BLOCK * 4)


def mamba_page_bytes(
    layer: StateLayer, state_bytes: int, tp: int, ssm_state_bytes: int | None = None
) -> int:
    """One state page (one sequence's state of one layer on one rank).

    A KDA recurrent state is float32 when ``--mamba-ssm-cache-dtype`` is auto (vLLM 0.32
    ``mamba_utils.py`` ``kda_state_dtype``: ``recurrent_state_dtype = torch.float32``)."""
    default_ssm = 4 if layer.state_kind == "kda" else state_bytes
    ssm_bytes = default_ssm if ssm_state_bytes is None else ssm_state_bytes
    return layer.conv_elements(tp) * state_bytes + layer.ssm_elements(tp) * ssm_bytes


def sconv_page_bytes(layer: StateLayer, tp: int, element_bytes: int) -> int:
    """Inkling's conv-state page (``InklingConvState``, ``models/inkling/nvidia/
    sconv_swa_attn.py`` lines 150-199): a ``SlidingWindowSpec`` of block and window
    ``kernel_size``, ``num_kv_heads // tp`` heads of ``head_size`` = the next power of two of
    ``2 x head_dim + 2 x (hidden // num_kv_heads)`` (K, V, attention-output and MLP-output
    streams packed per head; ``head_size_v = 0``), in the model dtype (bfloat16). ``layer`` carries
    the KV heads in ``num_heads`` and the unpadded per-head width in ``head_dim``
    (:func:`as_vllm_pages`)."""
    padded = 1 << (layer.head_dim - 1).bit_length()
    return layer.conv_kernel * (layer.num_heads // tp) * padded * element_bytes


#: what a window group's blocks per sequence are (issue #32 item 5: beside a concurrency figure
#: that charges the prefill peak, ``kvbudget plan`` says why the two differ)
WINDOW_KEPT = {
    "sliding": " (kept once decoding: the blocks the window touches)",
    "chunked": " (kept once decoding: the current chunk's blocks)",
}


def blocks_held(spec: VllmLayerSpec, num_tokens: int) -> int:
    """Blocks one sequence of ``num_tokens`` holds in this layer while its last token is computed.

    Sliding and chunked layers free the blocks their managers skip
    (``SlidingWindowManager``/``ChunkedLocalAttentionManager.get_num_skipped_tokens`` with
    ``num_computed_tokens = num_tokens - 1``): sliding skips ``max(0, T - W)`` tokens, chunked skips
    ``((T - 1) // C) * C``; whole skipped blocks are returned to the pool. A mamba layer holds one
    state page per sequence (``mamba_cache_mode="none"``), two with ``"align"`` (plus speculative
    blocks) and one per block of tokens with ``"all"`` (as ``max_memory_usage_bytes``, §1.6).
    Each kind's count is its rule's (:mod:`~kvbudget.capacity.layouts.vllm_kinds`).
    """
    return kind_rule(spec.kind).blocks_held(spec, num_tokens, spec.mamba_cache_mode)


@dataclass(frozen=True, slots=True)
class PackedSpec:
    """One cache spec a layer of a packed-group model (DeepSeek-V4, Dots3-Note, DeepSeek-V4.1)
    registers in vLLM 0.32; vLLM packs these side by side per block
    (``_get_packed_kv_cache_groups``, :func:`kvbudget.capacity.pool_packed.packed_groups`)."""

    layer_index: int
    #: what the spec holds (DeepSeek-V4: ``indexer_keys``, ``indexer_state``, ``swa``,
    #: ``compressed``, ``compressor_state``; Dots3-Note: ``indexer``, ``dsa``, ``sliding``;
    #: DeepSeek-V4.1: ``compressed``, ``indexer_keys``, ``swa``, ``compressor_state``)
    role: str
    #: ``mla``: an ``MLAAttentionSpec``; ``sliding``: a ``SlidingWindowMLASpec`` (a
    #: ``SlidingWindowSpec``); ``ring``: a ``CircularBufferSpec`` (DeepSeek-V4.1's rings)
    kind: Literal["mla", "sliding", "ring"]
    block_size: int
    page_size_bytes: int
    sliding_window: int | None = None
    #: tokens one stored state covers (DeepSeek-V4's compressed and indexer caches), else 1
    tokens_per_state: int = 1
    #: bytes the stride between blocks must be a multiple of (``get_block_stride_alignment``)
    block_stride_alignment: int = 1

    @property
    def bucket_key(self) -> tuple[object, ...]:
        """vLLM's ``UniformTypeKVCacheSpecs.is_uniform_type`` (``v1/kv_cache_interface.py``
        lines 1280-1295): one block size, one spec type (``MLAAttentionSpec`` vs
        ``SlidingWindowMLASpec`` of one window)."""
        return (self.kind, self.block_size, self.sliding_window)

    @property
    def is_state(self) -> bool:
        """A ``CircularBufferSpec``: a state bucket whatever the repeats."""
        return self.kind == "ring"

    @property
    def is_sliding(self) -> bool:
        """A ``SlidingWindowSpec``: a state bucket when nothing repeats."""
        return self.kind == "sliding"


class PackedGroup(Protocol):
    """A packed vLLM group as :func:`packed_group_bytes` reads it (``pool_types.KvCacheGroup``)."""

    @property
    def spec(self) -> VllmLayerSpec: ...

    @property
    def layer_indices(self) -> Sequence[int]: ...


def packed_group_bytes(groups: Iterable[PackedGroup], tokens: int, seqs: int) -> list[GroupBytes]:
    """The bytes of vLLM 0.32's packed groups (DeepSeek-V4, Dots3-Note, Qwen4-Exp:
    ``uniform_type``, the page the sum of the members' pages): each sequence holds
    :func:`blocks_held` blocks of its page (a state group: its state pages, no tokens kept); the
    specs have ``max_tp_shards = 1``, so every TP rank holds the same."""
    out = []
    for group in groups:
        spec = group.spec
        held = blocks_held(spec, tokens)
        per_seq = held * spec.page_size_bytes
        out.append(
            GroupBytes(
                spec.kind,
                group.layer_indices,
                held * spec.block_size if spec.holds_tokens else 0,
                spec.bytes_per_token,
                per_seq,
                per_seq * seqs,
                f"{held} block(s) of {spec.block_size} tokens per sequence"
                + WINDOW_KEPT.get(spec.kind, "")
                if spec.holds_tokens
                else f"{held} state page(s) per sequence",
            )
        )
    return out


def packed_layout(
    groups: Iterable[PackedGroup],
    *,
    kv_dtype_name: str,
    num_layers: int,
    tokens: int,
    seqs: int,
    tp: int,
    pp: int,
    dp: int,
    block_size: int,
    note: str,
    stage_groups: Sequence[tuple[int, int, Iterable[PackedGroup]]] = (),
) -> LayoutResult:
    """The vLLM layout of a packed-group model (Dots3-Note, Qwen4-Exp): one stage of
    :func:`packed_group_bytes` (or, with ``stage_groups``, each stage's ``(first layer, end,
    its projected groups)``), ``note`` saying what its groups hold, and the last block's padding
    when ``tokens`` is not a multiple of ``block_size``."""
    stages = tuple(
        StageBytes(p, start, end, tuple(packed_group_bytes(projected, tokens, seqs)))
        for p, (start, end, projected) in enumerate(stage_groups or [(0, num_layers, groups)])
    )
    return LayoutResult(
        "vllm",
        kv_dtype_name,
        tokens,
        seqs,
        tp,
        pp,
        dp,
        stages,
        block_size=block_size,
        notes=(note,),
        padding=(
            f"last block of each sequence is partly empty ({tokens} tokens, block {block_size})"
            if tokens % block_size
            else ""
        ),
    )
