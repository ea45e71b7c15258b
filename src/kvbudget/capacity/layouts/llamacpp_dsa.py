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

Dots3-Note (``dots3note``, ``src/llama-arch.cpp`` line 115; the converter's ``Dots3NoteModel``,
``conversion/dots3.py`` lines 18-143, a ``DeepseekV2Model``): ``src/llama-model.cpp`` lines
2536-2586 build a ``llama_kv_cache_dsa_iswa`` (``src/llama-kv-cache-dsa-iswa.cpp`` lines 33-75):
the ``llama_kv_cache_dsa`` above over the trunk's non-sliding layers (``n_ctx_seq`` cells; the
indexer cache on ``is_indexer_full`` layers, which the converter writes as every non-sliding layer,
line 143) plus a plain K-only ``llama_kv_cache`` over the sliding layers of
``GGML_PAD(min(n_ctx_seq, n_swa x (n_seq_max if -kvu else 1) + n_ubatch), 256)`` cells (line 53),
its rows ``key_length_swa = swa_kv_lora_rank + swa_qk_rope_head_dim`` (``conversion/dots3.py``
line 129, read at ``src/llama-model.cpp`` line 1465) of ``-ctk``; ``n_swa`` is
``sliding_window_size`` (line 126) and the sliding layers are ``layer_types`` "sliding_attention"
(lines 69-73, 127).
"""

from __future__ import annotations

from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.grouping import Members
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import MLA, LayerSpec
from kvbudget.spec.model import ModelSpec

#: kvbudget model types llama.cpp serves with ``llama_kv_cache_dsa``
LLAMACPP_DSA_TYPES = frozenset({"deepseek_v32", "glm_moe_dsa"})
#: kvbudget model types llama.cpp serves with ``llama_kv_cache_dsa_iswa`` (the flat format the
#: converter reads: ``Dots3NoteForCausalLM``, ``conversion/dots3.py`` line 18)
LLAMACPP_DOTS3_TYPES = frozenset({"dots3_note"})
#: the keys ``Dots3NoteModel`` reads as ``hparams[key]`` (``conversion/dots3.py`` lines 58-143)
DOTS3_CONVERTER_KEYS = (
    "layer_types",
    "sliding_window_size",
    "swa_kv_lora_rank",
    "swa_qk_rope_head_dim",
    "swa_qk_nope_head_dim",
    "swa_v_head_dim",
    "swa_num_attention_heads",
    "swa_q_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "index_n_heads",
    "index_head_dim",
    "index_topk",
)
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
    if spec.model_type in LLAMACPP_DOTS3_TYPES:
        return dots3_index(spec)
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


def _refuse_dots3(field: str, why: str) -> None:
    raise LayoutNotApplicable(
        f"{field}: llama.cpp 0c1e570's converter refuses this Dots3-Note config ({why}); fix "
        "config.json, or use --engine hf"
    )


def dots3_index(spec: ModelSpec) -> tuple[int, frozenset[int]]:
    """Dots3-Note: ``(indexer_head_size, the non-sliding layers)``, after the converter's checks
    (``conversion/dots3.py``): the keys it reads, ``use_dsa`` true (lines 45-46), the rope width
    shared by both kinds (lines 63-65), ``swa_head_dim`` (line 61), one ``q_lora_rank`` (lines
    133-134); the layers' latents and window must be what it writes (lines 124-130)."""
    raw = spec.raw_config
    for key in DOTS3_CONVERTER_KEYS:
        if raw.get(key) is None:
            _refuse_dots3(
                key,
                f"conversion/dots3.py reads hparams[{key!r}], absent here unless the "
                "converting transformers' config class fills it",
            )
    types = raw["layer_types"]
    if not isinstance(types, list) or len(types) < spec.num_layers:
        _refuse_dots3("layer_types", "'layer_types is shorter than num_hidden_layers', line 43")
    if raw.get("use_dsa", True) is not True:
        _refuse_dots3("use_dsa", "'dots3-note conversion requires use_dsa=true', line 46")
    if raw["swa_qk_rope_head_dim"] != raw["qk_rope_head_dim"]:
        _refuse_dots3("swa_qk_rope_head_dim", "'must match qk_rope_head_dim', lines 63-65")
    if raw["swa_qk_nope_head_dim"] + raw["swa_qk_rope_head_dim"] != raw.get("swa_head_dim", 256):
        _refuse_dots3(
            "swa_head_dim",
            "'swa_head_dim must equal swa_qk_nope_head_dim + swa_qk_rope_head_dim', lines 61-62",
        )
    if raw["swa_q_lora_rank"] != raw["q_lora_rank"]:
        _refuse_dots3("swa_q_lora_rank", "'assumes a shared q_lora_rank', lines 133-134")
    sliding = [t == "sliding_attention" for t in types[: spec.num_layers]]
    rows = (
        raw["swa_kv_lora_rank"] + raw["swa_qk_rope_head_dim"],
        raw.get("kv_lora_rank", 512) + raw["qk_rope_head_dim"],
    )
    window = raw["sliding_window_size"]
    for i, layer in enumerate(spec.layers):
        want = (rows[0], window) if sliding[i] else (rows[1], 0)
        if not isinstance(layer, MLA) or (layer.latent_dim, layer.sliding_window or 0) != want:
            _refuse_dots3(
                "layer_types",
                f"layer {i}: its GGUF row and window would be {want}, kvbudget's layer differs",
            )
    return raw["index_head_dim"], frozenset(i for i, s in enumerate(sliding) if not s)


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
