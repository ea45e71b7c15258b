"""The MTP drafter's own weights in a vLLM 0.32 plan (issue #34), worked by hand.

Source (vLLM 0.32.0, ``site-packages/vllm``): DeepSeek-V3's MTP layer (``model_executor/models/
deepseek_mtp.py`` lines 76-111) holds ``enorm``, ``hnorm`` (lines 85-86), ``shared_head.norm``
(line 61), ``eh_proj = nn.Linear(2 x hidden, hidden)`` (line 87: no TP split, no quantization,
model dtype) and a ``DeepseekV2DecoderLayer`` with the target's ``quant_config`` at index
``num_hidden_layers`` (MoE: ``61 >= first_k_dense_replace 3``, ``61 % 1 == 0``, ``deepseek_v2.py``
lines 1293-1297). MiMo's (``mimo_mtp.py`` lines 43-65): ``token_layernorm``,
``hidden_layernorm``, ``final_layernorm``, ``input_proj`` ``nn.Linear(2 x hidden, hidden)`` and a
dense ``Qwen2DecoderLayer``. The proposer then points the drafter's ``embed_tokens`` and its
heads at the target's (``v1/spec_decode/llm_base_proposer.py`` lines 1466-1472, 1498-1501,
1545-1571) inside the "Model loading took" profiler (``v1/worker/gpu_model_runner.py`` lines
5050-5073): they are not counted.

fp8 (DeepSeek-V3's ``weight_block_size`` [128, 128]): 1 B per weight plus one fp32 scale per
128 x 128 block of the rank's shard (``Fp8LinearMethod``'s ``weight_scale_inv``); bf16 for the
router, norms and ``eh_proj``. kvbudget's weight estimator leaves out biases, q/k norms (MLA's
``q_a_layernorm`` / ``kv_a_layernorm``) and the same for the drafter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB

ROOT = Path(__file__).resolve().parents[3]
CATALOG = ROOT / "src" / "kvbudget" / "spec" / "catalog" / "models"
MTP = '{"method": "mtp", "num_speculative_tokens": 1}'
PEER = json.loads(
    (ROOT / "tests" / "peer" / "fixtures" / "vllm_pools_0.32.0.json").read_text("utf-8")
)


def _fp8(n_in: int, n_out: int) -> int:
    """One rank's shard ``n_in x n_out`` in fp8 with 128 x 128 fp32 block scales."""
    return n_in * n_out + 4 * -(-n_out // 128) * -(-n_in // 128)


# DeepSeek-V3 (hidden 7168, 128 heads, q_lora 1536, kv_lora 512, rope 64, nope 128, v 128,
# 256 experts of 2048 + 1 shared, fp8), one GPU of TP 8:
DSV3_ATTENTION_TP8 = (
    _fp8(7168, 1536)  # q_a_proj, replicated: 11,010,048 + 4 x 12 x 56
    + _fp8(1536, 128 * (128 + 64) // 8)  # q_b_proj, column-split: 3,072 outputs
    + _fp8(7168, 512 + 64)  # kv_a_proj_with_mqa, replicated
    + _fp8(512, 128 * (128 + 128) // 8)  # kv_b_proj, column-split: 4,096 outputs
    + _fp8(128 * 128 // 8, 7168)  # o_proj, row-split: 2,048 inputs
)
DSV3_MOE_TP8 = (
    256 * _fp8(7168, 2 * 2048 // 8)  # experts' gate_up, column-split: 512 outputs
    + 256 * _fp8(2048 // 8, 7168)  # experts' down, row-split: 256 inputs
    + 7168 * 256 * 2  # router (gate), bf16, replicated
    + _fp8(7168, 2 * 2048 // 8)  # shared expert gate_up
    + _fp8(2048 // 8, 7168)  # shared expert down
)
DSV3_MTP_TP8 = (
    DSV3_ATTENTION_TP8
    + DSV3_MOE_TP8
    + 2 * 7168 * 2  # the decoder layer's input / post-attention norms
    + 3 * 7168 * 2  # enorm, hnorm, shared_head.norm
    + 2 * 7168 * 7168 * 2  # eh_proj, bf16, whole on every rank
)


def _write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def _plan(path: Path, **extra: Any) -> Any:
    resolved = resolve_model(str(path))
    assert resolved.spec is not None, resolved.reason
    request = PlanRequest(model=str(path), engine="vllm", engine_version="0.32.0", **extra)
    return make_plan(request, resolved.spec)


def _catalog(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CATALOG / f"{name}.json").read_text("utf-8"))
    return data


def test_deepseek_v3_mtp_weights_by_hand(tmp_path: Path) -> None:
    """36,643,680 B of MLA + 1,418,806,592 B of MoE + 28,672 B of norms (the decoder layer) +
    43,008 B (three norms) + 205,520,896 B (eh_proj) = 1,661,042,848 B per GPU at TP 8."""
    assert DSV3_ATTENTION_TP8 == 36_643_680
    assert DSV3_MOE_TP8 == 1_418_806_592
    assert DSV3_MTP_TP8 == 1_661_042_848
    path = _write(tmp_path, _catalog("deepseek-ai--DeepSeek-V3"))
    common: dict[str, Any] = {"gpu": "H200", "tp": 8, "max_model_len": 8192}
    without = _plan(path, **common)
    with_mtp = _plan(path, speculative_config=MTP, **common)
    assert with_mtp.weights_bytes - without.weights_bytes == DSV3_MTP_TP8
    assert with_mtp.weights.total_bytes - without.weights.total_bytes == 8 * DSV3_MTP_TP8
    assert not any("leave the MTP drafter out" in note for note in with_mtp.notes)
    assert "(MTP, 1 layer(s))" in with_mtp.weights.method


def test_glm5_mtp_layer_is_moe_whatever_mlp_layer_types_says(tmp_path: Path) -> None:
    """GLM-5.2's ``mlp_layer_types`` has 78 entries, none for the MTP layer 78; vLLM's
    ``DeepseekV2DecoderLayer`` reads ``first_k_dense_replace`` and ``moe_layer_freq`` only
    (``deepseek_v2.py`` lines 1293-1297): a MoE layer. The plan gains more than the experts'
    gate_up alone (n_routed_experts x hidden x 2 x moe_intermediate / 8 bytes at least)."""
    raw = _catalog("zai-org--GLM-5.2")
    h, experts, inter = raw["hidden_size"], raw["n_routed_experts"], raw["moe_intermediate_size"]
    path = _write(tmp_path, raw)
    common: dict[str, Any] = {"gpu": "H200", "tp": 8, "max_model_len": 8192}
    gained = (
        _plan(path, speculative_config=MTP, **common).weights_bytes
        - _plan(path, **common).weights_bytes
    )
    assert gained > experts * h * 2 * inter // 8


#: the published MiMo-7B-Base config's fields the estimate reads
MIMO_7B: dict[str, Any] = {
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
    "rope_theta": 640000,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "num_nextn_predict_layers": 1,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("tp", "expected"),
    [
        # q 4096x4096 + k, v 4096x1024 + o 4096x4096 = 41,943,040; gate_up 4096x22016 +
        # down 11008x4096 = 135,266,304; 2 norms 8,192: 177,217,536 x 2 B = 354,435,072;
        # input_proj 8192 x 4096 x 2 = 67,108,864; 3 norms x 4096 x 2 = 24,576
        (1, 354_435_072 + 67_108_864 + 24_576),
        # TP 2: q 4096x2048, k, v 4096x512 (4 of 8 KV heads), o 2048x4096: 20,971,520;
        # gate_up 4096x11008 + down 5504x4096 = 67,633,152; + 8,192 norms = 88,612,864 x 2 B;
        # input_proj and the 3 norms whole on each rank
        (2, 177_225_728 + 67_108_864 + 24_576),
    ],
)
def test_mimo_mtp_weights_by_hand(tmp_path: Path, tp: int, expected: int) -> None:
    assert expected in (421_568_512, 244_359_168)
    path = _write(tmp_path, MIMO_7B)
    common: dict[str, Any] = {"gpu": "H200", "tp": tp, "max_model_len": 8192}
    without = _plan(path, **common)
    with_mtp = _plan(path, speculative_config=MTP, **common)
    assert with_mtp.weights_bytes - without.weights_bytes == expected


def test_weights_bytes_flag_already_holds_the_drafter(tmp_path: Path) -> None:
    """``--weights-bytes`` is the engine log's "Model loading took" figure, drafter included."""
    path = _write(tmp_path, MIMO_7B)
    result = _plan(
        path, gpu="H200", max_model_len=8192, weights_bytes=16 * GiB, speculative_config=MTP
    )
    assert result.weights_bytes == 16 * GiB


def test_a_snapshot_total_already_holds_the_mtp_layer(tmp_path: Path) -> None:
    """MiMo-7B's checkpoint ships its ``model.mtp_layers.0.*`` tensors, so the index's
    ``metadata.total_size`` (made up here: 16 GiB) includes the drafter: nothing is added with
    MTP, and a note says so (this index's empty ``weight_map`` names no MTP tensor, so nothing is
    taken off without MTP either: test_plan_mtp_snapshot_vllm.py)."""
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / "config.json").write_text(json.dumps(MIMO_7B), encoding="utf-8")
    index = {"metadata": {"total_size": 16 * GiB}, "weight_map": {}}
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    common: dict[str, Any] = {"gpu": "H200", "max_model_len": 8192}
    without = _plan(snapshot, **common)
    with_mtp = _plan(snapshot, speculative_config=MTP, **common)
    assert with_mtp.weights.source == "read"
    assert with_mtp.weights_bytes == without.weights_bytes
    assert any("holds the checkpoint's MTP layer" in note for note in with_mtp.notes)


def test_tiny_glm45_mtp_weights_by_hand(tmp_path: Path) -> None:
    """The tiny ``glm4_moe`` the CPU engine ran (hidden 256, 4 heads x 64, 2 KV heads, 4 experts
    of 128 + 1 shared, first_k_dense_replace 1: the MTP layer 8 is MoE, ``glm4_moe.py`` lines
    353-356; ``glm4_moe_mtp.py`` lines 80-104), TP 1, bf16:
    attention q 256 x 256 + k, v 256 x 128 + o 256 x 256 = 196,608; experts gate_up
    4 x 256 x 256 + down 4 x 128 x 256 + router 256 x 4 + shared 256 x 256 + 128 x 256 = 492,544;
    2 norms 512; eh_proj 512 x 256 = 131,072; 3 norms 768: 821,504 parameters x 2 B."""
    assert 196_608 + 492_544 + 512 + 131_072 + 768 == 821_504
    path = _write(tmp_path, PEER["cases"]["glm4_moe"]["config"])
    common: dict[str, Any] = {"gpu": "H200", "max_model_len": 4096}
    without = _plan(path, **common)
    with_mtp = _plan(path, speculative_config=MTP, **common)
    assert with_mtp.weights_bytes - without.weights_bytes == 821_504 * 2


# MiMo-V2-Flash's one MTP layer (vLLM 0.32.0 ``model_executor/models/mimo_v2_mtp.py`` lines
# 57-119, one layer: line 177), the published config (hidden 4096, sliding attention of 64 heads,
# 8 KV heads, K 192 / V 128, dense MLP 16384, fp8 blocks [128, 128], add_swa_attention_sink_bias):
# enorm, hnorm, input_layernorm, pre_mlp_layernorm, final_layernorm: 5 x 4096 x 2 B = 40,960;
# eh_proj ``ReplicatedLinear(2 x hidden, hidden)`` with no quant_config (lines 75-77): bf16,
# 8192 x 4096 x 2 = 67,108,864 B whole on each rank; MiMoV2Attention (``mimo_v2.py`` lines
# 218-300): a ``QKVParallelLinear`` in fp8 (one weight of the rank's q + k + v rows, one fp32
# scale per 128 x 128 block of it: ``quantization/utils/fp8_utils.py`` lines 1412-1425), an
# ``o_proj`` with ``quant_config=None`` under ``mtp.layers`` (line 277: bf16, row-split) and the
# sink bias, one bf16 per local head (line 293); ``MiMoV2MLP`` (lines 77-101) fp8.
MIMO_V2_MTP_TP1 = (
    4096 * (64 * 192 + 8 * 192 + 8 * 128)  # qkv_proj: 4096 x 14,848 = 60,817,408
    + 4 * -(-14_848 // 128) * (4096 // 128)  # its scales: 116 x 32 x 4 = 14,848
    + 64 * 128 * 4096 * 2  # o_proj bf16: 67,108,864
    + 64 * 2  # sink bias
    + 4096 * 2 * 16384
    + 4 * (2 * 16384 // 128) * 32  # gate_up: 134,217,728 + 32,768
    + 16384 * 4096
    + 4 * 32 * (16384 // 128)  # down: 67,108,864 + 16,384
    + 2 * 4096 * 4096 * 2  # eh_proj
    + 5 * 4096 * 2  # norms
)
# TP 4: q 16 heads x 192 + k 2 x 192 + v 2 x 128 = 3,712 rows (29 scale rows); o_proj 2048
# inputs; gate_up 8192 outputs; down 4096 inputs; 16 sink values; eh_proj and norms whole.
# (TP 8 is not checked: a rank's one K head of 192 rows is no multiple of block_n 128, which
# vLLM refuses, ``fp8_utils.py`` lines 1329-1341.)
MIMO_V2_MTP_TP4 = (
    4096 * 3712
    + 4 * 29 * 32
    + 2048 * 4096 * 2
    + 16 * 2
    + 4096 * 8192
    + 4 * (8192 // 128) * 32
    + 4096 * 4096
    + 4 * 32 * (4096 // 128)
    + 2 * 4096 * 4096 * 2
    + 5 * 4096 * 2
)


@pytest.mark.parametrize(("tp", "expected"), [(1, MIMO_V2_MTP_TP1), (4, MIMO_V2_MTP_TP4)])
def test_mimo_v2_flash_mtp_weights_by_hand(tmp_path: Path, tp: int, expected: int) -> None:
    """60,832,256 (qkv) + 67,108,864 (o) + 128 (sinks) + 134,250,496 (gate_up) + 67,125,248
    (down) + 67,108,864 (eh_proj) + 40,960 (norms) = 396,466,816 B at TP 1; 149,479,072 B at
    TP 4. The embedding and lm_head are the target's (``llm_base_proposer.py`` lines 1466-1472,
    1545-1556)."""
    assert (MIMO_V2_MTP_TP1, MIMO_V2_MTP_TP4) == (396_466_816, 149_479_072)
    path = _write(tmp_path, _catalog("XiaomiMiMo--MiMo-V2-Flash"))
    common: dict[str, Any] = {"gpu": "H200", "tp": tp, "max_model_len": 8192}
    without = _plan(path, **common)
    with_mtp = _plan(path, speculative_config=MTP, **common)
    assert with_mtp.weights_bytes - without.weights_bytes == expected
    assert not any("leave the MTP drafter out" in note for note in with_mtp.notes)


def test_tiny_mimo_v2_flash_mtp_weights_as_vllm_cpu_built_them(tmp_path: Path) -> None:
    """vLLM 0.32.0's CPU engine (2026-12-03, ``load_format="dummy"``, bf16,
    ``speculative_config={"method": "mtp", "num_speculative_tokens": 1}``) started the tiny
    MiMo-V2-Flash of ``test_plan_mtp_vllm.TINY_MIMO_V2`` with ``add_swa_attention_sink_bias``
    true; ``LLM.collective_rpc`` listed the drafter's (``MiMoV2MTP``) modules: ``qkv_proj``
    256 -> 768, ``o_proj`` 256 -> 256, ``gate_up_proj`` 256 -> 1024, ``down_proj`` 512 -> 256 (all
    ``UnquantizedLinearMethod``, bf16), ``eh_proj`` 512 -> 256, five norms of 256, an
    ``attention_sink_bias`` of 4, and ``model.embed_tokens`` / ``lm_head`` pointing at the
    target's tensors ("Detected MTP model. Sharing target model embedding weights", "... lm_head
    weights"): (196,608 + 65,536 + 262,144 + 131,072 + 131,072 + 1,280 + 4) x 2 B."""
    from tests.unit.plan.test_plan_mtp_vllm import TINY_MIMO_V2

    expected = (256 * 768 + 256 * 256 + 256 * 1024 + 512 * 256 + 512 * 256 + 5 * 256 + 4) * 2
    assert expected == 1_575_432
    path = _write(tmp_path, {**TINY_MIMO_V2, "add_swa_attention_sink_bias": True})
    common: dict[str, Any] = {"gpu": "H200", "max_model_len": 4096}
    without = _plan(path, **common)
    with_mtp = _plan(path, speculative_config=MTP, **common)
    assert with_mtp.weights_bytes - without.weights_bytes == expected


# MiniMax-M3's MTP modules (vLLM 0.32.0 ``models/minimax_m3/nvidia/mtp.py`` lines 42-67: enorm,
# hnorm, final_layernorm, ``eh_proj`` ReplicatedLinear(2 x hidden, hidden) with the checkpoint's
# quant_config (bf16 here), a ``MiniMaxM3DecoderLayer`` forced sparse and MoE, lines 58-64), the
# published config (hidden 6144, 64 heads x 128, 4 KV heads, index dim 128, 128 experts of 3072,
# one shared expert of 3072, use_routing_bias, 7 modules), one GPU of TP 8:
MINIMAX_M3_MTP_MODULE_TP8 = (
    # MinimaxM3QKVParallelLinearWithIndexer (model_executor/layers/linear.py lines 1352-1420):
    # q 8 heads x 128 + k, v 1 head x 128 each (4 KV heads < TP 8: replicated) + index_q 1 x 128
    # + index_k 128 (one head on every rank) = 1,536 outputs
    6144 * 1536 * 2
    + 64 * 128 // 8 * 6144 * 2  # o_proj, row-split: 1,024 inputs
    + 4 * 128 * 2  # q_norm, k_norm, index_q_norm, index_k_norm (model.py lines 469-487)
    + 2 * 6144 * 2  # input / post-attention norms (lines 757-762)
    + 6144 * 128 * 4  # router GateLinear, fp32 (lines 230-238)
    + 128 * 4  # e_score_correction_bias, fp32 (lines 219-223)
    + 128 * (6144 * 2 * 3072 // 8 + 3072 // 8 * 6144) * 2  # experts' w13 + w2, TP-split
    + (6144 * 2 * 3072 // 8 + 3072 // 8 * 6144) * 2  # shared MiniMaxM3MLP of 3072 x 1
    + 2 * 6144 * 6144 * 2  # eh_proj, whole on every rank
    + 3 * 6144 * 2  # enorm, hnorm, final_layernorm
)


def test_minimax_m3_mtp_weights_by_hand(tmp_path: Path) -> None:
    """18,874,368 (qkv) + 12,582,912 (o) + 1,024 + 24,576 (norms) + 3,145,728 (router) + 512
    (bias) + 1,811,939,328 (experts) + 14,155,776 (shared) + 150,994,944 (eh_proj) + 36,864
    = 2,011,756,032 B per module; x 7 modules = 14,082,292,224 B per GPU at TP 8."""
    assert MINIMAX_M3_MTP_MODULE_TP8 == 2_011_756_032
    path = _write(tmp_path, _catalog("MiniMaxAI--MiniMax-M3"))
    common: dict[str, Any] = {"gpu": "H200", "tp": 8, "max_model_len": 8192}
    without = _plan(path, **common)
    with_mtp = _plan(path, speculative_config=MTP, **common)
    assert with_mtp.weights_bytes - without.weights_bytes == 7 * MINIMAX_M3_MTP_MODULE_TP8
    assert 7 * MINIMAX_M3_MTP_MODULE_TP8 == 14_082_292_224


# DeepSeek-V4's MTP layer as vLLM 0.32.0 builds it (``site-packages/vllm``; "mtp.py" is
# ``models/deepseek_v4/nvidia/mtp.py``, "model.py" ``models/deepseek_v4/nvidia/model.py``,
# "attention.py" ``models/deepseek_v4/attention.py``). The published checkpoints' quantization
# is fp8 blocks of 128 x 128 with ``expert_dtype`` fp4, which vLLM reads as DeepseekV4FP8Config
# (``quant_config.py`` lines 149-157): every linear below is an fp8 e4m3 weight (1 B) plus one
# scale per 128 x 128 block of the rank's shard (``quantization/fp8.py`` lines 312-339,
# ``quantization/utils/fp8_utils.py`` lines 1412-1425) in float8_e8m0fnu, 1 B, because fp4-expert
# checkpoints keep ue8m0 scales (``quant_config.py`` lines 80-84, ``fp8.py`` line 336); the
# routed experts are Mxfp4MoEMethod (``quant_config.py`` lines 186-196): per expert a uint8
# ``w13_weight`` (2 x I, H / 2), ``w13_weight_scale`` (2 x I, H / 32), ``w2_weight`` (H, I / 2),
# ``w2_weight_scale`` (H, I / 32), I the rank's intermediate rows (``quantization/mxfp4.py``
# lines 659-731; no backend rounds I = 2048 / TP or 3072 / TP, multiples of 128, nor H, a
# multiple of 256: ``fused_moe/oracle/mxfp4.py`` lines 816-896). Norms are bf16; the mHC
# parameters fp32.


def _fp8_e8m0(n_in: int, n_out: int) -> int:
    """One rank's fp8 shard ``n_in x n_out`` with one 1-byte ue8m0 scale per 128 x 128 block."""
    return n_in * n_out + -(-n_out // 128) * -(-n_in // 128)


def _fp8_experts(experts: int, hidden: int, rows: int) -> int:
    """``experts`` Fp8MoEMethod experts (``expert_dtype`` fp8) of ``rows`` rows on one rank:
    e4m3 ``w13_weight (2 x I, H)``, ``w2_weight (H, I)`` (``quantization/fp8.py`` lines 538,
    564-587) and float32 ``w13_weight_scale_inv (2 x I / 128, H / 128)``, ``w2_weight_scale_inv
    (H / 128, I / 128)`` (lines 616-628); ``rows`` and ``hidden`` multiples of 128 here."""
    w13 = 2 * rows * hidden + 4 * (2 * rows // 128) * (hidden // 128)
    w2 = hidden * rows + 4 * (hidden // 128) * (rows // 128)
    return experts * (w13 + w2)


def _mxfp4_experts(experts: int, hidden: int, rows: int) -> int:
    """``experts`` MXFP4 experts of ``rows`` intermediate rows on one rank."""
    w13 = 2 * rows * (hidden // 2) + 2 * rows * (hidden // 32)
    w2 = hidden * (rows // 2) + hidden * (rows // 32)
    return experts * (w13 + w2)


def _dsv4_mtp_layer(
    *,
    h: int,
    heads: int,
    q_lora: int,
    groups: int,
    experts: int,
    inter: int,
    tp: int,
    padded_heads: int,
    expert_dtype: str = "fp4",
) -> int:
    """One MTP layer (head_dim 512, o_lora_rank 1024, hc_mult 4, one shared expert). With
    ``expert_dtype`` fp8 (DeepSeek-V4-Flash-Base) every fp8 linear's block scale is a 4-byte
    float32, not a 1-byte e8m0 (``quant_config.py`` lines 80-84: 3 B more per block), and the
    routed experts are Fp8MoEMethod (``quant_config.py`` lines 197-199)."""
    hc_dim, mix = 4 * h, (2 + 4) * 4  # hc_mult x hidden; (2 + hc_mult) x hc_mult (model.py 1097)
    if expert_dtype == "fp8":
        return (
            _dsv4_mtp_layer(
                h=h,
                heads=heads,
                q_lora=q_lora,
                groups=groups,
                experts=experts,
                inter=inter,
                tp=tp,
                padded_heads=padded_heads,
            )
            - _mxfp4_experts(experts, h, inter // tp)
            + _fp8_experts(experts, h, inter // tp)
            + 3
            * _dsv4_mtp_blocks(h=h, heads=heads, q_lora=q_lora, groups=groups, inter=inter, tp=tp)
        )
    return (
        3 * h * 2  # enorm, hnorm (mtp.py 102-103), shared_head.norm (deepseek_mtp.py 61), bf16
        + 2 * _fp8_e8m0(h, h)  # e_proj, h_proj: ReplicatedLinear, quant_config (mtp.py 107-122)
        + (4 * hc_dim + 4 + 1) * 4  # hc_head_fn / _base / _scale, fp32 (mtp.py 127-138)
        + 2 * h * 2  # mtp_block's attn_norm, ffn_norm (model.py 1091-1092)
        + 2 * (mix * hc_dim + mix + 3) * 4  # hc_{attn,ffn}_{fn,base,scale}, fp32 (1099-1141)
        # attention at compress ratio 1 (layer index >= num_hidden_layers, attention.py
        # 232-235): no compressor (365) and no indexer (298)
        + padded_heads * 4  # attn_sink, fp32, padded (attention.py 240-246; flashmla.py 78-85)
        + _fp8_e8m0(h, q_lora + 512)  # fused_wqa_wkv, disable_tp (attention.py 248-255)
        + (q_lora + 512) * 2  # q_norm, kv_norm (attention.py 256, 266)
        + _fp8_e8m0(q_lora, heads * 512 // tp)  # wq_b, column-split (257-264)
        + _fp8_e8m0(heads * 512 // groups, groups * 1024 // tp)  # wo_a, column-split (267-274)
        + _fp8_e8m0(groups * 1024 // tp, h)  # wo_b, row-split (277-284)
        # DeepseekV4MoE at layer num_hidden_layers >= num_hash_layers (model.py 740): no tid2eid
        + h * experts * 2  # gate: GateLinear without params_dtype: bf16 (724-730; linear.py 281)
        + experts * 4  # e_score_correction_bias, fp32, topk_method noaux_tc (757-765)
        + _fp8_e8m0(h, 2 * inter // tp)  # shared expert gate_up (776-790; DeepseekV4MLP 152-167)
        + _fp8_e8m0(inter // tp, h)  # shared expert down_proj, row-split (168-176)
        + _mxfp4_experts(experts, h, inter // tp)  # routed experts (849-896)
    )


def _dsv4_mtp_blocks(*, h: int, heads: int, q_lora: int, groups: int, inter: int, tp: int) -> int:
    """The 128 x 128 blocks of the MTP layer's fp8 linears on one rank (as listed above)."""
    shards = [
        (h, h),  # e_proj
        (h, h),  # h_proj
        (h, q_lora + 512),  # fused_wqa_wkv
        (q_lora, heads * 512 // tp),  # wq_b
        (heads * 512 // groups, groups * 1024 // tp),  # wo_a
        (groups * 1024 // tp, h),  # wo_b
        (h, 2 * inter // tp),  # shared gate_up
        (inter // tp, h),  # shared down
    ]
    return sum(-(-n_in // 128) * -(-n_out // 128) for n_in, n_out in shards)


# Flash: hidden 4096, 64 heads, q_lora 1024, 8 output groups, 256 experts of 2048; on a FlashMLA
# GPU (H200) the sink pads to 64 heads at TP 1 (64 local) and TP 8 (8 local)
FLASH = {"h": 4096, "heads": 64, "q_lora": 1024, "groups": 8, "experts": 256, "inter": 2048}
# Pro: hidden 7168, 128 heads, q_lora 1536, 16 output groups, 384 experts of 3072; sinks pad to
# 128 (TP 1) and 64 (16 local heads at TP 8)
PRO = {"h": 7168, "heads": 128, "q_lora": 1536, "groups": 16, "experts": 384, "inter": 3072}
#: Pro's target has no compress-ratio-1 layer (compress_ratios 128, 128, 4, 128, ...), so the MTP
#: layer's rotary embedding is a new ``get_rope`` entry (rotary_embedding/__init__.py lines
#: 74-85; common/rope.py lines 38-45: theta 10000, factor 1, max_position 1,048,576): an fp32
#: cos_sin_cache of 1,048,576 x 64 (deepseek_scaling_rope.py lines 237-256); Flash's layers 0
#: and 1 (ratio 0) already built that very entry
PRO_MTP_ROPE = 1_048_576 * 64 * 4
#: the target's ``_mtp_hidden_buffer`` (model.py lines 1378-1389), allocated with the model when
#: ``use_eagle()`` (method mtp: config/speculative.py line 1948): max_num_batched_tokens (8192
#: here) x hc_mult x hidden, bf16
FLASH_HIDDEN_BUFFER = 8192 * 4 * 4096 * 2
PRO_HIDDEN_BUFFER = 8192 * 4 * 7168 * 2


@pytest.mark.parametrize(
    ("catalog", "tp", "expected", "layer"),
    [
        (
            "deepseek-ai--DeepSeek-V4-Flash",
            1,
            3_862_223_212,
            _dsv4_mtp_layer(**FLASH, tp=1, padded_heads=64) + FLASH_HIDDEN_BUFFER,
        ),
        (
            "deepseek-ai--DeepSeek-V4-Flash",
            8,
            757_382_956,
            _dsv4_mtp_layer(**FLASH, tp=8, padded_heads=64) + FLASH_HIDDEN_BUFFER,
        ),
        (
            "deepseek-ai--DeepSeek-V4-Pro",
            1,
            14_694_785_196,
            _dsv4_mtp_layer(**PRO, tp=1, padded_heads=128) + PRO_MTP_ROPE + PRO_HIDDEN_BUFFER,
        ),
        (
            "deepseek-ai--DeepSeek-V4-Pro",
            8,
            2_595_640_932,
            _dsv4_mtp_layer(**PRO, tp=8, padded_heads=64) + PRO_MTP_ROPE + PRO_HIDDEN_BUFFER,
        ),
    ],
)
def test_deepseek_v4_mtp_weights_by_hand(
    tmp_path: Path, catalog: str, tp: int, expected: int, layer: int
) -> None:
    """Flash at TP 8: 24,576 (three norms) + 33,556,480 (e_proj, h_proj) + 262,164 (hc_head) +
    16,384 + 3,145,944 (the block's norms and mHC) + 256 (sinks) + 6,291,840 (fused_wqa_wkv) +
    3,072 (q/kv norms) + 3 x 4,194,560 (wq_b, wo_a, wo_b) + 2,097,152 (gate) + 1,024 (bias) +
    2,097,280 + 1,048,640 (shared expert) + 427,819,008 (256 experts x 1,671,168) = 488,947,500
    B, plus the target's 268,435,456 B hidden-state buffer. The drafter's embed_tokens and
    shared_head.head (mtp.py 140-142, 249-253) are swapped for the target's and its
    topk_indices_buffer (mtp.py 224-229) for the target's (``v1/spec_decode/llm_base_proposer.py``
    lines 1466-1472, 1545-1571, 1576-1590): not counted."""
    assert layer == expected
    if catalog.endswith("Flash") and tp == 8:
        assert expected - FLASH_HIDDEN_BUFFER == 488_947_500
    path = _write(tmp_path, _catalog(catalog))
    common: dict[str, Any] = {
        "gpu": "H200",
        "tp": tp,
        "max_model_len": 8192,
        "max_num_batched_tokens": 8192,
    }
    without = _plan(path, **common)
    with_mtp = _plan(path, speculative_config=MTP, **common)
    assert with_mtp.weights_bytes - without.weights_bytes == expected
    assert with_mtp.weights.total_bytes - without.weights.total_bytes == tp * expected
    assert not any("leave the MTP drafter out" in note for note in with_mtp.notes)
    assert "(MTP, 1 layer(s))" in with_mtp.weights.method
    assert "hidden-state buffer" in with_mtp.weights.method


def test_deepseek_v4_mtp_sinks_pad_to_flashinfer_heads_on_sm12(tmp_path: Path) -> None:
    """On compute capability 12 vLLM picks DeepseekV4FlashInferSM120Attention (model.py lines
    1042-1044), whose sinks pad to the next of 8, 16, ... 128 heads (flashinfer_sparse.py lines
    78-88): Flash's 8 local heads at TP 8 keep 8 sink slots, not FlashMLA's 64, 56 x 4 B less."""
    path = _write(tmp_path, _catalog("deepseek-ai--DeepSeek-V4-Flash"))
    common: dict[str, Any] = {"tp": 8, "max_model_len": 8192, "max_num_batched_tokens": 8192}
    gains = []
    for gpu in ("H200", "RTX-PRO-6000"):
        without = _plan(path, gpu=gpu, **common)
        with_mtp = _plan(path, gpu=gpu, speculative_config=MTP, **common)
        gains.append(with_mtp.weights_bytes - without.weights_bytes)
    assert gains[0] - gains[1] == (64 - 8) * 4


def test_deepseek_v4_nvfp4_drafter_experts_are_refused_by_name(tmp_path: Path) -> None:
    """nvidia/DeepSeek-V4-Flash-NVFP4 sets ``moe_quant_algo`` NVFP4, so vLLM 0.32 builds every
    routed-expert layer, the drafter's too, as ModelOptNvFp4FusedMoE (``quant_config.py`` lines
    186-195), while its ``ignore`` list (which Fp8Config.from_config does not read: it takes
    ``ignored_layers`` / ``modules_to_not_convert``, ``quantization/fp8.py`` lines 159-175) leaves
    ``mtp.*`` out of NVFP4: what the drafter's experts load as is not pinned down, so the plan is
    refused in one line naming that part, and priced with a figure."""
    path = _write(tmp_path, _catalog("nvidia--DeepSeek-V4-Flash-NVFP4"))
    common: dict[str, Any] = {"gpu": "B200", "tp": 8, "max_model_len": 8192}
    with pytest.raises(ConfigError) as info:
        _plan(path, speculative_config=MTP, **common)
    message = str(info.value)
    assert message.startswith("speculative_config: the MTP drafter's weights of deepseek_v4")
    assert "its routed experts" in message and "ModelOptNvFp4FusedMoE" in message
    assert "\n" not in message
    flagged = _plan(path, speculative_config=MTP, weights_bytes=150 * GiB, **common)
    assert flagged.weights_bytes == 150 * GiB


@pytest.mark.parametrize(
    ("tp", "blocks"), [(1, 2 * 1024 + 384 + 2048 + 2048 + 2048 + 1536), (8, 3392)]
)
def test_deepseek_v4_fp8_expert_drafter_by_hand(tmp_path: Path, tp: int, blocks: int) -> None:
    """Flash with ``expert_dtype`` fp8 (Flash-Base): the drafter built like the target, fp32
    block scales and Fp8MoEMethod experts. At TP 8 the layer's fp8 linears hold 2 x 32 x 32
    (e_proj, h_proj) + 32 x 12 + 8 x 32 + 32 x 8 + 8 x 32 + 32 x 4 + 2 x 32 = 3,392 blocks (3 B
    more each), and one expert 2 x 256 x 4096 + 4 x 4 x 32 + 4096 x 256 + 4 x 32 x 2 = 3,146,496
    B against MXFP4's 1,671,168."""
    assert _dsv4_mtp_blocks(h=4096, heads=64, q_lora=1024, groups=8, inter=2048, tp=tp) == blocks
    if tp == 8:
        assert _fp8_experts(1, 4096, 256) == 3_146_496
    path = _write(tmp_path, {**_catalog("deepseek-ai--DeepSeek-V4-Flash"), "expert_dtype": "fp8"})
    common: dict[str, Any] = {
        "gpu": "H200",
        "tp": tp,
        "max_model_len": 8192,
        "max_num_batched_tokens": 8192,
    }
    without = _plan(path, **common)
    with_mtp = _plan(path, speculative_config=MTP, **common)
    layer = _dsv4_mtp_layer(**FLASH, tp=tp, padded_heads=64, expert_dtype="fp8")
    assert with_mtp.weights_bytes - without.weights_bytes == layer + FLASH_HIDDEN_BUFFER


def test_deepseek_v4_fp8_expert_drafter_ignores_moe_quant_algo(tmp_path: Path) -> None:
    """With ``expert_dtype`` fp8 vLLM never reaches the NVFP4 branch (``quant_config.py`` lines
    186-199), so ``moe_quant_algo`` is no reason to refuse the drafter."""
    raw = _catalog("deepseek-ai--DeepSeek-V4-Flash")
    quant = {**raw["quantization_config"], "moe_quant_algo": "NVFP4"}
    path = _write(tmp_path, {**raw, "expert_dtype": "fp8", "quantization_config": quant})
    plan = _plan(path, gpu="H200", tp=8, max_model_len=8192, speculative_config=MTP)
    assert "(MTP, 1 layer(s))" in plan.weights.method


@pytest.mark.parametrize(
    ("change", "part"),
    [
        # vLLM's own refusal (quant_config.py lines 66-71)
        ({"expert_dtype": "fp16"}, "Unsupported DeepSeek V4 expert_dtype='fp16'"),
        # 1536 / 8 = 192 rows per rank: the MXFP4 backends round that up to 256 or not at all
        # (fused_moe/oracle/mxfp4.py lines 816-896), which one runs is not known here
        ({"moe_intermediate_size": 1536}, "MXFP4 experts' padding"),
    ],
)
def test_deepseek_v4_drafter_parts_not_pinned_down_are_named(
    tmp_path: Path, change: dict[str, Any], part: str
) -> None:
    path = _write(tmp_path, {**_catalog("deepseek-ai--DeepSeek-V4-Flash"), **change})
    with pytest.raises(ConfigError) as info:
        _plan(path, gpu="H200", tp=8, max_model_len=8192, speculative_config=MTP)
    message = str(info.value)
    assert message.startswith("speculative_config: the MTP drafter's weights of deepseek_v4")
    assert part in message and "\n" not in message
