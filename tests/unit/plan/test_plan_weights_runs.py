"""MoE layers are counted per run of layers, in closed form (congruences), whatever the period."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.moe_layers import count_moe_layers
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec
from tests.unit.calc.helpers_calc import traced


def moe_spec(n: int, raw: dict[str, Any], architecture: str = "A") -> ModelSpec:
    layers = LayerSeq.periodic([FullAttention(0, 8, 128)], n)
    return ModelSpec("m", architecture, "t", layers, num_experts=8, raw_config=raw)


def test_first_k_dense_replace() -> None:
    # DeepSeek-V3: 61 layers, the first 3 dense
    assert count_moe_layers(moe_spec(61, {"first_k_dense_replace": 3}), range(61)) == 58
    spec = moe_spec(100_000_000, {"first_k_dense_replace": 3})
    assert count_moe_layers(spec, range(100_000_000)) == 99_999_997


def test_sparse_step_and_mlp_only_layers() -> None:
    # decoder_sparse_step 2: layer i is MoE when (i + 1) % 2 == 0 (odd i); 10,000 layers -> 5,000;
    # mlp_only_layers 1 and 3 are odd (MoE by the pattern, dense by the list), 4 is even already
    raw = {"decoder_sparse_step": 2, "mlp_only_layers": [1, 3, 4]}
    assert count_moe_layers(moe_spec(10_000, raw), range(10_000)) == 4_998
    assert count_moe_layers(moe_spec(10**8, raw), range(0, 10**8, 3)) == (10**8 // 3 + 1) // 2 - 1
    assert count_moe_layers(moe_spec(10**8, raw), range(5, 10**8)) == 5 * 10**7 - 2


def test_dense_model_has_no_moe_layers() -> None:
    spec = ModelSpec("m", "A", "t", LayerSeq.periodic([FullAttention(0, 8, 128)], 10**8))
    assert count_moe_layers(spec, range(10**8)) == 0


def test_combined_step_and_freq_and_period_by_hand() -> None:
    # step 4: i % 4 == 3; first_k_dense_replace 2 and moe_layer_freq 3: i >= 2 and i % 3 == 0
    # (vLLM 0.32.0 deepseek_v2.py); both: i % 12 == 3 -> 3, 15, ..., 99 below 100 (9 layers)
    raw = {"decoder_sparse_step": 4, "first_k_dense_replace": 2, "moe_layer_freq": 3}
    assert count_moe_layers(moe_spec(100, raw), range(100)) == 9
    assert count_moe_layers(moe_spec(100, raw), range(99, -1, -1)) == 9  # a reversed range
    # step 2 (odd i) and Jamba's period 2 offset 1 (odd i): 50 of 100; offset 0 (even i): none
    odd = {"decoder_sparse_step": 2, "expert_layer_period": 2, "expert_layer_offset": 1}
    assert count_moe_layers(moe_spec(100, odd), range(100)) == 50
    assert count_moe_layers(moe_spec(100, {**odd, "expert_layer_offset": 0}), range(100)) == 0
    # an offset the period never reaches (i % 2 is 0 or 1): none
    assert count_moe_layers(moe_spec(100, {**odd, "expert_layer_offset": 2}), range(100)) == 0


def qwen2_moe_config(n: int, step: int) -> dict[str, Any]:
    return {
        "model_type": "qwen2_moe",
        "architectures": ["Qwen2MoeForCausalLM"],
        "num_hidden_layers": n,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": step,
        "mlp_only_layers": [9_999_990, 5],
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 4096,
    }


def test_qwen2_moe_step_9999991_at_100m_layers_is_closed_form(tmp_path: Path) -> None:
    # layer i is MoE when (i + 1) % 9,999,991 == 0: i + 1 = 9,999,991 k for k = 1..10 (11 k is
    # 109,999,901 > 10^8); mlp_only_layers drops i = 9,999,990 (k = 1); 5 is dense already: 9
    n = 100_000_000

    def plan(step: int) -> dict[str, Any]:
        path = tmp_path / f"config-{step}.json"
        path.write_text(json.dumps(qwen2_moe_config(n, step)), encoding="utf-8")
        request = PlanRequest(model=str(path), gpu="H100-SXM", max_model_len=16)
        return make_plan(request).to_dict()

    doc, peak = traced(lambda: plan(9_999_991))
    assert peak < 4 * 1024 * 1024, peak
    # step 2 x 10^8 (above every i + 1): no MoE layer. A MoE layer's MLP: experts gate_up
    # 4 x 64 x 64 + down 4 x 32 x 64 + router 64 x 4 + shared gate_up 64 x 128 + down 64 x 64 =
    # 37,120 params; a dense one 64 x 256 + 128 x 64 = 24,576; bf16: 25,088 B more per MoE layer
    dense = plan(200_000_000)
    assert doc["weights"]["total_bytes"] - dense["weights"]["total_bytes"] == 9 * 25_088


def test_moe_layer_freq_counts_from_zero_but_for_sarvam() -> None:
    # vLLM 0.32.0 deepseek_v2.py: layer_idx >= first_k_dense_replace and layer_idx % freq == 0;
    # first 1 dense, freq 2, 10 layers: 2, 4, 6, 8. sarvam.py: (layer_idx - 1) % 2 == 0: 1, 3, .. 9
    raw = {"first_k_dense_replace": 1, "moe_layer_freq": 2}
    assert count_moe_layers(moe_spec(10, raw), range(10)) == 4
    assert count_moe_layers(moe_spec(10, raw, "SarvamMoEForCausalLM"), range(10)) == 5
    assert count_moe_layers(moe_spec(10**8, raw), range(10**8)) == 5 * 10**7 - 1  # 2, 4, ...


def test_a_per_layer_moe_layer_freq_is_read_entry_by_entry() -> None:
    # MiniMax-M3 (vLLM 0.32.0 models/minimax_m3/nvidia/model.py _is_moe_layer:
    # moe_layer_freq[layer_id] != 0), whatever first_k_dense_replace says; transformers'
    # mlp_layer_types ("sparse" / "dense") likewise
    raw = {"first_k_dense_replace": 3, "moe_layer_freq": [0, 1, 1, 0, 1, 0]}
    assert count_moe_layers(moe_spec(6, raw), range(6)) == 3
    assert count_moe_layers(moe_spec(6, raw), range(0, 6, 2)) == 2  # layers 0, 2, 4: 2 and 4
    types = {"mlp_layer_types": ["dense", "sparse", "sparse", "dense"]}
    assert count_moe_layers(moe_spec(4, types), range(4)) == 2


def test_a_short_per_layer_list_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"moe_layer_freq: 2 entries for at least 3 layers"):
        count_moe_layers(moe_spec(10, {"moe_layer_freq": [0, 1]}), range(10))


def test_minimax_m3_dense_layers_use_dense_intermediate_size() -> None:
    # transformers' MiniMaxM3VLDenseMLP(intermediate_size=config.dense_intermediate_size), vLLM
    # 0.32.0 models/minimax_m3/nvidia/model.py line 750: a dense layer's gate_up is hidden x
    # 2 x 12288, its down 12288 x hidden; a MoE layer's experts use moe_intermediate_size
    from kvbudget.capacity.weights import layer_matrices

    layers = LayerSeq.periodic([FullAttention(0, 8, 128)], 2)
    raw = {"moe_layer_freq": [0, 1], "dense_intermediate_size": 12288}
    spec = ModelSpec(
        "m",
        "MiniMaxM3SparseForCausalLM",
        "minimax_m3",
        layers,
        num_experts=8,
        hidden_size=1024,
        num_attention_heads=8,
        intermediate_size=3072,
        moe_intermediate_size=3072,
        raw_config=raw,
    )
    dense = {m.name: (m.in_features, m.out_features) for m in layer_matrices(spec, 0)[0]}
    assert dense["mlp.gate_up"] == (1024, 2 * 12288) and dense["mlp.down"] == (12288, 1024)
    moe = {m.name: (m.in_features, m.out_features) for m in layer_matrices(spec, 1)[0]}
    assert moe["experts.gate_up"] == (1024, 2 * 3072) and "mlp.gate_up" not in moe
