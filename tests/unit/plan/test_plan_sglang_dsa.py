"""SGLang's pool for DSA models (DeepSeek-V3.2, GLM-5 ``glm_moe_dsa``): MLA latent + indexer keys.

Every expected number is worked by hand below from SGLang's own source, the sglang 0.5.23 wheel
from PyPI (``sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl``, paths under ``sglang/srt/``):

* ``mem_cache/memory_pool.py`` lines 5279-5282, ``class DSATokenToKVPool(MLATokenToKVPool)``
  (``NSATokenToKVPool`` in earlier releases, same index buffer): ``quant_block_size = 128``,
  ``index_k_with_scale_buffer_dtype = torch.uint8``, ``rope_storage_dtype = torch.bfloat16``;
  line 5346 ``assert index_head_dim == 128``; lines 5370-5374: 64-token physical pages on CUDA.
* ``mem_cache/index_key_cache.py`` lines 40-47: the index buffer of one layer is
  ``page_size * (index_head_dim + index_head_dim // quant_block_size * 4)`` uint8 per page:
  128 fp8 key bytes + one float32 scale = 132 B per token.
* ``model_executor/pool_configurator.py`` ``_compute_cell_size`` lines 375-409: ``cell_size =
  calculate_mla_kv_cache_dim(...) * num_layers * kv_size`` plus, for ``is_deepseek_dsa`` models,
  ``_compute_dsa_indexer_cell_size`` (lines 560-635): ``(128 + 128 // 128 * 4) * 1 byte`` times
  the layers that do not ``dsa_layer_skips_topk`` (``configs/model_config.py`` lines 488-496:
  ``indexer_types[layer_id] == "shared"`` skips; with no ``indexer_types`` and the default
  ``index_topk_freq`` 1 none skips).
* ``mem_cache/kv_cache_configurator.py`` ``calculate_mla_kv_cache_dim`` lines 3412-3475: fp8_e4m3
  with Hopper's default ``flashmla_kv`` backends ``512 + 512 // 128 * 4 + 64 * 2 = 656`` one-byte
  units; with Blackwell's default ``trtllm`` (``arg_groups/overrides.py`` lines 714-720: fp8 KV
  and compute capability 10+) the raw row, ``uses_trtllm_kv_layout`` (lines 3429-3440): ``512 +
  64 = 576`` one-byte units; bfloat16 ``512 + 64 = 576`` elements x 2 B = 1,152 B.
* ``arg_groups/overrides.py`` lines 490-546 (``_dsa_kv_cache_dtype_default``): ``auto`` becomes
  ``fp8_e4m3`` when ``major >= 10`` (Blackwell) and the model has no learnable sinks, else
  ``bfloat16``; only ``bfloat16`` / ``fp8_e4m3`` pass the assert.
* ``arg_groups/model_overrides/deepseek_v2.py`` lines 162-173: ``page_size = 64 * index_kpool``
  (``index_kpool`` default 1, ``configs/model_config.py`` line 530), whatever ``--page-size`` says.
* the token count: ``max_total_num_tokens = rest // cell_size`` floored to the page (reference
  §7, unchanged by DSA).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.capacity.kvbytes import calc_model
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.units import GiB
from tests.unit.config_files import write_config
from tests.unit.spec.test_new_architectures import HY_V4

KV_BYTES = 10 * GiB  # 10,737,418,240
INDEXER = 128 + 128 // 128 * 4  # 132 B per token per top-k layer
LATENT_BF16 = (512 + 64) * 2  # 1,152
LATENT_FP8 = 512 + 512 // 128 * 4 + 64 * 2  # 656
# DeepSeek-V3.2: 61 layers, all with an indexer
V32_BF16 = 61 * LATENT_BF16 + 61 * INDEXER  # 70,272 + 8,052 = 78,324
V32_FP8 = 61 * LATENT_FP8 + 61 * INDEXER  # 40,016 + 8,052 = 48,068
LATENT_FP8_RAW = 512 + 64  # 576: trtllm's raw fp8 row (Blackwell's default DSA backends)
V32_FP8_RAW = 61 * LATENT_FP8_RAW + 61 * INDEXER  # 35,136 + 8,052 = 43,188
# GLM-5.2: 78 layers, indexer_types "full" on layers 0, 1, 2, 6, 10, ..., 74: 3 + 18 = 21
GLM52_BF16 = 78 * LATENT_BF16 + 21 * INDEXER  # 89,856 + 2,772 = 92,628
GLM5_BF16 = 78 * LATENT_BF16 + 78 * INDEXER  # 89,856 + 10,296 = 100,152


def _plan(model_id: str, gpu: str = "H200", **extra: object) -> PlanResult:
    request = PlanRequest(
        model=model_id,
        engine="sglang",
        gpu=gpu,
        tp=8,
        kv_cache_memory_bytes=KV_BYTES,
        max_model_len=8192,
        **extra,
    )
    return make_plan(request)


@pytest.mark.parametrize(
    ("model_id", "cell"),
    [
        ("deepseek-ai/DeepSeek-V3.2", V32_BF16),
        ("zai-org/GLM-5", GLM5_BF16),
        ("zai-org/GLM-5.2", GLM52_BF16),
    ],
)
def test_hopper_cell_is_bf16_latent_plus_indexer(model_id: str, cell: int) -> None:
    plan = _plan(model_id)
    assert plan.sglang is not None
    assert plan.kv_dtype == "bfloat16"
    assert plan.sglang.cell_size_bytes == cell
    assert plan.sglang.page_size == 64
    assert plan.sglang.max_total_num_tokens == KV_BYTES // cell // 64 * 64


def test_deepseek_v32_token_count_by_hand() -> None:
    # 10,737,418,240 // 78,324 = 137,089, floored to the 64-token page: 2,142 pages = 137,088
    plan = _plan("deepseek-ai/DeepSeek-V3.2")
    assert plan.sglang is not None
    assert plan.sglang.max_total_num_tokens == 137_088
    assert plan.num_blocks == 2_142


def test_blackwell_default_is_fp8_with_the_raw_trtllm_row() -> None:
    # 10,737,418,240 // 43,188 = 248,620 -> floored to 64: 3,884 pages = 248,576 tokens
    plan = _plan("deepseek-ai/DeepSeek-V3.2", gpu="B200")
    assert plan.sglang is not None
    assert plan.kv_dtype == "fp8_e4m3"
    assert plan.sglang.cell_size_bytes == V32_FP8_RAW == 43_188
    assert plan.sglang.max_total_num_tokens == 248_576


def test_glm5_on_compute_capability_12_keeps_the_scaled_row() -> None:
    # overrides.py lines 636-642, 665-675: GLM fp8 on SM120 -> flashinfer_sparse_mla, not trtllm:
    # the scaled 656-B row; 78 x (656 + 132) = 61,464
    plan = _plan("zai-org/GLM-5", gpu="RTX-PRO-6000")
    assert plan.kv_dtype == "fp8_e4m3"
    assert plan.sglang is not None
    assert plan.sglang.cell_size_bytes == 78 * (LATENT_FP8 + INDEXER) == 61_464


@pytest.mark.parametrize(
    ("gpu", "kv_dtype"),
    [
        ("B300", "fp8_e4m3"),
        ("RTX-PRO-6000", "fp8_e4m3"),
        ("H200", "bfloat16"),
        ("L40S", "bfloat16"),
    ],
)
def test_the_default_follows_the_compute_capability_major(gpu: str, kv_dtype: str) -> None:
    # major >= 10: B300 is 10.3, RTX PRO 6000 Blackwell 12.0 (aiconfigurator-core 0.12.0
    # systems/*.yaml sm_version 103 and 120); H200 9.0, L40S 8.9
    assert _plan("deepseek-ai/DeepSeek-V3.2", gpu=gpu).kv_dtype == kv_dtype


def test_explicit_fp8_on_hopper_and_page_size_override() -> None:
    plan = _plan("deepseek-ai/DeepSeek-V3.2", kv_dtype="fp8_e4m3", page_size=1)
    assert plan.sglang is not None
    assert plan.sglang.cell_size_bytes == V32_FP8
    assert plan.sglang.page_size == 64
    assert any("page_size 64" in note for note in plan.notes)


def test_float16_refused_in_sglangs_words() -> None:
    with pytest.raises(ConfigError, match="bf16/bfloat16 or fp8_e4m3"):
        _plan("deepseek-ai/DeepSeek-V3.2", kv_dtype="float16")


def test_calc_sglang_layout_rounds_to_pages() -> None:
    # 100 tokens take two 64-token pages: 128 cells x 78,324 B = 10,025,472 B
    result = calc_model("deepseek-ai/DeepSeek-V3.2", tokens=100, engine="sglang")
    assert result.bytes_per_token == V32_BF16
    assert result.total_bytes == 128 * V32_BF16 == 10_025_472
    fp8 = calc_model("deepseek-ai/DeepSeek-V3.2", tokens=128, engine="sglang", kv_dtype="fp8_e4m3")
    assert fp8.total_bytes == 128 * V32_FP8


def test_pipeline_stages_take_the_larger_stage() -> None:
    # 61 layers over 2 stages: the split every SGLang plan uses (get_pp_indices) gives [31, 30]; MIN over
    # ranks, so the larger cell (31 x 1,284 = 39,804 B) sets it; TP does not split the latent
    plan = _plan("deepseek-ai/DeepSeek-V3.2", pp=2)
    assert plan.sglang is not None
    assert plan.sglang.cell_size_bytes == 31 * (LATENT_BF16 + INDEXER) == 39_804


def test_learnable_sinks_refuse_fp8_in_sglangs_words(tmp_path: Path) -> None:
    # overrides.py lines 526-531: hy_v4's learnable sinks (configs/hy_v4.py line 44) take bf16 only
    path = write_config(tmp_path, HY_V4)
    with pytest.raises(ConfigError, match="Learnable DSA attention sinks require a bfloat16"):
        _plan(path, gpu="B200", kv_dtype="fp8_e4m3")
    assert _plan(path, gpu="B200").kv_dtype == "bfloat16"
