"""llama.cpp's DSA cache (DeepSeek-V3.2, GLM-5), worked by hand from llama.cpp 0c1e570
(llama-cpp-python 0.3.36 ``vendor/llama.cpp``), never from kvbudget:

* ``src/llama-model.cpp`` lines 2397-2449: ``deepseek32`` / ``glm-dsa`` get ``llama_kv_cache_dsa``
  over the trunk layers, ``n_ctx_seq`` cells per stream; the indexer cache on ``il < n_layer()``
  and, for ``glm-dsa``, ``is_indexer_full(il)``.
* ``src/llama-kv-cache-dsa.cpp`` lines 31-53: an MLA cache (the model's hparams) and an indexer
  cache (``n_head_kv = 1``, ``n_embd_head_k_full = indexer_head_size``), both ``type_k``.
* ``src/llama-kv-cache.cpp`` lines 230-234: MLA caches hold K only (``has_v = !is_mla``).
* ``conversion/deepseek.py`` lines 325-326, 349-352: ``head_count_kv = 1``, ``key_length =
  kv_lora_rank + qk_rope_head_dim`` = 512 + 64 = 576.
* ``src/models/glm-dsa.cpp`` lines 6-26, 60-66: ``indexer_types`` from the GGUF (the converter
  copies the config's, ``conversion/glm.py`` lines 380-382), else every layer when
  ``n_ctx_train < 1048576``, else the GLM-5.2 table (layers 0, 1, 2, 6, 10, ..., 74).
* ggml row bytes: f16 2 B per element; q8_0 34 B per 32 elements (576 -> 18 x 34 = 612,
  128 -> 4 x 34 = 136).

Per cell, f16: latent 576 x 2 = 1,152 B per layer, indexer key 128 x 2 = 256 B per indexed layer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.llamacpp import llamacpp_kv_split, llamacpp_layout
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model
from tests.unit.spec.config_file import spec_from_config


def _spec(model_id: str) -> ModelSpec:
    spec = resolve_model(model_id).spec
    assert spec is not None
    return spec


@pytest.mark.parametrize(
    ("model_id", "per_cell_bytes"),
    [
        # 61 layers, all indexed: 61 x (1,152 + 256) = 85,888
        ("deepseek-ai/DeepSeek-V3.2", 85_888),
        # 78 layers, no indexer_types, max_position_embeddings 202,752 < 1,048,576: all indexed,
        # 78 x 1,408 = 109,824
        ("zai-org/GLM-5", 109_824),
        # 78 layers, indexer_types "full" on 21 (0, 1, 2, 6, ..., 74): 78 x 1,152 + 21 x 256 =
        # 89,856 + 5,376 = 95,232
        ("zai-org/GLM-5.2", 95_232),
    ],
)
def test_published_dsa_models_f16(model_id: str, per_cell_bytes: int) -> None:
    spec = _spec(model_id)
    layout = llamacpp_layout(spec, tokens=4096, seqs=1, ctx_size=4096)
    assert layout.total_bytes == per_cell_bytes * 4096
    kv = llamacpp_kv_split(spec, tokens=4096, seqs=1, ctx_size=4096)
    assert (kv.k_bytes, kv.v_bytes) == (per_cell_bytes * 4096, 0)  # no V tensor


def test_q8_0_streams() -> None:
    """``-c 10000 -np 3 -ctk q8_0 -ctv q8_0``: n_ctx = pad256(10000) = 10,240, n_ctx_seq =
    pad256(10,240 // 3 = 3,413) = 3,584 cells x 3 streams = 10,752; per cell 61 x (612 + 136) =
    45,628 B; -ctv sizes nothing (no V tensor)."""
    spec = _spec("deepseek-ai/DeepSeek-V3.2")
    layout = llamacpp_layout(
        spec, tokens=3000, seqs=3, kv_dtype="q8_0", v_dtype="q8_0", ctx_size=10_000
    )
    assert layout.total_bytes == 45_628 * 10_752 == 490_592_256
    kv = llamacpp_kv_split(
        spec, tokens=3000, seqs=3, kv_dtype="q8_0", v_dtype="q8_0", ctx_size=10_000
    )
    assert (kv.n_ctx, kv.k_bytes, kv.v_bytes) == (10_752, 490_592_256, 0)


def test_different_k_and_v_types_refused() -> None:
    """``src/llama-context.cpp`` lines 3835-3838: an MLA model with ``type_k != type_v`` fails
    ("model does not support different K (%s) and V (%s) cache types")."""
    spec = _spec("deepseek-ai/DeepSeek-V3.2")
    words = "model does not support different K (f16) and V (q8_0) cache types"
    with pytest.raises(ConfigError, match=re.escape(words)):
        llamacpp_layout(spec, tokens=100, seqs=1, kv_dtype="f16", v_dtype="q8_0", ctx_size=256)
    with pytest.raises(ConfigError, match=re.escape(words)):
        llamacpp_kv_split(spec, tokens=100, seqs=1, kv_dtype="f16", v_dtype="q8_0", ctx_size=256)


GLM_TINY: dict[str, Any] = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "num_hidden_layers": 8,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "kv_lora_rank": 64,
    "q_lora_rank": 64,
    "qk_rope_head_dim": 32,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    "index_head_dim": 64,
    "index_n_heads": 2,
    "index_topk": 16,
    "intermediate_size": 512,
    "moe_intermediate_size": 128,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("extra", "indexed"),
    [
        # the converter ignores index_topk_freq (it copies indexer_types only): n_ctx_train
        # 4,096 < 1,048,576, so every layer keeps an indexer key in llama.cpp
        ({"max_position_embeddings": 4096, "index_topk_freq": 4}, 8),
        # no indexer_types, n_ctx_train >= 1,048,576: GLM_5_2_DEFAULT_INDEXER_TYPES, layers 0, 1,
        # 2 and 6 of the 8
        ({"max_position_embeddings": 1_048_576}, 4),
        # indexer_types copied into the GGUF: its "full" layers
        (
            {
                "max_position_embeddings": 1_048_576,
                "indexer_types": ["full", "shared"] * 3 + ["full", "full"],
            },
            5,
        ),
    ],
)
def test_glm_indexer_layers(tmp_path: Path, extra: dict[str, Any], indexed: int) -> None:
    """Tiny GLM-DSA, f16, ``-c 256``: latent (64 + 32) x 2 = 192 B on 8 layers, key 64 x 2 =
    128 B on the indexed ones."""
    spec = spec_from_config(tmp_path, {**GLM_TINY, **extra})
    layout = llamacpp_layout(spec, tokens=256, seqs=1, ctx_size=256)
    assert layout.total_bytes == (8 * 192 + indexed * 128) * 256


def test_other_indexed_mla_models_still_refused(tmp_path: Path) -> None:
    """Hunyuan v4 (``hy_v4``) is not among the types read here: refused, not a partial sum."""
    raw = {**GLM_TINY, "model_type": "hy_v4", "architectures": ["HYV4ForCausalLM"]}
    spec = spec_from_config(tmp_path, {**raw, "max_position_embeddings": 4096})
    with pytest.raises(LayoutNotApplicable, match="indexer keeps its own key cache"):
        llamacpp_layout(spec, tokens=256, seqs=1, ctx_size=256)
