"""llama.cpp's DSA cache: DeepSeek-V3.2 (``deepseek32``) and GLM-5 (``glm-dsa``).

Read in llama.cpp 0c1e570 (llama-cpp-python 0.3.36 ``vendor/llama.cpp``), the build
``scripts/llama-server.sh`` makes:

* ``src/llama-arch.cpp`` lines 82 and 87 name ``deepseek32`` and ``glm-dsa``; the converter maps
  ``DeepseekV32ForCausalLM`` and ``GlmMoeDsaForCausalLM`` to them (``conversion/deepseek.py``
  line 464, ``conversion/glm.py`` line 316), both subclasses of ``DeepseekV2Model``.
* ``src/llama-model.cpp`` lines 2397-2449: the main context builds a ``llama_kv_cache_dsa`` over
  the trunk layers (``il < n_layer()``: the NextN/MTP layers hold nothing there), ``n_ctx_seq``
  cells per stream; the indexer cache holds a layer when ``il < n_layer()`` and, for
  ``glm-dsa`` only, ``is_indexer_full(il)`` (line 2431).
* ``src/llama-kv-cache-dsa.cpp`` lines 31-53: two plain ``llama_kv_cache``: the MLA cache with the
  model's hparams, and the indexer cache with ``n_head_kv = 1`` and ``n_embd_head_k_full =
  indexer_head_size``; both get ``type_k`` (``-ctk``) and the same cells and streams.
* ``src/llama-kv-cache.cpp`` lines 230-234: an MLA model (``hparams.is_mla()``, true for both
  caches: the indexer's hparams are a copy) allocates K only, ``n_embd_head_k x n_head_kv``
  elements per cell; no V tensor, so ``-ctv`` sizes nothing.
* ``conversion/deepseek.py`` lines 325-326 and 349-352: the GGUF has ``head_count_kv = 1`` and
  ``key_length = kv_lora_rank + qk_rope_head_dim`` (576 for DeepSeek-V3.2 / GLM-5), so the MLA
  cache keeps the latent: ``kv_lora_rank + qk_rope_head_dim`` elements per layer per cell.
* Which GLM layers keep an indexer key: the config's ``indexer_types`` ("full"), which the
  converter copies (``conversion/glm.py`` lines 380-382); without it ``src/models/glm-dsa.cpp``
  lines 60-66: every layer when ``n_ctx_train`` (``max_position_embeddings``,
  ``conversion/base.py`` line 1437) is below 1,048,576, else the GLM-5.2 table
  (``GLM_5_2_DEFAULT_INDEXER_TYPES``, lines 6-26: layers 0, 1 and every 4th from 2, 78 entries).
  The converter ignores ``index_topk_freq`` / ``index_topk_pattern``.
* ``src/llama-context.cpp`` lines 3835-3838: an MLA model refuses ``-ctk`` unlike ``-ctv``
  ("model does not support different K (...) and V (...) cache types"), although V sizes nothing.
"""

from __future__ import annotations

from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.layouts.grouping import Members
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import MLA, LayerSpec
from kvbudget.spec.model import ModelSpec

#: kvbudget model types llama.cpp serves with ``llama_kv_cache_dsa``
LLAMACPP_DSA_TYPES = frozenset({"deepseek_v32", "glm_moe_dsa"})
#: ``glm-dsa.cpp`` line 60: ``is_pre_5_2 = hparams.n_ctx_train < 1048576``
GLM_5_2_N_CTX_TRAIN = 1048576
#: ``GLM_5_2_DEFAULT_INDEXER_TYPES`` (``glm-dsa.cpp`` lines 6-26) has this many entries; the rest
#: of the ``LLAMA_MAX_LAYERS`` array is 0
GLM_5_2_TABLE_LAYERS = 78


def _glm_5_2_default(layer: int) -> bool:
    """``GLM_5_2_DEFAULT_INDEXER_TYPES[layer]``: 1, 1, then 1, 0, 0, 0 repeated, 78 entries."""
    return layer < 2 or (layer < GLM_5_2_TABLE_LAYERS and (layer - 2) % 4 == 0)


def dsa_index(spec: ModelSpec) -> tuple[int, frozenset[int] | None] | None:
    """``(indexer_head_size, layers of the indexer cache)`` for a model llama.cpp serves with
    ``llama_kv_cache_dsa`` (None for the layers: every trunk layer); None for any other model."""
    if spec.model_type not in LLAMACPP_DSA_TYPES:
        return None
    dim = max((getattr(x, "index_head_dim", 0) for x in spec.layer_seq.distinct()), default=0)
    if not dim:
        return None
    raw = spec.raw_config
    if spec.model_type != "glm_moe_dsa":
        return dim, None
    types = raw.get("indexer_types")
    if isinstance(types, list):  # one entry per layer, already a list in the config
        return dim, frozenset(i for i, t in enumerate(types) if t == "full")
    n_ctx_train = raw.get("max_position_embeddings")
    if isinstance(n_ctx_train, int) and n_ctx_train >= GLM_5_2_N_CTX_TRAIN:
        table = min(spec.num_layers, GLM_5_2_TABLE_LAYERS)
        return dim, frozenset(i for i in range(table) if _glm_5_2_default(i))
    return dim, None


def dsa_cell_bytes(
    layers: Members[LayerSpec], k_type: KvDtype, index: tuple[int, frozenset[int] | None]
) -> tuple[int, int]:
    """``(MLA, indexer)`` bytes one cell of these layers holds: a ``-ctk`` row of the latent on
    every MLA layer, and one of ``indexer_head_size`` on the indexer cache's layers."""
    dim, indexed = index
    latent = keys = 0
    for x, r in layers.runs:
        if not isinstance(x, MLA):
            continue
        latent += k_type.row_bytes(x.latent_dim) * len(r)
        count = len(r) if indexed is None else sum(1 for i in indexed if i in r)
        keys += k_type.row_bytes(dim) * count
    return latent, keys


def refuse_mixed_types(k_type: KvDtype, v_type: KvDtype) -> None:
    """``llama_init_from_model`` refuses an MLA model whose K and V cache types differ
    (``src/llama-context.cpp`` lines 3835-3838), so the layout does too, in its words."""
    if k_type.name != v_type.name:
        raise ConfigError(
            f"v_dtype: llama.cpp 0c1e570 refuses this MLA model: 'model does not support "
            f"different K ({k_type.name}) and V ({v_type.name}) cache types' "
            "(src/llama-context.cpp line 3836); pass the same -ctk and -ctv",
            field="v_dtype",
        )
