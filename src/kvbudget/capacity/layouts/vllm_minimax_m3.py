"""vLLM 0.32's pages for MiniMax-M3: each layer's K/V, plus the lightning indexer's key cache on
its sparse layers, all in one uniform-type group of 128-token blocks.

Sources (vLLM 0.32.0, ``site-packages/vllm/``; recorded against the CPU engine in
``tests/peer/fixtures/vllm_pools_0.32.0.json``, cases ``minimax_m3`` and ``minimax_m3_fp8``):

* ``models/minimax_m3/nvidia/model.py`` lines 99-107 (``_sparse_attention_layer_ids``): a layer is
  sparse where its ``sparse_attention_config.sparse_attention_freq`` entry is not 0; lines
  356-364: the other layers are a plain ``Attention(num_heads, head_dim, num_kv_heads)``.
* same file lines 562-571 (``MiniMaxM3SparseAttention.get_kv_cache_spec``): a sparse layer's main
  cache is a ``FullAttentionSpec(num_kv_heads per rank, head_size = head_size_v = head_dim, dtype
  of --kv-cache-dtype)``, the same page as a plain layer's.
* same file lines 505-509: the indexer cache dtype is ``resolve_indexer_kv_dtype("bf16")``
  (``--attention-config '{"indexer_kv_dtype": ...}'``, default bf16) whatever ``--kv-cache-dtype``
  says; ``models/minimax_m3/common/indexer.py`` lines 118-121 map bf16 to ``torch.bfloat16``.
* ``common/indexer.py`` lines 145-153 (``MiniMaxM3IndexerCache.get_kv_cache_spec``): an
  ``MLAAttentionSpec(num_kv_heads=1, head_size=index_head_dim, dtype)``: one key vector per token,
  no V (``head_size_v = 0``, ``v1/kv_cache_interface.py`` line 698), one head whatever the TP size:
  ``block x index_head_dim x 2`` bytes.
* ``v1/core/single_type_kv_cache_manager.py`` lines 2685-2687 register ``MLAAttentionSpec`` with
  ``uniform_type_base_spec=FullAttentionSpec``, so ``get_kv_cache_groups``
  (``v1/core/kv_cache_utils.py`` lines 2189-2193) puts every layer's K/V and every indexer cache
  in ONE ``UniformTypeKVCacheSpecs`` group whose page is the sum (``kv_cache_interface.py`` lines
  1252-1254). kvbudget folds a sparse layer's indexer page into that layer's page; the group's
  sum is the same.
* block size: the sparse attention and indexer backends take kernel blocks of 128 only
  (``common/sparse_attention.py`` lines 163-165, ``common/indexer.py`` lines 94-95), so vLLM's
  ``_preferred_block_size_for_backends`` (``platforms/interface.py`` lines 700-745) raises the
  default 16 to 128, and a ``--block-size`` that is not a multiple of 128 fails at worker setup
  (``v1/worker/utils.py`` lines 538-561, "No common block size for ...").
"""

from __future__ import annotations

from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_kinds import has_indexer
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.traits import MINIMAX_M3_TYPES

__all__ = [
    "MINIMAX_M3_BLOCK_SIZE",
    "VLLM_MINIMAX_M3_TYPES",
    "check_minimax_m3",
    "minimax_m3_index_page_bytes",
    "refuse_unlisted_sparse_layers",
]

#: kvbudget model types of MiniMax-M3's text decoder: the published config (``minimax_m3``),
#: vLLM's own ``MiniMaxM3TextConfig`` (``vllm/transformers_utils/configs/minimax_m3.py`` line 15)
#: and transformers' ``minimax_m3_vl_text``
VLLM_MINIMAX_M3_TYPES = MINIMAX_M3_TYPES

#: the only kernel block of vLLM 0.32's MiniMax-M3 sparse attention and indexer backends
MINIMAX_M3_BLOCK_SIZE = 128

#: bytes of one indexer key element: bfloat16 (``indexer_kv_dtype`` resolves to "bf16")
INDEX_KEY_BYTES = 2


def minimax_m3_index_page_bytes(index_head_dim: int, block_size: int) -> int:
    """One block of one sparse layer's indexer key cache: ``block x index_head_dim x 2`` bytes."""
    return block_size * index_head_dim * INDEX_KEY_BYTES


def check_minimax_m3(block_size: int | None, dtype: KvDtype) -> int:
    """The block size vLLM 0.32 uses for MiniMax-M3 (128 unless given); refuses what vLLM refuses
    or what kvbudget does not model for it, in one line naming the field and the fix."""
    if block_size is not None and block_size % MINIMAX_M3_BLOCK_SIZE:
        raise ConfigError(
            f"block_size: {block_size} for MiniMax-M3; vLLM 0.32's sparse attention and indexer "
            f"backends take blocks of {MINIMAX_M3_BLOCK_SIZE} tokens only ('No common block size', "
            f"v1/worker/utils.py); choose --block-size {MINIMAX_M3_BLOCK_SIZE} or a multiple",
            field="block_size",
        )
    if dtype.has_metadata:
        raise ConfigError(
            f"kv_dtype: {dtype.name} for MiniMax-M3 is not modelled (vLLM 0.32 packs it only on "
            "the SM100 sparse backend); choose auto, bfloat16 or fp8",
            field="kv_dtype",
        )
    return block_size or MINIMAX_M3_BLOCK_SIZE


def refuse_unlisted_sparse_layers(spec: ModelSpec, engine_fact: str) -> None:
    """vLLM 0.32 and SGLang find MiniMax-M3's sparse layers in ``sparse_attention_config`` only;
    a config that names them in transformers' flat ``layer_types`` alone (as transformers writes
    ``minimax_m3_vl_text``) is served without them there, so the engine layouts refuse it in one
    line with ``engine_fact`` (the engine's own source line)."""
    if spec.model_type not in MINIMAX_M3_TYPES or not has_indexer(spec.layer_seq):
        return
    sparse = spec.raw_config.get("sparse_attention_config")
    if isinstance(sparse, dict) and isinstance(sparse.get("sparse_attention_freq"), list):
        return
    raise LayoutNotApplicable(
        f"sparse_attention_config: {spec.model_type} names its sparse layers in layer_types only, "
        f"but {engine_fact}; add sparse_attention_config.sparse_attention_freq to the config, or "
        "use --engine hf"
    )
