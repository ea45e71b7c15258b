"""SGLang layout: a token pool of fixed-size cells, one cell per cached token.

Source: ``engines-kv-accounting.md`` §7.1 (sglang ``model_runner_kv_cache_mixin.py``,
``get_cell_size_per_token``):

* MHA/GQA cell: ``max(1, kv_heads // tp) * (head_dim + v_head_dim) * num_layers * s``.
* MLA cell: ``(kv_lora_rank + qk_rope_head_dim) * num_layers * s`` (576 per layer), not split by TP.
* FP4 (``nvfp4`` here): half a byte per element plus one scale byte per 16 elements.
* ``page_size`` is 1 token for most backends, so a sequence of T tokens takes exactly T cells.
* Dots3-Note (sliding-window MLA + DSA layers): SGLang's ``SWAKVPool`` of a ``DSATokenToKVPool``
  and an MLA sliding pool, see :mod:`kvbudget.capacity.layouts.sglang_dots3`.
* Sliding-window layers: this cell counts them at full length, which is what SGLang does for the
  models that set ``disable_hybrid_swa_memory`` (Gemma2/3, Olmo2; GptOss up to 0.5.4), the
  models outside its hybrid SWA list, and at 0.5.4 (this layout's release) for every model
  kvbudget plans. SGLang 0.5.23's hybrid SWA pool (``--swa-full-tokens-ratio``, 0.8 by default
  for the models it runs with it) holds no fixed count of sliding rows per sequence; the planner
  sizes it (``engines/sglang/swa_ratio.py``, ``stages.py``) and a note says so here
  (:func:`kvbudget.capacity.layouts.sglang_swa.sglang_windowed_note`). Chunked layers likewise.
* KV-shared layers (Gemma-3n, Gemma-4 E2B/E4B) hold rows of their own, sized as the layer they
  read (:mod:`kvbudget.capacity.layouts.sglang_shared`).
* Mamba-hybrid models keep a separate per-request state pool; here its size is the state shapes of
  vLLM's calculator in SGLang's default state dtypes, bfloat16 (conv, whatever the model dtype)
  and float32 (temporal state; ``--mamba-ssm-dtype`` default), split by TP.
* Falcon-H1 (parallel hybrid): SGLang's ``FalconH1Config`` (``srt/configs/falcon_h1.py``) lists
  every layer in both ``full_attention_layer_ids`` and ``linear_layer_ids``, so each decoder layer
  is counted once in the token pool and once in the state pool.
* Inkling: attention as above plus, per sequence, SGLang's six bfloat16 conv states on every
  layer (``capacity.layouts.sglang_inkling``, which cites the 0.5.23 source).
* MiniMax-M3: SGLang's ``MiniMaxSparseKVPool`` (sglang 0.5.23 ``srt/mem_cache/memory_pool.py``
  line 5847), sized by ``pool_configurator.py`` lines 410-490: every layer's K/V plus, on each
  sparse layer, one indexer head of ``sparse_index_dim`` in the model dtype (K only where
  ``sparse_disable_index_value`` is set, else K and V); 128-token pages on CUDA
  (``arg_groups/model_overrides/minimax_m3.py`` lines 161-187). See
  :func:`sglang_minimax_m3_cell_bytes`; 8- and 4-bit caches are refused (the index dtype then
  follows the GPU).
* DSA models (DeepSeek-V3.2, GLM-5 ``glm_moe_dsa``, Hunyuan v4 ``hy_v4``: MLA layers with a
  lightning indexer): SGLang's ``DSATokenToKVPool`` (sglang 0.5.23 wheel,
  ``srt/mem_cache/memory_pool.py`` line 5279; ``NSATokenToKVPool`` before the rename), sized by
  ``srt/model_executor/pool_configurator.py`` ``_compute_cell_size`` (lines 375-409) and
  ``_compute_dsa_indexer_cell_size`` (lines 560-635), see :func:`sglang_dsa_cell_bytes`. Pages of
  64 tokens (``srt/arg_groups/model_overrides/deepseek_v2.py`` lines 162-173, CUDA), so a
  sequence takes whole pages.
* Qwen4-Exp (GDN + QSA, PLE states): SGLang's ``QSATokenToKVPool`` (QSA K/V and compressed index
  keys per token, 64-token pages) beside the GDN state pool, see
  :mod:`kvbudget.capacity.layouts.sglang_qwen4`.
* DeepSeek-V4: SGLang's own pools (``DeepSeekV4TokenToKVPool``, 256-token pages: SWA window,
  c4 / c128 compressed rows, indexer keys, compressor states), see
  :mod:`kvbudget.capacity.layouts.sglang_dsv4`.
"""

from __future__ import annotations

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.layouts.base import (
    GroupBytes,
    LayoutNotApplicable,
    LayoutResult,
    StageBytes,
    check_load,
    heads_per_rank,
    refuse_indexer,
    refuse_sliding_latent,
    sglang_pp_split,
)
from kvbudget.capacity.layouts.grouping import group_by_kind
from kvbudget.capacity.layouts.sglang_dots3 import is_sglang_dots3, sglang_dots3_layout
from kvbudget.capacity.layouts.sglang_dsa import (
    DSA_INDEX_KEY_BYTES,
    DSA_QUANT_BLOCK,
    DSA_SINK_MODEL_TYPES,
    dsa_latent_bytes,
    sglang_dsa_dtype,
)
from kvbudget.capacity.layouts.sglang_dsv4 import is_sglang_dsv4, sglang_dsv4_layout
from kvbudget.capacity.layouts.sglang_qwen4 import is_sglang_qwen4, sglang_qwen4_layout
from kvbudget.capacity.layouts.sglang_shared import has_shared_kv, sglang_pool_layers
from kvbudget.capacity.layouts.sglang_swa import sglang_windowed_note
from kvbudget.capacity.layouts.vllm_minimax_m3 import refuse_unlisted_sparse_layers
from kvbudget.capacity.versions import DEFAULT_SGLANG_VERSION, parse_version
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import MLA, FullAttention
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.state_layers import StateLayer
from kvbudget.spec.traits import MINIMAX_M3_TYPES

#: SGLang's state dtypes by default (sglang 0.5.23 ``srt/configs/mamba_utils.py`` lines 46-105):
#: conv ``SGLANG_MAMBA_CONV_DTYPE`` bfloat16 whatever the model dtype (``environ.py`` line 1628),
#: temporal float32 (``--mamba-ssm-dtype`` default)
SGLANG_CONV_STATE_BYTES = 2
SGLANG_TEMPORAL_STATE_BYTES = 4
#: DSA page on CUDA: ``page_size = 64 * index_kpool`` (``arg_groups/model_overrides/deepseek_v2.py``
#: lines 162-173); ``index_kpool`` defaults to 1 (``configs/model_config.py`` line 530)
DSA_PAGE_SIZE = 64
#: kvbudget's MiniMax-M3 text types (as capacity.layouts.vllm_minimax_m3 reads them)
SGLANG_MINIMAX_M3_TYPES = MINIMAX_M3_TYPES
#: MiniMax-M3's page on CUDA: 128 tokens (``arg_groups/model_overrides/minimax_m3.py`` lines
#: 161-167 on SM100 with fa4/trtllm_mha, 181-187 on Hopper with fa3: "page_size=128")
MINIMAX_M3_PAGE_SIZE = 128


def is_sglang_dsa(spec: ModelSpec) -> bool:
    """MLA layers with a lightning indexer: SGLang's ``is_deepseek_dsa`` models (DeepSeek-V3.2,
    GLM-5, Hunyuan v4; ``configs/model_config.py`` lines 191-212), served by ``DSATokenToKVPool``."""
    return any(isinstance(x, MLA) and x.index_head_dim for x in spec.layer_seq.distinct())


def sglang_dsa_raw_fp8(model_type: str, cc_major: int) -> bool:
    """Whether SGLang's default DSA backends keep the fp8 latent raw (no scales, rope in fp8):
    ``trtllm`` on compute capability 10+ (``arg_groups/overrides.py`` lines 714-720), whose layout
    ``calculate_mla_kv_cache_dim`` returns unscaled (``kv_cache_configurator.py`` lines
    3429-3440); not with learnable sinks (``flashmla_sparse``, lines 644-663) nor for GLM-5 on
    compute capability 12 (``flashinfer_sparse_mla``, lines 636-642, 665-675)."""
    if cc_major < 10 or model_type in DSA_SINK_MODEL_TYPES:
        return False
    return not (model_type == "glm_moe_dsa" and cc_major == 12)


def sglang_dsa_cell_bytes(layer: MLA, dtype: KvDtype, *, raw_fp8: bool = False) -> int:
    """Bytes of one token of one DSA layer: latent row plus the indexer's key row.

    * latent (``kv_cache_configurator.py`` ``calculate_mla_kv_cache_dim``, lines 3412-3475):
      fp8_e4m3 with Hopper's default ``flashmla_kv`` ``kv_lora_rank + kv_lora_rank // 128 * 4 +
      qk_rope_head_dim * 2`` bytes (fp8 nope, float32 scales, bf16 rope: 656 for 512/64), or
      with ``raw_fp8`` (:func:`sglang_dsa_raw_fp8`) ``kv_lora_rank + qk_rope_head_dim`` (576);
      bfloat16 ``(kv_lora_rank + qk_rope_head_dim) * 2`` (1,152).
    * indexer (``pool_configurator.py`` lines 567-574): ``index_head_dim + index_head_dim // 128 *
      4`` uint8 bytes (132), whatever the KV dtype, on layers that compute their own top-k
      (``dsa_layer_skips_topk``: GLM-5.2's ``indexer_types`` "shared" layers hold none, their
      ``index_head_dim`` is 0 here).
    """
    latent = dsa_latent_bytes(
        layer.kv_lora_rank,
        layer.qk_rope_head_dim,
        dtype,
        scaled_fp8=dtype.block_bytes == 1 and not raw_fp8,
    )
    if not layer.index_head_dim:
        return latent
    if layer.index_head_dim != DSA_QUANT_BLOCK:
        raise LayoutNotApplicable(
            f"SGLang's DSATokenToKVPool asserts index_head_dim == 128; got {layer.index_head_dim}"
        )
    indexer = DSA_INDEX_KEY_BYTES  # index_head_dim is 128 (checked above)
    return latent + indexer


def is_sglang_minimax_m3(spec: ModelSpec) -> bool:
    """MiniMax-M3: full attention whose sparse layers keep an indexer key (SGLang's
    ``is_minimax_sparse`` models, ``configs/model_config.py`` lines 426-431), served by
    ``MiniMaxSparseKVPool`` (``mem_cache/memory_pool.py`` line 5847)."""
    return spec.model_type in SGLANG_MINIMAX_M3_TYPES and any(
        isinstance(x, FullAttention) and x.index_head_dim for x in spec.layer_seq.distinct()
    )


def minimax_m3_k_only_layers(spec: ModelSpec) -> frozenset[int]:
    """Sparse layers whose indexer stores K only: ``sparse_disable_index_value`` flags
    (``configs/model_config.py`` lines 467-471, ``get_minimax_sparse_disable_value_layer_ids``;
    none when the config omits them, so every indexer then stores K and V)."""
    sparse = spec.raw_config.get("sparse_attention_config")
    flags = sparse.get("sparse_disable_index_value") if isinstance(sparse, dict) else None
    return frozenset(i for i, f in enumerate(flags or ()) if f)


def sglang_minimax_m3_dtype(kv_dtype: str, model_dtype: str | None) -> KvDtype:
    """The KV dtype of SGLang's MiniMax-M3 pool; an 8- or 4-bit cache is refused: its indexer
    keys then follow the GPU (fp8 on Hopper and on Blackwell's fp8 GEMM path, the model dtype
    elsewhere: ``mem_cache/memory_pool.py`` lines 5831-5844), which the layout does not know."""
    dtype = get_kv_dtype(kv_dtype, engine="sglang", model_dtype=model_dtype)
    if dtype.element_bytes < 2:
        raise ConfigError(
            f"kv_dtype: {dtype.name} for MiniMax-M3 in SGLang is not modelled: SGLang 0.5.23 keeps "
            "its indexer keys in fp8 or the model dtype depending on the GPU "
            "(mem_cache/memory_pool.py lines 5831-5844); pass --kv-cache-dtype auto",
            field="kv_dtype",
        )
    return dtype


def sglang_minimax_m3_cell_bytes(
    layer: FullAttention, dtype: KvDtype, tp: int, index_bytes: int, k_only: frozenset[int]
) -> int:
    """Bytes of one token of one MiniMax-M3 layer on one rank in ``MiniMaxSparseKVPool``
    (``model_executor/pool_configurator.py`` lines 410-490): the main pool's K and V of
    ``get_num_kv_heads(tp)`` heads on every layer, plus on a sparse layer one indexer head of
    ``sparse_index_dim`` in the model dtype (``index_bytes``), K only where
    ``sparse_disable_index_value`` is set, else K and V."""
    cell = sglang_cell_bytes(layer, dtype, tp)
    if layer.index_head_dim:
        cell += layer.index_head_dim * index_bytes * (1 if layer.layer_index in k_only else 2)
    return cell


def sglang_cell_bytes(layer: FullAttention | MLA, dtype: KvDtype, tp: int) -> int:
    """Bytes of one token of one layer on one rank."""
    if isinstance(layer, MLA):
        if dtype.nvfp4 or dtype.row_scale_bytes:
            raise LayoutNotApplicable(f"SGLang MLA with {dtype.name} is not modelled; measure")
        return dtype.row_bytes(layer.latent_dim)
    heads = heads_per_rank(layer.num_kv_heads, tp)
    return heads * (dtype.row_bytes(layer.head_dim) + dtype.row_bytes(layer.v_dim))


def refuse_unmodelled_sglang(spec: ModelSpec) -> None:
    """Refuse, in one line naming SGLang's own source, the models whose SGLang pools kvbudget has
    not read (the layout and the planner alike)."""
    from kvbudget.capacity.layouts.sglang_inkling import inkling_geometry, is_sglang_inkling

    if is_sglang_inkling(spec):
        inkling_geometry(spec)  # refuses an Inkling without a full or a sliding layer
    refuse_sliding_latent(spec, "sglang", "kvbudget has not read SGLang's pools for it")
    refuse_unlisted_sparse_layers(
        spec,
        "SGLang 0.5.23 reads them from sparse_attention_config only and otherwise stops ('Could "
        "not find sparse config. Is it MiniMax M3 Sparse model?', srt/configs/model_config.py "
        "lines 446-457)",
    )


def sglang_layout(
    spec: ModelSpec,
    *,
    tokens: int,
    seqs: int,
    kv_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
) -> LayoutResult:
    """Bytes of ``seqs`` sequences of ``tokens`` tokens in SGLang's token pool, per rank."""
    from kvbudget.capacity.layouts.sglang_inkling import INKLING_STATE_KIND, inkling_geometry

    check_load(tokens, seqs, tp, pp, dp)
    if is_sglang_qwen4(spec):  # QSATokenToKVPool + GDN/PLE states: layouts/sglang_qwen4.py
        return sglang_qwen4_layout(
            spec, tokens=tokens, seqs=seqs, kv_dtype=kv_dtype, tp=tp, pp=pp, dp=dp
        )
    if is_sglang_dots3(spec):  # SWAKVPool: DSA full layers + an MLA sliding pool
        return sglang_dots3_layout(
            spec, tokens=tokens, seqs=seqs, kv_dtype=kv_dtype, tp=tp, pp=pp, dp=dp
        )
    refuse_unmodelled_sglang(spec)
    shared = has_shared_kv(spec)
    spec = sglang_pool_layers(spec)  # KV-shared layers: rows of their own (sglang_shared)
    if is_sglang_dsv4(spec):  # DeepSeek-V4's own pools: layouts/sglang_dsv4.py
        return sglang_dsv4_layout(
            spec, tokens=tokens, seqs=seqs, kv_dtype=kv_dtype, tp=tp, pp=pp, dp=dp
        )
    dsa = is_sglang_dsa(spec)
    msa = is_sglang_minimax_m3(spec)
    if not dsa and not msa:
        refuse_indexer(spec, "sglang")  # an indexer kvbudget has not read SGLang's pool for
    dtype = (
        sglang_dsa_dtype(kv_dtype, spec.model_type)
        if dsa
        else sglang_minimax_m3_dtype(kv_dtype, spec.torch_dtype)
        if msa
        else get_kv_dtype(kv_dtype, engine="sglang", model_dtype=spec.torch_dtype)
    )
    page = DSA_PAGE_SIZE if dsa else MINIMAX_M3_PAGE_SIZE if msa else 1
    kept = -(-tokens // page) * page
    model_bytes = 2 if spec.dtype_bytes in (None, 4) else int(spec.dtype_bytes or 2)
    k_only = minimax_m3_k_only_layers(spec) if msa else frozenset()
    notes: list[str] = []
    if shared:
        notes.append(
            "KV-shared layers hold rows of their own in SGLang's pool, sized as the layer they "
            "read (capacity/layouts/sglang_shared.py)"
        )
    if msa:
        notes.append(
            f"SGLang MiniMaxSparseKVPool: every layer's K/V plus the sparse layers' indexer key "
            f"(and value where sparse_disable_index_value is 0) in the model dtype; "
            f"{MINIMAX_M3_PAGE_SIZE}-token pages (the CUDA default)"
        )
    if dsa:
        notes.append(
            f"SGLang DSA pool: latent + indexer key per token, {DSA_PAGE_SIZE}-token pages; "
            "kv dtype auto is bfloat16 (fp8_e4m3 on compute capability 10+ unless learnable sinks)"
        )
    stages: list[StageBytes] = []
    for rank in range(pp):
        # SGLang's split at the default release (calc takes no version; layouts.base)
        start, end = sglang_pp_split(parse_version(DEFAULT_SGLANG_VERSION))(
            spec.num_layers, rank, pp
        )
        groups: list[GroupBytes] = []
        for (kind, _w), layers in group_by_kind(spec.layers[start:end]):
            first = layers.first
            indices = layers.indices
            if isinstance(first, FullAttention | MLA):
                per_token = layers.total(
                    lambda x: (
                        sglang_dsa_cell_bytes(x, dtype)
                        if dsa and isinstance(x, MLA)
                        else sglang_minimax_m3_cell_bytes(x, dtype, tp, model_bytes, k_only)
                        if msa and isinstance(x, FullAttention)
                        else sglang_cell_bytes(x, dtype, tp)
                        if isinstance(x, FullAttention | MLA)
                        else 0
                    )
                )
                note = "counted at full length" if kind in ("sliding", "chunked") else ""
                said = sglang_windowed_note(spec, kind) if note else ""
                if said and said not in notes:
                    notes.append(said)
                groups.append(
                    GroupBytes(
                        kind,
                        indices,
                        kept,
                        per_token,
                        per_token * kept,
                        per_token * kept * seqs,
                        note,
                    )
                )
            elif isinstance(first, StateLayer) and first.state_kind == INKLING_STATE_KIND:
                # Inkling: SGLang's six bfloat16 conv states per layer (layouts/sglang_inkling)
                per_seq = inkling_geometry(spec).state_bytes_per_layer(tp) * len(indices)
                groups.append(
                    GroupBytes(
                        kind,
                        indices,
                        0,
                        0,
                        per_seq,
                        per_seq * seqs,
                        "conv-state pool, one per request",
                    )
                )
            elif isinstance(first, StateLayer):
                per_seq = layers.total(
                    lambda x: (
                        x.conv_elements(tp) * SGLANG_CONV_STATE_BYTES
                        + x.ssm_elements(tp) * SGLANG_TEMPORAL_STATE_BYTES
                        if isinstance(x, StateLayer)
                        else 0
                    )
                )
                groups.append(
                    GroupBytes(
                        kind,
                        indices,
                        0,
                        0,
                        per_seq,
                        per_seq * seqs,
                        "mamba state pool, one per request",
                    )
                )
            else:
                groups.append(GroupBytes(kind, indices, 0, 0, 0, 0))
        stages.append(StageBytes(rank, start, end, tuple(groups)))
    return LayoutResult(
        "sglang",
        dtype.name,
        tokens,
        seqs,
        tp,
        pp,
        dp,
        tuple(stages),
        block_size=page,
        notes=tuple(notes),
    )
