"""Issue #34: the three wrong answers labelled exact, the indexer key caches, transformers'
config normalisation, and the rule that a structural field kvbudget did not read refuses.

Expected bytes are transformers 5.24's own cache on the meta device for the published configs
bundled in the catalog (``tests/peer/test_calc_hf_peer.py`` re-measures them), each also worked
by hand here from the config's fields; hf layout, bfloat16, 1 sequence of 100 tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.hf import hf_layout
from kvbudget.capacity.layouts.llamacpp import llamacpp_layout
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.layouts.vllm import vllm_layer_specs, vllm_layout
from kvbudget.errors import SpecError
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model

T = 100


def _spec(model_id: str, **overrides: Any) -> ModelSpec:
    resolved = resolve_model(model_id, overrides=overrides or None)
    assert resolved.status == "resolved", resolved.reason
    assert resolved.spec is not None
    return resolved.spec


def _hf(model_id: str) -> int:
    return hf_layout(_spec(model_id), tokens=T, seqs=1, kv_dtype="bfloat16").total_bytes


def _mamba2_hf(heads: int, head_dim: int, groups: int, state: int, kernel: int) -> int:
    """transformers' LinearAttentionLayer: conv [channels, kernel] bf16 + ssm fp32."""
    channels = heads * head_dim + 2 * groups * state
    return channels * kernel * 2 + heads * head_dim * state * 4


def test_nemotron_h_hybrid_override_pattern() -> None:
    """'MEMEM*E...': 23 Mamba-2 + 23 MoE + 6 attention layers (was: 52 attention, 5,324,800)."""
    pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
    attention = pattern.count("*") * 2 * 128 * 2 * 2 * T  # kv heads 2, head_dim 128, K+V, bf16
    mamba = pattern.count("M") * _mamba2_hf(64, 64, 8, 128, 4)
    expected = attention + mamba
    assert expected == 49_979_392  # transformers' cache, as the issue measured
    assert _hf("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16") == expected


def test_nemotron_h_pattern_with_mlp_layers() -> None:
    raw = json.loads((MODELS_DIR / "nvidia--Nemotron-H-56B-Base-8K.json").read_text("utf-8"))
    pattern = raw["hybrid_override_pattern"]
    kv, head_dim = raw["num_key_value_heads"], raw["hidden_size"] // raw["num_attention_heads"]
    mamba = _mamba2_hf(raw["mamba_num_heads"], raw["mamba_head_dim"], raw["n_groups"], 256, 4)
    assert raw["ssm_state_size"] == 256 and raw["conv_kernel"] == 4
    expected = pattern.count("*") * kv * head_dim * 4 * T + pattern.count("M") * mamba
    assert _hf("nvidia/Nemotron-H-56B-Base-8K") == expected == 918_913_024


def test_nemotron_layers_block_type_in_legacy_kinds() -> None:
    """Nemotron-3-Ultra lists 'mamba'/'attention', which transformers renames (was refused)."""
    raw = json.loads(
        (MODELS_DIR / "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.json").read_text("utf-8")
    )
    kinds = raw["layers_block_type"]
    mamba = _mamba2_hf(
        raw["mamba_num_heads"], raw["mamba_head_dim"], raw["n_groups"], raw["ssm_state_size"], 4
    )
    attention = raw["num_key_value_heads"] * raw["head_dim"] * 4 * T
    expected = kinds.count("attention") * attention + kinds.count("mamba") * mamba
    assert _hf("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16") == expected == 410_959_872


def test_gemma4_full_layers_use_global_heads() -> None:
    """25 sliding layers: 8 heads x 256; 5 full layers: 2 global heads x 512 (was 24,576,000)."""
    sliding = 25 * 8 * 256 * 2 * 2 * T
    full = 5 * 2 * 512 * 2 * 2 * T
    assert _hf("google/gemma-4-26B-A4B") == sliding + full == 22_528_000


def test_gemma4_without_k_eq_v_keeps_kv_heads() -> None:
    """attention_k_eq_v false: the full layers keep num_key_value_heads (Gemma4TextConfig)."""
    spec = _spec("google/gemma-4-26B-A4B", attention_k_eq_v=False)
    got = hf_layout(spec, tokens=T, seqs=1, kv_dtype="bfloat16").total_bytes
    assert got == 25 * 8 * 256 * 4 * T + 5 * 8 * 512 * 4 * T


def test_minimax_m3_index_key_on_sparse_layers() -> None:
    """57 sparse layers add one 128-wide indexer key per token (was 14,592 B/token short)."""
    attention = 60 * 4 * 128 * 2 * 2 * T
    index = 57 * 128 * 2 * T
    assert index // T == 14_592
    assert _hf("MiniMaxAI/MiniMax-M3") == attention + index == 13_747_200


@pytest.mark.parametrize(
    ("model_id", "layers", "indexed"),
    [("deepseek-ai/DeepSeek-V3.2", 61, 61), ("zai-org/GLM-5", 78, 78), ("zai-org/GLM-5.2", 78, 21)],
)
def test_dsa_latent_plus_indexer_keys(model_id: str, layers: int, indexed: int) -> None:
    """MLA latent (512 + 64) on every layer, the indexer key (128) on layers that run one."""
    expected = layers * (512 + 64) * 2 * T + indexed * 128 * 2 * T
    assert _hf(model_id) == expected


@pytest.mark.parametrize(
    ("model_id", "layers", "indexed"),
    [("deepseek-ai/DeepSeek-V3.2", 61, 61), ("zai-org/GLM-5", 78, 78), ("zai-org/GLM-5.2", 78, 21)],
)
def test_llamacpp_keeps_the_indexer_key(model_id: str, layers: int, indexed: int) -> None:
    """llama.cpp 0c1e570's ``llama_kv_cache_dsa`` keeps the latent and the indexer key, K only,
    f16 (tests/unit/plan/test_llamacpp_dsa.py cites the lines): the same bytes per cell as
    transformers' cache in bf16, over ``-c 256`` cells. vLLM models DSA's and MiniMax-M3's
    indexers (tests/unit/plan/test_plan_dsa_indexer.py, test_plan_minimax_m3_vllm.py), SGLang
    too (test_plan_sglang_dsa.py, test_plan_minimax_m3_sglang.py)."""
    result = llamacpp_layout(_spec(model_id), tokens=256, seqs=1, ctx_size=256)
    assert result.total_bytes == (layers * (512 + 64) + indexed * 128) * 2 * 256


def test_sglang_models_minimax_m3_indexer() -> None:
    """SGLang's MiniMaxSparseKVPool (sglang 0.5.23 srt/model_executor/pool_configurator.py lines
    410-490): 60 layers' K/V (4 heads x (128 + 128) x 2 B) plus 57 K-only bf16 index keys
    (128 x 2 B), T rounded up to 128-token pages (tests/unit/plan/test_plan_minimax_m3_sglang.py)."""
    result = sglang_layout(_spec("MiniMaxAI/MiniMax-M3"), tokens=T, seqs=1)
    pages = -(-T // 128) * 128
    assert result.total_bytes == (60 * 4 * 256 * 2 + 57 * 128 * 2) * pages


def test_sglang_dsa_latent_plus_indexer_keys() -> None:
    """SGLang's DSATokenToKVPool (sglang 0.5.23 srt/mem_cache/memory_pool.py line 5279) on a
    Hopper-default bfloat16 pool: (512 + 64) x 2 B latent + (128 + 4) B fp8 index key with its
    float32 scale (srt/model_executor/pool_configurator.py lines 567-574), 61 layers; T rounded
    up to 64-token pages."""
    result = sglang_layout(_spec("deepseek-ai/DeepSeek-V3.2"), tokens=T, seqs=1)
    pages = -(-T // 64) * 64
    assert result.total_bytes == 61 * ((512 + 64) * 2 + 128 + 4) * pages


#: a tiny Hunyuan v4 (DSA with learnable sinks): 6 layers, indexer on the "full" layers 0, 1, 5
HY_V4: dict[str, Any] = {
    "model_type": "hy_v4",
    "architectures": ["HYV4ForCausalLM"],
    "num_hidden_layers": 6,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": 64,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 64,
    "v_head_dim": 64,
    "index_head_dim": 128,
    "index_n_heads": 4,
    "index_topk": 64,
    "vocab_size": 1024,
    "intermediate_size": 512,
    "moe_intermediate_size": 128,
    "torch_dtype": "bfloat16",
}


def _write(tmp_path: Path, raw: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return str(path)


def test_granite_h_legacy_layer_kinds(tmp_path: Path) -> None:
    """Granite-4.0-H checkpoints list 'mamba'/'attention' (transformers renames them on load)."""
    raw = {
        "model_type": "granitemoehybrid",
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "mamba_n_heads": 8,
        "mamba_d_head": 64,
        "mamba_d_state": 128,
        "mamba_n_groups": 1,
        "mamba_expand": 2,
        "mamba_d_conv": 4,
        "layer_types": ["mamba", "mamba", "attention", "mamba"],
        "torch_dtype": "bfloat16",
    }
    spec = resolve_model(_write(tmp_path, raw)).spec
    assert spec is not None
    got = hf_layout(spec, tokens=T, seqs=1, kv_dtype="bfloat16").total_bytes
    conv = (2 * 256 + 2 * 1 * 128) * 4 * 2
    ssm = 8 * 64 * 128 * 4
    assert got == 3 * (conv + ssm) + 2 * 64 * 4 * T


def test_unread_structural_field_refuses(tmp_path: Path) -> None:
    """A field that changes the structure and that the rules do not read: not_applicable."""
    raw = json.loads((MODELS_DIR / "meta-llama--Llama-3.1-8B.json").read_text("utf-8"))
    raw["global_head_dim"] = 512
    resolved = resolve_model(_write(tmp_path, raw))
    assert resolved.status == "not_applicable"
    assert resolved.missing == ("global_head_dim",)
    assert "global_head_dim=512" in resolved.reason


def test_indexed_layer_without_a_rule_refuses(tmp_path: Path) -> None:
    raw = json.loads((MODELS_DIR / "meta-llama--Llama-3.1-8B.json").read_text("utf-8"))
    raw["model_type"] = "granite"  # a trait-table row with no indexer rule
    raw["layer_types"] = ["deepseek_sparse_attention"] * raw["num_hidden_layers"]
    resolved = resolve_model(_write(tmp_path, raw))
    assert resolved.status == "not_applicable"
    assert "indexer" in resolved.reason


def test_glm4_moe_head_dim_derived_as_transformers_does(tmp_path: Path) -> None:
    """transformers' default Glm4MoeConfig has no head_dim and 4096 / 96 heads: the attention
    uses hidden_size // num_attention_heads = 42 (modeling_glm4_moe.py Glm4MoeAttention; the
    same config measured on the meta device: 268,800 B). It was refused."""
    raw = {
        "model_type": "glm4_moe",
        "num_hidden_layers": 2,
        "hidden_size": 4096,
        "num_attention_heads": 96,
        "num_key_value_heads": 8,
        "torch_dtype": "bfloat16",
    }
    spec = resolve_model(_write(tmp_path, raw)).spec
    assert spec is not None
    got = hf_layout(spec, tokens=T, seqs=1, kv_dtype="bfloat16").total_bytes
    assert got == 2 * 8 * (4096 // 96) * 2 * 2 * T == 268_800


def test_nemotron_nas_no_op_layers_keep_no_kv() -> None:
    """Llama-3.3-Nemotron-Super-49B: 31 of 80 block configs have attention no_op (vLLM 0.32
    nemotron_nas.py DeciLMDecoderLayer builds no attention there); the other 49 have
    64 // n_heads_in_group 8 = 8 KV heads of 8192 // 64 = 128. It was read as 80 full layers
    (262,144,000 B at 100 tokens). vLLM layout, bf16, block 16: 7 blocks for 100 tokens."""
    raw = json.loads(
        (MODELS_DIR / "nvidia--Llama-3_3-Nemotron-Super-49B-v1.json").read_text("utf-8")
    )
    with_attention = sum(1 for b in raw["block_configs"] if not b["attention"]["no_op"])
    assert with_attention == 49
    spec = _spec("nvidia/Llama-3_3-Nemotron-Super-49B-v1")
    assert spec.rules_verified is False  # no transformers class: a structural reference
    per_token = with_attention * 8 * 128 * 2 * 2
    got = vllm_layout(spec, tokens=T, seqs=1, kv_dtype="bfloat16")
    assert got.bytes_per_token == per_token == 200_704
    assert got.total_bytes == 7 * 16 * per_token


def test_nemotron_nas_unmodelled_attention_variant_refuses(tmp_path: Path) -> None:
    raw = json.loads(
        (MODELS_DIR / "nvidia--Llama-3_3-Nemotron-Super-49B-v1.json").read_text("utf-8")
    )
    raw["block_configs"][3]["attention"]["window_length"] = 4096
    with pytest.raises(Exception, match=r"block_configs\[3\]\.attention\.window_length"):
        resolve_model(_write(tmp_path, raw))


KIMI_K3_KDA = 3 * 96 * 128  # conv channels: q, k and v of 96 heads x 128


def test_kimi_k3_mla_and_kda_hf() -> None:
    """kimi_linear decoder: MLA (512 + 64) on the 24 full_attn_layers, KDA on the 69 kda_layers
    (1-indexed in linear_attn_config): transformers keeps a conv of the kernel (4) in bf16 and a
    (96, 128, 128) float32 recurrent state (modeling_kimi_linear.py); measured on the meta device
    with the checkpoint's decoder: 457,224,192 B (test_calc_hf_peer.py re-measures it)."""
    mla = 24 * 576 * 2 * T
    kda = 69 * (KIMI_K3_KDA * 4 * 2 + 96 * 128 * 128 * 4)
    assert _hf("moonshotai/Kimi-K3") == mla + kda == 457_224_192


def test_kimi_k3_vllm_kda_state_and_mla_hybrid_block() -> None:
    """vLLM 0.32: KDA conv (kernel - 1, 36,864) in bf16 and the recurrent state in float32
    (mamba_utils.py kda_state_shape / kda_state_dtype); the attention block is raised to hold a
    state page, in multiples of 128 for an MLA hybrid (platforms/interface.py
    _align_hybrid_block_size): 128 x ceil(6,512,640 / (128 x 1,152)) = 5,760 tokens."""
    state = 3 * KIMI_K3_KDA * 2 + 96 * 128 * 128 * 4
    assert state == 6_512_640
    block = 128 * -(-state // (128 * 576 * 2))
    assert block == 5_760
    got = vllm_layout(_spec("moonshotai/Kimi-K3"), tokens=T, seqs=1, kv_dtype="auto")
    assert got.block_size == block
    # mamba pages are padded to the attention page; one MLA block holds the 100 tokens
    assert got.total_bytes == 69 * block * 1_152 + 24 * block * 1_152
    # --mamba-ssm-cache-dtype bfloat16 halves the recurrent state and lowers the raise
    halved = vllm_layer_specs(_spec("moonshotai/Kimi-K3"), mamba_ssm_state_bytes=2)
    small = 3 * KIMI_K3_KDA * 2 + 96 * 128 * 128 * 2
    assert {s.block_size for s in halved.distinct()} == {128 * -(-small // (128 * 1_152))}


def test_mimo_v2_flash_full_and_sliding_layers() -> None:
    """MiMo-V2-Flash (published config): transformers builds full attention on layer 0 and every
    6th (0, 5, 11, ..., 47: 9 layers) with 4 KV heads, sliding layers (39) with 2 x 4 = 8 KV heads
    (modeling_mimo_v2_flash.py line 341), K 192 + V 128; at 100 tokens every sliding layer still
    keeps all 100 (window sliding_window_size + 1 = 129)."""
    full = 9 * 4 * (192 + 128) * 2 * T  # 2,304,000
    sliding = 39 * 8 * (192 + 128) * 2 * T  # 19,968,000
    assert _hf("XiaomiMiMo/MiMo-V2-Flash") == full + sliding == 22_272_000
    spec = _spec("XiaomiMiMo/MiMo-V2-Flash")
    assert {getattr(x, "sliding_window", None) for x in spec.layer_seq.distinct()} == {None, 129}


def test_mimo_v2_flash_vllm_window_is_sliding_window_size() -> None:
    """vLLM 0.32 mimo_v2.py lines 298 and 388: the window is sliding_window_size (128)."""
    specs = vllm_layer_specs(_spec("XiaomiMiMo/MiMo-V2-Flash"), block_size=16)
    windows = {s.sliding_window for s, _ in specs.runs()}
    assert windows == {None, 128}


def test_mimo_v2_flash_refuses_swa_heads_transformers_does_not_build(tmp_path: Path) -> None:
    raw = json.loads((MODELS_DIR / "XiaomiMiMo--MiMo-V2-Flash.json").read_text("utf-8"))
    raw["swa_num_key_value_heads"] = 16
    with pytest.raises(SpecError, match="swa_num_key_value_heads: 16 but transformers"):
        resolve_model(_write(tmp_path, raw))


def test_hy_v4_latent_plus_indexer_keys_on_full_indexer_layers(tmp_path: Path) -> None:
    """Hunyuan v4 without indexer_types: HYV4Config makes layers 0 and 1, 5, 9, ... "full"
    (configuration_hy_v4.py lines 151-155): of 6 layers, 0, 1 and 5. Each layer caches the MLA
    latent (512 + 64) and the full-indexer layers the indexer key (128) too; vLLM 0.32's HYV4
    indexer is a DeepseekV32IndexerCache of 128 + 4 bytes per token (models/hy_v4/nvidia/
    attention.py lines 179-189), one UniformType group, block 64."""
    spec = _spec(_write(tmp_path, HY_V4))
    assert [getattr(x, "index_head_dim", None) for x in spec.layers] == [128, 128, 0, 0, 0, 128]
    expected = 6 * (512 + 64) * 2 * T + 3 * 128 * 2 * T
    assert hf_layout(spec, tokens=T, seqs=1, kv_dtype="bfloat16").total_bytes == expected == 768_000
    pages = {s.page_size_bytes for s, _ in vllm_layer_specs(spec).runs()}
    assert pages == {64 * 1152 + 64 * 132, 64 * 1152}


def test_zamba2_hybrid_layers_cache_attention_and_mamba2(tmp_path: Path) -> None:
    """Zamba2 (transformers' default layout, 54 layers, 9 'hybrid' at 6, 12, ..., 42, 47, 51):
    hybrid layers cache K/V of num_key_value_heads x attention_head_dim (2 x 256 / 4 = 128) and a
    Mamba-2 state, the other 45 a Mamba-2 state only. transformers (hf): conv window 4 x (2 x 256
    + 2 x 1 x 64 = 640) x 2 B = 5,120; recurrent 8 heads x 64 x 64 x 4 B (float32) = 131,072.
    vLLM 0.32 (zamba2.py lines 164-201): every query head is a KV head in the hybrid attention."""
    raw = {
        "model_type": "zamba2",
        "architectures": ["Zamba2ForCausalLM"],
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "n_mamba_heads": 8,
        "mamba_d_state": 64,
        "vocab_size": 1024,
        "torch_dtype": "bfloat16",
    }
    spec = _spec(_write(tmp_path, raw))
    assert spec.num_layers == 54
    kinds = [x.kind for x in spec.layers]
    assert [i for i, k in enumerate(kinds) if k == "hybrid"] == [6, 12, 18, 24, 30, 36, 42, 47, 51]
    kv = 9 * 2 * (128 + 128) * 2 * T  # 921,600
    states = 54 * (4 * 640 * 2 + 8 * 64 * 64 * 4)  # 54 x 136,192
    assert hf_layout(spec, tokens=T, seqs=1, kv_dtype="bfloat16").total_bytes == kv + states
    attn = [s for s, _ in vllm_layer_specs(spec, block_size=16).runs() if s.kind == "full"]
    # per token: 4 heads (not 2) x (128 + 128) x 2 B = 2,048 B, whatever the raised block
    assert {s.page_size_bytes // s.block_size for s in attn} == {4 * (128 + 128) * 2}
