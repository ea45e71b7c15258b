"""MoE layers are counted per run of layers, by one period of the config's pattern."""

from __future__ import annotations

from typing import Any

from kvbudget.capacity.weights import count_moe_layers
from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec


def moe_spec(n: int, raw: dict[str, Any]) -> ModelSpec:
    layers = LayerSeq.periodic([FullAttention(0, 8, 128)], n)
    return ModelSpec("m", "A", "t", layers, num_experts=8, raw_config=raw)


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
