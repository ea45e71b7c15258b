"""ModelOpt checkpoints (vLLM ``modelopt`` / ``modelopt_fp4``) and the B300, worked by hand.

Byte layout from vLLM 0.32.0 ``model_executor/layers/quantization/modelopt.py`` (the NVFP4
static scheme's ``create_weights``): ``weight`` uint8 ``(out, in // 2)`` (two e2m1 values a
byte), ``weight_scale`` float8_e4m3fn ``(out, in // group_size)``, ``weight_scale_2`` one fp32
per partition and one fp32 input (global) scale. The FP8 scheme: 1 B a weight plus a per-tensor
fp32 scale. vLLM names a ModelOpt config by its ``quant_algo``
(``override_quantization_method``): FP4 -> ``modelopt_fp4``, FP8 -> ``modelopt``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvbudget.capacity.model_dtype import vllm_quant_name, with_quantization
from kvbudget.capacity.weights import Matrix, _matrix_bytes, compute_weights
from kvbudget.errors import ConfigError
from kvbudget.sim.aic import GPU_SYSTEMS
from kvbudget.spec.hardware import get_gpu
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import MiB
from tests.unit.plan.test_plan_weights import spec

NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}


def _spec(quant: dict[str, object] | None) -> ModelSpec:
    """test_plan_weights' four-layer Llama (hidden 1024, 8 heads, vocab 1000, MLP 4096)."""
    return spec(quantization_config=quant)


def _nvfp4(n_in: int, n_out: int) -> int:
    return n_in * n_out // 2 + n_out * (n_in // 16) + 4 + 4


def test_vllm_names_a_modelopt_config_by_its_algorithm() -> None:
    assert vllm_quant_name(NVFP4) == "modelopt_fp4"
    assert vllm_quant_name({"quant_method": "modelopt", "quant_algo": "FP8"}) == "modelopt"
    nested = {"quant_method": "modelopt", "quantization": {"quant_algo": "nvfp4"}}
    assert vllm_quant_name(nested) == "modelopt_fp4"
    assert vllm_quant_name({"quant_method": "FP8"}) == "fp8"
    assert vllm_quant_name(None) == "none"


def test_one_nvfp4_matrix() -> None:
    m = Matrix("w", 4096, 4096)
    # 8 MiB of packed e2m1, 4096 x 256 one-byte block scales, two fp32 per-tensor scales
    assert _matrix_bytes(m, (4096, 4096), NVFP4, 2) == 8_388_608 + 1_048_576 + 8
    fp8 = {"quant_method": "modelopt", "quant_algo": "FP8"}
    assert _matrix_bytes(m, (4096, 4096), fp8, 2) == 4096 * 4096 + 4


def test_an_nvfp4_model_by_hand() -> None:
    """Four layers: q, k, v, o 1024 x 1024, gate_up 1024 x 8192, down 4096 x 1024 in NVFP4;
    norms, embeddings and lm_head in bf16 (vocab 1000, untied), final norm."""
    layer = 4 * _nvfp4(1024, 1024) + _nvfp4(1024, 8192) + _nvfp4(4096, 1024) + 2 * 1024 * 2
    assert layer == 4 * 589_832 + 4_718_600 + 2_359_304 + 4096
    w = compute_weights(_spec(NVFP4))
    assert w.total_bytes == 4 * layer + 2 * 1000 * 1024 * 2 + 1024 * 2
    assert w.quantization == "modelopt_fp4" and w.source == "computed"


def _hf_quant(exclude: list[str]) -> dict[str, object]:
    """An ``hf_quant_config.json`` as ModelOpt writes it (vLLM reads ``exclude_modules`` from the
    nested ``quantization``; modelopt.py lines 320-338)."""
    return {
        "quant_method": "modelopt",
        "producer": {"name": "modelopt"},
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": None,
            "group_size": 16,
            "exclude_modules": exclude,
        },
    }


#: one NVFP4 layer of the four-layer Llama (worked in test_an_nvfp4_model_by_hand)
_LAYER = 4 * 589_832 + 4_718_600 + 2_359_304 + 4096
_OUTSIDE = 2 * 1000 * 1024 * 2 + 1024 * 2  # embeddings + lm_head bf16, final norm


def test_excluded_modules_priced_unquantized_per_module() -> None:
    """ModelOpt's ``module_path*`` patterns (the one wildcard form it writes, per vLLM's
    ``apply_vllm_mapper`` comment, modelopt.py line 268) plus one verbatim module: layer 0's
    attention and layer 3's down_proj stay bf16 (2 B a weight), the rest NVFP4."""
    quant = _hf_quant(["lm_head", "model.layers.0.self_attn*", "model.layers.3.mlp.down_proj"])
    layer0 = 4 * 1024 * 1024 * 2 + 4_718_600 + 2_359_304 + 4096  # q, k, v, o at 2 B
    layer3 = 4 * 589_832 + 4_718_600 + 4096 * 1024 * 2 + 4096  # down_proj at 2 B
    w = compute_weights(_spec(quant))
    assert w.total_bytes == layer0 + 2 * _LAYER + layer3 + _OUTSIDE
    assert w.source == "computed"
    assert w.per_rank_bytes == (w.total_bytes,)
    # their parameters, whose GEMMs run in bf16: q, k, v, o 4 x 1024 x 1024, down 4096 x 1024
    assert (w.excluded_params, w.excluded_expert_params) == (4 * 1024 * 1024 + 4096 * 1024, 0)
    # two stages: layers 0-1 then 2-3 (get_pp_indices), embeddings first, lm_head + norm last
    w2 = compute_weights(_spec(quant), pp=2)
    assert w2.per_rank_bytes == (
        layer0 + _LAYER + 1000 * 1024 * 2,
        _LAYER + layer3 + 1000 * 1024 * 2 + 2048,
    )


def test_a_prefix_pattern_also_names_longer_layer_numbers() -> None:
    """vLLM rewrites ``model.layers.1*`` to ``model.layers.1`` and ``model.layers.1.*``; its
    substring rule (modelopt.py lines 206-215) then matches ``model.layers.10...`` and
    ``model.layers.11...`` too: of twelve layers, 1, 10 and 11 stay bf16."""
    bf16_layer = (4 * 1024 * 1024 + 1024 * 8192 + 4096 * 1024) * 2 + 4096
    twelve = _spec(_hf_quant(["lm_head", "model.layers.1*"]))
    twelve = replace(twelve, layers=tuple(FullAttention(i, 8, 128) for i in range(12)))
    w = compute_weights(twelve)
    assert w.total_bytes == 3 * bf16_layer + 9 * _LAYER + _OUTSIDE
    assert w.source == "computed"


def test_fused_shards_listed_verbatim() -> None:
    """Exact rule (quant_utils.py ``is_layer_skipped``): qkv_proj is skipped when q, k and v
    are all listed; one shard alone is refused, as vLLM refuses to load it."""
    names = [f"model.layers.2.self_attn.{x}_proj" for x in "qkv"]
    w = compute_weights(_spec(_hf_quant(names)))
    layer2 = 3 * 1024 * 1024 * 2 + 589_832 + 4_718_600 + 2_359_304 + 4096
    assert w.total_bytes == 3 * _LAYER + layer2 + _OUTSIDE
    with pytest.raises(ConfigError, match="some but not all shards"):
        compute_weights(_spec(_hf_quant(names[:1])))


def test_config_json_form_reads_ignore() -> None:
    """A ``config.json`` ``quantization_config`` without the nesting: vLLM reads ``ignore``."""
    quant = {**NVFP4, "ignore": ["lm_head", "model.layers.3.mlp.down_proj"]}
    layer3 = 4 * 589_832 + 4_718_600 + 4096 * 1024 * 2 + 4096
    assert compute_weights(_spec(quant)).total_bytes == 3 * _LAYER + layer3 + _OUTSIDE


def test_a_pattern_kvbudget_cannot_place_keeps_the_estimate() -> None:
    w = compute_weights(_spec(_hf_quant(["lm_head", "model.visual*"])))
    assert w.source == "estimated"
    assert any("model.visual*" in note for note in w.notes)
    other = replace(_spec(_hf_quant(["model.layers.0.self_attn*"])), model_type="gemma3")
    w = compute_weights(other)
    assert w.source == "estimated"
    assert any("model.layers.0.self_attn*" in n and "gemma3" in n for n in w.notes)


def test_the_flag_sizes_a_modelopt_export_and_refuses_a_contradiction() -> None:
    sized = with_quantization(_spec(None), "modelopt_fp4")
    assert vllm_quant_name(sized.quantization_config) == "modelopt_fp4"
    assert compute_weights(sized).total_bytes == compute_weights(_spec(NVFP4)).total_bytes
    assert with_quantization(_spec(NVFP4), "modelopt_fp4").quantization_config == NVFP4
    with pytest.raises(ConfigError, match="contradicts the config's quantization_config"):
        with_quantization(_spec({"quant_method": "fp8"}), "modelopt_fp4")
    with pytest.raises(ConfigError, match=r"pass --quantization modelopt_fp4"):
        with_quantization(_spec(NVFP4), "fp8")


def test_b300_from_nvidia_figures() -> None:
    """aiconfigurator-core 0.12.0 ``systems/b300_sxm.yaml`` (NVIDIA's Blackwell Ultra
    datasheet): 275040 MiB reported by nvidia-smi, 7.75 TB/s, 2250 / 4500 / 14000 dense
    BF16 / FP8 / FP4 TFLOPS; torch names it "NVIDIA B300 SXM6 AC"."""
    gpu = get_gpu("b300")
    assert gpu.memory_bytes == 275040 * MiB
    assert (gpu.bf16_dense_tflops, gpu.fp8_dense_tflops, gpu.fp4_dense_tflops) == (
        2250.0,
        4500.0,
        14000.0,
    )
    assert gpu.hbm_bandwidth_gb_s == 7750
    assert GPU_SYSTEMS["B300"] == "b300_sxm"


def test_a_deepseek_nvfp4_config_by_hand(tmp_path: Path) -> None:
    """A two-layer DeepSeek-V3 (MLA with q_lora, layer 0 dense, layer 1 four experts + one
    shared) whose exclude_modules leave every attention in bf16 and name an MTP layer
    (``model.layers.2*``: DeepSeek's load_weights skips layers past num_hidden_layers,
    vLLM 0.32.0 deepseek_v2.py line 1653). vLLM's names: fused_qkv_a_proj, q_b_proj, kv_b_proj,
    o_proj under self_attn; DeepSeek has no hf_to_vllm_mapper, so fnmatch does the matching."""
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 100,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "max_position_embeddings": 128,
        "rope_theta": 10000,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "quantization_config": _hf_quant(
            ["lm_head", "model.layers.0.self_attn*", "model.layers.1.self_attn*", "model.layers.2*"]
        ),
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = resolve_model(str(tmp_path)).spec
    assert spec is not None
    # bf16 attention: q_a 64x32, q_b 32x64 (2 heads x 32), kv_a 64x32 (16 + 16), kv_b 16x64,
    # o 32x64 -> 9216 weights, 2 B each, both layers
    attention = 2 * 9216 * 2
    dense = (64 * 256 // 2 + 256 * 4 + 8) + (128 * 64 // 2 + 64 * 8 + 8)  # gate_up, down
    assert dense == 9224 + 4616
    expert = (64 * 64 // 2 + 64 * 4 + 8) + (32 * 64 // 2 + 64 * 2 + 8)  # gate_up, down
    moe = 4 * expert + 64 * 4 * 2 + expert  # four experts, bf16 router, one shared expert
    norms = 2 * 2 * 64 * 2
    outside = 2 * 100 * 64 * 2 + 64 * 2
    w = compute_weights(spec)
    assert w.total_bytes == attention + dense + moe + norms + outside == 94_816
    assert w.expert_bytes == 4 * expert
    assert w.source == "computed"
    assert (w.excluded_params, w.excluded_expert_params) == (2 * 9216, 0)
    # the roofline's bf16 share of the active parameters: the excluded attention
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.capacity.planner import make_plan
    from kvbudget.sim.fromplan import model_cost

    plan = make_plan(PlanRequest(model=str(tmp_path), gpu="B200", max_model_len=128), spec)
    assert model_cost(spec, plan).num_bf16_gemm_params == 2 * 9216
