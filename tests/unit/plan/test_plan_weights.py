"""Weight bytes: quantization formats worked by hand, snapshot totals, per-rank splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.capacity.weights import Matrix, _matrix_bytes, compute_weights, estimate_weights
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec

M = Matrix("w", 4096, 4096)


def spec(**kw: object) -> ModelSpec:
    fields: dict[str, object] = dict(
        model_id="t",
        architecture="LlamaForCausalLM",
        model_type="llama",
        layers=tuple(FullAttention(i, 8, 128) for i in range(4)),
        hidden_size=1024,
        num_attention_heads=8,
        vocab_size=1000,
        intermediate_size=4096,
        max_position_embeddings=4096,
        torch_dtype="bfloat16",
    )
    fields.update(kw)
    return ModelSpec(**fields)  # type: ignore[arg-type]


def test_bf16_matrix() -> None:
    assert _matrix_bytes(M, (4096, 4096), None, 2) == 4096 * 4096 * 2


def test_fp8_block_scales() -> None:
    # 1 B per weight + one fp32 scale per 128x128 block: 32 x 32 blocks
    q = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    assert _matrix_bytes(M, (4096, 4096), q, 2) == 16_777_216 + 32 * 32 * 4


def test_awq_4bit_group_128() -> None:
    # packed 4-bit weights 4096*4096/2 + per group (32 groups x 4096 out) an fp16 scale and a 4-bit zero
    q = {"quant_method": "awq", "bits": 4, "group_size": 128}
    assert _matrix_bytes(M, (4096, 4096), q, 2) == 8_388_608 + 32 * 4096 * 2 + 32 * 4096 // 2


def test_gptq_desc_act_adds_g_idx() -> None:
    q = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True}
    assert (
        _matrix_bytes(M, (4096, 4096), q, 2)
        == 8_388_608 + 32 * 4096 * 2 + 32 * 4096 // 2 + 4096 * 4
    )


def test_mxfp4_only_experts() -> None:
    q = {"quant_method": "mxfp4"}
    expert = Matrix("e", 4096, 4096, expert=True)
    assert _matrix_bytes(expert, (4096, 4096), q, 2) == 4096 * 4096 // 2 + 4096 * 4096 // 32
    assert _matrix_bytes(M, (4096, 4096), q, 2) == 4096 * 4096 * 2


def test_unknown_quant_method_is_one_line_error() -> None:
    with pytest.raises(ConfigError, match="quant_method"):
        _matrix_bytes(M, (4096, 4096), {"quant_method": "bitsandbytes"}, 2)


def test_dense_count_by_hand() -> None:
    # per layer: q 1024x1024, k/v 1024x(8x128=1024) each, o 1024x1024 -> 4 x 1024^2
    # mlp: gate_up 1024 x 8192 + down 4096 x 1024 = 3 x 1024 x 4096; norms 2 x 1024
    per_layer = 4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024
    total = 4 * per_layer + 2 * 1000 * 1024 + 1024  # untied embed + lm_head, final norm
    w = compute_weights(spec())
    assert w.num_params == total
    assert w.total_bytes == 2 * total
    assert w.source == "computed"


def test_tp_and_pp_split() -> None:
    s = spec()
    tp2 = compute_weights(s, tp=2)
    # projections and MLP halve; norms replicated; embeddings vocab-split (cdiv(1000, 2) rows)
    per_layer_rank = (4 * 1024 * 1024 + 3 * 1024 * 4096) // 2 + 2 * 1024
    assert tp2.per_rank_bytes == (2 * (4 * per_layer_rank + 2 * 500 * 1024 + 1024),)
    pp2 = compute_weights(s, pp=2)
    layer = 4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024
    assert pp2.per_rank_bytes == (
        2 * (2 * layer + 1000 * 1024),
        2 * (2 * layer + 1000 * 1024 + 1024),
    )


def test_tied_embeddings_once_but_last_stage_keeps_lm_head() -> None:
    tied = spec(tie_word_embeddings=True)
    one = compute_weights(tied)
    untied = compute_weights(spec())
    assert untied.total_bytes - one.total_bytes == 2 * 1000 * 1024
    # one GPU: 4 layers + one shared 1000 x 1024 embedding + final norm
    layer = 4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024
    assert one.per_rank_bytes == (2 * (4 * layer + 1000 * 1024 + 1024),)
    # PP 2: stage 0 holds the embedding, the last stage its own lm_head copy + the final norm,
    # so per stage the bytes equal the untied split
    pp2 = compute_weights(tied, pp=2)
    assert any("lm_head" in n for n in pp2.notes)
    assert pp2.per_rank_bytes == (
        2 * (2 * layer + 1000 * 1024),
        2 * (2 * layer + 1000 * 1024 + 1024),
    )


def test_snapshot_total_is_read_and_split(tmp_path: Path) -> None:
    index = {"metadata": {"total_size": 123_456_789}, "weight_map": {}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index), "utf-8")
    w = estimate_weights(spec(), pp=2, snapshot=tmp_path)
    assert w.source == "read"
    assert w.total_bytes == 123_456_789
    assert abs(sum(w.per_rank_bytes) - 123_456_789) <= 2


def test_flag_wins() -> None:
    w = estimate_weights(spec(), tp=4, weights_bytes=5 << 30)
    assert w.source == "flag"
    assert w.per_rank_bytes == (5 << 30,)


def test_compressed_tensors_w8_and_w4() -> None:
    w8 = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g0": {"weights": {"num_bits": 8}}},
    }
    # 1 B per weight + one fp32 scale per output channel
    assert _matrix_bytes(M, (4096, 4096), w8, 2) == 4096 * 4096 + 4 * 4096
    w4 = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g0": {"weights": {"num_bits": 4, "group_size": 128}}},
    }
    # packed 4-bit + fp16 scale per 128 inputs per output
    assert _matrix_bytes(M, (4096, 4096), w4, 2) == 4096 * 4096 // 2 + 32 * 4096 * 2


def test_snapshot_missing_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="snapshot"):
        estimate_weights(spec(), snapshot=tmp_path / "nope")
    w = estimate_weights(spec(), snapshot=tmp_path)  # a folder without safetensors: computed + note
    assert w.source == "computed"
    assert any("no model.safetensors" in n for n in w.notes)


def test_model_folder_is_used_as_snapshot(tmp_path: Path) -> None:
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.capacity.planner import make_plan

    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 2_000_000_000}}), "utf-8"
    )
    r = make_plan(PlanRequest(model=str(tmp_path), gpu="H100", max_model_len=4096), spec())
    assert r.weights.source == "read"
    assert r.weights.total_bytes == 2_000_000_000
