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

This module builds a model's specs and the layout; the spec class and the page arithmetic of each
kind are :mod:`~kvbudget.capacity.layouts.vllm_specs`, where vLLM pages a model otherwise than its
config reads is :mod:`~kvbudget.capacity.layouts.vllm_models`, DeepSeek-V4's packed groups are
:mod:`~kvbudget.capacity.layouts.vllm_dsv4`, Dots3-Note's is
:mod:`~kvbudget.capacity.layouts.vllm_dots3`, Qwen4-Exp's (GDN and PLE states, QSA K/V, ring and
compressed keys) :mod:`~kvbudget.capacity.layouts.vllm_qwen4`.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.layouts.base import (
    GroupBytes,
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
from kvbudget.capacity.layouts.vllm_dots3 import dots3_layout, is_dots3_note
from kvbudget.capacity.layouts.vllm_dsv4 import dsv4_layout, is_deepseek_v4
from kvbudget.capacity.layouts.vllm_dsv41 import dsv41_layout, is_deepseek_v41
from kvbudget.capacity.layouts.vllm_minimax_m3 import (
    VLLM_MINIMAX_M3_TYPES,
    check_minimax_m3,
    minimax_m3_index_page_bytes,
    refuse_unlisted_sparse_layers,
)
from kvbudget.capacity.layouts.vllm_models import (
    VLLM_MHA_HYBRID,
    VLLM_MLA_AS_ATTENTION,
    as_vllm_pages,
    check_mimo_v2_fp8_tp,
    check_sconv,
    vllm_parts,
)
from kvbudget.capacity.layouts.vllm_qwen4 import is_qwen4_exp, qwen4_layout
from kvbudget.capacity.layouts.vllm_source_rules import VLLM_SOURCE_RULES
from kvbudget.capacity.layouts.vllm_specs import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MLA_BLOCK_SIZE,
    WINDOW_KEPT,
    MambaCacheMode,
    VllmKind,
    VllmLayerSpec,
    attention_page_bytes,
    blocks_held,
    indexer_page_bytes,
    mamba_page_bytes,
    mla_page_bytes,
    sconv_page_bytes,
)
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_parts import PartRuns
from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import MLA, CacheLayer, FullAttention, LayerSpec, cache_parts
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.state_layers import StateLayer
from kvbudget.units import cdiv

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MLA_BLOCK_SIZE",
    "VLLM_SOURCE_RULES",
    "MambaCacheMode",
    "VllmLayerSpec",
    "blocks_held",
    "get_pp_indices",
    "heads_per_rank",
    "vllm_layer_specs",
    "vllm_layout",
]


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
    draft_layers: Sequence[LayerSpec] = (),
) -> PartRuns[VllmLayerSpec]:
    """The KV specs of the layers pipeline stage ``pp_rank`` holds, on one TP rank (as runs;
    a parallel hybrid run gives two, its attention and its mamba mixer, with the same indices).

    ``draft_layers``: layers vLLM registers after every target layer, on the last stage (an MTP
    drafter's, :func:`kvbudget.spec.mtp.vllm_mtp_layers`), indexed from ``spec.num_layers`` on.
    They are already in vLLM's terms: :func:`as_vllm_pages` does not touch them.

    ``block_size=None`` uses vLLM's defaults (16; 64 for MLA) and the hybrid mamba raise.
    ``mamba_state_bytes`` / ``mamba_ssm_state_bytes`` are the conv / recurrent state element
    sizes (``--mamba-cache-dtype`` / ``--mamba-ssm-cache-dtype``; default: the model dtype).
    ``align_to_block_size``: the hybrid raise rounds to multiples of ``max(16, block_size)``
    (vLLM 0.32 ``Platform._align_hybrid_block_size``: ``kernel_block_alignment_size =
    max(min kernel block, cache_config.block_size)``), not of 16.
    """
    check_sconv(spec, tp)
    check_mimo_v2_fp8_tp(spec, tp)
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
        "its vLLM 0.32 specs (sliding MLA pages, DSA latents padded to the sliding rows, indexer "
        "keys) are not per-layer pages of one kind; kvbudget plans them as vLLM's packed groups "
        "instead (capacity.layouts.vllm_dots3, capacity.pool_dots3: 'kvbudget plan' and the vllm "
        "layout's totals)",
    )
    if spec.model_type not in VLLM_MINIMAX_M3_TYPES and any(
        isinstance(x, FullAttention) and x.index_head_dim for x in spec.layer_seq.distinct()
    ):
        # an indexer beside full attention: MiniMax-M3's here; Qwen4-Exp's QSA keys are vLLM's
        # packed groups (capacity.layouts.vllm_qwen4, capacity.pool_qwen4: the vllm layout's totals)
        refuse_indexer(spec, "vllm")
    if pp < 1:
        raise ConfigError(f"pp: must be >= 1, got {pp}", field="pp")
    heads_per_rank(1, tp)  # validates tp >= 1
    if block_size is not None and block_size < 1:
        raise ConfigError(f"block_size: must be >= 1, got {block_size}", field="block_size")
    dtype = get_kv_dtype(kv_dtype, engine="vllm", model_dtype=spec.torch_dtype)
    if spec.model_type in VLLM_MINIMAX_M3_TYPES:  # blocks of 128 (capacity/layouts/vllm_minimax_m3)
        refuse_unlisted_sparse_layers(
            spec,
            "vLLM 0.32 reads them from sparse_attention_config.sparse_attention_freq only "
            "(models/minimax_m3/nvidia/model.py lines 99-107)",
        )
        block_size = check_minimax_m3(block_size, dtype)
    state_bytes = mamba_state_bytes or _model_dtype_bytes(spec)
    if mamba_ssm_state_bytes is None and mamba_state_bytes is not None:
        mamba_ssm_state_bytes = mamba_state_bytes  # vLLM: ssm "auto" follows mamba_cache_dtype
    start, end = get_pp_indices(spec.num_layers, pp_rank, pp)
    model_layers = as_vllm_pages(spec)
    # a parallel hybrid decoder layer (Falcon-H1) is two specs: its attention and its mamba mixer
    stage = model_layers[start:end]
    if draft_layers and pp_rank == pp - 1:
        stage = LayerSeq.chain((stage, LayerSeq.from_items(draft_layers)), base=start)
    layers = PartRuns(stage.map(lambda layer, _first: vllm_parts(layer)))
    distinct = [
        part
        for layer in (*model_layers.distinct(), *draft_layers)
        for part in cache_parts((layer,))
    ]
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
    if is_deepseek_v41(spec):
        return dsv41_layout(spec, tokens=tokens, seqs=seqs, kv_dtype=kv_dtype, tp=tp, pp=pp, dp=dp)
    if is_deepseek_v4(spec):
        return dsv4_layout(spec, tokens=tokens, seqs=seqs, kv_dtype=kv_dtype, tp=tp, pp=pp, dp=dp)
    if is_dots3_note(spec):
        return dots3_layout(
            spec,
            tokens=tokens,
            seqs=seqs,
            kv_dtype=kv_dtype,
            tp=tp,
            pp=pp,
            dp=dp,
            block_size=block_size,
        )
    if is_qwen4_exp(spec):
        return qwen4_layout(
            spec,
            tokens=tokens,
            seqs=seqs,
            kv_dtype=kv_dtype,
            tp=tp,
            pp=pp,
            dp=dp,
            block_size=block_size,
        )
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
            block = first.block_size if first.holds_cache else block
            held = blocks_held(first, tokens)
            per_seq = members.total(lambda m: blocks_held(m, tokens) * m.page_size_bytes)
            per_token = (
                members.total(lambda m: m.page_size_bytes) // first.block_size
                if first.holds_tokens
                else 0
            )
            kept = held * first.block_size if first.holds_tokens else 0
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
                    if first.holds_cache
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
