"""MiMo-V2-Flash under ``plan --engine vllm`` at TP > 1, worked by hand from vLLM 0.32.0's source.

* ``MiMoV2Attention`` (``model_executor/models/mimo_v2.py`` lines 241-271): ``num_kv_heads =
  max(1, total_num_kv_heads // tp)`` with the layer's own heads: ``swa_num_key_value_heads`` 8 on
  the sliding layers, ``num_key_value_heads`` 4 on the full-attention layers (lines 380-418);
  ``QKVParallelLinear`` (``model_executor/layers/linear.py`` lines 1050-1063) gives each rank
  ``num_heads // tp`` Q heads and ``max(1, kv // tp)`` K / V heads (one replicated head when
  ``tp >= kv``); K is 192 wide, V 128 (``head_dim`` / ``v_head_dim``, ``swa_*`` alike).
* fp8 block quantization (``quantization/fp8.py`` lines 312-339, ``quantization/utils/
  fp8_utils.py`` lines 1412-1425): the e4m3 weight plus one fp32 scale per 128 x 128 block.
* The fp8 checkpoint ships ``k_proj`` with ``cdiv(8 x 192, 128) = 12`` scale rows per sliding
  layer; at TP 8 each rank loads ``cdiv(192, 128) = 2`` of them from ``shard x 2``
  (``linear.py`` lines 84-93, 1184-1193; ``model_executor/parameter.py`` lines 175-197): shard 6
  starts at row 12 of 12 and torch refuses (``start (12) + length (2) exceeds dimension size
  (12)``, the words SGLang's copy of this loader printed for MiMo-V2-Flash at TP 8,
  sgl-project/sglang#21102). At TP 4 two heads are 384 rows = 3 whole blocks: shards 0-3 take
  rows 0-11.
* The router (``mimo_v2.py`` lines 158-170): ``GateLinear`` (a ``ReplicatedLinear``,
  ``fused_moe/router/gate_linear.py`` line 21, no ``quant_config``) of ``params_dtype =
  str_dtype_to_torch_dtype(getattr(config, "moe_router_dtype", "float32"))``: the config has no
  ``moe_router_dtype``, so a whole fp32 4096 x 256 matrix on every rank, plus the fp32
  ``e_score_correction_bias`` of 256 (``out_dtype=torch.float32``).
* The sink bias (lines 292-296): ``torch.empty(self.num_heads)``, ``num_heads =
  swa_num_attention_heads // tp`` (line 246), only on the sliding layers
  (``add_swa_attention_sink_bias``; the full layers' call, lines 402-418, passes none), in the
  loader's default dtype = the model dtype bf16 (``model_loader/base_loader.py`` line 73).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.weight_matrices import layer_matrices
from kvbudget.capacity.weights import compute_weights, layer_rank_bytes
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model

MODEL = "XiaomiMiMo/MiMo-V2-Flash"
SLIDING, FULL = 1, 0  # hybrid_layer_pattern: layer 0 full attention, layer 1 sliding


def _spec() -> ModelSpec:
    spec = resolve_model(MODEL).spec
    assert spec is not None
    return spec


@pytest.mark.parametrize(
    ("tp", "swa_heads", "full_heads"),
    [(1, 8, 4), (2, 4, 2), (4, 2, 1), (8, 1, 1)],  # 8 // tp, max(1, 4 // tp)
)
def test_kv_projections_split_per_layer(tp: int, swa_heads: int, full_heads: int) -> None:
    spec = _spec()
    for index, heads in ((SLIDING, swa_heads), (FULL, full_heads)):
        mats, _ = layer_matrices(spec, index)
        shapes = {m.name: m.rank_shape(tp) for m in mats if m.name in ("k_proj", "v_proj")}
        assert shapes == {"k_proj": (4096, heads * 192), "v_proj": (4096, heads * 128)}


def test_sliding_attention_bytes_at_tp4() -> None:
    """Layer 1 at TP 4: q 4096 x 16 x 192 = 3072 rows (24 x 32 blocks), k 2 x 192 = 384 (3 x 32),
    v 2 x 128 = 256 (2 x 32), o_proj row-split 64 x 128 / 4 = 2048 inputs (32 x 16 blocks); fp32
    scales; plus the two bf16 norms (2 x 4096 x 2). Before, K / V were left whole (1536 / 1024
    rows) on every rank: the config has no single num_key_value_heads for the split to read."""
    spec = _spec()
    mats, _ = layer_matrices(spec, SLIDING)
    attention = [m for m in mats if m.name in ("q_proj", "k_proj", "v_proj", "o_proj")]
    want = (
        (4096 * 3072 + 4 * 24 * 32)
        + (4096 * 384 + 4 * 3 * 32)
        + (4096 * 256 + 4 * 2 * 32)
        + (2048 * 4096 + 4 * 16 * 32)
        + 2 * 4096 * 2
    )
    assert want == 23_615_104
    assert layer_rank_bytes(spec, attention, tp=4, moe_ranks=4) == want


def test_kv_pages_split_at_tp4() -> None:
    """Per rank at TP 4: a full layer keeps 1 head x (192 + 128) x 2 B = 640 B per token (block 32:
    20,480), a sliding layer 2 heads: 1,280 B (block 16: 20,480)."""
    request = PlanRequest(
        model=MODEL, engine="vllm", engine_version="0.32.0", gpu="H200", tp=4, max_model_len=65536
    )
    pages = {(g.kind, g.block_size, g.page_size_bytes) for g in make_plan(request).groups}
    assert pages == {("full", 32, 32 * 640), ("sliding", 16, 16 * 1280)}


@pytest.mark.parametrize("tp", [8, 16])
def test_fp8_checkpoint_at_tp8_refused_with_the_loaders_words(tp: int) -> None:
    request = PlanRequest(
        model=MODEL, engine="vllm", engine_version="0.32.0", gpu="H200", tp=tp, max_model_len=65536
    )
    with pytest.raises(LayoutNotApplicable) as info:
        make_plan(request)
    text = str(info.value)
    assert "start (12) + length (2) exceeds dimension size (12)" in text
    assert "\n" not in text


@pytest.mark.parametrize("tp", [1, 4])
def test_router_fp32_and_replicated(tp: int) -> None:
    """4096 x 256 x 4 B = 4,194,304 and 256 x 4 B = 1,024 on every rank at any TP (before: the
    router in bf16, 2,097,152, and no e_score_correction_bias)."""
    spec = _spec()
    mats, _ = layer_matrices(spec, SLIDING)
    router = [m for m in mats if m.name.startswith("router")]
    assert layer_rank_bytes(spec, router, tp=tp, moe_ranks=tp) == 2 * 4096 * 2 + 4_194_304 + 1_024


@pytest.mark.parametrize(("tp", "sink_bytes"), [(1, 64 * 2), (4, 16 * 2)])
def test_sink_bias_on_sliding_layers_only(tp: int, sink_bytes: int) -> None:
    """64 // tp heads x 2 B on a sliding layer (TP 1: 128 B, TP 4: 32 B); none on a full layer."""
    spec = _spec()
    norms = 2 * 4096 * 2
    for index, want in ((SLIDING, sink_bytes), (FULL, 0)):
        mats, _ = layer_matrices(spec, index)
        sinks = [m for m in mats if m.name == "attention_sink_bias"]
        assert layer_rank_bytes(spec, sinks, tp=tp, moe_ranks=tp) == norms + want


def test_sliding_moe_layer_bytes_at_tp4() -> None:
    """Layer 1 (sliding, MoE) on one rank of TP 4, by hand:
    attention and norms 23,615,104 (test_sliding_attention_bytes_at_tp4), sinks 16 x 2 = 32;
    each of the 256 experts: gate_up 4096 x (2 x 2048 / 4 = 1024) e4m3 + 4 B x (8 x 32 blocks)
    = 4,195,328, down (2048 / 4 = 512) x 4096 + 4 x (32 x 4) = 2,097,664: 256 x 6,292,992 =
    1,611,005,952; router 4,194,304 + e_score_correction_bias 1,024."""
    spec = _spec()
    mats, _ = layer_matrices(spec, SLIDING)
    want = 23_615_104 + 32 + 256 * (4_195_328 + 2_097_664) + 4_194_304 + 1_024
    assert want == 1_638_816_416
    assert layer_rank_bytes(spec, mats, tp=4, moe_ranks=4) == want


def test_whole_model_router_dtype_and_sinks_at_tp4() -> None:
    """The whole rank at TP 4 against the same config with ``moe_router_dtype: bfloat16`` and no
    sink bias: moe_layer_freq has 47 MoE layers (all but layer 0), hybrid_layer_pattern 39
    sliding ones (48 less the 9 zeros at 0, 5, 11, 17, 23, 29, 35, 41, 47); the difference is
    47 x 4096 x 256 x (4 - 2) B + 39 x 16 x 2 B = 98,566,144 + 1,248."""
    spec = _spec()
    assert sum(spec.raw_config["moe_layer_freq"]) == 47
    assert spec.raw_config["hybrid_layer_pattern"].count(1) == 39
    raw = {**spec.raw_config, "moe_router_dtype": "bfloat16", "add_swa_attention_sink_bias": False}
    bf16_router = dataclasses.replace(spec, raw_config=raw)
    ours = compute_weights(spec, tp=4).per_rank_bytes[0]
    theirs = compute_weights(bf16_router, tp=4).per_rank_bytes[0]
    assert ours - theirs == 47 * 4096 * 256 * 2 + 39 * 16 * 2 == 98_567_392


#: a tiny MiMo-V2-Flash (the catalog config shrunk, no quantization_config) that vLLM 0.32.0 CPU
#: built with dummy weights (``scripts/vllm_target_bytes.py``, 2026-12-03); ``layer_types`` added
#: here only, for kvbudget's check that transformers' layer kinds agree with hybrid_layer_pattern
TINY = {
    "architectures": ["MiMoV2FlashForCausalLM"],
    "model_type": "mimo_v2_flash",
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "v_head_dim": 32,
    "intermediate_size": 512,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rope_theta": 5000000,
    "swa_rope_theta": 10000,
    "partial_rotary_factor": 0.334,
    "sliding_window": 128,
    "sliding_window_size": 128,
    "attention_chunk_size": 128,
    "swa_num_attention_heads": 8,
    "swa_num_key_value_heads": 4,
    "swa_head_dim": 64,
    "swa_v_head_dim": 32,
    "hybrid_layer_pattern": [0, 1, 1, 0],
    "moe_layer_freq": [0, 1, 1, 1],
    "moe_intermediate_size": 128,
    "n_routed_experts": 8,
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
    "add_swa_attention_sink_bias": True,
    "add_full_attention_sink_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
}

#: what that run reported per layer (KVB_PROBE): ``attention_sink_bias [8] bfloat16 16`` on layers
#: 1 and 2 only; ``mlp.gate`` a GateLinear 256 -> 8 (UnquantizedLinearMethod) whose ``weight``
#: is torch.float32 (the CPU build repacks linear weights to shape [0], so the module's sizes are
#: the record: 256 x 8 x 4 = 8,192 B) and ``e_score_correction_bias [8] float32 32`` on layers 1-3
VLLM_CPU = {
    0: {},
    1: {"attention_sink_bias": 16, "router": 8192, "router.e_score_correction_bias": 32},
    2: {"attention_sink_bias": 16, "router": 8192, "router.e_score_correction_bias": 32},
    3: {"router": 8192, "router.e_score_correction_bias": 32},
}


def test_tiny_router_and_sinks_as_vllm_cpu_built_them(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY), encoding="utf-8")
    spec = resolve_model(str(tmp_path)).spec
    assert spec is not None
    norms = 2 * 256 * 2
    for index, want in VLLM_CPU.items():
        mats, _ = layer_matrices(spec, index)
        got = {
            m.name: layer_rank_bytes(spec, [m], tp=1, moe_ranks=1) - norms
            for m in mats
            if m.name.startswith("router") or m.name == "attention_sink_bias"
        }
        assert got == want, index
