"""``--speculative-config`` method ``mtp`` in vLLM 0.32: the MTP layers of DeepSeek-V3 / V3.2,
GLM-5, GLM-4.5, MiMo and MiMo-V2-Flash join the target's pool (issue #34).

Two kinds of expected values, neither from kvbudget:

* measured: vLLM 0.32.0's CPU engine (``load_format="dummy"``, ``VLLM_CPU_KVCACHE_SPACE=1``,
  ``scripts/record_vllm_pools.py``'s ``run_case``, 2026-12-03) started the tiny ``deepseek_v3``
  and ``glm4_moe`` configs of ``tests/peer/fixtures/vllm_pools_0.32.0.json`` (each with
  ``num_nextn_predict_layers`` 1) with ``speculative_config={"method": "mtp",
  "num_speculative_tokens": 1}`` and logged ``CPU KV cache size: 103,552 tokens, Maximum
  concurrency for 4,096 tokens per request: 25.28x`` (``num_gpu_blocks`` 6472, block 16: the CPU
  build picked 16 for MLA with the drafter) and ``232,960 tokens ... 56.88x`` (1820 blocks of
  128). Without the drafter the same configs logged 910 and 2048 blocks (the fixture). The tiny
  Qwen2 config of ``TINY_MIMO`` with ``architectures: ["MiMoForCausalLM"]`` (vLLM picks the
  drafter by architecture, ``config/speculative.py`` lines 725-734; its model type was ``qwen2``
  for transformers' sake, ``mimo`` here for kvbudget's) logged "Resolved architecture:
  MiMoMTPModel" and ``232,960 tokens ... 56.88x`` (1820 blocks of 128). The tiny MiMo-V2-Flash
  of ``TINY_MIMO_V2`` (2 full layers of 2 KV heads, 6 sliding of 4, dense MLPs) logged
  ``113,359 tokens ... 27.68x``, ``kv cache group sizes (256, 128, 128, 128, 128)`` with the
  drafter and ``145,888 tokens ... 35.62x``, ``(256, 128, 128, 128)`` without (4096 blocks
  both).
* worked by hand from vLLM 0.32.0's source (``site-packages/vllm``) for the published configs:
  the MTP layers are ``num_nextn_predict_layers`` copies of the target's decoder layer at
  ``num_hidden_layers + k`` (``model_executor/models/deepseek_mtp.py`` lines 147-165;
  ``models/deepseek_v32/nvidia/mtp.py`` lines 171-187; ``glm4_moe_mtp.py`` lines 131-152;
  ``mimo_mtp.py`` lines 91-117), MiMo-V2-Flash's one sliding layer (``mimo_v2_mtp.py`` lines
  81-100, 177). An MLA page is ``block x (kv_lora_rank + qk_rope_head_dim) x 2`` bytes in bf16
  (``v1/kv_cache_interface.py`` ``MLAAttentionSpec``: one head, ``head_size_v`` 0); a DSA layer's
  indexer adds ``block x (128 + 128 / 128 x 4)`` uint8 bytes (``models/deepseek_v32/
  attention.py`` lines 91-98, ``deepseek_v2.py`` lines 659-667), built on an MTP layer whatever
  ``index_topk_freq`` says (``attention.py`` lines 166-190). All-full/MLA models are one
  uniform-type group (``v1/core/kv_cache_utils.py`` lines 2189-2193):
  ``num_blocks = available // sum of pages``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import engine_flag_conflicts, make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB

ROOT = Path(__file__).resolve().parents[3]
CATALOG = ROOT / "src" / "kvbudget" / "spec" / "catalog" / "models"
PEER = json.loads(
    (ROOT / "tests" / "peer" / "fixtures" / "vllm_pools_0.32.0.json").read_text("utf-8")
)
MTP = '{"method": "mtp", "num_speculative_tokens": 1}'
KV_BYTES = 10 * GiB  # 10,737,418,240
MLA_PAGE = 64 * (512 + 64) * 2  # 73,728 B: one MLA layer, block 64, bf16
INDEXER_PAGE = 64 * (128 + 128 // 128 * 4)  # 8,448 B: a DSA layer's indexer keys, block 64


#: the tiny Qwen2 config the CPU engine ran as MiMo (transformers' defaults left out)
TINY_MIMO: dict[str, Any] = {
    "architectures": ["MiMoForCausalLM"],
    "model_type": "mimo",
    "vocab_size": 1024,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 28,
    "torch_dtype": "bfloat16",
    "num_nextn_predict_layers": 1,
}


#: a tiny MiMo-V2-Flash in the published config's format (its vLLM fields), dense MLPs
TINY_MIMO_V2: dict[str, Any] = {
    "architectures": ["MiMoV2FlashForCausalLM"],
    "model_type": "mimo_v2_flash",
    "num_hidden_layers": 8,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "v_head_dim": 64,
    "intermediate_size": 512,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rope_theta": 5000000,
    "swa_rope_theta": 10000,
    "partial_rotary_factor": 0.334,
    "sliding_window": 128,
    "sliding_window_size": 128,
    "attention_chunk_size": 128,
    "swa_num_attention_heads": 4,
    "swa_num_key_value_heads": 4,
    "swa_head_dim": 64,
    "swa_v_head_dim": 64,
    "hybrid_layer_pattern": [0, 1, 1, 1, 1, 0, 1, 1],
    "moe_layer_freq": [0] * 8,
    "moe_intermediate_size": 128,
    "n_routed_experts": 4,
    "n_shared_experts": None,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "scoring_func": "sigmoid",
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "routed_scaling_factor": None,
    "hidden_act": "silu",
    "layernorm_epsilon": 1e-05,
    "attention_dropout": 0.0,
    "attention_bias": False,
    "attention_value_scale": 0.707,
    "add_swa_attention_sink_bias": False,
    "add_full_attention_sink_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _plan_path(path: Path, **extra: Any) -> Any:
    resolved = resolve_model(str(path))
    assert resolved.spec is not None, resolved.reason
    request = PlanRequest(model=str(path), engine="vllm", engine_version="0.32.0", **extra)
    return make_plan(request, resolved.spec)


@pytest.mark.parametrize(
    ("case", "block", "blocks", "tokens", "concurrency"),
    [
        ("deepseek_v3", 16, 6472, 103_552, 25.28),  # 9 MLA pages of 16 x 576 x 2 = 18,432 B
        ("glm4_moe", 128, 1820, 232_960, 56.88),  # 9 pages of 128 x 2 x (64 + 64) x 2 = 65,536 B
        ("mimo", 128, 1820, 232_960, 56.88),  # the same 9 pages (head_dim 256 / 4 heads = 64)
    ],
)
def test_tiny_mtp_pools_match_the_vllm_cpu_engine(
    case: str, block: int, blocks: int, tokens: int, concurrency: float, tmp_path: Path
) -> None:
    config = TINY_MIMO if case == "mimo" else PEER["cases"][case]["config"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    result = _plan_path(
        path,
        gpu_memory_bytes=64 * GiB,
        kv_cache_memory_bytes=GiB,
        weights_bytes=0,
        max_model_len=4096,
        max_num_batched_tokens=4096,
        max_num_seqs=256,
        block_size=block,
        speculative_config=MTP,
    )
    assert GiB // (9 * (18_432 if case == "deepseek_v3" else 65_536)) == blocks
    assert (result.num_blocks, result.kv_cache_tokens) == (blocks, tokens)
    assert round(result.max_concurrency, 2) == concurrency
    assert [g.num_layers for g in result.groups] == [9]  # 8 target layers + the MTP layer


@pytest.mark.parametrize(
    ("spec", "tokens", "concurrency", "group_blocks"),
    [
        (MTP, 113_359, 27.68, [256, 128, 128, 128, 128]),
        (None, 145_888, 35.62, [256, 128, 128, 128]),
    ],
)
def test_tiny_mimo_v2_flash_mtp_pool_matches_the_vllm_cpu_engine(
    spec: str | None, tokens: int, concurrency: float, group_blocks: list[int], tmp_path: Path
) -> None:
    """The drafter's sliding layer is a seventh sliding layer: one more group of the packed
    layout, so fewer tokens from the same 4096 blocks (logged, module doc)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_MIMO_V2), encoding="utf-8")
    result = _plan_path(
        path,
        gpu_memory_bytes=64 * GiB,
        kv_cache_memory_bytes=GiB,
        weights_bytes=0,
        max_model_len=4096,
        max_num_batched_tokens=4096,
        max_num_seqs=256,
        block_size=128,
        speculative_config=spec,
    )
    assert (result.num_blocks, result.kv_cache_tokens) == (4096, tokens)
    assert round(result.max_concurrency, 2) == concurrency
    assert [g.block_size for g in result.groups] == group_blocks


def _write(tmp_path: Path, name: str, **config: Any) -> Path:
    raw = {**json.loads((CATALOG / f"{name}.json").read_text("utf-8")), **config}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def _catalog_plan(name: str, tmp_path: Path, *, block_size: int | None = 64, **config: Any) -> Any:
    return _plan_path(
        _write(tmp_path, name, **config),
        gpu="H200",
        tp=8,
        kv_cache_memory_bytes=KV_BYTES,
        max_model_len=8192,
        block_size=block_size,
        speculative_config=MTP,
    )


def test_deepseek_v3_mtp_layer_is_one_more_mla_page_per_block(tmp_path: Path) -> None:
    """61 target layers + 1 MTP layer (layer 61): 62 x 73,728 = 4,571,136 B per block;
    10,737,418,240 // 4,571,136 = 2,348 blocks (without the drafter: 61 pages, 2,387)."""
    result = _catalog_plan("deepseek-ai--DeepSeek-V3", tmp_path)
    assert 62 * MLA_PAGE == 4_571_136
    assert result.num_blocks == KV_BYTES // 4_571_136 == 2348
    assert result.kv_cache_tokens == 2348 * 64 == 150_272
    assert result.max_concurrency == pytest.approx(2348 / 128)
    (group,) = result.groups
    assert group.num_layers == 62 and group.layer_indices[61] == 61
    assert any("MTP layer(s)" in note for note in result.notes)


def test_deepseek_v32_mtp_layer_carries_its_indexer(tmp_path: Path) -> None:
    """Every V3.2 layer (index_topk_freq 1) and the MTP layer: 73,728 + 8,448 = 82,176 B;
    62 x 82,176 = 5,094,912; 10,737,418,240 // 5,094,912 = 2,107 blocks."""
    result = _catalog_plan("deepseek-ai--DeepSeek-V3.2", tmp_path)
    assert 62 * (MLA_PAGE + INDEXER_PAGE) == 5_094_912
    assert result.num_blocks == KV_BYTES // 5_094_912 == 2107
    assert result.kv_cache_tokens == 2107 * 64


def test_glm5_mtp_layer_builds_the_indexer_the_pattern_would_skip(tmp_path: Path) -> None:
    """GLM-5.2 cut to 77 target layers (``indexer_types`` cut with it): the target keeps an
    indexer where ``max(i - 3 + 1, 0) % 4 == 0`` (offset 3, freq 4: layers 0, 1, 2, 6, ..., 74,
    21 of them); the MTP layer 77 would skip (75 % 4 = 3) but ``is_mtp_layer`` builds it
    (``attention.py`` lines 179-190). 77 x 73,728 + 21 x 8,448 + (73,728 + 8,448) = 5,936,640 B;
    10,737,418,240 // 5,936,640 = 1,808 blocks (1,811 without the MTP indexer: 5,928,192 B)."""
    glm = json.loads((CATALOG / "zai-org--GLM-5.2.json").read_text("utf-8"))
    result = _catalog_plan(
        "zai-org--GLM-5.2",
        tmp_path,
        num_hidden_layers=77,
        indexer_types=glm["indexer_types"][:77],
    )
    kept = [i for i in range(77) if max(i - 3 + 1, 0) % 4 == 0]
    assert len(kept) == 21 and (75 % 4) != 0
    block_bytes = 77 * MLA_PAGE + 21 * INDEXER_PAGE + MLA_PAGE + INDEXER_PAGE
    assert block_bytes == 5_936_640
    assert result.num_blocks == KV_BYTES // block_bytes == 1808
    assert KV_BYTES // (block_bytes - INDEXER_PAGE) == 1811


def test_glm52_as_published(tmp_path: Path) -> None:
    """78 target layers with the same 21 indexers (layer 77: max(75, 0) % 4 = 3, skipped) and
    the MTP layer 78 with one: 79 x 73,728 + 22 x 8,448 = 6,010,368 B;
    10,737,418,240 // 6,010,368 = 1,786 blocks."""
    result = _catalog_plan("zai-org--GLM-5.2", tmp_path)
    assert 79 * MLA_PAGE + 22 * INDEXER_PAGE == 6_010_368
    assert result.num_blocks == KV_BYTES // 6_010_368 == 1786


def test_mimo_v2_flash_mtp_sliding_layer_fills_a_padding_slot(tmp_path: Path) -> None:
    """TP 8: every page is 16 x 1 head x (192 + 128) x 2 = 10,240 B (full: 4 KV heads / 8 -> 1;
    sliding and the MTP layer: swa_num_key_value_heads 8 / 8 -> 1), so vLLM takes
    ``_get_kv_cache_groups_uniform_page_size`` (``kv_cache_utils.py`` lines 1362-1505): buckets
    9 full and 39 + 1 = 40 sliding; 40 >= 1.5 x 9, so group size 9; the sliding bucket splits
    into cdiv(40, 9) = 5 strided groups (cdiv(39, 9) = 5 without the drafter). Blocks:
    10,737,418,240 // (10,240 x 9) = 116,508 either way: the MTP layer takes a padding slot.
    The config's fp8 quantization_config is dropped: vLLM 0.32 cannot load the fp8 checkpoint at
    TP 8 (its k_proj block scales, test_plan_mimo_v2_vllm.py); the pages do not depend on it."""
    result = _catalog_plan(
        "XiaomiMiMo--MiMo-V2-Flash", tmp_path, block_size=None, quantization_config=None
    )
    assert result.num_blocks == KV_BYTES // (10_240 * 9) == 116_508
    kinds = [(g.kind, g.num_layers) for g in result.groups]
    assert kinds == [("full", 9)] + [("sliding", 8)] * 5
    assert sum(g.num_layers for g in result.groups) == 49
    assert any(48 in g.layer_indices for g in result.groups if g.kind == "sliding")


def test_mimo_mtp_repeats_the_full_attention_layer(tmp_path: Path) -> None:
    """MiMo-7B's attention (36 layers, 8 KV heads x 128, Qwen2, no sliding window): block 16,
    TP 1, 16 x 8 x 128 x 2 x 2 = 65,536 B per layer; 37 x 65,536 = 2,424,832 B;
    10,737,418,240 // 2,424,832 = 4,428 blocks."""
    raw = {
        "architectures": ["MiMoForCausalLM"],
        "model_type": "mimo",
        "num_hidden_layers": 36,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 11008,
        "vocab_size": 151680,
        "max_position_embeddings": 32768,
        "sliding_window": 32768,
        "max_window_layers": 32,
        "use_sliding_window": False,
        "num_nextn_predict_layers": 1,
        "torch_dtype": "bfloat16",
    }  # the published MiMo-7B-Base config's attention fields
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    result = _plan_path(
        path,
        kv_cache_memory_bytes=KV_BYTES,
        max_model_len=8192,
        block_size=16,
        speculative_config=MTP,
    )
    assert 37 * 65_536 == 2_424_832
    assert result.num_blocks == KV_BYTES // 2_424_832 == 4428


def test_a_drafter_kv_cache_dtype_of_its_own_is_refused(tmp_path: Path) -> None:
    """``llm_base_proposer.py`` lines 1293-1300 give the drafter its own cache dtype."""
    with pytest.raises(ConfigError, match=r"^speculative_config: kv_cache_dtype 'fp8'"):
        _plan_path(
            _write(tmp_path, "deepseek-ai--DeepSeek-V3"),
            kv_cache_memory_bytes=KV_BYTES,
            max_model_len=8192,
            speculative_config='{"method": "mtp", "kv_cache_dtype": "fp8"}',
        )


def test_a_checkpoint_without_mtp_layers_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "deepseek-ai--DeepSeek-V3", num_nextn_predict_layers=0)
    with pytest.raises(ConfigError, match=r"needs num_nextn_predict_layers >= 1"):
        _plan_path(path, kv_cache_memory_bytes=KV_BYTES, max_model_len=8192, speculative_config=MTP)


def test_speculative_config_with_sglang_is_priced_not_ignored() -> None:
    """With ``--engine sglang`` the flag is no ignored knob any more: SGLang's NEXTN drafter is
    priced by SGLang's own rules (0.5.4, kvbudget's default SGLang version, and 0.5.23; worked by
    hand in tests/unit/plan/test_plan_sglang_speculative.py)."""
    request = PlanRequest(
        model="deepseek-ai/DeepSeek-V3",
        engine="sglang",
        gpu="H200",
        tp=8,
        max_model_len=8192,
        speculative_config=MTP,
    )
    assert engine_flag_conflicts(request) == []
    result = make_plan(request)
    assert any("SGLang 0.5.4's NEXTN" in note for note in result.notes)


#: vLLM-CPU 0.32.0's ``SpeculativeConfig(method="mtp")`` (``scripts/check_vllm_mtp_tokens.py``,
#: run 2026-12-03) raised ``ValueError``: this sentence (``config/speculative.py`` lines 1819-1824)
VLLM_NO_TOKENS = (
    "num_speculative_tokens must be provided with speculative model unless the draft model "
    "config contains an n_predict parameter."
)


@pytest.mark.parametrize(
    ("name", "model_type"),
    [
        ("deepseek-ai--DeepSeek-V3", "deepseek_v3"),
        ("zai-org--GLM-5", "glm_moe_dsa"),
        ("XiaomiMiMo--MiMo-V2-Flash", "mimo_v2_flash"),
        ("MiniMaxAI--MiniMax-M3", "minimax_m3"),
        ("deepseek-ai--DeepSeek-V4-Flash", "deepseek_v4"),
    ],
)
def test_num_speculative_tokens_is_required_without_a_model(
    tmp_path: Path, name: str, model_type: str
) -> None:
    """Without a ``model`` vLLM 0.32 builds no draft config before ``_verify_args`` (the target's
    checkpoint becomes the draft model only when ``num_speculative_tokens`` is given, lines
    1147-1162), so no ``n_predict`` defaults it: vLLM raises, whatever the drafter."""
    with pytest.raises(ConfigError) as info:
        _plan_path(
            _write(tmp_path, name),
            gpu="H200",
            tp=8,
            kv_cache_memory_bytes=KV_BYTES,
            max_model_len=8192,
            speculative_config='{"method": "mtp"}',
        )
    message = str(info.value)
    assert message.startswith(f"speculative_config: method mtp for {model_type} without ")
    assert f"'{VLLM_NO_TOKENS}'" in message and "1819-1824" in message and "\n" not in message


def test_a_named_model_defaults_the_tokens_to_n_predict(tmp_path: Path) -> None:
    """With ``model`` (the target's checkpoint) the draft config is built and its ``n_predict``
    (``num_nextn_predict_layers``, ``hf_config_override`` lines 686-695) is the default
    (lines 1489-1492): DeepSeek-V3's one MTP layer, the same 62 pages x 73,728 B per block as
    ``test_deepseek_v3_mtp_layer_is_one_more_mla_page_per_block``: 2,348 blocks."""
    result = _plan_path(
        _write(tmp_path, "deepseek-ai--DeepSeek-V3"),
        gpu="H200",
        tp=8,
        kv_cache_memory_bytes=KV_BYTES,
        max_model_len=8192,
        block_size=64,
        speculative_config='{"method": "mtp", "model": "deepseek-ai/DeepSeek-V3"}',
    )
    assert result.num_blocks == KV_BYTES // (62 * MLA_PAGE) == 2348


@pytest.mark.parametrize(
    ("config", "words"),
    [
        # config/speculative.py lines 1493-1501: 3 tokens over MiniMax-M3's 7 modules' n_predict
        # would pass; 9 is above 7 and no multiple of it
        ('{"method": "mtp", "num_speculative_tokens": 9}', "'num_speculative_tokens:9 must be "),
        # line 393's pydantic Field(gt=0) (scripts/check_vllm_mtp_tokens.py)
        ('{"method": "mtp", "num_speculative_tokens": 0}', "'Input should be greater than 0'"),
    ],
)
def test_tokens_vllm_refuses_are_refused(tmp_path: Path, config: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        _plan_path(
            _write(tmp_path, "MiniMaxAI--MiniMax-M3"),
            gpu="H200",
            tp=8,
            kv_cache_memory_bytes=KV_BYTES,
            max_model_len=8192,
            speculative_config=config,
        )
    message = str(info.value)
    assert message.startswith("speculative_config: ") and words in message
